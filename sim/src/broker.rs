//! The simulated broker: `fleet_core::testing::broker::SimBroker`, the one broker model of the
//! workspace (the core's federation tests and benches drive it too), held to RabbitMQ by the
//! conformance suite. The simulation's broker host carries its events over turmoil TCP
//! (`net`).

pub use fleet_core::testing::broker::*;

//! Test kit, compiled only with the `testing` feature: the one broker model (`broker::SimBroker`,
//! held to RabbitMQ by the conformance suite) and a scripted herdr (`panes::ScriptedPanes`) that
//! the core's federation tests, its benches and the simulation share, so no test keeps a
//! private fake of either.

pub mod broker;
pub mod panes;

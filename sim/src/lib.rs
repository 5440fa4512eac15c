//! # fleet-sim
//!
//! Seeded worlds that drive the real `fleet_core::Gateway` and check fleetd's invariants.
//! Today: one host — simulated herdr panes whose agents reply, complete silently, ask
//! mid-turn, wedge, hit a usage limit or die, and simulated leads that delegate, answer,
//! poll and drain. The multi-host turmoil world with a simulated broker builds on this
//! (see `docs/simulation.md`).
//!
//! One seed is one run is one trace: same seed, same commit, same trace, byte for byte.

pub mod adversary;
pub mod agent;
pub mod broker;
pub mod host;
pub mod internal;
pub mod judge;
pub mod lead;
pub mod multi;
pub mod net;
pub mod oracle;
#[cfg(feature = "planted-bugs")]
pub mod prove;
pub mod run;
pub mod timeline;
pub mod world;

pub use run::{run_seed, RunConfig, RunReport};
pub use world::World;

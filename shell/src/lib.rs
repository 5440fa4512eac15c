//! # fleetd (the shell)
//!
//! The side-effecting half of fleetd: it turns what happens — calls from the north faces,
//! broker events, pane answers, time — into `fleet_core::Input`, and carries out
//! `fleet_core::Output` through ports. The driver loop (`driver`) is the one place that does
//! this; the daemon and the simulation run it with different ports (`ports`). The broker port is `amqp`
//! (lapin), the herdr port `herdr`; the north faces are `rest` (axum) and `mcp` (rmcp), sharing
//! `faces` and `identity`; `daemon` assembles a gateway from its `config`.

#[cfg(feature = "daemon")]
pub mod amqp;
pub mod clock;
#[cfg(feature = "daemon")]
pub mod config;
#[cfg(feature = "daemon")]
pub mod conn_limit;
#[cfg(feature = "daemon")]
pub mod ctl;
#[cfg(feature = "daemon")]
pub mod daemon;
pub mod driver;
#[cfg(feature = "daemon")]
pub mod faces;
pub mod herdr;
#[cfg(feature = "daemon")]
pub mod identity;
#[cfg(feature = "daemon")]
pub mod latency;
#[cfg(feature = "daemon")]
/// `[log]`: the log's level and format.
pub mod logging;
#[cfg(feature = "daemon")]
pub mod mcp;
pub mod member_report;
#[cfg(feature = "daemon")]
pub mod metrics;
#[cfg(feature = "daemon")]
pub mod notify;
#[cfg(feature = "daemon")]
pub mod observe;
pub mod origin;
pub mod ports;
#[cfg(feature = "daemon")]
pub mod relay;
pub mod replay_record;
#[cfg(feature = "daemon")]
pub mod rest;
#[cfg(feature = "daemon")]
pub mod scope;
#[cfg(feature = "daemon")]
pub mod serve;
pub mod task_store;
#[cfg(feature = "daemon")]
pub mod ui;

#[cfg(feature = "daemon")]
pub use amqp::{AmqpBroker, AmqpConfig};
pub use clock::TokioClock;
pub use driver::{Call, Driver, Gone, Handle, Observer, Quiet, ToLoop};
pub use ports::{
    BrokerPort, Clock, HerdrError, HerdrPort, InjectFailure, NoBroker, NoNotices, NoticePort,
    PortFuture, Sample, Samples,
};
pub use replay_record::{InMemory, RecordFile, ReplayRecord};

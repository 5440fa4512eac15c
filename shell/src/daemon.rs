//! `fleetd run`: one gateway assembled from its config — keys, the core, the broker port (or
//! none), herdr, the driver loop, the startup rebuild and event watcher, and the HTTP server
//! with both north faces — and taken down gracefully on SIGTERM.

use crate::amqp::{AmqpBroker, AmqpConfig};
use crate::config::SandboxMode;
use crate::config::{self, Config, LeadRole};
use crate::driver::Driver;
use crate::faces::{App, Health};
use crate::herdr::launch::MemberTokens;
use crate::herdr::{
    self, events, rebuild, Availability, HerdrClient, HerdrConfig, LaunchConfig, SandboxConfig,
    WorktreeConfig,
};
use crate::identity::{Identity, Lead};
use crate::metrics::Metrics;
use crate::observe::{AuditSink, DaemonObserver};
use crate::ports::{BrokerPort, NoBroker};
use crate::{mcp, rest, Clock, RecordFile, TokioClock};
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::IntoResponse;
use fleet_core::signing::Keyring;
use fleet_core::{Federation, Gateway, HostId, Input, Principal, SessionId};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

mod from_config;
mod http;
mod keys;
mod run;

pub use crate::logging::{init_logging, log_subscriber};
pub use crate::origin::{cross_site, host_allowed};
use from_config::{amqp_config, herdr_config, identity, kind_name};
pub use from_config::{gateway, member_gateway_socket, topology};
pub use http::http_router;
use keys::gateway_key;
pub use keys::{member_key, public_key, read_key, write_key};
pub use run::run;

/// Why the daemon could not start (or stopped).
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("{0}")]
    Key(String),
    #[error("state directory {path}: {reason}")]
    State { path: String, reason: String },
    #[error("the gateway refused its core config: {0}")]
    Core(String),
    #[error("broker: {0}")]
    Broker(String),
    #[error("notify: {0}")]
    Notify(String),
    #[error("herdr: {0}")]
    Herdr(String),
    #[error("listening on {addr}: {reason}")]
    Listen { addr: String, reason: String },
    #[error("audit file {path}: {reason}")]
    Audit { path: String, reason: String },
    #[error("fleetd's own environment carries {var}, which only a member may have ({why}); unset it before starting the daemon")]
    Unclean {
        var: &'static str,
        why: &'static str,
    },
}

/// Variables only a member's environment may carry, and why (ch. 9's `assertPrimaryClean`, the
/// subscription guard's other half): the daemon, the leads it serves and every member it
/// launches inherit its environment, so none of these may be in it.
const MEMBER_ONLY: &[(&str, &str)] = &[
    (
        "ANTHROPIC_BASE_URL",
        "it moves a Claude Code off the lead's subscription; members get theirs from their profile",
    ),
    (
        "FLEET_MCP_TOKEN",
        "a member's credential: the daemon is running inside a member",
    ),
    (
        "FLEET_GID",
        "a member's identity: the daemon is running inside a member",
    ),
];

/// Refuses to start when the daemon's environment (`env`) carries what only members may have.
pub fn assert_primary_clean<'a>(
    env: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), DaemonError> {
    for (k, _) in env {
        if let Some((var, why)) = MEMBER_ONLY.iter().find(|(v, _)| *v == k) {
            return Err(DaemonError::Unclean { var, why });
        }
    }
    Ok(())
}

fn make_dir(path: &Path) -> Result<(), DaemonError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| DaemonError::State {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
}

/// A started daemon's address (the real port when `listen` said `:0`).
#[derive(Clone, Debug)]
pub struct Started {
    pub addr: SocketAddr,
}

/// Opens the replay record under `state` and gives the gateway what it holds, before the
/// broker connects: a brief admitted before this process started is a replay now too.
fn replay_record(
    state: &Path,
    clock: &TokioClock,
    gw: &mut Gateway,
) -> Result<RecordFile, DaemonError> {
    let path = state.join("replay.record");
    let opened = RecordFile::open(&path, clock.unix_ms()).map_err(|reason| DaemonError::State {
        path: path.display().to_string(),
        reason,
    })?;
    if opened.skipped > 0 {
        tracing::warn!(path = %path.display(), lines = opened.skipped, "replay record lines that do not parse were skipped");
    }
    tracing::info!(path = %path.display(), entries = opened.entries.len(), "replay record");
    gw.handle(
        clock.now(),
        Input::ReplayRecord {
            entries: opened.entries,
        },
    );
    Ok(opened.record)
}

/// Opens the task lists under `state` and gives the gateway what they hold, before the broker
/// connects: a result that arrives for a task started before this process finds its task.
fn task_lists(
    state: &Path,
    clock: &TokioClock,
    gw: &mut Gateway,
) -> Result<crate::task_store::TaskDir, DaemonError> {
    let path = state.join("tasks");
    let opened = crate::task_store::TaskDir::open(&path).map_err(|reason| DaemonError::State {
        path: path.display().to_string(),
        reason,
    })?;
    for (file, why) in &opened.set_aside {
        tracing::warn!(file = %file.display(), %why, "a task list that does not parse was set aside");
    }
    tracing::info!(path = %path.display(), leads = opened.lists.len(), "task lists");
    // Restored tasks are dated, and their deadlines read, by the wall clock.
    gw.handle(
        clock.now(),
        Input::WallClock {
            unix_ms: clock.unix_ms(),
        },
    );
    gw.handle(
        clock.now(),
        Input::TasksRestored {
            lists: opened.lists,
        },
    );
    Ok(opened.store)
}

fn spawn_loop<B: BrokerPort + 'static>(
    driver: Driver<HerdrClient, B, TokioClock, DaemonObserver>,
    calls: tokio::sync::mpsc::Receiver<crate::driver::ToLoop>,
    stopped: oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_local(async move {
        let gw = driver.run(calls, stopped).await;
        tracing::info!(open = gw.open_delegations(), "driver loop stopped");
    })
}

/// Resolves on SIGTERM or SIGINT.
pub async fn signals() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                biased;
                _ = t.recv() => tracing::info!("SIGTERM"),
                _ = i.recv() => tracing::info!("SIGINT"),
            }
        }
        _ => {
            tracing::error!("cannot install signal handlers; stop with SIGKILL");
            std::future::pending::<()>().await
        }
    }
}

#[cfg(test)]
mod tests;

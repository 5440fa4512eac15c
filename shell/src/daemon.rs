//! `fleetd run`: one gateway assembled from its config — keys, the core, the broker port (or
//! none), herdr, the driver loop, the startup rebuild and event watcher, and the HTTP server
//! with both north faces — and taken down gracefully on SIGTERM.

use crate::amqp::{AmqpBroker, AmqpConfig};
use crate::config::SandboxMode;
use crate::config::{self, Config, LeadRole, LogFormat};
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
mod logging;

pub use crate::origin::{cross_site, host_allowed};
use from_config::{amqp_config, herdr_config, identity, kind_name};
pub use from_config::{gateway, member_gateway_socket, topology};
pub use http::http_router;
use keys::gateway_key;
pub use keys::{member_key, public_key, read_key, write_key};
pub use logging::{init_logging, log_subscriber};

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

/// Runs the daemon until `shutdown` resolves. Must run inside a `tokio::task::LocalSet` on a
/// current-thread runtime (the herdr client is single-threaded by design). `started` hears
/// the bound address once the server accepts connections.
pub async fn run(
    cfg: Config,
    shutdown: impl Future<Output = ()>,
    started: Option<oneshot::Sender<Started>>,
) -> Result<(), DaemonError> {
    let env: Vec<(String, String)> = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect();
    assert_primary_clean(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    let state = cfg.state_dir();
    make_dir(&state)?;
    let secret = gateway_key(&cfg)?;
    let mkey = member_key(&secret);
    let clock = TokioClock::new();
    let mut gw = gateway(&cfg, secret, &clock)?;
    let hc = herdr_config(&cfg, &state, mkey)?;
    let client = HerdrClient::new(hc.clone());
    match client.api().ping().await {
        Ok(p) if herdr::api::Support::of(p.protocol) == Some(herdr::api::Support::Newer) => {
            tracing::warn!(
                socket = %hc.socket.display(),
                version = %p.version,
                protocol = p.protocol,
                tested = ?herdr::api::PROTOCOLS_TESTED,
                "herdr speaks a protocol NEWER than fleetd was tested with: fleetd runs, and a method \
                 herdr no longer knows fails on its own call with a clear error; /healthz says so"
            )
        }
        Ok(p) => {
            tracing::info!(socket = %hc.socket.display(), version = %p.version, "herdr answers")
        }
        Err(e @ herdr::RpcError::Protocol { .. }) => {
            return Err(DaemonError::Herdr(format!(
                "{e} (at {}; fleetd is tested with protocols {:?})",
                hc.socket.display(),
                herdr::api::PROTOCOLS_TESTED
            )))
        }
        Err(e) => {
            tracing::warn!(socket = %hc.socket.display(), error = %e, "herdr does not answer yet; panes are retried as calls need them")
        }
    }
    let metrics = Arc::new(Metrics::default());
    let audit = match &cfg.log.audit_file {
        Some(p) => AuditSink::file(p).map_err(|e| DaemonError::Audit {
            path: p.display().to_string(),
            reason: e.to_string(),
        })?,
        None => AuditSink::Log,
    };
    let observer = DaemonObserver::new(metrics.clone(), audit.clone());
    let (handle, calls) = Driver::<HerdrClient, NoBroker, TokioClock, DaemonObserver>::channel();
    let (stop_loop, loop_stopped) = oneshot::channel();
    let (broker_status, done) = match amqp_config(&cfg)? {
        Some(a) => {
            let record = replay_record(&state, &clock, &mut gw)?;
            let broker = AmqpBroker::start(a).map_err(|e| DaemonError::Broker(e.to_string()))?;
            let status = broker.status();
            let driver =
                Driver::new(gw, client.clone(), broker, clock, observer).with_record(record);
            (Some(status), spawn_loop(driver, calls, loop_stopped))
        }
        None => {
            let driver = Driver::new(gw, client.clone(), NoBroker, clock, observer);
            (None, spawn_loop(driver, calls, loop_stopped))
        }
    };
    for l in &cfg.leads {
        let _ = handle
            .tell(Input::LeadAttached {
                lead: SessionId::new(l.gid()),
            })
            .await;
    }
    // Members herdr lists are handed to the core before the port opens: a member's first call
    // then finds itself known (gated, then adopted by the core's restart rule).
    match rebuild::rebuild(&client, &handle).await {
        Ok(r) => {
            tracing::info!(
                members = r.members.len(),
                swept = r.swept.len(),
                "members listed in herdr: the gateway adopts or closes each"
            );
            // Worktree hygiene: members that died while the daemon was down leave worktrees no
            // pane owns; their work is snapshotted, then they go. Old snapshots expire.
            for (gid, removed) in herdr::worktree::sweep_orphans(&hc.worktrees, &r.members).await {
                let what = match &removed {
                    Ok(herdr::worktree::Removed::Snapshotted { .. }) => "orphan_snapshotted",
                    Ok(herdr::worktree::Removed::Kept(_)) => "orphan_kept",
                    Ok(_) => "orphan_removed",
                    Err(_) => "orphan_failed",
                };
                metrics.inc("fleet_worktree_sweeps_total", &[("result", what)]);
                match removed {
                    Ok(done) => tracing::info!(%gid, ?done, "swept an orphaned worktree"),
                    Err(e) => tracing::warn!(%gid, "sweeping an orphaned worktree: {e}"),
                }
            }
            if cfg.herdr.wip_retention_days > 0 {
                let now = clock.unix_ms() / 1000;
                let keep = cfg.herdr.wip_retention_days * 86_400;
                for gone in herdr::worktree::sweep_wip(&hc.worktrees, now, keep).await {
                    metrics.inc("fleet_worktree_sweeps_total", &[("result", "wip_expired")]);
                    tracing::info!(wip = %gone, "expired a member's snapshot of unfinished work");
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "listing members in herdr at startup"),
    }
    let watcher = {
        let (client, handle) = (client.clone(), handle.clone());
        let relist = Duration::from_millis(cfg.herdr.relist_ms);
        tokio::task::spawn_local(async move {
            let wc = events::WatchConfig {
                relist,
                ..events::WatchConfig::default()
            };
            events::watch(client, handle, wc).await;
        })
    };
    let launcher = {
        let leads: Vec<herdr::lead_launch::LeadToLaunch> = cfg
            .leads
            .iter()
            .filter_map(|l| {
                Some(herdr::lead_launch::LeadToLaunch {
                    name: l.name.clone(),
                    label: l.pane_label.clone()?,
                    launch: l.launch.clone()?,
                })
            })
            .collect();
        let every = Duration::from_millis(cfg.herdr.lead_check_ms);
        tokio::task::spawn_local(herdr::lead_launch::keep_running(
            client.clone(),
            leads,
            cfg.mcp_url(),
            every,
            metrics.clone(),
        ))
    };
    let app = App::new(crate::faces::Inner {
        handle: handle.clone(),
        identity: identity(&cfg, mkey, hc.launch.tokens.clone()),
        metrics: metrics.clone(),
        audit,
        host: cfg.host(),
        profiles: cfg
            .profiles
            .iter()
            .map(|(n, p)| (n.clone(), kind_name(p.kind).to_string()))
            .collect(),
        health: Health {
            broker: broker_status.clone(),
            herdr: Some(hc.socket.clone()),
            member_herdr: hc.member_socket.clone(),
            herdr_timeout: hc.timeout,
            sandbox: hc.sandbox.availability.clone(),
        },
        limits: crate::faces::Limits {
            timeout_max_ms: cfg.core.send_timeout_max_ms,
            max_body_bytes: cfg.core.max_body_bytes,
        },
    });
    let cancel = tokio_util::sync::CancellationToken::new();
    // A sandboxed member's relay reaches the faces over a Unix socket: no browser can, so any
    // `Host` its member sends is fine, and no caller there is ever "on loopback".
    let mut relay_hosts = cfg.gateway.allowed_hosts.clone();
    relay_hosts.extend(["127.0.0.1".to_string(), "localhost".to_string()]);
    let relay_router = http_router(app.clone(), relay_hosts, cancel.clone());
    let router = http_router(app, cfg.gateway.allowed_hosts.clone(), cancel.clone());
    let relay_path = member_gateway_socket(&state);
    let _ = std::fs::remove_file(&relay_path);
    let relay_listener =
        tokio::net::UnixListener::bind(&relay_path).map_err(|e| DaemonError::Listen {
            addr: relay_path.display().to_string(),
            reason: e.to_string(),
        })?;

    let listener = tokio::net::TcpListener::bind(&cfg.gateway.listen)
        .await
        .map_err(|e| DaemonError::Listen {
            addr: cfg.gateway.listen.clone(),
            reason: e.to_string(),
        })?;
    let addr = listener.local_addr().map_err(|e| DaemonError::Listen {
        addr: cfg.gateway.listen.clone(),
        reason: e.to_string(),
    })?;
    tracing::info!(%addr, host = %cfg.gateway.host, mode = if cfg.broker.is_some() { "cross-host" } else { "single-host" }, "fleetd listening (REST, MCP at /mcp)");
    if let Some(tx) = started {
        let _ = tx.send(Started { addr });
    }
    let relay_cancel = cancel.clone();
    let refused = metrics.clone();
    let relay_listener =
        crate::conn_limit::Limited::new(relay_listener, cfg.gateway.max_connections, move || {
            refused.inc("fleet_connections_refused_total", &[])
        });
    let head_bound = Duration::from_millis(cfg.gateway.header_read_timeout_ms);
    let relay_server = tokio::spawn(crate::serve::serve(
        relay_listener,
        relay_router,
        head_bound,
        crate::serve::no_peer,
        relay_cancel,
    ));
    let server_cancel = cancel.clone();
    let refused = metrics.clone();
    let listener =
        crate::conn_limit::Limited::new(listener, cfg.gateway.max_connections, move || {
            refused.inc("fleet_connections_refused_total", &[])
        });
    let server = tokio::spawn(crate::serve::serve(
        listener,
        router,
        head_bound,
        crate::serve::tcp_peer,
        server_cancel,
    ));
    shutdown.await;
    tracing::info!("shutting down: no new calls; settling the broker");
    cancel.cancel();
    watcher.abort();
    launcher.abort();
    let bound = Duration::from_millis(cfg.gateway.shutdown_timeout_ms);
    let _ = stop_loop.send(());
    drop(handle);
    if tokio::time::timeout(bound, done).await.is_err() {
        tracing::warn!("the driver loop did not stop within the shutdown bound");
    }
    if let Some(mut status) = broker_status {
        // The port task ends (after its last acks) by dropping its status sender.
        let settled =
            tokio::time::timeout(bound, async { while status.changed().await.is_ok() {} }).await;
        if settled.is_err() {
            tracing::warn!("the broker connection did not close within the shutdown bound");
        }
    }
    if tokio::time::timeout(bound, server).await.is_err() {
        tracing::warn!("open HTTP requests did not end within the shutdown bound");
    }
    if tokio::time::timeout(bound, relay_server).await.is_err() {
        tracing::warn!("members' relayed requests did not end within the shutdown bound");
    }
    let _ = std::fs::remove_file(&relay_path);
    tracing::info!("fleetd stopped");
    Ok(())
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

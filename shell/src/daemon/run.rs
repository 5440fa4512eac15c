//! `fleetd run` in its phases: checks and keys, the core and its driver loop, members adopted
//! from herdr, the background watchers, both faces served, and the graceful stop.

use super::*;
use crate::driver::Handle;
use crate::metrics::Counter;

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
    greet_herdr(&client, &hc).await?;
    let metrics = Arc::new(Metrics::default());
    let audit = match &cfg.log.audit_file {
        Some(p) => AuditSink::file(p).map_err(|e| DaemonError::Audit {
            path: p.display().to_string(),
            reason: e.to_string(),
        })?,
        None => AuditSink::Log,
    };
    let observer = DaemonObserver::new(metrics.clone(), audit.clone());
    let sinks =
        crate::notify::Sinks::start(&cfg.notify, metrics.clone()).map_err(DaemonError::Notify)?;
    let (handle, calls) = Driver::<HerdrClient, NoBroker, TokioClock, DaemonObserver>::channel();
    let (stop_loop, loop_stopped) = oneshot::channel();
    let (halt, halted) = oneshot::channel();
    let tasks = task_lists(&state, &clock, &mut gw)?;
    let (broker_status, done) = match amqp_config(&cfg)? {
        Some(a) => {
            let record = replay_record(&state, &clock, &mut gw)?;
            let broker = AmqpBroker::start(a).map_err(|e| DaemonError::Broker(e.to_string()))?;
            let status = broker.status();
            let driver = Driver::new(gw, client.clone(), broker, clock, observer)
                .with_record(record)
                .with_tasks(tasks)
                .with_halt(halt)
                .with_notices(sinks);
            (Some(status), spawn_loop(driver, calls, loop_stopped))
        }
        None => {
            let driver = Driver::new(gw, client.clone(), NoBroker, clock, observer)
                .with_tasks(tasks)
                .with_halt(halt)
                .with_notices(sinks);
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
    adopt_members(&cfg, &hc, &client, &handle, &metrics).await;
    let watcher = spawn_watcher(&cfg, &client, &handle);
    let launcher = spawn_lead_launcher(&cfg, &client, &metrics);
    let app = faces_app(
        &cfg,
        &handle,
        mkey,
        &hc,
        &metrics,
        audit,
        broker_status.clone(),
    );
    let cancel = tokio_util::sync::CancellationToken::new();
    let faces = serve_faces(&cfg, &state, app, &metrics, &cancel).await?;
    if let Some(tx) = started {
        let _ = tx.send(Started { addr: faces.addr });
    }
    // A driver loop that halted (its state directory would not take what it must keep) stops
    // the daemon with its reason, as a signal would, then exits non-zero.
    let halted = tokio::select! {
        biased;
        () = shutdown => None,
        why = halted => why.ok(),
    };
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
    faces.stop(bound).await;
    if let Some(reason) = halted {
        tracing::error!(%reason, "fleetd stopped: its state directory would not keep what it must");
        return Err(DaemonError::State {
            path: state.display().to_string(),
            reason,
        });
    }
    tracing::info!("fleetd stopped");
    Ok(())
}

/// The faces' shared state: the driver's handle, who may call, and what `/health` reports.
fn faces_app(
    cfg: &Config,
    handle: &Handle,
    mkey: [u8; 32],
    hc: &HerdrConfig,
    metrics: &Arc<Metrics>,
    audit: AuditSink,
    broker_status: Option<tokio::sync::watch::Receiver<crate::amqp::Status>>,
) -> App {
    App::new(crate::faces::Inner {
        handle: handle.clone(),
        identity: identity(cfg, mkey, hc.launch.tokens.clone()),
        metrics: metrics.clone(),
        audit,
        host: cfg.host(),
        profiles: cfg
            .profiles
            .iter()
            .map(|(n, p)| (n.clone(), kind_name(p.kind).to_string()))
            .collect(),
        health: Health {
            broker: broker_status,
            herdr: Some(hc.socket.clone()),
            member_herdr: hc.member_socket.clone(),
            herdr_timeout: hc.timeout,
            sandbox: hc.sandbox.availability.clone(),
        },
        limits: crate::faces::Limits {
            timeout_max_ms: cfg.core.send_timeout_max_ms,
            max_body_bytes: cfg.core.max_body_bytes,
        },
    })
}

/// herdr's version, checked: a protocol fleetd cannot speak stops the start; a newer one, or
/// a herdr not answering yet, is logged and the daemon goes on.
async fn greet_herdr(client: &HerdrClient, hc: &HerdrConfig) -> Result<(), DaemonError> {
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
            tracing::info!(socket = %hc.socket.display(), version = %p.version, protocol = p.protocol, family = ?p.family(), "herdr answers")
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
    Ok(())
}

/// Members herdr lists are handed to the core before the port opens: a member's first call
/// then finds itself known (gated, then adopted by the core's restart rule). Then worktree
/// hygiene: members that died while the daemon was down leave worktrees no pane owns; their
/// work is snapshotted, then they go. Old snapshots expire.
async fn adopt_members(
    cfg: &Config,
    hc: &HerdrConfig,
    client: &HerdrClient,
    handle: &Handle,
    metrics: &Metrics,
) {
    let r = match rebuild::rebuild(client, handle).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "listing members in herdr at startup");
            return;
        }
    };
    tracing::info!(
        members = r.members.len(),
        swept = r.swept.len(),
        "members listed in herdr: the gateway adopts or closes each"
    );
    for (gid, removed) in herdr::worktree::sweep_orphans(&hc.worktrees, &r.members).await {
        let what = match &removed {
            Ok(herdr::worktree::Removed::Snapshotted { .. }) => "orphan_snapshotted",
            Ok(herdr::worktree::Removed::Kept(_)) => "orphan_kept",
            Ok(_) => "orphan_removed",
            Err(_) => "orphan_failed",
        };
        metrics.inc(Counter::WorktreeSweeps, &[("result", what)]);
        match removed {
            Ok(done) => tracing::info!(%gid, ?done, "swept an orphaned worktree"),
            Err(e) => tracing::warn!(%gid, "sweeping an orphaned worktree: {e}"),
        }
    }
    if cfg.herdr.wip_retention_days > 0 {
        let now = TokioClock::new().unix_ms() / 1000;
        let keep = cfg.herdr.wip_retention_days * 86_400;
        for gone in herdr::worktree::sweep_wip(&hc.worktrees, now, keep).await {
            metrics.inc(Counter::WorktreeSweeps, &[("result", "wip_expired")]);
            tracing::info!(wip = %gone, "expired a member's snapshot of unfinished work");
        }
    }
}

/// herdr's events, watched: a turn's end or a pane gone is heard at once.
fn spawn_watcher(
    cfg: &Config,
    client: &HerdrClient,
    handle: &Handle,
) -> tokio::task::JoinHandle<()> {
    let (client, handle) = (client.clone(), handle.clone());
    let relist = Duration::from_millis(cfg.herdr.relist_ms);
    tokio::task::spawn_local(async move {
        let wc = events::WatchConfig {
            relist,
            ..events::WatchConfig::default()
        };
        events::watch(client, handle, wc).await;
    })
}

/// The leads this host launches (`[[leads]] launch`), kept running.
fn spawn_lead_launcher(
    cfg: &Config,
    client: &HerdrClient,
    metrics: &Arc<Metrics>,
) -> tokio::task::JoinHandle<()> {
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
}

/// Both faces, served: on TCP for leads, tools and browsers, and on a Unix socket for
/// sandboxed members' relays.
struct Faces {
    addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
    relay_server: tokio::task::JoinHandle<()>,
    relay_path: PathBuf,
}

async fn serve_faces(
    cfg: &Config,
    state: &Path,
    app: App,
    metrics: &Arc<Metrics>,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<Faces, DaemonError> {
    // A sandboxed member's relay reaches the faces over a Unix socket: no browser can, so any
    // `Host` its member sends is fine, and no caller there is ever "on loopback".
    let mut relay_hosts = cfg.gateway.allowed_hosts.clone();
    relay_hosts.extend(["127.0.0.1".to_string(), "localhost".to_string()]);
    let relay_router = http_router(app.clone(), relay_hosts, cancel.clone());
    let router = http_router(app, cfg.gateway.allowed_hosts.clone(), cancel.clone());
    let relay_path = member_gateway_socket(state);
    let _ = std::fs::remove_file(&relay_path);
    let relay_listener =
        tokio::net::UnixListener::bind(&relay_path).map_err(|e| DaemonError::Listen {
            addr: relay_path.display().to_string(),
            reason: e.to_string(),
        })?;
    let listen_error = |e: std::io::Error| DaemonError::Listen {
        addr: cfg.gateway.listen.clone(),
        reason: e.to_string(),
    };
    let listener = tokio::net::TcpListener::bind(&cfg.gateway.listen)
        .await
        .map_err(listen_error)?;
    let addr = listener.local_addr().map_err(listen_error)?;
    tracing::info!(%addr, host = %cfg.gateway.host, mode = if cfg.broker.is_some() { "cross-host" } else { "single-host" }, "fleetd listening (REST, MCP at /mcp)");
    let head_bound = Duration::from_millis(cfg.gateway.header_read_timeout_ms);
    let refused = metrics.clone();
    let relay_listener =
        crate::conn_limit::Limited::new(relay_listener, cfg.gateway.max_connections, move || {
            refused.inc(Counter::ConnectionsRefused, &[])
        });
    let relay_server = tokio::spawn(crate::serve::serve(
        relay_listener,
        relay_router,
        head_bound,
        crate::serve::no_peer,
        cancel.clone(),
    ));
    let refused = metrics.clone();
    let listener =
        crate::conn_limit::Limited::new(listener, cfg.gateway.max_connections, move || {
            refused.inc(Counter::ConnectionsRefused, &[])
        });
    let server = tokio::spawn(crate::serve::serve(
        listener,
        router,
        head_bound,
        crate::serve::tcp_peer,
        cancel.clone(),
    ));
    Ok(Faces {
        addr,
        server,
        relay_server,
        relay_path,
    })
}

impl Faces {
    /// Waits, within `bound` each, for open requests to end; the relay's socket goes.
    async fn stop(self, bound: Duration) {
        if tokio::time::timeout(bound, self.server).await.is_err() {
            tracing::warn!("open HTTP requests did not end within the shutdown bound");
        }
        if tokio::time::timeout(bound, self.relay_server)
            .await
            .is_err()
        {
            tracing::warn!("members' relayed requests did not end within the shutdown bound");
        }
        let _ = std::fs::remove_file(&self.relay_path);
    }
}

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

/// An ed25519 secret key as `fleetd keygen` writes it: 64 hex digits and a newline.
pub fn read_key(path: &Path) -> Result<[u8; 32], DaemonError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path)
        .map_err(|e| DaemonError::Key(format!("reading the key {}: {e}", path.display())))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        // Anyone else who can read it can sign as this host and mint every member's token.
        return Err(DaemonError::Key(format!(
            "the key {} is readable by its group or others (mode {mode:04o}): chmod 600 {}",
            path.display(),
            path.display()
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| DaemonError::Key(format!("reading the key {}: {e}", path.display())))?;
    config::decode_key(&text).ok_or_else(|| {
        DaemonError::Key(format!(
            "{} is not a key: expected 64 hex digits (fleetd keygen --out {})",
            path.display(),
            path.display()
        ))
    })
}

/// Writes a fresh secret key (owner-only) and returns it with its public half.
pub fn write_key(path: &Path) -> Result<([u8; 32], [u8; 32]), DaemonError> {
    use rand_core::RngCore;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut secret = [0u8; 32];
    rand_core::OsRng.fill_bytes(&mut secret);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| DaemonError::Key(format!("creating {}: {e}", dir.display())))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| DaemonError::Key(format!("creating the key {}: {e}", path.display())))?;
    writeln!(f, "{}", config::encode_key(&secret))
        .map_err(|e| DaemonError::Key(format!("writing the key {}: {e}", path.display())))?;
    Ok((secret, public_key(&secret)))
}

pub fn public_key(secret: &[u8; 32]) -> [u8; 32] {
    ed25519_dalek::SigningKey::from_bytes(secret)
        .verifying_key()
        .to_bytes()
}

/// Members' MCP secrets are derived from this, itself derived from the gateway key: stable
/// across restarts with no second file, and useless for signing.
pub fn member_key(secret: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"fleetd member key\0");
    h.update(secret);
    h.finalize().into()
}

/// The gateway's key: read, or (single host only) created on first start.
fn gateway_key(cfg: &Config) -> Result<[u8; 32], DaemonError> {
    let path = cfg.key_file();
    if path.exists() {
        return read_key(&path);
    }
    if cfg.broker.is_some() {
        return Err(DaemonError::Key(format!(
            "no key at {p}: create it with `fleetd keygen --out {p}` and give its public key \
             to the other gateways' [peers]",
            p = path.display()
        )));
    }
    let (secret, public) = write_key(&path)?;
    tracing::info!(key = %path.display(), public = %config::encode_key(&public), "created this gateway's key");
    Ok(secret)
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

/// The core gateway this config describes (no I/O but the clock).
pub fn gateway(cfg: &Config, secret: [u8; 32], clock: &TokioClock) -> Result<Gateway, DaemonError> {
    let seed = cfg.gateway.seed.unwrap_or_else(|| {
        use rand_core::RngCore;
        rand_core::OsRng.next_u64()
    });
    let core = cfg.core_config();
    let Some(b) = &cfg.broker else {
        return Gateway::new(core, seed, clock.now())
            .map(|g| g.named(cfg.host()))
            .map_err(|e| DaemonError::Core(e.to_string()));
    };
    let mut peers = BTreeMap::new();
    for (host, key) in &cfg.peers {
        let k = config::decode_key(key)
            .ok_or_else(|| DaemonError::Key(format!("peers.{host} is not a public key")))?;
        peers.insert(HostId::new(host), k);
    }
    let keyring =
        Keyring::new(cfg.host(), secret, &peers).map_err(|e| DaemonError::Key(e.to_string()))?;
    let control_allowlist: BTreeSet<HostId> = match &b.control_allowlist {
        Some(list) => list.iter().map(HostId::new).collect(),
        None => std::iter::once(cfg.host())
            .chain(peers.keys().cloned())
            .collect(),
    };
    let federation = Federation {
        host: cfg.host(),
        keyring,
        namespace: b.namespace.clone(),
        control_allowlist,
        queue_type: b.queue_type,
    };
    Gateway::federated(core, federation, seed, clock.now(), clock.unix_ms())
        .map_err(|e| DaemonError::Core(e.to_string()))
}

fn amqp_config(cfg: &Config) -> Result<Option<AmqpConfig>, DaemonError> {
    let Some(b) = &cfg.broker else {
        return Ok(None);
    };
    let uris = cfg
        .broker_uris()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| DaemonError::Broker("no broker URI (broker.uri_env is not set)".into()))?;
    let mut a = AmqpConfig::cluster(uris, &b.namespace);
    a.connection_name = format!("fleetd/{}/{}", b.namespace, cfg.gateway.host);
    a.heartbeat_secs = b.heartbeat_secs;
    a.connect_timeout = Duration::from_millis(b.connect_timeout_ms);
    a.op_timeout = Duration::from_millis(b.op_timeout_ms);
    a.backoff_min = Duration::from_millis(b.backoff_min_ms);
    a.backoff_max = Duration::from_millis(b.backoff_max_ms);
    if let Some(ca) = &b.ca_file {
        a.ca_pem = Some(std::fs::read_to_string(ca).map_err(|e| {
            DaemonError::Broker(format!("reading broker.ca_file {}: {e}", ca.display()))
        })?);
    }
    Ok(Some(a))
}

fn herdr_config(
    cfg: &Config,
    state: &Path,
    member_key: [u8; 32],
) -> Result<HerdrConfig, DaemonError> {
    let socket = cfg
        .herdr
        .socket
        .clone()
        .or_else(herdr::discover_socket)
        .ok_or_else(|| DaemonError::Herdr("no herdr socket: set herdr.socket".into()))?;
    let h = &cfg.herdr;
    let runtime = state.join("members");
    let mut launch = LaunchConfig::new(&runtime, &cfg.mcp_url(), member_key);
    launch.tokens = MemberTokens::load(&runtime);
    launch.env_allow = h.env_allow.clone();
    launch.base_url_allow = h.base_url_allow.clone();
    launch.ready_timeout = Duration::from_millis(h.ready_timeout_ms);
    let mut hc = HerdrConfig::new(socket, launch);
    hc.member_socket = h.member_socket.clone();
    hc.timeout = Duration::from_millis(h.timeout_ms);
    hc.read_lines = h.read_lines;
    hc.member_tab = h.member_tab.clone();
    let mut wt = WorktreeConfig::new(state.join("worktrees"));
    wt.git = h.git.clone();
    wt.timeout = Duration::from_millis(h.git_timeout_ms);
    wt.protocols = h.git_protocols.clone();
    wt.credential_helper = h.git_credential_helper.clone();
    wt.repo_allow = h.repo_allow.clone();
    hc.sandbox = sandbox_config(cfg, state, &hc, &runtime, &wt.root)?;
    hc.sandbox_required = h.sandbox == SandboxMode::Required;
    hc.worktrees = wt;
    for l in &cfg.leads {
        let pane = match (&l.pane, &l.pane_label) {
            (Some(id), _) => Some(herdr::LeadPane::Id(id.clone())),
            (None, Some(label)) => Some(herdr::LeadPane::Label(label.clone())),
            (None, None) => None,
        };
        if let Some(pane) = pane {
            hc.lead_panes.insert(SessionId::new(l.gid()), pane);
        }
    }
    for (name, p) in &cfg.profiles {
        let profile = p
            .to_profile()
            .map_err(|e| DaemonError::Herdr(format!("profiles.{name}: {e}")))?;
        hc.profiles.insert(name.clone(), profile);
    }
    Ok(hc)
}

/// The members' sandbox on this host: bubblewrap found and working (`auto`, `required`), or
/// why not; and everything of the daemon's that no member may see.
fn sandbox_config(
    cfg: &Config,
    state: &Path,
    hc: &HerdrConfig,
    runtime: &Path,
    worktrees: &Path,
) -> Result<SandboxConfig, DaemonError> {
    let h = &cfg.herdr;
    let mut sc = SandboxConfig::off();
    sc.availability = match h.sandbox {
        SandboxMode::Off => Availability::Off,
        SandboxMode::Auto | SandboxMode::Required => {
            match herdr::sandbox::probe(&h.bwrap, Duration::from_secs(10)) {
                Ok(path) => {
                    sc.bwrap = path;
                    Availability::Ready
                }
                Err(why) if h.sandbox == SandboxMode::Required => {
                    return Err(DaemonError::Herdr(format!(
                        "herdr.sandbox = \"required\" and no member can be sandboxed: {why}"
                    )))
                }
                Err(why) => {
                    tracing::warn!(%why, "members run WITHOUT a sandbox on this host (herdr.sandbox = \"auto\")");
                    Availability::Unavailable(why)
                }
            }
        }
    };
    let mut hide: Vec<PathBuf> = vec![state.to_path_buf(), cfg.key_file()];
    hide.extend(cfg.path.clone());
    hide.extend(cfg.log.audit_file.clone());
    for var in [
        "HOME",
        "XDG_RUNTIME_DIR",
        "XDG_CONFIG_HOME",
        "XDG_STATE_HOME",
    ] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            hide.push(PathBuf::from(v));
        }
    }
    for sock in std::iter::once(&hc.socket).chain(hc.member_socket.iter()) {
        hide.extend(sock.parent().map(Path::to_path_buf));
    }
    hide.push(runtime.to_path_buf());
    hide.push(worktrees.to_path_buf());
    // A relative path (a `state_dir = "state"`) is hidden where it really is, from the
    // daemon's working directory, never dropped; resolved through links where it exists.
    let mut hide: Vec<PathBuf> = hide
        .into_iter()
        .filter_map(|p| std::path::absolute(&p).ok())
        .flat_map(|p| {
            let real = std::fs::canonicalize(&p).ok().filter(|r| *r != p);
            std::iter::once(p).chain(real)
        })
        .collect();
    // `/` itself is never hidden: a socket or file at the root would empty the member's world.
    hide.retain(|p| p.parent().is_some());
    hide.sort();
    hide.dedup();
    sc.hide = hide;
    sc.relay_bin = std::env::current_exe().ok();
    sc.gateway_socket = Some(member_gateway_socket(state));
    Ok(sc)
}

/// The north face on a Unix socket, for sandboxed members' relays.
pub fn member_gateway_socket(state: &Path) -> PathBuf {
    state.join("gateway.sock")
}

fn identity(cfg: &Config, member_key: [u8; 32], tokens: MemberTokens) -> Identity {
    let principal = |l: &config::LeadSection| {
        let gid = SessionId::new(l.gid());
        match l.role {
            LeadRole::Primary => Principal::primary(&l.name, Some(gid)),
            LeadRole::Architect => Principal {
                role: fleet_core::Role::Architect,
                session: Some(gid),
                name: l.name.clone(),
            },
        }
    };
    let leads = cfg
        .leads
        .iter()
        .map(|l| Lead::new(principal(l), l.token().as_deref()))
        .collect();
    let loopback = cfg
        .gateway
        .loopback_lead
        .as_ref()
        .and_then(|n| cfg.leads.iter().find(|l| &l.name == n))
        .map(principal);
    Identity::new(leads, member_key, tokens, loopback)
}

/// Sets up logging as `[log]` says (`RUST_LOG` overrides the level).
pub fn init_logging(cfg: &config::LogSection) {
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    use tracing_subscriber::util::SubscriberInitExt;
    // `try_init` also routes the `log` crate's records (rustls, via lapin) into it.
    let _ = log_subscriber(cfg, std::io::stderr, ansi).try_init();
}

/// The log as `cfg` describes it, written to `writer`. A line inside a flow carries the
/// flow's span: `flow{trace_id=…}:` in the human format, `"span":{"trace_id":…}` in JSON.
pub fn log_subscriber<W>(
    cfg: &config::LogSection,
    writer: W,
    ansi: bool,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&cfg.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    match cfg.format {
        LogFormat::Json => Box::new(
            builder
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(false)
                .finish(),
        ),
        LogFormat::Human => Box::new(builder.finish()),
    }
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

fn kind_name(k: config::ProfileKind) -> &'static str {
    match k {
        config::ProfileKind::ClaudeCode => "claude-code",
        config::ProfileKind::Codex => "codex",
        config::ProfileKind::Opencode => "opencode",
        config::ProfileKind::Command => "command",
    }
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

/// Both faces on one axum router; every request's caller is resolved once, here.
pub fn http_router(
    app: App,
    allowed_hosts: Vec<String>,
    cancel: tokio_util::sync::CancellationToken,
) -> axum::Router {
    let (rest, _) = rest::router();
    let mcp = mcp::service(app.clone(), allowed_hosts.clone(), cancel.child_token());
    let hosts = Arc::new(allowed_hosts);
    rest.nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(app.clone(), resolve))
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let hosts = hosts.clone();
                async move { host_guard(&hosts, req, next).await }
            },
        ))
        .with_state(app)
}

/// The DNS-rebinding guard rmcp applies to `/mcp`, applied to every route: a browser page on
/// another name must not reach REST through this port either.
async fn host_guard(allowed: &[String], req: Request, next: Next) -> axum::response::Response {
    let host = req
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !host_allowed(allowed, host) {
        let body = serde_json::json!({
            "code": "host_not_allowed",
            "message": format!("Host {host:?} is not in gateway.allowed_hosts"),
        });
        return (axum::http::StatusCode::FORBIDDEN, axum::Json(body)).into_response();
    }
    let refused = {
        // A header that is there but not text is not taken for an absent one.
        let header = |name: &str| req.headers().get(name).map(|v| v.to_str().unwrap_or("?"));
        cross_site(host, header("origin"), header("sec-fetch-site"))
    };
    if let Some(why) = refused {
        let body = serde_json::json!({ "code": "cross_origin", "message": why });
        return (axum::http::StatusCode::FORBIDDEN, axum::Json(body)).into_response();
    }
    next.run(req).await
}

/// Why a request a browser made for another site's page is refused, if it is one: its
/// `Sec-Fetch-Site` is not `same-origin` (or `none`, a user's own navigation), or its `Origin`
/// is not this very origin (`host`, port included: a page on another port of localhost is
/// another origin). Clients that are not browsers send neither header.
pub fn cross_site(host: &str, origin: Option<&str>, fetch_site: Option<&str>) -> Option<String> {
    if let Some(site) = fetch_site {
        if !matches!(site, "same-origin" | "none") {
            return Some(format!(
                "a {site} request from a browser page (Sec-Fetch-Site); fleetd answers only its own origin"
            ));
        }
    }
    if let Some(origin) = origin {
        let authority = origin
            .split_once("://")
            .map(|(_, rest)| rest.trim_end_matches('/'))
            .unwrap_or("");
        if authority.is_empty() || !authority.eq_ignore_ascii_case(host) {
            return Some(format!(
                "Origin {origin:?} is not this gateway's own ({host}); fleetd answers only its own origin"
            ));
        }
    }
    None
}

/// `host` (a `Host` header: name, `name:port`, `[v6]:port`) matches an entry given as a name
/// (any port) or as `name:port`.
pub fn host_allowed(allowed: &[String], host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    allowed.iter().any(|a| {
        a.eq_ignore_ascii_case(host) || a.trim_matches(['[', ']']).eq_ignore_ascii_case(name)
    })
}

async fn resolve(State(app): State<App>, mut req: Request, next: Next) -> axum::response::Response {
    let header = req.headers().get(axum::http::header::AUTHORIZATION);
    let auth = match header.map(|v| v.to_str()) {
        None => None,
        Some(Ok(v)) => Some(v.to_string()),
        // A credential that cannot even be read is refused, never taken for none.
        Some(Err(_)) => Some(String::new()),
    };
    let peer = req
        .extensions()
        .get::<ConnectInfo<crate::conn_limit::Peer>>()
        .map(|c| c.0 .0);
    let caller = app.caller(auth.as_deref(), peer).await;
    if caller.refused {
        // A wrong credential is refused outright: never served as anonymous, never parsed on.
        let body = serde_json::json!({
            "code": "unauthenticated",
            "message": "the bearer token is neither a lead's nor a member's of this gateway",
        });
        return (axum::http::StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// The broker objects this config's gateway declares (`fleetd topology`).
pub fn topology(cfg: &Config) -> Result<Option<fleet_core::broker::Topology>, DaemonError> {
    if cfg.broker.is_none() {
        return Ok(None);
    }
    // A throwaway key: names and arguments do not depend on it.
    let gw = gateway(cfg, [1; 32], &TokioClock::new())?;
    Ok(gw.topology())
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

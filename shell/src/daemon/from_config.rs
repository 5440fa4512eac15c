//! The config's sections as each part's own config: the core gateway, the broker, herdr,
//! the sandbox, the callers' identities.

use super::*;

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

pub(super) fn amqp_config(cfg: &Config) -> Result<Option<AmqpConfig>, DaemonError> {
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

pub(super) fn herdr_config(
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
    // Agents report their own turns through this binary (`fleetd member-report`).
    launch.report_bin = std::env::current_exe().ok();
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

pub(super) fn identity(cfg: &Config, member_key: [u8; 32], tokens: MemberTokens) -> Identity {
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

pub(super) fn kind_name(k: config::ProfileKind) -> &'static str {
    match k {
        config::ProfileKind::ClaudeCode => "claude-code",
        config::ProfileKind::Codex => "codex",
        config::ProfileKind::Opencode => "opencode",
        config::ProfileKind::Command => "command",
    }
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

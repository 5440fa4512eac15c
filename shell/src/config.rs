//! The daemon's config file (TOML): every knob with a default and a doc line. Loading checks
//! everything a running gateway would trip on later and names the offending key.

use crate::herdr::launch::{self, Kind, Profile, DEFAULT_ENV_ALLOW};
use fleet_core::broker::QueueType;
use fleet_core::{CoreConfig, HostId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The whole file. Only `[gateway]` is needed; with no `[broker]` every path is local.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub gateway: GatewaySection,
    /// Cross-host mode. Absent: a single-host gateway with no broker at all.
    pub broker: Option<BrokerSection>,
    /// The other gateways' public keys (hex), by host id. Only messages they signed are taken.
    #[serde(default)]
    pub peers: BTreeMap<String, String>,
    /// Leads and architects served by this gateway, each with its own token and inbox.
    #[serde(default)]
    pub leads: Vec<LeadSection>,
    #[serde(default)]
    pub herdr: HerdrSection,
    /// The file this config was read from (no member may see it), when it was read from one.
    #[serde(skip)]
    pub path: Option<PathBuf>,
    /// Named ways to start a member (`fleet_spawn{profile}`).
    #[serde(default)]
    pub profiles: BTreeMap<String, ProfileSection>,
    #[serde(default)]
    pub log: LogSection,
    /// The delivery core's timeouts, caps and TTLs (see `docs/operations.md`).
    #[serde(default)]
    pub core: CoreConfig,
    /// Fleet health: how often members are probed, the classifier's thresholds, and the
    /// screen lines that mean a member cannot go on.
    #[serde(default)]
    pub health: fleet_core::health::HealthConfig,
    /// Which profile a spawn that names none starts, and how long a credential that hit a
    /// usage limit is skipped.
    #[serde(default)]
    pub placement: fleet_core::placement::PlacementConfig,
    /// Notification rules, each with its sink: who is told, away from the terminal, when
    /// something waits on a person (`docs/operations.md`).
    #[serde(default)]
    pub notify: Vec<crate::notify::NotifySection>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewaySection {
    /// This gateway's host id: unique in the fleet, the routing key of its control queue.
    pub host: String,
    /// Where REST and MCP listen. Loopback by default: anything wider is a trust boundary.
    pub listen: String,
    /// The URL members use to reach this gateway's `/mcp` (default: from `listen`).
    pub public_url: Option<String>,
    /// `Host` headers the MCP endpoint accepts (DNS-rebinding guard); loopback by default.
    pub allowed_hosts: Vec<String>,
    /// Members' files, worktrees and (single host) the generated key. Default:
    /// `$XDG_STATE_HOME/fleetd/<host>` or `~/.local/state/fleetd/<host>`.
    pub state_dir: Option<PathBuf>,
    /// This gateway's ed25519 secret key (`fleetd keygen` writes it). Default:
    /// `<state_dir>/gateway.key`, created on first start when there is no `[broker]`.
    pub key_file: Option<PathBuf>,
    /// Opt-in: a caller on loopback with no credentials is served as this lead (by name).
    pub loopback_lead: Option<String>,
    /// Bound on a graceful shutdown (stop consuming, settle acks) before the process exits.
    pub shutdown_timeout_ms: u64,
    /// Connections the north face holds open at once; more are closed as they arrive.
    pub max_connections: usize,
    /// How long a connection may take to send a request's head — from when it connects, or
    /// from its last response when it is kept alive — before it is closed: an idle or
    /// dribbling connection gives its place under `max_connections` back. A request once
    /// received is never cut by it (a blocking send waits its own timeout).
    pub header_read_timeout_ms: u64,
    /// Seed of the gateway's id mint; default: from the OS, so restarts mint fresh ids.
    pub seed: Option<u64>,
}

impl Default for GatewaySection {
    fn default() -> Self {
        GatewaySection {
            host: "local".into(),
            listen: "127.0.0.1:8765".into(),
            public_url: None,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            state_dir: None,
            key_file: None,
            loopback_lead: None,
            shutdown_timeout_ms: 10_000,
            max_connections: 1024,
            header_read_timeout_ms: 30_000,
            seed: None,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct BrokerSection {
    /// `amqp://user:pass@host:5672/vhost` or `amqps://…`: this gateway's own login.
    pub uri: String,
    /// The nodes of a cluster, one URI each, in place of `uri`: the gateway connects to any
    /// and moves to the next when one is lost.
    pub uris: Vec<String>,
    /// Read the URI from this environment variable instead (keeps the password out of the
    /// file); several, comma-separated, for a cluster.
    pub uri_env: Option<String>,
    /// The type of every durable queue this gateway declares: `classic` (one node) or
    /// `quorum` (replicated across a cluster, so inboxes outlive the loss of a node). The
    /// roster queue is transient and stays classic.
    pub queue_type: QueueType,
    /// Prefix of every exchange and queue (several fleets can share one broker).
    pub namespace: String,
    /// PEM file of the CA that signed the broker's certificate (`amqps://`).
    pub ca_file: Option<PathBuf>,
    pub heartbeat_secs: u16,
    pub connect_timeout_ms: u64,
    pub op_timeout_ms: u64,
    pub backoff_min_ms: u64,
    pub backoff_max_ms: u64,
    /// Hosts whose SPAWN/STOP this gateway honours. Default: itself and every `[peers]` host.
    pub control_allowlist: Option<Vec<String>>,
}

const DEFAULT_BROKER_URI: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

impl Default for BrokerSection {
    fn default() -> Self {
        BrokerSection {
            uri: DEFAULT_BROKER_URI.into(),
            uris: Vec::new(),
            uri_env: None,
            queue_type: QueueType::Classic,
            namespace: "fleet".into(),
            ca_file: None,
            heartbeat_secs: 10,
            connect_timeout_ms: 10_000,
            op_timeout_ms: 10_000,
            backoff_min_ms: 100,
            backoff_max_ms: 5_000,
            control_allowlist: None,
        }
    }
}

/// What a lead is to the authz table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeadRole {
    #[default]
    Primary,
    Architect,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LeadSection {
    /// Shown in audit lines and `fleet_whoami`.
    pub name: String,
    /// Its fleet-wide id (its inbox, its roster entry, a peer lead's `coordId`). Default: the
    /// herdr pane id when `pane` is set, else the name. Must be unique across the fleet.
    pub gid: Option<String>,
    /// Its herdr pane id, where reply nudges are typed. None: no nudges (a script, a CI job).
    pub pane: Option<String>,
    /// Or its pane's label: found by it at each use, so a restarted lead pane (a new id, the
    /// same label) keeps getting its nudges. Exclusive with `pane`.
    pub pane_label: Option<String>,
    #[serde(default)]
    pub role: LeadRole,
    /// The bearer token it presents. Prefer `token_env`.
    pub token: Option<String>,
    /// Read the token from this environment variable.
    pub token_env: Option<String>,
    /// Start it in herdr when no pane carries its `pane_label` (checked every
    /// `herdr.lead_check_ms`): `{ argv, cwd?, env?, tab? }`.
    pub launch: Option<crate::herdr::lead_launch::LaunchSection>,
    /// `[leads.heartbeat]`: remind it when it has been quiet `idle_after_ms` with work
    /// outstanding, at most `max_beats` times until it acts (CB-551). Off when absent.
    pub heartbeat: Option<fleet_core::gateway::HeartbeatConfig>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HerdrSection {
    /// herdr's socket. Default: `$HERDR_SOCKET_PATH`, else `~/.config/herdr/herdr.sock`.
    pub socket: Option<PathBuf>,
    /// A second herdr for members (leads' panes stay on `socket`).
    pub member_socket: Option<PathBuf>,
    /// Bound on each herdr request.
    pub timeout_ms: u64,
    /// Lines of pane text read for a baseline or a completion scrape.
    pub read_lines: u32,
    /// The tab members start in.
    pub member_tab: String,
    /// Variables of the daemon's environment a member inherits.
    pub env_allow: Vec<String>,
    /// The subscription guard: the only `ANTHROPIC_BASE_URL`s a claude-code member may use.
    pub base_url_allow: Vec<String>,
    /// A starting agent must show its prompt (a `command` member: reach an injectable
    /// status) within this of its pane's placing, or its spawn fails with its last screen.
    pub ready_timeout_ms: u64,
    /// git for worktrees, and its bound per command.
    pub git: PathBuf,
    pub git_timeout_ms: u64,
    /// Transports a worktree's repository URL may use (git's `protocol.allow`).
    pub git_protocols: Vec<String>,
    /// git's `credential.helper` for clones and fetches (none unless set).
    pub git_credential_helper: Option<String>,
    /// Repository URLs this host clones for a worktree (exact, or a prefix ending in `/`);
    /// empty: none.
    pub repo_allow: Vec<String>,
    /// Days a removed member's snapshot of unfinished work (`refs/wip/fleet/<gid>`) is kept;
    /// 0 keeps them forever.
    pub wip_retention_days: u64,
    /// How often the event watcher relists members.
    pub relist_ms: u64,
    /// How often each lead with a `launch` is checked for its pane (and started without one).
    pub lead_check_ms: u64,
    /// Members' sandbox: `auto` (on where this host can make one; `/healthz` says when it
    /// cannot), `required` (a spawn that cannot be sandboxed is refused; so is a start
    /// without bubblewrap), `off`.
    pub sandbox: SandboxMode,
    /// bubblewrap, by path or by name on `PATH`.
    pub bwrap: PathBuf,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    #[default]
    Auto,
    Required,
    Off,
}

impl Default for HerdrSection {
    fn default() -> Self {
        HerdrSection {
            socket: None,
            member_socket: None,
            timeout_ms: 5_000,
            read_lines: 80,
            member_tab: "fleet members".into(),
            env_allow: DEFAULT_ENV_ALLOW.iter().map(|s| s.to_string()).collect(),
            base_url_allow: Vec::new(),
            ready_timeout_ms: 60_000,
            git: PathBuf::from("git"),
            git_timeout_ms: 120_000,
            git_protocols: vec!["https".into(), "ssh".into()],
            git_credential_helper: None,
            repo_allow: Vec::new(),
            wip_retention_days: 14,
            relist_ms: 5_000,
            lead_check_ms: 30_000,
            sandbox: SandboxMode::Auto,
            bwrap: PathBuf::from("bwrap"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProfileKind {
    ClaudeCode,
    Codex,
    Opencode,
    Command,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSection {
    pub kind: ProfileKind,
    /// The program (claude-code: `claude`, opencode: `opencode`).
    pub bin: Option<String>,
    /// claude-code: `ANTHROPIC_BASE_URL`, checked against `herdr.base_url_allow`.
    pub base_url: Option<String>,
    /// claude-code `--model`, opencode `-m provider/model`.
    pub model: Option<String>,
    /// Extra arguments (claude-code, opencode).
    #[serde(default)]
    pub args: Vec<String>,
    /// command: the whole argv.
    #[serde(default)]
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    /// Standing instructions; only a SHA-256 receipt of them is kept.
    pub charter: Option<String>,
    /// Run this profile's members sandboxed where the host can (default true).
    pub sandbox: Option<bool>,
    /// The sandbox's network: `host`, or `none` (loopback only; the gateway stays reachable
    /// through a relay). Default: `none` for command, `host` for claude-code and opencode,
    /// which need their model API.
    pub network: Option<crate::herdr::Network>,
    /// More of the host the sandbox shows, read-only, though a hidden path covers it: where the
    /// member's program lives when that is under the daemon's home (`~/.local/share/claude`,
    /// an npm prefix). Absolute paths.
    #[serde(default)]
    pub sandbox_paths: Vec<PathBuf>,
    /// Regexes over the end of a member's screen that mean it cannot go on (its health turns
    /// ERROR_ON_SCREEN), beside `[health] fatal_patterns`.
    #[serde(default)]
    pub fatal_patterns: Vec<String>,
    /// Its share of unqualified spawns under `[placement] strategy = "weighted"` (default 1).
    pub weight: Option<u32>,
    /// At most this many of its members at once on this host, for placement (default: no
    /// bound). A spawn that names the profile is not gated.
    pub max_load: Option<u32>,
    /// The account its members use (default: the profile's name): a usage limit hit by one
    /// member cools down every profile with the same credential.
    pub credential: Option<String>,
    /// claude-code: a dir an operator prepared, copied into each member's config dir before
    /// fleetd merges its own keys (site settings, agents, commands). Absolute path.
    pub config_template: Option<PathBuf>,
    /// claude-code, codex, opencode: install the agent's own lifecycle reports (its hooks,
    /// notify program or plugin, through `fleetd member-report`), so its turns end when it
    /// says so with its own text (default true); false reads its screen only.
    pub reports: Option<bool>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSection {
    pub format: LogFormat,
    /// A tracing filter (`info`, `fleetd=debug,lapin=warn`); `RUST_LOG` overrides it.
    pub level: String,
    /// Audit lines (one JSON object per authz decision, never content) go here; default: the
    /// log, under target `audit`.
    pub audit_file: Option<PathBuf>,
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection {
            format: LogFormat::Human,
            level: "info".into(),
            audit_file: None,
        }
    }
}

/// A config the daemon refuses, with the key it is about.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("{path}: `{key}`: {reason}")]
    Parse {
        path: String,
        key: String,
        reason: String,
    },
    #[error("`{key}`: {reason}")]
    Invalid { key: String, reason: String },
}

fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        reason: reason.into(),
    }
}

impl Config {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Config, Vec<ConfigError>> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            vec![ConfigError::Read {
                path: path.display().to_string(),
                reason: e.to_string(),
            }]
        })?;
        let mut cfg = Config::parse(&text, &path.display().to_string())?;
        cfg.path = Some(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()));
        Ok(cfg)
    }

    /// Parses and checks a config text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, Vec<ConfigError>> {
        let de = toml::Deserializer::parse(text).map_err(|e| {
            vec![ConfigError::Parse {
                path: origin.to_string(),
                key: "-".into(),
                reason: e.to_string(),
            }]
        })?;
        let cfg: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            vec![ConfigError::Parse {
                path: origin.to_string(),
                key: e.path().to_string(),
                reason: e.inner().to_string().trim_end().to_string(),
            }]
        })?;
        let errors = cfg.check();
        if errors.is_empty() {
            Ok(cfg)
        } else {
            Err(errors)
        }
    }

    /// The core's knobs, with the profile names this host advertises.
    pub fn core_config(&self) -> CoreConfig {
        let mut c = self.core.clone();
        c.profiles = self.profiles.keys().cloned().collect();
        c.start_timeout_ms = self.herdr.ready_timeout_ms;
        c.health = self.health.clone();
        c.heartbeats = self
            .leads
            .iter()
            .filter_map(|l| Some((fleet_core::SessionId::new(l.gid()), l.heartbeat.clone()?)))
            .collect();
        c.placement = self.placement.clone();
        c.notify = self
            .notify
            .iter()
            .map(|n| {
                n.rule(|name| {
                    self.leads
                        .iter()
                        .find(|l| l.name == name)
                        .map(LeadSection::gid)
                })
            })
            .collect();
        c.placement.profiles = self
            .profiles
            .iter()
            .map(|(name, p)| {
                let placed = fleet_core::placement::ProfilePlacement {
                    weight: p.weight.unwrap_or(1),
                    max_load: p.max_load.unwrap_or(0),
                    credential: p.credential.clone(),
                };
                (name.clone(), placed)
            })
            .collect();
        c.health.profile_fatal_patterns = self
            .profiles
            .iter()
            .filter(|(_, p)| !p.fatal_patterns.is_empty())
            .map(|(name, p)| (name.clone(), p.fatal_patterns.clone()))
            .collect();
        c
    }

    pub fn host(&self) -> HostId {
        HostId::new(&self.gateway.host)
    }

    pub fn state_dir(&self) -> PathBuf {
        if let Some(d) = &self.gateway.state_dir {
            return d.clone();
        }
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        let base = var("XDG_STATE_HOME")
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".local/state")))
            .unwrap_or_else(std::env::temp_dir);
        base.join("fleetd").join(&self.gateway.host)
    }

    pub fn key_file(&self) -> PathBuf {
        self.gateway
            .key_file
            .clone()
            .unwrap_or_else(|| self.state_dir().join("gateway.key"))
    }

    /// The URL members reach `/mcp` at.
    pub fn mcp_url(&self) -> String {
        let base = match &self.gateway.public_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => format!("http://{}", self.gateway.listen),
        };
        format!("{base}/mcp")
    }

    /// The broker's URIs (one per node), from the file or the environment.
    pub fn broker_uris(&self) -> Option<Vec<String>> {
        let b = self.broker.as_ref()?;
        match &b.uri_env {
            Some(v) => std::env::var(v).ok().map(|u| split_uris(&u)),
            None if !b.uris.is_empty() => Some(b.uris.clone()),
            None => Some(vec![b.uri.clone()]),
        }
    }
}

/// A comma-separated list of URIs (an environment variable's way to name a cluster).
fn split_uris(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(String::from)
        .collect()
}

impl LeadSection {
    pub fn gid(&self) -> String {
        self.gid
            .clone()
            .or_else(|| self.pane.clone())
            .unwrap_or_else(|| self.name.clone())
    }

    /// The token, from the file or the environment.
    pub fn token(&self) -> Option<String> {
        match (&self.token, &self.token_env) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(v)) => std::env::var(v).ok(),
            (None, None) => None,
        }
    }
}

impl ProfileSection {
    /// The launcher's profile, or why this section cannot be one.
    pub fn to_profile(&self) -> Result<Profile, String> {
        let kind = match self.kind {
            ProfileKind::ClaudeCode => Kind::ClaudeCode {
                bin: self.bin.clone().unwrap_or_else(|| "claude".into()),
                base_url: self
                    .base_url
                    .clone()
                    .ok_or("a claude-code profile needs base_url (ANTHROPIC_BASE_URL)")?,
                model: self.model.clone(),
                args: self.args.clone(),
            },
            ProfileKind::Codex => Kind::Codex {
                bin: self.bin.clone().unwrap_or_else(|| "codex".into()),
                base_url: self.base_url.clone().ok_or(
                    "a codex profile needs base_url (its model endpoint, a Responses API)",
                )?,
                model: self.model.clone(),
                args: self.args.clone(),
            },
            ProfileKind::Opencode => Kind::OpenCode {
                bin: self.bin.clone().unwrap_or_else(|| "opencode".into()),
                model: self.model.clone(),
                base_url: self.base_url.clone(),
                args: self.args.clone(),
            },
            ProfileKind::Command => {
                if self.argv.is_empty() {
                    return Err("a command profile needs argv".into());
                }
                Kind::Command {
                    argv: self.argv.clone(),
                }
            }
        };
        if let Some(p) = self.sandbox_paths.iter().find(|p| !p.is_absolute()) {
            return Err(format!(
                "sandbox_paths: {} is not an absolute path",
                p.display()
            ));
        }
        match (&self.config_template, self.kind) {
            (Some(t), ProfileKind::ClaudeCode) if !t.is_absolute() => {
                return Err(format!(
                    "config_template: {} is not an absolute path",
                    t.display()
                ))
            }
            (Some(t), ProfileKind::Codex) if !t.is_absolute() => {
                return Err(format!(
                    "config_template: {} is not an absolute path",
                    t.display()
                ))
            }
            (Some(_), ProfileKind::ClaudeCode | ProfileKind::Codex) | (None, _) => {}
            (Some(_), _) => {
                return Err("config_template is for claude-code and codex profiles".into())
            }
        }
        if self.kind != ProfileKind::Command && !self.argv.is_empty() {
            return Err("argv is for command profiles; use bin and args".into());
        }
        let network = self.network.unwrap_or(match self.kind {
            ProfileKind::Command => crate::herdr::Network::None,
            _ => crate::herdr::Network::Host,
        });
        Ok(Profile {
            kind,
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            charter: self.charter.clone(),
            sandbox: self.sandbox.unwrap_or(true),
            network,
            sandbox_paths: self.sandbox_paths.clone(),
            config_template: self.config_template.clone(),
            reports: self.reports.unwrap_or(true),
        })
    }
}

/// The host of an `http(s)://host[:port]/…` URL, as a `Host` header would carry it.
fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    (!authority.is_empty()).then(|| authority.to_string())
}

/// A 32-byte key from 64 hex digits.
pub fn decode_key(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

pub fn encode_key(key: &[u8; 32]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// A commented example, printed by `fleetd check-config --example`.
pub const EXAMPLE: &str = r#"# fleetd.toml — every key is optional unless marked.
[gateway]
host = "alpha"                 # unique in the fleet
listen = "127.0.0.1:8765"      # REST + MCP (/mcp)
# public_url = "http://alpha.internal:8765"   # how members reach /mcp
# key_file = "/etc/fleetd/alpha.key"          # `fleetd keygen --out …`
# loopback_lead = "me"         # opt-in: loopback callers without a token act as this lead

[[leads]]
name = "me"
token_env = "FLEETD_TOKEN"     # the bearer token this lead's MCP client sends
# pane_label = "lead-me"       # its herdr pane, found by label (nudges are typed there)
# launch = { argv = ["claude"], cwd = "/home/me/src/project" }   # started when none runs
# [leads.heartbeat]            # remind it when quiet with work outstanding (CB-551)
# idle_after_ms = 600000
# max_beats = 3

# Cross-host: one RabbitMQ (or LavinMQ) shared by every gateway.
# [broker]
# uri_env = "FLEETD_AMQP_URI"  # amqp://alpha:…@broker:5672/fleet
# namespace = "fleet"
# A three-node cluster instead: every node, and queues that outlive the loss of one.
# uris = ["amqp://alpha:…@mq1:5672/fleet", "amqp://alpha:…@mq2:5672/fleet", "amqp://alpha:…@mq3:5672/fleet"]
# queue_type = "quorum"
# [peers]
# beta = "<64 hex digits: beta's public key>"

[herdr]
# socket = "/run/user/1000/herdr.sock"

# A demo member: it tells herdr it is idle (a `command` member must report itself), then
# answers each line typed into it through REST with its own token. Real members use
# kind = "claude-code", "codex" or "opencode" (docs/members.md, "Agent kinds").
[profiles.echo]
kind = "command"
argv = ["sh", "-c", '''
report() { "$HERDR_BIN_PATH" pane report-agent "$HERDR_PANE_ID" --source fleetd --agent echo --state "$1"; }
report idle
while IFS= read -r line; do
  report working
  line=$(printf '%s' "$line" | tr -d '"\\')
  curl -s -o /dev/null -X POST -H "Authorization: Bearer $FLEET_MCP_TOKEN" \
       -H 'content-type: application/json' -d "{\"message\":\"echo: $line\"}" \
       "${FLEET_MCP_URL%/mcp}/sessions/$FLEET_GID/reply"
  report idle
done''']

# Each member's health (docs/operations.md lists the fourteen states).
# [health]
# interval_ms = 15000
# stall_suspect_ms = 600000

# A spawn that names no profile: "fixed" (default_profile) or "weighted" (by each profile's
# weight, skipping max_load and credentials cooling down after a usage limit).
# [placement]
# strategy = "weighted"
# cooldown_ms = 1800000

[core]
# send_timeout_ms = 1800000
"#;

mod check;
#[cfg(test)]
mod tests;

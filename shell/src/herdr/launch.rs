//! The member launcher (ch. 9's `PeerLauncher`): what a spawn runs, per profile kind, and the
//! files it needs — pure, so every rule here is tested without a pane.
//!
//! - `claude-code`: `ANTHROPIC_BASE_URL` from the profile, which the subscription guard checks
//!   against the allow-list of off-subscription endpoints; this gateway's MCP mounted from a
//!   per-member `mcp.json` (`--strict-mcp-config`, so no repo or user config is inherited).
//! - `opencode`: an ephemeral `opencode.json` (`OPENCODE_CONFIG`) mounting the same MCP, the
//!   charter as its instructions file, the model as `-m`.
//! - `command`: any argv, for custom agents and tests; ready on an injectable status.
//!
//! Every member starts under `env -i` with only allow-listed variables of the daemon's own
//! environment, the profile's variables, fleetd's, and herdr's own pane variables: herdr would
//! otherwise hand it the herdr server's environment, credentials included. None of it is in
//! the pane's argv (which any local user can list): the pane runs `sh <dir>/launch.sh`, a 0600
//! script that removes itself, exports the environment and execs the program — inside the
//! member's sandbox (`sandbox`) where the host has one. The charter goes to the member; the
//! gateway keeps only its SHA-256 receipt.

use super::sandbox::{quote, Network, Word};
use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The environment a member may inherit from the daemon, by default: names, or prefixes ending
/// in `*`. Nothing that carries a credential.
pub const DEFAULT_ENV_ALLOW: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_*",
    "TERM",
    "COLORTERM",
    "TZ",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
];

/// What a profile starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    ClaudeCode {
        bin: String,
        /// `ANTHROPIC_BASE_URL`: must be on `LaunchConfig::base_url_allow`.
        base_url: String,
        model: Option<String>,
        args: Vec<String>,
    },
    /// OpenAI's Codex CLI, its model endpoint a Responses API (`base_url`, on the same
    /// `base_url_allow` list), its key in the profile's `OPENAI_API_KEY`.
    Codex {
        bin: String,
        base_url: String,
        model: Option<String>,
        args: Vec<String>,
    },
    OpenCode {
        bin: String,
        /// `provider/model`, passed as `-m`; with `base_url`, the model's id at that endpoint.
        model: Option<String>,
        /// A Chat Completions endpoint (on `base_url_allow`): its provider is fleetd's, its
        /// key the profile's `OPENAI_API_KEY`. Without it opencode uses its own providers.
        base_url: Option<String>,
        args: Vec<String>,
    },
    Command {
        argv: Vec<String>,
    },
}

impl Kind {
    /// The profile kind as configs and `fleet_profiles` name it.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::ClaudeCode { .. } => "claude-code",
            Kind::Codex { .. } => "codex",
            Kind::OpenCode { .. } => "opencode",
            Kind::Command { .. } => "command",
        }
    }
}

/// A named way to start a member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    pub kind: Kind,
    /// Added to the member's environment (after the allow-list, so always present).
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    /// The member's standing instructions; only its receipt is kept.
    pub charter: Option<String>,
    /// Whether its member runs sandboxed where the host can (on by default).
    pub sandbox: bool,
    /// Its sandbox's network (`host` unless the profile says `none`).
    pub network: Network,
    /// Paths shown read-only in its sandbox though a hidden path covers them.
    pub sandbox_paths: Vec<std::path::PathBuf>,
    /// An operator-prepared dir copied into each member's agent config dir before fleetd's
    /// own keys are merged over it (`agent_config`).
    pub config_template: Option<PathBuf>,
    /// Its agent's own lifecycle reports are installed (where fleetd knows its own binary).
    pub reports: bool,
}

impl Profile {
    pub fn command(argv: &[&str]) -> Self {
        Profile {
            kind: Kind::Command {
                argv: argv.iter().map(|s| s.to_string()).collect(),
            },
            env: BTreeMap::new(),
            cwd: None,
            charter: None,
            sandbox: true,
            network: Network::Host,
            sandbox_paths: Vec::new(),
            config_template: None,
            reports: true,
        }
    }
}

/// How the launcher reaches this gateway and guards members.
#[derive(Clone)]
pub struct LaunchConfig {
    /// Per-member files (`<dir>/<gid>/`), private to the daemon's user.
    pub runtime_dir: PathBuf,
    /// This gateway's MCP endpoint as a member reaches it.
    pub mcp_url: String,
    /// Derives each member's MCP secret (`member_secret`): the same gid gets the same secret
    /// after a gateway restart, so a running member reconnects with no ledger.
    pub member_key: [u8; 32],
    /// Variables of the daemon's environment a member inherits (see `DEFAULT_ENV_ALLOW`).
    pub env_allow: Vec<String>,
    /// The subscription guard: the only `ANTHROPIC_BASE_URL`s a `claude-code` member may use.
    pub base_url_allow: Vec<String>,
    /// The members' live tokens: one nonce per spawn, so a stopped member's token dies with it.
    pub tokens: MemberTokens,
    /// fleetd's own binary, for the agents' lifecycle reports (`fleetd member-report`): with
    /// it, a claude-code or codex member reports its own turns; without it (a test launcher),
    /// its screen is read as before.
    pub report_bin: Option<PathBuf>,
}

impl fmt::Debug for LaunchConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaunchConfig")
            .field("runtime_dir", &self.runtime_dir)
            .field("mcp_url", &self.mcp_url)
            .field("member_key", &"<redacted>")
            .field("env_allow", &self.env_allow)
            .field("base_url_allow", &self.base_url_allow)
            .finish()
    }
}

impl LaunchConfig {
    pub fn new(runtime_dir: impl Into<PathBuf>, mcp_url: &str, member_key: [u8; 32]) -> Self {
        LaunchConfig {
            runtime_dir: runtime_dir.into(),
            mcp_url: mcp_url.to_string(),
            member_key,
            env_allow: DEFAULT_ENV_ALLOW.iter().map(|s| s.to_string()).collect(),
            base_url_allow: Vec::new(),
            tokens: MemberTokens::default(),
            report_bin: None,
        }
    }

    /// `fleetd member-report` as member `boxed` runs it: inside a sandbox fleetd's binary is
    /// bound at `RELAY_BIN`.
    pub fn report_bin(&self, boxed: Option<Network>) -> Option<String> {
        let bin = self.report_bin.as_ref()?;
        Some(match boxed {
            Some(_) => super::sandbox::RELAY_BIN.to_string(),
            None => path_arg(bin),
        })
    }

    /// The gateway's MCP URL as a member in `boxed` reaches it: an offline sandbox reaches it
    /// through its relay on `127.0.0.1` at the same port and path.
    pub fn member_url(&self, boxed: Option<Network>) -> String {
        match boxed {
            Some(Network::None) => {
                let (port, path) = url_port_path(&self.mcp_url);
                format!("http://127.0.0.1:{port}{path}")
            }
            _ => self.mcp_url.clone(),
        }
    }

    /// Where member `gid`'s files go; `None` for a gid that is not a plain name (a label such
    /// as `fleet:../x` must never name a directory outside `runtime_dir`).
    pub fn member_dir(&self, gid: &str) -> Option<PathBuf> {
        safe_gid(gid).then(|| self.runtime_dir.join(gid))
    }
}

/// The port and path of an `http(s)://authority/path` URL (80/443 when the port is implicit).
pub fn url_port_path(url: &str) -> (u16, String) {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let default = if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        80
    };
    let port = authority
        .rsplit_once(':')
        .filter(|(h, _)| !h.ends_with(']') || authority.starts_with('['))
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or(default);
    (port, path.to_string())
}

/// A gid fleetd will act on: 1–64 ASCII letters, digits, `-` and `_` (a UUID is one).
pub fn safe_gid(gid: &str) -> bool {
    (1..=64).contains(&gid.len())
        && gid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// An environment variable name `env` reads as one: `[A-Za-z_][A-Za-z0-9_]*`.
fn var_name(k: &str) -> bool {
    let mut b = k.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// A SHA-256 fingerprint of the exact charter a member was launched with, for audit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CharterReceipt {
    pub sha256: String,
    pub bytes: usize,
}

impl CharterReceipt {
    pub fn of(charter: &str) -> Self {
        CharterReceipt {
            sha256: hex(&Sha256::digest(charter.as_bytes())),
            bytes: charter.len(),
        }
    }
}

/// The member's filtered herdr socket, in its directory (`member_socket`).
pub const MEMBER_HERDR_SOCKET: &str = "herdr.sock";

/// herdr's own variables of each pane (set when it starts the pane, so unknown until then),
/// kept through the scrub: a member reports its status with them (`pane.report_agent`).
pub const HERDR_PANE_VARS: &[&str] = &[
    "HERDR_ENV",
    "HERDR_SOCKET_PATH",
    "HERDR_WORKSPACE_ID",
    "HERDR_TAB_ID",
    "HERDR_PANE_ID",
    // The herdr binary that started the pane: `"$HERDR_BIN_PATH" pane report-agent …`.
    "HERDR_BIN_PATH",
];

/// Everything one spawn does besides `layout.apply`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The member's whole environment, besides `HERDR_PANE_VARS`.
    pub env: BTreeMap<String, String>,
    /// The program and its arguments.
    pub program: Vec<String>,
    pub cwd: Option<String>,
    /// Files to write (mode 0600, in a 0700 directory) before the pane starts.
    pub files: Vec<(PathBuf, String)>,
    pub receipt: Option<CharterReceipt>,
    /// How its readiness is known (CB-306): the core's gate looks at the pane for it.
    pub gate: fleet_core::Readiness,
    /// The launch script's path (`<dir>/launch.sh`).
    pub script: PathBuf,
    /// The sandbox the program runs in (`bwrap … --` and what follows), when it has one.
    pub sandbox: Option<Vec<Word>>,
    /// The agent's own config dir to prepare once the cwd is final (`prepare_agent`).
    pub agent: Option<AgentPrep>,
    /// Its agent reports its own turns (hooks, notify, plugin through `fleetd member-report`).
    pub reports: bool,
}

/// An agent config dir a launch prepares, so the agent starts at its prompt unattended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentPrep {
    ClaudeCode {
        config_dir: PathBuf,
        api_key: Option<String>,
        /// The hook command that reports its turns (`fleetd member-report`).
        report: Option<String>,
    },
    Codex {
        /// Its `notify` program: `fleetd member-report` for each turn's end.
        notify: Option<Vec<String>>,
        home: PathBuf,
        base_url: String,
        model: Option<String>,
        mcp_url: String,
        charter: Option<String>,
        sandboxed: bool,
    },
}

impl AgentPrep {
    /// The agent's own dir, writable in its sandbox.
    pub fn dir(&self) -> &Path {
        match self {
            AgentPrep::ClaudeCode { config_dir, .. } => config_dir,
            AgentPrep::Codex { home, .. } => home,
        }
    }
}

/// The MCP server name fleetd mounts in every member: its tools are `mcp__fleet__*`.
pub const MCP_SERVER: &str = "fleet";

impl Launch {
    /// The pane's command, which herdr runs directly (no shell of its own):
    /// `sh -c 'exec env -i HERDR_…="$HERDR_…" … sh "$1"' fleetd-member <dir>/launch.sh`. The
    /// first `sh` only carries herdr's pane variables across `env -i`; no value and no secret
    /// is in it.
    pub fn argv(&self) -> Vec<String> {
        let keep: Vec<String> = HERDR_PANE_VARS
            .iter()
            .map(|v| format!("{v}=\"${v}\""))
            .collect();
        let script = format!("exec env -i {} sh \"$1\"", keep.join(" "));
        vec![
            "sh".into(),
            "-c".into(),
            script,
            "fleetd-member".into(),
            path_arg(&self.script),
        ]
    }

    /// The launch script: removes itself (its environment carries the member's token), exports
    /// the member's environment, and runs the program — in its sandbox, if it has one. Every
    /// value is single-quoted, so nothing in it is parsed by the shell. When the program ends,
    /// its exit status goes to `EXITED_FILE` and the pane stays (bounded) until fleetd has read
    /// it and the screen: a member that dies at start says why at once.
    pub fn script_text(&self) -> String {
        let mut s = String::from(
            "# fleetd: a member's launch, read once and removed (it holds the member's token)\n\
             rm -f -- \"$0\"\n",
        );
        for (k, v) in &self.env {
            s.push_str(&format!("export {k}={}\n", quote(v)));
        }
        let words: Vec<String> = match &self.sandbox {
            Some(w) => w.iter().map(Word::render).collect(),
            None => self.program.iter().map(|p| quote(p)).collect(),
        };
        // A handler, not an ignore: the program gets the default back at exec, and this shell
        // outlives a Ctrl-C in the pane to record how the program ended.
        s.push_str("trap : INT QUIT\n");
        s.push_str(&words.join(" "));
        s.push('\n');
        let dir = self.script.parent().unwrap_or(Path::new("."));
        let exited = quote(&dir.join(EXITED_FILE).to_string_lossy());
        s.push_str(&format!(
            "rc=$?\n\
             printf '%s\\n' \"$rc\" > {exited} 2>/dev/null\n\
             printf '\\n[fleetd] the member exited with status %s\\n' \"$rc\"\n\
             i=0\n\
             while [ -e {exited} ] && [ $i -lt {} ]; do sleep 0.5; i=$((i+1)); done\n",
            EXIT_LINGER_SECS * 2
        ));
        s
    }

    /// Adds the agent's config files, for the launch's final cwd (a worktree is cut after
    /// planning): its first-run screens answered, its cwd trusted, the fleet tools allowed.
    pub fn prepare_agent(
        &mut self,
        template: Option<&Path>,
    ) -> Result<(), super::agent_config::PrepareError> {
        let Some(agent) = &self.agent else {
            return Ok(());
        };
        let mut trusted: Vec<String> = self.cwd.iter().cloned().collect();
        if let Some(real) = self
            .cwd
            .as_ref()
            .and_then(|c| std::fs::canonicalize(c).ok())
        {
            let real = real.to_string_lossy().into_owned();
            if !trusted.contains(&real) {
                trusted.push(real);
            }
        }
        let files = match agent {
            AgentPrep::ClaudeCode {
                config_dir,
                api_key,
                report,
            } => super::agent_config::ClaudeSetup {
                config_dir: config_dir.clone(),
                trusted,
                api_key: api_key.clone(),
                mcp_server: MCP_SERVER.into(),
                report: report.clone(),
            }
            .files(template)?,
            AgentPrep::Codex {
                notify,
                home,
                base_url,
                model,
                mcp_url,
                charter,
                sandboxed,
            } => super::agent_config::CodexSetup {
                home: home.clone(),
                trusted,
                base_url: base_url.clone(),
                model: model.clone(),
                mcp_url: mcp_url.clone(),
                charter: charter.clone(),
                sandboxed: *sandboxed,
                notify: notify.clone(),
            }
            .files(template)?,
        };
        self.files.extend(files);
        Ok(())
    }

    /// Every file the launch writes: its own, and the script.
    pub fn all_files(&self) -> Vec<(PathBuf, String)> {
        let mut f = self.files.clone();
        f.push((self.script.clone(), self.script_text()));
        f
    }
}

/// Why a spawn was refused before anything started.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    #[error("profile {profile}: its model endpoint {base_url:?} is not on the off-subscription allow-list (base_url_allow: {allowed:?}); a member never runs on the lead's subscription")]
    SubscriptionGuard {
        profile: String,
        base_url: String,
        allowed: Vec<String>,
    },
    #[error("profile {profile}: {why}")]
    Invalid { profile: String, why: String },
}

/// Whether `name` is on the allow-list (`LC_*` style prefixes).
pub fn allowed(allow: &[String], name: &str) -> bool {
    allow.iter().any(|a| match a.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => a == name,
    })
}

/// Written by a member's launch script when its program exits: the exit status. The script
/// then keeps the pane (and its last screen) until fleetd has read both and removed the file,
/// for at most `EXIT_LINGER_SECS`.
pub const EXITED_FILE: &str = "exited";
pub const EXIT_LINGER_SECS: u32 = 30;

/// The mark a launch leaves in a member's directory until its readiness gate passes
/// (`Output::MemberReady`), holding that gate (`Readiness`, JSON): a restart finding it
/// adopts the member only through that gate, since herdr calls an agent idle before it
/// takes input.
pub const STARTING_FILE: &str = "starting";

/// Who is launched: its gid, group, its spawn's nonce, and the sandbox it will run in (`None`:
/// none), which decides its home and how it reaches the gateway.
#[derive(Clone, Copy, Debug)]
pub struct Member<'a> {
    pub gid: &'a str,
    pub group: Option<&'a str>,
    pub nonce: &'a str,
    pub boxed: Option<Network>,
}

impl<'a> Member<'a> {
    pub fn new(gid: &'a str, nonce: &'a str) -> Self {
        Member {
            gid,
            group: None,
            nonce,
            boxed: None,
        }
    }
}

/// A member's environment: what `env_allow` lets through of the daemon's, the profile's own,
/// a sandboxed member's own home and XDG places, and fleet's variables.
fn member_env(
    cfg: &LaunchConfig,
    profile: &Profile,
    member: &Member<'_>,
    dir: &Path,
    parent_env: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let (gid, group) = (member.gid, member.group);
    let mut env: BTreeMap<String, String> = parent_env
        .iter()
        .filter(|(k, _)| allowed(&cfg.env_allow, k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.extend(profile.env.clone());
    if member.boxed.is_some() {
        // Its own home, an empty /tmp; the daemon's runtime dir is not there at all.
        env.insert("HOME".into(), path_arg(&dir.join("home")));
        env.insert("TMPDIR".into(), "/tmp".into());
        env.remove("XDG_RUNTIME_DIR");
        // Its own config, data, cache and state under its home (an agent writes there), never
        // the daemon's, which its sandbox shows read-only or not at all.
        for xdg in [
            "XDG_CONFIG_HOME",
            "XDG_DATA_HOME",
            "XDG_CACHE_HOME",
            "XDG_STATE_HOME",
        ] {
            env.remove(xdg);
        }
    }
    // herdr's own variable says the real socket; the member gets its filtered one.
    env.insert(
        "HERDR_SOCKET_PATH".into(),
        path_arg(&dir.join(MEMBER_HERDR_SOCKET)),
    );
    env.insert("FLEET_GID".into(), gid.to_string());
    if let Some(g) = group {
        env.insert("FLEET_GROUP".into(), g.to_string());
    }
    env
}

/// Plans the launch of `member` from `profile`. `parent_env` is the daemon's environment
/// (an input, so the scrub is testable).
pub fn plan(
    cfg: &LaunchConfig,
    name: &str,
    profile: &Profile,
    member: Member<'_>,
    parent_env: &BTreeMap<String, String>,
) -> Result<Launch, LaunchError> {
    let gid = member.gid;
    let invalid = |why: &str| LaunchError::Invalid {
        profile: name.to_string(),
        why: why.to_string(),
    };
    let Some(dir) = cfg.member_dir(gid) else {
        return Err(invalid(&format!("gid {gid:?} is not a plain name")));
    };
    if !safe_nonce(member.nonce) {
        return Err(invalid("the spawn nonce is not hex"));
    }
    let env = member_env(cfg, profile, &member, &dir, parent_env);
    let receipt = profile.charter.as_deref().map(CharterReceipt::of);
    let c = kinds::Ctx {
        cfg,
        name,
        profile,
        dir: &dir,
        boxed: member.boxed,
        url: cfg.member_url(member.boxed),
        token: member_token(&cfg.member_key, gid, member.nonce),
        report_bin: cfg.report_bin(member.boxed).filter(|_| profile.reports),
    };
    let mut parts = kinds::Parts {
        env,
        files: vec![(dir.join(NONCE_FILE), member.nonce.to_string())],
        agent: None,
        reports: false,
    };
    let p = &mut parts;
    let (program, gate) = match &profile.kind {
        Kind::ClaudeCode {
            bin,
            base_url,
            model,
            args,
        } => kinds::claude_code(&c, p, bin, base_url, model.as_ref(), args)?,
        Kind::Codex {
            bin,
            base_url,
            model,
            args,
        } => kinds::codex(&c, p, bin, base_url, model.as_ref(), args)?,
        Kind::OpenCode {
            bin,
            model,
            base_url,
            args,
        } => kinds::opencode(&c, p, bin, model.as_ref(), base_url.as_ref(), args)?,
        Kind::Command { argv } => kinds::command(&c, p, argv)?,
    };
    let kinds::Parts {
        mut env,
        files,
        agent,
        reports,
    } = parts;
    // `env -i` drops the TERM herdr gives the pane; its terminal is xterm-compatible.
    env.entry("TERM".into())
        .or_insert_with(|| "xterm-256color".into());
    if let Some(bad) = env.keys().find(|k| !var_name(k)) {
        return Err(invalid(&format!("environment variable name {bad:?}")));
    }
    // `env` would read a program named `a=b` as one more variable.
    if let Some(bad) = program.first().filter(|p| p.contains('=') || p.is_empty()) {
        return Err(invalid(&format!("program name {bad:?}")));
    }
    Ok(Launch {
        env,
        program,
        cwd: profile.cwd.clone(),
        files,
        receipt,
        gate,
        script: dir.join("launch.sh"),
        sandbox: None,
        agent,
        reports,
    })
}

/// The provider id fleetd gives an opencode member's model endpoint.
pub const OPENCODE_PROVIDER: &str = "fleet";

/// What an opencode member's environment says unless its profile says otherwise (checked
/// against 1.18.33): no model list fetched from models.dev, no self-update, no LSP downloads,
/// no sharing.
pub const OPENCODE_QUIET_ENV: &[(&str, &str)] = &[
    ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
    ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
    ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
    ("OPENCODE_DISABLE_SHARE", "1"),
];

/// What a claude-code member's environment says unless its profile says otherwise: an
/// unattended member checks for no updates and sends no telemetry or error reports.
pub const CLAUDE_QUIET_ENV: &[(&str, &str)] = &[
    ("DISABLE_AUTOUPDATER", "1"),
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    // Else it clones the official plugin marketplace with git at start.
    ("CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL", "1"),
];

/// The subscription guard: a member's model endpoint must be on `base_url_allow`.
fn guard(cfg: &LaunchConfig, profile: &str, base_url: &str) -> Result<(), LaunchError> {
    if cfg.base_url_allow.iter().any(|a| a == base_url) {
        return Ok(());
    }
    Err(LaunchError::SubscriptionGuard {
        profile: profile.to_string(),
        base_url: base_url.to_string(),
        allowed: cfg.base_url_allow.clone(),
    })
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

fn path_arg(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Writes a launch's files: the member's directory 0700, each file 0600.
pub fn write_files(dir: &Path, files: &[(PathBuf, String)]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    for (path, text) in files {
        // An agent's config dir (and a template's sub-dirs) under the member's own.
        if let Some(parent) = path.parent().filter(|p| *p != dir) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        f.write_all(text.as_bytes())?;
    }
    Ok(())
}

/// Removes a member's files (its pane is gone). A missing directory is fine.
pub fn remove_files(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

mod kinds;
mod tokens;
pub use tokens::{
    fresh_nonce, member_secret, member_token, token_on_record, verify_member, MemberTokens,
    NONCE_FILE,
};
use tokens::{hex, safe_nonce};
#[cfg(test)]
mod tests;

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
//! otherwise hand it the herdr server's environment, credentials included. The charter goes to
//! the member; the gateway keeps only its SHA-256 receipt.

use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    OpenCode {
        bin: String,
        /// `provider/model`, passed as `-m`.
        model: Option<String>,
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
    /// The readiness gate for `command` members: an injectable status within this bound.
    pub ready_timeout: Duration,
    pub ready_poll: Duration,
}

impl fmt::Debug for LaunchConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaunchConfig")
            .field("runtime_dir", &self.runtime_dir)
            .field("mcp_url", &self.mcp_url)
            .field("member_key", &"<redacted>")
            .field("env_allow", &self.env_allow)
            .field("base_url_allow", &self.base_url_allow)
            .field("ready_timeout", &self.ready_timeout)
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
            ready_timeout: Duration::from_secs(60),
            ready_poll: Duration::from_millis(250),
        }
    }

    /// Where member `gid`'s files go; `None` for a gid that is not a plain name (a label such
    /// as `fleet:../x` must never name a directory outside `runtime_dir`).
    pub fn member_dir(&self, gid: &str) -> Option<PathBuf> {
        safe_gid(gid).then(|| self.runtime_dir.join(gid))
    }
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

/// When a launched member counts as ready (CB-306).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// It connects to this gateway's MCP with its secret.
    Connects,
    /// Its pane shows an injectable status (`command` profiles).
    Injectable,
}

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
    pub gate: Gate,
}

impl Launch {
    /// The pane's command, which herdr runs directly (no shell of its own):
    /// `sh -c 'exec env -i HERDR_…="$HERDR_…" … "$@"' fleetd-member VAR=value … program args…`.
    /// The `sh` only carries herdr's pane variables across `env -i`; values are never parsed
    /// by a shell (they are arguments, and `env` takes each `NAME=value` literally).
    pub fn argv(&self) -> Vec<String> {
        let keep: Vec<String> = HERDR_PANE_VARS
            .iter()
            .map(|v| format!("{v}=\"${v}\""))
            .collect();
        let script = format!("exec env -i {} \"$@\"", keep.join(" "));
        let mut argv = vec!["sh".into(), "-c".into(), script, "fleetd-member".into()];
        argv.extend(self.env.iter().map(|(k, v)| format!("{k}={v}")));
        argv.extend(self.program.iter().cloned());
        argv
    }
}

/// Why a spawn was refused before anything started.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    #[error("profile {profile}: ANTHROPIC_BASE_URL {base_url:?} is not on the off-subscription allow-list (base_url_allow: {allowed:?}); a member never runs on the lead's subscription")]
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

/// The secret member `gid` presents to this gateway's MCP: HMAC-SHA256(member_key, gid), hex.
pub fn member_secret(key: &[u8; 32], gid: &str) -> String {
    hex(&mac(key, gid).finalize().into_bytes())
}

/// The bearer token member `gid` presents: `<gid>.<secret>`, so the gateway knows whose
/// secret to check (a gid is a plain name: it has no `.`).
pub fn member_token(key: &[u8; 32], gid: &str) -> String {
    format!("{gid}.{}", member_secret(key, gid))
}

/// Checks a presented secret in constant time.
pub fn verify_member(key: &[u8; 32], gid: &str, presented: &str) -> bool {
    let Some(bytes) = unhex(presented) else {
        return false;
    };
    mac(key, gid).verify_slice(&bytes).is_ok()
}

fn mac(key: &[u8; 32], gid: &str) -> Hmac<Sha256> {
    // HMAC takes a key of any length: this cannot fail for 32 bytes.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    m.update(b"fleetd member mcp secret\0");
    m.update(gid.as_bytes());
    m
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Plans the launch of member `gid` from `profile`. `parent_env` is the daemon's environment
/// (an input, so the scrub is testable).
pub fn plan(
    cfg: &LaunchConfig,
    name: &str,
    profile: &Profile,
    gid: &str,
    group: Option<&str>,
    parent_env: &BTreeMap<String, String>,
) -> Result<Launch, LaunchError> {
    let invalid = |why: &str| LaunchError::Invalid {
        profile: name.to_string(),
        why: why.to_string(),
    };
    let Some(dir) = cfg.member_dir(gid) else {
        return Err(invalid(&format!("gid {gid:?} is not a plain name")));
    };
    let mut env: BTreeMap<String, String> = parent_env
        .iter()
        .filter(|(k, _)| allowed(&cfg.env_allow, k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.extend(profile.env.clone());
    env.insert("FLEET_GID".into(), gid.to_string());
    if let Some(g) = group {
        env.insert("FLEET_GROUP".into(), g.to_string());
    }
    let receipt = profile.charter.as_deref().map(CharterReceipt::of);
    let mut files = Vec::new();
    let token = member_token(&cfg.member_key, gid);
    let headers = json!({ "Authorization": format!("Bearer {token}") });
    let (program, gate) = match &profile.kind {
        Kind::ClaudeCode {
            bin,
            base_url,
            model,
            args,
        } => {
            if !cfg.base_url_allow.iter().any(|a| a == base_url) {
                return Err(LaunchError::SubscriptionGuard {
                    profile: name.to_string(),
                    base_url: base_url.clone(),
                    allowed: cfg.base_url_allow.clone(),
                });
            }
            env.insert("ANTHROPIC_BASE_URL".into(), base_url.clone());
            // Its own config dir: a member never sees the lead's `~/.claude` login, which is
            // the subscription the guard keeps it off.
            env.insert("CLAUDE_CONFIG_DIR".into(), path_arg(&dir.join("claude")));
            let mcp = dir.join("mcp.json");
            let config = json!({ "mcpServers": { "fleet": {
                "type": "http", "url": cfg.mcp_url, "headers": headers,
            }}});
            files.push((mcp.clone(), pretty(&config)));
            let mut argv = vec![
                bin.clone(),
                "--mcp-config".into(),
                path_arg(&mcp),
                "--strict-mcp-config".into(),
            ];
            if let Some(m) = model {
                argv.extend(["--model".into(), m.clone()]);
            }
            if let Some(c) = &profile.charter {
                argv.extend(["--append-system-prompt".into(), c.clone()]);
            }
            argv.extend(args.iter().cloned());
            (argv, Gate::Connects)
        }
        Kind::OpenCode { bin, model, args } => {
            let config_path = dir.join("opencode.json");
            let mut config = json!({
                "$schema": "https://opencode.ai/config.json",
                "mcp": { "fleet": {
                    "type": "remote", "url": cfg.mcp_url, "enabled": true, "headers": headers,
                }},
            });
            if let Some(c) = &profile.charter {
                let charter = dir.join("charter.md");
                files.push((charter.clone(), c.clone()));
                config["instructions"] = json!([path_arg(&charter)]);
            }
            files.push((config_path.clone(), pretty(&config)));
            env.insert("OPENCODE_CONFIG".into(), path_arg(&config_path));
            let mut argv = vec![bin.clone()];
            if let Some(m) = model {
                argv.extend(["-m".into(), m.clone()]);
            }
            argv.extend(args.iter().cloned());
            (argv, Gate::Connects)
        }
        Kind::Command { argv } => {
            if argv.is_empty() {
                return Err(invalid("a command profile needs an argv"));
            }
            env.insert("FLEET_MCP_URL".into(), cfg.mcp_url.clone());
            // A program has no MCP config file to read it from; the environment is the
            // pane's own (never argv, which any user can list).
            env.insert("FLEET_MCP_TOKEN".into(), token);
            (argv.clone(), Gate::Injectable)
        }
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> LaunchConfig {
        let mut c = LaunchConfig::new("/run/fleetd/members", "http://127.0.0.1:7700/mcp", [7; 32]);
        c.base_url_allow = vec!["https://llm.internal.example/v1".into()];
        c
    }

    fn parent() -> BTreeMap<String, String> {
        [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/dev"),
            ("LC_ALL", "C.UTF-8"),
            ("ANTHROPIC_API_KEY", "sk-secret"),
            ("GITHUB_TOKEN", "ghp_secret"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn claude(base_url: &str) -> Profile {
        Profile {
            kind: Kind::ClaudeCode {
                bin: "claude".into(),
                base_url: base_url.into(),
                model: Some("sonnet".into()),
                args: vec![],
            },
            env: BTreeMap::new(),
            cwd: Some("/src/app".into()),
            charter: Some("You are a fleet member. Reply with fleet_reply.".into()),
        }
    }

    #[test]
    fn a_claude_code_member_runs_off_subscription_with_its_own_mcp_and_a_scrubbed_env() {
        let l = plan(
            &cfg(),
            "dev",
            &claude("https://llm.internal.example/v1"),
            "g1",
            Some("qa"),
            &parent(),
        )
        .expect("planned");
        let env = &l.env;
        assert_eq!(env["ANTHROPIC_BASE_URL"], "https://llm.internal.example/v1");
        assert_eq!(env["FLEET_GID"], "g1");
        assert_eq!(env["FLEET_GROUP"], "qa");
        assert_eq!(env["PATH"], "/usr/bin");
        assert_eq!(env["LC_ALL"], "C.UTF-8");
        assert!(!env.contains_key("ANTHROPIC_API_KEY") && !env.contains_key("GITHUB_TOKEN"));
        assert_eq!(
            &l.program[..5],
            [
                "claude",
                "--mcp-config",
                "/run/fleetd/members/g1/mcp.json",
                "--strict-mcp-config",
                "--model"
            ]
        );
        assert_eq!(l.gate, Gate::Connects);
        let (path, text) = &l.files[0];
        assert_eq!(path, Path::new("/run/fleetd/members/g1/mcp.json"));
        let v: serde_json::Value = serde_json::from_str(text).expect("json");
        let secret = member_secret(&[7; 32], "g1");
        assert_eq!(
            v["mcpServers"]["fleet"]["headers"]["Authorization"],
            format!("Bearer g1.{secret}")
        );
        assert_eq!(v["mcpServers"]["fleet"]["url"], "http://127.0.0.1:7700/mcp");
        // The secret is in the 0600 file, never in the pane's argv.
        assert!(l.argv().iter().all(|a| !a.contains(&secret)));
        let receipt = l.receipt.expect("a receipt");
        assert_eq!(receipt.bytes, 47);
        assert_eq!(receipt.sha256.len(), 64);
    }

    #[test]
    fn the_subscription_guard_refuses_a_base_url_off_the_allow_list() {
        let e = plan(
            &cfg(),
            "dev",
            &claude("https://api.anthropic.com"),
            "g1",
            None,
            &parent(),
        )
        .expect_err("refused");
        assert!(matches!(e, LaunchError::SubscriptionGuard { .. }), "{e}");
        assert!(e.to_string().contains("api.anthropic.com"), "{e}");
    }

    #[test]
    fn an_opencode_member_gets_an_ephemeral_config_with_the_charter_as_instructions() {
        let p = Profile {
            kind: Kind::OpenCode {
                bin: "opencode".into(),
                model: Some("anthropic/claude-sonnet-4".into()),
                args: vec![],
            },
            env: [("OPENCODE_DISABLE_AUTOUPDATE".to_string(), "1".to_string())].into(),
            cwd: None,
            charter: Some("charter".into()),
        };
        let l = plan(&cfg(), "oc", &p, "g2", None, &parent()).expect("planned");
        let env = &l.env;
        assert_eq!(
            env["OPENCODE_CONFIG"],
            "/run/fleetd/members/g2/opencode.json"
        );
        assert_eq!(env["OPENCODE_DISABLE_AUTOUPDATE"], "1");
        assert_eq!(l.program, ["opencode", "-m", "anthropic/claude-sonnet-4"]);
        let config = &l
            .files
            .iter()
            .find(|(p, _)| p.ends_with("opencode.json"))
            .expect("config")
            .1;
        let v: serde_json::Value = serde_json::from_str(config).expect("json");
        assert_eq!(v["mcp"]["fleet"]["type"], "remote");
        assert_eq!(v["instructions"][0], "/run/fleetd/members/g2/charter.md");
        assert!(l
            .files
            .iter()
            .any(|(p, t)| p.ends_with("charter.md") && t == "charter"));
    }

    #[test]
    fn a_command_member_is_gated_on_an_injectable_status() {
        let l = plan(
            &cfg(),
            "sh",
            &Profile::command(&["sh", "-c", "agent"]),
            "g3",
            None,
            &parent(),
        )
        .expect("planned");
        assert_eq!(l.gate, Gate::Injectable);
        assert_eq!(l.env["FLEET_MCP_URL"], "http://127.0.0.1:7700/mcp");
        assert!(l.files.is_empty());
        let e =
            plan(&cfg(), "sh", &Profile::command(&[]), "g3", None, &parent()).expect_err("empty");
        assert!(e.to_string().contains("argv"), "{e}");
    }

    /// The argv really runs: `sh` keeps herdr's pane variables, `env -i` drops everything
    /// else, and values with spaces, quotes and `$` arrive literally.
    #[test]
    fn the_argv_runs_with_exactly_the_planned_environment() {
        let mut p = Profile::command(&["sh", "-c", "env | sort"]);
        p.env.insert("ODD".into(), "a b 'c' \"d\" $HOME `x`".into());
        let l = plan(&cfg(), "sh", &p, "g4", None, &parent()).expect("planned");
        let argv = l.argv();
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env("HERDR_PANE_ID", "w1:p7")
            .env("AWS_SECRET_ACCESS_KEY", "leak")
            .output()
            .expect("sh runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let got: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
        assert_eq!(got["ODD"], "a b 'c' \"d\" $HOME `x`");
        assert_eq!(got["HERDR_PANE_ID"], "w1:p7");
        assert_eq!(got["FLEET_GID"], "g4");
        assert!(!got.contains_key("AWS_SECRET_ACCESS_KEY"), "{text}");
        assert!(!got.contains_key("ANTHROPIC_API_KEY"), "{text}");
        let e = plan(
            &cfg(),
            "sh",
            &Profile::command(&["A=1", "x"]),
            "g4",
            None,
            &parent(),
        );
        assert!(e.is_err(), "a program named like a variable is refused");
    }

    #[test]
    fn member_secrets_are_per_gid_stable_and_checked() {
        let k = [9u8; 32];
        let s = member_secret(&k, "a");
        assert_eq!(s, member_secret(&k, "a"));
        assert_ne!(s, member_secret(&k, "b"));
        assert!(verify_member(&k, "a", &s));
        assert!(!verify_member(&k, "b", &s));
        assert!(!verify_member(&k, "a", "zz"));
        assert!(!verify_member(&[8u8; 32], "a", &s));
    }

    #[test]
    fn the_allow_list_reads_prefixes() {
        let allow = vec!["LC_*".to_string(), "PATH".to_string()];
        assert!(allowed(&allow, "LC_CTYPE"));
        assert!(allowed(&allow, "PATH"));
        assert!(!allowed(&allow, "PATHX"));
        assert!(!allowed(&allow, "AWS_SECRET_ACCESS_KEY"));
    }
}

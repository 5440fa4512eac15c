//! What each profile kind runs: its argv, its readiness gate, and the files, variables and
//! first-start preparation it needs.

use super::*;
use fleet_core::agent_screen::StartRules;
use fleet_core::Readiness;

/// What every kind's plan reads: the member and where it reaches this gateway.
pub(super) struct Ctx<'a> {
    pub cfg: &'a LaunchConfig,
    /// The profile's name, for errors.
    pub name: &'a str,
    pub profile: &'a Profile,
    pub dir: &'a Path,
    pub boxed: Option<Network>,
    /// This gateway's MCP, as the member reaches it.
    pub url: String,
    /// The member's bearer token.
    pub token: String,
    /// `fleetd member-report` as the member runs it, when its agent's reports are installed.
    pub report_bin: Option<String>,
}

impl Ctx<'_> {
    pub fn invalid(&self, why: &str) -> LaunchError {
        LaunchError::Invalid {
            profile: self.name.to_string(),
            why: why.to_string(),
        }
    }

    fn headers(&self) -> serde_json::Value {
        json!({ "Authorization": format!("Bearer {}", self.token) })
    }

    /// Where an agent's reports go, as `fleetd member-report` reads them: the member's own
    /// gateway and token, in its (0600 launch script's) environment, never on argv.
    fn report_env(&self, p: &mut Parts) {
        if self.report_bin.is_some() {
            p.env.insert("FLEET_MCP_URL".into(), self.url.clone());
            p.env.insert("FLEET_MCP_TOKEN".into(), self.token.clone());
            p.reports = true;
        }
    }
}

/// The file an agent's reporter numbers its reports in, inside the agent's own (writable)
/// config dir.
pub(super) const REPORT_SEQ_FILE: &str = ".fleet-report-seq";

/// What a kind adds to the launch besides its argv and gate.
pub(super) struct Parts {
    pub env: BTreeMap<String, String>,
    pub files: Vec<(PathBuf, String)>,
    pub agent: Option<AgentPrep>,
    /// Its agent's own reports are installed.
    pub reports: bool,
}

type Planned = Result<(Vec<String>, Readiness), LaunchError>;

pub(super) fn claude_code(
    c: &Ctx<'_>,
    p: &mut Parts,
    bin: &str,
    base_url: &str,
    model: Option<&String>,
    args: &[String],
) -> Planned {
    guard(c.cfg, c.name, base_url)?;
    p.env
        .insert("ANTHROPIC_BASE_URL".into(), base_url.to_string());
    // Its own config dir: a member never sees the lead's `~/.claude` login, which is
    // the subscription the guard keeps it off.
    let config_dir = c.dir.join("claude");
    p.env
        .insert("CLAUDE_CONFIG_DIR".into(), path_arg(&config_dir));
    // No update checks, telemetry or error reports from an unattended member (the
    // profile may say otherwise).
    for (k, v) in CLAUDE_QUIET_ENV {
        p.env.entry(k.to_string()).or_insert_with(|| v.to_string());
    }
    // Its hooks report its turns (`fleetd member-report`): one shell command, every path
    // single-quoted.
    let report = c.report_bin.as_ref().map(|bin| {
        let seq = config_dir.join(REPORT_SEQ_FILE);
        format!(
            "{} member-report --agent claude-code --seq {}",
            sh_quote(bin),
            sh_quote(&path_arg(&seq))
        )
    });
    c.report_env(p);
    p.agent = Some(AgentPrep::ClaudeCode {
        config_dir,
        api_key: p.env.get("ANTHROPIC_API_KEY").cloned(),
        report,
    });
    let mcp = c.dir.join("mcp.json");
    let config = json!({ "mcpServers": { MCP_SERVER: {
        "type": "http", "url": c.url, "headers": c.headers(),
    }}});
    p.files.push((mcp.clone(), pretty(&config)));
    let mut argv = vec![
        bin.to_string(),
        "--mcp-config".into(),
        path_arg(&mcp),
        "--strict-mcp-config".into(),
    ];
    if let Some(m) = model {
        argv.extend(["--model".into(), m.clone()]);
    }
    if let Some(charter) = &c.profile.charter {
        argv.extend(["--append-system-prompt".into(), charter.clone()]);
    }
    argv.extend(args.iter().cloned());
    Ok((argv, Readiness::OnPrompt(StartRules::ClaudeCode)))
}

pub(super) fn codex(
    c: &Ctx<'_>,
    p: &mut Parts,
    bin: &str,
    base_url: &str,
    model: Option<&String>,
    args: &[String],
) -> Planned {
    guard(c.cfg, c.name, base_url)?;
    // Its own home: never the operator's `~/.codex` login or config.
    let home = c.dir.join("codex");
    p.env.insert("CODEX_HOME".into(), path_arg(&home));
    // Codex reads its MCP bearer from the environment only.
    p.env.insert(
        crate::herdr::agent_config::CODEX_MCP_TOKEN_ENV.into(),
        c.token.clone(),
    );
    // Its notify program reports each turn's end; Codex adds the event as the last argument.
    let notify = c.report_bin.as_ref().map(|bin| {
        vec![
            bin.clone(),
            "member-report".into(),
            "--agent".into(),
            "codex".into(),
            "--seq".into(),
            path_arg(&home.join(REPORT_SEQ_FILE)),
        ]
    });
    c.report_env(p);
    p.agent = Some(AgentPrep::Codex {
        notify,
        home,
        base_url: base_url.to_string(),
        model: model.cloned(),
        mcp_url: c.url.clone(),
        charter: c.profile.charter.clone(),
        sandboxed: c.boxed.is_some(),
    });
    let mut argv = vec![bin.to_string()];
    argv.extend(args.iter().cloned());
    Ok((argv, Readiness::OnPrompt(StartRules::Codex)))
}

pub(super) fn opencode(
    c: &Ctx<'_>,
    p: &mut Parts,
    bin: &str,
    model: Option<&String>,
    base_url: Option<&String>,
    args: &[String],
) -> Planned {
    let config_path = c.dir.join("opencode.json");
    let mut config = json!({
        "$schema": "https://opencode.ai/config.json",
        "mcp": { MCP_SERVER: {
            "type": "remote", "url": c.url, "enabled": true, "headers": c.headers(),
            "oauth": false,
        }},
        // Unattended: no update, no sharing, the fleet tools unprompted (a tool left
        // on "ask" draws a dialog nobody answers).
        "autoupdate": false,
        "share": "disabled",
        "permission": { format!("{MCP_SERVER}_*"): "allow" },
    });
    let mut model = model.cloned();
    if let Some(base) = base_url {
        guard(c.cfg, c.name, base)?;
        let Some(id) = model.clone() else {
            return Err(c.invalid("an opencode profile with base_url needs a model"));
        };
        config["provider"] = json!({ OPENCODE_PROVIDER: {
            "npm": "@ai-sdk/openai-compatible",
            "name": "fleetd's model endpoint",
            "options": { "baseURL": base, "apiKey": "{env:OPENAI_API_KEY}" },
            "models": { id.clone(): { "name": id } },
        }});
        model = Some(format!("{OPENCODE_PROVIDER}/{id}"));
        config["model"] = json!(model);
    }
    if let Some(text) = &c.profile.charter {
        let charter = c.dir.join("charter.md");
        p.files.push((charter.clone(), text.clone()));
        config["instructions"] = json!([path_arg(&charter)]);
    }
    if let Some(bin) = &c.report_bin {
        opencode_reports(c, p, bin, &mut config);
    }
    p.files.push((config_path.clone(), pretty(&config)));
    p.env
        .insert("OPENCODE_CONFIG".into(), path_arg(&config_path));
    for (k, v) in OPENCODE_QUIET_ENV {
        p.env.entry(k.to_string()).or_insert_with(|| v.to_string());
    }
    let mut argv = vec![bin.to_string()];
    if let Some(m) = &model {
        argv.extend(["-m".into(), m.clone()]);
    }
    argv.extend(args.iter().cloned());
    Ok((argv, Readiness::OnPrompt(StartRules::OpenCode)))
}

pub(super) fn command(c: &Ctx<'_>, p: &mut Parts, argv: &[String]) -> Planned {
    if argv.is_empty() {
        return Err(c.invalid("a command profile needs an argv"));
    }
    p.env.insert("FLEET_MCP_URL".into(), c.url.clone());
    // A program has no MCP config file to read it from; the environment is the
    // program's own, set by the 0600 launch script (never argv, which any user can
    // list).
    p.env.insert("FLEET_MCP_TOKEN".into(), c.token.clone());
    Ok((argv.to_vec(), Readiness::OnInjectable))
}

/// `s` single-quoted for a POSIX shell.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// An opencode member's report plugin (`opencode-report.js`), loaded by its path from the
/// member's config: it runs `fleetd member-report --agent opencode` with each event on stdin.
const OPENCODE_PLUGIN: &str = include_str!("../opencode-report.js");

/// The plugin installed, and (in a sandbox, where its home is its own) the config dir's plugin
/// dependencies marked present: opencode otherwise installs `@opencode-ai/plugin` from npm
/// before it loads any plugin, and its screen stays blank until it has (the plugin imports
/// nothing).
fn opencode_reports(c: &Ctx<'_>, p: &mut Parts, bin: &str, config: &mut serde_json::Value) {
    let home = c.dir.join("home");
    let seq_file = home.join(REPORT_SEQ_FILE);
    let seq = path_arg(&seq_file);
    // Made here: an unsandboxed member's home is the daemon's, and this directory its own.
    p.files.push((seq_file, String::new()));
    let plugin = c.dir.join("fleet-report.js");
    let js = OPENCODE_PLUGIN
        .replacen("__REPORT_BIN__", &json!(bin).to_string(), 1)
        .replacen("__SEQ_FILE__", &json!(seq).to_string(), 1);
    p.files.push((plugin.clone(), js));
    config["plugin"] = json!([path_arg(&plugin)]);
    if c.boxed.is_some() {
        let own = home.join(".config/opencode");
        let lock = json!({"lockfileVersion": 3, "requires": true, "packages": {"": {
            "dependencies": {"@opencode-ai/plugin": OPENCODE_CHECKED}}}});
        p.files
            .push((own.join("package-lock.json"), lock.to_string()));
        p.files
            .push((own.join("node_modules/.fleetd"), String::new()));
    }
    c.report_env(p);
}

/// The opencode release its plugin API was checked against.
const OPENCODE_CHECKED: &str = "1.18.33";

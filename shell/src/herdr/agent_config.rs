//! What an agent CLI needs in its own config dir to start unattended: at its prompt, with no
//! first-run screen, this gateway's MCP tools allowed and nothing else widened.
//!
//! Every key here was checked against the version named beside it (docs/members.md says how
//! to check a new one). An operator's template dir (`config_template`) is copied first, so a
//! site's own settings stay; fleetd's keys are merged over it.

use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// The Claude Code release these keys were checked against.
pub const CLAUDE_CODE_CHECKED: &str = "2.1.328";

/// How many characters of an API key Claude Code records when a person approves it
/// (`customApiKeyResponses.approved`): the key's last 20.
const CLAUDE_KEY_TAIL: usize = 20;

/// What a claude-code member's config dir (`CLAUDE_CONFIG_DIR`) is prepared from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaudeSetup {
    /// The member's config dir.
    pub config_dir: PathBuf,
    /// Every path the member may start in (its cwd as given, and as resolved): each trusted.
    pub trusted: Vec<String>,
    /// `ANTHROPIC_API_KEY` from the profile, approved so Claude Code does not ask about it.
    pub api_key: Option<String>,
    /// The MCP server name whose tools are allowed (`mcp__<name>`).
    pub mcp_server: String,
    /// The shell command its hooks run to report its turns (`fleetd member-report`).
    pub report: Option<String>,
}

/// The Claude Code hook events a member reports, each as `fleetd member-report` reads it:
/// its session up, a prompt taken, its turn's end (with `last_assistant_message`), a turn
/// ended on an API error, and a notification (a permission prompt, an elicitation).
pub const CLAUDE_REPORTED_HOOKS: [&str; 5] = [
    "SessionStart",
    "UserPromptSubmit",
    "Stop",
    "StopFailure",
    "Notification",
];

/// How long Claude Code lets a reporting hook run (seconds): the reporter gives up sooner.
const CLAUDE_HOOK_TIMEOUT_S: u64 = 10;

/// Why an agent's config could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error("config_template {path}: {why}")]
    Template { path: String, why: String },
    #[error("config_template {path}: {file} is not a JSON object")]
    NotAnObject { path: String, file: String },
}

/// The most a template may hold: it is copied into every member's config dir.
const TEMPLATE_MAX_FILES: usize = 256;
const TEMPLATE_MAX_BYTES: u64 = 8 * 1024 * 1024;
const TEMPLATE_MAX_DEPTH: usize = 6;

impl ClaudeSetup {
    /// The files of the member's config dir: the template's, then `.claude.json` and
    /// `settings.json` with fleetd's keys merged over the template's.
    ///
    /// - `.claude.json`: `hasCompletedOnboarding` (no theme picker, and no connectivity check
    ///   of api.anthropic.com, which exits with no network), `projects.<cwd>.
    ///   hasTrustDialogAccepted` (no "Do you trust the files in this folder?", whose default
    ///   answer exits), `customApiKeyResponses.approved` (no "Detected a custom API key", whose
    ///   default is to refuse it); `hasSeenAutoDefaultNotice` (no one-time banner).
    /// - `settings.json`: `permissions.allow` gains `mcp__<server>` — the fleet tools run
    ///   without a prompt; nothing else is allowed that the template did not allow.
    pub fn files(&self, template: Option<&Path>) -> Result<Vec<(PathBuf, String)>, PrepareError> {
        let mut files = match template {
            Some(t) => reroot(&self.config_dir, read_template(t)?),
            None => Vec::new(),
        };
        let state = self.config_dir.join(".claude.json");
        let settings = self.config_dir.join("settings.json");
        let mut state_json = take_object(&mut files, &state, template)?;
        let mut settings_json = take_object(&mut files, &settings, template)?;
        self.merge_state(&mut state_json);
        self.merge_settings(&mut settings_json);
        files.push((state, pretty(&Value::Object(state_json))));
        files.push((settings, pretty(&Value::Object(settings_json))));
        Ok(files)
    }

    fn merge_state(&self, s: &mut Map<String, Value>) {
        s.insert("hasCompletedOnboarding".into(), json!(true));
        // The one-time "Auto mode is now the default" banner: chrome on the first screen.
        s.insert("hasSeenAutoDefaultNotice".into(), json!(true));
        let projects = object_at(s, "projects");
        for path in &self.trusted {
            let p = object_at(projects, path);
            p.insert("hasTrustDialogAccepted".into(), json!(true));
        }
        if let Some(key) = &self.api_key {
            // As Claude Code records an approval: the trimmed key's last 20 characters.
            let key = key.trim();
            let tail: String = {
                let n = key.chars().count();
                key.chars()
                    .skip(n.saturating_sub(CLAUDE_KEY_TAIL))
                    .collect()
            };
            let responses = object_at(s, "customApiKeyResponses");
            let approved = array_at(responses, "approved");
            if !approved.iter().any(|v| v.as_str() == Some(tail.as_str())) {
                approved.push(json!(tail));
            }
            let rejected = array_at(responses, "rejected");
            rejected.retain(|v| v.as_str() != Some(tail.as_str()));
        }
    }

    fn merge_settings(&self, s: &mut Map<String, Value>) {
        let permissions = object_at(s, "permissions");
        let allow = array_at(permissions, "allow");
        let rule = format!("mcp__{}", self.mcp_server);
        if !allow.iter().any(|v| v.as_str() == Some(rule.as_str())) {
            allow.push(json!(rule));
        }
        // The hooks that report its turns, after the template's own for each event.
        if let Some(command) = &self.report {
            let hooks = object_at(s, "hooks");
            for event in CLAUDE_REPORTED_HOOKS {
                array_at(hooks, event).push(json!({
                    "hooks": [{
                        "type": "command",
                        "command": command,
                        "timeout": CLAUDE_HOOK_TIMEOUT_S,
                    }]
                }));
            }
        }
    }
}

/// The Codex release these keys were checked against.
pub const CODEX_CHECKED: &str = "0.171.0";

/// The provider id fleetd gives a Codex member's model endpoint in its `config.toml`.
pub const CODEX_PROVIDER: &str = "fleet";

/// The variable a Codex member reads its model key from (the profile's `env` sets it).
pub const CODEX_KEY_ENV: &str = "OPENAI_API_KEY";

/// The variable a Codex member reads its fleet MCP token from (`bearer_token_env_var`; Codex
/// refuses a token written in its config).
pub const CODEX_MCP_TOKEN_ENV: &str = "FLEET_MCP_TOKEN";

/// What a codex member's home (`CODEX_HOME`) is prepared from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodexSetup {
    pub home: PathBuf,
    /// Every path the member may start in: each trusted.
    pub trusted: Vec<String>,
    /// The model endpoint (`base_url` of its provider; Responses API).
    pub base_url: String,
    pub model: Option<String>,
    /// This gateway's MCP URL as the member reaches it.
    pub mcp_url: String,
    /// The member's standing instructions, as its global `AGENTS.md`.
    pub charter: Option<String>,
    /// fleetd runs it in its own sandbox: Codex's sandbox (bubblewrap again, inside) is off.
    pub sandboxed: bool,
    /// Its `notify` program (`fleetd member-report`), which reports each turn's end.
    pub notify: Option<Vec<String>>,
}

impl CodexSetup {
    /// The files of the member's `CODEX_HOME`: the template's, then `config.toml` with fleetd's
    /// keys set over the template's (checked against Codex 0.171.0):
    ///
    /// - `model_provider` = `fleet`, `[model_providers.fleet]` (`base_url`, `env_key`,
    ///   `wire_api = "responses"`): the endpoint, no login;
    /// - `[projects."<cwd>"] trust_level = "trusted"`: no "Folder access … Trust this folder?";
    /// - `approval_policy = "never"`, and `default_tools_approval_mode = "approve"` on the fleet
    ///   server: no prompt before a fleet tool (nor any other: an unattended member has no
    ///   one to ask — fleetd's sandbox is what bounds it);
    /// - `sandbox_mode`: `danger-full-access` inside fleetd's sandbox, else `workspace-write`;
    /// - `[features] daemon_auto_start = false`: else the TUI copies itself (424 MB) into
    ///   `CODEX_HOME` and leaves a daemon that outlives the pane, keeping the first launch's
    ///   environment (its token) for the next;
    /// - `disable_paste_burst = true`: else an Enter right after the typed brief is taken as
    ///   part of a paste, and nothing is sent;
    /// - `check_for_update_on_startup = false`.
    pub fn files(&self, template: Option<&Path>) -> Result<Vec<(PathBuf, String)>, PrepareError> {
        let mut files = match template {
            Some(t) => reroot(&self.home, read_template(t)?),
            None => Vec::new(),
        };
        let path = self.home.join("config.toml");
        let mut config: toml::Table = match files.iter().position(|(p, _)| p == &path) {
            Some(i) => {
                let (_, text) = files.remove(i);
                text.parse()
                    .map_err(|e: toml::de::Error| PrepareError::Template {
                        path: template
                            .map(|t| t.display().to_string())
                            .unwrap_or_default(),
                        why: format!("config.toml: {}", e.message()),
                    })?
            }
            None => toml::Table::new(),
        };
        self.merge(&mut config);
        files.push((path, config.to_string()));
        if let Some(c) = &self.charter {
            files.push((self.home.join("AGENTS.md"), c.clone()));
        }
        Ok(files)
    }

    fn merge(&self, c: &mut toml::Table) {
        use toml::Value as V;
        if let Some(m) = &self.model {
            c.insert("model".into(), V::String(m.clone()));
        }
        c.insert("model_provider".into(), V::String(CODEX_PROVIDER.into()));
        c.insert("approval_policy".into(), V::String("never".into()));
        let sandbox = if self.sandboxed {
            "danger-full-access"
        } else {
            "workspace-write"
        };
        c.insert("sandbox_mode".into(), V::String(sandbox.into()));
        c.insert("check_for_update_on_startup".into(), V::Boolean(false));
        c.insert("disable_paste_burst".into(), V::Boolean(true));
        if let Some(argv) = &self.notify {
            let argv = argv.iter().map(|a| V::String(a.clone())).collect();
            c.insert("notify".into(), V::Array(argv));
        }
        table_at(c, "features").insert("daemon_auto_start".into(), V::Boolean(false));
        let provider = table_at(table_at(c, "model_providers"), CODEX_PROVIDER);
        provider.insert("name".into(), V::String("fleetd's model endpoint".into()));
        provider.insert("base_url".into(), V::String(self.base_url.clone()));
        provider.insert("env_key".into(), V::String(CODEX_KEY_ENV.into()));
        provider.insert("wire_api".into(), V::String("responses".into()));
        let projects = table_at(c, "projects");
        for p in &self.trusted {
            table_at(projects, p).insert("trust_level".into(), V::String("trusted".into()));
        }
        let fleet = table_at(table_at(c, "mcp_servers"), super::launch::MCP_SERVER);
        fleet.insert("url".into(), V::String(self.mcp_url.clone()));
        fleet.insert(
            "bearer_token_env_var".into(),
            V::String(CODEX_MCP_TOKEN_ENV.into()),
        );
        fleet.insert(
            "default_tools_approval_mode".into(),
            V::String("approve".into()),
        );
    }
}

/// The table under `key`, made (or made a table) if it is not one.
fn table_at<'a>(t: &'a mut toml::Table, key: &str) -> &'a mut toml::Table {
    let v = t
        .entry(key.to_string())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if !v.is_table() {
        *v = toml::Value::Table(toml::Table::new());
    }
    match v {
        toml::Value::Table(t) => t,
        _ => unreachable!("made a table above"),
    }
}

/// The object under `key`, made (or made an object) if it is not one.
fn object_at<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let v = m
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(o) => o,
        _ => unreachable!("made an object above"),
    }
}

fn array_at<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Vec<Value> {
    let v = m
        .entry(key.to_string())
        .or_insert_with(|| Value::Array(Vec::new()));
    if !v.is_array() {
        *v = Value::Array(Vec::new());
    }
    match v {
        Value::Array(a) => a,
        _ => unreachable!("made an array above"),
    }
}

/// Takes `path` out of `files` as a JSON object (an empty one when the template has none).
fn take_object(
    files: &mut Vec<(PathBuf, String)>,
    path: &Path,
    template: Option<&Path>,
) -> Result<Map<String, Value>, PrepareError> {
    let Some(i) = files.iter().position(|(p, _)| p == path) else {
        return Ok(Map::new());
    };
    let (_, text) = files.remove(i);
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(o)) => Ok(o),
        _ => Err(PrepareError::NotAnObject {
            path: template
                .map(|t| t.display().to_string())
                .unwrap_or_default(),
            file: path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }),
    }
}

/// Every regular file under `dir` as (its path relative to `dir`, its text). Symlinks are
/// refused: a template is copied, never followed out.
fn read_template(dir: &Path) -> Result<Vec<(PathBuf, String)>, PrepareError> {
    let err = |why: String| PrepareError::Template {
        path: dir.display().to_string(),
        why,
    };
    let mut out = Vec::new();
    let mut total = 0u64;
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    while let Some((at, depth)) = stack.pop() {
        let entries = std::fs::read_dir(&at).map_err(|e| err(format!("{}: {e}", at.display())))?;
        let mut entries: Vec<_> = entries
            .collect::<Result<_, _>>()
            .map_err(|e| err(format!("{}: {e}", at.display())))?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let meta = std::fs::symlink_metadata(&path)
                .map_err(|x| err(format!("{}: {x}", path.display())))?;
            if meta.file_type().is_symlink() {
                return Err(err(format!("{} is a symlink", path.display())));
            } else if meta.is_dir() {
                if depth + 1 > TEMPLATE_MAX_DEPTH {
                    return Err(err(format!("deeper than {TEMPLATE_MAX_DEPTH} levels")));
                }
                stack.push((path, depth + 1));
            } else if meta.is_file() {
                total += meta.len();
                if out.len() >= TEMPLATE_MAX_FILES || total > TEMPLATE_MAX_BYTES {
                    return Err(err(format!(
                        "more than {TEMPLATE_MAX_FILES} files or {TEMPLATE_MAX_BYTES} bytes"
                    )));
                }
                let text = std::fs::read_to_string(&path)
                    .map_err(|x| err(format!("{}: {x}", path.display())))?;
                let rel = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
                out.push((rel, text));
            }
        }
    }
    Ok(out)
}

/// A template's files re-rooted in `config_dir`.
fn reroot(config_dir: &Path, files: Vec<(PathBuf, String)>) -> Vec<(PathBuf, String)> {
    files
        .into_iter()
        .map(|(p, t)| (config_dir.join(p), t))
        .collect()
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(dir: &Path) -> ClaudeSetup {
        ClaudeSetup {
            config_dir: dir.join("claude"),
            trusted: vec!["/srv/app".into()],
            api_key: Some(" sk-ant-test-0123456789abcdefghijklmnop\n".into()),
            mcp_server: "fleet".into(),
            report: None,
        }
    }

    fn json_of(files: &[(PathBuf, String)], name: &str) -> Value {
        let (_, text) = files
            .iter()
            .find(|(p, _)| p.ends_with(name))
            .unwrap_or_else(|| panic!("{name} written"));
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// Every key that skips a Claude Code 2.1.328 first-run screen, and only the fleet tools
    /// allowed.
    #[test]
    fn a_fresh_claude_config_skips_every_first_run_screen() {
        let dir = Path::new("/run/fleetd/members/g1");
        let files = setup(dir).files(None).expect("prepared");
        assert!(files.iter().all(|(p, _)| p.starts_with(dir.join("claude"))));
        let state = json_of(&files, ".claude.json");
        assert_eq!(state["hasCompletedOnboarding"], json!(true));
        assert_eq!(state["hasSeenAutoDefaultNotice"], json!(true));
        assert_eq!(
            state["projects"]["/srv/app"]["hasTrustDialogAccepted"],
            json!(true)
        );
        assert_eq!(
            state["customApiKeyResponses"]["approved"],
            json!(["6789abcdefghijklmnop"])
        );
        let settings = json_of(&files, "settings.json");
        assert_eq!(settings, json!({"permissions": {"allow": ["mcp__fleet"]}}));
    }

    /// An operator's template stays: its own files are copied, its settings kept, fleetd's
    /// keys merged over them (a key it had rejected is approved for this member).
    #[test]
    fn a_template_is_kept_and_fleetds_keys_merged_over_it() {
        let t = std::env::temp_dir().join(format!("fleetd-template-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        std::fs::create_dir_all(t.join("agents")).expect("template dir");
        let write = |p: &str, s: &str| std::fs::write(t.join(p), s).expect("template file");
        write("agents/reviewer.md", "review things");
        write(
            "settings.json",
            r#"{"permissions": {"allow": ["Bash(cargo test:*)"]}, "model": "sonnet"}"#,
        );
        write(
            ".claude.json",
            r#"{"customApiKeyResponses": {"rejected": ["6789abcdefghijklmnop"]}, "theme": "dark"}"#,
        );
        let dir = Path::new("/m/g1");
        let files = setup(dir).files(Some(&t)).expect("prepared");
        let agents = files
            .iter()
            .find(|(p, _)| p == &dir.join("claude/agents/reviewer.md"));
        assert_eq!(agents.map(|(_, s)| s.as_str()), Some("review things"));
        let settings = json_of(&files, "settings.json");
        assert_eq!(
            settings["permissions"]["allow"],
            json!(["Bash(cargo test:*)", "mcp__fleet"])
        );
        assert_eq!(settings["model"], json!("sonnet"));
        let state = json_of(&files, ".claude.json");
        assert_eq!(state["theme"], json!("dark"));
        assert_eq!(state["customApiKeyResponses"]["rejected"], json!([]));
        // A template file that is not a JSON object is refused, by name.
        write("settings.json", "[1]");
        let e = setup(dir).files(Some(&t)).expect_err("refused");
        assert!(e.to_string().contains("settings.json"), "{e}");
        // A symlink is refused: a template is copied, never followed out.
        write("settings.json", "{}");
        std::os::unix::fs::symlink("/etc/passwd", t.join("leak")).expect("symlink");
        let e = setup(dir).files(Some(&t)).expect_err("refused");
        assert!(e.to_string().contains("symlink"), "{e}");
        let _ = std::fs::remove_dir_all(&t);
    }
}

#[cfg(test)]
mod codex_tests {
    use super::*;

    fn setup(sandboxed: bool) -> CodexSetup {
        CodexSetup {
            home: PathBuf::from("/m/g1/codex"),
            trusted: vec!["/srv/app".into()],
            base_url: "http://127.0.0.1:9/v1".into(),
            model: Some("gpt-5".into()),
            mcp_url: "http://127.0.0.1:7700/mcp".into(),
            charter: Some("reply with fleet_reply".into()),
            sandboxed,
            notify: None,
        }
    }

    fn config(files: &[(PathBuf, String)]) -> toml::Table {
        let (_, text) = files
            .iter()
            .find(|(p, _)| p.ends_with("config.toml"))
            .expect("config.toml written");
        text.parse().unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    /// Every key Codex 0.171.0 needs to start unattended, and the token only by reference.
    #[test]
    fn a_fresh_codex_home_starts_unattended_with_no_daemon() {
        let files = setup(true).files(None).expect("prepared");
        let c = config(&files);
        let get = |path: &[&str]| {
            let mut v = toml::Value::Table(c.clone());
            for k in path {
                v = v.get(k).cloned().unwrap_or_else(|| panic!("no {path:?}"));
            }
            v
        };
        assert_eq!(get(&["model_provider"]).as_str(), Some(CODEX_PROVIDER));
        assert_eq!(get(&["model"]).as_str(), Some("gpt-5"));
        assert_eq!(
            get(&["model_providers", "fleet", "base_url"]).as_str(),
            Some("http://127.0.0.1:9/v1")
        );
        assert_eq!(
            get(&["model_providers", "fleet", "wire_api"]).as_str(),
            Some("responses")
        );
        assert_eq!(
            get(&["model_providers", "fleet", "env_key"]).as_str(),
            Some(CODEX_KEY_ENV)
        );
        assert_eq!(
            get(&["projects", "/srv/app", "trust_level"]).as_str(),
            Some("trusted")
        );
        assert_eq!(get(&["approval_policy"]).as_str(), Some("never"));
        assert_eq!(get(&["sandbox_mode"]).as_str(), Some("danger-full-access"));
        assert_eq!(
            get(&["features", "daemon_auto_start"]).as_bool(),
            Some(false)
        );
        assert_eq!(get(&["disable_paste_burst"]).as_bool(), Some(true));
        assert_eq!(
            get(&["mcp_servers", "fleet", "bearer_token_env_var"]).as_str(),
            Some(CODEX_MCP_TOKEN_ENV)
        );
        assert_eq!(
            get(&["mcp_servers", "fleet", "default_tools_approval_mode"]).as_str(),
            Some("approve")
        );
        let agents = files.iter().find(|(p, _)| p.ends_with("AGENTS.md"));
        assert_eq!(
            agents.map(|(_, s)| s.as_str()),
            Some("reply with fleet_reply")
        );
        // Outside fleetd's sandbox, Codex keeps its own.
        let c = config(&setup(false).files(None).expect("prepared"));
        assert_eq!(c["sandbox_mode"].as_str(), Some("workspace-write"));
    }
}

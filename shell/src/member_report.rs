//! `fleetd member-report --agent <kind>`: run by an agent's own lifecycle reports, which fleetd
//! installs in a member's prepared config (Claude Code's hooks, Codex's `notify`). It reads
//! what the agent says — a Claude Code hook's event on stdin, Codex's notify event as its last
//! argument —, turns it into one `AgentReport` and posts it to the member's own gateway with
//! the member's own token (`FLEET_MCP_URL`, `FLEET_MCP_TOKEN`, `FLEET_GID` from the member's
//! environment: nothing on argv, nothing widened).
//!
//! It never stands in the agent's way: it prints nothing on stdout (a Claude Code hook's
//! stdout may be read as a decision), waits at most `POST_TIMEOUT` for the gateway, and exits 0
//! whatever happened, saying why on stderr.

use fleet_core::agent_report::{AgentEvent, AgentReport};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The most of an event read from an agent (a hook's stdin, notify's argument).
const EVENT_MAX: usize = 4 * 1024 * 1024;
/// How much of a transcript's end is read for a turn's final text, when the event lacks it.
const TRANSCRIPT_TAIL: u64 = 8 * 1024 * 1024;
/// How long the gateway has to take the report: the agent waits on its hook.
const POST_TIMEOUT: Duration = Duration::from_secs(3);

/// Which agent's words these are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agent {
    ClaudeCode,
    Codex,
    OpenCode,
}

impl std::str::FromStr for Agent {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "claude-code" => Ok(Agent::ClaudeCode),
            "codex" => Ok(Agent::Codex),
            "opencode" => Ok(Agent::OpenCode),
            other => Err(format!("no reports from agent kind {other:?}")),
        }
    }
}

/// What an agent's event says, as a report without its number. `None`: nothing to report
/// (an event fleetd does not act on).
pub fn event_of(agent: Agent, raw: &str) -> Result<Option<(Option<String>, AgentEvent)>, String> {
    let v: Value = serde_json::from_str(raw).map_err(|e| format!("the event is not JSON: {e}"))?;
    if !v.is_object() {
        return Err("the event is not a JSON object".into());
    }
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    match agent {
        Agent::ClaudeCode => {
            let session = text("session_id");
            let event = match v.get("hook_event_name").and_then(Value::as_str) {
                Some("SessionStart") => AgentEvent::Ready,
                Some("UserPromptSubmit") => AgentEvent::TurnStarted {
                    prompt: text("prompt").unwrap_or_default(),
                },
                Some("Stop") => AgentEvent::TurnEnded {
                    prompt: None,
                    text: match text("last_assistant_message") {
                        Some(t) => t,
                        None => text("transcript_path")
                            .and_then(|p| last_assistant_text(Path::new(&p)))
                            .unwrap_or_default(),
                    },
                },
                // Claude Code's own names for a refusal it does not retry past.
                Some("StopFailure") => {
                    let error = text("error").unwrap_or_else(|| "unknown".into());
                    let limit = matches!(error.as_str(), "rate_limit" | "billing_error");
                    // Its own words: the details, else what it showed (2.1.328 calls a spend
                    // limit's 400 `unknown`, with the API's message as its last text).
                    let said = text("error_details").or_else(|| text("last_assistant_message"));
                    let words = match said {
                        Some(d) => format!("{error}: {d}"),
                        None => error,
                    };
                    AgentEvent::TurnFailed {
                        prompt: None,
                        limit,
                        words,
                    }
                }
                Some("Notification") => match text("notification_type").as_deref() {
                    Some(
                        "permission_prompt"
                        | "worker_permission_prompt"
                        | "elicitation_dialog"
                        | "elicitation_url_dialog"
                        | "agent_needs_input",
                    ) => AgentEvent::Waiting {
                        words: text("message").unwrap_or_default(),
                    },
                    _ => return Ok(None),
                },
                _ => return Ok(None),
            };
            Ok(Some((session, event)))
        }
        // fleetd's own plugin (`opencode-report.js`) says it in fleetd's words already.
        Agent::OpenCode => {
            let session = text("session");
            let words = || text("words").unwrap_or_default();
            let limit = v.get("limit").and_then(Value::as_bool).unwrap_or(false);
            let event = match v.get("kind").and_then(Value::as_str) {
                Some("ready") => AgentEvent::Ready,
                Some("busy") => match text("prompt") {
                    Some(prompt) => AgentEvent::TurnStarted { prompt },
                    None => return Ok(None),
                },
                Some("idle") => AgentEvent::TurnEnded {
                    prompt: text("prompt"),
                    text: text("text").unwrap_or_default(),
                },
                // Still retrying: its turn goes on.
                Some("error") if v.get("retrying").and_then(Value::as_bool) == Some(true) => {
                    AgentEvent::ProviderError {
                        limit,
                        words: words(),
                    }
                }
                Some("error") => AgentEvent::TurnFailed {
                    prompt: None,
                    limit,
                    words: words(),
                },
                Some("permission") => AgentEvent::Waiting { words: words() },
                _ => return Ok(None),
            };
            Ok(Some((session, event)))
        }
        Agent::Codex => {
            if v.get("type").and_then(Value::as_str) != Some("agent-turn-complete") {
                return Ok(None);
            }
            // Every prompt of the thread so far (checked on 0.171.0): this turn's is the last.
            let prompt = v
                .get("input-messages")
                .and_then(Value::as_array)
                .and_then(|m| m.iter().rev().find_map(Value::as_str))
                .map(str::to_string);
            Ok(Some((
                text("thread-id"),
                AgentEvent::TurnEnded {
                    prompt,
                    text: text("last-assistant-message").unwrap_or_default(),
                },
            )))
        }
    }
}

/// The last assistant message's text in a Claude Code transcript (JSON lines), read from its
/// end: what a `Stop` event without `last_assistant_message` ended on.
fn last_assistant_text(path: &Path) -> Option<String> {
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(TRANSCRIPT_TAIL)))
        .ok()?;
    let mut buf = Vec::new();
    f.take(TRANSCRIPT_TAIL).read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    text.lines().rev().find_map(|line| {
        let v: Value = serde_json::from_str(line).ok()?;
        if v.get("type").and_then(Value::as_str) != Some("assistant") {
            return None;
        }
        let parts: Vec<&str> = v
            .pointer("/message/content")?
            .as_array()?
            .iter()
            .filter(|c| c.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|c| c.get("text").and_then(Value::as_str))
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n"))
    })
}

/// The next report number of this member, kept in `file` (in the agent's own writable config
/// dir) under an exclusive lock: reports from concurrent hooks are numbered apart, and the
/// gateway takes them in that order.
pub fn next_seq(file: &Path) -> std::io::Result<u64> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(file)?;
    f.lock()?;
    let mut s = String::new();
    f.read_to_string(&mut s)?;
    let next = s.trim().parse::<u64>().unwrap_or(0).saturating_add(1);
    f.set_len(0)?;
    use std::io::Seek;
    f.seek(std::io::SeekFrom::Start(0))?;
    f.write_all(next.to_string().as_bytes())?;
    f.sync_data()?;
    Ok(next)
}

/// Where a report goes: the gateway's address and the member's report path, from its MCP URL
/// (`http://host:port/…/mcp`).
fn report_target(mcp_url: &str, gid: &str) -> Result<(String, String), String> {
    let rest = mcp_url.strip_prefix("http://").ok_or_else(|| {
        format!("FLEET_MCP_URL {mcp_url:?} is not plain http (reports go to a local gateway)")
    })?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let base = path.strip_suffix("/mcp").unwrap_or("");
    if authority.is_empty() || !fleetd_safe(gid) {
        return Err(format!("FLEET_GID {gid:?} or FLEET_MCP_URL is not usable"));
    }
    Ok((
        authority.to_string(),
        format!("{base}/sessions/{gid}/report"),
    ))
}

fn fleetd_safe(gid: &str) -> bool {
    crate::herdr::launch::safe_gid(gid)
}

/// Posts `body` to the member's gateway; its answer's status line and body.
fn post(authority: &str, path: &str, token: &str, body: &[u8]) -> Result<String, String> {
    use std::net::ToSocketAddrs;
    let addr = authority
        .to_socket_addrs()
        .map_err(|e| format!("{authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("{authority}: no address"))?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, POST_TIMEOUT)
        .map_err(|e| format!("{authority}: {e}"))?;
    let _ = s.set_read_timeout(Some(POST_TIMEOUT));
    let _ = s.set_write_timeout(Some(POST_TIMEOUT));
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(body))
        .map_err(|e| format!("sending: {e}"))?;
    let mut answer = Vec::new();
    let _ = s.take(64 * 1024).read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.lines().next().unwrap_or("").to_string();
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").trim();
    if status.split(' ').nth(1) == Some("200") {
        Ok(body.to_string())
    } else {
        Err(format!("{status} {body}"))
    }
}

/// `fleetd member-report`: always exits 0 (an agent's hook must not fail its turn).
pub fn run(agent: &str, seq_file: Option<PathBuf>, arg: Option<String>) -> std::process::ExitCode {
    if let Err(why) = report(agent, seq_file, arg) {
        eprintln!("fleetd member-report: {why}");
    }
    std::process::ExitCode::SUCCESS
}

fn report(agent: &str, seq_file: Option<PathBuf>, arg: Option<String>) -> Result<(), String> {
    let agent: Agent = agent.parse()?;
    let raw = match arg {
        Some(a) => a,
        None => {
            let mut s = String::new();
            std::io::stdin()
                .take(EVENT_MAX as u64)
                .read_to_string(&mut s)
                .map_err(|e| format!("reading the event: {e}"))?;
            s
        }
    };
    if raw.len() > EVENT_MAX {
        return Err(format!("the event is over {EVENT_MAX} bytes"));
    }
    // A diagnosis aid (a profile's `env`): each event as the agent gave it, one per line.
    if let Some(path) = std::env::var_os("FLEET_REPORT_TRACE") {
        let line = format!("{}\n", raw.replace('\n', " "));
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }
    let Some((session, event)) = event_of(agent, &raw)? else {
        return Ok(());
    };
    let var = |k: &str| std::env::var(k).map_err(|_| format!("{k} is not set"));
    let (url, token, gid) = (
        var("FLEET_MCP_URL")?,
        var("FLEET_MCP_TOKEN")?,
        var("FLEET_GID")?,
    );
    let seq = match &seq_file {
        Some(f) => next_seq(f).map_err(|e| format!("{}: {e}", f.display()))?,
        None => return Err("no --seq file".into()),
    };
    let report = AgentReport {
        seq,
        session,
        event,
    };
    let body = serde_json::to_vec(&report).map_err(|e| e.to_string())?;
    let (authority, path) = report_target(&url, &gid)?;
    post(&authority, &path, &token, &body).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_codes_hooks_become_reports() {
        let stop = r#"{"session_id":"s1","transcript_path":"/nope","hook_event_name":"Stop",
            "stop_hook_active":false,"last_assistant_message":"all done"}"#;
        assert_eq!(
            event_of(Agent::ClaudeCode, stop),
            Ok(Some((
                Some("s1".into()),
                AgentEvent::TurnEnded {
                    prompt: None,
                    text: "all done".into()
                }
            )))
        );
        let prompt =
            r#"{"session_id":"s1","hook_event_name":"UserPromptSubmit","prompt":"fix it"}"#;
        assert_eq!(
            event_of(Agent::ClaudeCode, prompt).map(|e| e.map(|(_, e)| e)),
            Ok(Some(AgentEvent::TurnStarted {
                prompt: "fix it".into()
            }))
        );
        let failure = r#"{"session_id":"s1","hook_event_name":"StopFailure","error":"rate_limit",
            "error_details":"429 Too Many Requests"}"#;
        assert_eq!(
            event_of(Agent::ClaudeCode, failure).map(|e| e.map(|(_, e)| e)),
            Ok(Some(AgentEvent::TurnFailed {
                prompt: None,
                limit: true,
                words: "rate_limit: 429 Too Many Requests".into()
            }))
        );
        let permission = r#"{"session_id":"s1","hook_event_name":"Notification",
            "message":"Claude needs your permission to use Bash","notification_type":"permission_prompt"}"#;
        assert!(matches!(
            event_of(Agent::ClaudeCode, permission),
            Ok(Some((_, AgentEvent::Waiting { .. })))
        ));
        let idle = r#"{"session_id":"s1","hook_event_name":"Notification","message":"waiting",
            "notification_type":"idle_prompt"}"#;
        assert_eq!(event_of(Agent::ClaudeCode, idle), Ok(None));
        assert!(event_of(Agent::ClaudeCode, "[1]").is_err());
        assert!(event_of(Agent::ClaudeCode, "not json").is_err());
    }

    #[test]
    fn a_stop_without_its_text_reads_the_transcripts_last_answer() {
        let dir = std::env::temp_dir().join(format!("fleetd-transcript-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let t = dir.join("t.jsonl");
        std::fs::write(
            &t,
            concat!(
                r#"{"type":"user","message":{"role":"user","content":"hi"}}"#,
                "\n",
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"first"}]}}"#,
                "\n",
                r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"x"}]}}"#,
                "\n",
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"last"}]}}"#,
                "\n",
                r#"{"type":"system","content":"x"}"#,
                "\n"
            ),
        )
        .expect("transcript");
        let stop = format!(
            r#"{{"session_id":"s","hook_event_name":"Stop","transcript_path":{:?}}}"#,
            t.display().to_string()
        );
        assert_eq!(
            event_of(Agent::ClaudeCode, &stop).map(|e| e.map(|(_, e)| e)),
            Ok(Some(AgentEvent::TurnEnded {
                prompt: None,
                text: "last".into()
            }))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn opencodes_plugin_events_become_reports() {
        let idle = r#"{"kind":"idle","session":"ses_1","prompt":"p","text":"All done."}"#;
        assert_eq!(
            event_of(Agent::OpenCode, idle),
            Ok(Some((
                Some("ses_1".into()),
                AgentEvent::TurnEnded {
                    prompt: Some("p".into()),
                    text: "All done.".into()
                }
            )))
        );
        let retry = r#"{"kind":"error","session":"s","limit":true,"words":"429","retrying":true}"#;
        assert_eq!(
            event_of(Agent::OpenCode, retry).map(|e| e.map(|(_, e)| e)),
            Ok(Some(AgentEvent::ProviderError {
                limit: true,
                words: "429".into()
            }))
        );
        let failed = r#"{"kind":"error","session":"s","limit":false,"words":"APIError: boom"}"#;
        assert!(matches!(
            event_of(Agent::OpenCode, failed),
            Ok(Some((_, AgentEvent::TurnFailed { limit: false, .. })))
        ));
        let asked = r#"{"kind":"permission","session":"s","words":"bash rm -rf"}"#;
        assert!(matches!(
            event_of(Agent::OpenCode, asked),
            Ok(Some((_, AgentEvent::Waiting { .. })))
        ));
        assert_eq!(
            event_of(Agent::OpenCode, r#"{"kind":"busy","session":"s"}"#),
            Ok(None)
        );
    }

    #[test]
    fn codexs_notify_becomes_a_turn_end_with_its_prompt() {
        let n = r#"{"type":"agent-turn-complete","thread-id":"th-1","turn-id":"7",
            "input-messages":["an earlier brief", "fix the\nparser"],"last-assistant-message":"fixed"}"#;
        assert_eq!(
            event_of(Agent::Codex, n),
            Ok(Some((
                Some("th-1".into()),
                AgentEvent::TurnEnded {
                    prompt: Some("fix the\nparser".into()),
                    text: "fixed".into()
                }
            )))
        );
        assert_eq!(event_of(Agent::Codex, r#"{"type":"other"}"#), Ok(None));
    }

    #[test]
    fn reports_are_numbered_in_order_across_runs() {
        let f = std::env::temp_dir().join(format!("fleetd-seq-{}", std::process::id()));
        let _ = std::fs::remove_file(&f);
        assert_eq!(next_seq(&f).ok(), Some(1));
        assert_eq!(next_seq(&f).ok(), Some(2));
        std::fs::write(&f, "41\n").expect("write");
        assert_eq!(next_seq(&f).ok(), Some(42));
        let _ = std::fs::remove_file(&f);
    }

    #[test]
    fn a_report_goes_to_the_members_own_route_on_its_gateway() {
        assert_eq!(
            report_target("http://127.0.0.1:7700/mcp", "g-1"),
            Ok(("127.0.0.1:7700".into(), "/sessions/g-1/report".into()))
        );
        assert_eq!(
            report_target("http://gw:80/fleet/mcp", "g"),
            Ok(("gw:80".into(), "/fleet/sessions/g/report".into()))
        );
        assert!(report_target("https://x/mcp", "g").is_err());
        assert!(report_target("http://x/mcp", "../g").is_err());
    }
}

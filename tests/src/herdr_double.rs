//! A herdr test double: a real Unix-socket server speaking herdr's protocol 20 — one JSON line
//! in, one JSON line out, one request per connection — over in-memory panes. It stands in for
//! herdr where no binary is available (crates.io has none that serves); every answer it writes
//! is checked against herdr's schema (`tests/data/herdr-api.schema.json`), and a violation is
//! recorded for the test to fail on.

use crate::schema;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

/// One pane of the double.
#[derive(Clone, Debug, Default)]
pub struct Pane {
    pub label: Option<String>,
    /// herdr's agent status word: idle, working, blocked, done, unknown.
    pub status: String,
    /// The pane's text, one entry per line.
    pub screen: Vec<String>,
    /// Every text submitted (typed, then Enter).
    pub typed: Vec<String>,
    pub command: Vec<String>,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
    pub tab_label: Option<String>,
    /// `focus` exactly as the client sent it (absent is herdr's default, false).
    pub focus: Option<bool>,
}

#[derive(Debug, Default)]
pub struct State {
    pub panes: BTreeMap<String, Pane>,
    next: u64,
    /// Methods asked, in order.
    pub requests: Vec<String>,
    /// Requests and answers that broke the schema (should stay empty).
    pub violations: Vec<String>,
    /// Protocol `ping` reports, and the family it behaves as: 20 (herdr 0.8.2: an event
    /// stream replays the lifecycle events kept before the live ones), 22 (herdr 0.9, from its
    /// published changelog and schema: live events only, capability names in `ping`, an
    /// unknown method's error carrying the request's id).
    pub protocol: u32,
    /// The lifecycle events kept for a new stream to replay (protocol 20; at most 512).
    history: std::collections::VecDeque<Value>,
    /// When set, requests are read and never answered.
    pub hang: bool,
    /// Methods that are carried out and then never answered (a loaded herdr that misses its
    /// answer bound): `pane.send_input` types its text, `pane.read` reads nothing back.
    pub hang_after: Vec<String>,
    /// No workspace yet, as on a fresh herdr server: `layout.apply` answers
    /// `workspace_not_found` until `workspace.create`.
    pub no_workspace: bool,
    /// Open `events.subscribe` streams.
    subs: Vec<Sub>,
}

/// One event subscriber: the panes whose status it asked for, and its stream.
#[derive(Debug)]
struct Sub {
    status_of: Vec<String>,
    tx: tokio::sync::mpsc::UnboundedSender<Value>,
}

impl State {
    /// Sends an event, worded as herdr 0.8.2 words it, to each subscriber that asked for it.
    fn emit(&mut self, event: Value) {
        let status_pane = (event["event"] == "pane.agent_status_changed")
            .then(|| event["data"]["pane_id"].as_str().unwrap_or("").to_string());
        self.subs.retain(|s| match &status_pane {
            Some(p) if !s.status_of.contains(p) => !s.tx.is_closed(),
            _ => s.tx.send(event.clone()).is_ok(),
        });
    }

    fn gone(&mut self, pane_id: &str, kind: &str) {
        let event = json!({"event": kind, "data": {"type": kind, "pane_id": pane_id, "workspace_id": "w1"}});
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(event.clone());
        self.emit(event);
    }

    /// Protocol 22 (herdr 0.9) and later.
    pub fn live_only(&self) -> bool {
        self.protocol >= 22
    }

    fn status_changed(&mut self, pane_id: &str, status: &str) {
        self.emit(json!({"event": "pane.agent_status_changed", "data": {
            "agent": "echo", "agent_status": status, "pane_id": pane_id, "workspace_id": "w1"}}));
    }
}

/// Lifecycle events herdr 0.8 keeps for a new stream.
const HISTORY: usize = 512;

/// The running double. Dropping it stops the server.
pub struct HerdrDouble {
    pub path: PathBuf,
    state: Arc<Mutex<State>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for HerdrDouble {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn lock(s: &Mutex<State>) -> MutexGuard<'_, State> {
    match s.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl HerdrDouble {
    /// Serves at `dir/herdr.sock` (on the current tokio runtime).
    pub async fn start(dir: &Path) -> std::io::Result<HerdrDouble> {
        let state = Arc::new(Mutex::new(State {
            protocol: 20,
            ..State::default()
        }));
        Self::serve(dir, state)
    }

    fn serve(dir: &Path, state: Arc<Mutex<State>>) -> std::io::Result<HerdrDouble> {
        let path = dir.join("herdr.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        let schema = Some(Arc::new(schema::herdr_schema()));
        let st = state.clone();
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (st, schema) = (st.clone(), schema.clone());
                tokio::spawn(async move {
                    let (rd, mut wr) = stream.into_split();
                    let mut line = String::new();
                    let mut rd = BufReader::new(rd);
                    let read =
                        tokio::time::timeout(Duration::from_secs(5), rd.read_line(&mut line));
                    if !matches!(read.await, Ok(Ok(n)) if n > 0) {
                        return;
                    }
                    if let (Some(schema), Ok(req)) = (&schema, serde_json::from_str::<Value>(&line))
                    {
                        if let Err(e) = schema::check(schema, "/schemas/request", &req) {
                            lock(&st).violations.push(format!("request: {e} in {req}"));
                        }
                    }
                    if lock(&st).hang {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        return;
                    }
                    if let Some(subs) = subscription(&line) {
                        stream_events(&st, schema.as_deref(), subs, wr).await;
                        return;
                    }
                    let answer = answer(&mut lock(&st), &line);
                    let method = serde_json::from_str::<Value>(&line)
                        .ok()
                        .and_then(|r| r["method"].as_str().map(str::to_string));
                    if method.is_some_and(|m| lock(&st).hang_after.contains(&m)) {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        return;
                    }
                    if let Some(schema) = &schema {
                        let pointer = if answer.get("error").is_some() {
                            "/schemas/error_response"
                        } else {
                            "/schemas/success_response"
                        };
                        if let Err(e) = schema::check(schema, pointer, &answer) {
                            lock(&st).violations.push(format!("{e} in {answer}"));
                        }
                    }
                    let mut out = answer.to_string();
                    out.push('\n');
                    let _ = wr.write_all(out.as_bytes()).await;
                });
            }
        });
        Ok(HerdrDouble {
            path,
            state,
            server,
        })
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// A pane that already exists (a lead's, or a member from before a gateway restart).
    pub fn add_pane(&self, label: Option<&str>, status: &str) -> String {
        let mut s = self.state();
        s.next += 1;
        let id = format!("w1:p{}", s.next);
        s.panes.insert(
            id.clone(),
            Pane {
                label: label.map(str::to_string),
                status: status.into(),
                screen: vec!["❯ ".into()],
                ..Pane::default()
            },
        );
        id
    }

    /// herdr gives the pane a new id (as when it moves to another workspace); its label stays.
    pub fn move_pane(&self, pane_id: &str) -> Option<String> {
        let mut s = self.state();
        let pane = s.panes.remove(pane_id)?;
        s.next += 1;
        let id = format!("w2:p{}", s.next);
        s.panes.insert(id.clone(), pane);
        Some(id)
    }

    /// The pane's process exits and herdr closes it, behind the client's back.
    pub fn remove_pane(&self, pane_id: &str) {
        let mut s = self.state();
        if s.panes.remove(pane_id).is_some() {
            s.gone(pane_id, "pane_exited");
        }
    }

    pub fn set_status(&self, pane_id: &str, status: &str) {
        let mut s = self.state();
        let changed = match s.panes.get_mut(pane_id) {
            Some(p) if p.status != status => {
                p.status = status.into();
                true
            }
            _ => false,
        };
        if changed {
            s.status_changed(pane_id, status);
        }
    }

    /// Every event stream ends (as when herdr restarts); subscribers must come back.
    pub fn drop_subscriptions(&self) {
        self.state().subs.clear();
    }

    /// How many event streams are open.
    pub fn subscribers(&self) -> usize {
        let mut s = self.state();
        s.subs.retain(|s| !s.tx.is_closed());
        s.subs.len()
    }

    /// The pane labelled `label`, if any.
    pub fn pane_by_label(&self, label: &str) -> Option<(String, Pane)> {
        self.state()
            .panes
            .iter()
            .find(|(_, p)| p.label.as_deref() == Some(label))
            .map(|(id, p)| (id.clone(), p.clone()))
    }

    /// herdr restarts: panes and their labels come back (session.json), their processes and
    /// scrollback do not. The server itself is replaced.
    pub fn restart(self, dir: &Path) -> std::io::Result<HerdrDouble> {
        let state = self.state.clone();
        {
            let mut s = lock(&state);
            for p in s.panes.values_mut() {
                p.status = "unknown".into();
                p.screen.clear();
            }
            // A new server process: no events kept from before.
            s.history.clear();
        }
        drop(self);
        Self::serve(dir, state)
    }
}

fn info(id: &str, p: &Pane) -> Value {
    json!({
        "pane_id": id, "terminal_id": format!("t-{id}"), "workspace_id": "w1",
        "tab_id": "w1:t1", "focused": false, "agent_status": p.status, "revision": 0,
        "label": p.label,
    })
}

/// The subscriptions of an `events.subscribe` request line, if it is one.
fn subscription(line: &str) -> Option<(Value, Vec<Value>)> {
    let req = serde_json::from_str::<Value>(line).ok()?;
    if req.get("method")? != "events.subscribe" {
        return None;
    }
    let subs = req
        .pointer("/params/subscriptions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Some((req.get("id").cloned().unwrap_or(json!("")), subs))
}

/// Holds the connection open and writes each event as a line, as herdr does; every line is
/// checked against the schema. Like herdr, a status subscription without a `pane_id` refuses
/// the whole request (with id `""`).
async fn stream_events(
    st: &Arc<Mutex<State>>,
    schema: Option<&Value>,
    (id, subs): (Value, Vec<Value>),
    mut wr: tokio::net::unix::OwnedWriteHalf,
) {
    let mut status_of = Vec::new();
    for s in &subs {
        if s.get("type").and_then(Value::as_str) == Some("pane.agent_status_changed") {
            match s.get("pane_id").and_then(Value::as_str) {
                Some(p) => status_of.push(p.to_string()),
                None => {
                    let e = err(
                        &json!(""),
                        "invalid_request",
                        "invalid request: missing field `pane_id`",
                    );
                    let _ = wr.write_all(format!("{e}\n").as_bytes()).await;
                    return;
                }
            }
        }
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    {
        let mut s = lock(st);
        // herdr 0.8 starts a stream at its first kept event; 0.9 at the current one.
        if !s.live_only() {
            for e in &s.history {
                let _ = tx.send(e.clone());
            }
        }
        s.subs.push(Sub { status_of, tx });
    }
    let started = json!({"id": id, "result": {"type": "subscription_started"}});
    if wr
        .write_all(format!("{started}\n").as_bytes())
        .await
        .is_err()
    {
        return;
    }
    while let Some(event) = rx.recv().await {
        if let Some(schema) = schema {
            let pointer = if event["event"] == "pane.agent_status_changed" {
                "/schemas/subscription_event"
            } else {
                "/schemas/event"
            };
            if let Err(e) = schema::check(schema, pointer, &event) {
                lock(st).violations.push(format!("event: {e} in {event}"));
            }
        }
        if wr.write_all(format!("{event}\n").as_bytes()).await.is_err() {
            return;
        }
    }
}

fn err(id: &Value, code: &str, message: &str) -> Value {
    json!({"id": id, "error": {"code": code, "message": message}})
}

/// The answer to one request line.
fn answer(s: &mut State, line: &str) -> Value {
    let Ok(req) = serde_json::from_str::<Value>(line) else {
        return err(&json!(""), "invalid_request", "invalid request: not JSON");
    };
    let id = req.get("id").cloned().unwrap_or(json!(""));
    let method = req.get("method").and_then(Value::as_str).unwrap_or("");
    let params = req.get("params").cloned().unwrap_or(json!({}));
    s.requests.push(method.to_string());
    let pane_id = params
        .get("pane_id")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let ok = |result: Value| json!({"id": id, "result": result});
    let missing = || err(&id, "pane_not_found", &format!("pane {pane_id} not found"));
    match method {
        "ping" if s.live_only() => ok(json!({"type": "pong", "version": "0.9.3",
            "protocol": s.protocol, "capabilities": {"live_handoff": true,
            "detached_server_daemon": false, "endpoint_protocol_generation": 1,
            "surface_interest": true, "health_check": true}})),
        "ping" => ok(
            json!({"type": "pong", "version": "0.8.2", "protocol": s.protocol,
            "capabilities": {"live_handoff": true, "detached_server_daemon": false}}),
        ),
        "pane.list" => {
            let panes: Vec<Value> = s.panes.iter().map(|(i, p)| info(i, p)).collect();
            ok(json!({"type": "pane_list", "panes": panes}))
        }
        "pane.get" => match s.panes.get(&pane_id) {
            Some(p) => ok(json!({"type": "pane_info", "pane": info(&pane_id, p)})),
            None => missing(),
        },
        "pane.read" => match s.panes.get(&pane_id) {
            Some(p) => {
                let lines = params.get("lines").and_then(Value::as_u64).unwrap_or(80) as usize;
                let from = p.screen.len().saturating_sub(lines);
                let source = params.get("source").cloned().unwrap_or(json!("recent"));
                ok(json!({"type": "pane_read", "read": {
                    "pane_id": pane_id, "workspace_id": "w1", "tab_id": "w1:t1",
                    "source": source, "format": "text", "text": p.screen[from..].join("\n"),
                    "revision": 0, "truncated": from > 0,
                }}))
            }
            None => missing(),
        },
        "pane.send_input" => match s.panes.get_mut(&pane_id) {
            Some(p) => {
                let text = params.get("text").and_then(Value::as_str).unwrap_or("");
                let enter = params
                    .get("keys")
                    .and_then(Value::as_array)
                    .is_some_and(|k| k.iter().any(|k| k == "enter" || k == "Enter"));
                if p.screen.last().is_some_and(|l| l.trim() == "❯") {
                    p.screen.pop();
                }
                p.screen.push(format!("❯ {text}"));
                if enter {
                    p.typed.push(text.to_string());
                }
                ok(json!({"type": "ok"}))
            }
            None => missing(),
        },
        "pane.report_agent" => {
            let state = params
                .get("state")
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .to_string();
            let changed = match s.panes.get_mut(&pane_id) {
                Some(p) => {
                    let changed = p.status != state;
                    p.status = state.clone();
                    changed
                }
                None => return missing(),
            };
            if changed {
                s.status_changed(&pane_id, &state);
            }
            ok(json!({"type": "ok"}))
        }
        "pane.close" => match s.panes.remove(&pane_id) {
            Some(_) => {
                s.gone(&pane_id, "pane_closed");
                ok(json!({"type": "ok"}))
            }
            None => missing(),
        },
        "workspace.create" => {
            s.no_workspace = false;
            s.next += 1;
            let pid = format!("w1:p{}", s.next);
            // Like herdr, a new workspace comes with a tab whose root pane runs a shell.
            let root = Pane {
                label: params
                    .get("label")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                status: "unknown".into(),
                ..Pane::default()
            };
            let root_info = info(
                &pid,
                &Pane {
                    label: None,
                    ..root.clone()
                },
            );
            s.panes.insert(
                pid,
                Pane {
                    label: None,
                    ..root
                },
            );
            let label = params.get("label").and_then(Value::as_str).unwrap_or("1");
            ok(json!({"type": "workspace_created",
                "workspace": {"workspace_id": "w1", "number": 1, "label": label, "focused": true,
                    "pane_count": 1, "tab_count": 1, "active_tab_id": "w1:t1",
                    "agent_status": "unknown"},
                "tab": {"tab_id": "w1:t1", "workspace_id": "w1", "number": 1, "label": "1",
                    "focused": true, "pane_count": 1, "agent_status": "unknown"},
                "root_pane": root_info,
            }))
        }
        "layout.apply" if s.no_workspace => err(&id, "workspace_not_found", "no active workspace"),
        "layout.apply" => {
            let root = params.get("root").cloned().unwrap_or(json!({}));
            if root.get("type").and_then(Value::as_str) != Some("pane") {
                return err(&id, "invalid_layout", "the double only lays out one pane");
            }
            let command: Vec<String> = root
                .get("command")
                .and_then(|c| serde_json::from_value(c.clone()).ok())
                .unwrap_or_default();
            if root.get("command").is_some() && command.is_empty() {
                return err(&id, "invalid_layout", "command must not be empty");
            }
            s.next += 1;
            let pid = format!("w1:p{}", s.next);
            let label = root
                .get("label")
                .and_then(Value::as_str)
                .map(str::to_string);
            let env = root
                .get("env")
                .and_then(|e| serde_json::from_value(e.clone()).ok())
                .unwrap_or_default();
            s.panes.insert(
                pid.clone(),
                Pane {
                    label: label.clone(),
                    status: "unknown".into(),
                    screen: Vec::new(),
                    command: command.clone(),
                    cwd: root.get("cwd").and_then(Value::as_str).map(str::to_string),
                    env,
                    tab_label: params
                        .get("tab_label")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    focus: params.get("focus").and_then(Value::as_bool),
                    ..Pane::default()
                },
            );
            ok(json!({"type": "layout_apply", "layout": {
                "workspace_id": "w1", "tab_id": format!("w1:t{}", s.next), "focused_pane_id": pid,
                "zoomed": false,
                "root": {"type": "pane", "pane_id": pid, "label": label, "command": command},
            }}))
        }
        // herdr cannot parse an unknown method into a request: 0.8 answers with id "", 0.9
        // with the request's own.
        _ => err(
            &if s.live_only() { id.clone() } else { json!("") },
            "invalid_request",
            &format!("invalid request: unknown variant `{method}`, expected one of `ping`"),
        ),
    }
}

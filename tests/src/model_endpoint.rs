//! A scripted stand-in for a model provider, for end-to-end tests of real agent CLIs: the
//! agents, herdr and fleetd are the real programs; only the model is played, by rule, from
//! what each request carries. This machine (and a user's CI) has no route to a provider.
//!
//! It speaks the Anthropic Messages API as Claude Code calls it (`POST /v1/messages`, SSE
//! when `stream` is set, JSON otherwise; `POST /v1/messages/count_tokens`), and the OpenAI
//! Responses API as Codex calls it (`POST /v1/responses`; MCP tools in a `namespace`), and
//! Chat Completions as opencode calls it (`POST /v1/chat/completions`; tools `fleet_<name>`).
//!
//! The script is in the brief itself — the last user text that is not a `<system-reminder>`:
//! - `[script:reply]` → calls `fleet_reply` with `done: <brief>`;
//! - `[script:ask]` → calls `fleet_ask` with `which way? (<brief>)`, then `fleet_reply` with
//!   `answered: <the answer>`;
//! - `[script:bash]` → calls the `Bash` tool (Claude Code's shell), which no member is allowed
//!   without a person's say: its agent shows a permission prompt;
//! - `[script:plain]` → answers `plain answer: <brief without its markers>` in text, no tool;
//! - `[script:slow N]` → waits N ms before answering (with any of the above);
//! - `[script:rate-limit]`, `[script:overloaded]`, `[script:auth]` → the provider's rate
//!   limit, overload and authentication errors (each API's own status and body);
//! - `[script:usage-limit]` → the 400 `invalid_request_error` the API answers on a spend limit
//!   ("You have reached your specified API usage limits…"), which Claude Code does not retry;
//!   on the Responses API, OpenAI's 429 `insufficient_quota`.
//!
//! A request with no tools (Claude Code's side calls: titles, topic checks) gets a short text.
//! When the fleet tools are deferred behind `ToolSearch` (Claude Code 2.x), the model first
//! loads them, as a real model told so by its charter does.

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request the endpoint took, for a test to assert on.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub body: Value,
    /// The brief the script was read from (`None` for a side call).
    pub brief: Option<String>,
}

#[derive(Clone, Default)]
struct Shared {
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// A running endpoint; it stops when dropped.
pub struct ModelEndpoint {
    pub url: String,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ModelEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ModelEndpoint {
    /// Serves on a free port of 127.0.0.1.
    pub async fn start() -> std::io::Result<ModelEndpoint> {
        let shared = Shared::default();
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .route("/v1/responses", post(responses))
            .route("/v1/chat/completions", post(chat))
            .fallback(any(unknown))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(ModelEndpoint { url, shared, task })
    }

    /// Every request taken so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared
            .seen
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// The briefs the model was asked to work on, in order (each once).
    pub fn briefs(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for b in self.seen().into_iter().filter_map(|s| s.brief) {
            if !out.contains(&b) {
                out.push(b);
            }
        }
        out
    }
}

async fn unknown(uri: axum::http::Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found_error",
        &format!("the scripted endpoint serves no {}", uri.path()),
    )
}

async fn count_tokens(Json(body): Json<Value>) -> Json<Value> {
    let n = body.to_string().len() / 4;
    Json(json!({ "input_tokens": n.max(1) }))
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    (status, Json(body)).into_response()
}

/// What the script says to do next.
#[derive(Clone, Debug, PartialEq)]
enum Move {
    Text(String),
    Tool {
        name: String,
        /// Codex offers MCP tools inside a namespace (`mcp__fleet`); its call names both.
        namespace: Option<String>,
        input: Value,
    },
    Fail {
        status: u16,
        kind: &'static str,
        message: String,
    },
}

/// Which provider API a request came in on: the same script, each one's own shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Api {
    /// Anthropic Messages (Claude Code).
    Messages,
    /// OpenAI Responses (Codex).
    Responses,
    /// OpenAI Chat Completions (opencode, through `@ai-sdk/openai-compatible`).
    Chat,
}

/// One agent turn as the script reads it, whatever the API.
#[derive(Clone, Debug, Default, PartialEq)]
struct Turn {
    /// The brief: the user text carrying `[script:…]`.
    brief: String,
    /// The tools called since the brief, by name (namespaced names as `ns__name`).
    called: Vec<String>,
    /// The last tool result since the brief.
    last_result: Option<String>,
    /// The tools offered: (name, namespace).
    tools: Vec<(String, Option<String>)>,
}

impl Turn {
    /// The offered tool whose name is `name`, or ends with `__<name>` (Claude Code's MCP
    /// tools: `mcp__fleet__<name>`).
    fn tool(&self, name: &str) -> Option<(String, Option<String>)> {
        self.tools.iter().find(|(n, _)| named(n, name)).cloned()
    }

    fn done(&self, name: &str) -> bool {
        self.called.iter().any(|c| named(c, name))
    }
}

/// Whether a tool's full name is `name` as an agent prefixes its MCP tools: `mcp__fleet__<name>`
/// (Claude Code), `fleet_<name>` (opencode).
fn named(full: &str, name: &str) -> bool {
    full == name || full.ends_with(&format!("_{name}"))
}

async fn messages(State(s): State<Shared>, Json(body): Json<Value>) -> Response {
    let turn = anthropic_turn(&body);
    answer(&s, "/v1/messages", Api::Messages, body, turn).await
}

async fn responses(State(s): State<Shared>, Json(body): Json<Value>) -> Response {
    let turn = responses_turn(&body);
    answer(&s, "/v1/responses", Api::Responses, body, turn).await
}

async fn chat(State(s): State<Shared>, Json(body): Json<Value>) -> Response {
    let turn = chat_turn(&body);
    answer(&s, "/v1/chat/completions", Api::Chat, body, turn).await
}

async fn answer(s: &Shared, path: &str, api: Api, body: Value, turn: Option<Turn>) -> Response {
    if let Ok(mut seen) = s.seen.lock() {
        seen.push(Seen {
            path: path.into(),
            body: body.clone(),
            brief: turn.as_ref().map(|t| t.brief.clone()),
        });
    }
    if let Some(ms) = turn.as_ref().and_then(|t| slow_ms(&t.brief)) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let step = match &turn {
        Some(t) => script(t, api),
        // A side call (a title, a topic check): short, harmless text.
        None => Move::Text("Fleet task".into()),
    };
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("scripted")
        .to_string();
    match (step, api) {
        (
            Move::Fail {
                status,
                kind,
                message,
            },
            api,
        ) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            match api {
                Api::Messages => error(status, kind, &message),
                Api::Responses | Api::Chat => {
                    let body = json!({"error": {"message": message, "type": kind, "code": kind, "param": null}});
                    (status, Json(body)).into_response()
                }
            }
        }
        (step, Api::Messages) if stream => sse(&model, &step),
        (step, Api::Messages) => Json(whole(&model, &step)).into_response(),
        (step, Api::Responses) if stream => responses_sse(&model, &step),
        (step, Api::Responses) => Json(responses_whole(&model, &step)).into_response(),
        (step, Api::Chat) if stream => chat_sse(&model, &step),
        (step, Api::Chat) => Json(chat_whole(&model, &step)).into_response(),
    }
}

/// A Messages request's turn: the last user text carrying a script (not the
/// `<system-reminder>` blocks Claude Code puts around it), and what was done since.
fn anthropic_turn(body: &Value) -> Option<Turn> {
    let tools: Vec<(String, Option<String>)> = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("name").and_then(Value::as_str))
        .map(|n| (n.to_string(), None))
        .collect();
    if tools.is_empty() {
        return None;
    }
    let messages: &[Value] = body
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let user = |m: &Value| m.get("role").and_then(Value::as_str) == Some("user");
    let start = messages
        .iter()
        .rposition(|m| user(m) && texts(m.get("content")).iter().any(|t| scripted(t)))?;
    let brief = texts(messages[start].get("content"))
        .into_iter()
        .rfind(|t| scripted(t))?;
    let mut turn = Turn {
        brief: brief.trim().to_string(),
        tools,
        ..Turn::default()
    };
    for m in &messages[start..] {
        for b in m
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match b.get("type").and_then(Value::as_str) {
                Some("tool_use") => {
                    if let Some(n) = b.get("name").and_then(Value::as_str) {
                        turn.called.push(n.to_string());
                    }
                }
                Some("tool_result") => {
                    turn.last_result = Some(match b.get("content") {
                        Some(Value::String(s)) => s.clone(),
                        c => texts(c).join("\n"),
                    });
                }
                _ => {}
            }
        }
    }
    Some(turn)
}

/// A Responses request's turn (Codex): `input` items — messages (`input_text` parts),
/// `function_call`s and their `function_call_output`s — and `tools`, MCP tools inside a
/// `namespace` tool.
fn responses_turn(body: &Value) -> Option<Turn> {
    let mut tools = Vec::new();
    for t in body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
        match t.get("tools").and_then(Value::as_array) {
            Some(inner) => tools.extend(
                inner
                    .iter()
                    .filter_map(|i| i.get("name").and_then(Value::as_str))
                    .map(|n| (n.to_string(), Some(name.to_string()))),
            ),
            None if !name.is_empty() => tools.push((name.to_string(), None)),
            None => {}
        }
    }
    if tools.is_empty() {
        return None;
    }
    let items: &[Value] = body
        .get("input")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let user = |i: &Value| i.get("role").and_then(Value::as_str) == Some("user");
    let start = items
        .iter()
        .rposition(|i| user(i) && texts(i.get("content")).iter().any(|t| scripted(t)))?;
    let brief = texts(items[start].get("content"))
        .into_iter()
        .rfind(|t| scripted(t))?;
    let mut turn = Turn {
        brief: brief.trim().to_string(),
        tools,
        ..Turn::default()
    };
    for i in &items[start..] {
        match i.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                let name = i.get("name").and_then(Value::as_str).unwrap_or_default();
                let called = match i.get("namespace").and_then(Value::as_str) {
                    Some(ns) => format!("{ns}__{name}"),
                    None => name.to_string(),
                };
                turn.called.push(called);
            }
            Some("function_call_output") => {
                turn.last_result = Some(match i.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    o => texts(o).join("\n"),
                });
            }
            _ => {}
        }
    }
    Some(turn)
}

/// A Chat Completions request's turn (opencode): `messages` — user text, assistant
/// `tool_calls`, `tool` results — and `tools` as functions.
fn chat_turn(body: &Value) -> Option<Turn> {
    let tools: Vec<(String, Option<String>)> = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
        .map(|n| (n.to_string(), None))
        .collect();
    if tools.is_empty() {
        return None;
    }
    let messages: &[Value] = body
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let user = |m: &Value| m.get("role").and_then(Value::as_str) == Some("user");
    let start = messages
        .iter()
        .rposition(|m| user(m) && texts(m.get("content")).iter().any(|t| scripted(t)))?;
    let brief = texts(messages[start].get("content"))
        .into_iter()
        .rfind(|t| scripted(t))?;
    let mut turn = Turn {
        brief: brief.trim().to_string(),
        tools,
        ..Turn::default()
    };
    for m in &messages[start..] {
        for call in m
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(n) = call.pointer("/function/name").and_then(Value::as_str) {
                turn.called.push(n.to_string());
            }
        }
        if m.get("role").and_then(Value::as_str) == Some("tool") {
            turn.last_result = Some(texts(m.get("content")).join("\n"));
        }
    }
    Some(turn)
}

/// A brief without its `[script:…]` markers.
fn unscripted(brief: &str) -> String {
    let mut out = String::new();
    let mut rest = brief;
    while let Some(at) = rest.find("[script:") {
        out.push_str(&rest[..at]);
        rest = rest[at..].split_once(']').map_or("", |(_, r)| r);
    }
    out.push_str(rest);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn scripted(text: &str) -> bool {
    !text.trim_start().starts_with("<system-reminder>") && text.contains("[script:")
}

/// The text parts of a message's content: a string, or `text` / `input_text` parts.
fn texts(content: Option<&Value>) -> Vec<String> {
    match content {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| {
                matches!(
                    b.get("type").and_then(Value::as_str),
                    Some("text" | "input_text" | "output_text")
                )
            })
            .filter_map(|b| b.get("text").and_then(Value::as_str).map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

fn slow_ms(brief: &str) -> Option<u64> {
    let at = brief.find("[script:slow ")? + "[script:slow ".len();
    brief[at..].split(']').next()?.trim().parse().ok()
}

/// The provider's errors, as each API sends them.
fn failure(mark: &str, api: Api) -> Option<Move> {
    let fail = |status, kind, message: &str| Move::Fail {
        status,
        kind,
        message: message.to_string(),
    };
    Some(match (mark, api) {
        ("[script:rate-limit]", Api::Messages) => fail(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
        ("[script:rate-limit]", Api::Responses | Api::Chat) => fail(429, "rate_limit_exceeded", "Rate limit reached for scripted-model: try again in 1s."),
        ("[script:overloaded]", Api::Messages) => fail(529, "overloaded_error", "Overloaded"),
        ("[script:overloaded]", Api::Responses | Api::Chat) => fail(503, "server_error", "The server is overloaded."),
        ("[script:auth]", Api::Messages) => fail(401, "authentication_error", "invalid x-api-key"),
        ("[script:auth]", Api::Responses | Api::Chat) => fail(401, "invalid_api_key", "Incorrect API key provided. (scripted)"),
        ("[script:usage-limit]", Api::Messages) => fail(400, "invalid_request_error", "You have reached your specified API usage limits. You will regain access on 2026-01-01 at 00:00 UTC."),
        ("[script:usage-limit]", Api::Responses | Api::Chat) => fail(429, "insufficient_quota", "You exceeded your current quota, please check your plan and billing details."),
        _ => return None,
    })
}

fn script(t: &Turn, api: Api) -> Move {
    let brief = t.brief.as_str();
    for mark in [
        "[script:rate-limit]",
        "[script:overloaded]",
        "[script:auth]",
        "[script:usage-limit]",
    ] {
        if brief.contains(mark) {
            if let Some(m) = failure(mark, api) {
                return m;
            }
        }
    }
    if brief.contains("[script:bash]") {
        // A tool the member was never allowed: its agent asks a person first.
        if t.called.iter().any(|c| c == "Bash") {
            return Move::Text("Ran it.".into());
        }
        return match t.tool("Bash") {
            Some((name, namespace)) => Move::Tool {
                name,
                namespace,
                input: json!({"command": "touch fleet-permission-probe", "description": "Touch a file"}),
            },
            None => Move::Text("No shell tool here.".into()),
        };
    }
    if brief.contains("[script:plain]") {
        // Without the markers: a TUI renders `[…]` as markdown (opencode drops the brackets).
        return Move::Text(format!("plain answer: {}", unscripted(brief)));
    }
    let wants_ask = brief.contains("[script:ask]");
    if !wants_ask && !brief.contains("[script:reply]") {
        return Move::Text(format!("no script in: {brief}"));
    }
    if t.done("fleet_reply") {
        return Move::Text("Reported back to the lead.".into());
    }
    let (Some(reply), Some(ask)) = (t.tool("fleet_reply"), t.tool("fleet_ask")) else {
        // Deferred MCP tools (Claude Code 2.x): load them first, as a charter tells a model.
        let searches = t.called.iter().filter(|c| *c == "ToolSearch").count();
        return match t.tool("ToolSearch") {
            Some((name, namespace)) if searches < 3 => Move::Tool {
                name,
                namespace,
                input: json!({"query": "select:mcp__fleet__fleet_reply,mcp__fleet__fleet_ask", "max_results": 5}),
            },
            _ => Move::Text("The fleet tools are not available here.".into()),
        };
    };
    if wants_ask && !t.done("fleet_ask") {
        return Move::Tool {
            name: ask.0,
            namespace: ask.1,
            input: json!({ "question": format!("which way? ({brief})") }),
        };
    }
    let message = match (wants_ask, &t.last_result) {
        (true, Some(answer)) => format!("answered: {answer}"),
        _ => format!("done: {brief}"),
    };
    Move::Tool {
        name: reply.0,
        namespace: reply.1,
        input: json!({ "message": message }),
    }
}

/// Ids for messages and tool calls: unique within the endpoint's life, which is all a client
/// needs of them.
fn next_id(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}_scripted{n:08}")
}

fn message_id() -> String {
    next_id("msg")
}

fn usage() -> Value {
    json!({"input_tokens": 12, "output_tokens": 8, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
}

/// A non-streaming answer.
fn whole(model: &str, step: &Move) -> Value {
    let (content, stop) = match step {
        Move::Text(t) => (json!([{"type": "text", "text": t}]), "end_turn"),
        Move::Tool { name, input, .. } => (
            json!([{"type": "tool_use", "id": next_id("toolu"), "name": name, "input": input}]),
            "tool_use",
        ),
        Move::Fail { .. } => (json!([]), "end_turn"),
    };
    json!({
        "id": message_id(), "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage(),
    })
}

/// A streamed answer, as the Messages API sends it: one content block.
fn sse(model: &str, step: &Move) -> Response {
    let mut events: Vec<(&str, Value)> = vec![(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": message_id(), "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage(),
        }}),
    )];
    let stop = match step {
        Move::Text(t) => {
            events.push(("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})));
            events.push(("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}})));
            "end_turn"
        }
        Move::Tool { name, input, .. } => {
            let id = next_id("toolu");
            events.push(("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
            events.push(("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}})));
            "tool_use"
        }
        Move::Fail { .. } => "end_turn",
    };
    events.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 8}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    let text: String = events
        .into_iter()
        .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
        .collect();
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from(text))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// A Responses answer's one output item: a message, or a function call (namespaced for an
/// MCP tool, as Codex offers them).
fn responses_item(step: &Move) -> Value {
    match step {
        Move::Tool {
            name,
            namespace,
            input,
        } => {
            let call = next_id("call");
            let mut item = json!({"type": "function_call", "id": next_id("fc"), "call_id": call,
                "name": name, "arguments": input.to_string(), "status": "completed"});
            if let Some(ns) = namespace {
                item["namespace"] = json!(ns);
            }
            item
        }
        Move::Text(t) => json!({"type": "message", "id": next_id("msg"), "status": "completed",
            "role": "assistant", "content": [{"type": "output_text", "text": t, "annotations": []}]}),
        Move::Fail { .. } => json!({"type": "message", "id": next_id("msg"), "status": "completed",
            "role": "assistant", "content": []}),
    }
}

fn responses_usage() -> Value {
    json!({"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 8,
        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 20})
}

fn responses_whole(model: &str, step: &Move) -> Value {
    json!({"id": next_id("resp"), "object": "response", "created_at": 0, "model": model,
        "status": "completed", "output": [responses_item(step)], "usage": responses_usage()})
}

/// A streamed Responses answer: created, the item added, its text or arguments, the item done,
/// completed.
fn responses_sse(model: &str, step: &Move) -> Response {
    let item = responses_item(step);
    let id = next_id("resp");
    let base = |status: &str, output: Value| {
        json!({"id": id, "object": "response", "created_at": 0, "model": model,
            "status": status, "output": output, "usage": responses_usage()})
    };
    let item_id = item["id"].clone();
    let mut events: Vec<(&str, Value)> = vec![
        (
            "response.created",
            json!({"type": "response.created", "response": base("in_progress", json!([]))}),
        ),
        (
            "response.in_progress",
            json!({"type": "response.in_progress", "response": base("in_progress", json!([]))}),
        ),
    ];
    match step {
        Move::Text(t) => {
            let mut added = item.clone();
            added["status"] = json!("in_progress");
            added["content"] = json!([]);
            events.push((
                "response.output_item.added",
                json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
            ));
            events.push(("response.content_part.added", json!({"type": "response.content_part.added", "item_id": item_id, "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})));
            events.push(("response.output_text.delta", json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": 0, "content_index": 0, "delta": t})));
            events.push(("response.output_text.done", json!({"type": "response.output_text.done", "item_id": item_id, "output_index": 0, "content_index": 0, "text": t})));
            events.push(("response.content_part.done", json!({"type": "response.content_part.done", "item_id": item_id, "output_index": 0, "content_index": 0, "part": item["content"][0].clone()})));
        }
        _ => {
            let mut added = item.clone();
            added["status"] = json!("in_progress");
            added["arguments"] = json!("");
            let args = item["arguments"].clone();
            events.push((
                "response.output_item.added",
                json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
            ));
            events.push(("response.function_call_arguments.delta", json!({"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": 0, "delta": args})));
            events.push(("response.function_call_arguments.done", json!({"type": "response.function_call_arguments.done", "item_id": item_id, "output_index": 0, "arguments": args})));
        }
    }
    events.push((
        "response.output_item.done",
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
    ));
    events.push((
        "response.completed",
        json!({"type": "response.completed", "response": base("completed", json!([item]))}),
    ));
    let text: String = events
        .into_iter()
        .enumerate()
        .map(|(n, (e, mut d))| {
            d["sequence_number"] = json!(n);
            format!("event: {e}\ndata: {d}\n\n")
        })
        .collect();
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from(text))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// A Chat Completions answer's message: text, or one tool call.
fn chat_message(step: &Move) -> (Value, &'static str) {
    match step {
        Move::Tool { name, input, .. } => (
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": next_id("call"),
                "type": "function", "function": {"name": name, "arguments": input.to_string()}}]}),
            "tool_calls",
        ),
        Move::Text(t) => (json!({"role": "assistant", "content": t}), "stop"),
        Move::Fail { .. } => (json!({"role": "assistant", "content": ""}), "stop"),
    }
}

fn chat_usage() -> Value {
    json!({"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20})
}

fn chat_whole(model: &str, step: &Move) -> Value {
    let (message, finish) = chat_message(step);
    json!({"id": next_id("chatcmpl"), "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": chat_usage()})
}

/// A streamed Chat Completions answer: the role, the text or the tool call, the finish with
/// usage, `[DONE]`.
fn chat_sse(model: &str, step: &Move) -> Response {
    let id = next_id("chatcmpl");
    let chunk = |delta: Value, finish: Option<&str>, usage: Option<Value>| {
        let mut c = json!({"id": id, "object": "chat.completion.chunk", "created": 0,
            "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        if let Some(u) = usage {
            c["usage"] = u;
        }
        format!("data: {c}\n\n")
    };
    let (message, finish) = chat_message(step);
    let mut text = chunk(json!({"role": "assistant", "content": ""}), None, None);
    match step {
        Move::Tool { .. } => {
            let call = &message["tool_calls"][0];
            text += &chunk(
                json!({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": ""}}]}),
                None,
                None,
            );
            text += &chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": call["function"]["arguments"]}}]}),
                None,
                None,
            );
        }
        _ => text += &chunk(json!({"content": message["content"]}), None, None),
    }
    text += &chunk(json!({}), Some(finish), Some(chat_usage()));
    text += "data: [DONE]\n\n";
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from(text))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(text: &str, tools: &[&str], history: Vec<Value>) -> Value {
        let mut messages = vec![json!({"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>context</system-reminder>"},
            {"type": "text", "text": text},
        ]})];
        messages.extend(history);
        let tools: Vec<Value> = tools.iter().map(|n| json!({"name": n})).collect();
        json!({"model": "m", "stream": true, "tools": tools, "messages": messages})
    }

    fn step(body: &Value) -> Move {
        script(
            &anthropic_turn(body).expect("a scripted turn"),
            Api::Messages,
        )
    }

    #[test]
    fn deferred_tools_are_loaded_before_the_reply() {
        let b = req("[script:reply] fix it", &["ToolSearch", "Bash"], vec![]);
        assert!(matches!(step(&b), Move::Tool { name, .. } if name == "ToolSearch"));
        let b = req(
            "[script:reply] fix it",
            &[
                "ToolSearch",
                "mcp__fleet__fleet_reply",
                "mcp__fleet__fleet_ask",
            ],
            vec![],
        );
        assert_eq!(
            step(&b),
            Move::Tool {
                name: "mcp__fleet__fleet_reply".into(),
                namespace: None,
                input: json!({"message": "done: [script:reply] fix it"})
            }
        );
    }

    /// An earlier turn's calls are that turn's: the next brief starts over.
    #[test]
    fn an_ask_is_followed_by_a_reply_carrying_the_answer() {
        let tools = ["mcp__fleet__fleet_reply", "mcp__fleet__fleet_ask"];
        let earlier = vec![
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t0", "name": "mcp__fleet__fleet_reply", "input": {}}]}),
            json!({"role": "user", "content": [{"type": "text", "text": "[script:ask] pick"}]}),
        ];
        let b = req("[script:reply] before", &tools, earlier.clone());
        assert!(matches!(step(&b), Move::Tool { name, .. } if name.ends_with("fleet_ask")));
        let mut after = earlier;
        after.extend([
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "mcp__fleet__fleet_ask", "input": {}}]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "left"}]}]}),
        ]);
        let b = req("[script:reply] before", &tools, after);
        assert_eq!(
            step(&b),
            Move::Tool {
                name: "mcp__fleet__fleet_reply".into(),
                namespace: None,
                input: json!({"message": "answered: left"})
            }
        );
    }

    #[test]
    fn plain_errors_and_side_calls() {
        let b = req("[script:plain] hi", &["Bash"], vec![]);
        assert_eq!(step(&b), Move::Text("plain answer: hi".into()));
        assert_eq!(
            unscripted("[script:slow 20] [script:plain] say  hi"),
            "say hi"
        );
        let b = req("[script:usage-limit] x", &["Bash"], vec![]);
        assert!(matches!(step(&b), Move::Fail { status: 400, .. }));
        let side = json!({"model": "m", "messages": [{"role": "user", "content": "title?"}]});
        assert_eq!(anthropic_turn(&side), None);
        assert_eq!(slow_ms("[script:slow 1500] [script:plain] x"), Some(1500));
    }

    /// Codex's Responses requests: MCP tools inside a namespace, called by name and namespace;
    /// the function call's output carries the answer.
    #[test]
    fn a_codex_turn_calls_the_namespaced_fleet_tools() {
        let tools = json!([{"type": "function", "name": "shell"},
            {"type": "namespace", "name": "mcp__fleet", "tools": [
                {"type": "function", "name": "fleet_reply"}, {"type": "function", "name": "fleet_ask"}]}]);
        let user = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "[script:ask] pick"}]});
        let body = json!({"model": "m", "stream": true, "tools": tools, "input": [user.clone()]});
        let t = responses_turn(&body).expect("a scripted turn");
        assert!(
            matches!(script(&t, Api::Responses), Move::Tool { name, namespace: Some(ns), .. } if name == "fleet_ask" && ns == "mcp__fleet")
        );
        let body = json!({"model": "m", "tools": tools, "input": [user,
            {"type": "function_call", "name": "fleet_ask", "namespace": "mcp__fleet", "call_id": "c1", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "left"}]}]});
        let t = responses_turn(&body).expect("a scripted turn");
        assert_eq!(
            script(&t, Api::Responses),
            Move::Tool {
                name: "fleet_reply".into(),
                namespace: Some("mcp__fleet".into()),
                input: json!({"message": "answered: left"})
            }
        );
        let item = responses_item(&script(&t, Api::Responses));
        assert_eq!(item["namespace"], "mcp__fleet");
        assert_eq!(
            item["arguments"],
            json!({"message": "answered: left"}).to_string()
        );
        let title = json!({"model": "m", "tools": [], "input": [{"role": "user", "content": "Generate a concise title"}]});
        assert_eq!(responses_turn(&title), None);
    }

    /// opencode's Chat Completions requests: MCP tools as `fleet_<tool>` functions.
    #[test]
    fn an_opencode_turn_calls_the_prefixed_fleet_tools() {
        let tools = json!([{"type": "function", "function": {"name": "bash"}},
            {"type": "function", "function": {"name": "fleet_fleet_reply"}},
            {"type": "function", "function": {"name": "fleet_fleet_ask"}}]);
        let user = json!({"role": "user", "content": "[script:ask] pick"});
        let body = json!({"model": "m", "tools": tools, "messages": [user.clone()]});
        let t = chat_turn(&body).expect("a scripted turn");
        assert!(
            matches!(script(&t, Api::Chat), Move::Tool { name, .. } if name == "fleet_fleet_ask")
        );
        let body = json!({"model": "m", "tools": tools, "messages": [user,
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "fleet_fleet_ask", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "left"}]});
        let t = chat_turn(&body).expect("a scripted turn");
        assert_eq!(
            script(&t, Api::Chat),
            Move::Tool {
                name: "fleet_fleet_reply".into(),
                namespace: None,
                input: json!({"message": "answered: left"})
            }
        );
    }
}

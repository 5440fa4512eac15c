//! `fleetd ctl`: a client of a running gateway's REST face, for operators and scripts. Human
//! tables by default, the gateway's own JSON with `--json`, a progress line on stderr while it
//! waits, and exit codes a script can branch on (`Exit`).

pub mod out;
mod render;
mod table;
mod tail;
use render::*;
use tail::{tail_audit, tail_flows};

use crate::ports::Clock;
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;
use table::Table;

/// What a script can tell apart by the exit status alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Done: a send REPLIED or COMPLETED_UNREPLIED, a `--no-wait` send accepted, a read shown.
    Ok = 0,
    /// The gateway refused the request for another reason (a bad argument, a full inbox …).
    Refused = 1,
    /// A usage error (clap's own, or a missing token).
    Usage = 2,
    /// The gateway did not answer, or not with what a gateway answers.
    Unreachable = 3,
    /// The token was refused (401) or may not do this (403).
    Denied = 4,
    /// No such member, ticket or host (404).
    NotFound = 5,
    /// A send ended without a reply: BUSY, STALE_TURN, TIMED_OUT_*, WORKER_FAILED,
    /// BACKEND_EXHAUSTED.
    NoReply = 6,
    /// The member asked a question: answer with `send <gid> <answer> --turn-id <turnId>`.
    Question = 7,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}

#[derive(Args, Debug)]
pub struct Ctl {
    /// The gateway's base URL.
    #[arg(long, env = "FLEETD_URL", default_value = "http://127.0.0.1:8765")]
    url: String,
    /// The environment variable holding the bearer token (a lead's, or a member's to read).
    /// The token itself is never an argument: arguments show in `ps`.
    #[arg(long, default_value = "FLEETD_TOKEN", value_name = "VAR")]
    token_env: String,
    /// Print the gateway's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    /// Bound on each request that does not wait for a member (ms).
    #[arg(long, default_value_t = 10_000, value_name = "MS")]
    request_timeout_ms: u64,
    #[command(subcommand)]
    command: CtlCommand,
}

#[derive(Subcommand, Debug)]
enum CtlCommand {
    /// The fleet-wide roster: every host's gateway, leads and members with status and health.
    List,
    /// One session's row on any host, with what this gateway queues for it.
    Status { gid: String },
    /// Delegate TEXT to member GID and wait for its outcome (exit 0 on a reply, 6 without one,
    /// 7 on a question); or answer an open question with --turn-id.
    Send {
        gid: String,
        text: String,
        /// Wait for the outcome (the default), showing the phase on stderr.
        #[arg(long, conflicts_with = "no_wait")]
        wait: bool,
        /// Return at once with a ticket to `poll`.
        #[arg(long)]
        no_wait: bool,
        /// The delegation's deadline (ms); the gateway's default when absent.
        #[arg(long, value_name = "MS")]
        timeout_ms: Option<u64>,
        /// Answer the question of this turn instead of starting a delegation.
        #[arg(long, value_name = "TURN")]
        turn_id: Option<String>,
    },
    /// An async send's phase and outcome by its ticket, or (--replies GID) collect the
    /// replies held for you from member GID.
    Poll {
        #[arg(required_unless_present = "replies")]
        ticket: Option<String>,
        /// Drain the replies held from this member instead.
        #[arg(long, value_name = "GID", conflicts_with = "ticket")]
        replies: Option<String>,
        /// With --replies: show them without removing them.
        #[arg(long, requires = "replies")]
        peek: bool,
    },
    /// Start a member (placement chooses the profile when none is named).
    Spawn {
        #[arg(long)]
        profile: Option<String>,
        /// The host to start it on (`any`: the live host with the fewest members).
        #[arg(long)]
        host: Option<String>,
        /// ARCHITECT, DEV (the default) or REVIEWER.
        #[arg(long)]
        role: Option<String>,
        #[arg(long)]
        group: Option<String>,
        #[arg(long)]
        cwd: Option<String>,
        #[arg(long)]
        ticket: Option<String>,
    },
    /// Stop a member on any host: its pane closes, its open delegations end ABANDONED.
    Stop { gid: String },
    /// The profiles each host offers, with this host's placement and credential cooldowns.
    Profiles,
    /// Hosts with their links and counts, delegations in flight, held results.
    Overview,
    /// What waits on you (the token's lead), oldest first: questions, uncollected results,
    /// members that need a person, this host's troubles; and counts at other hosts.
    Attention,
    /// Your task list (the token's lead): each task's state, assignee, dependencies, and why
    /// it waits or failed; with ID, one task with its brief and its result.
    Tasks { id: Option<u32> },
    /// Add a task to your list: it starts once every dependency (--dep N, repeatable) is done
    /// and its assignee runs nothing else of your list.
    TaskAdd {
        #[arg(long)]
        title: String,
        /// The member that runs it (any host).
        #[arg(long, value_name = "GID")]
        assignee: String,
        #[arg(long = "dep", value_name = "N")]
        deps: Vec<u32>,
        #[arg(long, value_name = "MS")]
        timeout_ms: Option<u64>,
        /// What is typed into the assignee's pane.
        brief: String,
    },
    /// Decide on a task: done (accept its result), failed (give it up), retry.
    Review {
        id: u32,
        #[arg(value_parser = ["done", "failed", "retry"])]
        decision: String,
    },
    /// Follow the delegations in flight: one line per change. With --flow, only that flow
    /// (a traceId, msgId or ticket), ending when it does.
    Tail {
        #[arg(long, value_name = "ID")]
        flow: Option<String>,
        /// Follow this gateway's audit file (JSON lines) instead; it must be readable here.
        #[arg(long, value_name = "FILE", conflicts_with = "flow")]
        audit: Option<std::path::PathBuf>,
        /// Poll interval (ms).
        #[arg(long, default_value_t = 1_000, value_name = "MS")]
        every_ms: u64,
    },
}

/// A failed request, with the exit status it maps to.
#[derive(Debug, thiserror::Error)]
enum CtlError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot reach the gateway at {url}: {why}")]
    Unreachable { url: String, why: String },
    #[error("{status}: {code}: {message}")]
    Refused {
        status: u16,
        code: String,
        message: String,
    },
}

impl CtlError {
    fn exit(&self) -> Exit {
        match self {
            CtlError::Usage(_) => Exit::Usage,
            CtlError::Unreachable { .. } => Exit::Unreachable,
            CtlError::Refused { status, .. } => match status {
                401 | 403 => Exit::Denied,
                404 => Exit::NotFound,
                _ => Exit::Refused,
            },
        }
    }
}

struct Client {
    base: String,
    token: String,
    http: reqwest::Client,
    bound: Duration,
}

impl Client {
    /// The client `ctl` asks with: its token from the environment, bounded requests.
    fn of(ctl: &Ctl) -> Result<Client, CtlError> {
        let token = std::env::var(&ctl.token_env)
            .ok()
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| {
                CtlError::Usage(format!(
                    "no token: set {} to a lead's token (or a member's, to read only)",
                    ctl.token_env
                ))
            })?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| CtlError::Usage(format!("the HTTP client: {e}")))?;
        Ok(Client {
            base: ctl.url.trim_end_matches('/').to_string(),
            token,
            http,
            bound: Duration::from_millis(ctl.request_timeout_ms),
        })
    }

    async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        bound: Duration,
    ) -> Result<(u16, Value), CtlError> {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .http
            .request(method, &url)
            .bearer_auth(&self.token)
            .timeout(bound);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let unreachable = |why: String| CtlError::Unreachable {
            url: self.base.clone(),
            why,
        };
        let resp = req.send().await.map_err(|e| unreachable(error_chain(&e)))?;
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(|e| unreachable(e.to_string()))?;
        let v: Value = serde_json::from_str(&text).map_err(|_| {
            unreachable(format!(
                "answered {status} with something that is not JSON: {}",
                text.chars().take(120).collect::<String>()
            ))
        })?;
        Ok((status, v))
    }

    /// The answer's body when it is a success; the gateway's `{code, message}` otherwise.
    async fn ok(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, CtlError> {
        let (status, v) = self.request(method, path, body, self.bound).await?;
        if (200..300).contains(&status) {
            return Ok(v);
        }
        Err(refused(status, &v))
    }

    async fn get(&self, path: &str) -> Result<Value, CtlError> {
        self.ok(reqwest::Method::GET, path, None).await
    }
}

fn refused(status: u16, v: &Value) -> CtlError {
    CtlError::Refused {
        status,
        code: v["code"].as_str().unwrap_or("error").to_string(),
        message: v["message"].as_str().unwrap_or("").to_string(),
    }
}

/// reqwest's error with its causes ("error sending request: … Connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// A path segment: ids are UUIDs or labels, but nothing a user types is pasted raw. (`.`
/// and `..`, escaped or not, would be resolved away by the URL parser: `id` refuses them.)
fn seg(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'~' | b'.' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A user-given id as a path segment; `.`, `..` and empty ones are no id (the URL parser
/// would resolve them away, escaped or not, and the request would go to another route).
fn id(s: &str) -> Result<String, CtlError> {
    if matches!(s, "" | "." | "..") {
        return Err(CtlError::Usage(format!("{s:?} is not an id")));
    }
    Ok(seg(s))
}

/// Runs `fleetd ctl …` and returns its exit status.
pub fn main(ctl: Ctl) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            out::eprintln(&format!("fleetd ctl: starting the runtime: {e}"));
            return Exit::Unreachable.into();
        }
    };
    match rt.block_on(run(ctl)) {
        Ok(exit) => exit.into(),
        Err(e) => {
            out::eprintln(&format!("fleetd ctl: {e}"));
            e.exit().into()
        }
    }
}

async fn run(ctl: Ctl) -> Result<Exit, CtlError> {
    let c = Client::of(&ctl)?;
    let show = Show { json: ctl.json };
    match ctl.command {
        CtlCommand::List => {
            let v = c.get("/members").await?;
            show.it(&v, &|v| roster_table(v, now_ms()));
            Ok(Exit::Ok)
        }
        CtlCommand::Status { gid } => {
            let v = c.get(&format!("/sessions/{}/status", id(&gid)?)).await?;
            show.it(&v, &status_text);
            Ok(Exit::Ok)
        }
        CtlCommand::Profiles => {
            let v = c.get("/profiles").await?;
            show.it(&v, &profiles_table);
            Ok(Exit::Ok)
        }
        CtlCommand::Overview => {
            let v = c.get("/overview").await?;
            show.it(&v, &overview_text);
            Ok(Exit::Ok)
        }
        CtlCommand::Attention => {
            let v = c.get("/attention").await?;
            show.it(&v, &attention_text);
            Ok(Exit::Ok)
        }
        CtlCommand::Tasks { id: None } => {
            let v = c.get("/tasklist").await?;
            show.it(&v, &tasks_table);
            Ok(Exit::Ok)
        }
        CtlCommand::Tasks { id: Some(n) } => {
            let v = c.get(&format!("/tasklist/{n}")).await?;
            show.it(&v, &task_text);
            Ok(Exit::Ok)
        }
        CtlCommand::TaskAdd {
            title,
            assignee,
            deps,
            timeout_ms,
            brief,
        } => {
            let mut body =
                json!({"title": title, "assignee": assignee, "deps": deps, "brief": brief});
            if let Some(ms) = timeout_ms {
                body["timeoutMs"] = json!(ms);
            }
            let v = c.ok(reqwest::Method::POST, "/tasklist", Some(body)).await?;
            show.it(&v, &tasks_table);
            Ok(Exit::Ok)
        }
        CtlCommand::Review { id, decision } => {
            let path = format!("/tasklist/{id}/review");
            let body = json!({ "decision": decision });
            let v = c.ok(reqwest::Method::POST, &path, Some(body)).await?;
            show.it(&v, &tasks_table);
            Ok(Exit::Ok)
        }
        CtlCommand::Stop { gid } => {
            let path = format!("/members/{}", id(&gid)?);
            let v = c.ok(reqwest::Method::DELETE, &path, None).await?;
            show.it(&v, &|_| format!("stopped {gid}\n"));
            Ok(Exit::Ok)
        }
        CtlCommand::Spawn {
            profile,
            host,
            role,
            group,
            cwd,
            ticket,
        } => {
            let fields = [
                ("profile", profile),
                ("host", host),
                ("role", role),
                ("group", group),
                ("cwd", cwd),
                ("ticket", ticket),
            ];
            spawn(&c, show, fields).await
        }
        CtlCommand::Poll {
            ticket,
            replies,
            peek,
        } => poll(&c, show, ticket, replies, peek).await,
        CtlCommand::Send {
            gid,
            text,
            wait: _,
            no_wait,
            timeout_ms,
            turn_id,
        } => {
            let mut body = json!({ "message": text, "wait": false });
            if let Some(ms) = timeout_ms {
                body["timeoutMs"] = json!(ms);
            }
            if let Some(t) = &turn_id {
                body["turnId"] = json!(t);
            }
            send(&c, show, &gid, body, no_wait).await
        }
        CtlCommand::Tail {
            flow,
            audit,
            every_ms,
        } => match audit {
            Some(path) => tail_audit(&path, ctl.json, Duration::from_millis(every_ms)).await,
            None => {
                let every = Duration::from_millis(every_ms.max(100));
                tail_flows(&c, flow, ctl.json, every).await
            }
        },
    }
}

/// How an answer is printed: as JSON (`--json`) or as `human` renders it.
#[derive(Clone, Copy)]
struct Show {
    json: bool,
}

impl Show {
    fn it(self, v: &Value, human: &dyn Fn(&Value) -> String) {
        if self.json {
            out::println_json(&serde_json::to_string_pretty(v).unwrap_or_default());
        } else {
            out::print(&human(v));
        }
    }
}

/// `ctl spawn`: waits for the member's readiness gate, with a progress line.
async fn spawn(
    c: &Client,
    show: Show,
    fields: [(&str, Option<String>); 6],
) -> Result<Exit, CtlError> {
    let mut body = serde_json::Map::new();
    for (k, v) in fields {
        if let Some(v) = v {
            body.insert(k.into(), json!(v));
        }
    }
    progress_line("spawning: waiting for the member to be ready");
    let (status, v) = c
        .request(
            reqwest::Method::POST,
            "/members",
            Some(Value::Object(body)),
            // A spawn waits for its member's readiness gate.
            Duration::from_secs(300),
        )
        .await?;
    progress_done();
    if !(200..300).contains(&status) {
        return Err(refused(status, &v));
    }
    show.it(&v, &|v| {
        format!(
            "{}\t{}\n",
            v["gid"].as_str().unwrap_or("?"),
            v["host"].as_str().unwrap_or("?")
        )
    });
    Ok(Exit::Ok)
}

/// `ctl poll`: a ticket's state, or a member's held replies (drained, or only shown).
async fn poll(
    c: &Client,
    show: Show,
    ticket: Option<String>,
    replies: Option<String>,
    peek: bool,
) -> Result<Exit, CtlError> {
    match (ticket, replies) {
        (_, Some(gid)) => {
            let v = if peek {
                c.get(&format!("/sessions/{}/replies?peek=true", id(&gid)?))
                    .await?
            } else {
                let path = format!("/sessions/{}/replies", id(&gid)?);
                c.ok(reqwest::Method::POST, &path, None).await?
            };
            show.it(&v, &replies_text);
            Ok(Exit::Ok)
        }
        (Some(ticket), None) => {
            let v = c.get(&format!("/tasks/{}", id(&ticket)?)).await?;
            show.it(&v, &ticket_text);
            Ok(ticket_exit(&v))
        }
        (None, None) => Err(CtlError::Usage("poll needs a ticket or --replies".into())),
    }
}

/// `ctl send`: the brief sent, then (unless `--no-wait`) its ticket followed to its end.
async fn send(
    c: &Client,
    show: Show,
    gid: &str,
    body: Value,
    no_wait: bool,
) -> Result<Exit, CtlError> {
    let path = format!("/sessions/{}/message", id(gid)?);
    let (status, v) = c
        .request(reqwest::Method::POST, &path, Some(body), c.bound)
        .await?;
    if v["type"] == "outcome" {
        // Ended at once (BUSY, STALE_TURN, …): an outcome, whatever its status.
        show.it(&v, &ticket_text);
        return Ok(ticket_exit(&v));
    }
    if !(200..300).contains(&status) {
        return Err(refused(status, &v));
    }
    if no_wait || v["type"] != "ticket" {
        show.it(&v, &ticket_text);
        return Ok(if v["type"] == "ticket" {
            Exit::Ok
        } else {
            ticket_exit(&v)
        });
    }
    let ticket = v["ticket"].as_str().unwrap_or_default().to_string();
    let v = wait_for(c, gid, &ticket).await?;
    show.it(&v, &ticket_text);
    Ok(ticket_exit(&v))
}

fn now_ms() -> u64 {
    crate::clock::TokioClock::new().unix_ms()
}

/// Polls a ticket until it ends or asks, with its phase on one stderr line.
async fn wait_for(c: &Client, gid: &str, ticket: &str) -> Result<Value, CtlError> {
    let path = format!("/tasks/{}", seg(ticket));
    let started = tokio::time::Instant::now();
    loop {
        let v = c.get(&path).await?;
        let phase = v["phase"].as_str().unwrap_or("?");
        if phase != "PENDING" {
            progress_done();
            return Ok(v);
        }
        progress_line(&format!(
            "waiting on {gid}: {} s (ticket {ticket}, {phase})",
            started.elapsed().as_secs()
        ));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The exit status a ticket's state maps to.
fn ticket_exit(v: &Value) -> Exit {
    if v["phase"] == "ASKING" || v["outcome"] == "QUESTION" {
        return Exit::Question;
    }
    match v["outcome"].as_str() {
        None | Some("REPLIED") | Some("COMPLETED_UNREPLIED") => Exit::Ok,
        Some(_) => Exit::NoReply,
    }
}

/// One line on stderr, rewritten in place on a terminal; nothing when stderr is not one
/// (a script's log gets the result, not a hundred progress lines).
fn progress_line(s: &str) {
    let mut e = std::io::stderr();
    if e.is_terminal() {
        let _ = write!(e, "\r\x1b[2K{}", out::text(s));
        let _ = e.flush();
    }
}

fn progress_done() {
    let mut e = std::io::stderr();
    if e.is_terminal() {
        let _ = write!(e, "\r\x1b[2K");
        let _ = e.flush();
    }
}

#[cfg(test)]
mod tests;

//! The MCP face (ch. 9 `mcp/FleetMcp`): exactly the fifteen `fleet_*` tools (ch. 9's eleven,
//! `fleet_attention` and the three `fleet_task_*`), over Streamable
//! HTTP at `/mcp` (rmcp). Each request is served statelessly and its caller is resolved from
//! that request's own credentials (rmcp does not bind a session to a principal, so nothing is
//! carried from one request to the next); a tool argument never names the caller.

use crate::faces::{self, App, SendArgs, SpawnArgs};
use crate::identity::Caller;
use axum::http::request::Parts;
use fleet_core::authz::Action;
use fleet_core::{CallError, Request};
use rmcp::handler::server::common::Extension;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{tool, tool_handler, tool_router, ErrorData, ServerHandler};
use serde::Deserialize;
use serde_json::Value;

const INSTRUCTIONS: &str = "fleetd delegates work to agents running in terminal panes on one or \
many hosts. As a lead: fleet_list shows who exists, fleet_profiles what can be started where, \
fleet_spawn starts a member, fleet_send delegates a task and (by default) blocks until its \
outcome — REPLIED with the member's answer, QUESTION with a turnId you answer by fleet_send \
{turnId}, or a failure — fleet_poll collects replies that arrived when nobody was waiting. As a \
member: when you finish a task call fleet_reply with your result; if you are blocked on a \
decision, fleet_ask the lead. fleet_attention lists what waits on you. fleet_task_add keeps a task list with dependencies \
that starts each task when it may (fleet_task_list, fleet_task_review). fleet_whoami tells you \
which you are.";

#[derive(Clone)]
pub struct Fleet {
    app: App,
    tool_router: ToolRouter<Fleet>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskListArgs {
    /// One task by its number, with its brief and its result; all of them (without those
    /// texts) when absent.
    #[serde(default)]
    pub id: Option<u32>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskReviewArgs {
    /// The task's number in your list.
    pub id: u32,
    pub decision: faces::ReviewDecision,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplyArgs {
    /// Your result: what you did, what you found, what is left. The lead reads exactly this.
    pub message: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AskArgs {
    /// One clear question the lead can answer without context you have not given.
    pub question: String,
    /// How long to wait for the answer (default: the gateway's ask timeout).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionArgs {
    /// The session's fleet-wide id (from fleet_list or fleet_spawn).
    pub session_id: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PollArgs {
    /// The ticket a wait:false fleet_send returned: its phase, open question, or outcome.
    #[serde(default)]
    pub ticket: Option<String>,
    /// Or a member: collect (and remove) the replies it sent while nobody was waiting.
    #[serde(default)]
    pub session_id: Option<String>,
    /// With sessionId: only look; remove them later with fleet_ack.
    #[serde(default)]
    pub peek: Option<bool>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AckArgs {
    /// The member whose held replies were peeked.
    pub session_id: String,
    /// The reply ids fleet_poll{peek:true} showed, now handled.
    pub ids: Vec<String>,
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

fn caller(parts: &Parts) -> Result<Caller, ErrorData> {
    parts
        .extensions
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| ErrorData::internal_error("no caller resolved for this request", None))
}

fn json_result(ok: bool, v: &Value) -> CallToolResult {
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    if ok {
        CallToolResult::success(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::error(vec![ContentBlock::text(text)])
    }
}

fn refused(e: &CallError) -> CallToolResult {
    json_result(false, &faces::error_body(e))
}

impl Fleet {
    async fn run(
        &self,
        parts: &Parts,
        req: Result<Request, CallError>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(parts)?;
        let req = match req {
            Ok(r) => r,
            Err(e) => return Ok(refused(&e)),
        };
        match self.app.call(&caller, "mcp", req).await {
            Ok(resp) => {
                let ok = faces::http_status(&resp) < 400;
                Ok(json_result(ok, &faces::body(&resp)))
            }
            Err(_) => Ok(json_result(false, &faces::gone_body())),
        }
    }
}

#[tool_router]
impl Fleet {
    #[tool(
        description = "Delegate a task to a member (sessionId) and, by default, block until \
its outcome: REPLIED (the member's fleet_reply is in `body`), COMPLETED_UNREPLIED (the turn \
ended without a reply; `body` is what it left on screen), QUESTION (the member asked something: \
answer with fleet_send{turnId, message}), or a failure (WORKER_FAILED, BACKEND_EXHAUSTED, \
TIMED_OUT_WORKING, TIMED_OUT_QUEUED, BUSY: another delegation to it is open). wait:false returns \
a ticket at once; follow it with fleet_poll{ticket}. coordId (a peer lead's id) is coordination, \
not delegation: a note typed into that lead's pane when it is ready, answered `coordinated` at \
once and never waited on; broadcast \
('all' or a group) sends the same announcement to every member. The message is typed into the \
recipient's pane only when it is ready, never twice."
    )]
    async fn fleet_send(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(args): Parameters<SendArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(&parts, args.request()).await
    }

    #[tool(
        description = "As a member: report the result of the task you were given. Call it \
once, when you are done, with everything the lead needs; it unblocks the lead's fleet_send \
(or is held for it if it stopped waiting)."
    )]
    async fn fleet_reply(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(args): Parameters<ReplyArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(
            &parts,
            Ok(Request::Reply {
                content: args.message,
            }),
        )
        .await
    }

    #[tool(
        description = "As a member: ask the lead that delegated your current task a \
question, and wait for the answer (ANSWERED with `answer`, NO_WAITER when nobody is waiting on \
your turn, TIMED_OUT). Use it only when you cannot proceed without a decision."
    )]
    async fn fleet_ask(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(args): Parameters<AskArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(
            &parts,
            Ok(Request::Ask {
                question: args.question,
                timeout_ms: args.timeout_ms,
            }),
        )
        .await
    }

    #[tool(
        description = "A session's state, on any host: its roster row (agent status IDLE, \
WORKING, BLOCKED, DONE or UNKNOWN; busy; ready; profile, role, group, owner lead, since), and \
on its own host how many messages are queued for it. A gid no host serves is not_found."
    )]
    async fn fleet_status(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(args): Parameters<SessionArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let req = faces::target(&args.session_id).map(|target| Request::Status { target });
        self.run(&parts, req).await
    }

    #[tool(
        description = "Either follow a wait:false send (ticket: PENDING, ASKING with the \
open question and its turnId, DONE or FAILED with the outcome), or collect a member's replies \
that arrived while no send was waiting (sessionId; they are removed unless peek:true)."
    )]
    async fn fleet_poll(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(args): Parameters<PollArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let req = match (args.ticket, args.session_id) {
            (Some(t), None) => faces::ticket(&t).map(|ticket| Request::Poll { ticket }),
            (None, Some(s)) => faces::target(&s).map(|target| match args.peek {
                Some(true) => Request::Peek { target },
                _ => Request::Drain { target },
            }),
            _ => Err(CallError::InvalidArgument {
                reason: "give exactly one of ticket or sessionId".into(),
            }),
        };
        self.run(&parts, req).await
    }

    #[tool(
        description = "Remove replies you looked at with fleet_poll{sessionId, peek:true}, \
by their ids."
    )]
    async fn fleet_ack(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(args): Parameters<AckArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let ids: Result<Vec<_>, _> = args
            .ids
            .iter()
            .map(|s| s.parse::<uuid::Uuid>().map(fleet_core::ReplyId))
            .collect();
        let req = match (faces::target(&args.session_id), ids) {
            (Ok(target), Ok(ids)) => Ok(Request::Ack { target, ids }),
            (Err(e), _) => Err(e),
            (_, Err(_)) => Err(CallError::InvalidArgument {
                reason: "ids must be the reply ids fleet_poll showed".into(),
            }),
        };
        self.run(&parts, req).await
    }

    #[tool(
        description = "Start a member from a profile (fleet_profiles lists them per host; leave it out and the host's placement chooses), \
on this host, on `host`, or on host \"any\" (the live host with the fewest members), with a role (ARCHITECT, DEV by default, REVIEWER), optionally in a git worktree (a repo path here, or a URL and an \
exact 40-hex commit for another host). Returns its sessionId once it is ready for a task."
    )]
    async fn fleet_spawn(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(args): Parameters<SpawnArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(&parts, args.request()).await
    }

    #[tool(
        description = "The fleet-wide roster: every member, lead and gateway on every host, \
with its host, status, whether it is busy and ready, its profile, role, group, ticket, cwd, \
charter receipt, the lead that spawned it, since when, and whether the row is live. Leads' ids \
are their coordIds; `you` says who is asking and its own coordId."
    )]
    async fn fleet_list(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(_): Parameters<NoArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        match self.app.call(&caller, "mcp", Request::List).await {
            Ok(resp) => {
                let ok = faces::http_status(&resp) < 400;
                let mut body = faces::body(&resp);
                // Who is asking, and the coordId a peer lead reaches it by.
                if let Some(obj) = body.as_object_mut().filter(|_| ok) {
                    obj.insert("you".into(), self.app.whoami(&caller));
                }
                Ok(json_result(ok, &body))
            }
            Err(_) => Ok(json_result(false, &faces::gone_body())),
        }
    }

    #[tool(
        description = "Stop a member on any host (sessionId: its gid from fleet_list): its pane \
closes, its inbox is deleted and any delegation to it ends ABANDONED. Answers stopped once its \
host confirms it left; not_found, not_allowed (its host takes no control from this one), \
broker_unavailable or stop_unconfirmed otherwise. Leads are not stopped."
    )]
    async fn fleet_stop(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(args): Parameters<SessionArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let req = faces::target(&args.session_id).map(|target| Request::Stop { target });
        self.run(&parts, req).await
    }

    #[tool(
        description = "The profiles each host offers for fleet_spawn, by host; for this host also its placement strategy and each profile's credential, load, maxLoad and coolingUntil (Unix ms, while its credential cools down after a usage limit)."
    )]
    async fn fleet_profiles(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(_): Parameters<NoArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        if let Err(e) = self.app.authorize(&caller, Action::Read) {
            return Ok(refused(&e));
        }
        match self.app.profiles(&caller).await {
            Ok(v) => Ok(json_result(true, &v)),
            Err(_) => Ok(json_result(false, &faces::gone_body())),
        }
    }

    #[tool(
        description = "What waits on you, oldest first: your members' questions (answer one \
with fleet_send {turnId}), results you have not collected (fleet_poll), your members that \
cannot go on by themselves (BLOCKED, NEVER_READY, STALL_SUSPECTED, ERROR_ON_SCREEN, or whose agent \
waits on a person, hit a usage limit or a provider error), and this \
host's own troubles (a credential cooling down, the broker link down). Each says how long it has \
waited; `elsewhere` counts what waits on you at other hosts."
    )]
    async fn fleet_attention(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(_): Parameters<NoArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(&parts, Ok(Request::Attention)).await
    }

    #[tool(
        description = "Add a task to your own task list, kept by this gateway across restarts: \
a title, the brief typed into its assignee's pane, the member that runs it (any host), and the \
tasks of your list it depends on. It starts as your own wait:false send once every dependency \
is done and its assignee runs nothing else of your list; its result then waits in review for \
your fleet_task_review. States: pending, ready, running, review, done, failed."
    )]
    async fn fleet_task_add(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(args): Parameters<faces::TaskAddArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(&parts, args.request()).await
    }

    #[tool(
        description = "Your task list: every task with its state, assignee, dependencies and \
why it waits or failed; or one task (id) with its brief and its result."
    )]
    async fn fleet_task_list(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(args): Parameters<TaskListArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let id = args.id.map(fleet_core::tasks::TaskId);
        self.run(&parts, Ok(Request::Tasks { id })).await
    }

    #[tool(
        description = "Decide on one of your tasks: done accepts a result in review (tasks \
that depend on it may start), failed gives a task up (pending, ready or in review), retry \
runs a task in review or a failed one again."
    )]
    async fn fleet_task_review(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(args): Parameters<TaskReviewArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let review = faces::ReviewArgs {
            decision: args.decision,
        };
        self.run(&parts, Ok(review.request(args.id))).await
    }

    #[tool(
        description = "Who you are to this gateway: your role (PRIMARY lead, ARCHITECT, \
WORKER member, or ANONYMOUS), your session id, your coordId as a lead, and the host."
    )]
    async fn fleet_whoami(
        &self,
        Extension(parts): Extension<Parts>,
        Parameters(_): Parameters<NoArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        Ok(json_result(true, &self.app.whoami_as_seen(&caller).await))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Fleet {
    fn get_info(&self) -> ServerConfig {
        let mut info = rmcp::model::Implementation::from_build_env();
        info.name = "fleetd".into();
        info.version = env!("CARGO_PKG_VERSION").into();
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(info)
            .with_instructions(INSTRUCTIONS)
    }
}

/// The `/mcp` service: stateless, JSON answers, `Host` checked against `allowed_hosts`. Each
/// request gets a fresh handler (stateless mode); the tool table, schemas included, is built
/// once and shared.
pub fn service(
    app: App,
    allowed_hosts: Vec<String>,
    cancel: tokio_util::sync::CancellationToken,
) -> StreamableHttpService<Fleet, LocalSessionManager> {
    let tools = Fleet::tool_router();
    let cfg = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_allowed_hosts(allowed_hosts)
        .with_cancellation_token(cancel);
    StreamableHttpService::new(
        move || {
            Ok(Fleet {
                app: app.clone(),
                tool_router: tools.clone(),
            })
        },
        Default::default(),
        cfg,
    )
}

//! The REST face (ch. 9 `rest/FleetApp`): the fourteen routes with the meanings the Java
//! daemon gave them, JSON errors with stable codes, and the OpenAPI document generated from
//! the same route table (`/openapi.json`), so it cannot describe a route that does not exist.

use crate::faces::{self, App, SendArgs, SpawnArgs, SpawnQuery};
use crate::herdr::{Api, Socket};
use crate::identity::Caller;
use axum::extract::{FromRequest, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::{Extension, Json};
use fleet_core::authz::Action;
use fleet_core::{CallError, Request};
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "fleetd",
        description = "Delegate tasks to agents in herdr panes across hosts. Every route takes \
                       `Authorization: Bearer <token>` (a lead's token, or a member's own); \
                       errors are `{code, message}` with a stable `code`."
    ),
    components(schemas(
        SendArgs,
        SpawnArgs,
        faces::WorktreeArgs,
        faces::TaskAddArgs,
        faces::ReviewArgs,
        ErrorBody
    ))
)]
struct Doc;

/// An error: `code` is stable (`denied`, `unknown_ticket`, `inbox_full`, …).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct ErrorBody {
    code: String,
    message: String,
}

type Reply = (StatusCode, Json<Value>);

/// A JSON body whose refusal (not JSON, wrong content type, an unknown or missing field) is
/// the same `{code: "invalid_argument", message}` 400 as every other bad argument.
struct Body<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> axum::extract::FromRequest<S> for Body<T> {
    type Rejection = Reply;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Reply> {
        let refused = |reason: String| error(&CallError::InvalidArgument { reason });
        let value = match Json::<Value>::from_request(req, state).await {
            Ok(Json(v)) => v,
            Err(rejection) => return Err(refused(rejection.body_text())),
        };
        // serde would read a struct from an array too; every body here is an object.
        if !value.is_object() {
            return Err(refused("the body must be a JSON object".into()));
        }
        serde_json::from_value(value)
            .map(Body)
            .map_err(|e| refused(format!("the body: {e}")))
    }
}

fn answer(status: u16, v: Value) -> Reply {
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        Json(v),
    )
}

fn error(e: &CallError) -> Reply {
    answer(faces::error_status(e), faces::error_body(e))
}

async fn call(app: &App, caller: &Caller, req: Result<Request, CallError>) -> Reply {
    let req = match req {
        Ok(r) => r,
        Err(e) => return error(&e),
    };
    match app.call(caller, "rest", req).await {
        Ok(resp) => answer(faces::http_status(&resp), faces::body(&resp)),
        Err(_) => answer(503, faces::gone_body()),
    }
}

/// The routes and their OpenAPI document.
pub fn router() -> (axum::Router<App>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(Doc::openapi())
        .routes(routes!(healthz))
        .routes(routes!(metrics))
        .routes(routes!(sessions))
        .routes(routes!(agents))
        .routes(routes!(list_members, spawn_member))
        .routes(routes!(profiles))
        .routes(routes!(stop_member))
        .routes(routes!(message))
        .routes(routes!(reply))
        .routes(routes!(report))
        .routes(routes!(replies, drain_replies))
        .routes(routes!(ask))
        .routes(routes!(status))
        .routes(routes!(task))
        .routes(routes!(overview))
        .routes(routes!(attention))
        .routes(routes!(task_list, task_add))
        .routes(routes!(task_one))
        .routes(routes!(task_review))
        .routes(routes!(openapi))
        .routes(routes!(crate::ui::index))
        .routes(routes!(crate::ui::asset))
        .split_for_parts()
}

/// Liveness: the broker link and each herdr with its protocol version.
#[utoipa::path(get, path = "/healthz", tag = "ops",
    responses((status = 200, description = "all parts answer"), (status = 503, description = "degraded: see which part")))]
async fn healthz(State(app): State<App>) -> Reply {
    let (ok, v) = app.healthz().await;
    answer(if ok { 200 } else { 503 }, v)
}

/// Prometheus metrics as OpenMetrics text: counters, gauges and latency histograms.
#[utoipa::path(get, path = "/metrics", tag = "ops",
    responses((status = 200, description = "OpenMetrics text (application/openmetrics-text; version=1.0.0)", content_type = "application/openmetrics-text")))]
async fn metrics(State(app): State<App>, Extension(caller): Extension<Caller>) -> HttpResponse {
    if let Err(e) = app.authorize(&caller, Action::Metrics) {
        return error(&e).into_response();
    }
    app.sample_broker();
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        app.metrics.render(),
    )
        .into_response()
}

async fn panes(app: &App, caller: &Caller, agents_only: bool) -> Reply {
    if let Err(e) = app.authorize(caller, Action::Read) {
        return error(&e);
    }
    let h = &app.health;
    // A lead sees every pane of its herdr; anyone else only the fleet's own (`fleet:<gid>`),
    // not an operator's shells and editors.
    let all = caller.principal.role == fleet_core::Role::Primary;
    let mut out = Vec::new();
    for (which, path) in [("leads", &h.herdr), ("members", &h.member_herdr)] {
        let Some(path) = path else { continue };
        let api = Api::new(Socket::new(path.clone(), h.herdr_timeout));
        match api.pane_list().await {
            Ok(list) => out.extend(
                list.into_iter()
                    .filter(|p| !agents_only || p.agent.is_some())
                    .filter(|p| all || p.label.as_deref().is_some_and(|l| l.starts_with("fleet:")))
                    .map(|p| {
                        json!({
                            "herdr": which,
                            "paneId": p.pane_id,
                            "workspaceId": p.workspace_id,
                            "tabId": p.tab_id,
                            "label": p.label,
                            "agent": p.agent,
                            "agentStatus": p.agent_status,
                        })
                    }),
            ),
            Err(e) => {
                return answer(
                    502,
                    json!({"code": "herdr_unavailable", "message": e.to_string(), "herdr": which}),
                )
            }
        }
    }
    answer(200, json!({ "panes": out }))
}

/// herdr's panes, merged across the leads' and the members' herdr.
#[utoipa::path(get, path = "/sessions", tag = "herdr",
    responses((status = 200, description = "panes"), (status = 502, description = "herdr did not answer", body = ErrorBody)))]
async fn sessions(State(app): State<App>, Extension(caller): Extension<Caller>) -> Reply {
    panes(&app, &caller, false).await
}

/// The panes herdr tracks an agent in.
#[utoipa::path(get, path = "/agents", tag = "herdr",
    responses((status = 200, description = "agent panes"), (status = 502, description = "herdr did not answer", body = ErrorBody)))]
async fn agents(State(app): State<App>, Extension(caller): Extension<Caller>) -> Reply {
    panes(&app, &caller, true).await
}

/// The fleet-wide roster (every host's members, leads and gateways) with live status.
#[utoipa::path(get, path = "/members", tag = "members",
    responses((status = 200, description = "roster rows"), (status = 401, description = "unauthenticated: no or a bad token", body = ErrorBody)))]
async fn list_members(State(app): State<App>, Extension(caller): Extension<Caller>) -> Reply {
    call(&app, &caller, Ok(Request::List)).await
}

/// Spawn a member (`fleet_spawn`): on this host, or on `host` over the control plane. The
/// spawn is this JSON body. (ch. 9's query form, `?role=&profile=&cwd=&worktree=&ticket=`
/// with no body, is still served for its clients; it is not described here, as a request may
/// not carry both.)
#[utoipa::path(post, path = "/members", tag = "members", request_body = SpawnArgs,
    responses((status = 200, description = "spawned and ready"), (status = 400, description = "invalid_argument: a malformed or refused argument", body = ErrorBody),
              (status = 403, description = "denied: the caller may not do this", body = ErrorBody),
              (status = 404, description = "no_such_host: no gateway for that host is listening", body = ErrorBody),
              (status = 502, description = "the spawn failed", body = ErrorBody)))]
async fn spawn_member(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<SpawnQuery>, axum::extract::rejection::QueryRejection>,
    req: axum::extract::Request,
) -> Reply {
    let query = match query {
        Ok(Query(q)) => q,
        Err(rejection) => {
            return error(&CallError::InvalidArgument {
                reason: rejection.body_text(),
            })
        }
    };
    let args = if query.is_empty() {
        match Body::<SpawnArgs>::from_request(req, &()).await {
            Ok(Body(args)) => Ok(args),
            Err(reply) => return reply,
        }
    } else {
        let has_body = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|n| n != "0")
            || req
                .headers()
                .contains_key(axum::http::header::TRANSFER_ENCODING);
        if has_body {
            Err(CallError::InvalidArgument {
                reason: "a spawn is the query or a JSON body, not both".into(),
            })
        } else {
            query.args()
        }
    };
    call(&app, &caller, args.and_then(SpawnArgs::request)).await
}

/// The profiles each host offers.
#[utoipa::path(get, path = "/profiles", tag = "members", responses((status = 200, description = "profiles by host")))]
async fn profiles(State(app): State<App>, Extension(caller): Extension<Caller>) -> Reply {
    if let Err(e) = app.authorize(&caller, Action::Read) {
        return error(&e);
    }
    match app.profiles(&caller).await {
        Ok(v) => answer(200, v),
        Err(_) => answer(503, faces::gone_body()),
    }
}

/// Stop a member on any host (`fleet_stop`): its pane closes, its inbox is deleted, its open
/// delegations end ABANDONED. A member on another host is stopped through a STOP to its
/// gateway, answered once that host announces it left.
#[utoipa::path(delete, path = "/members/{id}", tag = "members",
    params(("id" = String, Path, description = "the member's gid", min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$")),
    responses((status = 200, description = "stopped"), (status = 400, description = "a lead, not a member", body = ErrorBody),
              (status = 403, description = "denied, or not_allowed by the member's host", body = ErrorBody),
              (status = 404, description = "not_found: no host serves it", body = ErrorBody),
              (status = 503, description = "broker_unavailable", body = ErrorBody),
              (status = 504, description = "stop_unconfirmed: its host did not confirm within stop_timeout_ms", body = ErrorBody)))]
async fn stop_member(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Reply {
    let req = faces::target(&id).map(|target| Request::Stop { target });
    call(&app, &caller, req).await
}

/// `POST /sessions/{id}/message`'s body: `fleet_send` without the recipient fields.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MessageBody {
    /// The brief, or the answer; not blank.
    #[schema(min_length = 1, pattern = r"\S")]
    pub message: String,
    #[serde(default)]
    pub wait: Option<bool>,
    #[serde(default, deserialize_with = "faces::whole_ms")]
    #[schema(minimum = 1)]
    pub timeout_ms: Option<u64>,
    /// Answer the open question of this turn instead of starting a new delegation.
    #[serde(default)]
    #[schema(
        pattern = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
    )]
    pub turn_id: Option<String>,
}

/// The request `POST /sessions/{id}/message` makes of its body. An answer's turn must be
/// `{id}`'s own: the core refuses one asked by someone else.
pub fn message_request(id: String, b: MessageBody) -> Result<Request, CallError> {
    let answer = b.turn_id.is_some();
    let args = SendArgs {
        session_id: (!answer).then(|| id.clone()),
        turn_id: b.turn_id,
        message: b.message,
        wait: b.wait,
        timeout_ms: b.timeout_ms,
        ..SendArgs::default()
    };
    let mut request = args.request()?;
    if let Request::Answer { asked_by, .. } = &mut request {
        *asked_by = Some(fleet_core::SessionId::new(id));
    }
    Ok(request)
}

/// `fleet_send`: blocking (the outcome), `wait:false` (202 and a ticket), or an answer via `turnId`.
#[utoipa::path(post, path = "/sessions/{id}/message", tag = "delegation", request_body = MessageBody,
    params(("id" = String, Path, description = "the recipient's id", min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$")),
    responses((status = 200, description = "REPLIED, COMPLETED_UNREPLIED or QUESTION"),
              (status = 202, description = "a ticket (wait:false)"),
              (status = 409, description = "BUSY or STALE_TURN"), (status = 502, description = "WORKER_FAILED"),
              (status = 503, description = "BACKEND_EXHAUSTED, or the broker is unreachable"),
              (status = 504, description = "TIMED_OUT_WORKING or TIMED_OUT_QUEUED")))]
async fn message(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(b): Body<MessageBody>,
) -> Reply {
    call(&app, &caller, message_request(id, b)).await
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplyBody {
    pub message: String,
}

/// The caller's own session ends the question of `id` it was asked as: `{id}` must be itself.
fn own(caller: &Caller, id: &str) -> Result<(), CallError> {
    match &caller.principal.session {
        Some(s) if s.as_str() == id => Ok(()),
        _ => Err(CallError::Denied {
            role: caller.principal.role,
            action: Action::Reply,
        }),
    }
}

/// `fleet_reply` (a member, for its own session only).
#[utoipa::path(post, path = "/sessions/{id}/reply", tag = "delegation", request_body = ReplyBody,
    params(("id" = String, Path, description = "the caller's own session id", min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$")),
    responses((status = 200, description = "accepted (reached its waiter, or held for the lead)"),
              (status = 403, description = "denied: the caller may not do this", body = ErrorBody), (status = 429, description = "the lead's inbox is full", body = ErrorBody)))]
async fn reply(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(b): Body<ReplyBody>,
) -> Reply {
    let req = own(&caller, &id).map(|()| Request::Reply { content: b.message });
    call(&app, &caller, req).await
}

/// A member's agent says what it is doing (its hooks, notify program or plugin, which fleetd
/// installs; `fleetd member-report` posts it): `{seq, session?, event, …}` with `event` one of
/// `ready`, `turn_started {prompt}`, `turn_ended {prompt?, text}`, `turn_failed {prompt?,
/// limit, words}`, `waiting {words}`. For the caller's own session only.
#[utoipa::path(post, path = "/sessions/{id}/report", tag = "delegation",
    request_body(content = Object, description = "the agent's report"),
    params(("id" = String, Path, description = "the caller's own session id", min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$")),
    responses((status = 200, description = "heard: `verdict` says which brief it spoke for (started, ended, failed, noted, stale, foreign)"),
              (status = 400, description = "invalid_argument: a malformed report", body = ErrorBody),
              (status = 403, description = "denied: the caller may not do this", body = ErrorBody)))]
async fn report(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(report): Body<fleet_core::agent_report::AgentReport>,
) -> Reply {
    let req = own(&caller, &id).map(|()| Request::Report { report });
    call(&app, &caller, req).await
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RepliesQuery {
    /// `true`: show the held replies without removing them.
    #[serde(default)]
    pub peek: bool,
}

/// Drain a member's held replies (peek + ack), or with `?peek=true` only show them. A browser
/// page may only peek here (a GET must not change anything it can be tricked into loading):
/// it drains with POST.
#[utoipa::path(get, path = "/sessions/{id}/replies", tag = "delegation",
    params(("id" = String, Path, description = "the member whose replies to collect", min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$"), RepliesQuery),
    responses((status = 200, description = "the replies (removed unless peek)"), (status = 403, description = "denied: the caller may not do this", body = ErrorBody),
        (status = 400, description = "invalid_argument: a malformed or refused argument", body = ErrorBody),
        (status = 405, description = "a draining GET from a browser: drain with POST", body = ErrorBody)))]
async fn replies(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    query: Result<Query<RepliesQuery>, axum::extract::rejection::QueryRejection>,
) -> Reply {
    let q = match query {
        Ok(Query(q)) => q,
        Err(rejection) => {
            return error(&CallError::InvalidArgument {
                reason: rejection.body_text(),
            })
        }
    };
    let from_browser = headers.contains_key("sec-fetch-mode") || headers.contains_key("origin");
    if from_browser && !q.peek {
        let body = json!({
            "code": "drain_with_post",
            "message": "a browser drains held replies with POST /sessions/{id}/replies; GET ?peek=true shows them",
        });
        return (StatusCode::METHOD_NOT_ALLOWED, Json(body));
    }
    let req = faces::target(&id).map(|target| match q.peek {
        true => Request::Peek { target },
        false => Request::Drain { target },
    });
    call(&app, &caller, req).await
}

/// Drain a member's held replies (peek + ack): the form a browser uses.
#[utoipa::path(post, path = "/sessions/{id}/replies", tag = "delegation",
    params(("id" = String, Path, description = "the member whose replies to collect", min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$")),
    responses((status = 200, description = "the replies, now removed"), (status = 403, description = "denied: the caller may not do this", body = ErrorBody)))]
async fn drain_replies(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Reply {
    let req = faces::target(&id).map(|target| Request::Drain { target });
    call(&app, &caller, req).await
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AskBody {
    pub question: String,
    #[serde(default, deserialize_with = "faces::whole_ms")]
    #[schema(minimum = 1)]
    pub timeout_ms: Option<u64>,
}

/// `fleet_ask`: a member asks the lead waiting on its turn, and blocks for the answer.
#[utoipa::path(post, path = "/sessions/{id}/ask", tag = "delegation", request_body = AskBody,
    params(("id" = String, Path, description = "the caller's own session id", min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$")),
    responses((status = 200, description = "ANSWERED, NO_WAITER or TIMED_OUT"), (status = 403, description = "denied: the caller may not do this", body = ErrorBody)))]
async fn ask(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(b): Body<AskBody>,
) -> Reply {
    let req = own(&caller, &id).map(|()| Request::Ask {
        question: b.question,
        timeout_ms: b.timeout_ms,
    });
    call(&app, &caller, req).await
}

/// `fleet_status`, with `ready` (the readiness gate) and the queue.
#[utoipa::path(get, path = "/sessions/{id}/status", tag = "delegation",
    params(("id" = String, Path, description = "a session id", min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$")),
    responses((status = 200, description = "status"),
              (status = 404, description = "not_found: no host serves it now (with `departed` for a member that went from this host lately)", body = ErrorBody)))]
async fn status(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Reply {
    let req = faces::target(&id).map(|target| Request::Status { target });
    call(&app, &caller, req).await
}

/// Poll an async (`wait:false`) send: its phase, the open question while ASKING, the outcome once done.
#[utoipa::path(get, path = "/tasks/{ticket}", tag = "delegation",
    params(("ticket" = String, Path, description = "the ticket a wait:false send returned (a UUID)", pattern = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")),
    responses((status = 200, description = "the ticket"), (status = 404, description = "not_found / unknown_ticket", body = ErrorBody)))]
async fn task(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Path(ticket): Path<String>,
) -> Reply {
    let req = faces::ticket(&ticket).map(|ticket| Request::Poll { ticket });
    let r = call(&app, &caller, req).await;
    // A ticket poll is an answer, not a new acceptance.
    match r.0 {
        StatusCode::ACCEPTED => (StatusCode::OK, r.1),
        _ => r,
    }
}

/// What this gateway has in flight, beside the roster: every host it can see with its broker
/// link and counts (delegations, held results, dead letters), the delegations it holds a half
/// of with their phase, and the results held here for leads. `may` lists the actions the
/// caller may take.
#[utoipa::path(get, path = "/overview", tag = "ops",
    responses((status = 200, description = "the overview"), (status = 401, description = "unauthenticated: no or a bad token", body = ErrorBody)))]
async fn overview(State(app): State<App>, Extension(caller): Extension<Caller>) -> Reply {
    call(&app, &caller, Ok(Request::Overview)).await
}

/// What waits on the caller, oldest first: its members' questions (answer one with
/// `POST /sessions/{asker}/message {turnId}`), results it has not collected, its members that
/// cannot go on by themselves, and this host's own troubles (a credential cooling down, the
/// broker link down); `elsewhere` counts what waits on it at other hosts.
#[utoipa::path(get, path = "/attention", tag = "ops",
    responses((status = 200, description = "what waits on the caller"), (status = 401, description = "unauthenticated: no or a bad token", body = ErrorBody)))]
async fn attention(State(app): State<App>, Extension(caller): Extension<Caller>) -> Reply {
    call(&app, &caller, Ok(Request::Attention)).await
}

/// The caller's task list: every task with its state, assignee, dependencies and why it waits
/// or failed (without the briefs and results: `GET /tasklist/{id}` gives one with them).
#[utoipa::path(get, path = "/tasklist", tag = "tasks",
    responses((status = 200, description = "the caller's tasks"), (status = 401, description = "unauthenticated: no or a bad token", body = ErrorBody),
              (status = 403, description = "denied, or the caller has no session (no_session)", body = ErrorBody)))]
async fn task_list(State(app): State<App>, Extension(caller): Extension<Caller>) -> Reply {
    call(&app, &caller, Ok(Request::Tasks { id: None })).await
}

/// Adds a task to the caller's own list, kept across restarts. It starts as the caller's own
/// `wait:false` send once every dependency is done and its assignee runs nothing else of the
/// list; its result then waits in `review` for the caller's decision.
#[utoipa::path(post, path = "/tasklist", tag = "tasks", request_body = faces::TaskAddArgs,
    responses((status = 200, description = "the task as added (already running if it could start)"),
              (status = 400, description = "invalid_argument", body = ErrorBody),
              (status = 401, description = "unauthenticated: no or a bad token", body = ErrorBody),
              (status = 403, description = "denied, or the caller has no session (no_session)", body = ErrorBody),
              (status = 404, description = "unknown_task: a dependency not in the list", body = ErrorBody)))]
async fn task_add(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Body(b): Body<faces::TaskAddArgs>,
) -> Reply {
    call(&app, &caller, b.request()).await
}

/// A task's number as a path names it: an integer from 0 to 2^31 - 1, as the document says.
fn task_id(id: &str) -> Result<u32, CallError> {
    id.parse::<u32>()
        .ok()
        .filter(|n| i32::try_from(*n).is_ok())
        .ok_or_else(|| CallError::InvalidArgument {
            reason: format!("a task id is its number in the list (t-3 is 3), got {id:?}"),
        })
}

/// One of the caller's tasks, with its brief and its result.
#[utoipa::path(get, path = "/tasklist/{id}", tag = "tasks",
    params(("id" = u64, Path, description = "the task's number in the caller's list", minimum = 0, maximum = 2147483647)),
    responses((status = 200, description = "the task"), (status = 400, description = "invalid_argument", body = ErrorBody),
              (status = 401, description = "unauthenticated: no or a bad token", body = ErrorBody),
              (status = 403, description = "denied, or the caller has no session (no_session)", body = ErrorBody),
              (status = 404, description = "unknown_task", body = ErrorBody)))]
async fn task_one(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Reply {
    let req = task_id(&id).map(|id| Request::Tasks {
        id: Some(fleet_core::tasks::TaskId(id)),
    });
    call(&app, &caller, req).await
}

/// The caller's decision on one of its tasks: `done` accepts a result in review, `failed`
/// gives a task up (pending, ready or in review), `retry` runs a task in review or a failed one again.
#[utoipa::path(post, path = "/tasklist/{id}/review", tag = "tasks", request_body = faces::ReviewArgs,
    params(("id" = u64, Path, description = "the task's number in the caller's list", minimum = 0, maximum = 2147483647)),
    responses((status = 200, description = "the task after the decision"),
              (status = 400, description = "invalid_argument: a decision its state does not allow", body = ErrorBody),
              (status = 401, description = "unauthenticated: no or a bad token", body = ErrorBody),
              (status = 403, description = "denied, or the caller has no session (no_session)", body = ErrorBody),
              (status = 404, description = "unknown_task", body = ErrorBody)))]
async fn task_review(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(b): Body<faces::ReviewArgs>,
) -> Reply {
    call(&app, &caller, task_id(&id).map(|id| b.request(id))).await
}

/// This document: every route above, from the same table that serves them.
#[utoipa::path(get, path = "/openapi.json", tag = "ops", responses((status = 200, description = "OpenAPI 3.1")))]
async fn openapi(State(app): State<App>) -> Json<Value> {
    Json(document(router().1, app.limits))
}

/// The OpenAPI document, with `/mcp` (served by rmcp, not by this table) described too.
pub fn document(mut doc: utoipa::openapi::OpenApi, limits: faces::Limits) -> Value {
    doc.info.version = env!("CARGO_PKG_VERSION").into();
    let mut v = serde_json::to_value(&doc).unwrap_or(Value::Null);
    v["paths"]["/mcp"] = json!({
        "post": {
            "tags": ["mcp"],
            "summary": "MCP over Streamable HTTP (JSON-RPC 2.0): the fifteen fleet_* tools",
            "description": "Served statelessly with JSON answers; the caller is resolved from \
                            each request's Authorization header. The client must accept both \
                            application/json and text/event-stream.",
            "responses": {
                "200": { "description": "a JSON-RPC response" },
                "202": { "description": "a JSON-RPC notification or response, accepted" },
                "400": { "description": "not a JSON-RPC request" },
                "406": { "description": "the client does not accept application/json and text/event-stream" },
                "415": { "description": "the body is not application/json" }
            }
        }
    });
    common_responses(&mut v);
    if let Some(schemas) = v.get_mut("components").and_then(|c| c.get_mut("schemas")) {
        bound(schemas, limits);
    }
    v
}

/// The configured bounds on every schema's `timeoutMs` and message text.
fn bound(schemas: &mut Value, limits: faces::Limits) {
    let Some(schemas) = schemas.as_object_mut() else {
        return;
    };
    // A string of this many characters is within the byte limit whatever they are.
    let chars = limits.max_body_bytes / 4;
    for schema in schemas.values_mut() {
        // `get_mut`, not `[]`: indexing would add `"properties": null` to a schema without.
        let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
            continue;
        };
        if let Some(t) = props.get_mut("timeoutMs") {
            t["minimum"] = json!(1);
            t["maximum"] = json!(limits.timeout_max_ms);
        }
        for text in ["message", "question"] {
            if let Some(m) = props.get_mut(text) {
                m["maxLength"] = json!(chars);
            }
        }
    }
}

/// What every route may also answer, added where its own list does not say it: a token that
/// is not this gateway's (401), a request for another host name or from another site's page
/// (403), a malformed id or body (400), a body over the size limit (413), and the gateway
/// stopping (503) — so a generated client is never surprised by a status.
fn common_responses(doc: &mut Value) {
    let error =
        json!({ "application/json": { "schema": { "$ref": "#/components/schemas/ErrorBody" } } });
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let Some(ops) = item.as_object_mut() else {
            continue;
        };
        let static_page = path.starts_with("/ui") || path == "/openapi.json";
        for op in ops.values_mut() {
            let takes_input = op.get("requestBody").is_some()
                || op["parameters"].as_array().is_some_and(|p| !p.is_empty());
            let body = op.get("requestBody").is_some();
            let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
                continue;
            };
            let mut add = |code: &str, description: &str| {
                if !responses.contains_key(code) {
                    responses.insert(
                        code.into(),
                        json!({ "description": description, "content": error.clone() }),
                    );
                }
            };
            add(
                "401",
                "unauthenticated: the bearer token is none of this gateway's (or, where a \
                 token is needed, there is none)",
            );
            add(
                "403",
                "host_not_allowed, cross_origin (a request for another host name or from \
                 another site's page), or denied: the caller may not do this",
            );
            if takes_input {
                add("400", "invalid_argument: a malformed id, query or body");
            }
            if body {
                add("413", "the body is larger than the gateway takes");
            }
            if !static_page {
                add("503", "shutting_down: the gateway is stopping");
            }
        }
    }
}

//! What the two north faces (REST and MCP) share: the caller behind a connection, the call
//! into the driver loop, the arguments both accept, and how an answer maps to HTTP.

use crate::amqp;
use crate::driver::{Gone, Handle};
use crate::herdr::{Api, Socket};
use crate::identity::{Caller, Identity};
use crate::metrics::Metrics;
use crate::metrics::{Counter, Gauge};
use crate::observe::AuditSink;
use fleet_core::authz::{self, Action};
use fleet_core::roster::EntityKind;
use fleet_core::{
    CallError, HostId, Input, MemberRole, Outcome, Request, Response, Role, SessionId, SpawnSpec,
    TicketId, TurnId, Worktree,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The faces' shared state. Cheap to clone.
#[derive(Clone)]
pub struct App(Arc<Inner>);

pub struct Inner {
    pub handle: Handle,
    pub identity: Identity,
    pub metrics: Arc<Metrics>,
    pub audit: AuditSink,
    pub host: HostId,
    /// Profile name → kind, as this host offers them.
    pub profiles: BTreeMap<String, String>,
    pub health: Health,
    /// The bounds the document states, as this gateway's config sets them.
    pub limits: Limits,
}

/// What `/openapi.json` says of the arguments' bounds: the configured ones, so the document
/// never calls valid what this gateway refuses.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `core.send_timeout_max_ms`: the largest `timeoutMs`.
    pub timeout_max_ms: u64,
    /// `core.max_body_bytes`: the largest message, in bytes.
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        let c = fleet_core::CoreConfig::default();
        Limits {
            timeout_max_ms: c.send_timeout_max_ms,
            max_body_bytes: c.max_body_bytes,
        }
    }
}

/// A millisecond count as JSON Schema's `integer` allows it: `794` or `794.0` (a client that
/// writes every number as a float still means a whole one); a fraction, a sign or a string is
/// refused.
pub fn whole_ms<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::de::Error;
    match Option::<serde_json::Number>::deserialize(d)? {
        None => Ok(None),
        Some(n) => {
            if let Some(u) = n.as_u64() {
                return Ok(Some(u));
            }
            match n.as_f64() {
                Some(f) if f >= 0.0 && f.fract() == 0.0 && f <= u64::MAX as f64 => {
                    Ok(Some(f as u64))
                }
                _ => Err(D::Error::custom(format!(
                    "a whole number of milliseconds, not {n}"
                ))),
            }
        }
    }
}

/// What `/healthz` looks at.
#[derive(Clone, Debug)]
pub struct Health {
    pub broker: Option<watch::Receiver<amqp::Status>>,
    pub herdr: Option<PathBuf>,
    pub member_herdr: Option<PathBuf>,
    pub herdr_timeout: Duration,
    /// Whether members run sandboxed here (said, not a failure: `auto` runs them bare).
    pub sandbox: crate::herdr::Availability,
}

impl std::ops::Deref for App {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl App {
    pub fn new(inner: Inner) -> App {
        App(Arc::new(inner))
    }

    /// Resolves the caller of a request. Every authenticated member request is its
    /// readiness signal (CB-306): the gateway hears `MemberConnected`, and the core decides
    /// whether it counts — only for a member pane it knows, once (a token that outlived its
    /// pane announces nothing).
    pub async fn caller(&self, authorization: Option<&str>, peer: Option<SocketAddr>) -> Caller {
        let c = self.identity.resolve(authorization, peer);
        if c.refused {
            let reason = if c.revoked {
                "revoked"
            } else {
                "bad_credentials"
            };
            self.metrics
                .inc(Counter::AuthFailures, &[("reason", reason)]);
        }
        if let Some(gid) = &c.member {
            let _ = self
                .handle
                .tell(Input::MemberConnected {
                    target: gid.clone(),
                })
                .await;
        }
        c
    }

    /// Makes a call through the driver loop and counts it.
    pub async fn call(&self, caller: &Caller, face: &str, req: Request) -> Result<Response, Gone> {
        let kind = match &req {
            Request::Send { .. }
            | Request::Answer { .. }
            | Request::Broadcast { .. }
            | Request::Coordinate { .. } => {
                self.metrics.inc(Counter::Sends, &[("face", face)]);
                "send"
            }
            Request::Reply { .. } => "reply",
            Request::Spawn { .. } => "spawn",
            Request::Ask { .. } => "ask",
            _ => "",
        };
        let resp = self.handle.call(caller.principal.clone(), req).await?;
        match (kind, &resp) {
            ("send", Response::Outcome { outcome, .. }) => self
                .metrics
                .inc(Counter::SendOutcomes, &[("outcome", outcome.as_str())]),
            ("reply", Response::ReplyAccepted { .. }) => self.metrics.inc(Counter::Replies, &[]),
            ("ask", Response::Ask { outcome, .. }) => self
                .metrics
                .inc(Counter::Asks, &[("outcome", outcome.as_str())]),
            ("spawn", Response::Spawned { .. }) => {
                self.metrics.inc(Counter::Spawns, &[("result", "ok")])
            }
            ("spawn", Response::Error(e)) => {
                self.metrics.inc(Counter::Spawns, &[("result", e.code())])
            }
            _ => {}
        }
        Ok(resp)
    }

    /// The authz decision for an action the shell answers itself (reads, metrics), audited
    /// like the core's.
    pub fn authorize(&self, caller: &Caller, action: Action) -> Result<(), CallError> {
        let decision = authz::permits(&caller.principal, action, None);
        if let Ok(line) = serde_json::to_string(&decision) {
            self.audit.write(&line);
        }
        if decision.allowed {
            Ok(())
        } else {
            self.metrics
                .inc(Counter::AuthFailures, &[("reason", "denied")]);
            Err(CallError::Denied {
                role: caller.principal.role,
                action,
            })
        }
    }

    /// The broker port's state into the metrics (read at scrape time: it lives in the port).
    pub fn sample_broker(&self) {
        let Some(rx) = &self.health.broker else {
            return;
        };
        let s = rx.borrow().clone();
        let m = &self.metrics;
        m.set(
            Gauge::BrokerConnected,
            &[],
            f64::from(u8::from(s.connected)),
        );
        m.set(Gauge::BrokerGeneration, &[], f64::from(s.generation));
        m.set_total(Counter::BrokerMalformed, &[], s.malformed as f64);
        m.set(Gauge::BrokerQueuesOtherType, &[], s.kept_other_type as f64);
    }

    /// `fleet_whoami`.
    pub fn whoami(&self, caller: &Caller) -> Value {
        let p = &caller.principal;
        json!({
            "role": p.role.as_str(),
            "name": p.name,
            "sessionId": p.session,
            "coordId": matches!(p.role, Role::Primary | Role::Architect).then(|| p.session.clone()).flatten(),
            "host": self.host,
        })
    }

    /// `fleet_whoami` as the core authorises the caller (`Request::Whoami`): a member spawned
    /// ARCHITECT is known to the shell only by its member token (WORKER), and to the core by
    /// its roster card — the rule lives there, once.
    pub async fn whoami_as_seen(&self, caller: &Caller) -> Value {
        let mut me = self.whoami(caller);
        let p = &caller.principal;
        let (Role::Worker, Some(gid)) = (p.role, &p.session) else {
            return me;
        };
        if let Ok(Response::Whoami { principal }) =
            self.handle.call(p.clone(), Request::Whoami).await
        {
            if principal.session.as_ref() == Some(gid) && principal.role != p.role {
                me["role"] = json!(principal.role.as_str());
            }
        }
        me
    }

    /// `fleet_profiles`: this host's, and every other host's as its heartbeat advertises.
    pub async fn profiles(&self, caller: &Caller) -> Result<Value, Gone> {
        let mut hosts: BTreeMap<String, Value> = BTreeMap::new();
        if let Response::Roster { rows } = self
            .handle
            .call(caller.principal.clone(), Request::List)
            .await?
        {
            for r in rows.into_iter().filter(|r| r.kind == EntityKind::Gateway) {
                hosts.insert(r.host.to_string(), json!({ "profiles": r.profiles }));
            }
        }
        let (strategy, default, placed) = match self
            .handle
            .call(caller.principal.clone(), Request::Profiles)
            .await?
        {
            Response::Profiles {
                strategy,
                default_profile,
                profiles,
            } => (Some(strategy), default_profile, profiles),
            _ => (None, None, Vec::new()),
        };
        let local: Vec<Value> = self
            .profiles
            .iter()
            .map(|(name, kind)| {
                let mut v = json!({ "name": name, "kind": kind });
                if let Some(p) = placed.iter().find(|p| &p.name == name) {
                    v["credential"] = json!(p.credential);
                    v["weight"] = json!(p.weight);
                    v["maxLoad"] = json!(p.max_load);
                    v["load"] = json!(p.load);
                    if let Some(until) = p.cooling_until {
                        v["coolingUntil"] = json!(until);
                    }
                }
                v
            })
            .collect();
        hosts.insert(
            self.host.to_string(),
            json!({
                "profiles": local,
                "placement": strategy.map(|s| s.as_str()),
                "default": default,
            }),
        );
        Ok(json!({ "host": self.host, "hosts": hosts }))
    }

    /// `/healthz`: the broker link and each herdr, with its protocol version.
    pub async fn healthz(&self) -> (bool, Value) {
        let h = &self.health;
        let mut ok = true;
        let broker = match &h.broker {
            None => json!({ "mode": "single-host" }),
            Some(rx) => {
                let s = rx.borrow().clone();
                ok &= s.connected;
                json!({
                    "connected": s.connected,
                    "generation": s.generation,
                    "lastError": s.last_error,
                    "malformed": s.malformed,
                    "node": s.node,
                    "queuesOfOtherType": s.kept_other_type,
                })
            }
        };
        let mut protocols = BTreeSet::new();
        let herdr = |path: &Option<PathBuf>| {
            let path = path.clone();
            let timeout = h.herdr_timeout;
            async move {
                let Some(path) = path else {
                    return (true, None, Value::Null);
                };
                let api = Api::new(Socket::new(path.clone(), timeout));
                match api.ping().await {
                    Ok(p) => (
                        true,
                        Some(p.protocol),
                        json!({
                            "ok": true,
                            "version": p.version,
                            "protocol": p.protocol,
                            "protocolSupport": crate::herdr::api::Support::of(p.protocol)
                                .map(|s| s.as_str()),
                            // Read from its capability names (`api::Family`).
                            "events": match p.family() {
                                crate::herdr::api::Family::Replaying => "replaying",
                                crate::herdr::api::Family::LiveOnly => "live-only",
                            },
                        }),
                    ),
                    Err(e) => (
                        false,
                        None,
                        // Unauthenticated: no path of this host (the socket's is in the log).
                        json!({ "ok": false, "error": pathless(&e) }),
                    ),
                }
            }
        };
        let (lok, lproto, leads) = herdr(&h.herdr).await;
        let (mok, mproto, members) = herdr(&h.member_herdr).await;
        ok &= lok && mok;
        protocols.extend(lproto);
        protocols.extend(mproto);
        // The two herdrs disagree, or one speaks a protocol older than tested (a newer one is
        // used, and said so per herdr as `protocolSupport`).
        let mismatch = protocols.len() > 1
            || protocols
                .iter()
                .any(|p| crate::herdr::api::Support::of(*p).is_none());
        ok &= !mismatch;
        (
            ok,
            json!({
                "status": if ok { "ok" } else { "degraded" },
                "host": self.host,
                "version": env!("CARGO_PKG_VERSION"),
                "broker": broker,
                "herdr": leads,
                "memberHerdr": members,
                "protocolMismatch": mismatch,
                "expectedProtocol": crate::herdr::PROTOCOL,
                "testedProtocols": crate::herdr::api::PROTOCOLS_TESTED,
                "sandbox": match &h.sandbox {
                    crate::herdr::Availability::Ready => json!({ "members": "sandboxed" }),
                    crate::herdr::Availability::Off => {
                        json!({ "members": "unsandboxed", "reason": "herdr.sandbox = \"off\"" })
                    }
                    crate::herdr::Availability::Unavailable(why) => {
                        json!({ "members": "unsandboxed", "reason": why })
                    }
                },
            }),
        )
    }
}

/// A herdr error as `/healthz` shows it to anyone: what went wrong, not where on this host.
fn pathless(e: &crate::herdr::rpc::RpcError) -> String {
    match e {
        crate::herdr::rpc::RpcError::Unreachable { why, .. } => {
            format!("herdr is not reachable at its socket: {why}")
        }
        other => other.to_string(),
    }
}

/// A git worktree for a spawned member.
#[derive(Clone, Debug, Deserialize, Serialize, schemars::JsonSchema, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorktreeArgs {
    /// A repository path on the target host, or (for another host) a network URL.
    #[schema(min_length = 1)]
    #[schemars(length(min = 1))]
    pub repo: String,
    /// The exact commit (40 hex digits); required when the spawn crosses hosts.
    #[serde(default)]
    #[schema(pattern = r"^[0-9a-fA-F]{40}$")]
    #[schemars(regex(pattern = r"^[0-9a-fA-F]{40}$"))]
    pub commit: Option<String>,
}

/// `fleet_send` / `POST /sessions/{id}/message`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, schemars::JsonSchema, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SendArgs {
    /// The member (or lead) to delegate to, by its fleet-wide id (see fleet_list).
    #[serde(default)]
    pub session_id: Option<String>,
    /// Answer a member's open question instead: the turnId its QUESTION outcome carried.
    #[serde(default)]
    #[schema(
        pattern = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
    )]
    #[schemars(regex(
        pattern = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
    ))]
    pub turn_id: Option<String>,
    /// Coordinate with a peer lead instead: its coordId (fleet_whoami on its side, or a lead
    /// row of fleet_list). A note typed into its pane when it is ready — never a task: answered
    /// `coordinated` at once, nothing comes back through the fleet (wait/timeoutMs do not apply).
    #[serde(default)]
    pub coord_id: Option<String>,
    /// Send the same text to every member ("all") or to one group, fleet-wide.
    #[serde(default)]
    pub broadcast: Option<String>,
    /// The task brief, answer or announcement, typed into the recipient's pane; not blank.
    #[schema(min_length = 1, pattern = r"\S")]
    #[schemars(length(min = 1), regex(pattern = r"\S"))]
    pub message: String,
    /// false: return a ticket at once and collect the outcome with fleet_poll{ticket}.
    #[serde(default)]
    pub wait: Option<bool>,
    /// How long a blocking send waits for the outcome (default: the gateway's).
    #[serde(default, deserialize_with = "whole_ms")]
    #[schema(minimum = 1)]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
}

/// `fleet_task_add` / `POST /tasklist`: a task on the caller's own list.
#[derive(Clone, Debug, Default, Deserialize, Serialize, schemars::JsonSchema, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskAddArgs {
    /// One line naming the task, for the list (at most 200 bytes).
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    #[schemars(length(min = 1, max = 200), regex(pattern = r"\S"))]
    pub title: String,
    /// What is typed into the assignee's pane when the task starts; not blank.
    #[schema(min_length = 1, pattern = r"\S")]
    #[schemars(length(min = 1), regex(pattern = r"\S"))]
    pub brief: String,
    /// The member that runs it, by its fleet-wide id (see fleet_list), on any host.
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F]+$"
    )]
    #[schemars(length(min = 1, max = 256))]
    pub assignee: String,
    /// Tasks of your list that must be done (reviewed done by you) before this one starts.
    #[serde(default)]
    #[schema(max_items = 32)]
    #[schemars(length(max = 32))]
    pub deps: Vec<u32>,
    /// How long its delegation may run (default: the gateway's send timeout).
    #[serde(default, deserialize_with = "whole_ms")]
    #[schema(minimum = 1)]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
}

impl TaskAddArgs {
    pub fn request(self) -> Result<Request, CallError> {
        Ok(Request::TaskAdd {
            task: fleet_core::tasks::NewTask {
                title: self.title,
                brief: self.brief,
                assignee: session(&self.assignee, "assignee")?,
                deps: self
                    .deps
                    .into_iter()
                    .map(fleet_core::tasks::TaskId)
                    .collect(),
                timeout_ms: self.timeout_ms,
            },
        })
    }
}

/// `fleet_task_review` / `POST /tasklist/{id}/review`: the lead's decision on one task.
#[derive(Clone, Debug, Deserialize, Serialize, schemars::JsonSchema, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReviewArgs {
    pub decision: ReviewDecision,
}

/// done: accept a result in review (its dependents may start); failed: give a task up
/// (pending, ready or in review); retry: run a task in review, or a failed one, again.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, schemars::JsonSchema, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReviewDecision {
    Done,
    Failed,
    Retry,
}

impl ReviewArgs {
    pub fn request(self, id: u32) -> Request {
        use fleet_core::tasks::Decision;
        Request::TaskReview {
            id: fleet_core::tasks::TaskId(id),
            decision: match self.decision {
                ReviewDecision::Done => Decision::Done,
                ReviewDecision::Failed => Decision::Failed,
                ReviewDecision::Retry => Decision::Retry,
            },
        }
    }
}

fn bad(reason: impl Into<String>) -> CallError {
    CallError::InvalidArgument {
        reason: reason.into(),
    }
}

/// An id as the documents describe it: 1 to 256 characters, none a control character.
fn session(s: &str, what: &str) -> Result<SessionId, CallError> {
    if s.is_empty() || s.chars().count() > 256 || s.chars().any(char::is_control) {
        return Err(bad(format!(
            "{what} must be an id: 1 to 256 characters, none a control character"
        )));
    }
    Ok(SessionId::new(s))
}

impl SendArgs {
    pub fn request(self) -> Result<Request, CallError> {
        let wait = self.wait.unwrap_or(true);
        let given = [
            self.session_id.is_some(),
            self.turn_id.is_some(),
            self.coord_id.is_some(),
            self.broadcast.is_some(),
        ]
        .into_iter()
        .filter(|b| *b)
        .count();
        if given != 1 {
            return Err(bad(
                "give exactly one of sessionId, turnId, coordId or broadcast",
            ));
        }
        if let Some(t) = self.turn_id {
            let id = t
                .parse::<uuid::Uuid>()
                .map_err(|_| bad("turnId must be the id a QUESTION outcome carried"))?;
            return Ok(Request::Answer {
                turn_id: TurnId(id),
                content: self.message,
                wait,
                timeout_ms: self.timeout_ms,
                asked_by: None,
            });
        }
        if let Some(group) = self.broadcast {
            return Ok(Request::Broadcast {
                group: (group != "all").then_some(group),
                content: self.message,
            });
        }
        if let Some(c) = self.coord_id {
            if self.wait == Some(true) || self.timeout_ms.is_some() {
                return Err(bad(
                    "coordination is fire-and-deliver: wait and timeoutMs do not apply to coordId",
                ));
            }
            return Ok(Request::Coordinate {
                target: session(&c, "coordId")?,
                content: self.message,
            });
        }
        let target = match self.session_id {
            Some(s) => session(&s, "sessionId")?,
            None => return Err(bad("no recipient")),
        };
        Ok(Request::Send {
            target,
            content: self.message,
            wait,
            timeout_ms: self.timeout_ms,
        })
    }
}

/// A spawn's `role` as the faces take it (the core's `MemberRole`, with a schema).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, schemars::JsonSchema, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RoleArg {
    Architect,
    Dev,
    Reviewer,
}

impl From<RoleArg> for MemberRole {
    fn from(r: RoleArg) -> Self {
        match r {
            RoleArg::Architect => MemberRole::Architect,
            RoleArg::Dev => MemberRole::Dev,
            RoleArg::Reviewer => MemberRole::Reviewer,
        }
    }
}

/// `fleet_spawn` / `POST /members`.
#[derive(Clone, Debug, Deserialize, Serialize, schemars::JsonSchema, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpawnArgs {
    /// A profile name the target host offers (fleet_profiles); absent: the target host's
    /// placement chooses one (`[placement]`: its default profile, or weighted round-robin
    /// skipping full profiles and credentials cooling down after a usage limit).
    #[serde(default)]
    #[schema(min_length = 1, pattern = r"\S")]
    #[schemars(length(min = 1), regex(pattern = r"\S"))]
    pub profile: Option<String>,
    /// The host to start it on; this gateway's host when absent; `any`: the live host with
    /// the fewest members that offers the profile.
    #[serde(default)]
    pub host: Option<String>,
    /// A broadcast group the member joins: one word of ASCII letters, digits, `-` and `_`.
    #[serde(default)]
    #[schema(pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_-]{1,64}$"))]
    pub group: Option<String>,
    /// What the member is for: ARCHITECT, DEV (the default) or REVIEWER. Shown in the roster.
    #[serde(default)]
    pub role: Option<RoleArg>,
    #[serde(default)]
    pub worktree: Option<WorktreeArgs>,
    /// The directory the member starts in on its host (an absolute path, at most 4096
    /// bytes, that exists there); not with a worktree.
    #[serde(default)]
    #[schema(max_length = 1024, pattern = r"^/[^\u0000-\u001F\u007F-\u009F]*$")]
    #[schemars(
        length(max = 1024),
        regex(pattern = r"^/[^\u0000-\u001F\u007F-\u009F]*$")
    )]
    pub cwd: Option<String>,
    /// The work item the member is for (an issue key), shown in the roster: one line, not
    /// blank, at most 128 characters.
    #[serde(default)]
    #[schema(
        max_length = 128,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F]*\S[^\u0000-\u001F\u007F-\u009F]*$"
    )]
    #[schemars(
        length(max = 128),
        regex(pattern = r"^[^\u0000-\u001F\u007F-\u009F]*\S[^\u0000-\u001F\u007F-\u009F]*$")
    )]
    pub ticket: Option<String>,
}

impl SpawnArgs {
    pub fn request(self) -> Result<Request, CallError> {
        if self.profile.as_deref().is_some_and(|p| p.trim().is_empty()) {
            return Err(bad(
                "profile must be a name, or left out for placement to choose",
            ));
        }
        Ok(Request::Spawn {
            host: self.host.map(HostId::new),
            spec: SpawnSpec {
                profile: self.profile.unwrap_or_default(),
                group: self.group,
                role: self.role.map(MemberRole::from),
                worktree: self.worktree.map(|w| Worktree {
                    repo: w.repo,
                    commit: w.commit,
                }),
                cwd: self.cwd,
                ticket: self.ticket,
            },
        })
    }
}

/// `POST /members?role=&profile=&cwd=&worktree=&ticket=` (ch. 9): the same spawn as a JSON
/// body, in the query. `worktree` is the repository; `commit` pins it.
#[derive(Clone, Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SpawnQuery {
    pub profile: Option<String>,
    pub host: Option<String>,
    pub group: Option<String>,
    pub role: Option<RoleArg>,
    pub worktree: Option<String>,
    pub commit: Option<String>,
    pub cwd: Option<String>,
    pub ticket: Option<String>,
}

impl SpawnQuery {
    pub fn is_empty(&self) -> bool {
        self.profile.is_none()
            && self.host.is_none()
            && self.group.is_none()
            && self.role.is_none()
            && self.worktree.is_none()
            && self.commit.is_none()
            && self.cwd.is_none()
            && self.ticket.is_none()
    }

    pub fn args(self) -> Result<SpawnArgs, CallError> {
        if self.commit.is_some() && self.worktree.is_none() {
            return Err(bad("commit pins a worktree: name the worktree too"));
        }
        Ok(SpawnArgs {
            profile: self.profile,
            host: self.host,
            group: self.group,
            role: self.role,
            worktree: self.worktree.map(|repo| WorktreeArgs {
                repo,
                commit: self.commit,
            }),
            cwd: self.cwd,
            ticket: self.ticket,
        })
    }
}

pub fn ticket(s: &str) -> Result<TicketId, CallError> {
    s.parse::<uuid::Uuid>()
        .map(TicketId)
        .map_err(|_| bad("ticket must be the id a wait:false send returned"))
}

pub fn target(s: &str) -> Result<SessionId, CallError> {
    session(s, "sessionId")
}

/// The HTTP status an answer maps to (ch. 9's `FleetApp`).
pub fn http_status(resp: &Response) -> u16 {
    match resp {
        Response::Outcome { outcome, .. } => match outcome {
            Outcome::Replied | Outcome::CompletedUnreplied | Outcome::Question => 200,
            Outcome::Busy | Outcome::StaleTurn => 409,
            Outcome::TimedOutWorking | Outcome::TimedOutQueued => 504,
            Outcome::WorkerFailed => 502,
            Outcome::BackendExhausted => 503,
        },
        Response::Ticket(_) => 202,
        Response::Broadcast { .. } | Response::Coordinated { .. } => 202,
        Response::Error(e) => error_status(e),
        _ => 200,
    }
}

pub fn error_status(e: &CallError) -> u16 {
    match e {
        CallError::Denied { role, .. } if *role == Role::Anonymous => 401,
        CallError::Denied { .. } | CallError::NoSession | CallError::NotAllowed { .. } => 403,
        CallError::UnknownTicket
        | CallError::UnknownTask { .. }
        | CallError::NotFound { .. }
        | CallError::NoSuchRecipient { .. }
        | CallError::NoSuchHost { .. } => 404,
        CallError::UnknownProfile { .. } | CallError::InvalidArgument { .. } => 400,
        CallError::InboxFull { .. } => 429,
        CallError::BrokerUnavailable => 503,
        CallError::SpawnFailed { .. } => 502,
        CallError::StopUnconfirmed { .. } => 504,
        CallError::PaneGone { .. } => 410,
    }
}

/// The JSON body of an answer: the response itself, or `{code, message, …}` for an error.
pub fn body(resp: &Response) -> Value {
    match resp {
        Response::Error(e) => error_body(e),
        other => serde_json::to_value(other).unwrap_or(Value::Null),
    }
}

pub fn error_body(e: &CallError) -> Value {
    let mut v = serde_json::to_value(e).unwrap_or_else(|_| json!({}));
    if let Value::Object(m) = &mut v {
        m.insert("code".into(), json!(e.code()));
        m.insert("message".into(), json!(e.to_string()));
    }
    v
}

/// The loop is gone: the daemon is shutting down.
pub fn gone_body() -> Value {
    json!({ "code": "shutting_down", "message": Gone.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(v: Value) -> Result<Request, CallError> {
        serde_json::from_value::<SendArgs>(v)
            .expect("args")
            .request()
    }

    #[test]
    fn a_send_names_exactly_one_recipient() {
        assert!(matches!(
            send(json!({"sessionId": "w1", "message": "hi"})),
            Ok(Request::Send { wait: true, .. })
        ));
        assert!(matches!(
            send(json!({"sessionId": "w1", "turnId": "x", "message": "hi"})),
            Err(CallError::InvalidArgument { .. })
        ));
        assert!(matches!(
            send(json!({"message": "hi"})),
            Err(CallError::InvalidArgument { .. })
        ));
        assert!(matches!(
            send(json!({"broadcast": "all", "message": "stop"})),
            Ok(Request::Broadcast { group: None, .. })
        ));
        assert!(matches!(
            send(json!({"turnId": "not-a-uuid", "message": "a"})),
            Err(CallError::InvalidArgument { .. })
        ));
    }

    #[test]
    fn unknown_arguments_are_refused_not_ignored() {
        let e = serde_json::from_value::<SendArgs>(
            json!({"sessionId": "w", "message": "m", "from": "w2"}),
        );
        assert!(e.is_err());
    }

    #[test]
    fn outcomes_and_errors_map_to_http_statuses() {
        let o = |outcome| Response::Outcome {
            ticket: None,
            outcome,
            body: None,
            turn_id: None,
        };
        assert_eq!(http_status(&o(Outcome::Replied)), 200);
        assert_eq!(http_status(&o(Outcome::Busy)), 409);
        assert_eq!(http_status(&o(Outcome::TimedOutQueued)), 504);
        let denied = CallError::Denied {
            role: Role::Anonymous,
            action: Action::Send,
        };
        assert_eq!(error_status(&denied), 401);
        let b = error_body(&CallError::UnknownTicket);
        assert_eq!(b["code"], "unknown_ticket");
        assert!(b["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
}

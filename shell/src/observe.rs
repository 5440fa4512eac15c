//! The daemon's `Observer`: every core event becomes a log line (with the `traceId` of the
//! flow it belongs to, so one id found on three hosts tells a delegation's story), every authz
//! decision an audit line, and outputs and gauges become metrics.

use crate::driver::Observer;
use crate::metrics::Metrics;
use fleet_core::broker::{BrokerEvent, BrokerOp};
use fleet_core::envelope::{HeaderValue, Headers};
use fleet_core::roster::EntityKind;
use fleet_core::{Duration, Event, Gateway, Input, Instant, MsgId, Output};
use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::sync::{Arc, Mutex};

/// msgIds remembered with their traceId (oldest forgotten first).
const TRACES_KEPT: usize = 8192;
/// Gauges are read at most this often (reading the roster costs a walk of it).
const GAUGE_EVERY: Duration = Duration::from_millis(1_000);

/// Where audit lines go.
#[derive(Clone, Debug)]
pub enum AuditSink {
    /// The log, under target `audit`.
    Log,
    /// One JSON object per line, appended.
    File(Arc<Mutex<std::fs::File>>),
}

impl AuditSink {
    /// Opens (appending, owner-only) `path`.
    pub fn file(path: &std::path::Path) -> std::io::Result<AuditSink> {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        Ok(AuditSink::File(Arc::new(Mutex::new(f))))
    }

    /// Writes one line. A full disk loses the line, never the call: it is logged instead.
    pub fn write(&self, line: &str) {
        match self {
            AuditSink::Log => tracing::info!(target: "audit", "{line}"),
            AuditSink::File(f) => {
                let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
                if let Err(e) = writeln!(f, "{line}") {
                    tracing::error!(error = %e, "writing the audit file; the line was: {line}");
                }
            }
        }
    }
}

pub struct DaemonObserver {
    metrics: Arc<Metrics>,
    audit: AuditSink,
    traces: BTreeMap<MsgId, String>,
    order: VecDeque<MsgId>,
    gauges_at: Option<Instant>,
}

impl DaemonObserver {
    pub fn new(metrics: Arc<Metrics>, audit: AuditSink) -> Self {
        DaemonObserver {
            metrics,
            audit,
            traces: BTreeMap::new(),
            order: VecDeque::new(),
            gauges_at: None,
        }
    }

    fn remember(&mut self, headers: &Headers) -> (String, String) {
        let msg = text(headers, "msgId");
        let trace = text(headers, "traceId");
        if let Ok(id) = msg.parse::<uuid::Uuid>() {
            let id = MsgId(id);
            if self.traces.insert(id, trace.clone()).is_none() {
                self.order.push_back(id);
                if self.order.len() > TRACES_KEPT {
                    if let Some(old) = self.order.pop_front() {
                        self.traces.remove(&old);
                    }
                }
            }
        }
        (msg, trace)
    }

    fn trace_of(&self, e: &Event) -> Option<&str> {
        let msg = match e {
            Event::Enqueued { msg, .. }
            | Event::Delivered { msg, .. }
            | Event::TurnComplete { msg, .. }
            | Event::TurnFailed { msg, .. }
            | Event::Dropped { msg, .. }
            | Event::Suppressed { msg, .. }
            | Event::Nudged { msg, .. }
            | Event::DeadLetterReported { msg, .. } => msg,
            _ => return None,
        };
        self.traces.get(msg).map(String::as_str)
    }

    fn event(&mut self, e: &Event) {
        match e {
            Event::Nudged { .. } => self.metrics.inc("fleet_push_nudges_total", &[]),
            Event::Rejected { code, .. } => {
                self.metrics
                    .inc("fleet_dead_letters_total", &[("code", code.as_str())]);
            }
            _ => {}
        }
        let name = serde_json::to_value(e)
            .ok()
            .and_then(|v| v.get("event").and_then(|n| n.as_str()).map(str::to_string))
            .unwrap_or_default();
        match self.trace_of(e) {
            Some(trace) => {
                tracing::info!(target: "fleetd::event", event = %name, trace_id = %trace, "{e}")
            }
            None => tracing::info!(target: "fleetd::event", event = %name, "{e}"),
        }
    }
}

/// Presence heartbeats: every few seconds per entity, logged only at `trace`.
fn heartbeat(h: &Headers) -> bool {
    let yes = text(h, "kind") == "PRESENCE";
    if yes {
        tracing::trace!(target: "fleetd::broker", from = %text(h, "from"), "presence");
    }
    yes
}

fn text(h: &Headers, k: &str) -> String {
    match h.get(k) {
        Some(HeaderValue::Str(s)) => s.clone(),
        Some(HeaderValue::Int(i)) => i.to_string(),
        _ => String::new(),
    }
}

impl Observer for DaemonObserver {
    fn output(&mut self, _now: Instant, output: &Output) {
        let herdr = |m: &Metrics, op: &str| m.inc("fleet_herdr_calls_total", &[("op", op)]);
        match output {
            Output::Event(e) => self.event(e),
            Output::Audit(a) => {
                if !a.allowed {
                    self.metrics
                        .inc("fleet_auth_failures_total", &[("reason", "denied")]);
                }
                if let Ok(line) = serde_json::to_string(a) {
                    self.audit.write(&line);
                }
            }
            Output::PollStatus { .. } => herdr(&self.metrics, "sample"),
            Output::Inject { .. } => herdr(&self.metrics, "inject"),
            Output::ReadPane { .. } => herdr(&self.metrics, "read"),
            Output::SpawnPane { .. } => herdr(&self.metrics, "spawn"),
            Output::ClosePane { .. } => herdr(&self.metrics, "close"),
            Output::Broker(BrokerOp::Publish { key, headers, .. }) => {
                if heartbeat(headers) {
                    return;
                }
                let (msg, trace) = self.remember(headers);
                tracing::info!(
                    target: "fleetd::broker",
                    kind = %text(headers, "kind"),
                    msg_id = %msg,
                    trace_id = %trace,
                    to = %key,
                    "publish"
                );
            }
            Output::Broker(_) | Output::Respond { .. } => {}
        }
    }

    fn input(&mut self, _now: Instant, input: &Input) {
        if let Input::Broker(BrokerEvent::Delivery {
            headers,
            queue,
            redelivered,
            ..
        }) = input
        {
            if heartbeat(headers) {
                return;
            }
            let (msg, trace) = self.remember(headers);
            tracing::info!(
                target: "fleetd::broker",
                kind = %text(headers, "kind"),
                msg_id = %msg,
                trace_id = %trace,
                from = %text(headers, "from"),
                queue = %queue,
                redelivered = *redelivered,
                "delivery"
            );
        }
    }

    fn settled(&mut self, now: Instant, gw: &Gateway) {
        if self
            .gauges_at
            .is_some_and(|at| now.saturating_since(at) < GAUGE_EVERY)
        {
            return;
        }
        self.gauges_at = Some(now);
        let m = &self.metrics;
        let sessions: Vec<(String, usize)> = gw
            .sessions()
            .into_iter()
            .map(|(s, n)| (s.to_string(), n))
            .collect();
        let rows: Vec<([(&'static str, &str); 1], f64)> = sessions
            .iter()
            .map(|(s, n)| ([("state", s.as_str())], *n as f64))
            .collect();
        let rows: Vec<(&[(&'static str, &str)], f64)> =
            rows.iter().map(|(l, n)| (&l[..], *n)).collect();
        m.set_all("fleet_sessions", &rows);
        m.set("fleet_inbox_depth", &[], gw.inbox_depth() as f64);
        m.set("fleet_held_deliveries", &[], gw.held_deliveries() as f64);
        m.set("fleet_open_delegations", &[], gw.open_delegations() as f64);
        let mut kinds = [0usize; 3];
        for r in gw.roster() {
            kinds[match r.kind {
                EntityKind::Member => 0,
                EntityKind::Lead => 1,
                EntityKind::Gateway => 2,
            }] += 1;
        }
        for (kind, n) in ["member", "lead", "gateway"].into_iter().zip(kinds) {
            m.set("fleet_roster_entities", &[("kind", kind)], n as f64);
        }
    }
}

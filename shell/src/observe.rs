//! The daemon's `Observer`: every core event becomes a log line, every authz decision an
//! audit line, and outputs and gauges become metrics. Lines about a message are logged inside
//! a `flow` span carrying its `trace_id`, so one id found on three hosts tells a delegation's
//! story. The core is sans-I/O and a flow outlives any one call stack, so the span is entered
//! around each line of the flow rather than held open across it.

use crate::driver::Observer;
use crate::metrics::Metrics;
use crate::metrics::{Counter, Gauge};
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
    latencies: crate::latency::Latencies,
    samples: Vec<crate::latency::Sample>,
}

impl DaemonObserver {
    pub fn new(metrics: Arc<Metrics>, audit: AuditSink) -> Self {
        DaemonObserver {
            metrics,
            audit,
            traces: BTreeMap::new(),
            order: VecDeque::new(),
            gauges_at: None,
            latencies: crate::latency::Latencies::default(),
            samples: Vec::new(),
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

    /// The flow an event belongs to: its message's traceId, or, for a message that never
    /// crossed the broker (a same-host delegation has one message), its msgId.
    fn trace_of(&self, e: &Event) -> Option<String> {
        let msg = match e {
            Event::Enqueued { msg, .. }
            | Event::Delivered { msg, .. }
            | Event::TurnComplete { msg, .. }
            | Event::TurnFailed { msg, .. }
            | Event::Dropped { msg, .. }
            | Event::Suppressed { msg, .. }
            | Event::Nudged { msg, .. } => msg,
            _ => return None,
        };
        Some(
            self.traces
                .get(msg)
                .cloned()
                .unwrap_or_else(|| msg.to_string()),
        )
    }

    fn event(&mut self, e: &Event) {
        match e {
            Event::Nudged { .. } => self.metrics.inc(Counter::PushNudges, &[]),
            Event::Heartbeat { .. } => self.metrics.inc(Counter::LeadHeartbeatNudges, &[]),
            Event::Rejected { code, .. } => {
                self.metrics
                    .inc(Counter::DeadLetters, &[("code", code.as_str())]);
            }
            Event::BrokerDropped { reason, .. } => {
                self.metrics
                    .inc(Counter::BrokerDrops, &[("reason", reason.as_str())]);
            }
            _ => {}
        }
        let name = e.name();
        let _flow = self.trace_of(e).map(|t| flow(&t).entered());
        tracing::info!(target: "fleetd::event", event = %name, "{e}");
    }
}

/// The span every line of one flow is logged in.
fn flow(trace_id: &str) -> tracing::Span {
    tracing::info_span!(target: "fleetd::flow", "flow", trace_id = %trace_id)
}

/// Presence (a snapshot per host every round, a delta per change): logged only at `trace`.
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

impl DaemonObserver {
    /// The latencies the last input or output completed, into their histograms.
    fn record_latencies(&mut self) {
        for s in self.samples.drain(..) {
            self.metrics
                .observe(s.series, &[(s.label.0, &s.label.1)], s.seconds);
        }
    }
}

impl Observer for DaemonObserver {
    fn output(&mut self, now: Instant, output: &Output) {
        self.latencies.output(now, output, &mut self.samples);
        self.record_latencies();
        let herdr = |m: &Metrics, op: &str| m.inc(Counter::HerdrCalls, &[("op", op)]);
        match output {
            Output::Event(e) => self.event(e),
            Output::Audit(a) => {
                if !a.allowed {
                    self.metrics
                        .inc(Counter::AuthFailures, &[("reason", "denied")]);
                }
                if let Ok(line) = serde_json::to_string(a) {
                    self.audit.write(&line);
                }
            }
            Output::PollStatus { .. } => herdr(&self.metrics, "sample"),
            Output::PollStatuses { .. } => herdr(&self.metrics, "sample_all"),
            Output::Inject { .. } => herdr(&self.metrics, "inject"),
            Output::ReadPane { .. } => herdr(&self.metrics, "read"),
            Output::SpawnPane { .. } => herdr(&self.metrics, "spawn"),
            Output::ClosePane { .. } => herdr(&self.metrics, "close"),
            Output::LookAtStart { .. } => {
                herdr(&self.metrics, "sample");
                herdr(&self.metrics, "read");
            }
            Output::ProbeHealth { targets } => {
                herdr(&self.metrics, "sample_all");
                self.metrics
                    .add(Counter::HerdrCalls, &[("op", "read")], targets.len() as f64);
            }
            Output::Broker(BrokerOp::Publish { key, headers, .. }) => {
                if heartbeat(headers) {
                    return;
                }
                let (msg, trace) = self.remember(headers);
                let _flow = flow(&trace).entered();
                tracing::info!(
                    target: "fleetd::broker",
                    kind = %text(headers, "kind"),
                    msg_id = %msg,
                    to = %key,
                    "publish"
                );
            }
            Output::Notify(n) => tracing::info!(
                rule = %n.rule,
                phase = ?n.phase,
                need = %n.need.id,
                seq = n.seq,
                "notice"
            ),
            Output::Broker(_)
            | Output::Respond { .. }
            | Output::Remember(_)
            | Output::KeepTasks(_)
            | Output::MemberReady { .. } => {}
        }
    }

    fn input(&mut self, now: Instant, input: &Input) {
        self.latencies.input(now, input, &mut self.samples);
        self.record_latencies();
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
            let _flow = flow(&trace).entered();
            tracing::info!(
                target: "fleetd::broker",
                kind = %text(headers, "kind"),
                msg_id = %msg,
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
        m.set_all(Gauge::Sessions, &rows);
        let tasks: Vec<([(&'static str, &str); 1], f64)> = gw
            .tasks()
            .counts()
            .into_iter()
            .map(|(s, n)| ([("state", s.as_str())], n as f64))
            .collect();
        let tasks: Vec<(&[(&'static str, &str)], f64)> =
            tasks.iter().map(|(l, n)| (&l[..], *n)).collect();
        m.set_all(Gauge::Tasks, &tasks);
        m.set(Gauge::InboxDepth, &[], gw.inbox_depth() as f64);
        m.set(Gauge::HeldDeliveries, &[], gw.held_deliveries() as f64);
        m.set(Gauge::OpenDelegations, &[], gw.open_delegations() as f64);
        m.set_total(Counter::MuteTurns, &[], gw.mute_turns_total() as f64);
        m.set_total(
            Counter::NoticesLimited,
            &[],
            gw.notify_stats().limited as f64,
        );
        let health: Vec<([(&'static str, &str); 1], f64)> = gw
            .health_counts()
            .into_iter()
            .map(|(h, n)| ([("state", h.as_str())], n as f64))
            .collect();
        let health: Vec<(&[(&'static str, &str)], f64)> =
            health.iter().map(|(l, n)| (&l[..], *n)).collect();
        m.set_all(Gauge::MemberHealth, &health);
        let (_, _, placed) = gw.placement_view();
        let loads: Vec<([(&'static str, &str); 1], f64)> = placed
            .iter()
            .map(|p| ([("profile", p.name.as_str())], f64::from(p.load)))
            .collect();
        let loads: Vec<(&[(&'static str, &str)], f64)> =
            loads.iter().map(|(l, n)| (&l[..], *n)).collect();
        m.set_all(Gauge::ProfileLoad, &loads);
        let mut cooling: BTreeMap<&str, bool> = BTreeMap::new();
        for p in &placed {
            *cooling.entry(p.credential.as_str()).or_default() |= p.cooling_until.is_some();
        }
        let cooling: Vec<([(&'static str, &str); 1], f64)> = cooling
            .into_iter()
            .map(|(c, on)| ([("credential", c)], if on { 1.0 } else { 0.0 }))
            .collect();
        let cooling: Vec<(&[(&'static str, &str)], f64)> =
            cooling.iter().map(|(l, n)| (&l[..], *n)).collect();
        m.set_all(Gauge::CredentialCooling, &cooling);
        let mut kinds = [0usize; 3];
        for r in gw.roster() {
            kinds[match r.kind {
                EntityKind::Member => 0,
                EntityKind::Lead => 1,
                EntityKind::Gateway => 2,
            }] += 1;
        }
        for (kind, n) in ["member", "lead", "gateway"].into_iter().zip(kinds) {
            m.set(Gauge::RosterEntities, &[("kind", kind)], n as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LogFormat, LogSection};
    use fleet_core::{SessionId, TicketId};

    /// Collects what the log writes, line by line.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).extend(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logged(format: LogFormat, feed: impl FnOnce(&mut DaemonObserver)) -> String {
        let sink = Sink::default();
        let cfg = LogSection {
            format,
            ..LogSection::default()
        };
        let out = sink.clone();
        let sub = crate::logging::log_subscriber(&cfg, move || out.clone(), false);
        let mut obs = DaemonObserver::new(Arc::new(Metrics::default()), AuditSink::Log);
        tracing::subscriber::with_default(sub, || feed(&mut obs));
        let bytes = sink.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn enqueued(msg: MsgId) -> Output {
        Output::Event(Event::Enqueued {
            ticket: Some(TicketId(uuid::Uuid::from_u128(1))),
            target: SessionId::new("w1"),
            msg,
        })
    }

    #[test]
    fn a_same_host_flow_is_traced_by_its_msg_id_in_both_formats() {
        let msg = MsgId(uuid::Uuid::from_u128(7));
        let human = logged(LogFormat::Human, |o| {
            o.output(Instant::ZERO, &enqueued(msg))
        });
        assert!(
            human.contains(&format!("flow{{trace_id={msg}}}")),
            "{human}"
        );
        let json = logged(LogFormat::Json, |o| o.output(Instant::ZERO, &enqueued(msg)));
        let line: serde_json::Value =
            serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {json}"));
        assert_eq!(line["span"]["name"], "flow", "{line}");
        assert_eq!(line["span"]["trace_id"], msg.to_string(), "{line}");
        assert_eq!(line["event"], "enqueued", "{line}");
    }

    #[test]
    fn a_delivery_and_the_events_after_it_share_the_envelopes_trace_id() {
        let msg = MsgId(uuid::Uuid::from_u128(9));
        let trace = uuid::Uuid::from_u128(0xabc).to_string();
        let mut headers = Headers::new();
        headers.insert("kind".into(), HeaderValue::Str("SEND".into()));
        headers.insert("msgId".into(), HeaderValue::Str(msg.to_string()));
        headers.insert("traceId".into(), HeaderValue::Str(trace.clone()));
        let delivery = Input::Broker(BrokerEvent::Delivery {
            delivery: fleet_core::broker::DeliveryId {
                generation: 1,
                tag: 1,
            },
            queue: "fleet.agent.w1.inbox.v2".into(),
            routing_key: "w1".into(),
            redelivered: false,
            headers,
            body: Vec::new(),
        });
        let log = logged(LogFormat::Json, |o| {
            o.input(Instant::ZERO, &delivery);
            o.output(Instant::ZERO, &enqueued(msg));
        });
        let lines: Vec<serde_json::Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(lines.len(), 2, "{log}");
        for l in &lines {
            assert_eq!(l["span"]["trace_id"], trace, "{l}");
        }
        assert_eq!(lines[0]["message"], "delivery");
        assert_eq!(lines[1]["event"], "enqueued");
    }
}

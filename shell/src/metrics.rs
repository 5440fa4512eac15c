//! The Prometheus registry, on `prometheus-client`: the counters, gauges and latency
//! histograms this daemon exports, rendered as OpenMetrics text. Every series is one of the
//! typed handles (`Counter`, `Gauge`, `Histo`), each with its name and HELP.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter as Counter_;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge as Gauge_;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

// Every series this daemon exports, as a typed handle: a counter, a gauge or a latency
// histogram, each with its name and HELP. A series cannot be recorded under a misspelt name or
// as the wrong type: the compiler says so.

/// A counter this daemon exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Counter {
    /// `fleet_sends_total`: fleet_send calls taken, by face.
    Sends,
    /// `fleet_send_outcomes_total`: blocking sends ended, by outcome.
    SendOutcomes,
    /// `fleet_replies_total`: fleet_reply calls accepted.
    Replies,
    /// `fleet_asks_total`: fleet_ask calls ended, by outcome.
    Asks,
    /// `fleet_push_nudges_total`: reminders typed into a lead's pane.
    PushNudges,
    /// `fleet_spawns_total`: fleet_spawn calls ended, by result.
    Spawns,
    /// `fleet_herdr_calls_total`: herdr operations started, by op.
    HerdrCalls,
    /// `fleet_auth_failures_total`: refused credentials and denied calls, by reason.
    AuthFailures,
    /// `fleet_connections_refused_total`: connections closed at gateway.max_connections, on the faces and the members' relay socket.
    ConnectionsRefused,
    /// `fleet_dead_letters_total`: deliveries rejected to the dead-letter exchange, by code.
    DeadLetters,
    /// `fleet_broker_drops_total`: messages of this host's queues the broker dead-lettered itself, by reason (its unsigned x-first-death-reason: a hint).
    BrokerDrops,
    /// `fleet_broker_malformed_total`: deliveries refused before the core (bad AMQP headers).
    BrokerMalformed,
    /// `fleet_worktree_sweeps_total`: startup worktree hygiene, by result: orphans snapshotted, removed, kept or failed, and wip snapshots expired.
    WorktreeSweeps,
    /// `fleet_leads_launched_total`: configured leads started because no pane carried their label, by lead.
    LeadsLaunched,
    /// `fleet_lead_heartbeat_nudges_total`: heartbeat reminders typed into quiet leads' panes (CB-551).
    LeadHeartbeatNudges,
    /// `fleet_mute_turns_total`: member turns ended by the completion fallback instead of a fleet_reply.
    MuteTurns,
    /// `fleet_notices_total`: notices of the `[[notify]]` rules, by rule and result: sent, failed (after its retries) or dropped (its sink's queue was full).
    Notices,
    /// `fleet_notices_limited_total`: notices that waited for their rule's budget (max_per_window).
    NoticesLimited,
}

impl Counter {
    pub const ALL: [Counter; 18] = [
        Counter::Sends,
        Counter::SendOutcomes,
        Counter::Replies,
        Counter::Asks,
        Counter::PushNudges,
        Counter::Spawns,
        Counter::HerdrCalls,
        Counter::AuthFailures,
        Counter::ConnectionsRefused,
        Counter::DeadLetters,
        Counter::BrokerDrops,
        Counter::BrokerMalformed,
        Counter::WorktreeSweeps,
        Counter::LeadsLaunched,
        Counter::LeadHeartbeatNudges,
        Counter::MuteTurns,
        Counter::Notices,
        Counter::NoticesLimited,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Counter::Sends => "fleet_sends_total",
            Counter::SendOutcomes => "fleet_send_outcomes_total",
            Counter::Replies => "fleet_replies_total",
            Counter::Asks => "fleet_asks_total",
            Counter::PushNudges => "fleet_push_nudges_total",
            Counter::Spawns => "fleet_spawns_total",
            Counter::HerdrCalls => "fleet_herdr_calls_total",
            Counter::AuthFailures => "fleet_auth_failures_total",
            Counter::ConnectionsRefused => "fleet_connections_refused_total",
            Counter::DeadLetters => "fleet_dead_letters_total",
            Counter::BrokerDrops => "fleet_broker_drops_total",
            Counter::BrokerMalformed => "fleet_broker_malformed_total",
            Counter::WorktreeSweeps => "fleet_worktree_sweeps_total",
            Counter::LeadsLaunched => "fleet_leads_launched_total",
            Counter::LeadHeartbeatNudges => "fleet_lead_heartbeat_nudges_total",
            Counter::MuteTurns => "fleet_mute_turns_total",
            Counter::Notices => "fleet_notices_total",
            Counter::NoticesLimited => "fleet_notices_limited_total",
        }
    }

    fn help(self) -> &'static str {
        match self {
            Counter::Sends => "fleet_send calls taken, by face",
            Counter::SendOutcomes => "blocking sends ended, by outcome",
            Counter::Replies => "fleet_reply calls accepted",
            Counter::Asks => "fleet_ask calls ended, by outcome",
            Counter::PushNudges => "reminders typed into a lead's pane",
            Counter::Spawns => "fleet_spawn calls ended, by result",
            Counter::HerdrCalls => "herdr operations started, by op",
            Counter::AuthFailures => "refused credentials and denied calls, by reason",
            Counter::ConnectionsRefused => "connections closed at gateway.max_connections, on the faces and the members' relay socket",
            Counter::DeadLetters => "deliveries rejected to the dead-letter exchange, by code",
            Counter::BrokerDrops => "messages of this host's queues the broker dead-lettered itself, by reason (its unsigned x-first-death-reason: a hint)",
            Counter::BrokerMalformed => "deliveries refused before the core (bad AMQP headers)",
            Counter::WorktreeSweeps => "startup worktree hygiene, by result: orphans snapshotted, removed, kept or failed, and wip snapshots expired",
            Counter::LeadsLaunched => "configured leads started because no pane carried their label, by lead",
            Counter::LeadHeartbeatNudges => "heartbeat reminders typed into quiet leads' panes (CB-551)",
            Counter::MuteTurns => "member turns ended by the completion fallback instead of a fleet_reply",
            Counter::Notices => "notices of the [[notify]] rules, by rule and result: sent, failed (after its retries) or dropped (its sink's queue was full)",
            Counter::NoticesLimited => "notices that waited for their rule's budget (max_per_window)",
        }
    }
}

/// A gauge this daemon exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Gauge {
    /// `fleet_sessions`: member sessions, by state.
    Sessions,
    /// `fleet_profile_load`: members per profile on this host, spawns in their readiness gate included.
    ProfileLoad,
    /// `fleet_credential_cooling`: 1 while a credential is skipped by placement after its backend refused on a usage limit.
    CredentialCooling,
    /// `fleet_member_health`: members served here by health state (those that went lately included, as GONE or NEVER_READY).
    MemberHealth,
    /// `fleet_inbox_depth`: replies held for leads to collect.
    InboxDepth,
    /// `fleet_held_deliveries`: reply-path deliveries held unacked until drained.
    HeldDeliveries,
    /// `fleet_roster_entities`: rows of the fleet-wide roster, by kind.
    RosterEntities,
    /// `fleet_open_delegations`: delegations in flight from or to this gateway.
    OpenDelegations,
    /// `fleet_broker_connected`: 1 while the broker connection is up.
    BrokerConnected,
    /// `fleet_broker_generation`: the broker connection's generation.
    BrokerGeneration,
    /// `fleet_broker_queues_other_type`: queues found with the other type than broker.queue_type and kept as they are.
    BrokerQueuesOtherType,
    /// `fleet_tasks`: tasks of the task lists kept here, by state.
    Tasks,
}

impl Gauge {
    pub const ALL: [Gauge; 12] = [
        Gauge::Sessions,
        Gauge::ProfileLoad,
        Gauge::CredentialCooling,
        Gauge::MemberHealth,
        Gauge::InboxDepth,
        Gauge::HeldDeliveries,
        Gauge::RosterEntities,
        Gauge::OpenDelegations,
        Gauge::BrokerConnected,
        Gauge::BrokerGeneration,
        Gauge::BrokerQueuesOtherType,
        Gauge::Tasks,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Gauge::Sessions => "fleet_sessions",
            Gauge::ProfileLoad => "fleet_profile_load",
            Gauge::CredentialCooling => "fleet_credential_cooling",
            Gauge::MemberHealth => "fleet_member_health",
            Gauge::InboxDepth => "fleet_inbox_depth",
            Gauge::HeldDeliveries => "fleet_held_deliveries",
            Gauge::RosterEntities => "fleet_roster_entities",
            Gauge::OpenDelegations => "fleet_open_delegations",
            Gauge::BrokerConnected => "fleet_broker_connected",
            Gauge::BrokerGeneration => "fleet_broker_generation",
            Gauge::BrokerQueuesOtherType => "fleet_broker_queues_other_type",
            Gauge::Tasks => "fleet_tasks",
        }
    }

    fn help(self) -> &'static str {
        match self {
            Gauge::Sessions => "member sessions, by state",
            Gauge::ProfileLoad => "members per profile on this host, spawns in their readiness gate included",
            Gauge::CredentialCooling => "1 while a credential is skipped by placement after its backend refused on a usage limit",
            Gauge::MemberHealth => "members served here by health state (those that went lately included, as GONE or NEVER_READY)",
            Gauge::InboxDepth => "replies held for leads to collect",
            Gauge::HeldDeliveries => "reply-path deliveries held unacked until drained",
            Gauge::RosterEntities => "rows of the fleet-wide roster, by kind",
            Gauge::OpenDelegations => "delegations in flight from or to this gateway",
            Gauge::BrokerConnected => "1 while the broker connection is up",
            Gauge::BrokerGeneration => "the broker connection's generation",
            Gauge::BrokerQueuesOtherType => "queues found with the other type than broker.queue_type and kept as they are",
            Gauge::Tasks => "tasks of the task lists kept here, by state",
        }
    }
}

/// A latency histogram this daemon exports (seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Histo {
    /// `fleet_delegation_seconds`: a delegation as its lead on this gateway sees it: from the send to its outcome, by outcome.
    Delegation,
    /// `fleet_inject_wait_seconds`: a brief's wait in this host's queue until it was typed into its member (or dropped untyped), by result.
    InjectWait,
    /// `fleet_broker_confirm_seconds`: from a publish to the broker's confirm, by result.
    BrokerConfirm,
    /// `fleet_herdr_call_seconds`: a herdr operation from its start to its answer, by op.
    HerdrCall,
}

impl Histo {
    pub const ALL: [Histo; 4] = [
        Histo::Delegation,
        Histo::InjectWait,
        Histo::BrokerConfirm,
        Histo::HerdrCall,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Histo::Delegation => "fleet_delegation_seconds",
            Histo::InjectWait => "fleet_inject_wait_seconds",
            Histo::BrokerConfirm => "fleet_broker_confirm_seconds",
            Histo::HerdrCall => "fleet_herdr_call_seconds",
        }
    }

    fn help(self) -> &'static str {
        match self {
            Histo::Delegation => "a delegation as its lead on this gateway sees it: from the send to its outcome, by outcome",
            Histo::InjectWait => "a brief's wait in this host's queue until it was typed into its member (or dropped untyped), by result",
            Histo::BrokerConfirm => "from a publish to the broker's confirm, by result",
            Histo::HerdrCall => "a herdr operation from its start to its answer, by op",
        }
    }
}

type Labels = Vec<(String, String)>;
/// A histogram family, each series made with the latency buckets.
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// The content type of `render`'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency buckets: 0.5 ms to about 70 minutes, ×2.5 apart (a herdr call and a delegation
/// that ran an hour land in the same family of buckets, each in a bucket of its own).
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.5, 18))
}

/// Shared by the faces (counting calls) and the driver's observer (counting outputs, sampling
/// gauges, timing latencies). Each family is found by its handle's index, never by name.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    counters: Vec<Family<Labels, Counter_>>,
    gauges: Vec<Family<Labels, Gauge_>>,
    histograms: Vec<Histograms>,
    /// The label sets each gauge family was given, so `set_all` can zero what it no longer
    /// names instead of leaving it stale.
    gauge_keys: Mutex<BTreeMap<Gauge, BTreeSet<Labels>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let counters = Counter::ALL
            .iter()
            .map(|c| {
                let f = Family::<Labels, Counter_>::default();
                // The encoder adds the `_total` every counter's samples carry.
                registry.register(c.name().trim_end_matches("_total"), c.help(), f.clone());
                f
            })
            .collect();
        let gauges = Gauge::ALL
            .iter()
            .map(|g| {
                let f = Family::<Labels, Gauge_>::default();
                registry.register(g.name(), g.help(), f.clone());
                f
            })
            .collect();
        let histograms = Histo::ALL
            .iter()
            .map(|h| {
                let f = Histograms::new_with_constructor(latency);
                registry.register(h.name(), h.help(), f.clone());
                f
            })
            .collect();
        let m = Metrics {
            registry,
            counters,
            gauges,
            histograms,
            gauge_keys: Mutex::new(BTreeMap::new()),
        };
        // Series without labels show 0 before their first sample.
        for c in LABEL_FREE_COUNTERS {
            m.add(c, &[], 0.0);
        }
        for g in LABEL_FREE_GAUGES {
            m.set(g, &[], 0.0);
        }
        m
    }
}

impl Metrics {
    pub fn inc(&self, c: Counter, labels: &[(&'static str, &str)]) {
        self.add(c, labels, 1.0);
    }

    /// Adds to a counter (counts are whole: `by` is rounded down).
    pub fn add(&self, c: Counter, labels: &[(&'static str, &str)], by: f64) {
        self.counters[c as usize]
            .get_or_create(&own(labels))
            .inc_by(by.max(0.0) as u64);
    }

    /// A counter the core counts itself: its running total.
    pub fn set_total(&self, c: Counter, labels: &[(&'static str, &str)], v: f64) {
        self.counters[c as usize]
            .get_or_create(&own(labels))
            .inner()
            .store(v.max(0.0) as u64, Ordering::Relaxed);
    }

    /// Sets a gauge.
    pub fn set(&self, g: Gauge, labels: &[(&'static str, &str)], v: f64) {
        let labels = own(labels);
        self.gauges[g as usize].get_or_create(&labels).set(v as i64);
        self.keys(|k| {
            k.entry(g).or_default().insert(labels);
        });
    }

    /// Replaces every series of gauge `g` (so a state that emptied reads 0, not stale).
    pub fn set_all(&self, g: Gauge, rows: &[(&[(&'static str, &str)], f64)]) {
        let f = &self.gauges[g as usize];
        let named: BTreeSet<Labels> = rows.iter().map(|(l, _)| own(l)).collect();
        let stale: Vec<Labels> = self.keys(|k| {
            let known = k.entry(g).or_default();
            let stale = known.difference(&named).cloned().collect();
            known.extend(named.iter().cloned());
            stale
        });
        for labels in stale {
            f.get_or_create(&labels).set(0);
        }
        for (labels, v) in rows {
            f.get_or_create(&own(labels)).set(*v as i64);
        }
    }

    /// Records one latency, in seconds.
    pub fn observe(&self, h: Histo, labels: &[(&'static str, &str)], seconds: f64) {
        self.histograms[h as usize]
            .get_or_create(&own(labels))
            .observe(seconds);
    }

    pub fn counter(&self, c: Counter, labels: &[(&'static str, &str)]) -> u64 {
        self.counters[c as usize].get_or_create(&own(labels)).get()
    }

    pub fn gauge(&self, g: Gauge, labels: &[(&'static str, &str)]) -> i64 {
        self.gauges[g as usize].get_or_create(&own(labels)).get()
    }

    /// OpenMetrics text (`CONTENT_TYPE`), every declared family with its HELP and TYPE.
    pub fn render(&self) -> String {
        let mut text = String::new();
        if let Err(e) = encode(&mut text, &self.registry) {
            tracing::error!(error = %e, "encoding the metrics");
        }
        // A series without labels reads `name value`, not `name{} value` (both parse; the
        // short form is what people grep for).
        let mut out = String::with_capacity(text.len());
        for line in text.lines() {
            match line.split_once("{} ") {
                Some((name, value)) if !line.starts_with('#') && !name.contains('"') => {
                    out.push_str(name);
                    out.push(' ');
                    out.push_str(value);
                }
                _ => out.push_str(line),
            }
            out.push('\n');
        }
        out
    }

    fn keys<R>(&self, f: impl FnOnce(&mut BTreeMap<Gauge, BTreeSet<Labels>>) -> R) -> R {
        // A panic elsewhere while holding the lock leaves plain sets: still usable.
        let mut g = self.gauge_keys.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }
}

/// Series that have no labels show 0 before their first sample.
const LABEL_FREE_COUNTERS: [Counter; 7] = [
    Counter::ConnectionsRefused,
    Counter::NoticesLimited,
    Counter::Replies,
    Counter::PushNudges,
    Counter::BrokerMalformed,
    Counter::MuteTurns,
    Counter::LeadHeartbeatNudges,
];
const LABEL_FREE_GAUGES: [Gauge; 3] = [
    Gauge::InboxDepth,
    Gauge::HeldDeliveries,
    Gauge::OpenDelegations,
];

/// The label set, each value escaped as the exposition format wants it: prometheus-client
/// writes values as given, and a value may come from a peer or the broker (a drop's reason
/// is an unsigned header), so a quote or a newline must not end the value or the line.
fn own(labels: &[(&'static str, &str)]) -> Labels {
    labels
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            (k.to_string(), v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_render_as_openmetrics_with_escaped_labels() {
        let m = Metrics::default();
        m.inc(Counter::Sends, &[("face", "mcp")]);
        m.inc(Counter::Sends, &[("face", "mcp")]);
        m.inc(Counter::AuthFailures, &[("reason", "a\"b")]);
        // A broker drop's reason is an unsigned header: it cannot forge a series.
        m.inc(
            Counter::BrokerDrops,
            &[("reason", "x\"} 1\nfleet_forged 1\n")],
        );
        let text = m.render();
        assert!(text.contains("# TYPE fleet_sends counter\n"), "{text}");
        assert!(
            text.contains("fleet_sends_total{face=\"mcp\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("fleet_auth_failures_total{reason=\"a\\\"b\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("fleet_inbox_depth 0\n"), "{text}");
        assert!(text.contains("fleet_replies_total 0\n"), "{text}");
        assert!(
            !text.lines().any(|l| l.starts_with("fleet_forged")),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn a_gauge_family_is_replaced_whole() {
        let m = Metrics::default();
        m.set_all(Gauge::Sessions, &[(&[("state", "BUSY")], 2.0)]);
        m.set_all(Gauge::Sessions, &[(&[("state", "READY")], 1.0)]);
        assert_eq!(m.gauge(Gauge::Sessions, &[("state", "BUSY")]), 0);
        assert_eq!(m.gauge(Gauge::Sessions, &[("state", "READY")]), 1);
        assert!(m.render().contains("fleet_sessions{state=\"BUSY\"} 0\n"));
    }

    #[test]
    fn a_latency_lands_in_its_bucket_and_a_counter_takes_the_cores_total() {
        let m = Metrics::default();
        m.observe(Histo::HerdrCall, &[("op", "inject")], 0.004);
        m.set_total(Counter::MuteTurns, &[], 3.0);
        let text = m.render();
        assert!(
            text.contains("# TYPE fleet_herdr_call_seconds histogram\n"),
            "{text}"
        );
        assert!(
            text.contains("fleet_herdr_call_seconds_count{op=\"inject\"} 1\n"),
            "{text}"
        );
        // 0.5 ms × 2.5³ = 7.8 ms is the first bucket holding 4 ms; the one below it does not.
        assert!(
            text.contains("fleet_herdr_call_seconds_bucket{le=\"0.0078125\",op=\"inject\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("fleet_herdr_call_seconds_bucket{le=\"0.003125\",op=\"inject\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("fleet_mute_turns_total 3\n"), "{text}");
    }
}

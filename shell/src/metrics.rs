//! The Prometheus registry, on `prometheus-client`: the counters, gauges and latency
//! histograms this daemon exports, rendered as OpenMetrics text. Every series is declared in
//! `SERIES` (name, type, help), so none can be recorded without its HELP.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// Every series this daemon exports: name, type, help. A series not listed here cannot be
/// recorded (the renderer would have no HELP for it).
pub const SERIES: &[(&str, &str, &str)] = &[
    (
        "fleet_sends_total",
        "counter",
        "fleet_send calls taken, by face",
    ),
    (
        "fleet_send_outcomes_total",
        "counter",
        "blocking sends ended, by outcome",
    ),
    (
        "fleet_replies_total",
        "counter",
        "fleet_reply calls accepted",
    ),
    (
        "fleet_asks_total",
        "counter",
        "fleet_ask calls ended, by outcome",
    ),
    (
        "fleet_push_nudges_total",
        "counter",
        "reminders typed into a lead's pane",
    ),
    (
        "fleet_spawns_total",
        "counter",
        "fleet_spawn calls ended, by result",
    ),
    (
        "fleet_herdr_calls_total",
        "counter",
        "herdr operations started, by op",
    ),
    (
        "fleet_auth_failures_total",
        "counter",
        "refused credentials and denied calls, by reason",
    ),
    (
        "fleet_connections_refused_total",
        "counter",
        "connections closed at gateway.max_connections, on the faces and the members' relay socket",
    ),
    (
        "fleet_dead_letters_total",
        "counter",
        "deliveries rejected to the dead-letter exchange, by code",
    ),
    (
        "fleet_broker_drops_total",
        "counter",
        "messages of this host's queues the broker dead-lettered itself, by reason (its unsigned x-first-death-reason: a hint)",
    ),
    (
        "fleet_broker_malformed_total",
        "counter",
        "deliveries refused before the core (bad AMQP headers)",
    ),
    (
        "fleet_worktree_sweeps_total",
        "counter",
        "startup worktree hygiene, by result: orphans snapshotted, removed, kept or failed, and wip snapshots expired",
    ),
    (
        "fleet_leads_launched_total",
        "counter",
        "configured leads started because no pane carried their label, by lead",
    ),
    (
        "fleet_lead_heartbeat_nudges_total",
        "counter",
        "heartbeat reminders typed into quiet leads' panes (CB-551)",
    ),
    (
        "fleet_mute_turns_total",
        "counter",
        "member turns ended by the completion fallback instead of a fleet_reply",
    ),
    ("fleet_sessions", "gauge", "member sessions, by state"),
    (
        "fleet_profile_load",
        "gauge",
        "members per profile on this host, spawns in their readiness gate included",
    ),
    (
        "fleet_credential_cooling",
        "gauge",
        "1 while a credential is skipped by placement after its backend refused on a usage limit",
    ),
    (
        "fleet_member_health",
        "gauge",
        "members served here by health state (those that went lately included, as GONE or NEVER_READY)",
    ),
    (
        "fleet_inbox_depth",
        "gauge",
        "replies held for leads to collect",
    ),
    (
        "fleet_held_deliveries",
        "gauge",
        "reply-path deliveries held unacked until drained",
    ),
    (
        "fleet_roster_entities",
        "gauge",
        "rows of the fleet-wide roster, by kind",
    ),
    (
        "fleet_open_delegations",
        "gauge",
        "delegations in flight from or to this gateway",
    ),
    (
        "fleet_broker_connected",
        "gauge",
        "1 while the broker connection is up",
    ),
    (
        "fleet_broker_generation",
        "gauge",
        "the broker connection's generation",
    ),
    (
        "fleet_broker_queues_other_type",
        "gauge",
        "queues found with the other type than broker.queue_type and kept as they are",
    ),
    (
        "fleet_delegation_seconds",
        "histogram",
        "a delegation as its lead on this gateway sees it: from the send to its outcome, by outcome",
    ),
    (
        "fleet_inject_wait_seconds",
        "histogram",
        "a brief's wait in this host's queue until it was typed into its member (or dropped untyped), by result",
    ),
    (
        "fleet_broker_confirm_seconds",
        "histogram",
        "from a publish to the broker's confirm, by result",
    ),
    (
        "fleet_herdr_call_seconds",
        "histogram",
        "a herdr operation from its start to its answer, by op",
    ),
];

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
/// gauges, timing latencies).
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    counters: BTreeMap<&'static str, Family<Labels, Counter>>,
    gauges: BTreeMap<&'static str, Family<Labels, Gauge>>,
    histograms: BTreeMap<&'static str, Histograms>,
    /// The label sets each gauge family was given, so `set_all` can zero what it no longer
    /// names instead of leaving it stale.
    gauge_keys: Mutex<BTreeMap<&'static str, BTreeSet<Labels>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let (mut counters, mut gauges, mut histograms) =
            (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        for (name, kind, help) in SERIES {
            match *kind {
                "counter" => {
                    let f = Family::<Labels, Counter>::default();
                    // The encoder adds the `_total` every counter's samples carry.
                    registry.register(name.trim_end_matches("_total"), *help, f.clone());
                    counters.insert(*name, f);
                }
                "gauge" => {
                    let f = Family::<Labels, Gauge>::default();
                    registry.register(*name, *help, f.clone());
                    gauges.insert(*name, f);
                }
                _ => {
                    let f = Histograms::new_with_constructor(latency);
                    registry.register(*name, *help, f.clone());
                    histograms.insert(*name, f);
                }
            }
        }
        let m = Metrics {
            registry,
            counters,
            gauges,
            histograms,
            gauge_keys: Mutex::new(BTreeMap::new()),
        };
        // Series without labels show 0 before their first sample.
        for name in LABELS_FREE {
            m.add(name, &[], 0.0);
            m.set(name, &[], 0.0);
        }
        m
    }
}

impl Metrics {
    pub fn inc(&self, name: &'static str, labels: &[(&'static str, &str)]) {
        self.add(name, labels, 1.0);
    }

    /// Adds to a counter (counts are whole: `by` is rounded down).
    pub fn add(&self, name: &'static str, labels: &[(&'static str, &str)], by: f64) {
        if let Some(f) = self.counters.get(name) {
            f.get_or_create(&own(labels)).inc_by(by.max(0.0) as u64);
        } else {
            debug_assert!(self.declared(name), "{name} is not declared");
        }
    }

    /// Sets a gauge, or a counter the core counts itself (its running total).
    pub fn set(&self, name: &'static str, labels: &[(&'static str, &str)], v: f64) {
        let labels = own(labels);
        if let Some(f) = self.gauges.get(name) {
            f.get_or_create(&labels).set(v as i64);
            self.keys(|k| {
                k.entry(name).or_default().insert(labels);
            });
        } else if let Some(f) = self.counters.get(name) {
            f.get_or_create(&labels)
                .inner()
                .store(v.max(0.0) as u64, Ordering::Relaxed);
        } else {
            debug_assert!(self.declared(name), "{name} is not declared");
        }
    }

    /// Replaces every series of gauge `name` (so a state that emptied reads 0, not stale).
    pub fn set_all(&self, name: &'static str, rows: &[(&[(&'static str, &str)], f64)]) {
        let Some(f) = self.gauges.get(name) else {
            debug_assert!(self.declared(name), "{name} is not a gauge");
            return;
        };
        let named: BTreeSet<Labels> = rows.iter().map(|(l, _)| own(l)).collect();
        let stale: Vec<Labels> = self.keys(|k| {
            let known = k.entry(name).or_default();
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
    pub fn observe(&self, name: &'static str, labels: &[(&'static str, &str)], seconds: f64) {
        match self.histograms.get(name) {
            Some(f) => f.get_or_create(&own(labels)).observe(seconds),
            None => debug_assert!(self.declared(name), "{name} is not a histogram"),
        }
    }

    pub fn get(&self, name: &'static str, labels: &[(&'static str, &str)]) -> f64 {
        let labels = own(labels);
        if let Some(f) = self.counters.get(name) {
            return f.get_or_create(&labels).get() as f64;
        }
        if let Some(f) = self.gauges.get(name) {
            return f.get_or_create(&labels).get() as f64;
        }
        0.0
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

    fn declared(&self, name: &str) -> bool {
        SERIES.iter().any(|s| s.0 == name)
    }

    fn keys<R>(&self, f: impl FnOnce(&mut BTreeMap<&'static str, BTreeSet<Labels>>) -> R) -> R {
        // A panic elsewhere while holding the lock leaves plain sets: still usable.
        let mut g = self.gauge_keys.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }
}

/// Series that have no labels show 0 before their first sample.
const LABELS_FREE: [&str; 9] = [
    "fleet_connections_refused_total",
    "fleet_replies_total",
    "fleet_push_nudges_total",
    "fleet_inbox_depth",
    "fleet_held_deliveries",
    "fleet_open_delegations",
    "fleet_broker_malformed_total",
    "fleet_mute_turns_total",
    "fleet_lead_heartbeat_nudges_total",
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
        m.inc("fleet_sends_total", &[("face", "mcp")]);
        m.inc("fleet_sends_total", &[("face", "mcp")]);
        m.inc("fleet_auth_failures_total", &[("reason", "a\"b")]);
        // A broker drop's reason is an unsigned header: it cannot forge a series.
        m.inc(
            "fleet_broker_drops_total",
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
        m.set_all("fleet_sessions", &[(&[("state", "BUSY")], 2.0)]);
        m.set_all("fleet_sessions", &[(&[("state", "READY")], 1.0)]);
        assert_eq!(m.get("fleet_sessions", &[("state", "BUSY")]), 0.0);
        assert_eq!(m.get("fleet_sessions", &[("state", "READY")]), 1.0);
        assert!(m.render().contains("fleet_sessions{state=\"BUSY\"} 0\n"));
    }

    #[test]
    fn a_latency_lands_in_its_bucket_and_a_counter_takes_the_cores_total() {
        let m = Metrics::default();
        m.observe("fleet_herdr_call_seconds", &[("op", "inject")], 0.004);
        m.set("fleet_mute_turns_total", &[], 3.0);
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

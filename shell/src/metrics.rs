//! The Prometheus registry: named counters and gauges, rendered as text exposition. Small and
//! dependency-free like the Java one (`metrics.Metrics`); series are ordered so a scrape is
//! stable.

use std::collections::BTreeMap;
use std::fmt::Write as _;
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
];

type Key = (&'static str, Vec<(&'static str, String)>);

/// Shared by the faces (counting calls) and the driver's observer (counting outputs, sampling
/// gauges).
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<BTreeMap<Key, f64>>,
}

impl Metrics {
    fn with<R>(&self, f: impl FnOnce(&mut BTreeMap<Key, f64>) -> R) -> R {
        // A panic elsewhere while holding the lock leaves plain numbers: still usable.
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    pub fn inc(&self, name: &'static str, labels: &[(&'static str, &str)]) {
        self.add(name, labels, 1.0);
    }

    pub fn add(&self, name: &'static str, labels: &[(&'static str, &str)], by: f64) {
        debug_assert!(SERIES.iter().any(|s| s.0 == name), "{name} is not declared");
        let key = (name, own(labels));
        self.with(|m| *m.entry(key).or_insert(0.0) += by);
    }

    pub fn set(&self, name: &'static str, labels: &[(&'static str, &str)], v: f64) {
        debug_assert!(SERIES.iter().any(|s| s.0 == name), "{name} is not declared");
        let key = (name, own(labels));
        self.with(|m| m.insert(key, v));
    }

    /// Replaces every series of gauge `name` (so a state that emptied reads 0, not stale).
    pub fn set_all(&self, name: &'static str, rows: &[(&[(&'static str, &str)], f64)]) {
        self.with(|m| {
            for (k, v) in m.iter_mut() {
                if k.0 == name {
                    *v = 0.0;
                }
            }
            for (labels, v) in rows {
                m.insert((name, own(labels)), *v);
            }
        });
    }

    pub fn get(&self, name: &'static str, labels: &[(&'static str, &str)]) -> f64 {
        let key = (name, own(labels));
        self.with(|m| m.get(&key).copied().unwrap_or(0.0))
    }

    /// Prometheus text exposition format 0.0.4.
    pub fn render(&self) -> String {
        let snapshot = self.with(|m| m.clone());
        let mut out = String::new();
        for (name, kind, help) in SERIES {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            let mut any = false;
            for ((n, labels), v) in &snapshot {
                if n != name {
                    continue;
                }
                any = true;
                let _ = writeln!(out, "{name}{} {v}", render_labels(labels));
            }
            if !any && labels_free(name) {
                let _ = writeln!(out, "{name} 0");
            }
        }
        out
    }
}

/// Series that have no labels show 0 before their first sample.
fn labels_free(name: &str) -> bool {
    matches!(
        name,
        "fleet_replies_total"
            | "fleet_push_nudges_total"
            | "fleet_inbox_depth"
            | "fleet_held_deliveries"
            | "fleet_open_delegations"
            | "fleet_broker_malformed_total"
            | "fleet_mute_turns_total"
            | "fleet_lead_heartbeat_nudges_total"
    )
}

fn own(labels: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    labels.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

fn render_labels(labels: &[(&'static str, String)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    format!("{{{}}}", inner.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_render_in_text_format_with_escaped_labels() {
        let m = Metrics::default();
        m.inc("fleet_sends_total", &[("face", "mcp")]);
        m.inc("fleet_sends_total", &[("face", "mcp")]);
        m.inc("fleet_auth_failures_total", &[("reason", "a\"b")]);
        let text = m.render();
        assert!(
            text.contains("# TYPE fleet_sends_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("fleet_sends_total{face=\"mcp\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("fleet_auth_failures_total{reason=\"a\\\"b\"} 1\n"));
        assert!(text.contains("fleet_inbox_depth 0\n"));
    }

    #[test]
    fn a_gauge_family_is_replaced_whole() {
        let m = Metrics::default();
        m.set_all("fleet_sessions", &[(&[("state", "BUSY")], 2.0)]);
        m.set_all("fleet_sessions", &[(&[("state", "READY")], 1.0)]);
        assert_eq!(m.get("fleet_sessions", &[("state", "BUSY")]), 0.0);
        assert_eq!(m.get("fleet_sessions", &[("state", "READY")]), 1.0);
    }
}

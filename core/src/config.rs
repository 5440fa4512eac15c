//! The core's knobs. Every bound has a default taken from the as-built daemon (ch. 9).

use crate::time::Duration;
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Knobs of the delivery core. Grace bounds count status *samples* (polls), as the Java
/// injector did, so they scale with `poll_interval`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CoreConfig {
    /// How often each active target's status is sampled.
    pub poll_interval_ms: u64,
    /// Injectable samples after an inject with no WORKING seen before the turn is taken to have
    /// run between two polls (a missed fast turn). Java `PICKUP_GRACE_POLLS`.
    pub pickup_grace_polls: u32,
    /// Consecutive UNKNOWN samples inside a turn before it is declared wedged (CB-109).
    /// Java `TURN_STALL_GRACE_POLLS`.
    pub stall_grace_polls: u32,
    /// Samples a queued message waits for a not-yet-ready member before it fails.
    /// Java `READINESS_GRACE_POLLS`.
    pub readiness_grace_polls: u32,
    /// Optional quiet time after a turn completes before the next delivery.
    pub post_turn_settle_ms: u64,
    /// How long a turn end seen on the screen of an agent that reports its own turns waits
    /// for the agent's report (its final text) before the screen is read instead, and before
    /// anything else is typed into it.
    pub report_grace_ms: u64,
    /// Bound on the driver answering an inject or a completion scrape.
    pub io_timeout_ms: u64,
    /// Blocking-send timeout when the caller names none.
    pub send_timeout_ms: u64,
    /// Largest timeout a caller may ask for.
    pub send_timeout_max_ms: u64,
    /// How long a member's `fleet_ask` waits for its answer.
    pub ask_timeout_ms: u64,
    /// A finished async ticket is kept this long **after it completed** (issue #197).
    pub ticket_ttl_ms: u64,
    /// Held replies per target before new ones are refused (the worker is told, nothing lost).
    pub inbox_cap_per_target: usize,
    /// Bytes of held replies per target before new ones are refused the same way: a member
    /// replying in a loop cannot grow the gateway's memory past it.
    pub held_bytes_per_target: usize,
    /// Reminders typed into a lead's pane about items waiting for it.
    pub nudge_max_reminders: u32,
    /// Gap between two reminders.
    pub nudge_interval_ms: u64,
    /// Regexes over a turn's new pane text that mean the backend refused on a usage limit.
    pub usage_limit_patterns: Vec<String>,
    /// Regexes over lines of a turn's text that are the agent's chrome, not its answer (a
    /// TUI's "done in 3s" line): dropped from a COMPLETED_UNREPLIED body.
    pub chrome_patterns: Vec<String>,
    /// Regexes over pane text that mean an UNKNOWN agent is really working.
    pub refine_working_patterns: Vec<String>,
    /// Regexes over the last non-blank pane line that mean an UNKNOWN agent is at its prompt.
    pub refine_idle_patterns: Vec<String>,
    /// Cross-host: a remote brief must be typed within this, or the sender fails the send fast
    /// (no INJECTED) and the worker's gateway withdraws it (never typed late).
    pub injected_timeout_ms: u64,
    /// Cross-host: how long the worker's gateway waits after typing a remote brief before it
    /// publishes INJECTED. A turn that ends sooner sends only its REPLY (or FAILED), which
    /// says the brief was typed as well: one signed message fewer for a fast delegation.
    /// 0 publishes INJECTED at once. At most `clock_skew_ms`, so it still arrives within the
    /// sender's INJECTED bound.
    pub injected_defer_ms: u64,
    /// Cross-host: how long terminal messages (REPLY, FAILED, …) stay valid (`expiresAt`).
    pub reply_ttl_ms: u64,
    /// Cross-host: allowance for wall clocks that disagree between hosts.
    pub clock_skew_ms: u64,
    /// Presence heartbeat period, and how long an entry lives without one.
    pub presence_interval_ms: u64,
    pub presence_ttl_ms: u64,
    /// How long a status or busy change may wait to go out with others (one signed message
    /// for every change in the window). Joins and leaves go at once.
    pub presence_batch_ms: u64,
    /// Directories under which a SPAWN from another host may name its member's `cwd`. None by
    /// default: a remote spawn then runs in the member's own home or a worktree, never in a
    /// directory a peer picked (a leaked peer key must not open `~/.ssh` to a member).
    pub remote_cwd_roots: Vec<String>,
    /// The most members this host runs at once (spawning ones included): a spawn past it, local
    /// or from another host, fails saying so. Each member is an agent CLI with its own memory
    /// and processes; a peer (or a leaked peer key) must not be able to start them without end.
    pub max_members: usize,
    /// Forward-path msgIds remembered against replay.
    pub seen_capacity: usize,
    /// How far ahead of this host's clock a received `expiresAt` may be: a message claiming to
    /// live longer is refused (`expiry_too_far`), so none holds a replay-record entry longer.
    /// At least every TTL fleetd stamps (`reply_ttl_ms`, `inbox_message_ttl_ms`, …).
    pub max_expiry_ms: u64,
    /// The largest message body accepted (bytes): a brief, answer, reply or question from the
    /// north faces, and any delivery from the broker (checked before its signature is hashed).
    pub max_body_bytes: usize,
    /// basic.qos prefetch per consumer: bounds the deliveries a gateway holds.
    pub prefetch: u16,
    /// basic.qos prefetch of each held-results queue: how many collected-later results a
    /// gateway keeps unacked per lead (more wait on the broker, durable, until some are taken).
    pub held_prefetch: u16,
    /// basic.qos prefetch of the roster queue: presence is handled and acked the moment it
    /// arrives, so its window only bounds the round trips in flight — with a small one, a
    /// fleet's deltas queue behind the acks and arrive stale.
    pub roster_prefetch: u16,
    /// Inbox queue arguments (x-max-length, x-message-ttl) and orphan expiry (x-expires).
    pub inbox_max_length: u64,
    pub inbox_message_ttl_ms: u64,
    pub worker_inbox_expires_ms: u64,
    pub lead_inbox_expires_ms: u64,
    pub dlq_max_length: u64,
    /// How often held reply-path deliveries are checked against their `expiresAt`.
    pub held_sweep_interval_ms: u64,
    /// Profile names this host can spawn (advertised in its `_gateway` heartbeat).
    pub profiles: Vec<String>,
    /// A spawned member must pass its readiness gate (its prompt or status, and its
    /// connection) within this, or it is reaped.
    pub spawn_ready_timeout_ms: u64,
    /// A starting agent must show its prompt (a `command` member: an injectable status)
    /// within this of its pane's placing, or its spawn fails with its last screen (the
    /// daemon sets it from `herdr.ready_timeout_ms`).
    pub start_timeout_ms: u64,
    /// How often a starting member's pane is looked at for its readiness gate.
    pub start_poll_ms: u64,
    /// A stop of a member on another host is answered within this: its host's leave, or a
    /// refusal, or else `stop_unconfirmed`.
    pub stop_timeout_ms: u64,
    /// A member idle (READY, DONE or FAILED) this long is closed by the reaper; 0 never.
    pub member_idle_ttl_ms: u64,
    /// Fleet health: the probe's cadence, the classifier's thresholds, the fatal patterns
    /// (`[health]` in the daemon's config; profiles add their own patterns).
    #[serde(skip)]
    pub health: crate::health::HealthConfig,
    /// Placement of spawns that name no profile, and the backend quarantine (`[placement]`
    /// and each profile's `weight`, `max_load`, `credential`).
    #[serde(skip)]
    pub placement: crate::placement::PlacementConfig,
    /// Notification rules (`[[notify]]`, each with its sink in the daemon's config): which
    /// needs are worth telling a person about, and when (`notify`).
    #[serde(skip)]
    pub notify: Vec<crate::notify::NotifyRule>,
    /// How often the needs are scanned for the notification rules (only with rules).
    pub notify_scan_ms: u64,
    /// Leads with a heartbeat (`[leads.heartbeat]`), by gid.
    #[serde(skip)]
    pub heartbeats: std::collections::BTreeMap<crate::ids::SessionId, HeartbeatConfig>,
    /// A protocol bug to switch on, for proving the simulation's oracle (test builds only).
    #[cfg(feature = "planted-bugs")]
    #[serde(skip)]
    pub planted: Option<crate::planted::PlantedBug>,
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            poll_interval_ms: 500,
            pickup_grace_polls: 8,
            stall_grace_polls: 120,
            readiness_grace_polls: 240,
            post_turn_settle_ms: 0,
            report_grace_ms: 3_000,
            io_timeout_ms: 15_000,
            send_timeout_ms: 30 * 60_000,
            send_timeout_max_ms: 4 * 3_600_000,
            ask_timeout_ms: 30 * 60_000,
            ticket_ttl_ms: 10 * 60_000,
            inbox_cap_per_target: 256,
            held_bytes_per_target: 16 << 20,
            nudge_max_reminders: 3,
            nudge_interval_ms: 60_000,
            usage_limit_patterns: vec![
                r"(?i)usage limit (reached|exceeded)".into(),
                r"(?i)\b5-hour limit reached\b".into(),
                r"(?i)rate limit (reached|exceeded)".into(),
                r"(?i)you('ve| have) (hit|reached) your (usage )?limit".into(),
                r"(?i)\bquota exceeded\b".into(),
                // Claude Code 2.1 on the API's spend limit: `● API Error: 400 You have reached
                // your specified API usage limits. You will regain access on …`.
                r"(?i)reached your specified API usage limits?".into(),
                // OpenAI's `insufficient_quota`, as opencode shows its message.
                r"(?i)exceeded your current quota".into(),
            ],
            // Claude Code 2.1's turn footer, `✻ Brewed for 0s · done 8:12 AM`; Codex 0.171's,
            // `Worked for <1s • 08:25`; the tips both draw (`└ Tip: Use /theme …`).
            chrome_patterns: vec![
                r"^\s*✻ \S+ for \d+[hms]".into(),
                r"^\s*Worked for <?\d+[hms]\S* • \d".into(),
                r"^\s*[└※⎿] Tip: ".into(),
                // Claude Code 2.1's effort gauge, `◐ medium · /effort`, when its footer wraps.
                r"^\s*\S+ \S+ · /effort\s*$".into(),
                // opencode 1.18's `▣  Build · <model> · 2.2s`, and its message blocks' bars.
                r"^\s*▣  \S+ · ".into(),
                r"^\s*┃\s*$".into(),
            ],
            refine_working_patterns: vec![
                r"(?i)esc to interrupt".into(),
                r"(?i)\besc interrupt\b".into(),
                r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏✻✽✢]\s+\w+…".into(),
            ],
            refine_idle_patterns: vec![r"^\s*[>❯›]\s*$".into(), r"^\s*\$\s*$".into()],
            injected_timeout_ms: 120_000,
            injected_defer_ms: 250,
            reply_ttl_ms: 7 * 86_400_000,
            clock_skew_ms: 2_000,
            presence_interval_ms: 5_000,
            presence_ttl_ms: 20_000,
            presence_batch_ms: 250,
            remote_cwd_roots: Vec::new(),
            max_members: 64,
            seen_capacity: 65_536,
            max_expiry_ms: crate::admission::MAX_EXPIRY_MS,
            max_body_bytes: 1 << 20,
            prefetch: 64,
            held_prefetch: 256,
            roster_prefetch: 256,
            inbox_max_length: 10_000,
            inbox_message_ttl_ms: 7 * 86_400_000,
            worker_inbox_expires_ms: 3_600_000,
            lead_inbox_expires_ms: 30 * 86_400_000,
            dlq_max_length: 100_000,
            held_sweep_interval_ms: 60_000,
            profiles: Vec::new(),
            spawn_ready_timeout_ms: 180_000,
            start_timeout_ms: 60_000,
            start_poll_ms: 250,
            stop_timeout_ms: 30_000,
            member_idle_ttl_ms: 3_600_000,
            health: crate::health::HealthConfig::default(),
            placement: crate::placement::PlacementConfig::default(),
            notify: Vec::new(),
            notify_scan_ms: 500,
            heartbeats: std::collections::BTreeMap::new(),
            #[cfg(feature = "planted-bugs")]
            planted: None,
        }
    }
}

/// A config value the core cannot run with, named by its key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{key} must be greater than zero")]
    Zero { key: &'static str },
    #[error("{key}[{index}] is not a valid regex: {reason}")]
    BadPattern {
        key: &'static str,
        index: usize,
        reason: String,
    },
    #[error("presence_ttl_ms ({ttl}) must exceed presence_interval_ms ({interval}), or every entry expires between two heartbeats")]
    TtlNotAboveInterval { ttl: u64, interval: u64 },
    #[error("send_timeout_ms ({default}) exceeds send_timeout_max_ms ({max})")]
    TimeoutAboveMax { default: u64, max: u64 },
    #[error("injected_defer_ms ({defer}) is above clock_skew_ms ({skew}): a deferred INJECTED could miss the sender's bound")]
    DeferAboveSkew { defer: u64, skew: u64 },
    #[error("held_bytes_per_target ({held}) is below max_body_bytes ({body}): a largest reply could never be held")]
    HeldBelowBody { held: usize, body: usize },
    #[error("remote_cwd_roots[{index}] = {root:?} must be an absolute directory other than /, with no `..`")]
    BadCwdRoot { index: usize, root: String },
    #[error("notify rule {rule:?}: {problem}")]
    BadNotifyRule { rule: String, problem: String },
    #[error("{key} ({ttl}) exceeds max_expiry_ms ({max}): a peer with this config would refuse what this gateway stamps")]
    TtlAboveMaxExpiry {
        key: &'static str,
        ttl: u64,
        max: u64,
    },
}

impl CoreConfig {
    /// Whether `bug` is switched on. Always false outside `planted-bugs` builds.
    #[cfg(feature = "planted-bugs")]
    pub fn planted(&self, bug: crate::planted::PlantedBug) -> bool {
        self.planted == Some(bug)
    }

    /// Whether `bug` is switched on. Always false outside `planted-bugs` builds.
    #[cfg(not(feature = "planted-bugs"))]
    pub const fn planted(&self, _bug: crate::planted::PlantedBug) -> bool {
        false
    }

    /// Whether a planted bug that the simulation's oracle must catch (not the core's own
    /// invariant checks) is switched on. Always false outside `planted-bugs` builds.
    #[cfg(feature = "planted-bugs")]
    pub fn planted_for_the_oracle(&self) -> bool {
        self.planted
            .is_some_and(|b| b.breaks() != crate::planted::INTERNAL)
    }

    /// Whether a planted bug that the simulation's oracle must catch is switched on. Always
    /// false outside `planted-bugs` builds.
    #[cfg(not(feature = "planted-bugs"))]
    pub const fn planted_for_the_oracle(&self) -> bool {
        false
    }

    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms)
    }

    /// Checks every knob and compiles the patterns once.
    pub fn validate(&self) -> Result<Compiled, ConfigError> {
        self.nonzero()?;
        self.bounds()?;
        self.cwd_roots()?;
        self.notify_rules()?;
        Ok(Compiled {
            usage_limit: compile("usage_limit_patterns", &self.usage_limit_patterns)?,
            chrome: compile("chrome_patterns", &self.chrome_patterns)?,
            refine_working: compile("refine_working_patterns", &self.refine_working_patterns)?,
            refine_idle: compile("refine_idle_patterns", &self.refine_idle_patterns)?,
            fatal: crate::health::FatalPatterns::compile(&self.health)?,
        })
    }

    /// Each notification rule makes sense, and names itself once.
    fn notify_rules(&self) -> Result<(), ConfigError> {
        for (i, r) in self.notify.iter().enumerate() {
            let problem = r.problem().or_else(|| {
                self.notify[..i]
                    .iter()
                    .any(|o| o.name == r.name)
                    .then(|| "named twice".to_string())
            });
            if let Some(problem) = problem {
                return Err(ConfigError::BadNotifyRule {
                    rule: r.name.clone(),
                    problem,
                });
            }
        }
        Ok(())
    }

    /// Every count, interval and bound is above zero.
    fn nonzero(&self) -> Result<(), ConfigError> {
        for (key, v) in [
            ("poll_interval_ms", self.poll_interval_ms),
            ("pickup_grace_polls", u64::from(self.pickup_grace_polls)),
            ("stall_grace_polls", u64::from(self.stall_grace_polls)),
            (
                "readiness_grace_polls",
                u64::from(self.readiness_grace_polls),
            ),
            ("io_timeout_ms", self.io_timeout_ms),
            ("send_timeout_ms", self.send_timeout_ms),
            ("send_timeout_max_ms", self.send_timeout_max_ms),
            ("ask_timeout_ms", self.ask_timeout_ms),
            ("ticket_ttl_ms", self.ticket_ttl_ms),
            ("inbox_cap_per_target", self.inbox_cap_per_target as u64),
            ("held_bytes_per_target", self.held_bytes_per_target as u64),
            ("nudge_interval_ms", self.nudge_interval_ms),
            ("injected_timeout_ms", self.injected_timeout_ms),
            ("reply_ttl_ms", self.reply_ttl_ms),
            ("presence_interval_ms", self.presence_interval_ms),
            ("presence_ttl_ms", self.presence_ttl_ms),
            ("presence_batch_ms", self.presence_batch_ms),
            ("max_members", self.max_members as u64),
            ("seen_capacity", self.seen_capacity as u64),
            ("max_expiry_ms", self.max_expiry_ms),
            ("max_body_bytes", self.max_body_bytes as u64),
            ("prefetch", u64::from(self.prefetch)),
            ("held_prefetch", u64::from(self.held_prefetch)),
            ("roster_prefetch", u64::from(self.roster_prefetch)),
            ("inbox_max_length", self.inbox_max_length),
            ("inbox_message_ttl_ms", self.inbox_message_ttl_ms),
            ("worker_inbox_expires_ms", self.worker_inbox_expires_ms),
            ("lead_inbox_expires_ms", self.lead_inbox_expires_ms),
            ("dlq_max_length", self.dlq_max_length),
            ("held_sweep_interval_ms", self.held_sweep_interval_ms),
            ("spawn_ready_timeout_ms", self.spawn_ready_timeout_ms),
            ("start_timeout_ms", self.start_timeout_ms),
            ("start_poll_ms", self.start_poll_ms),
            ("stop_timeout_ms", self.stop_timeout_ms),
            ("health.interval_ms", self.health.interval_ms),
            ("health.stall_suspect_ms", self.health.stall_suspect_ms),
            ("health.tombstone_ms", self.health.tombstone_ms),
            ("placement.cooldown_ms", self.placement.cooldown_ms),
            ("notify_scan_ms", self.notify_scan_ms),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero { key });
            }
        }
        Ok(())
    }

    /// Bounds that depend on each other: a TTL above its interval, every TTL within the
    /// longest expiry, a held budget that fits one body, a default within its maximum.
    fn bounds(&self) -> Result<(), ConfigError> {
        if self.presence_ttl_ms <= self.presence_interval_ms {
            return Err(ConfigError::TtlNotAboveInterval {
                ttl: self.presence_ttl_ms,
                interval: self.presence_interval_ms,
            });
        }
        for (key, ttl) in [
            ("reply_ttl_ms", self.reply_ttl_ms),
            ("inbox_message_ttl_ms", self.inbox_message_ttl_ms),
            ("send_timeout_max_ms", self.send_timeout_max_ms),
            ("ask_timeout_ms", self.ask_timeout_ms),
            ("injected_timeout_ms", self.injected_timeout_ms),
            ("spawn_ready_timeout_ms", self.spawn_ready_timeout_ms),
            ("ticket_ttl_ms", self.ticket_ttl_ms),
        ] {
            if ttl > self.max_expiry_ms {
                return Err(ConfigError::TtlAboveMaxExpiry {
                    key,
                    ttl,
                    max: self.max_expiry_ms,
                });
            }
        }
        if self.held_bytes_per_target < self.max_body_bytes {
            return Err(ConfigError::HeldBelowBody {
                held: self.held_bytes_per_target,
                body: self.max_body_bytes,
            });
        }
        if self.injected_defer_ms > self.clock_skew_ms {
            return Err(ConfigError::DeferAboveSkew {
                defer: self.injected_defer_ms,
                skew: self.clock_skew_ms,
            });
        }
        if self.send_timeout_ms > self.send_timeout_max_ms {
            return Err(ConfigError::TimeoutAboveMax {
                default: self.send_timeout_ms,
                max: self.send_timeout_max_ms,
            });
        }
        Ok(())
    }

    /// Every remote cwd root is absolute, not `/`, and has no `..`.
    fn cwd_roots(&self) -> Result<(), ConfigError> {
        for (i, root) in self.remote_cwd_roots.iter().enumerate() {
            let path = std::path::Path::new(root);
            let dotted = path
                .components()
                .any(|c| c == std::path::Component::ParentDir);
            if !path.is_absolute() || dotted || path == std::path::Path::new("/") {
                return Err(ConfigError::BadCwdRoot {
                    index: i,
                    root: root.clone(),
                });
            }
        }
        Ok(())
    }
}

fn compile(key: &'static str, patterns: &[String]) -> Result<Vec<Arc<Regex>>, ConfigError> {
    patterns
        .iter()
        .enumerate()
        .map(|(index, p)| {
            crate::patterns::regex(p).map_err(|e| ConfigError::BadPattern {
                key,
                index,
                reason: e.to_string(),
            })
        })
        .collect()
}

/// The compiled form of the pattern knobs.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub usage_limit: Vec<Arc<Regex>>,
    pub chrome: Vec<Arc<Regex>>,
    pub refine_working: Vec<Arc<Regex>>,
    pub refine_idle: Vec<Arc<Regex>>,
    pub fatal: crate::health::FatalPatterns,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_match_the_java_bounds() {
        let c = CoreConfig::default();
        assert!(c.validate().is_ok());
        assert_eq!(
            (
                c.pickup_grace_polls,
                c.stall_grace_polls,
                c.readiness_grace_polls
            ),
            (8, 120, 240)
        );
        assert_eq!(c.ticket_ttl_ms, 600_000);
    }

    #[test]
    fn a_zero_bound_is_refused_by_name() {
        let c = CoreConfig {
            stall_grace_polls: 0,
            ..CoreConfig::default()
        };
        assert_eq!(
            c.validate().unwrap_err(),
            ConfigError::Zero {
                key: "stall_grace_polls"
            }
        );
    }

    #[test]
    fn an_injected_deferred_past_the_skew_allowance_is_refused() {
        let c = CoreConfig {
            injected_defer_ms: 2_001,
            ..CoreConfig::default()
        };
        assert_eq!(
            c.validate().unwrap_err(),
            ConfigError::DeferAboveSkew {
                defer: 2_001,
                skew: 2_000
            }
        );
    }

    #[test]
    fn a_broken_pattern_is_refused_with_its_index() {
        let c = CoreConfig {
            usage_limit_patterns: vec!["ok".into(), "(unclosed".into()],
            ..CoreConfig::default()
        };
        match c.validate() {
            Err(ConfigError::BadPattern { key, index, .. }) => {
                assert_eq!((key, index), ("usage_limit_patterns", 1))
            }
            other => panic!("expected BadPattern, got {other:?}"),
        }
    }
}

/// `[leads.heartbeat]` of one lead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeartbeatConfig {
    /// A lead quiet this long with work outstanding is reminded.
    pub idle_after_ms: u64,
    /// Reminders until the lead acts again.
    pub max_beats: u32,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        HeartbeatConfig {
            idle_after_ms: 10 * 60_000,
            max_beats: 3,
        }
    }
}

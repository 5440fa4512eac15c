//! The health round: every member served here is probed on its own slow cadence (its status
//! and the end of its screen, one request a round), its evidence gathered from what the
//! gateway holds, and `health::classify` decides. A change is an event (a log line, never an
//! audit record) and a presence delta; a member that goes leaves a tombstone.

use super::Gateway;
use crate::gateway::Link;
use crate::health::{Evidence, Gate, Health, Verdict};
use crate::ids::SessionId;
use crate::io::{Event, Sampled};
use crate::roster::EntityKind;
use crate::status::AgentStatus;
use crate::time::{Duration, Instant};

impl Gateway {
    /// Members served here, in gid order.
    fn members_here(&self) -> Vec<SessionId> {
        self.served()
            .filter(|(_, s)| s.kind == EntityKind::Member)
            .map(|(g, _)| g.clone())
            .collect()
    }

    pub(super) fn is_member_here(&self, gid: &SessionId) -> bool {
        self.served_here(gid)
            .is_some_and(|s| s.kind == EntityKind::Member)
    }

    pub(super) fn on_health_tick(&mut self, now: Instant) {
        self.health.expire(now);
        let targets = self.members_here();
        self.probe_health(targets);
        self.arm_health(now);
    }

    /// The probe's answer: each member classified from its sample, its screen and what is
    /// held for and against it here.
    pub(super) fn on_health_probed(&mut self, now: Instant, probes: Vec<(SessionId, Sampled)>) {
        for (gid, probe) in probes {
            if !self.is_member_here(&gid) {
                continue;
            }
            let (status, screen) = match probe {
                Sampled::Ended { why } => {
                    if self.spawns.is_reserved(&gid) {
                        // Its spawn fails saying how, then its pane's going is handled.
                        let ended = crate::io::SpawnError::Ended(why.clone());
                        self.on_spawned(now, gid.clone(), Err(ended));
                    } else {
                        self.health
                            .last_words(&gid, format!("its program ended: {why}"));
                    }
                    self.on_pane_gone(now, &gid);
                    continue;
                }
                // A member still in its spawn's readiness gate is left to the gate's own looks
                // and the event watcher, which report why it went (its exit status, its last
                // screen lines).
                Sampled::Gone if self.spawns.is_reserved(&gid) => continue,
                Sampled::Gone => {
                    self.on_pane_gone(now, &gid);
                    continue;
                }
                Sampled::Status { status, screen } => (status, screen),
            };
            // Refined as every sample is, so the row and the verdict read the same status.
            let status = crate::completion::refine(status, screen.as_deref(), &self.compiled);
            // An idle member's row shows this sample too (the injector samples the others
            // itself, and a member being adopted is judged by its own samples).
            if !self.injector.is_active(&gid) && !self.adoption.is_pending(&gid) {
                self.status_sampled(&gid, status);
            }
            if let Some(screen) = screen.as_deref() {
                self.limit_mid_turn(now, &gid, screen);
            }
            let e = self.evidence(now, &gid, status, screen.as_deref());
            let change = if self.planted_unknown_as_gone(status) {
                self.health.overrule(
                    &gid,
                    Verdict {
                        state: Health::Gone,
                        since: Some(now),
                        reasons: Vec::new(),
                    },
                );
                Some(crate::health::Change {
                    from: None,
                    to: Health::Gone,
                    reason: "planted".into(),
                })
            } else {
                self.health.judge(now, &gid, &e)
            };
            if let Some(c) = change {
                self.event(Event::HealthChanged {
                    target: gid.clone(),
                    from: c.from,
                    to: c.to,
                    reason: c.reason,
                });
                self.health_changed(&gid);
            }
        }
    }

    /// A provider's usage limit on the screen of a turn still running, at two probes in a row,
    /// ends its delegation BACKEND_EXHAUSTED and cools the profile's credential, as a limit seen
    /// at the turn's end does: an agent that retries it for ever never ends the turn. The agent is left as it is
    /// (nothing is typed into it); its pane stays busy until its turn ends or it is stopped.
    fn limit_mid_turn(&mut self, now: Instant, gid: &SessionId, screen: &str) {
        let Some(msg) = self.turns.get(gid).copied() else {
            return;
        };
        if self.rendezvous.ask_of(gid).is_some() {
            return;
        }
        let Some((baseline, typed)) = self
            .rendezvous
            .waiter(gid, msg)
            .and_then(|w| Some((w.baseline.clone()?, w.typed.clone())))
        else {
            return;
        };
        let turn = crate::completion::TurnText {
            baseline: &baseline,
            typed: typed.as_deref(),
            inferred: false,
        };
        let found = crate::completion::exhausted_mid_turn(screen, turn, &self.compiled);
        if !self.health.limit_persists(gid, msg, found.is_some()) {
            return;
        }
        if let Some(matched) = found {
            self.exhausted(now, gid, msg, matched);
        }
    }

    fn planted_unknown_as_gone(&self, status: AgentStatus) -> bool {
        status == AgentStatus::Unknown
            && self
                .cfg
                .planted(crate::planted::PlantedBug::HealthUnknownAsGone)
    }

    fn evidence(
        &mut self,
        now: Instant,
        gid: &SessionId,
        status: AgentStatus,
        screen: Option<&str>,
    ) -> Evidence {
        let gate = match self.injector.gate_state(gid) {
            Some(false) => Gate::Closed {
                waited: self.health.waited(now, gid),
                bound: Duration::from_millis(self.cfg.spawn_ready_timeout_ms),
            },
            _ => Gate::Open,
        };
        let view = self.injector.view(gid);
        let profile = self.cards.get(gid).and_then(|c| c.profile.clone());
        let (fatal_line, screen_still_for) = match screen {
            Some(s) => self.health.read_screen(now, gid, profile.as_deref(), s),
            None => (None, Duration::ZERO),
        };
        Evidence {
            gate,
            status,
            in_turn: view.in_turn,
            queued: view.queued,
            asking: self.rendezvous.ask_of(gid).is_some(),
            fatal_line,
            screen_still_for,
            boundary_lost: self.health.boundary_lost(gid),
            mute_turns: self.health.mute_streak(gid),
            stranded: self.inbox.stranded(gid),
            orphaned: self.orphaned_on(gid),
            link_up: self.link.fleet().is_none_or(|f| f.broker_up),
            reported: self.reports.trouble(gid).cloned(),
        }
    }

    /// Delegations from another host open on `gid` whose lead is in no roster any more:
    /// nobody will hear how they end. (A lead served here keeps its inbox across its pane's
    /// restarts, so its own delegations are never orphaned.)
    fn orphaned_on(&self, gid: &SessionId) -> usize {
        let Link::Fleet(f) = &self.link else { return 0 };
        self.delegations
            .iter()
            .filter(|(_, d)| &d.target == gid)
            .filter(|(_, d)| match &d.side {
                super::delegation::Side::Worker { reply_to, .. } => {
                    f.broker_up && f.roster.row(self.now, reply_to, f.broker_up).is_none()
                }
                _ => false,
            })
            .count()
    }

    /// Member `gid` is going (its pane closed, its process exited, or its spawn failed): its
    /// tombstone says which, GONE or NEVER_READY.
    pub(super) fn health_went(&mut self, now: Instant, gid: &SessionId, why: Option<&str>) {
        if !self.is_member_here(gid) && why.is_none() {
            return;
        }
        let ever_ready = self.injector.gate_state(gid) == Some(true);
        let reason = match why {
            Some(w) => w.to_string(),
            None if self.stops.stopped_lately(now, gid) => "stopped".to_string(),
            None if ever_ready => "its pane closed or its process exited".to_string(),
            None => "its pane closed before it was ready".to_string(),
        };
        let c = self.health.went(now, gid, ever_ready, reason);
        self.event(Event::HealthChanged {
            target: gid.clone(),
            from: c.from,
            to: c.to,
            reason: c.reason,
        });
    }

    /// A spawn of `gid` failed for `why`: a member whose pane is known here keeps it for the
    /// tombstone its pane's going leaves; one never reported is buried now.
    pub(super) fn health_failing(&mut self, gid: &SessionId, why: &str) {
        if self.is_member_here(gid) {
            self.health.last_words(gid, why.to_string());
        } else {
            self.health_went(self.now, gid, Some(why));
        }
    }

    /// Members by health (`fleet_member_health{state}`), tombstones included.
    pub fn health_counts(&self) -> std::collections::BTreeMap<Health, usize> {
        self.health.counts()
    }

    /// Turns ended by the completion fallback (`fleet_mute_turns_total`).
    pub fn mute_turns_total(&self) -> u64 {
        self.health.mute_turns_total
    }
}

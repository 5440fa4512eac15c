//! `LeadHeartbeatLoop` (CB-551): an opt-in reminder for a lead that has gone quiet with work
//! outstanding. A configured lead that made no call for `idle_after_ms` while delegations it
//! sent are still open (or items wait for it) gets one line typed into its pane — status-gated
//! like every message, so only when its pane is at rest — at most `max_beats` times until it
//! acts again.

use super::{Effects, Gateway, TimerKind};
pub use crate::config::HeartbeatConfig;
use crate::ids::SessionId;
use crate::io::Event;
use crate::time::{Duration, Instant};
use std::collections::BTreeMap;

/// Where one lead's heartbeat stands.
#[derive(Clone, Debug)]
struct Beat {
    /// How long quiet before a reminder, and how many until it acts again.
    every: Duration,
    max: u32,
    /// Its last call.
    active_at: Instant,
    /// Reminders since.
    sent: u32,
    /// The last reminder, while it may still be waiting to be typed.
    queued: Option<crate::ids::MsgId>,
}

/// A lead's heartbeat came due with reminders left: how long it has been quiet, and its last
/// reminder (one still waiting to be typed is not followed by another).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Quiet {
    pub(super) since: Instant,
    pub(super) queued: Option<crate::ids::MsgId>,
}

/// Every configured lead's heartbeat: its state and its timer, together.
#[derive(Debug, Default)]
pub(super) struct Heartbeats {
    beats: BTreeMap<SessionId, Beat>,
}

impl Heartbeats {
    /// Every lead `cfg` names, armed from `now`.
    pub(super) fn start(
        fx: &mut Effects,
        cfg: &BTreeMap<SessionId, HeartbeatConfig>,
        now: Instant,
    ) -> Self {
        let mut beats = BTreeMap::new();
        for (lead, h) in cfg {
            let every = Duration::from_millis(h.idle_after_ms.max(1));
            let beat = Beat {
                every,
                max: h.max_beats,
                active_at: now,
                sent: 0,
                queued: None,
            };
            fx.wake(now + every, TimerKind::Heartbeat(lead.clone()));
            beats.insert(lead.clone(), beat);
        }
        Heartbeats { beats }
    }

    /// The lead called: it is at work; its count starts again.
    pub(super) fn active(&mut self, now: Instant, lead: &SessionId) {
        if let Some(b) = self.beats.get_mut(lead) {
            b.active_at = now;
            b.sent = 0;
        }
    }

    /// `lead`'s timer fired: re-armed (from its last call if it acted since, else a full
    /// period on), and `Some` when it has been quiet a whole period with reminders left.
    pub(super) fn fire(
        &mut self,
        fx: &mut Effects,
        now: Instant,
        lead: &SessionId,
    ) -> Option<Quiet> {
        let b = self.beats.get(lead)?;
        let due = b.active_at + b.every;
        if due > now {
            fx.wake(due, TimerKind::Heartbeat(lead.clone()));
            return None;
        }
        fx.wake(now + b.every, TimerKind::Heartbeat(lead.clone()));
        (b.sent < b.max).then_some(Quiet {
            since: b.active_at,
            queued: b.queued,
        })
    }

    /// A reminder `msg` was queued for `lead`.
    pub(super) fn reminded(&mut self, lead: &SessionId, msg: crate::ids::MsgId) {
        if let Some(b) = self.beats.get_mut(lead) {
            b.sent += 1;
            b.queued = Some(msg);
        }
    }
}

impl Gateway {
    /// Delegations `lead` sent that are still open, and items waiting for it.
    fn outstanding(&self, lead: &SessionId) -> (usize, usize) {
        let open = self
            .delegations
            .iter()
            .filter(|(_, d)| d.lead.as_ref() == Some(lead) && !d.side.is_worker())
            .count();
        (open, self.push.pending(lead))
    }

    pub(super) fn on_heartbeat(&mut self, now: Instant, lead: SessionId) {
        let Some(quiet) = self.beats.fire(&mut self.fx, now, &lead) else {
            return;
        };
        let (open, waiting) = self.outstanding(&lead);
        let still_queued = quiet
            .queued
            .is_some_and(|m| self.injector.is_queued(&lead, m));
        if (open == 0 && waiting == 0) || still_queued {
            return;
        }
        let msg = self.ids.msg();
        let quiet_s = now.saturating_since(quiet.since).as_millis() / 1000;
        let text = format!(
            "[fleet] heartbeat: {open} delegation(s) you sent are still open and {waiting} \
             item(s) wait for you; nothing from you for {quiet_s} s. Call fleet_poll, or \
             fleet_list to see where things stand."
        );
        self.injector.enqueue(&lead, msg, text);
        self.stats.heartbeat_nudges_total += 1;
        self.beats.reminded(&lead, msg);
        self.event(Event::Heartbeat {
            lead: lead.clone(),
            msg,
            open,
            waiting,
        });
        self.poll_status(lead);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn lead() -> SessionId {
        SessionId::new("lead")
    }

    fn one_lead(fx: &mut Effects) -> Heartbeats {
        let cfg = BTreeMap::from([(
            lead(),
            HeartbeatConfig {
                idle_after_ms: 1_000,
                max_beats: 2,
            },
        )]);
        Heartbeats::start(fx, &cfg, at(0))
    }

    /// A quiet lead is due once a period has passed since its last call, at most `max` times
    /// until it calls again; its timer is re-armed every time.
    #[test]
    fn a_quiet_lead_is_due_at_most_max_times_until_it_calls() {
        let mut fx = Effects::default();
        let mut hb = one_lead(&mut fx);
        assert_eq!(fx.take_due(at(1_000)), Some(TimerKind::Heartbeat(lead())));
        let quiet = hb.fire(&mut fx, at(1_000), &lead());
        assert_eq!(
            quiet,
            Some(Quiet {
                since: at(0),
                queued: None
            })
        );
        let m = crate::ids::MsgId(uuid::Uuid::from_u128(1));
        hb.reminded(&lead(), m);
        assert_eq!(fx.take_due(at(2_000)), Some(TimerKind::Heartbeat(lead())));
        assert_eq!(
            hb.fire(&mut fx, at(2_000), &lead()).map(|q| q.queued),
            Some(Some(m))
        );
        hb.reminded(&lead(), m);
        assert_eq!(fx.take_due(at(3_000)), Some(TimerKind::Heartbeat(lead())));
        assert_eq!(hb.fire(&mut fx, at(3_000), &lead()), None, "max reached");
        hb.active(at(3_500), &lead());
        assert_eq!(fx.take_due(at(4_000)), Some(TimerKind::Heartbeat(lead())));
        assert_eq!(
            hb.fire(&mut fx, at(4_000), &lead()),
            None,
            "it called 0.5 s ago"
        );
        assert_eq!(fx.take_due(at(4_499)), None);
        assert_eq!(fx.take_due(at(4_500)), Some(TimerKind::Heartbeat(lead())));
        assert!(hb.fire(&mut fx, at(4_500), &lead()).is_some());
    }

    #[test]
    fn a_lead_without_a_heartbeat_is_never_due() {
        let mut fx = Effects::default();
        let mut hb = one_lead(&mut fx);
        let other = SessionId::new("other");
        assert_eq!(hb.fire(&mut fx, at(10_000), &other), None);
    }
}

//! `LeadHeartbeatLoop` (CB-551): an opt-in reminder for a lead that has gone quiet with work
//! outstanding. A configured lead that made no call for `idle_after_ms` while delegations it
//! sent are still open (or items wait for it) gets one line typed into its pane — status-gated
//! like every message, so only when its pane is at rest — at most `max_beats` times until it
//! acts again.

use super::{Gateway, TimerKind};
pub use crate::config::HeartbeatConfig;
use crate::ids::SessionId;
use crate::io::Event;
use crate::time::{Duration, Instant};

/// Where one lead's heartbeat stands.
#[derive(Clone, Debug)]
pub(super) struct Beat {
    /// Its last call.
    active_at: Instant,
    /// Reminders since.
    sent: u32,
    /// The last reminder, while it may still be waiting to be typed.
    queued: Option<crate::ids::MsgId>,
}

impl Gateway {
    fn heartbeat_of(&self, lead: &SessionId) -> Option<Duration> {
        self.cfg
            .heartbeats
            .get(lead)
            .map(|h| Duration::from_millis(h.idle_after_ms.max(1)))
    }

    /// Arms every configured lead's heartbeat from `now` (at start).
    pub(super) fn arm_heartbeats(&mut self, now: Instant) {
        let leads: Vec<SessionId> = self.cfg.heartbeats.keys().cloned().collect();
        for lead in leads {
            if self.beats.contains_key(&lead) {
                continue;
            }
            self.beats.insert(
                lead.clone(),
                Beat {
                    active_at: now,
                    sent: 0,
                    queued: None,
                },
            );
            if let Some(idle) = self.heartbeat_of(&lead) {
                self.fx.wake(now + idle, TimerKind::Heartbeat(lead));
            }
        }
    }

    /// The lead called: it is at work; its count starts again.
    pub(super) fn lead_active(&mut self, now: Instant, lead: &SessionId) {
        if let Some(b) = self.beats.get_mut(lead) {
            b.active_at = now;
            b.sent = 0;
        }
    }

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
        let (Some(idle), Some(beat)) = (self.heartbeat_of(&lead), self.beats.get(&lead).cloned())
        else {
            return;
        };
        let due = beat.active_at + idle;
        if due > now {
            // It acted since this timer was armed: wait from then.
            self.fx.wake(due, TimerKind::Heartbeat(lead));
            return;
        }
        let max = self.cfg.heartbeats.get(&lead).map_or(0, |h| h.max_beats);
        let (open, waiting) = self.outstanding(&lead);
        let still_queued = beat
            .queued
            .is_some_and(|m| self.injector.is_queued(&lead, m));
        if (open > 0 || waiting > 0) && beat.sent < max && !still_queued {
            let msg = self.ids.msg();
            let quiet_s = now.saturating_since(beat.active_at).as_millis() / 1000;
            let text = format!(
                "[fleet] heartbeat: {open} delegation(s) you sent are still open and {waiting} \
                 item(s) wait for you; nothing from you for {quiet_s} s. Call fleet_poll, or \
                 fleet_list to see where things stand."
            );
            self.injector.enqueue(&lead, msg, text);
            self.stats.heartbeat_nudges_total += 1;
            if let Some(b) = self.beats.get_mut(&lead) {
                b.sent += 1;
                b.queued = Some(msg);
            }
            self.event(Event::Heartbeat {
                lead: lead.clone(),
                msg,
                open,
                waiting,
            });
            self.poll_status(lead.clone());
        }
        self.fx.wake(now + idle, TimerKind::Heartbeat(lead));
    }
}

//! The restart rule (CB-308 §7.8), where the simulation runs it too: the members herdr lists at
//! start are gated, sampled each poll, and adopted, closed or left undecided as
//! `crate::adoption` decides within the readiness bound (`spawn_ready_timeout_ms`). The shell
//! only lists the panes and carries out the samples and the closes.

use super::entities::Announce;
use super::Gateway;
use crate::adoption::AdoptVerdict;
use crate::ids::SessionId;
use crate::io::{Event, ListedMember};
use crate::roster::EntityKind;
use crate::start_gate::{Look, StartGate};
use crate::status::AgentStatus;
use crate::time::{Duration, Instant};

impl Gateway {
    /// Every member pane herdr lists at start: each not already live here is gated and its
    /// adoption begins.
    pub(super) fn on_members_listed(&mut self, now: Instant, members: Vec<ListedMember>) {
        let deadline = now + Duration::from_millis(self.cfg.spawn_ready_timeout_ms);
        let planted = self
            .cfg
            .planted(crate::planted::PlantedBug::StartingAdoptedBySample);
        let bounds = self.start_bounds();
        for ListedMember { gid, starting } in members {
            let starting = starting.filter(|_| !planted);
            if self.injector.gate_state(&gid) == Some(true) || self.adoption.is_pending(&gid) {
                continue;
            }
            self.injector.gate(&gid);
            self.local_entity(&gid, EntityKind::Member, Announce::Later);
            let gate = starting.map(|r| StartGate::launched(now, r, bounds));
            self.begin_adoption(&gid, gate, deadline);
            if self.adoption.is_looking(&gid) {
                self.look_at_start(gid.clone());
            }
            self.poll_status(gid);
        }
    }

    /// herdr's raw status for a member being adopted: a live agent is adopted at once.
    pub(super) fn adoption_sampled(&mut self, target: &SessionId, status: AgentStatus) {
        if self.adoption.sampled(target, status) == Some(AdoptVerdict::Adopted) {
            self.event(Event::Rebuilt {
                gid: target.clone(),
                verdict: AdoptVerdict::Adopted,
            });
            self.gate_passed(target);
        }
    }

    /// A look at a member listed as still starting, judged by its gate: adopted when it
    /// passes, closed (reaped) when it fails, looked at again while it starts. False when
    /// no adoption looks at `gid`.
    pub(super) fn adoption_looked(
        &mut self,
        now: Instant,
        gid: &SessionId,
        look: Result<crate::io::Sampled, crate::io::PaneError>,
    ) -> bool {
        let Some(verdict) = self.adoption.looked(gid, now, look) else {
            return false;
        };
        match verdict {
            Look::Again(at) => self.adoption_looks_again(gid.clone(), at),
            Look::Open => self.gate_passed(gid),
            Look::Failed(why) => {
                self.adoption.settled(gid);
                self.event(Event::Rebuilt {
                    gid: gid.clone(),
                    verdict: AdoptVerdict::Reaped,
                });
                self.health_failing(gid, &why);
                self.close_pane(gid.clone());
            }
            Look::Prompted | Look::Ignored => {}
        }
        true
    }

    /// The adoption bound of `gid` passed: closed on herdr's word, or left undecided.
    pub(super) fn on_adoption_due(&mut self, now: Instant, gid: SessionId) {
        let Some(verdict) = self.adoption.due(&gid, now) else {
            return;
        };
        self.event(Event::Rebuilt {
            gid: gid.clone(),
            verdict,
        });
        if verdict == AdoptVerdict::Reaped {
            // The driver closes it and reports `PaneGone`, which ends what is open on it.
            self.close_pane(gid);
        }
    }
}

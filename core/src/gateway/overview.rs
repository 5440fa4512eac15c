//! `Request::Overview`: the gateway's in-flight state as an operator reads it — hosts and
//! their links, open delegations with their phase, held results — and the host's counts its
//! presence snapshot carries, so every gateway can show every host's.

use super::delegation::{Delegation, RemoteBrief, Side};
use super::Gateway;
use crate::authz::{self, Action, Principal, Role};
use crate::ids::{HostId, TicketId};
use crate::io::{DelegationView, FlowPhase, Half, HeldView, HostView, Link, Overview};
use crate::roster::HostOps;
use crate::time::Instant;

/// The actions a dashboard may offer; each is still authorised when it is taken.
const OFFERED: [Action; 4] = [Action::Spawn, Action::Stop, Action::Send, Action::Drain];

impl Gateway {
    /// This host's counts, as its snapshot announces them.
    pub(super) fn host_ops(&self) -> HostOps {
        HostOps {
            delegations: self.delegations.len() as u64,
            held: self.inbox.total() as u64,
            dead_letters: self.stats.dead_letters_total,
            broker_drops: self.stats.broker_drops_total,
            waiting: self.waiting_by_lead(),
        }
    }

    pub(super) fn overview(&self, now: Instant, caller: &Principal) -> Overview {
        let may: Vec<Action> = OFFERED
            .into_iter()
            .filter(|a| authz::permits(caller, *a, None).allowed)
            .collect();
        let answers = may.contains(&Action::Send);
        let own = self.own_host();
        let hosts = self.host_views(now, &own);
        let mut delegations: Vec<DelegationView> = self
            .delegations
            .iter()
            .map(|(ticket, d)| self.delegation_view(now, caller, answers, ticket, d))
            .collect();
        let mine = |lead: &Option<crate::ids::SessionId>| {
            caller.role == Role::Primary || lead.is_none() || *lead == caller.session
        };
        delegations.extend(self.tickets.iter().filter_map(|(ticket, t)| {
            let ended = t.ended.as_ref()?;
            mine(&t.lead).then(|| DelegationView {
                ticket: *ticket,
                target: t.target.clone(),
                lead: t.lead.clone(),
                half: Half::Local,
                phase: FlowPhase::Done,
                msg: None,
                trace: None,
                question: None,
                turn_id: None,
                outcome: Some(ended.outcome),
                ends_in_ms: None,
            })
        }));
        let held = self.held_views(now);
        Overview {
            host: own,
            hosts,
            delegations,
            held,
            may,
            caller: caller.clone(),
        }
    }

    /// This host first, with its own link, then every host heard from (cross-host).
    fn host_views(&self, now: Instant, own: &HostId) -> Vec<HostView> {
        let mut hosts = vec![HostView {
            host: own.clone(),
            link: match self.link.fleet() {
                None => Link::None,
                Some(f) if f.broker_up => Link::Up,
                Some(_) => Link::Down,
            },
            heard_ms_ago: None,
            ops: Some(self.host_ops()),
        }];
        if let Some(f) = self.link.fleet() {
            let link = if f.broker_up { Link::Up } else { Link::Unknown };
            hosts.extend(
                f.roster
                    .hosts_heard(now, own)
                    .into_iter()
                    .map(|(host, ago, ops)| HostView {
                        host,
                        link,
                        heard_ms_ago: Some(ago.as_millis() as u64),
                        ops,
                    }),
            );
        }
        hosts
    }

    /// One open delegation as `caller` may see it: the question and its turn id only for the
    /// caller who may answer.
    fn delegation_view(
        &self,
        now: Instant,
        caller: &Principal,
        answers: bool,
        ticket: &TicketId,
        d: &Delegation,
    ) -> DelegationView {
        let mut v = DelegationView {
            ticket: *ticket,
            target: d.target.clone(),
            lead: match &d.side {
                Side::Worker { reply_to, .. } => Some(reply_to.clone()),
                _ => d.lead.clone(),
            },
            half: match d.side {
                Side::Local(_) => Half::Local,
                Side::Sender { .. } => Half::Sender,
                Side::Worker { .. } => Half::Worker,
            },
            phase: self.flow_phase(d),
            msg: Some(d.msg),
            trace: d.trace,
            question: None,
            turn_id: None,
            outcome: None,
            ends_in_ms: Some(d.deadline.saturating_since(now).as_millis() as u64),
        };
        // The question, and the turn id that answers it, only for the caller who may
        // answer: its delegation's own lead (or any lead for one that has none); a
        // question asked of a lead on another host is that lead's alone.
        if let Some(p) = d.paused() {
            let theirs = !d.side.is_worker() && (d.lead.is_none() || d.lead == caller.session);
            if answers && theirs {
                v.turn_id = Some(p.turn);
                v.question = Some(p.question.clone());
            }
        }
        v
    }

    /// Held replies per member: count, bytes and the oldest's age, never their text.
    fn held_views(&self, now: Instant) -> Vec<HeldView> {
        self.inbox
            .iter()
            .filter_map(|(target, q)| {
                let oldest = q.front()?;
                Some(HeldView {
                    target: target.clone(),
                    lead: oldest.lead.clone(),
                    count: q.len(),
                    bytes: q.iter().map(|r| r.content.len()).sum(),
                    oldest_ms: now.saturating_since(oldest.at).as_millis() as u64,
                })
            })
            .collect()
    }

    /// How far `d` has gone: asking beats everything; a local brief is typed once it is the
    /// member's current turn; a cross-host one once its worker's gateway said INJECTED.
    fn flow_phase(&self, d: &Delegation) -> FlowPhase {
        if d.paused().is_some() {
            return FlowPhase::Asking;
        }
        match d.side {
            Side::Sender {
                brief: RemoteBrief::Sent,
                ..
            } => FlowPhase::Queued,
            Side::Sender { .. } => FlowPhase::Typed,
            Side::Local(_) | Side::Worker { .. } => {
                if self.injector.is_queued(&d.target, d.msg) {
                    FlowPhase::Queued
                } else {
                    FlowPhase::Typed
                }
            }
        }
    }
}

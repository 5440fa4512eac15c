//! The hub lists what waits on a person (`crate::needs`) from the state its sub-machines
//! keep, and runs the notification rules over that list on their own round.

use super::{Gateway, Link, Once};
use crate::authz::{Principal, Role};
use crate::ids::{SessionId, TurnId};
use crate::io::Output;
use crate::needs::{Attention, Elsewhere, Need, NeedKind, Waiting};
use crate::time::{Duration, Instant};

impl Gateway {
    /// Everything that waits on a person here now, oldest first (then by id), with its words.
    pub fn needs(&self) -> Vec<Need> {
        self.needs_with(Words::With)
    }

    /// The needs, with their words (a question's, a result's, a member's screen line) only
    /// when something will read them: a held result can be megabytes, and a count needs none.
    fn needs_with(&self, words: Words) -> Vec<Need> {
        let mut out = Vec::new();
        self.question_needs(&mut out);
        match &self.result_needs {
            Some(kept) if words == Words::Without && kept.is_current(self) => {
                out.extend(kept.needs.iter().cloned());
            }
            _ => self.result_needs(&mut out, words),
        }
        self.member_needs(&mut out);
        self.host_needs(&mut out);
        if words == Words::Without {
            for n in &mut out {
                n.text = None;
            }
        }
        out.sort_by(|a, b| (a.since, &a.id).cmp(&(b.since, &b.id)));
        out
    }

    fn need(&self, id: String, kind: NeedKind, since: Instant, summary: String) -> Need {
        Need {
            id,
            kind,
            host: self.host.clone(),
            waits_on: None,
            member: None,
            turn_id: None,
            since,
            summary,
            text: None,
        }
    }

    fn question_need(
        &self,
        turn: TurnId,
        member: &SessionId,
        lead: Option<&SessionId>,
        since: Instant,
        text: &str,
    ) -> Need {
        let to = lead.map_or("any lead".to_string(), |l| format!("lead {l}"));
        Need {
            waits_on: lead.cloned(),
            member: Some(member.clone()),
            turn_id: Some(turn),
            text: Some(text.to_string()),
            ..self.need(
                format!("question:{turn}"),
                NeedKind::Question,
                since,
                format!("member {member} asks {to} a question (turn {turn})"),
            )
        }
    }

    /// Members' open questions for a lead here: a member served here asking (unless its
    /// delegation came from another host, whose gateway tells its lead), and a remote member
    /// asking through one of our waiters.
    fn question_needs(&self, out: &mut Vec<Need>) {
        for (turn, ask) in self.rendezvous.asks() {
            let remote_lead = self
                .delegations
                .paused_on(*turn)
                .and_then(|t| self.delegations.get(&t))
                .is_some_and(|d| d.side.is_worker());
            if !remote_lead {
                let q = self.question_need(
                    *turn,
                    &ask.session,
                    ask.owner.as_ref(),
                    ask.at,
                    &ask.question,
                );
                out.push(q);
            }
        }
        if let Some(f) = self.link.fleet() {
            // One past its member's wait is gone, though the presence round forgets it later.
            for (turn, ask) in f.waiters().asks().filter(|(_, a)| a.until > self.now) {
                let q = self.question_need(
                    *turn,
                    &ask.worker,
                    ask.lead.as_ref(),
                    ask.at,
                    &ask.question,
                );
                out.push(q);
            }
        }
    }

    /// Results held for a lead that has not collected them.
    fn result_needs(&self, out: &mut Vec<Need>, words: Words) {
        for (member, held) in self.inbox.iter() {
            for r in held {
                let summary = match &r.lead {
                    Some(l) => {
                        format!("a result of member {member} waits for lead {l} to collect it")
                    }
                    None => format!("a result of member {member} waits for no lead to collect it"),
                };
                out.push(Need {
                    waits_on: r.lead.clone(),
                    member: Some(member.clone()),
                    text: (words == Words::With).then(|| r.content.clone()),
                    ..self.need(
                        format!("result_stranded:{}", r.id),
                        NeedKind::ResultStranded,
                        r.at,
                        summary,
                    )
                });
            }
        }
    }

    /// Members whose health says a person must see to them; they wait on the lead that
    /// spawned them, if it is known.
    fn member_needs(&self, out: &mut Vec<Need>) {
        for (gid, state, since, reason) in self.health.states() {
            let Some(kind) = NeedKind::of_health(state) else {
                continue;
            };
            let owner = self.cards.get(gid).and_then(|c| c.owner.clone());
            // The reason may quote the member's screen: words, never in the summary.
            out.push(Need {
                waits_on: owner,
                member: Some(gid.clone()),
                text: (!reason.is_empty()).then(|| reason.to_string()),
                ..self.need(
                    format!("{kind}:{gid}"),
                    kind,
                    since.unwrap_or(self.now),
                    format!("member {gid} is {state}"),
                )
            });
        }
    }

    /// Credentials cooling down and the broker link: whoever runs this host.
    fn host_needs(&self, out: &mut Vec<Need>) {
        let unix = self.unix_now();
        for (credential, c) in self.placement.quarantine.cooling(unix) {
            // Since its first refusal, on this gateway's clock.
            let since = self
                .now
                .saturating_sub(Duration::from_millis(unix.saturating_sub(c.from)));
            out.push(self.need(
                format!("credential_cooling:{credential}"),
                NeedKind::CredentialCooling,
                since,
                format!(
                    "credential {credential} is cooling down after a usage limit, until Unix ms {}",
                    c.until
                ),
            ));
        }
        if let Link::Fleet(f) = &self.link {
            if !f.broker_up {
                out.push(self.need(
                    format!("broker_down:{}", self.host),
                    NeedKind::BrokerDown,
                    f.link_since,
                    format!(
                        "host {}'s broker link is down: nothing reaches other hosts",
                        self.host
                    ),
                ));
            }
        }
    }

    /// How many needs wait on each lead here (what this host's presence counts).
    pub(super) fn waiting_by_lead(&self) -> std::collections::BTreeMap<SessionId, u64> {
        let mut by = std::collections::BTreeMap::new();
        for n in self.needs_with(Words::Without) {
            if let Some(l) = n.waits_on {
                *by.entry(l).or_default() += 1;
            }
        }
        by
    }

    /// `Request::Attention`: what waits on `caller` here, oldest first, and the counts other
    /// hosts announce for it. A lead sees what waits on it and the host-wide needs; a member
    /// only what is about itself, without words.
    pub(super) fn attention(&self, now: Instant, caller: &Principal) -> Attention {
        let me = caller.session.as_ref();
        let member = caller.role == Role::Worker;
        let needs = self
            .needs()
            .into_iter()
            .filter(|n| match member {
                true => n.member.as_ref() == me,
                false => n.waits_on(me),
            })
            .map(|mut need| {
                // The words go only to the one they wait on.
                if member || need.waits_on.as_ref() != me {
                    need.text = None;
                }
                Waiting {
                    waiting_ms: now.saturating_since(need.since).as_millis() as u64,
                    need,
                }
            })
            .collect();
        let elsewhere = match (me, self.link.fleet()) {
            (Some(me), Some(f)) if !member => f
                .roster
                .hosts_heard(now, &self.host)
                .into_iter()
                .filter_map(|(host, _, ops)| {
                    let waiting = *ops?.waiting.get(me)?;
                    (waiting > 0).then_some(Elsewhere { host, waiting })
                })
                .collect(),
            _ => Vec::new(),
        };
        Attention {
            host: self.host.clone(),
            needs,
            elsewhere,
        }
    }

    /// Keeps the notification rules' round going while there are rules.
    pub(super) fn arm_notify(&mut self, now: Instant) {
        if self.notifier.has_rules() && !self.fx.is_set(Once::Notify) {
            let at = now + Duration::from_millis(self.cfg.notify_scan_ms);
            self.fx.set(Once::Notify, at);
        }
    }

    /// Lists the held results' needs again if the inbox changed since they were listed.
    fn keep_result_needs(&mut self) {
        if self
            .result_needs
            .as_ref()
            .is_some_and(|k| k.is_current(self))
        {
            return;
        }
        let mut needs = Vec::new();
        self.result_needs(&mut needs, Words::Without);
        self.result_needs = Some(ResultNeeds {
            inbox: self.inbox.revision(),
            host: self.host.clone(),
            needs,
        });
    }

    /// The rules' round: every notice due goes out for its sink.
    pub(super) fn on_notify_scan(&mut self, now: Instant) {
        self.keep_result_needs();
        let words = match self.notifier.wants_words() {
            true => Words::With,
            false => Words::Without,
        };
        let needs = self.needs_with(words);
        let (at, unix) = (self.now, self.unix_now());
        let unix_of = |i: Instant| {
            unix.saturating_sub(
                u64::try_from(at.saturating_since(i).as_millis()).unwrap_or(u64::MAX),
            )
        };
        for notice in self.notifier.scan(now, &needs, unix_of) {
            self.fx.emit(Output::Notify(notice));
        }
    }
}

/// The held results' needs, without words, as listed at one revision of the inbox.
#[derive(Debug)]
pub(super) struct ResultNeeds {
    inbox: crate::revision::Revision,
    host: crate::ids::HostId,
    needs: Vec<Need>,
}

impl ResultNeeds {
    fn is_current(&self, gw: &Gateway) -> bool {
        self.inbox == gw.inbox.revision() && self.host == gw.host
    }
}

/// Whether a list of needs carries their words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Words {
    With,
    Without,
}

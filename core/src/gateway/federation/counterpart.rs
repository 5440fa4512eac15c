//! Who may answer what (DESIGN §8): a message that answers a delegation — REPLY, FAILED,
//! ABANDONED, ASK, INJECTED, TOO_LATE naming it by `re`, NO_WAITER naming a turn, a spawn's
//! FAILED — is believed only from that delegation's real counterpart: the member the brief
//! was sent to (admission has already checked that signed presence binds it to the signing
//! host), or for a report about it (a `_gateway` FAILED, which no honest gateway sends now),
//! that host's own gateway or this one; for a spawn or a stop, the gateway of the host it was
//! sent to;
//! for NO_WAITER, the lead the question was asked of. `re` alone proves nothing: any peer that
//! learns a msgId could otherwise end or answer someone else's delegation.

use crate::envelope::{Envelope, Kind};
use crate::gateway::delegation::Side;
use crate::gateway::Gateway;
use crate::gateway::Link;
use crate::roster::GATEWAY_GID;

impl Gateway {
    /// `Err` with why when `env` answers an open delegation (or spawn, or ask) it is not the
    /// counterpart of; `Ok` when it is, or when it names nothing open here (which each
    /// handler treats as it always has).
    pub(super) fn check_counterpart(&self, env: &Envelope) -> Result<(), String> {
        let Link::Fleet(f) = &self.link else {
            return Ok(());
        };
        if self
            .cfg
            .planted(crate::planted::PlantedBug::ReplyWithoutCounterpart)
        {
            return Ok(());
        }
        let from_gateway = env.from.as_str() == GATEWAY_GID;
        match env.kind() {
            Kind::Reply
            | Kind::Failed
            | Kind::Abandoned
            | Kind::Ask
            | Kind::Injected
            | Kind::TooLate => {
                let Some(re) = env.re() else { return Ok(()) };
                if let Some(d) = f
                    .waiters
                    .ticket_of(re)
                    .and_then(|t| self.delegations.get(&t))
                {
                    let member = env.from == d.target;
                    // A `_gateway` FAILED about a delegation is believed from the member's host
                    // or this one. No honest gateway sends one since dead letters stopped being
                    // reported (only the planted `dlq-trusts-broker-headers` does): it stays a
                    // counterpart rule, not a channel.
                    let its_gateway = from_gateway
                        && env.kind() == Kind::Failed
                        && (f.roster.host_of(self.now, &d.target).as_ref() == Some(&env.signer)
                            || env.signer == *f.host());
                    if member || its_gateway {
                        return Ok(());
                    }
                    return Err(format!(
                        "{} {} from {} on {} answers {re}, which went to {}",
                        env.kind(),
                        env.msg_id,
                        env.from,
                        env.signer,
                        d.target
                    ));
                }
                // A task restored running after a restart has no delegation here: its result is
                // believed from its assignee only.
                if let Some(t) = self
                    .tasks
                    .running_on(re)
                    .and_then(|(lead, id)| self.tasks.task(&lead, id))
                {
                    if env.from == t.assignee {
                        return Ok(());
                    }
                    return Err(format!(
                        "{} {} from {} on {} answers task {}, which went to {}",
                        env.kind(),
                        env.msg_id,
                        env.from,
                        env.signer,
                        t.id,
                        t.assignee
                    ));
                }
                for (what, host) in [("spawn", self.spawn_host(re)), ("stop", self.stop_host(re))] {
                    let Some(host) = host.filter(|_| env.kind() == Kind::Failed) else {
                        continue;
                    };
                    if from_gateway && env.signer == host {
                        return Ok(());
                    }
                    return Err(format!(
                        "FAILED {} from {} on {} answers {what} {re}, which went to {host}",
                        env.msg_id, env.from, env.signer
                    ));
                }
                Ok(())
            }
            Kind::NoWaiter => {
                let Some(turn) = env.turn_id() else {
                    return Ok(());
                };
                let asked_of = self
                    .delegations
                    .paused_on(turn)
                    .and_then(|t| self.delegations.get(&t))
                    .and_then(|d| match &d.side {
                        Side::Worker { reply_to, .. } => Some(reply_to.clone()),
                        _ => None,
                    });
                match asked_of {
                    Some(lead) if lead != env.from => Err(format!(
                        "NO_WAITER {} from {} answers turn {turn}, which was asked of {lead}",
                        env.msg_id, env.from
                    )),
                    _ => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }
}

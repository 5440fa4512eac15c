//! What waits on a person: a member's question for its lead, a result nobody collected, a
//! member that cannot go on by itself, a credential cooling down, the broker link down. The
//! gateway lists them from the state it already keeps ([`Need`], oldest first); the notifier
//! (`notify`) and the "needs you" view read the same list.

use crate::health::Health;
use crate::ids::{HostId, SessionId, TurnId};
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Which kind of moment a need is: the names `[[notify]] on = [...]` and the view use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NeedKind {
    /// A member asked its lead mid-turn (`fleet_ask`, or a delegation paused on QUESTION).
    Question,
    /// A result held for a lead that has not collected it.
    ResultStranded,
    /// A member BLOCKED on something nobody here can see (health BLOCKED_AMBIGUOUS).
    Blocked,
    /// A member that never passed its readiness gate (health NEVER_READY).
    NeverReady,
    /// A member working with a screen that stopped changing (health STALL_SUSPECTED).
    StallSuspected,
    /// A member whose screen shows a fatal line (health ERROR_ON_SCREEN).
    ErrorOnScreen,
    /// A member whose agent says it waits on a person (health WAITING_ON_PERSON).
    WaitingOnPerson,
    /// A member whose agent says its provider refused on a limit (health USAGE_LIMITED).
    UsageLimited,
    /// A member whose agent says its provider failed (health PROVIDER_ERROR).
    ProviderError,
    /// A credential whose backend refused on a usage limit, skipped by placement until then.
    CredentialCooling,
    /// This gateway's broker link is down: nothing of it reaches other hosts.
    BrokerDown,
}

impl NeedKind {
    pub const ALL: [NeedKind; 11] = [
        NeedKind::Question,
        NeedKind::ResultStranded,
        NeedKind::Blocked,
        NeedKind::NeverReady,
        NeedKind::StallSuspected,
        NeedKind::ErrorOnScreen,
        NeedKind::WaitingOnPerson,
        NeedKind::UsageLimited,
        NeedKind::ProviderError,
        NeedKind::CredentialCooling,
        NeedKind::BrokerDown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NeedKind::Question => "question",
            NeedKind::ResultStranded => "result_stranded",
            NeedKind::Blocked => "blocked",
            NeedKind::NeverReady => "never_ready",
            NeedKind::StallSuspected => "stall_suspected",
            NeedKind::ErrorOnScreen => "error_on_screen",
            NeedKind::WaitingOnPerson => "waiting_on_person",
            NeedKind::UsageLimited => "usage_limited",
            NeedKind::ProviderError => "provider_error",
            NeedKind::CredentialCooling => "credential_cooling",
            NeedKind::BrokerDown => "broker_down",
        }
    }

    /// The need a member's health state is, if it is one a person must see to.
    pub fn of_health(h: Health) -> Option<NeedKind> {
        match h {
            Health::BlockedAmbiguous => Some(NeedKind::Blocked),
            Health::NeverReady => Some(NeedKind::NeverReady),
            Health::StallSuspected => Some(NeedKind::StallSuspected),
            Health::ErrorOnScreen => Some(NeedKind::ErrorOnScreen),
            Health::WaitingOnPerson => Some(NeedKind::WaitingOnPerson),
            Health::UsageLimited => Some(NeedKind::UsageLimited),
            Health::ProviderError => Some(NeedKind::ProviderError),
            _ => None,
        }
    }
}

impl fmt::Display for NeedKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing that waits on a person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Need {
    /// Stable while the condition holds, and never reused for another (`question:<turn>`,
    /// `result_stranded:<reply>`, `blocked:<gid>`, `credential_cooling:<credential>`,
    /// `broker_down:<host>`): what deduplicates notifications and names a resolve.
    pub id: String,
    pub kind: NeedKind,
    pub host: HostId,
    /// The lead it waits on; none: whoever runs this host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits_on: Option<SessionId>,
    /// The member it is about, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<SessionId>,
    /// The question to answer (a lead answers with `fleet_send` naming it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    /// Since when it has waited, on this gateway's clock (the view shows it as an age).
    #[serde(skip)]
    pub since: Instant,
    /// One line for a person, built from ids and states only: never a brief's, reply's or
    /// question's words.
    pub summary: String,
    /// The words themselves (the question, the result), for the view and for a rule that
    /// allows them (`include_text`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// A need as the "needs you" view shows it: with how long it has waited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    #[serde(flatten)]
    pub need: Need,
    pub waiting_ms: u64,
}

/// Needs waiting on the caller at another host, as that host's presence counts them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Elsewhere {
    pub host: HostId,
    pub waiting: u64,
}

/// `GET /attention`, `fleet_attention`: what waits on the caller, oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attention {
    pub host: HostId,
    pub needs: Vec<Waiting>,
    /// Other hosts where needs wait on the caller (a lead's members' health there, results
    /// held there): counts only, from their presence, at most a presence round old.
    pub elsewhere: Vec<Elsewhere>,
}

impl Need {
    /// Whether `caller` is the one it waits on: its own lead, or anyone for a host-wide need.
    pub fn waits_on(&self, caller: Option<&SessionId>) -> bool {
        self.waits_on.is_none() || self.waits_on.as_ref() == caller
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_states_a_person_must_see_to_are_needs() {
        let needs: Vec<NeedKind> = Health::ALL
            .iter()
            .filter_map(|h| NeedKind::of_health(*h))
            .collect();
        assert_eq!(
            needs,
            [
                NeedKind::NeverReady,
                NeedKind::WaitingOnPerson,
                NeedKind::UsageLimited,
                NeedKind::ProviderError,
                NeedKind::ErrorOnScreen,
                NeedKind::StallSuspected,
                NeedKind::Blocked
            ]
        );
    }

    #[test]
    fn kinds_read_and_print_by_their_config_names() {
        for k in NeedKind::ALL {
            let json = serde_json::to_string(&k).expect("a kind serialises");
            assert_eq!(json, format!("\"{}\"", k.as_str()));
            let back: NeedKind = serde_json::from_str(&json).expect("and reads back");
            assert_eq!(back, k);
        }
    }
}

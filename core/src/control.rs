//! The bodies of `fleet.control` traffic beyond SPAWN's (`spawn_spec`): a STOP's request, and
//! the typed refusal a target gateway answers a control message with (as a FAILED naming it),
//! so the requester's call can say `not_found` or `not_allowed` rather than wait out a bound.

use crate::ids::SessionId;
use serde::{Deserialize, Serialize};

/// The body of a STOP: which member to stop. The requester names its own lead in `from`; the
/// target host is the routing key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopRequest {
    pub target: SessionId,
}

/// Why a target gateway did not do what a control message asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalCode {
    /// The member is not served by that host (never was, or left long ago).
    NotFound,
    /// The requesting gateway is not on the target's control allowlist.
    NotAllowed,
    /// The request names something control cannot act on (a lead, a malformed body).
    Invalid,
    /// An argument the target's own rules refuse: a remote spawn's `cwd` outside the roots
    /// its config allows (`remote_cwd_roots`).
    InvalidArgument,
}

/// The body of a FAILED answering a SPAWN or STOP the target refused. A 1.1 gateway answers a
/// failed SPAWN with plain text; `parse` reads that as `Invalid` with the text as its reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub code: RefusalCode,
    pub reason: String,
}

impl Refusal {
    pub fn new(code: RefusalCode, reason: impl Into<String>) -> Refusal {
        Refusal {
            code,
            reason: reason.into(),
        }
    }

    pub fn to_body(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// A refusal from its body, or the body's text as an `Invalid` one (any peer may send any
    /// bytes: nothing here fails).
    pub fn parse(body: &[u8]) -> Refusal {
        serde_json::from_slice(body).unwrap_or_else(|_| Refusal {
            code: RefusalCode::Invalid,
            reason: String::from_utf8_lossy(body).into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_reads_back_and_plain_text_is_an_invalid_one() {
        let r = Refusal::new(RefusalCode::NotAllowed, "a may not send control to b");
        assert_eq!(Refusal::parse(&r.to_body()), r);
        let old = Refusal::parse(b"host b has no profile \"x\"");
        assert_eq!(old.code, RefusalCode::Invalid);
        assert!(old.reason.contains("no profile"));
    }
}

//! Who is calling, from the connection alone (ch. 9 `CallerResolver`): a member's per-member
//! token, a lead's configured token, or — opt-in — loopback trust. Never a tool argument.

use crate::herdr::launch;
use fleet_core::{Principal, SessionId};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;

/// A lead this gateway serves.
#[derive(Clone, Debug)]
pub struct Lead {
    pub principal: Principal,
    /// SHA-256 of its token: the token itself is not kept in memory longer than loading.
    token_hash: Option<[u8; 32]>,
}

impl Lead {
    pub fn new(principal: Principal, token: Option<&str>) -> Self {
        Lead {
            principal,
            token_hash: token.map(hash),
        }
    }
}

fn hash(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// Equal in constant time (both are fixed-size digests).
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A resolved caller, and whether it is a member whose connection is its readiness signal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub principal: Principal,
    /// Set when a member authenticated: the gateway hears `MemberConnected` for it.
    pub member: Option<SessionId>,
    /// A credential was presented and refused (counted in `fleet_auth_failures_total`).
    pub refused: bool,
    /// The refused credential was a genuine member token whose spawn is over (its member was
    /// stopped or its pane is gone): counted apart, as `revoked`.
    pub revoked: bool,
}

/// The resolver: built once from the config.
#[derive(Clone, Debug)]
pub struct Identity {
    leads: Vec<Lead>,
    member_key: [u8; 32],
    /// The members' live spawn nonces: a token is honoured only while its spawn lives.
    tokens: launch::MemberTokens,
    /// The lead a credential-less loopback caller is served as, if enabled.
    loopback: Option<Principal>,
}

impl Identity {
    pub fn new(
        leads: Vec<Lead>,
        member_key: [u8; 32],
        tokens: launch::MemberTokens,
        loopback: Option<Principal>,
    ) -> Self {
        Identity {
            leads,
            member_key,
            tokens,
            loopback,
        }
    }

    pub fn leads(&self) -> &[Lead] {
        &self.leads
    }

    /// Resolves `authorization` (the header's value) from `peer`.
    pub fn resolve(&self, authorization: Option<&str>, peer: Option<SocketAddr>) -> Caller {
        let anonymous = |refused| Caller {
            principal: Principal::anonymous(),
            member: None,
            refused,
            revoked: false,
        };
        let Some(auth) = authorization else {
            return match (&self.loopback, peer) {
                (Some(p), Some(addr)) if addr.ip().is_loopback() => Caller {
                    principal: p.clone(),
                    member: None,
                    refused: false,
                    revoked: false,
                },
                _ => anonymous(false),
            };
        };
        let Some(token) = auth
            .strip_prefix("Bearer ")
            .or_else(|| auth.strip_prefix("bearer "))
        else {
            return anonymous(true);
        };
        let token = token.trim();
        let presented = hash(token);
        for lead in &self.leads {
            if lead.token_hash.is_some_and(|h| same(&h, &presented)) {
                return Caller {
                    principal: lead.principal.clone(),
                    member: None,
                    refused: false,
                    revoked: false,
                };
            }
        }
        let mut parts = token.splitn(3, '.');
        if let (Some(gid), Some(nonce), Some(secret)) = (parts.next(), parts.next(), parts.next()) {
            let session = SessionId::new(gid);
            // A member can never be a lead, whatever its gid: the leads' sessions are theirs.
            let a_lead = self
                .leads
                .iter()
                .any(|l| l.principal.session.as_ref() == Some(&session));
            if !a_lead
                && launch::safe_gid(gid)
                && launch::verify_member(&self.member_key, gid, nonce, secret)
            {
                if !self.tokens.current(gid, nonce) {
                    return Caller {
                        revoked: true,
                        ..anonymous(true)
                    };
                }
                return Caller {
                    principal: Principal::worker(session.clone()),
                    member: Some(session),
                    refused: false,
                    revoked: false,
                };
            }
        }
        anonymous(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::herdr::launch::member_token;
    use fleet_core::Role;

    fn identity(loopback: bool) -> Identity {
        let lead = Principal::primary("alice", Some(SessionId::new("alice")));
        let tokens = launch::MemberTokens::default();
        tokens.record("w1", "0f");
        Identity::new(
            vec![Lead::new(lead.clone(), Some("alice-token-0123456789"))],
            [9; 32],
            tokens,
            loopback.then_some(lead),
        )
    }

    fn addr(s: &str) -> Option<SocketAddr> {
        s.parse().ok()
    }

    #[test]
    fn a_lead_is_known_by_its_token_and_a_member_by_its_own() {
        let id = identity(false);
        let lead = id.resolve(Some("Bearer alice-token-0123456789"), addr("10.0.0.2:4000"));
        assert_eq!(lead.principal.role, Role::Primary);
        let m = id.resolve(
            Some(&format!("Bearer {}", member_token(&[9; 32], "w1", "0f"))),
            None,
        );
        assert_eq!(m.principal, Principal::worker(SessionId::new("w1")));
        assert_eq!(m.member, Some(SessionId::new("w1")));
    }

    #[test]
    fn a_member_token_for_another_gid_or_key_is_refused() {
        let id = identity(false);
        let forged = format!("w2.0f.{}", launch::member_secret(&[9; 32], "w1", "0f"));
        let c = id.resolve(Some(&format!("Bearer {forged}")), None);
        assert_eq!((c.principal.role, c.refused), (Role::Anonymous, true));
        let other_key = member_token(&[8; 32], "w1", "0f");
        let c = id.resolve(Some(&format!("Bearer {other_key}")), None);
        assert_eq!(c.principal.role, Role::Anonymous);
    }

    #[test]
    fn a_member_token_dies_with_its_spawn() {
        let id = identity(false);
        // Genuine, but minted for an earlier spawn of the same gid.
        let old = member_token(&[9; 32], "w1", "0e");
        let c = id.resolve(Some(&format!("Bearer {old}")), None);
        assert_eq!(
            (c.principal.role, c.refused, c.revoked),
            (Role::Anonymous, true, true)
        );
        let live = member_token(&[9; 32], "w1", "0f");
        assert_eq!(
            id.resolve(Some(&format!("Bearer {live}")), None)
                .principal
                .role,
            Role::Worker
        );
        id.tokens.revoke("w1");
        let c = id.resolve(Some(&format!("Bearer {live}")), None);
        assert_eq!(
            (c.principal.role, c.revoked),
            (Role::Anonymous, true),
            "stopped: revoked"
        );
    }

    #[test]
    fn loopback_trust_is_opt_in_and_only_for_loopback_without_credentials() {
        assert_eq!(
            identity(false)
                .resolve(None, addr("127.0.0.1:5000"))
                .principal
                .role,
            Role::Anonymous
        );
        let id = identity(true);
        assert_eq!(
            id.resolve(None, addr("127.0.0.1:5000")).principal.role,
            Role::Primary
        );
        assert_eq!(
            id.resolve(None, addr("192.168.1.4:5000")).principal.role,
            Role::Anonymous
        );
        // A wrong token is refused even on loopback: a credential is never ignored.
        let c = id.resolve(Some("Bearer nope"), addr("127.0.0.1:5000"));
        assert_eq!((c.principal.role, c.refused), (Role::Anonymous, true));
    }
}

//! Admission: what a receiving gateway checks before anything in a message is believed, in
//! the order of ch. 10 §2.1 — signature, then the sender's host, then the routing key — then
//! expiry and replay. A message that fails any check is rejected (requeue=false → DLX) with a
//! loud event; it is never injected, never delivered.

use crate::envelope::{DecodeError, Envelope, Headers, Kind};
use crate::ids::{HostId, MsgId, SessionId};
use crate::io::RejectCode;
pub use crate::io::Remembered;
use crate::roster::GATEWAY_GID;
use crate::signing::{Keyring, SignatureError};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Why a delivery was refused. `code()` is the stable name used in events and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    Decode(DecodeError),
    UnknownSigner(HostId),
    BadSignature,
    /// The claimed sender is not bound to the signing host by signed presence.
    NotOnSigningHost {
        from: SessionId,
        signer: HostId,
        roster: Option<HostId>,
    },
    /// `to` differs from the key the message was routed by: a captured message re-published
    /// into another inbox.
    WrongRoutingKey {
        to: String,
        key: String,
    },
    Expired {
        expires_at: u64,
        now: u64,
    },
    /// `expiresAt` further ahead of the receiver's clock than `max_expiry_ms`: no message of
    /// ours lives that long, and one that did would hold its replay-record entry as long.
    TooFarAhead {
        expires_at: u64,
        bound: u64,
    },
    Replayed(MsgId),
    /// The replay record holds `cap` unexpired msgIds: a new one is refused rather than an
    /// unexpired one forgotten (forgetting one would let its replay through).
    RecordFull {
        cap: usize,
    },
}

impl Rejection {
    pub fn code(&self) -> RejectCode {
        match self {
            Rejection::Decode(DecodeError::NewerMajor { .. }) => RejectCode::NewerMajor,
            Rejection::Decode(_) => RejectCode::Malformed,
            Rejection::UnknownSigner(_) => RejectCode::UnknownSigner,
            Rejection::BadSignature => RejectCode::BadSignature,
            Rejection::NotOnSigningHost { .. } => RejectCode::SenderNotOnSigningHost,
            Rejection::WrongRoutingKey { .. } => RejectCode::WrongRoutingKey,
            Rejection::Expired { .. } => RejectCode::Expired,
            Rejection::TooFarAhead { .. } => RejectCode::ExpiryTooFar,
            Rejection::Replayed(_) => RejectCode::Replayed,
            Rejection::RecordFull { .. } => RejectCode::RecordFull,
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Decode(e) => write!(f, "{}: {e}", self.code()),
            Rejection::UnknownSigner(h) => write!(f, "unknown_signer: no key for {h}"),
            Rejection::BadSignature => f.write_str("bad_signature"),
            Rejection::NotOnSigningHost {
                from,
                signer,
                roster,
            } => write!(
                f,
                "sender_not_on_signing_host: {from} signed by {signer}, roster says {}",
                roster.as_ref().map_or("unknown", |h| h.as_str())
            ),
            Rejection::WrongRoutingKey { to, key } => {
                write!(f, "wrong_routing_key: to={to} routed by {key}")
            }
            Rejection::Expired { expires_at, now } => {
                write!(f, "expired: at {expires_at}, now {now}")
            }
            Rejection::TooFarAhead { expires_at, bound } => write!(
                f,
                "expiry_too_far: at {expires_at}, past {bound} (max_expiry_ms ahead of this clock)"
            ),
            Rejection::Replayed(m) => write!(f, "replayed: {m}"),
            Rejection::RecordFull { cap } => write!(
                f,
                "replay_record_full: {cap} unexpired msgIds remembered (seen_capacity); refused, not forgotten"
            ),
        }
    }
}

/// The routing key presence for `gid` on `host` is published with.
pub fn presence_key(host: &HostId, gid: &SessionId) -> String {
    crate::envelope::Address::Presence {
        host: host.clone(),
        gid: gid.clone(),
    }
    .key()
}

/// How far ahead of the receiver's clock an `expiresAt` may be by default: the longest TTL
/// fleetd stamps (`reply_ttl_ms`, 7 days) and ten minutes of clock skew.
pub const MAX_EXPIRY_MS: u64 = 7 * 86_400_000 + 600_000;

/// Decodes and checks one delivery. `host_of` answers which host signed presence binds a gid
/// to; `now_unix_ms` is the receiver's wall clock.
pub fn admit(
    keyring: &Keyring,
    headers: &Headers,
    body: Vec<u8>,
    routing_key: &str,
    now_unix_ms: u64,
    host_of: impl Fn(&SessionId) -> Option<HostId>,
    seen: &mut SeenSet,
) -> Result<Envelope, Rejection> {
    let arrived = Arrived {
        headers,
        body,
        routing_key,
        queue: routing_key,
    };
    admit_in(keyring, arrived, now_unix_ms, host_of, Some(seen))
}

/// [`admit_checked`] then [`record`]: for a receiver with no rules of its own after admission.
pub fn admit_in(
    keyring: &Keyring,
    arrived: Arrived<'_>,
    now_unix_ms: u64,
    host_of: impl Fn(&SessionId) -> Option<HostId>,
    seen: Option<&mut SeenSet>,
) -> Result<Envelope, Rejection> {
    let queue = arrived.queue.to_string();
    let checked = admit_checked(
        keyring,
        arrived,
        now_unix_ms,
        MAX_EXPIRY_MS,
        host_of,
        seen.as_deref(),
    )?;
    match seen {
        Some(seen) => record(seen, &checked, &queue, now_unix_ms).map(|()| checked),
        None => Ok(checked),
    }
}

/// Records an admitted envelope's msgId in the replay record, within `queue` — only once every
/// rule the receiver applies after admission passed too (its control allowlist, the
/// counterpart, the queue it came by), so a sender those refuse cannot fill the record.
pub fn record(
    seen: &mut SeenSet,
    env: &Envelope,
    queue: &str,
    now_unix_ms: u64,
) -> Result<(), Rejection> {
    if !env.kind().replay_guarded() {
        return Ok(());
    }
    match seen.insert_scoped(env.msg_id, queue, env.expires_at, now_unix_ms) {
        Insert::Fresh => Ok(()),
        Insert::Replayed => Err(Rejection::Replayed(env.msg_id)),
        Insert::Full => Err(Rejection::RecordFull { cap: seen.cap }),
    }
}

/// A delivery as admission sees it: its headers and body, the key it was routed by, and the
/// queue it came out of.
#[derive(Clone, Debug)]
pub struct Arrived<'a> {
    pub headers: &'a Headers,
    pub body: Vec<u8>,
    pub routing_key: &'a str,
    pub queue: &'a str,
}

/// The checks of `admit` for a delivery out of `queue`, recording nothing: replays are
/// recognised per queue, because the copies of one broadcast share a msgId but each lands in
/// its own inbox exactly once. With `seen` absent the replay check is skipped: the caller
/// handles a broker redelivery itself. An envelope that passes is recorded with [`record`]
/// once the receiver's own rules passed too.
pub fn admit_checked(
    keyring: &Keyring,
    arrived: Arrived<'_>,
    now_unix_ms: u64,
    max_expiry_ms: u64,
    host_of: impl Fn(&SessionId) -> Option<HostId>,
    seen: Option<&SeenSet>,
) -> Result<Envelope, Rejection> {
    let Arrived {
        headers,
        body,
        routing_key,
        queue,
    } = arrived;
    let env = Envelope::from_parts(headers, body).map_err(Rejection::Decode)?;
    keyring.check(&env).map_err(|e| match e {
        SignatureError::UnknownSigner => Rejection::UnknownSigner(env.signer.clone()),
        SignatureError::BadSignature => Rejection::BadSignature,
    })?;
    // Presence is what binds a gid to a host, so it cannot be checked against that binding;
    // instead its routing key must name the signer as the gid's host (checked next, as `to`).
    // A gateway speaking as `_gateway` claims only to be itself.
    let bound = if env.kind() == Kind::Presence {
        env.to == presence_key(&env.signer, &env.from)
    } else if env.from.as_str() == GATEWAY_GID {
        true
    } else {
        host_of(&env.from).as_ref() == Some(&env.signer)
    };
    if !bound {
        return Err(Rejection::NotOnSigningHost {
            roster: host_of(&env.from),
            from: env.from.clone(),
            signer: env.signer.clone(),
        });
    }
    if env.to != routing_key {
        return Err(Rejection::WrongRoutingKey {
            to: env.to.clone(),
            key: routing_key.to_string(),
        });
    }
    // What `to` means for its kind: a point-to-point kind names one entity, never a broadcast
    // or a roster key; a broadcast names all or a group.
    env.address().map_err(Rejection::Decode)?;
    if env.expires_at < now_unix_ms {
        return Err(Rejection::Expired {
            expires_at: env.expires_at,
            now: now_unix_ms,
        });
    }
    // A second copy on the forward path that the broker does not mark redelivered is a
    // replay. (A redelivery — an ack lost with its connection — is the caller's to handle: it
    // must never be typed again, nor be mistaken for an attack.) The reply path is
    // at-least-once instead, deduped by msgId later.
    let bound = now_unix_ms.saturating_add(max_expiry_ms);
    if env.expires_at > bound {
        return Err(Rejection::TooFarAhead {
            expires_at: env.expires_at,
            bound,
        });
    }
    if let Some(seen) = seen {
        if env.kind().replay_guarded() && seen.holds_scoped(env.msg_id, queue, now_unix_ms) {
            return Err(Rejection::Replayed(env.msg_id));
        }
    }
    Ok(env)
}

/// The msgIds admitted and not yet expired: a replay within `expiresAt` is caught here.
/// Bounded, and never by forgetting: past `cap` unexpired entries a new one is refused
/// (`Insert::Full`). Each new entry is also journalled, so the shell can keep the record on
/// disk (the replay record under `state_dir`) and give it back after a restart.
#[derive(Debug)]
pub struct SeenSet {
    cap: usize,
    by_id: BTreeMap<(MsgId, u64), u64>,
    by_expiry: BTreeSet<(u64, MsgId, u64)>,
    journal: Vec<Remembered>,
}

/// What recording a msgId found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insert {
    Fresh,
    Replayed,
    /// `cap` unexpired entries already: refused.
    Full,
}

/// FNV-1a of a scope name: a compact, stable key part.
fn scope_key(scope: &str) -> u64 {
    scope.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl SeenSet {
    pub fn new(cap: usize) -> Self {
        SeenSet {
            cap: cap.max(1),
            by_id: BTreeMap::new(),
            by_expiry: BTreeSet::new(),
            journal: Vec::new(),
        }
    }

    /// Records `id`; false if it was already there (a replay) or the record is full.
    pub fn insert(&mut self, id: MsgId, expires_at: u64, now: u64) -> bool {
        self.insert_key((id, 0), expires_at, now) == Insert::Fresh
    }

    /// Records `id` within `scope` (a queue): the same id in another scope is not a replay.
    pub fn insert_scoped(&mut self, id: MsgId, scope: &str, expires_at: u64, now: u64) -> Insert {
        self.insert_key((id, scope_key(scope)), expires_at, now)
    }

    /// Forgets what has expired by `now`.
    fn expire(&mut self, now: u64) {
        while let Some(&(at, old, s)) = self.by_expiry.first() {
            if at >= now {
                break;
            }
            self.by_expiry.pop_first();
            self.by_id.remove(&(old, s));
        }
    }

    fn insert_key(&mut self, key: (MsgId, u64), expires_at: u64, now: u64) -> Insert {
        self.expire(now);
        if self.by_id.contains_key(&key) {
            return Insert::Replayed;
        }
        if self.by_id.len() >= self.cap {
            return Insert::Full;
        }
        self.by_id.insert(key, expires_at);
        self.by_expiry.insert((expires_at, key.0, key.1));
        self.journal.push(Remembered {
            msg: key.0,
            scope: key.1,
            expires_at,
        });
        Insert::Fresh
    }

    /// The entries recorded since the last call, for the shell to keep.
    pub fn take_journal(&mut self) -> Vec<Remembered> {
        std::mem::take(&mut self.journal)
    }

    /// Takes back a kept record after a restart: unexpired entries, up to the cap (not
    /// journalled again: they are on disk already). Returns how many were taken.
    pub fn restore(&mut self, entries: &[Remembered], now: u64) -> usize {
        self.expire(now);
        let mut n = 0;
        for e in entries.iter().filter(|e| e.expires_at >= now) {
            if self.by_id.len() >= self.cap {
                break;
            }
            let key = (e.msg, e.scope);
            if self.by_id.insert(key, e.expires_at).is_none() {
                self.by_expiry.insert((e.expires_at, e.msg, e.scope));
                n += 1;
            }
        }
        n
    }

    pub fn contains(&self, id: MsgId) -> bool {
        self.by_id.contains_key(&(id, 0))
    }

    pub fn contains_scoped(&self, id: MsgId, scope: &str) -> bool {
        self.by_id.contains_key(&(id, scope_key(scope)))
    }

    /// Whether `id` is recorded within `scope` and unexpired at `now`.
    pub fn holds_scoped(&self, id: MsgId, scope: &str, now: u64) -> bool {
        self.by_id
            .get(&(id, scope_key(scope)))
            .is_some_and(|at| *at >= now)
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> MsgId {
        MsgId(uuid::Uuid::from_u128(n))
    }

    /// Full of unexpired entries, the record refuses a new one and forgets none; once they
    /// expire there is room again.
    #[test]
    fn a_full_record_refuses_rather_than_forgets() {
        let mut s = SeenSet::new(2);
        assert_eq!(s.insert_scoped(id(1), "q", 100, 0), Insert::Fresh);
        assert_eq!(s.insert_scoped(id(2), "q", 100, 0), Insert::Fresh);
        assert_eq!(s.insert_scoped(id(3), "q", 100, 0), Insert::Full);
        assert_eq!(s.insert_scoped(id(1), "q", 100, 0), Insert::Replayed);
        assert_eq!(s.insert_scoped(id(3), "q", 200, 101), Insert::Fresh);
        assert_eq!(s.take_journal().len(), 3);
    }

    /// What a restart gives back is a replay again; expired entries are not taken, nor
    /// journalled twice.
    #[test]
    fn a_restored_record_catches_replays() {
        let mut s = SeenSet::new(8);
        let kept = [
            Remembered {
                msg: id(1),
                scope: scope_key("q"),
                expires_at: 500,
            },
            Remembered {
                msg: id(2),
                scope: scope_key("q"),
                expires_at: 5,
            },
        ];
        assert_eq!(s.restore(&kept, 10), 1);
        assert!(s.take_journal().is_empty());
        assert_eq!(s.insert_scoped(id(1), "q", 500, 20), Insert::Replayed);
        assert_eq!(s.insert_scoped(id(2), "q", 500, 20), Insert::Fresh);
    }
}

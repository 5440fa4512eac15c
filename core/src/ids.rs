//! Identifiers. Random ones are minted from the gateway's seeded RNG, never from the OS.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;
use uuid::Uuid;

/// A delivery target: today a herdr pane id, later a fleet-wide gid. Cheap to clone. Its
/// text's hash is computed once, when it is made: session ids key the hot maps (the
/// injector's tracks, the sample order), which hash it on every sample.
#[derive(Clone)]
pub struct SessionId {
    text: Arc<str>,
    hash: u64,
}

/// Equal text; two clones of one id (the common case in the hot maps' lookups) are equal
/// without reading it, and two ids of different hashes without reading either.
impl PartialEq for SessionId {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.text, &other.text) || (self.hash == other.hash && self.text == other.text)
    }
}

impl Eq for SessionId {}

/// The text's hash, taken when the id was made (equal texts, equal hashes).
impl std::hash::Hash for SessionId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SessionId").field(&&*self.text).finish()
    }
}

impl Serialize for SessionId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Arc::<str>::deserialize(d).map(SessionId::from_arc)
    }
}

/// Lexicographic byte order, computed on the first 8 bytes as one integer before falling back
/// to a full compare: session ids key every hot map, and most differ early.
impl Ord for SessionId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.text, &other.text) {
            return std::cmp::Ordering::Equal;
        }
        let (a, b) = (self.text.as_bytes(), other.text.as_bytes());
        prefix(a).cmp(&prefix(b)).then_with(|| a.cmp(b))
    }
}

impl PartialOrd for SessionId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The first 8 bytes, zero-padded, big-endian: orders like the bytes themselves, except that
/// ties (including a NUL against a shorter string) are left to the full compare.
#[inline]
fn prefix(bytes: &[u8]) -> u64 {
    if let Some(head) = bytes.first_chunk::<8>() {
        return u64::from_be_bytes(*head);
    }
    let mut v = 0u64;
    for (i, b) in bytes.iter().enumerate() {
        v |= u64::from(*b) << (56 - 8 * i);
    }
    v
}

impl SessionId {
    pub fn new(s: impl AsRef<str>) -> Self {
        SessionId::from_arc(Arc::from(s.as_ref()))
    }

    fn from_arc(text: Arc<str>) -> Self {
        use std::hash::BuildHasher;
        // A fixed hasher: the same text hashes the same in every process and every run.
        SessionId {
            hash: rustc_hash::FxBuildHasher.hash_one(&*text),
            text,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A gateway (one per host): the routing key of its control queue and the name of its key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HostId(Arc<str>);

impl HostId {
    pub fn new(s: impl AsRef<str>) -> Self {
        HostId(Arc::from(s.as_ref()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for SessionId {
    fn from(s: &str) -> Self {
        SessionId::new(s)
    }
}

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        // Same order as the bytes, compared as one integer: ids key the hot maps.
        impl Ord for $name {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.0.as_u128().cmp(&other.0.as_u128())
            }
        }

        impl PartialOrd for $name {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

        impl $name {
            pub const MIN: $name = $name(Uuid::nil());
            pub const MAX: $name = $name(Uuid::max());
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = uuid::Error;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map($name)
            }
        }
    };
}

uuid_id!(
    /// One message handed to the injector; injected at most once.
    MsgId
);
uuid_id!(
    /// One delegation (a send); for `wait:false` sends it is the ticket the lead polls.
    TicketId
);
uuid_id!(
    /// One open reverse ask; the lead's answer must name it.
    TurnId
);
uuid_id!(
    /// One reply held in the inbox because no waiter was open.
    ReplyId
);
uuid_id!(
    /// One flow across hosts: minted at the flow's first send, carried by every hop.
    TraceId
);

/// A call from a north face, numbered by the driver; every call gets exactly one answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CallId(pub u64);

impl CallId {
    /// Calls the gateway makes itself (a task's delegation) are numbered from here up; the
    /// driver numbers its callers' from 0 and never comes near.
    pub const OWN: u64 = 1 << 63;

    pub fn is_own(self) -> bool {
        self.0 >= Self::OWN
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "call#{}", self.0)
    }
}

/// Mints v4-shaped UUIDs from a seeded ChaCha8 stream: same seed, same ids.
#[derive(Clone, Debug)]
pub struct IdMint {
    rng: ChaCha8Rng,
}

impl IdMint {
    pub fn from_seed(seed: u64) -> Self {
        IdMint {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    pub fn uuid(&mut self) -> Uuid {
        let mut bytes = [0u8; 16];
        self.rng.fill_bytes(&mut bytes);
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    }

    pub fn msg(&mut self) -> MsgId {
        MsgId(self.uuid())
    }

    pub fn ticket(&mut self) -> TicketId {
        TicketId(self.uuid())
    }

    pub fn turn(&mut self) -> TurnId {
        TurnId(self.uuid())
    }

    pub fn reply(&mut self) -> ReplyId {
        ReplyId(self.uuid())
    }

    pub fn trace(&mut self) -> TraceId {
        TraceId(self.uuid())
    }

    /// A global id for a new entity (the spawn id of CB-308 §7.8).
    pub fn gid(&mut self) -> SessionId {
        SessionId::new(self.uuid().to_string())
    }

    /// A child seed, drawn in a fixed order, for sub-machines that need their own stream.
    pub fn child_seed(&mut self) -> u64 {
        self.rng.next_u64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_of_one_text_are_equal_and_hash_alike_however_they_were_made() {
        use std::hash::BuildHasher;
        let hash = |g: &SessionId| rustc_hash::FxBuildHasher.hash_one(g);
        let made = SessionId::new("w1");
        let read: SessionId = serde_json::from_str("\"w1\"").expect("a JSON string");
        assert_eq!(made, read);
        assert_eq!(hash(&made), hash(&read));
        assert_ne!(made, SessionId::new("w2"));
        assert_eq!(made.cmp(&read), std::cmp::Ordering::Equal);
        // On the wire and in traces it is its text, as before.
        assert_eq!(serde_json::to_string(&made).expect("serialises"), "\"w1\"");
        assert_eq!(format!("{made:?}"), "SessionId(\"w1\")");
    }

    #[test]
    fn the_same_seed_mints_the_same_ids() {
        let mut a = IdMint::from_seed(7);
        let mut b = IdMint::from_seed(7);
        for _ in 0..16 {
            assert_eq!(a.uuid(), b.uuid());
        }
        assert_ne!(IdMint::from_seed(7).uuid(), IdMint::from_seed(8).uuid());
    }

    #[test]
    fn session_ids_order_like_their_bytes() {
        let words = [
            "",
            "a",
            "a\0",
            "a\0b",
            "ab",
            "abcdefgh",
            "abcdefgh\0",
            "abcdefghi",
            "abcdefgi",
            "b",
            "w10",
            "w2",
            "é",
            "\u{10ffff}",
        ];
        for x in words {
            for y in words {
                assert_eq!(
                    SessionId::new(x).cmp(&SessionId::new(y)),
                    x.as_bytes().cmp(y.as_bytes()),
                    "{x:?} vs {y:?}"
                );
            }
        }
    }

    #[test]
    fn minted_ids_are_version_4() {
        let mut m = IdMint::from_seed(1);
        assert_eq!(m.uuid().get_version_num(), 4);
    }
}

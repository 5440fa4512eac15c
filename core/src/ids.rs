//! Identifiers. Random ones are minted from the gateway's seeded RNG, never from the OS.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;
use uuid::Uuid;

/// A delivery target: today a herdr pane id, later a fleet-wide gid. Cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(Arc<str>);

impl SessionId {
    pub fn new(s: impl AsRef<str>) -> Self {
        SessionId(Arc::from(s.as_ref()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
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
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            pub const MIN: $name = $name(Uuid::nil());
            pub const MAX: $name = $name(Uuid::max());
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
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

/// A call from a north face, numbered by the driver; every call gets exactly one answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CallId(pub u64);

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

    /// A child seed, drawn in a fixed order, for sub-machines that need their own stream.
    pub fn child_seed(&mut self) -> u64 {
        self.rng.next_u64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn minted_ids_are_version_4() {
        let mut m = IdMint::from_seed(1);
        assert_eq!(m.uuid().get_version_num(), 4);
    }
}

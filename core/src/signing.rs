//! Message signing (CB-308 §7.1): each gateway signs what it publishes with its own ed25519
//! key; receivers verify against the public keys of the peers they were configured with.

use crate::envelope::Envelope;
use crate::ids::HostId;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use std::cell::Cell;
use std::collections::BTreeMap;

/// A configured key that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the public key of peer {host} is not a valid ed25519 point")]
    BadPeerKey { host: HostId },
}

/// This gateway's signing key and its peers' verifying keys — decoded once, at configuration:
/// a check never decodes a key again.
#[derive(Clone, Debug)]
pub struct Keyring {
    host: HostId,
    signing: SigningKey,
    peers: BTreeMap<HostId, VerifyingKey>,
    /// The signatures made and checked so far (the federated bench holds them to one per
    /// publish and one per delivery).
    signed: Cell<u64>,
    checked: Cell<u64>,
}

/// How much ed25519 work a keyring has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CryptoCounts {
    pub signs: u64,
    /// Signatures actually verified (the simulation's memo answers some without).
    pub verifies: u64,
}

/// Why a signature was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SignatureError {
    /// No key is configured for the claimed signer.
    UnknownSigner,
    /// Absent, or not made by the signer's key over these exact bytes.
    BadSignature,
}

impl Keyring {
    /// `secret` is this gateway's 32-byte ed25519 seed; `peers` maps each peer gateway to its
    /// 32-byte public key. This gateway's own key is always trusted (its own broadcasts and
    /// presence come back to it).
    pub fn new(
        host: HostId,
        secret: [u8; 32],
        peers: &BTreeMap<HostId, [u8; 32]>,
    ) -> Result<Keyring, KeyError> {
        let signing = SigningKey::from_bytes(&secret);
        let mut map = BTreeMap::new();
        for (h, k) in peers {
            let key = VerifyingKey::from_bytes(k)
                .map_err(|_| KeyError::BadPeerKey { host: h.clone() })?;
            map.insert(h.clone(), key);
        }
        map.insert(host.clone(), signing.verifying_key());
        Ok(Keyring {
            host,
            signing,
            peers: map,
            signed: Cell::new(0),
            checked: Cell::new(0),
        })
    }

    pub fn host(&self) -> &HostId {
        &self.host
    }

    pub fn public_key(&self) -> [u8; 32] {
        self.signing.verifying_key().to_bytes()
    }

    pub fn counts(&self) -> CryptoCounts {
        CryptoCounts {
            signs: self.signed.get(),
            verifies: self.checked.get(),
        }
    }

    /// Stamps this gateway as the signer and signs the envelope's canonical bytes.
    pub fn sign(&self, env: &mut Envelope) {
        self.signed.set(self.signed.get() + 1);
        env.signer = self.host.clone();
        let sig: Signature = self.signing.sign(&env.signing_bytes());
        env.sig = Some(sig.to_bytes());
    }

    /// Checks the signature with the claimed signer's key (strict: no malleable encodings).
    pub fn check(&self, env: &Envelope) -> Result<(), SignatureError> {
        let key = self
            .peers
            .get(&env.signer)
            .ok_or(SignatureError::UnknownSigner)?;
        let sig = env.sig.ok_or(SignatureError::BadSignature)?;
        let bytes = env.signing_bytes();
        #[cfg(feature = "verify-memo")]
        if memo::on() && memo::verified(key, &sig, &bytes) {
            return Ok(());
        }
        self.checked.set(self.checked.get() + 1);
        key.verify_strict(&bytes, &Signature::from_bytes(&sig))
            .map_err(|_| SignatureError::BadSignature)?;
        #[cfg(feature = "verify-memo")]
        if memo::on() {
            memo::remember(key, sig, bytes);
        }
        Ok(())
    }
}

/// Switches this thread's verify memo off (feature `verify-memo`, which every crate beside the
/// simulation's inherits through Cargo's feature unification): every signature is verified,
/// as in fleetd. For a benchmark that must measure the daemon's cost.
#[cfg(feature = "verify-memo")]
pub fn verify_memo_off() {
    memo::off();
}

/// The simulation's memo of verified signatures (feature `verify-memo`; fleetd never has it).
/// The gateways of one simulated world share a thread, and each of a world's hosts verifies
/// every snapshot every other host signs: the same key, bytes and signature, the same answer
/// every time (verification is a pure function). A signature verified once over exactly these
/// bytes with exactly this key is not verified again — the bytes are compared in full, so a
/// different message under a reused signature is verified as any other. Bounded: the oldest
/// entry goes first.
#[cfg(feature = "verify-memo")]
mod memo {
    use ed25519_dalek::VerifyingKey;
    use std::cell::RefCell;
    use std::collections::{BTreeMap, VecDeque};

    const ENTRIES: usize = 4_096;

    #[derive(Default)]
    struct Memo {
        by_sig: BTreeMap<[u8; 64], ([u8; 32], Vec<u8>)>,
        order: VecDeque<[u8; 64]>,
    }

    thread_local! {
        static MEMO: RefCell<Memo> = RefCell::default();
        static ON: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
    }

    pub(super) fn on() -> bool {
        ON.with(|o| o.get())
    }

    pub(super) fn off() {
        ON.with(|o| o.set(false));
        MEMO.with(|m| *m.borrow_mut() = Memo::default());
    }

    pub(super) fn verified(key: &VerifyingKey, sig: &[u8; 64], bytes: &[u8]) -> bool {
        MEMO.with(|m| {
            m.borrow()
                .by_sig
                .get(sig)
                .is_some_and(|(k, b)| k == key.as_bytes() && b == bytes)
        })
    }

    pub(super) fn remember(key: &VerifyingKey, sig: [u8; 64], bytes: Vec<u8>) {
        MEMO.with(|m| {
            let mut m = m.borrow_mut();
            if m.by_sig.insert(sig, (key.to_bytes(), bytes)).is_none() {
                m.order.push_back(sig);
            }
            while m.order.len() > ENTRIES {
                if let Some(old) = m.order.pop_front() {
                    m.by_sig.remove(&old);
                }
            }
        })
    }
}

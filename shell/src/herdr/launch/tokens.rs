//! Members' credentials: a bearer token per spawn, an HMAC of the gid and the spawn's nonce
//! under the member key, honoured only while that nonce is on record.

use super::*;

/// The secret member `gid` of spawn `nonce` presents: HMAC-SHA256(member_key, gid, nonce), hex.
pub fn member_secret(key: &[u8; 32], gid: &str, nonce: &str) -> String {
    hex(&mac(key, gid, nonce).finalize().into_bytes())
}

/// The bearer token member `gid` presents: `<gid>.<nonce>.<secret>`, so the gateway knows whose
/// secret to check and which spawn it was minted for (a gid and a nonce have no `.`).
pub fn member_token(key: &[u8; 32], gid: &str, nonce: &str) -> String {
    format!("{gid}.{nonce}.{}", member_secret(key, gid, nonce))
}

/// Checks a presented secret in constant time.
pub fn verify_member(key: &[u8; 32], gid: &str, nonce: &str, presented: &str) -> bool {
    let Some(bytes) = unhex(presented) else {
        return false;
    };
    mac(key, gid, nonce).verify_slice(&bytes).is_ok()
}

fn mac(key: &[u8; 32], gid: &str, nonce: &str) -> Hmac<Sha256> {
    // HMAC takes a key of any length: this cannot fail for 32 bytes.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    m.update(b"fleetd member mcp secret v2\0");
    m.update(gid.as_bytes());
    m.update(b"\0");
    m.update(nonce.as_bytes());
    m
}

/// A spawn's nonce: 16 hex digits from the OS.
pub fn fresh_nonce() -> String {
    let mut b = [0u8; 8];
    use rand_core::RngCore;
    rand_core::OsRng.fill_bytes(&mut b);
    hex(&b)
}

/// The name of the file in a member's directory holding its spawn's nonce: what makes its
/// token valid, across a gateway restart too, until its files go with its pane.
pub const NONCE_FILE: &str = "nonce";

/// The members' live nonces (gid → nonce): a token is honoured only for the nonce on record,
/// so it dies when its member's pane and files go. Shared by the launcher and the faces.
#[derive(Clone, Debug, Default)]
pub struct MemberTokens(std::sync::Arc<std::sync::RwLock<BTreeMap<String, String>>>);

impl MemberTokens {
    /// The nonces of the members whose files are under `runtime_dir` (a restart).
    pub fn load(runtime_dir: &Path) -> Self {
        let t = MemberTokens::default();
        let Ok(entries) = std::fs::read_dir(runtime_dir) else {
            return t;
        };
        for e in entries.flatten() {
            let gid = e.file_name().to_string_lossy().into_owned();
            if !safe_gid(&gid) {
                continue;
            }
            if let Ok(n) = std::fs::read_to_string(e.path().join(NONCE_FILE)) {
                if safe_nonce(n.trim()) {
                    t.record(&gid, n.trim());
                }
            }
        }
        t
    }

    pub fn record(&self, gid: &str, nonce: &str) {
        if let Ok(mut m) = self.0.write() {
            m.insert(gid.to_string(), nonce.to_string());
        }
    }

    pub fn revoke(&self, gid: &str) {
        if let Ok(mut m) = self.0.write() {
            m.remove(gid);
        }
    }

    /// Whether member `gid` has a live spawn on record (not stopped, not forgotten).
    pub fn is_live(&self, gid: &str) -> bool {
        self.0.read().map(|m| m.contains_key(gid)).unwrap_or(false)
    }

    /// Whether `nonce` is member `gid`'s current one.
    pub fn current(&self, gid: &str, nonce: &str) -> bool {
        self.0
            .read()
            .map(|m| m.get(gid).is_some_and(|n| n == nonce))
            .unwrap_or(false)
    }
}

pub(super) fn safe_nonce(n: &str) -> bool {
    (1..=64).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The token on record for member `gid` under `runtime_dir` (what its launch gave it).
pub fn token_on_record(runtime_dir: &Path, key: &[u8; 32], gid: &str) -> Option<String> {
    let n = std::fs::read_to_string(runtime_dir.join(gid).join(NONCE_FILE)).ok()?;
    Some(member_token(key, gid, n.trim()))
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

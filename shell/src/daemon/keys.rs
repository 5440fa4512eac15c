//! The gateway's keys: ed25519 secrets as `fleetd keygen` writes them, and the keys derived
//! from them.

use super::*;

/// An ed25519 secret key as `fleetd keygen` writes it: 64 hex digits and a newline.
pub fn read_key(path: &Path) -> Result<[u8; 32], DaemonError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path)
        .map_err(|e| DaemonError::Key(format!("reading the key {}: {e}", path.display())))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        // Anyone else who can read it can sign as this host and mint every member's token.
        return Err(DaemonError::Key(format!(
            "the key {} is readable by its group or others (mode {mode:04o}): chmod 600 {}",
            path.display(),
            path.display()
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| DaemonError::Key(format!("reading the key {}: {e}", path.display())))?;
    config::decode_key(&text).ok_or_else(|| {
        DaemonError::Key(format!(
            "{} is not a key: expected 64 hex digits (fleetd keygen --out {})",
            path.display(),
            path.display()
        ))
    })
}

/// Writes a fresh secret key (owner-only) and returns it with its public half.
pub fn write_key(path: &Path) -> Result<([u8; 32], [u8; 32]), DaemonError> {
    use rand_core::RngCore;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut secret = [0u8; 32];
    rand_core::OsRng.fill_bytes(&mut secret);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| DaemonError::Key(format!("creating {}: {e}", dir.display())))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| DaemonError::Key(format!("creating the key {}: {e}", path.display())))?;
    writeln!(f, "{}", config::encode_key(&secret))
        .map_err(|e| DaemonError::Key(format!("writing the key {}: {e}", path.display())))?;
    Ok((secret, public_key(&secret)))
}

pub fn public_key(secret: &[u8; 32]) -> [u8; 32] {
    ed25519_dalek::SigningKey::from_bytes(secret)
        .verifying_key()
        .to_bytes()
}

/// Members' MCP secrets are derived from this, itself derived from the gateway key: stable
/// across restarts with no second file, and useless for signing.
pub fn member_key(secret: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"fleetd member key\0");
    h.update(secret);
    h.finalize().into()
}

/// The gateway's key: read, or (single host only) created on first start.
pub(super) fn gateway_key(cfg: &Config) -> Result<[u8; 32], DaemonError> {
    let path = cfg.key_file();
    if path.exists() {
        return read_key(&path);
    }
    if cfg.broker.is_some() {
        return Err(DaemonError::Key(format!(
            "no key at {p}: create it with `fleetd keygen --out {p}` and give its public key \
             to the other gateways' [peers]",
            p = path.display()
        )));
    }
    let (secret, public) = write_key(&path)?;
    tracing::info!(key = %path.display(), public = %config::encode_key(&public), "created this gateway's key");
    Ok(secret)
}

//! A member's filtered herdr socket. A member never gets herdr's real socket (which would let it
//! type into the lead's pane, read or close other members' panes, or rename its own to
//! `fleet:<victim>` and receive the victim's briefs): fleetd serves one socket per member, in
//! the member's directory, that forwards to herdr only what a member needs for itself —
//! reporting its own pane's agent state and reading or looking up its own pane — and answers
//! everything else with an error, logged.
//!
//! herdr's protocol is one request line per connection (`PROTOCOL.md`), so each connection
//! here is: read one line (bounded), decide (`permit`, pure), forward it over one connection to
//! the real socket, copy one answer line back.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

/// herdr's own bound on a request line.
pub const MAX_LINE: usize = 1 << 20;

/// Connections one member may hold open at once; more are closed at once (a member looping on
/// its socket cannot pile up tasks in the daemon).
pub const MAX_OPEN: usize = 8;

/// Methods a member may call, each only on its own pane (`pane_id`), except `ping`.
const OWN_PANE: &[&str] = &[
    "pane.report_agent",
    "pane.release_agent",
    "pane.report_agent_session",
    "pane.clear_agent_authority",
    "pane.report_metadata",
    "pane.read",
    "pane.get",
];

/// Why a member's request was not forwarded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the request is not one JSON object with a string method")]
    Malformed,
    #[error("{0} is not a method a member may call")]
    Method(String),
    #[error("{method} names pane {named:?}; a member may only name its own")]
    OtherPane { method: String, named: String },
    #[error("the member's pane is not known yet")]
    NoPane,
}

impl Refused {
    pub fn code(&self) -> &'static str {
        match self {
            Refused::Malformed => "invalid_request",
            _ => "forbidden",
        }
    }
}

/// Decides one request line from the member whose pane is `own` (`None`: not placed yet).
/// Returns the line to forward: the request as parsed here, re-encoded, so herdr reads exactly
/// what was checked (never a duplicate key or an odd encoding read another way).
pub fn permit(line: &[u8], own: Option<&str>) -> Result<Vec<u8>, Refused> {
    let v: Value = serde_json::from_slice(line).map_err(|_| Refused::Malformed)?;
    let checked = || {
        let mut out = serde_json::to_vec(&v).map_err(|_| Refused::Malformed)?;
        out.push(b'\n');
        Ok(out)
    };
    let method = v
        .get("method")
        .and_then(Value::as_str)
        .ok_or(Refused::Malformed)?;
    if method == "ping" {
        return checked();
    }
    if !OWN_PANE.contains(&method) {
        return Err(Refused::Method(method.to_string()));
    }
    let own = own.ok_or(Refused::NoPane)?;
    let params = v.get("params").and_then(Value::as_object);
    // Every other key that could name a pane is refused too: only `pane_id`, and only its own.
    let named = params
        .and_then(|p| p.get("pane_id"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let other_target = params.is_some_and(|p| {
        ["target", "pane", "agent_id", "workspace_id", "tab_id"]
            .iter()
            .any(|k| p.contains_key(*k))
    });
    if named != own || other_target {
        return Err(Refused::OtherPane {
            method: method.to_string(),
            named: named.to_string(),
        });
    }
    checked()
}

/// The error line herdr itself would send, with fleetd's reason.
fn refusal_line(line: &[u8], why: &Refused) -> String {
    let id = serde_json::from_slice::<Value>(line)
        .ok()
        .and_then(|v| v.get("id").cloned())
        .unwrap_or(json!(""));
    let mut s =
        json!({"id": id, "error": {"code": why.code(), "message": format!("fleetd: {why}")}})
            .to_string();
    s.push('\n');
    s
}

/// One member's served socket; dropping it stops serving and removes the socket file.
#[derive(Debug)]
pub struct Served {
    path: PathBuf,
    pane: watch::Sender<Option<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    /// Tells the socket its member's pane (known once herdr placed it).
    pub fn set_pane(&self, pane: &str) {
        let _ = self.pane.send(Some(pane.to_string()));
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Serves member `gid`'s filtered socket at `path`, forwarding to herdr's `real` socket.
/// A request that arrives before the pane is known waits for it up to `timeout`.
pub fn serve(
    gid: &str,
    path: &Path,
    real: &Path,
    pane: Option<String>,
    timeout: Duration,
) -> std::io::Result<Served> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    let (tx, rx) = watch::channel(pane);
    let (gid, real) = (Rc::<str>::from(gid), Rc::new(real.to_path_buf()));
    let open = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_OPEN));
    let task = tokio::task::spawn_local(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let Ok(permit) = open.clone().try_acquire_owned() else {
                tracing::warn!(%gid, "refused a member's herdr connection: {MAX_OPEN} already open");
                continue;
            };
            let (gid, real, rx) = (gid.clone(), real.clone(), rx.clone());
            tokio::task::spawn_local(async move {
                if let Err(e) = one(conn, &gid, &real, rx, timeout).await {
                    tracing::debug!(%gid, "member herdr socket: {e}");
                }
                drop(permit);
            });
        }
    });
    Ok(Served {
        path: path.to_path_buf(),
        pane: tx,
        task,
    })
}

async fn one(
    conn: UnixStream,
    gid: &str,
    real: &Path,
    mut pane: watch::Receiver<Option<String>>,
    timeout: Duration,
) -> std::io::Result<()> {
    let (r, mut w) = conn.into_split();
    let mut reader = BufReader::new(r).take(MAX_LINE as u64 + 1);
    let mut line = Vec::new();
    let read = tokio::time::timeout(timeout, reader.read_until(b'\n', &mut line)).await;
    if !matches!(read, Ok(Ok(n)) if n > 0) {
        return Ok(());
    }
    if line.len() > MAX_LINE {
        return w
            .write_all(refusal_line(b"", &Refused::Malformed).as_bytes())
            .await;
    }
    let first = permit(&line, pane.borrow().as_deref());
    let decided = match first {
        Err(Refused::NoPane) => {
            let _ = tokio::time::timeout(timeout, pane.wait_for(Option::is_some)).await;
            permit(&line, pane.borrow().as_deref())
        }
        d => d,
    };
    let line = match decided {
        Ok(checked) => checked,
        Err(why) => {
            tracing::warn!(%gid, %why, "refused a member's herdr request");
            return w.write_all(refusal_line(&line, &why).as_bytes()).await;
        }
    };
    // The pane id this socket trusts must still be the member's own (herdr may give a closed
    // pane's id to another pane): its label says so, or nothing is forwarded.
    let own = pane.borrow().clone();
    let is_ping = serde_json::from_slice::<Value>(&line)
        .ok()
        .is_some_and(|v| v.get("method").and_then(Value::as_str) == Some("ping"));
    if !is_ping {
        let label = format!("{}{gid}", super::LABEL_PREFIX);
        let get = json!({"id": "fleetd-check", "method": "pane.get", "params": {"pane_id": own}});
        let mut ask = get.to_string().into_bytes();
        ask.push(b'\n');
        let still = exchange(real, &ask, timeout).await.ok().is_some_and(|a| {
            serde_json::from_slice::<Value>(&a).ok().is_some_and(|v| {
                v.pointer("/result/pane/label").and_then(Value::as_str) == Some(label.as_str())
            })
        });
        if !still {
            let why = Refused::NoPane;
            tracing::warn!(%gid, %why, "refused a member's herdr request: its pane no longer carries its label");
            return w.write_all(refusal_line(&line, &why).as_bytes()).await;
        }
    }
    let answer = exchange(real, &line, timeout).await?;
    // A member that does not read its answer does not hold this task.
    tokio::time::timeout(timeout, w.write_all(&answer))
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the member did not read",
            ))
        })
}

/// One request line to herdr's real socket, one answer line back, bounded.
async fn exchange(real: &Path, line: &[u8], timeout: Duration) -> std::io::Result<Vec<u8>> {
    let forward = async {
        let mut up = UnixStream::connect(real).await?;
        up.write_all(line).await?;
        let mut answer = Vec::new();
        BufReader::new(up)
            .take(MAX_LINE as u64 * 16)
            .read_until(b'\n', &mut answer)
            .await?;
        std::io::Result::Ok(answer)
    };
    match tokio::time::timeout(timeout, forward).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "herdr did not answer",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, params: Value) -> Vec<u8> {
        json!({"id": "1", "method": method, "params": params})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn a_member_reports_and_reads_only_its_own_pane() {
        let own = Some("w1:p3");
        let report = req(
            "pane.report_agent",
            json!({"pane_id": "w1:p3", "source": "custom:x", "agent": "x", "state": "idle"}),
        );
        assert!(permit(&report, own).is_ok());
        assert!(permit(&req("pane.read", json!({"pane_id": "w1:p3"})), own).is_ok());
        assert!(permit(&req("ping", json!({})), own).is_ok());
        // A duplicate key is read once, here, and forwarded as read.
        let twice =
            br#"{"id":"1","method":"pane.read","params":{"pane_id":"w1:p1","pane_id":"w1:p3"}}"#;
        let sent = permit(twice, own).expect("its own pane, as parsed");
        assert_eq!(
            serde_json::from_slice::<Value>(&sent).ok(),
            Some(json!({"id": "1", "method": "pane.read", "params": {"pane_id": "w1:p3"}}))
        );
        assert!(matches!(
            permit(&req("pane.read", json!({"pane_id": "w1:p1"})), own),
            Err(Refused::OtherPane { .. })
        ));
        assert!(matches!(permit(&report, None), Err(Refused::NoPane)));
    }

    #[test]
    fn everything_that_reaches_another_pane_or_the_server_is_refused() {
        let own = Some("w1:p3");
        for (m, p) in [
            (
                "pane.send_input",
                json!({"pane_id": "w1:p1", "text": "rm -rf ~"}),
            ),
            ("pane.send_input", json!({"pane_id": "w1:p3", "text": "x"})),
            ("pane.send_text", json!({"pane_id": "w1:p1", "text": "x"})),
            ("pane.close", json!({"pane_id": "w1:p1"})),
            (
                "pane.rename",
                json!({"pane_id": "w1:p3", "label": "fleet:victim"}),
            ),
            ("pane.list", json!({})),
            ("agent.list", json!({})),
            ("agent.prompt", json!({"target": "w1:p1", "text": "x"})),
            ("layout.apply", json!({})),
            ("events.subscribe", json!({"subscriptions": []})),
            ("server.stop", json!({})),
            ("pane.read", json!({"pane_id": "w1:p3", "target": "w1:p1"})),
        ] {
            assert!(permit(&req(m, p.clone()), own).is_err(), "{m} {p}");
        }
        assert_eq!(permit(b"not json", own), Err(Refused::Malformed));
        assert_eq!(permit(b"{\"id\":\"1\"}", own), Err(Refused::Malformed));
        let line = refusal_line(
            &req("pane.close", json!({})),
            &Refused::Method("pane.close".into()),
        );
        let v: Value = serde_json::from_str(&line).expect("json");
        assert_eq!(v["id"], "1");
        assert_eq!(v["error"]["code"], "forbidden");
    }
}

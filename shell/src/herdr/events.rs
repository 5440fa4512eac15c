//! herdr's event stream (`events.subscribe`), fed to the gateway: a member whose pane exits or
//! closes is gone at once, and a member pane's status change makes the gateway sample it now.
//!
//! Polling stays the source of truth: an event only hints (`Input::StatusHint` asks for a
//! sample) or reports a pane herdr itself says is gone. The stream is reopened when it drops
//! (herdr restarting) and whenever the member set changes, since herdr takes status
//! subscriptions per pane, fixed when subscribing; what happened during a gap is found by the
//! polls, as without events.

use super::rpc::{RpcError, MAX_RESPONSE};
use super::HerdrClient;
use crate::driver::Handle;
use fleet_core::{AgentStatus, Input, SessionId};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedReadHalf;
use tokio::net::UnixStream;

/// What fleetd reads from herdr's events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PaneEvent {
    /// `pane.agent_status_changed` (`status` as herdr words it).
    Status { pane_id: String, status: String },
    /// `pane_exited` or `pane_closed`: the pane is no more.
    Gone { pane_id: String },
}

/// An open `events.subscribe` connection.
pub struct Subscription {
    lines: BufReader<OwnedReadHalf>,
    /// The line being read: kept here so a read cut short (the watcher's `select!` taking
    /// another branch) loses nothing.
    buf: Vec<u8>,
    _write: tokio::net::unix::OwnedWriteHalf,
}

impl Subscription {
    /// Subscribes to panes exiting and closing, and to the status of each of `panes`; waits
    /// (bounded) for `subscription_started`.
    pub async fn open(
        socket: &Path,
        panes: &[String],
        timeout: Duration,
    ) -> Result<Self, RpcError> {
        let unreachable = |why: String| RpcError::Unreachable {
            path: socket.display().to_string(),
            why,
        };
        let mut subs = vec![
            json!({"type": "pane.exited"}),
            json!({"type": "pane.closed"}),
        ];
        subs.extend(
            panes
                .iter()
                .map(|p| json!({"type": "pane.agent_status_changed", "pane_id": p})),
        );
        let request = json!({"id": "fleetd-events", "method": "events.subscribe",
            "params": {"subscriptions": subs}});
        let open = async {
            let stream = UnixStream::connect(socket)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            let (rd, mut wr) = stream.into_split();
            let mut line = request.to_string();
            line.push('\n');
            wr.write_all(line.as_bytes())
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            let mut sub = Subscription {
                lines: BufReader::new(rd),
                buf: Vec::new(),
                _write: wr,
            };
            let first = sub.line().await?;
            match first.pointer("/result/type").and_then(Value::as_str) {
                Some("subscription_started") => Ok(sub),
                _ => match first.get("error") {
                    Some(e) => Err(RpcError::Herdr {
                        method: "events.subscribe".into(),
                        code: e.get("code").and_then(Value::as_str).unwrap_or("").into(),
                        message: e
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .into(),
                    }),
                    None => Err(malformed(format!(
                        "expected subscription_started, got {first}"
                    ))),
                },
            }
        };
        match tokio::time::timeout(timeout, open).await {
            Ok(r) => r,
            Err(_) => Err(RpcError::Timeout {
                method: "events.subscribe".into(),
                ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }

    /// Cancel-safe: bytes read before a cancellation stay in `buf` for the next call.
    async fn line(&mut self) -> Result<Value, RpcError> {
        let room = (MAX_RESPONSE + 1).saturating_sub(self.buf.len()) as u64;
        let n = (&mut self.lines)
            .take(room)
            .read_until(b'\n', &mut self.buf)
            .await
            .map_err(|e| malformed(e.to_string()))?;
        let buf = std::mem::take(&mut self.buf);
        if n == 0 && buf.is_empty() {
            return Err(RpcError::Unreachable {
                path: "events".into(),
                why: "herdr closed the event stream".into(),
            });
        }
        if buf.len() > MAX_RESPONSE {
            return Err(malformed("an event line over 8 MiB".into()));
        }
        serde_json::from_slice(&buf).map_err(|e| malformed(format!("not JSON: {e}")))
    }

    /// The next event fleetd uses (others are skipped). Waits as long as herdr is quiet; an
    /// error ends the subscription.
    pub async fn next(&mut self) -> Result<PaneEvent, RpcError> {
        loop {
            let v = self.line().await?;
            if let Some(e) = parse(&v) {
                return Ok(e);
            }
        }
    }
}

fn malformed(why: String) -> RpcError {
    RpcError::Malformed {
        method: "events.subscribe".into(),
        why,
    }
}

/// Reads one event line; `None` for an event fleetd does not use or cannot read.
pub fn parse(v: &Value) -> Option<PaneEvent> {
    let data = v.get("data")?;
    let pane_id = data.get("pane_id")?.as_str()?.to_string();
    match v.get("event")?.as_str()? {
        "pane.agent_status_changed" => Some(PaneEvent::Status {
            pane_id,
            status: data.get("agent_status")?.as_str()?.to_string(),
        }),
        "pane_exited" | "pane_closed" => Some(PaneEvent::Gone { pane_id }),
        _ => None,
    }
}

/// How the watcher paces itself.
#[derive(Clone, Copy, Debug)]
pub struct WatchConfig {
    /// How often the member set is listed; a change reopens the subscription.
    pub relist: Duration,
    /// Reconnect backoff after the stream drops: doubles from `backoff_min` to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            relist: Duration::from_secs(5),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
        }
    }
}

/// Feeds herdr's events about this gateway's members to the gateway behind `handle`, until
/// the gateway is gone. Never ends on herdr's account: it resubscribes.
pub async fn watch(client: HerdrClient, handle: Handle, cfg: WatchConfig) {
    watch_listed(client, handle, cfg, None).await
}

/// `watch`, its first stream opened for the members of `listed` (a listing taken before):
/// what a test needs to stand between the listing and the subscription.
pub async fn watch_from(
    client: HerdrClient,
    handle: Handle,
    cfg: WatchConfig,
    listed: Vec<(SessionId, String)>,
) {
    watch_listed(client, handle, cfg, Some(listed)).await
}

async fn watch_listed(
    client: HerdrClient,
    handle: Handle,
    cfg: WatchConfig,
    mut listed: Option<Vec<(SessionId, String)>>,
) {
    let mut backoff = cfg.backoff_min;
    let mut first = true;
    loop {
        if !first {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(cfg.backoff_max);
        }
        first = false;
        let members = match listed.take() {
            Some(m) => m,
            None => match client.member_panes().await {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!("herdr events: listing members: {e}");
                    continue;
                }
            },
        };
        let by_pane: BTreeMap<String, SessionId> = members
            .iter()
            .map(|(g, p)| (p.clone(), g.clone()))
            .collect();
        let panes: Vec<String> = by_pane.keys().cloned().collect();
        // Each member pane's last injectability as events told it.
        let mut injectable: BTreeMap<String, bool> = BTreeMap::new();
        let mut sub = match Subscription::open(client.socket(), &panes, client.timeout()).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("herdr events: subscribing: {e}");
                continue;
            }
        };
        // What happened before the stream opened: herdr 0.9 (protocol 22) starts a stream at
        // its current event, so a member whose pane went between the listing above and the
        // subscription is told only by listing again now (herdr 0.8 replayed it; both are
        // read the same way here).
        match client.member_panes().await {
            Ok(now) if now != members => {
                if !report_vanished(&client, &handle, &members, &now).await {
                    return;
                }
                backoff = cfg.backoff_min;
                first = true;
                continue;
            }
            _ => {}
        }
        let opened = tokio::time::Instant::now();
        let mut relist = tokio::time::interval(cfg.relist);
        relist.tick().await;
        loop {
            tokio::select! {
                biased;
                ev = sub.next() => {
                    let ev = match ev {
                        Ok(ev) => ev,
                        Err(e) => {
                            tracing::info!("herdr event stream ended ({e}); polling covers the gap");
                            // Only a stream that lived a while earns a quick reconnect.
                            if opened.elapsed() >= cfg.backoff_max {
                                backoff = cfg.backoff_min;
                            }
                            break;
                        }
                    };
                    let (pane_id, input) =
                        match hear(&client, &handle, &by_pane, &mut injectable, ev).await {
                            Heard::Nothing => continue,
                            Heard::DriverGone => return,
                            Heard::Tell(pane_id, input) => (pane_id, *input),
                        };
                    tracing::debug!(pane = %pane_id, ?input, "herdr event");
                    if handle.tell(input).await.is_err() {
                        return;
                    }
                }
                () = client.placed() => {
                    // A member was just placed: subscribe to its status now — after saying
                    // who vanished, whose own event dies with this subscription.
                    if let Ok(now) = client.member_panes().await {
                        if !report_vanished(&client, &handle, &members, &now).await {
                            return;
                        }
                    }
                    backoff = cfg.backoff_min;
                    first = true;
                    break;
                }
                _ = relist.tick() => {
                    // A member whose program ended before it connected fails its spawn now,
                    // saying how (a claude-code or opencode member's gate is its first call,
                    // which will never come); one past its gate is found gone by the poll.
                    for (gid, _) in &members {
                        if !ended_first(&client, &handle, gid).await {
                            return;
                        }
                    }
                    match client.member_panes().await {
                        Ok(now) if now != members => {
                            if !report_vanished(&client, &handle, &members, &now).await {
                                return;
                            }
                            backoff = cfg.backoff_min;
                            break;
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

/// What one herdr event means for the gateway.
enum Heard {
    Nothing,
    Tell(String, Box<Input>),
    /// The driver is gone: the watch ends.
    DriverGone,
}

/// Reads one event about a member pane: a change of injectability asks for a sample; a pane
/// gone (and no other pane carrying the member's label) is the member gone.
async fn hear(
    client: &HerdrClient,
    handle: &Handle,
    by_pane: &BTreeMap<String, SessionId>,
    injectable: &mut BTreeMap<String, bool>,
    ev: PaneEvent,
) -> Heard {
    match ev {
        PaneEvent::Status { pane_id, status } => {
            let Some(gid) = by_pane.get(&pane_id) else {
                return Heard::Nothing;
            };
            // Only a change the injector cares about (injectable or not) is
            // worth a sample: herdr flips done <-> idle on focus alone, and
            // extra samples would count toward the injector's grace polls.
            let now = AgentStatus::from_wire(&status).injectable();
            let before = injectable.insert(pane_id.clone(), now);
            if before == Some(now) {
                return Heard::Nothing;
            }
            Heard::Tell(
                pane_id,
                Box::new(Input::StatusHint {
                    target: gid.clone(),
                }),
            )
        }
        PaneEvent::Gone { pane_id } => {
            let Some(gid) = by_pane.get(&pane_id) else {
                return Heard::Nothing;
            };
            // Trust no stale id (a moved pane gets a new one): gone unless
            // another pane carries the member's label now. (herdr may still
            // list the closing pane itself for a moment.)
            match client.member_panes().await {
                Ok(now) if now.iter().any(|(g, p)| g == gid && *p != pane_id) => {
                    return Heard::Nothing
                }
                Err(_) => return Heard::Nothing,
                Ok(_) => {}
            }
            if !ended_first(client, handle, gid).await {
                return Heard::DriverGone;
            }
            client.forget(gid);
            Heard::Tell(
                pane_id,
                Box::new(Input::PaneGone {
                    target: gid.clone(),
                }),
            )
        }
    }
}

/// A member no pane carries any more (`now`) is gone. Its own event may still be on its way
/// on the subscription about to be dropped: say so here, or only the next poll would notice
/// (and an idle member is never polled). False when the driver is gone.
async fn report_vanished(
    client: &HerdrClient,
    handle: &Handle,
    members: &[(SessionId, String)],
    now: &[(SessionId, String)],
) -> bool {
    for (gid, _) in members {
        if now.iter().any(|(g, _)| g == gid) {
            continue;
        }
        if !ended_first(client, handle, gid).await {
            return false;
        }
        client.forget(gid);
        let gone = Input::PaneGone {
            target: gid.clone(),
        };
        tracing::debug!(%gid, "herdr no longer lists the member's pane");
        if handle.tell(gone).await.is_err() {
            return false;
        }
    }
    true
}

/// Before a member is reported gone: if its program ended (whichever path read its record
/// first), its spawn — still in its readiness gate, or the core ignores it — fails saying
/// how. False when the driver is gone.
async fn ended_first(client: &HerdrClient, handle: &Handle, gid: &SessionId) -> bool {
    let Some(why) = client.exited(gid).await else {
        return true;
    };
    let failed = Input::Spawned {
        gid: gid.clone(),
        result: Err(fleet_core::SpawnError::Ended(why)),
    };
    handle.tell(failed).await.is_ok()
}

//! The herdr methods fleetd uses, typed: protocol 20 (herdr 0.8; its schema, as herdr 0.8.2
//! prints it, is `tests/data/herdr-api.schema.json`) and protocol 22 (herdr 0.9), which differ
//! in what fleetd relies on only in how an event stream starts (`Family`).
//! Results are read leniently (unknown fields ignored, as herdr adds fields) but every field
//! fleetd relies on is required.

use super::rpc::{RpcError, Socket};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// The oldest socket protocol this client speaks.
pub const PROTOCOL: u32 = 20;
/// The protocols this client is tested against: 20 against a real herdr 0.8.2 and the double,
/// 22 against the double switched to herdr 0.9's published changes (no real 0.9 server could be
/// run here). An older one is refused (its methods may be missing); any other is used with a
/// warning, and a method it no longer knows fails on its own call (`RpcError::UnknownMethod`).
pub const PROTOCOLS_TESTED: [u32; 2] = [20, 22];

/// How a herdr's protocol stands against what this client is tested with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    Tested,
    /// Not one of `PROTOCOLS_TESTED` (21, or newer than 22): used, with a warning.
    Newer,
}

impl Support {
    pub fn of(protocol: u32) -> Option<Support> {
        if PROTOCOLS_TESTED.contains(&protocol) {
            Some(Support::Tested)
        } else if protocol > PROTOCOL {
            Some(Support::Newer)
        } else {
            None
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Support::Tested => "tested",
            Support::Newer => "not tested",
        }
    }
}

/// Which family of herdr's protocol a server speaks, as its `ping` says: told apart by its
/// capability names (herdr 0.9 adds `endpoint_protocol_generation`), not an exact version, so
/// a 0.9.x that keeps them and moves the number is still read right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// herdr 0.8 (protocol 20): an event stream replays the lifecycle events it kept (up to
    /// 512) before the live ones.
    Replaying,
    /// herdr 0.9 (protocol 22): an event stream starts at the current event, so what happened
    /// before it was opened is learned by listing after subscribing.
    LiveOnly,
}

/// What a program may report of itself (herdr's `PaneAgentState`: no `done`, which herdr
/// derives from focus).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportedState {
    Idle,
    Working,
    Blocked,
    Unknown,
}

impl ReportedState {
    pub fn as_str(self) -> &'static str {
        match self {
            ReportedState::Idle => "idle",
            ReportedState::Working => "working",
            ReportedState::Blocked => "blocked",
            ReportedState::Unknown => "unknown",
        }
    }
}

/// `ping`'s answer.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Pong {
    pub version: String,
    pub protocol: u32,
    /// The server's named capabilities (an object of values; absent before 0.8).
    #[serde(default)]
    pub capabilities: BTreeMap<String, Value>,
}

impl Pong {
    /// Whether the server names capability `name` (with any value but `false` or null).
    pub fn has(&self, name: &str) -> bool {
        self.capabilities
            .get(name)
            .is_some_and(|v| !v.is_null() && *v != Value::Bool(false))
    }

    pub fn family(&self) -> Family {
        if self.has("endpoint_protocol_generation") || self.protocol >= 22 {
            Family::LiveOnly
        } else {
            Family::Replaying
        }
    }
}

/// A pane, as `pane.get` / `pane.list` / `pane_created` describe it (the fields fleetd reads).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct PaneInfo {
    pub pane_id: String,
    pub workspace_id: String,
    pub tab_id: String,
    pub agent_status: String,
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub agent: Option<String>,
}

#[derive(Deserialize)]
struct PaneRead {
    text: String,
}

/// Where a new pane goes and what it runs (`layout.apply` with one pane node).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewPane {
    pub label: String,
    pub cwd: Option<String>,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub workspace_id: Option<String>,
    pub tab_label: Option<String>,
}

/// Typed calls on one herdr socket.
#[derive(Debug)]
pub struct Api {
    socket: Socket,
    next: AtomicU64,
}

fn field<T: for<'de> Deserialize<'de>>(
    result: &Value,
    key: &str,
    method: &str,
) -> Result<T, RpcError> {
    let v = result.get(key).cloned().unwrap_or(Value::Null);
    serde_json::from_value(v).map_err(|e| RpcError::Malformed {
        method: method.to_string(),
        why: format!("{key}: {e}"),
    })
}

fn expect_type(result: &Value, want: &str, method: &str) -> Result<(), RpcError> {
    match result.get("type").and_then(Value::as_str) {
        Some(t) if t == want => Ok(()),
        other => Err(RpcError::Malformed {
            method: method.to_string(),
            why: format!("result type {other:?}, expected {want:?}"),
        }),
    }
}

impl Api {
    pub fn new(socket: Socket) -> Self {
        Api {
            socket,
            next: AtomicU64::new(1),
        }
    }

    pub fn socket(&self) -> &Socket {
        &self.socket
    }

    async fn call(&self, method: &str, params: Value, want: &str) -> Result<Value, RpcError> {
        let id = format!("fleetd-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let r = self.socket.call(&id, method, params).await?;
        expect_type(&r, want, method)?;
        Ok(r)
    }

    /// `ping`; fails for a protocol older than the tested range (a newer one is the caller's
    /// to warn about: `Support::of`).
    pub async fn ping(&self) -> Result<Pong, RpcError> {
        let r = self.call("ping", json!({}), "pong").await?;
        let pong = Pong {
            version: field(&r, "version", "ping")?,
            protocol: field(&r, "protocol", "ping")?,
            // Read leniently: a capability map this build cannot read is none.
            capabilities: field(&r, "capabilities", "ping").unwrap_or_default(),
        };
        if Support::of(pong.protocol).is_none() {
            return Err(RpcError::Protocol {
                version: pong.version,
                protocol: pong.protocol,
                want: PROTOCOL,
            });
        }
        Ok(pong)
    }

    pub async fn pane_get(&self, pane_id: &str) -> Result<PaneInfo, RpcError> {
        let r = self
            .call("pane.get", json!({ "pane_id": pane_id }), "pane_info")
            .await?;
        field(&r, "pane", "pane.get")
    }

    pub async fn pane_list(&self) -> Result<Vec<PaneInfo>, RpcError> {
        let r = self.call("pane.list", json!({}), "pane_list").await?;
        field(&r, "panes", "pane.list")
    }

    /// The last `lines` of the pane's recent output, ANSI stripped.
    pub async fn pane_read(&self, pane_id: &str, lines: u32) -> Result<String, RpcError> {
        let params = json!({
            "pane_id": pane_id, "source": "recent", "lines": lines,
            "format": "text", "strip_ansi": true,
        });
        let r = self.call("pane.read", params, "pane_read").await?;
        let read: PaneRead = field(&r, "read", "pane.read")?;
        Ok(read.text)
    }

    /// Types `text` (bracketed paste when the program asked for it) and presses `keys`.
    pub async fn send_input(
        &self,
        pane_id: &str,
        text: &str,
        keys: &[&str],
    ) -> Result<(), RpcError> {
        let params = json!({ "pane_id": pane_id, "text": text, "keys": keys });
        self.call("pane.send_input", params, "ok").await.map(|_| ())
    }

    /// Opens a new, unfocused tab with one pane running `p.command`; returns the pane id.
    pub async fn layout_apply(&self, p: &NewPane) -> Result<String, RpcError> {
        let mut root = json!({ "type": "pane", "label": p.label, "env": p.env });
        if !p.command.is_empty() {
            root["command"] = json!(p.command);
        }
        if let Some(cwd) = &p.cwd {
            root["cwd"] = json!(cwd);
        }
        let mut params = json!({ "root": root, "focus": false });
        if let Some(w) = &p.workspace_id {
            params["workspace_id"] = json!(w);
        }
        if let Some(t) = &p.tab_label {
            params["tab_label"] = json!(t);
        }
        let r = self.call("layout.apply", params, "layout_apply").await?;
        r.pointer("/layout/root/pane_id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| RpcError::Malformed {
                method: "layout.apply".into(),
                why: "no layout.root.pane_id".into(),
            })
    }

    /// Creates an unfocused workspace (a fresh herdr server has none, and `layout.apply`
    /// needs one); returns its id.
    pub async fn workspace_create(&self, label: &str) -> Result<String, RpcError> {
        let params = json!({ "label": label, "focus": false });
        let r = self
            .call("workspace.create", params, "workspace_created")
            .await?;
        r.pointer("/workspace/workspace_id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| RpcError::Malformed {
                method: "workspace.create".into(),
                why: "no workspace.workspace_id".into(),
            })
    }

    pub async fn pane_close(&self, pane_id: &str) -> Result<(), RpcError> {
        self.call("pane.close", json!({ "pane_id": pane_id }), "ok")
            .await
            .map(|_| ())
    }

    /// Reports a program's status for a pane herdr does not recognise (`command` members).
    pub async fn report_agent(
        &self,
        pane_id: &str,
        agent: &str,
        state: ReportedState,
    ) -> Result<(), RpcError> {
        let params = json!({
            "pane_id": pane_id, "source": format!("custom:{agent}"), "agent": agent,
            "state": state.as_str(),
        });
        self.call("pane.report_agent", params, "ok")
            .await
            .map(|_| ())
    }
}

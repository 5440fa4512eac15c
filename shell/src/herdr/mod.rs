//! The production `HerdrPort`: herdr's Unix-socket API (protocol 20, `PROTOCOL.md`). One request
//! per connection, each bounded; members are found by their pane label `fleet:<gid>`, which
//! herdr keeps across its own restarts — so a restarted gateway rebuilds gid ↔ pane from herdr
//! alone (CB-308 §7.8).

pub mod agent_config;
pub mod api;
pub mod events;
pub mod launch;
#[cfg(feature = "daemon")]
pub mod lead_launch;
pub mod member_socket;
pub mod rebuild;
pub mod rpc;
pub mod sandbox;
mod spawn;
pub mod worktree;

pub use api::{Api, NewPane, PaneInfo, Pong, ReportedState, PROTOCOL};
pub use launch::{CharterReceipt, Kind, LaunchConfig, LaunchError, Profile};
pub use rpc::{RpcError, Socket};
pub use sandbox::{Availability, Network, SandboxConfig};
pub use worktree::WorktreeConfig;

use crate::ports::{HerdrError, HerdrPort, InjectFailure, PortFuture, Sample, Samples};
use fleet_core::{AgentStatus, Launched, SessionId, SpawnError, SpawnSpec};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

/// The label prefix that marks a member pane and names its gid.
pub const LABEL_PREFIX: &str = "fleet:";

/// Where herdr listens: `$HERDR_SOCKET_PATH`, else `$XDG_CONFIG_HOME/herdr/herdr.sock`, else
/// `~/.config/herdr/herdr.sock`. `None` when none of those can be formed.
pub fn discover_socket() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(p) = var("HERDR_SOCKET_PATH") {
        return Some(PathBuf::from(p));
    }
    let config = var("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("herdr").join("herdr.sock"))
}

/// How the client reads and places panes, and launches members.
#[derive(Clone, Debug)]
pub struct HerdrConfig {
    pub socket: PathBuf,
    /// A second herdr for members (ch. 9's `memberHerdrSocket`): members are spawned, found
    /// and driven there, leads' panes stay on `socket`. `None`: one herdr for both.
    pub member_socket: Option<PathBuf>,
    /// Bound on each request (herdr itself drops a request not received within 5 s).
    pub timeout: Duration,
    /// Lines of recent output read for a baseline or a screen.
    pub read_lines: u32,
    /// The label of the non-focused tab members start in.
    pub member_tab: String,
    pub profiles: BTreeMap<String, Profile>,
    pub launch: LaunchConfig,
    /// Where members' git worktrees and repository clones go.
    pub worktrees: WorktreeConfig,
    /// The daemon's environment, which each member's is scrubbed from (`launch::plan`).
    pub parent_env: BTreeMap<String, String>,
    /// The configured leads' panes: gid → pane id on the leads' herdr. Only these and labelled
    /// members are targets; any other gid is not found (never taken for a raw pane id).
    pub lead_panes: BTreeMap<SessionId, LeadPane>,
    /// The members' sandbox on this host (off unless the daemon found and enabled one).
    pub sandbox: SandboxConfig,
    /// Spawn refused, not run bare, when a profile wants a sandbox the host cannot make.
    pub sandbox_required: bool,
}

impl HerdrConfig {
    /// Defaults around `socket` and `launch`; `parent_env` is this process's environment.
    pub fn new(socket: impl Into<PathBuf>, launch: LaunchConfig) -> Self {
        HerdrConfig {
            socket: socket.into(),
            member_socket: None,
            timeout: Duration::from_secs(5),
            read_lines: 80,
            member_tab: "fleet members".into(),
            profiles: BTreeMap::new(),
            worktrees: WorktreeConfig::new(
                launch
                    .runtime_dir
                    .parent()
                    .unwrap_or(&launch.runtime_dir)
                    .join("worktrees"),
            ),
            launch,
            parent_env: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
            lead_panes: BTreeMap::new(),
            sandbox: SandboxConfig::off(),
            sandbox_required: false,
        }
    }
}

/// The herdr client as the driver loop's `HerdrPort`. Cheap to clone (shared state).
#[derive(Clone, Debug)]
pub struct HerdrClient {
    /// The members' herdr: every `fleet:<gid>` pane lives there.
    api: Rc<Api>,
    /// The leads' herdr (the same one unless `member_socket` is set).
    leads: Rc<Api>,
    cfg: Rc<HerdrConfig>,
    /// gid → pane id, refreshed from the labels whenever a gid is not found.
    panes: Rc<RefCell<BTreeMap<SessionId, String>>>,
    /// The charter receipt of each member this client launched (for audit; never the text).
    receipts: Rc<RefCell<BTreeMap<SessionId, CharterReceipt>>>,
    /// Each member's filtered herdr socket, served while its pane lives.
    sockets: Rc<RefCell<BTreeMap<SessionId, member_socket::Served>>>,
    /// Why each member whose program ended did (taken from its launch script's record, which
    /// can be read once): whichever path finds it first — a poll, the health probe, the
    /// events watcher — the others still learn why, until its pane is forgotten.
    ended: Rc<RefCell<BTreeMap<SessionId, String>>>,
    /// Poked when a member's pane is placed: the events watcher subscribes to it at once
    /// rather than at its next relist (5 s), so a new member's first turns are event-driven.
    placed: Rc<tokio::sync::Notify>,
}

/// Exit reports kept for members whose panes were not forgotten yet.
const ENDED_KEPT: usize = 1_024;

fn port_error(e: RpcError) -> HerdrError {
    match e.code() {
        Some("pane_not_found") => HerdrError::PaneNotFound,
        _ => HerdrError::Unavailable(e.to_string()),
    }
}

/// A `pane.send_input` that failed: herdr refused it, or the request never reached it, and
/// nothing was typed; or it went out and no valid answer came, and the text may be in the pane.
fn input_error(e: RpcError) -> InjectFailure {
    match e {
        RpcError::Herdr { .. }
        | RpcError::Unreachable { .. }
        | RpcError::UnknownMethod { .. }
        | RpcError::Protocol { .. } => InjectFailure::NotTyped(port_error(e)),
        RpcError::Timeout { .. } | RpcError::Malformed { .. } => {
            InjectFailure::Unconfirmed(e.to_string())
        }
    }
}

impl HerdrClient {
    pub fn new(cfg: HerdrConfig) -> Self {
        let leads = Rc::new(Api::new(Socket::new(cfg.socket.clone(), cfg.timeout)));
        let api = match &cfg.member_socket {
            Some(m) => Rc::new(Api::new(Socket::new(m.clone(), cfg.timeout))),
            None => leads.clone(),
        };
        HerdrClient {
            api,
            leads,
            cfg: Rc::new(cfg),
            panes: Rc::default(),
            receipts: Rc::default(),
            ended: Rc::default(),
            sockets: Rc::default(),
            placed: Rc::default(),
        }
    }

    /// Resolves once a member's pane has been placed since the last call.
    pub async fn placed(&self) {
        self.placed.notified().await
    }

    /// Every member and its pane, as herdr lists them now (sorted by gid).
    pub async fn member_panes(&self) -> Result<Vec<(SessionId, String)>, RpcError> {
        refresh(&self.api, &self.panes).await?;
        Ok(self
            .panes
            .borrow()
            .iter()
            .map(|(g, p)| (g.clone(), p.clone()))
            .collect())
    }

    /// The members' herdr socket (their events come from there).
    pub fn socket(&self) -> &std::path::Path {
        self.cfg
            .member_socket
            .as_deref()
            .unwrap_or(&self.cfg.socket)
    }

    /// The bound on each request.
    pub fn timeout(&self) -> Duration {
        self.cfg.timeout
    }

    /// Member `gid`'s pane is gone (herdr said so): drop what this client keeps for it.
    /// Why member `gid`'s program ended, if it has (its launch script recorded the status and
    /// keeps the pane for this read): the status and the last lines of its screen. Taking it
    /// lets the script end, and the pane close.
    pub async fn take_exit(&self, gid: &SessionId) -> Option<String> {
        let dir = self.cfg.launch.member_dir(gid.as_str())?;
        let pane = self.panes.borrow().get(gid).cloned();
        exit_report(&self.api, pane.as_deref(), &dir, self.cfg.read_lines).await
    }

    /// Whether member `gid`'s program has ended, and how; logged once (the record is taken,
    /// so its pane closes).
    pub async fn exited(&self, gid: &SessionId) -> Option<String> {
        if let Some(why) = self.ended.borrow().get(gid) {
            return Some(why.clone());
        }
        let recorded = self
            .cfg
            .launch
            .member_dir(gid.as_str())
            .is_some_and(|d| d.join(launch::EXITED_FILE).exists());
        if !recorded {
            return None;
        }
        let why = self
            .take_exit(gid)
            .await
            .unwrap_or_else(|| "its program exited".into());
        tracing::warn!(%gid, "a member's program ended: {why}");
        let mut ended = self.ended.borrow_mut();
        // Bounded: an entry is dropped when its pane is forgotten; a herdr that never says
        // so cannot grow this past a fleet's worth.
        if ended.len() >= ENDED_KEPT {
            ended.pop_first();
        }
        ended.insert(gid.clone(), why.clone());
        Some(why)
    }

    /// A configured lead's pane carries `pane.label`, or is started now from `pane` on the
    /// leads' herdr: `Some(pane id)` when it was started.
    pub async fn ensure_lead(&self, pane: &NewPane) -> Result<Option<String>, RpcError> {
        let listed = self.leads.pane_list().await?;
        if listed
            .iter()
            .any(|p| p.label.as_deref() == Some(pane.label.as_str()))
        {
            return Ok(None);
        }
        let mut placed = self.leads.layout_apply(pane).await;
        if matches!(&placed, Err(e) if e.code() == Some("workspace_not_found")) {
            placed = match self.leads.workspace_create("leads").await {
                Ok(_) => self.leads.layout_apply(pane).await,
                Err(e) => Err(e),
            };
        }
        placed.map(Some)
    }

    pub fn forget(&self, gid: &SessionId) {
        self.panes.borrow_mut().remove(gid);
        self.receipts.borrow_mut().remove(gid);
        self.sockets.borrow_mut().remove(gid);
        self.ended.borrow_mut().remove(gid);
        forget_files(&self.cfg.launch, gid);
    }

    /// Removes the files of members that have no pane any more (a member whose program exited
    /// closed its pane on its own): everything under `runtime_dir` not named by `live`.
    pub fn sweep_files(&self, live: &[SessionId]) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.cfg.launch.runtime_dir) else {
            return Vec::new();
        };
        let mut swept = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if launch::safe_gid(&name) && !live.iter().any(|g| g.as_str() == name) {
                let gid = SessionId::new(&name);
                self.sockets.borrow_mut().remove(&gid);
                forget_files(&self.cfg.launch, &gid);
                swept.push(name);
            }
        }
        swept
    }

    /// The charter receipt member `gid` was launched with, if this client launched it.
    pub fn receipt(&self, gid: &SessionId) -> Option<CharterReceipt> {
        self.receipts.borrow().get(gid).cloned()
    }

    /// The members' herdr.
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// Every member pane herdr has now, by the gid in its label (startup, after a restart).
    /// Each one launched by fleetd (its files are here) gets its filtered herdr socket back.
    pub async fn members(&self) -> Result<Vec<SessionId>, RpcError> {
        refresh(&self.api, &self.panes).await?;
        let panes = self.panes.borrow().clone();
        for (gid, pane) in &panes {
            let Some(dir) = self.cfg.launch.member_dir(gid.as_str()) else {
                continue;
            };
            // Not for a member being closed (its token is already revoked).
            let live = self.cfg.launch.tokens.is_live(gid.as_str());
            if live && dir.is_dir() && !self.sockets.borrow().contains_key(gid) {
                match self.serve_socket(gid, &dir, Some(pane.clone())) {
                    Ok(s) => {
                        self.sockets.borrow_mut().insert(gid.clone(), s);
                    }
                    Err(e) => tracing::warn!(%gid, "serving a member's herdr socket: {e}"),
                }
            }
        }
        Ok(panes.into_keys().collect())
    }

    /// Whether member `gid`'s launch left its starting mark (its gate never passed), and the
    /// gate it recorded there. A mark that does not parse (an older launch wrote it empty)
    /// is a connection gate, as every launch's was then.
    pub fn starting(&self, gid: &SessionId) -> Option<fleet_core::Readiness> {
        let dir = self.cfg.launch.member_dir(gid.as_str())?;
        let mark = std::fs::read(dir.join(launch::STARTING_FILE)).ok()?;
        Some(serde_json::from_slice(&mark).unwrap_or(fleet_core::Readiness::OnConnect))
    }

    fn serve_socket(
        &self,
        gid: &SessionId,
        dir: &std::path::Path,
        pane: Option<String>,
    ) -> std::io::Result<member_socket::Served> {
        member_socket::serve(
            gid.as_str(),
            &dir.join(launch::MEMBER_HERDR_SOCKET),
            self.socket(),
            pane,
            self.cfg.timeout,
        )
    }

    fn resolve(
        &self,
        gid: &SessionId,
    ) -> impl std::future::Future<Output = Result<Found, HerdrError>> + 'static {
        let (api, leads, panes, gid) = (
            self.api.clone(),
            self.leads.clone(),
            self.panes.clone(),
            gid.clone(),
        );
        let lead_pane = self.cfg.lead_panes.get(&gid).cloned();
        let member = |api: &Rc<Api>, pane: String| Found {
            api: api.clone(),
            pane,
            member: true,
        };
        async move {
            if let Some(p) = panes.borrow().get(&gid).cloned() {
                return Ok(member(&api, p));
            }
            let shared = Rc::ptr_eq(&api, &leads);
            let listed = match refresh(&api, &panes).await {
                Ok(listed) => listed,
                Err(e) if shared => return Err(port_error(e)),
                // The members' herdr is down: a lead on the main one is still found.
                Err(_) => Vec::new(),
            };
            if let Some(p) = panes.borrow().get(&gid).cloned() {
                return Ok(member(&api, p));
            }
            // Not a member: only a configured lead's pane, on the leads' herdr. Any other gid
            // is no target at all — never taken for a raw pane id (a shell pane, another
            // lead's).
            let lead_pane = match lead_pane {
                None => return Err(HerdrError::PaneNotFound),
                Some(LeadPane::Id(id)) => id,
                Some(LeadPane::Label(label)) => {
                    let on_leads = if shared {
                        listed
                    } else {
                        leads.pane_list().await.map_err(port_error)?
                    };
                    // The first pane carrying it, in herdr's order; none: not there now.
                    match on_leads
                        .into_iter()
                        .find(|p| p.label.as_deref() == Some(&label))
                    {
                        Some(p) => {
                            return Ok(Found {
                                api: leads.clone(),
                                pane: p.pane_id,
                                member: false,
                            })
                        }
                        None => return Err(HerdrError::PaneNotFound),
                    }
                }
            };
            let lead = |api: &Rc<Api>| Found {
                api: api.clone(),
                pane: lead_pane.clone(),
                member: false,
            };
            // A pinned id names whatever pane holds it now: one a member holds (its label says
            // so) is never the lead's — what is typed for the lead (a peer lead's notes) must
            // not reach a member that came by the id.
            let a_members = |p: &PaneInfo| {
                p.label
                    .as_deref()
                    .is_some_and(|l| l.starts_with(LABEL_PREFIX))
            };
            if shared {
                return match listed.iter().find(|p| p.pane_id == lead_pane) {
                    Some(p) if !a_members(p) => Ok(lead(&leads)),
                    _ => Err(HerdrError::PaneNotFound),
                };
            }
            match leads.pane_get(&lead_pane).await {
                Ok(p) if a_members(&p) => Err(HerdrError::PaneNotFound),
                Ok(_) => Ok(lead(&leads)),
                Err(e) => Err(port_error(e)),
            }
        }
    }
}

/// How a configured lead's pane is found on the leads' herdr.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeadPane {
    /// A pane id pinned in the config.
    Id(String),
    /// A label, looked up at each use (a restarted pane keeps its label, not its id).
    Label(String),
}

impl From<String> for LeadPane {
    fn from(id: String) -> Self {
        LeadPane::Id(id)
    }
}

/// Where a gid's pane is: which herdr, which pane, and whether it is a member's (labelled).
struct Found {
    api: Rc<Api>,
    pane: String,
    member: bool,
}

/// The pane `f` names, checked (`current` for a member; still there, for a lead).
async fn checked(
    f: Found,
    panes: &RefCell<BTreeMap<SessionId, String>>,
    gid: &SessionId,
) -> Result<(Rc<Api>, String, PaneInfo), HerdrError> {
    if f.member {
        let (pane, info) = current(&f.api, panes, gid, f.pane).await?;
        return Ok((f.api, pane, info));
    }
    let info = f.api.pane_get(&f.pane).await.map_err(port_error)?;
    Ok((f.api, f.pane, info))
}

/// `pane`, checked: herdr still has it and, for a member, it still carries `fleet:<gid>`.
/// Otherwise the labels are listed again and the member's current pane is used; only when no
/// pane carries its label is it gone.
async fn current(
    api: &Api,
    panes: &RefCell<BTreeMap<SessionId, String>>,
    gid: &SessionId,
    pane: String,
) -> Result<(String, PaneInfo), HerdrError> {
    let label = format!("{LABEL_PREFIX}{gid}");
    let member = pane != gid.as_str();
    match api.pane_get(&pane).await {
        Ok(info) if !member || info.label.as_deref() == Some(label.as_str()) => {
            return Ok((pane, info))
        }
        Ok(_) => {}
        Err(e) if e.code() == Some("pane_not_found") => {}
        Err(e) => return Err(port_error(e)),
    }
    let listed = refresh(api, panes).await.map_err(port_error)?;
    let again = panes.borrow().get(gid).cloned();
    match again {
        Some(p) => {
            let info = listed.into_iter().find(|i| i.pane_id == p);
            info.map(|i| (p, i)).ok_or(HerdrError::PaneNotFound)
        }
        None => Err(HerdrError::PaneNotFound),
    }
}

/// Rebuilds the gid → pane map from `pane.list` labels; returns the panes listed.
async fn refresh(
    api: &Api,
    panes: &RefCell<BTreeMap<SessionId, String>>,
) -> Result<Vec<PaneInfo>, RpcError> {
    let list = api.pane_list().await?;
    let mut map = BTreeMap::new();
    for p in &list {
        let Some(gid) = p
            .label
            .as_deref()
            .and_then(|l| l.strip_prefix(LABEL_PREFIX))
        else {
            continue;
        };
        if launch::safe_gid(gid) {
            map.insert(SessionId::new(gid), p.pane_id.clone());
        } else {
            tracing::warn!(pane = %p.pane_id, label = ?p.label, "ignoring a fleet label whose gid is not a plain name");
        }
    }
    *panes.borrow_mut() = map;
    Ok(list)
}

impl HerdrPort for HerdrClient {
    fn sample(&self, target: &SessionId) -> PortFuture<Result<Sample, HerdrError>> {
        let (panes, gid, lines) = (self.panes.clone(), target.clone(), self.cfg.read_lines);
        let resolve = self.resolve(target);
        let (cfg, me) = (self.cfg.clone(), self.clone());
        Box::pin(async move {
            if me.exited(&gid).await.is_some() {
                forget_files(&cfg.launch, &gid);
                return Err(HerdrError::PaneNotFound);
            }
            let sampled = async {
                let (api, pane, info) = checked(resolve.await?, &panes, &gid).await?;
                let status = AgentStatus::from_wire(&info.agent_status);
                let screen = if status == AgentStatus::Unknown {
                    Some(api.pane_read(&pane, lines).await.map_err(port_error)?)
                } else {
                    None
                };
                Ok(Sample { status, screen })
            }
            .await;
            // The status poll is where a member whose program exited (its pane closed on its
            // own) is found gone: its files go with it.
            if sampled == Err(HerdrError::PaneNotFound) {
                forget_files(&cfg.launch, &gid);
            }
            sampled
        })
    }

    /// One `pane.list` for every member: its label finds each one's pane and its
    /// `agent_status` is the sample; only a pane that says `unknown` is read as well. A target
    /// no pane is labelled for (a lead, or a member whose pane is gone) is sampled on its own,
    /// as `sample` would.
    fn sample_all(&self, targets: &[SessionId]) -> PortFuture<Result<Samples, HerdrError>> {
        let me = self.clone();
        let targets = targets.to_vec();
        Box::pin(async move {
            let (api, panes, lines) = (&me.api, &me.panes, me.cfg.read_lines);
            let listed = refresh(api, panes).await.map_err(port_error)?;
            let by_pane: BTreeMap<&str, &PaneInfo> =
                listed.iter().map(|p| (p.pane_id.as_str(), p)).collect();
            let mut out = Vec::with_capacity(targets.len());
            for gid in targets {
                if me.exited(&gid).await.is_some() {
                    forget_files(&me.cfg.launch, &gid);
                    out.push((gid, Err(HerdrError::PaneNotFound)));
                    continue;
                }
                let pane = panes.borrow().get(&gid).cloned();
                let Some(info) = pane.as_deref().and_then(|p| by_pane.get(p)) else {
                    match me.sample(&gid).await {
                        Err(HerdrError::Unavailable(_)) => {}
                        answer => out.push((gid, answer)),
                    }
                    continue;
                };
                let status = AgentStatus::from_wire(&info.agent_status);
                let screen = if status == AgentStatus::Unknown {
                    match api.pane_read(&info.pane_id, lines).await {
                        Ok(text) => Some(text),
                        // This one is left out; the next round samples it again.
                        Err(_) => continue,
                    }
                } else {
                    None
                };
                out.push((gid, Ok(Sample { status, screen })));
            }
            Ok(out)
        })
    }

    fn ended(&self, target: &SessionId) -> PortFuture<Option<String>> {
        // Looked up when awaited: the sample that finds the pane gone records why first, and
        // the exit the launch script recorded counts while its pane still shows the end.
        let (me, gid) = (self.clone(), target.clone());
        Box::pin(async move { me.exited(&gid).await })
    }

    fn inject(&self, target: &SessionId, text: &str) -> PortFuture<Result<String, InjectFailure>> {
        let (panes, gid) = (self.panes.clone(), target.clone());
        let (text, lines) = (text.to_string(), self.cfg.read_lines);
        let resolve = self.resolve(target);
        let me = self.clone();
        Box::pin(async move {
            // Never into a pane whose program ended (its script keeps it a moment for its
            // last screen): the brief would be typed into nothing.
            if me.exited(&gid).await.is_some() {
                return Err(HerdrError::PaneNotFound.into());
            }
            // The cached id must still be this member's pane before anything is typed into it
            // (a moved pane gets a new id; herdr may reuse an old one after a restart).
            // The core made every control character inert; one here is a bug, never typed.
            if let Some(c) = text
                .chars()
                .find(|c| !fleet_core::pane_text::is_typeable(*c))
            {
                let why = format!(
                    "refused: a control character (U+{:04X}) in the text",
                    c as u32
                );
                return Err(HerdrError::Unavailable(why).into());
            }
            let (api, pane, _) = checked(resolve.await?, &panes, &gid).await?;
            let baseline = api.pane_read(&pane, lines).await.map_err(port_error)?;
            api.send_input(&pane, &text, &["enter"])
                .await
                .map_err(input_error)?;
            Ok(baseline)
        })
    }

    fn read(&self, target: &SessionId) -> PortFuture<Result<String, HerdrError>> {
        let lines = self.cfg.read_lines;
        let resolve = self.resolve(target);
        Box::pin(async move {
            let f = resolve.await?;
            f.api.pane_read(&f.pane, lines).await.map_err(port_error)
        })
    }

    fn spawn(&self, gid: &SessionId, spec: &SpawnSpec) -> PortFuture<Result<Launched, SpawnError>> {
        let (me, gid, spec) = (self.clone(), gid.clone(), spec.clone());
        Box::pin(async move { me.launch_member(&gid, &spec).await })
    }

    fn ready(&self, gid: &SessionId) {
        if let Some(dir) = self.cfg.launch.member_dir(gid.as_str()) {
            match std::fs::remove_file(dir.join(launch::STARTING_FILE)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!(%gid, "dropping a member's starting mark: {e}");
                }
                _ => {}
            }
        }
    }

    fn close(&self, gid: &SessionId) -> PortFuture<Result<(), HerdrError>> {
        // A member being closed is stopped: its token dies now, before anyone hears `stopped`
        // (the driver calls this before it answers), not when herdr gets round to the pane.
        self.cfg.launch.tokens.revoke(gid.as_str());
        let (panes, g) = (self.panes.clone(), gid.clone());
        let (receipts, cfg) = (self.receipts.clone(), self.cfg.clone());
        let sockets = self.sockets.clone();
        let resolve = self.resolve(gid);
        Box::pin(async move {
            let found = resolve.await;
            receipts.borrow_mut().remove(&g);
            let r = match found {
                Ok(f) => f.api.pane_close(&f.pane).await.map_err(port_error),
                Err(e) => Err(e),
            };
            // Its files go once its pane has: closed here, or found gone. Its worktree goes
            // too, its unfinished work first kept under `refs/wip/fleet/<gid>` (its branch
            // `fleet/<gid>` always stays).
            if matches!(r, Ok(()) | Err(HerdrError::PaneNotFound)) {
                sockets.borrow_mut().remove(&g);
                forget_files(&cfg.launch, &g);
                match worktree::remove(&cfg.worktrees, g.as_str()).await {
                    Ok(worktree::Removed::Kept(why)) => {
                        tracing::warn!(gid = %g, %why, "kept a closed member's worktree")
                    }
                    Ok(worktree::Removed::Snapshotted { wip, why }) => {
                        tracing::info!(gid = %g, %wip, %why, "a closed member's unfinished work is kept in its repository")
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(gid = %g, "removing a member's worktree: {e}"),
                }
            }
            panes.borrow_mut().remove(&g);
            r
        })
    }
}

/// Removes member `gid`'s files (its pane is gone); its token dies with them.
fn forget_files(cfg: &LaunchConfig, gid: &SessionId) {
    cfg.tokens.revoke(gid.as_str());
    if let Some(dir) = cfg.member_dir(gid.as_str()) {
        if let Err(e) = launch::remove_files(&dir) {
            tracing::warn!(%gid, dir = %dir.display(), "removing a member's files: {e}");
        }
    }
}

/// The exit a member's launch script recorded in `dir`, with the last lines of its pane's
/// screen; removes the record (the script then ends). `None` while the program runs.
async fn exit_report(
    api: &Api,
    pane: Option<&str>,
    dir: &std::path::Path,
    lines: u32,
) -> Option<String> {
    let file = dir.join(launch::EXITED_FILE);
    let status = std::fs::read_to_string(&file).ok()?;
    let status = status.trim();
    let status = if !status.is_empty() && status.bytes().all(|b| b.is_ascii_digit()) {
        status.to_string()
    } else {
        "unknown".to_string()
    };
    let screen = match pane {
        Some(p) => api.pane_read(p, lines).await.unwrap_or_default(),
        None => String::new(),
    };
    let _ = std::fs::remove_file(&file);
    let tail = last_screen(&screen, 12, 1024);
    Some(if tail.is_empty() {
        format!("its program exited with status {status}")
    } else {
        format!("its program exited with status {status}; its screen ended:\n{tail}")
    })
}

pub use fleet_core::pane_text::last_screen;

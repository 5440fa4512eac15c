//! Launching a member: its plan, room, files, socket and pane, in steps; a step that fails
//! undoes everything the steps before it made ([`Made`]), once, in one place — a member that
//! failed to start holds no work, so nothing of it stays.

use super::{launch, port_error, sandbox, worktree, HerdrClient, NewPane, Profile, LABEL_PREFIX};
use fleet_core::SpawnError;
use fleet_core::{Launched, SessionId, SpawnSpec};
use launch::Launch;
use sandbox::Network;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a spawn has made so far: each is undone, in reverse, when a later step fails.
#[derive(Default)]
pub(super) struct Made {
    /// A worktree cut for it.
    worktree: bool,
    /// Its directory (files, token, served socket) from the point they may exist.
    files: Option<PathBuf>,
    /// Its pane, once placed.
    pane: Option<String>,
}

fn refused(why: String) -> SpawnError {
    SpawnError::Refused(why)
}

impl HerdrClient {
    /// Launches member `gid` as `spec` asks, or leaves nothing of it behind.
    pub(super) async fn launch_member(
        &self,
        gid: &SessionId,
        spec: &SpawnSpec,
    ) -> Result<Launched, SpawnError> {
        let mut made = Made::default();
        let launched = self.launch_steps(gid, spec, &mut made).await;
        if launched.is_err() {
            self.undo(gid, made).await;
        }
        launched
    }

    async fn undo(&self, gid: &SessionId, made: Made) {
        if let Some(pane) = made.pane {
            let _ = self.api.pane_close(&pane).await;
            self.panes.borrow_mut().remove(gid);
            self.receipts.borrow_mut().remove(gid);
        }
        if let Some(dir) = made.files {
            self.sockets.borrow_mut().remove(gid);
            let _ = launch::remove_files(&dir);
            self.cfg.launch.tokens.revoke(gid.as_str());
        }
        if made.worktree {
            let _ = worktree::remove(&self.cfg.worktrees, gid.as_str()).await;
        }
    }

    async fn launch_steps(
        &self,
        gid: &SessionId,
        spec: &SpawnSpec,
        made: &mut Made,
    ) -> Result<Launched, SpawnError> {
        let cfg = &self.cfg;
        let profile = spec.profile.as_str();
        let Some(p) = cfg.profiles.get(profile) else {
            return Err(refused(format!("no profile {profile:?} on this host")));
        };
        let boxed = self.sandboxed(profile, p)?;
        let nonce = launch::fresh_nonce();
        let member = launch::Member {
            gid: gid.as_str(),
            group: spec.group.as_deref(),
            nonce: &nonce,
            boxed,
        };
        let mut plan = launch::plan(&cfg.launch, profile, p, member, &cfg.parent_env)
            .map_err(|e| refused(e.to_string()))?;
        if let Some(cwd) = &spec.cwd {
            plan.cwd = Some(self.room_cwd(cwd, boxed.is_some())?);
        }
        let mut git_room = None;
        if let Some(w) = &spec.worktree {
            let cut = worktree::cut(&cfg.worktrees, gid.as_str(), w)
                .await
                .map_err(|e| refused(e.to_string()))?;
            made.worktree = true;
            plan.cwd = Some(cut.dir.to_string_lossy().into_owned());
            git_room = Some(sandbox::GitRoom {
                common_dir: cut.common_dir,
                admin_dir: cut.admin_dir,
                borrowed: cut.borrowed,
            });
        }
        let dir = cfg
            .launch
            .member_dir(gid.as_str())
            .ok_or_else(|| refused(format!("gid {gid} is not a plain name")))?;
        if plan.agent.is_some() && plan.cwd.is_none() {
            // An agent trusts only a folder it was told of: one with no cwd of its own
            // starts in its (empty) home.
            plan.cwd = Some(dir.join("home").to_string_lossy().into_owned());
        }
        plan.prepare_agent(p.config_template.as_deref())
            .map_err(|e| refused(format!("profile {profile:?}: {e}")))?;
        made.files = Some(dir.clone());
        if let Some(network) = boxed {
            self.build_room(profile, p, &dir, &mut plan, git_room, network)?;
        }
        self.write_and_serve(gid, &dir, &plan)?;
        cfg.launch.tokens.record(gid.as_str(), &nonce);
        let pane = self.place(gid, &plan).await?;
        made.pane = Some(pane.clone());
        let charter = plan.receipt.as_ref().map(|r| r.sha256.clone());
        self.on_placed(gid, profile, boxed, &pane, &mut plan);
        // Its readiness gate is the core's: it looks at the pane from here on.
        Ok(Launched {
            readiness: plan.gate,
            charter,
            reports: plan.reports,
        })
    }

    /// Whether a member of `profile` runs sandboxed, and on which network; refused when it
    /// must and this host cannot.
    fn sandboxed(&self, profile: &str, p: &Profile) -> Result<Option<Network>, SpawnError> {
        Ok(match (p.sandbox, &self.cfg.sandbox.availability) {
            (false, _) => None,
            (true, sandbox::Availability::Ready) => Some(p.network),
            (true, sandbox::Availability::Unavailable(why)) if self.cfg.sandbox_required => {
                return Err(refused(format!(
                    "profile {profile:?} runs sandboxed and this host cannot: {why}"
                )));
            }
            (true, _) => None,
        })
    }

    /// The room a spawn's `cwd` names, checked here, on the member's host (a path means
    /// nothing anywhere else); for a sandboxed member, never a room it must not write, and
    /// the path checked is the path bound (a symlink swapped after the check cannot point the
    /// bind elsewhere).
    fn room_cwd(&self, cwd: &str, boxed: bool) -> Result<String, SpawnError> {
        let at = Path::new(cwd);
        if !at.is_dir() {
            return Err(refused(format!(
                "cwd {cwd:?} is not a directory on this host"
            )));
        }
        if !boxed {
            return Ok(cwd.to_string());
        }
        let home = self.cfg.parent_env.get("HOME").map(Path::new);
        if let Some(why) = sandbox::unfit_cwd(&self.cfg.sandbox, at, home) {
            return Err(refused(format!(
                "cwd {cwd:?} cannot be a member's room: {why}"
            )));
        }
        Ok(std::fs::canonicalize(at)
            .map(|real| real.to_string_lossy().into_owned())
            .unwrap_or_else(|_| cwd.to_string()))
    }

    /// The sandbox's rooms made, its program checked to be visible inside, and the plan
    /// wrapped in it.
    fn build_room(
        &self,
        profile: &str,
        p: &Profile,
        dir: &Path,
        plan: &mut Launch,
        git: Option<sandbox::GitRoom>,
        network: Network,
    ) -> Result<(), SpawnError> {
        let cfg = &self.cfg;
        let room = sandbox::Room {
            member_dir: dir.to_path_buf(),
            home: dir.join("home"),
            own: plan.agent.iter().map(|a| a.dir().to_path_buf()).collect(),
            cwd: plan.cwd.as_ref().map(PathBuf::from),
            git,
            network,
            shown: p.sandbox_paths.clone(),
            gateway_port: launch::url_port_path(&cfg.launch.mcp_url).0,
        };
        let mut made = launch::write_files(dir, &[]);
        for d in std::iter::once(&room.home)
            .chain(&room.own)
            .cloned()
            .chain(room.git.iter().flat_map(sandbox::GitRoom::writable))
        {
            made = made.and_then(|()| std::fs::create_dir_all(&d));
        }
        made.map_err(|e| refused(format!("preparing the sandbox: {e}")))?;
        let path = plan.env.get("PATH").map(String::as_str);
        if let Some((program, by)) =
            sandbox::hidden_program(&cfg.sandbox, &room, &plan.program, path)
        {
            return Err(refused(format!(
                "profile {profile:?}: its program {} lies under {}, which the members' sandbox hides; install it elsewhere or add its directory to the profile's sandbox_paths",
                program.display(),
                by.display()
            )));
        }
        plan.sandbox = Some(sandbox::wrap(&cfg.sandbox, &room, &plan.program));
        Ok(())
    }

    /// The member's files written and its filtered herdr socket served.
    fn write_and_serve(
        &self,
        gid: &SessionId,
        dir: &Path,
        plan: &Launch,
    ) -> Result<(), SpawnError> {
        let home = dir.join("home");
        launch::write_files(dir, &plan.all_files())
            .and_then(|()| std::fs::write(dir.join(launch::STARTING_FILE), starting_mark(plan)))
            .and_then(
                |()| match plan.cwd.as_deref() == Some(&*home.to_string_lossy()) {
                    true => std::fs::create_dir_all(&home),
                    false => Ok(()),
                },
            )
            .map_err(|e| refused(format!("writing {}: {e}", dir.display())))?;
        let served = self
            .serve_socket(gid, dir, None)
            .map_err(|e| refused(format!("serving the member's herdr socket: {e}")))?;
        self.sockets.borrow_mut().insert(gid.clone(), served);
        Ok(())
    }

    /// Its pane placed in the members' tab (the fleet's workspace made first on a fresh herdr).
    async fn place(&self, gid: &SessionId, plan: &Launch) -> Result<String, SpawnError> {
        let new = NewPane {
            label: format!("{LABEL_PREFIX}{gid}"),
            cwd: plan.cwd.clone(),
            command: plan.argv(),
            env: BTreeMap::new(),
            workspace_id: None,
            tab_label: Some(self.cfg.member_tab.clone()),
        };
        let mut placed = self.api.layout_apply(&new).await;
        if matches!(&placed, Err(e) if e.code() == Some("workspace_not_found")) {
            placed = match self.api.workspace_create(&self.cfg.member_tab).await {
                Ok(_) => self.api.layout_apply(&new).await,
                Err(e) => Err(e),
            };
        }
        placed.map_err(|e| port_error(e).into())
    }

    /// A placed pane made known: to its socket, the gid ↔ pane map, the events watcher, the
    /// log, and the charter receipts.
    fn on_placed(
        &self,
        gid: &SessionId,
        profile: &str,
        boxed: Option<Network>,
        pane: &str,
        plan: &mut Launch,
    ) {
        if let Some(s) = self.sockets.borrow().get(gid) {
            s.set_pane(pane);
        }
        self.panes
            .borrow_mut()
            .insert(gid.clone(), pane.to_string());
        self.placed.notify_one();
        tracing::info!(%gid, profile, sandboxed = boxed.is_some(), network = ?boxed, "member launched");
        if let Some(r) = plan.receipt.take() {
            tracing::info!(%gid, profile, charter_sha256 = %r.sha256, "member charter");
            self.receipts.borrow_mut().insert(gid.clone(), r);
        }
    }
}

/// The starting mark's content: the gate the launch recorded, for a restart to go on with.
fn starting_mark(plan: &Launch) -> Vec<u8> {
    serde_json::to_vec(&plan.gate).unwrap_or_default()
}

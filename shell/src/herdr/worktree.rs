//! Per-member git worktrees (ch. 9's `GitWorktrees`), shelling `git`, every call bounded.
//!
//! A member's worktree is `<root>/<gid>` on a branch `fleet/<gid>` (its commits stay reachable
//! after the worktree goes). A repository named by URL — how a cross-host spawn names one — is
//! cloned bare into `<cache>/<sha256(url)[..16]>` on first use and fetched when a commit is
//! missing. Repo-level `.mcp.json` and opencode configs are neutralised inside the worktree
//! (marked skip-worktree, so the member never commits the change), so a member never inherits
//! the lead's MCP mounts.

use fleet_core::Worktree;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

/// Where worktrees and clones go, the bound on each git call, and what git may reach.
#[derive(Clone, Debug)]
pub struct WorktreeConfig {
    pub root: PathBuf,
    pub cache: PathBuf,
    pub git: PathBuf,
    pub timeout: Duration,
    /// Transports a repository URL may use (git's `protocol.<name>.allow`); every other one,
    /// `ext` and `fd` above all, is `never`.
    pub protocols: Vec<String>,
    /// Repository URLs fleetd clones: an entry matches exactly, or as a prefix when it ends in
    /// `/`. Empty: no URL is cloned (a cross-host SPAWN could otherwise make this host clone
    /// any repository its credentials reach).
    pub repo_allow: Vec<String>,
    /// git's `credential.helper` for clones and fetches; none unless configured.
    pub credential_helper: Option<String>,
}

impl WorktreeConfig {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        WorktreeConfig {
            cache: root.join(".cache"),
            root,
            git: PathBuf::from("git"),
            timeout: Duration::from_secs(120),
            protocols: vec!["https".into(), "ssh".into()],
            repo_allow: Vec::new(),
            credential_helper: None,
        }
    }

    /// Where the daemon records a member's worktree's git directories (never read back from
    /// the worktree, which the member can rewrite; the sandbox hides this directory).
    fn record(&self, gid: &str) -> PathBuf {
        self.root.join(".records").join(gid)
    }

    /// A member's own bare repository for a URL: objects borrowed from the cache (read-only
    /// to the member), its commits its own.
    fn own_repo(&self, gid: &str) -> PathBuf {
        self.root.join(".repos").join(gid)
    }

    fn allowed(&self, url: &str) -> bool {
        self.repo_allow
            .iter()
            .any(|a| a == url || (a.ends_with('/') && url.starts_with(a.as_str())))
    }
}

/// The transport a repository URL uses, as git's `protocol.allow` names it.
pub fn transport(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, _)) => match scheme.to_ascii_lowercase().as_str() {
            "git+ssh" | "ssh+git" => "ssh".into(),
            s => s.into(),
        },
        // scp-like `user@host:path`
        None => "ssh".into(),
    }
}

/// The first key of a repository's own config (`git config --local --list`) that would make
/// git run a command fleetd cannot override on its command line: a filter, diff or merge
/// driver, a remote's upload/receive program or helper, a proxy or askpass program, an include
/// (of anything), worktree-scoped config, or a moved work tree.
pub fn planted(config: &str) -> Option<String> {
    const EXACT: &[&str] = &[
        "core.gitproxy",
        "core.askpass",
        "core.editor",
        "core.pager",
        "core.alternaterefscommand",
        "core.worktree",
        "diff.external",
        "include.path",
        "extensions.worktreeconfig",
        "sequence.editor",
        "gpg.program",
        "uploadpack.packobjectshook",
        "protocol.allow",
    ];
    const SCOPED: &[(&str, &[&str])] = &[
        ("filter", &["clean", "smudge", "process"]),
        ("diff", &["textconv", "command"]),
        ("merge", &["driver"]),
        ("remote", &["uploadpack", "receivepack", "vcs"]),
        ("credential", &["helper"]),
        ("includeif", &["path"]),
        ("gpg", &["program"]),
        // `protocol.<name>.allow`: a repository may not widen the transports.
        ("protocol", &["allow"]),
    ];
    for line in config.lines() {
        let key = line.split_once('=').map_or(line, |(k, _)| k).trim();
        let lower = key.to_ascii_lowercase();
        if EXACT.contains(&lower.as_str()) {
            return Some(key.to_string());
        }
        let (Some((section, _)), Some((_, var))) = (lower.split_once('.'), lower.rsplit_once('.'))
        else {
            continue;
        };
        let scoped = lower.matches('.').count() >= 2;
        if scoped
            && SCOPED
                .iter()
                .any(|(s, vars)| *s == section && vars.contains(&var))
        {
            return Some(key.to_string());
        }
    }
    None
}

/// Repo-level agent configs and what each is replaced with inside a member's worktree.
const NEUTRALISED: &[(&str, &str)] = &[
    (".mcp.json", "{\"mcpServers\": {}}\n"),
    (
        "opencode.json",
        "{\"$schema\": \"https://opencode.ai/config.json\"}\n",
    ),
    (
        "opencode.jsonc",
        "{\"$schema\": \"https://opencode.ai/config.json\"}\n",
    ),
];

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WorktreeError {
    #[error("worktree for {gid}: {why}")]
    Invalid { gid: String, why: String },
    #[error("git {args}: {why}")]
    Git { args: String, why: String },
    #[error("repository {repo}: its config sets {key}, which would make git run a command; fleetd runs no git there")]
    Planted { repo: String, key: String },
}

/// What removing a member's worktree did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Removed {
    Removed,
    /// Removed after its work — uncommitted changes, untracked files, commits off its branch —
    /// was committed to `wip` (`refs/wip/fleet/<gid>`, parent: its HEAD) in its repository.
    Snapshotted {
        wip: String,
        why: String,
    },
    /// Left in place, no git run there: its git links do not lead where the daemon recorded.
    Kept(String),
    /// There was none.
    Absent,
}

/// Runs git with `args` in `dir` (if any), bounded; returns stdout. A member can write its
/// worktree and, unsandboxed, its repository's config and hooks, so git runs with none of the
/// daemon's environment but `PATH`, `HOME` and `SSH_AUTH_SOCK`, no global or system config,
/// no hooks, no fsmonitor, ssh as itself, only the configured transports and credential
/// helper — and never in a repository whose own config names a command (`planted`).
async fn git(
    cfg: &WorktreeConfig,
    dir: Option<&Path>,
    args: &[&str],
) -> Result<String, WorktreeError> {
    run(cfg, dir, &[], &[], args).await
}

/// `git` with extra environment (`GIT_COMMON_DIR`) and extra `-c` settings.
async fn run(
    cfg: &WorktreeConfig,
    dir: Option<&Path>,
    env: &[(&str, &Path)],
    settings: &[&str],
    args: &[&str],
) -> Result<String, WorktreeError> {
    let mut cmd = Command::new(&cfg.git);
    cmd.env_clear();
    for keep in ["PATH", "HOME", "SSH_AUTH_SOCK"] {
        if let Some(v) = std::env::var_os(keep) {
            cmd.env(keep, v);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(d) = dir {
        cmd.arg("-C").arg(d);
    }
    let mut c: Vec<String> = [
        "core.hooksPath=/dev/null",
        "core.fsmonitor=false",
        "core.sshCommand=ssh",
        "protocol.allow=never",
        // A per-protocol key outranks protocol.allow: these two run commands, never allowed.
        "protocol.ext.allow=never",
        "protocol.fd.allow=never",
        "credential.helper=",
        // Never into a nested repository (a gitlink) a member made: its own config is not
        // checked, and a child git there would run what it names.
        "submodule.recurse=false",
        "diff.ignoreSubmodules=all",
        "status.submoduleSummary=false",
        // A commit fetched by id is pinned (below), and nothing is pruned under members'
        // repositories that borrow the cache's objects.
        "gc.auto=0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    c.extend(
        cfg.protocols
            .iter()
            .filter(|p| !matches!(p.as_str(), "ext" | "fd"))
            .map(|p| format!("protocol.{p}.allow=always")),
    );
    if !cfg.protocols.iter().any(|p| p == "file") {
        c.push("protocol.file.allow=never".into());
    }
    c.extend(
        cfg.credential_helper
            .iter()
            .map(|h| format!("credential.helper={h}")),
    );
    c.extend(settings.iter().map(|s| s.to_string()));
    for setting in &c {
        cmd.arg("-c").arg(setting);
    }
    cmd.args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let err = |why: String| WorktreeError::Git {
        args: args.join(" "),
        why,
    };
    let out = match tokio::time::timeout(cfg.timeout, cmd.output()).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => return Err(err(e.to_string())),
        Err(_) => return Err(err(format!("no end within {} s", cfg.timeout.as_secs()))),
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(err(format!("{}: {}", out.status, stderr.trim())));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Refuses a repository whose own config names a command git would run (`planted`).
async fn clean_config(cfg: &WorktreeConfig, git_dir: &Path) -> Result<(), WorktreeError> {
    let gd = git_dir.to_string_lossy().into_owned();
    let listed = git(
        cfg,
        None,
        &["--git-dir", &gd, "config", "--local", "--list"],
    )
    .await
    // No config at all is a clean one.
    .or_else(|e| match &e {
        WorktreeError::Git { why, .. } if why.contains("exit status: 1") => Ok(String::new()),
        _ => Err(e),
    })?;
    match planted(&listed) {
        Some(key) => Err(WorktreeError::Planted { repo: gd, key }),
        None => Ok(()),
    }
}

/// Temp clone directories are unique within the process too (two spawns of one repository).
static CLONES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The bare clone of `url` in the cache, made on first use, holding `commit`.
async fn cached(cfg: &WorktreeConfig, url: &str, commit: &str) -> Result<PathBuf, WorktreeError> {
    let key: String = Sha256::digest(url.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = cfg.cache.join(&key);
    if !path.exists() {
        std::fs::create_dir_all(&cfg.cache).map_err(|e| WorktreeError::Git {
            args: "clone".into(),
            why: format!("{}: {e}", cfg.cache.display()),
        })?;
        // Cloned aside, then moved in: a concurrent spawn of the same repository either wins
        // the rename or finds the clone in place.
        let n = CLONES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = cfg
            .cache
            .join(format!("{key}.{}.{n}.tmp", std::process::id()));
        let tmp_s = tmp.to_string_lossy().into_owned();
        let _ = std::fs::remove_dir_all(&tmp);
        git(
            cfg,
            None,
            &["clone", "--bare", "--quiet", "--", url, &tmp_s],
        )
        .await?;
        if std::fs::rename(&tmp, &path).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    // The cache is the daemon's alone (hidden from members), but check it as any repository.
    clean_config(cfg, &path).await?;
    let want = format!("{commit}^{{commit}}");
    if git(cfg, Some(&path), &["cat-file", "-e", &want])
        .await
        .is_err()
    {
        // By id where the server allows it, else every branch — into origin's namespace,
        // never over the `fleet/<gid>` branches members work on.
        let by_id = ["fetch", "--quiet", "origin", "--end-of-options", commit];
        if git(cfg, Some(&path), &by_id).await.is_err() {
            let all = [
                "fetch",
                "--quiet",
                "origin",
                "+refs/heads/*:refs/remotes/origin/*",
            ];
            git(cfg, Some(&path), &all).await?;
        }
        git(cfg, Some(&path), &["cat-file", "-e", &want]).await?;
        // Fetched by id it is in no ref: pinned, so no later gc takes it from the members'
        // repositories that borrow it.
        let pin = format!("refs/fleet/pins/{commit}");
        git(cfg, Some(&path), &["update-ref", &pin, commit]).await?;
    }
    Ok(path)
}

/// A member's fresh worktree and where its git lives, as the daemon found them at the cut.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    pub dir: PathBuf,
    /// Its repository's common git directory, as git said it from the repository itself
    /// (never read back from the worktree's `.git` file, which the member can rewrite).
    pub common_dir: PathBuf,
    /// The worktree's own git directory (`<common>/worktrees/<name>`): index, HEAD.
    pub admin_dir: PathBuf,
    /// The clone cache a URL member's repository borrows objects from (read-only to it).
    pub borrowed: Option<PathBuf>,
}

/// A URL member's own bare repository, its objects borrowed from this host's clone cache
/// (fetched at the exact commit), after the URL passes the protocol and repository allowlists;
/// with the cache it borrows from.
async fn url_repo(
    cfg: &WorktreeConfig,
    gid: &str,
    w: &Worktree,
) -> Result<(PathBuf, Option<PathBuf>), WorktreeError> {
    let invalid = |why: String| WorktreeError::Invalid {
        gid: gid.to_string(),
        why,
    };
    let t = transport(&w.repo);
    if !cfg.protocols.contains(&t) {
        return Err(invalid(format!(
            "{} uses {t}, which is not on [herdr] git_protocols {:?}",
            w.repo, cfg.protocols
        )));
    }
    if !cfg.allowed(&w.repo) {
        return Err(invalid(format!(
            "{} is not on [herdr] repo_allow; this host clones no other repository",
            w.repo
        )));
    }
    let commit = w
        .commit
        .as_deref()
        .ok_or_else(|| invalid("a repository URL needs the exact commit".into()))?;
    let cache = cached(cfg, &w.repo, commit).await?;
    // The member's own repository, objects borrowed from the cache: the member writes
    // objects and its branch there, never into the cache other members share.
    let own = cfg.own_repo(gid);
    if !own.exists() {
        std::fs::create_dir_all(own.parent().unwrap_or(&cfg.root))
            .map_err(|e| invalid(format!("{}: {e}", own.display())))?;
        let (from, to) = (
            cache.to_string_lossy().into_owned(),
            own.to_string_lossy().into_owned(),
        );
        let clone = ["clone", "--bare", "--shared", "--quiet", "--", &from, &to];
        run(cfg, None, &[], &["protocol.file.allow=always"], &clone).await?;
    }
    Ok((own, Some(cache)))
}

/// Cuts member `gid`'s worktree as `w` asks.
pub async fn cut(cfg: &WorktreeConfig, gid: &str, w: &Worktree) -> Result<Cut, WorktreeError> {
    let invalid = |why: String| WorktreeError::Invalid {
        gid: gid.to_string(),
        why,
    };
    if !super::launch::safe_gid(gid) {
        return Err(invalid("the gid is not a plain name".into()));
    }
    if let Some(why) = w.invalid(false) {
        return Err(invalid(why));
    }
    let dir = cfg.root.join(gid);
    if dir.exists() {
        return Err(invalid(format!("{} already exists", dir.display())));
    }
    std::fs::create_dir_all(&cfg.root)
        .map_err(|e| invalid(format!("{}: {e}", cfg.root.display())))?;
    let (repo, borrowed) = if w.is_url() {
        url_repo(cfg, gid, w).await?
    } else {
        (PathBuf::from(&w.repo), None)
    };
    let common = ["rev-parse", "--path-format=absolute", "--git-common-dir"];
    let common_dir = PathBuf::from(git(cfg, Some(&repo), &common).await?.trim());
    clean_config(cfg, &common_dir).await?;
    let (dir_s, branch) = (dir.to_string_lossy().into_owned(), format!("fleet/{gid}"));
    let rev = w.commit.as_deref().unwrap_or("HEAD");
    // The member's branch may be left from an earlier try of this spawn (a failed gate): it is
    // reset only if it holds no commits of its own.
    let exists = [
        "rev-parse",
        "--verify",
        "--quiet",
        &format!("refs/heads/{branch}"),
    ];
    let create = if git(cfg, Some(&repo), &exists).await.is_ok() {
        let ancestor = ["merge-base", "--is-ancestor", &branch, rev];
        if git(cfg, Some(&repo), &ancestor).await.is_err() {
            return Err(invalid(format!("{branch} exists with commits of its own")));
        }
        "-B"
    } else {
        "-b"
    };
    git(
        cfg,
        Some(&repo),
        &[
            "worktree",
            "add",
            "--quiet",
            create,
            &branch,
            &dir_s,
            "--end-of-options",
            rev,
        ],
    )
    .await?;
    // Read once, now, before the member exists; recorded where it cannot write.
    let admin = git(cfg, Some(&dir), &["rev-parse", "--absolute-git-dir"]).await;
    let cut = match admin {
        Ok(a) => Cut {
            dir: dir.clone(),
            common_dir,
            admin_dir: PathBuf::from(a.trim()),
            borrowed,
        },
        Err(e) => {
            let _ = git(cfg, Some(&repo), &["worktree", "remove", "--force", &dir_s]).await;
            return Err(e);
        }
    };
    let recorded = write_record(cfg, gid, &cut);
    if let Err(e) = recorded.map_err(|e| invalid(format!("recording the worktree: {e}"))) {
        let _ = git(cfg, Some(&repo), &["worktree", "remove", "--force", &dir_s]).await;
        return Err(e);
    }
    if let Err(e) = neutralise(cfg, &dir).await {
        let _ = remove(cfg, gid).await;
        return Err(e);
    }
    Ok(cut)
}

fn write_record(cfg: &WorktreeConfig, gid: &str, cut: &Cut) -> std::io::Result<()> {
    let path = cfg.record(gid);
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p)?;
    }
    let text = format!(
        "{}\n{}\n",
        cut.common_dir.to_string_lossy(),
        cut.admin_dir.to_string_lossy()
    );
    std::fs::write(path, text)
}

fn read_record(cfg: &WorktreeConfig, gid: &str) -> Option<(PathBuf, PathBuf)> {
    let text = std::fs::read_to_string(cfg.record(gid)).ok()?;
    let mut lines = text.lines();
    let (common, admin) = (lines.next()?, lines.next()?);
    Some((PathBuf::from(common), PathBuf::from(admin)))
}

/// Whether the worktree's git links still say what the daemon recorded: its `.git` file names
/// `admin`, and `admin/commondir` leads back to `common`. A member that rewrote them could
/// point git at a repository of its own making.
fn links_hold(dir: &Path, common: &Path, admin: &Path) -> Result<(), String> {
    let gitfile = std::fs::read_to_string(dir.join(".git")).map_err(|e| format!(".git: {e}"))?;
    let named = gitfile.trim().strip_prefix("gitdir: ").unwrap_or("");
    if Path::new(named) != admin {
        return Err(format!(".git names {named:?}, not {}", admin.display()));
    }
    let cd =
        std::fs::read_to_string(admin.join("commondir")).map_err(|e| format!("commondir: {e}"))?;
    let resolved = std::fs::canonicalize(admin.join(cd.trim()))
        .map_err(|e| format!("commondir {:?}: {e}", cd.trim()))?;
    let want = std::fs::canonicalize(common).map_err(|e| format!("{}: {e}", common.display()))?;
    if resolved != want {
        return Err(format!("commondir leads to {}", resolved.display()));
    }
    Ok(())
}

/// Replaces repo-level agent configs in a fresh worktree; tracked ones are marked
/// skip-worktree so the change never shows in `git status` or a commit.
async fn neutralise(cfg: &WorktreeConfig, dir: &Path) -> Result<(), WorktreeError> {
    for (name, neutral) in NEUTRALISED {
        let path = dir.join(name);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let tracked = git(cfg, Some(dir), &["ls-files", "--error-unmatch", "--", name])
            .await
            .is_ok();
        if tracked {
            git(
                cfg,
                Some(dir),
                &["update-index", "--skip-worktree", "--", name],
            )
            .await?;
        }
        let failed = |e: std::io::Error| WorktreeError::Invalid {
            gid: dir.display().to_string(),
            why: format!("neutralising {name}: {e}"),
        };
        // A committed symlink is replaced, never written through (it could point anywhere).
        if meta.file_type().is_symlink() {
            std::fs::remove_file(&path).map_err(failed)?;
        }
        std::fs::write(&path, neutral).map_err(failed)?;
    }
    Ok(())
}

/// Removes member `gid`'s worktree unless it holds uncommitted work (its branch stays). git
/// runs on the directories the daemon recorded at the cut, after checking the worktree's links
/// still lead there and the repository's config names no command.
pub async fn remove(cfg: &WorktreeConfig, gid: &str) -> Result<Removed, WorktreeError> {
    if !super::launch::safe_gid(gid) {
        return Ok(Removed::Absent);
    }
    let dir = cfg.root.join(gid);
    if !dir.exists() {
        let _ = std::fs::remove_file(cfg.record(gid));
        return Ok(Removed::Absent);
    }
    let Some((common, admin)) = read_record(cfg, gid) else {
        return Ok(Removed::Kept(
            "no record of its repository: left for the operator".into(),
        ));
    };
    if let Err(why) = links_hold(&dir, &common, &admin) {
        return Ok(Removed::Kept(format!(
            "its git links were rewritten ({why}): left for the operator, no git run there"
        )));
    }
    clean_config(cfg, &common).await?;
    let (admin_s, dir_s) = (
        admin.to_string_lossy().into_owned(),
        dir.to_string_lossy().into_owned(),
    );
    let env = [("GIT_COMMON_DIR", common.as_path())];
    let in_tree = |args: &'static [&'static str]| {
        let mut a = vec!["--git-dir", admin_s.as_str(), "--work-tree", dir_s.as_str()];
        a.extend_from_slice(args);
        a
    };
    let status = in_tree(&["status", "--porcelain", "--ignore-submodules=all"]);
    let dirty = run(cfg, None, &env, &[], &status).await?;
    // Commits the member made off its branch (a detached HEAD) live only in this worktree.
    let branch = format!("fleet/{gid}");
    let mut on_branch = in_tree(&["merge-base", "--is-ancestor", "HEAD"]);
    on_branch.push(&branch);
    let off_branch = run(cfg, None, &env, &[], &on_branch).await.is_err();
    let why = match (dirty.trim(), off_branch) {
        ("", false) => None,
        ("", true) => Some(format!("HEAD has commits not on {branch}")),
        (d, false) => Some(format!("uncommitted: {d}")),
        (d, true) => Some(format!(
            "uncommitted: {d}; HEAD has commits not on {branch}"
        )),
    };
    let snapshot = match why {
        Some(why) => Some((snapshot(cfg, gid, &common, &admin, &dir).await?, why)),
        None => None,
    };
    let common_s = common.to_string_lossy().into_owned();
    git(
        cfg,
        None,
        &[
            "--git-dir",
            &common_s,
            "worktree",
            "remove",
            "--force",
            &dir_s,
        ],
    )
    .await?;
    let _ = std::fs::remove_file(cfg.record(gid));
    Ok(match snapshot {
        Some((wip, why)) => Removed::Snapshotted { wip, why },
        None => Removed::Removed,
    })
}

/// The ref a member's unfinished work is kept under in its repository.
pub fn wip_ref(gid: &str) -> String {
    format!("refs/wip/fleet/{gid}")
}

/// Commits everything in member `gid`'s worktree — tracked changes and untracked files, not
/// ignored ones — on top of its HEAD, through a scratch index (the member's own index and
/// files are not touched), and points `wip_ref(gid)` at it. Returns the ref.
async fn snapshot(
    cfg: &WorktreeConfig,
    gid: &str,
    common: &Path,
    admin: &Path,
    dir: &Path,
) -> Result<String, WorktreeError> {
    let index = cfg.root.join(".records").join(format!("{gid}.index"));
    let _ = std::fs::remove_file(&index);
    let (admin_s, dir_s) = (
        admin.to_string_lossy().into_owned(),
        dir.to_string_lossy().into_owned(),
    );
    let env = [
        ("GIT_COMMON_DIR", common),
        ("GIT_INDEX_FILE", index.as_path()),
    ];
    let ident = ["user.name=fleetd", "user.email=fleetd@localhost"];
    let tree_args = |args: &[&'static str]| {
        let mut a = vec!["--git-dir", admin_s.as_str(), "--work-tree", dir_s.as_str()];
        a.extend_from_slice(args);
        a
    };
    let result = async {
        run(cfg, None, &env, &ident, &tree_args(&["read-tree", "HEAD"])).await?;
        run(
            cfg,
            None,
            &env,
            &ident,
            &tree_args(&["add", "-A", "--", "."]),
        )
        .await?;
        let tree = run(cfg, None, &env, &ident, &tree_args(&["write-tree"])).await?;
        let message = format!("fleetd: unfinished work of member {gid}, kept at its removal");
        let mut commit_args = tree_args(&["commit-tree", "-p", "HEAD", "-m"]);
        commit_args.push(&message);
        commit_args.push(tree.trim());
        let commit = run(cfg, None, &env, &ident, &commit_args).await?;
        let wip = wip_ref(gid);
        let mut update = tree_args(&["update-ref"]);
        update.push(&wip);
        update.push(commit.trim());
        run(cfg, None, &env, &ident, &update).await?;
        remember_wip_repo(cfg, common);
        Ok(wip)
    }
    .await;
    let _ = std::fs::remove_file(&index);
    result
}

/// The repositories holding members' wip refs, one per line (the retention sweep's list).
fn wip_repos(cfg: &WorktreeConfig) -> PathBuf {
    cfg.root.join(".records").join("wip-repos")
}

fn remember_wip_repo(cfg: &WorktreeConfig, common: &Path) {
    let path = wip_repos(cfg);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let line = common.to_string_lossy();
    if !text.lines().any(|l| l == line) {
        let _ = std::fs::write(&path, format!("{text}{line}\n"));
    }
}

/// Deletes the wip refs older than `retention_s` (by their commit's date) in every repository
/// that got one; `now_unix_s` is the wall clock (an input). Returns the refs deleted.
pub async fn sweep_wip(cfg: &WorktreeConfig, now_unix_s: u64, retention_s: u64) -> Vec<String> {
    let text = std::fs::read_to_string(wip_repos(cfg)).unwrap_or_default();
    let mut kept = String::new();
    let mut deleted = Vec::new();
    for repo in text.lines().filter(|l| !l.is_empty()) {
        let common = Path::new(repo);
        if !common.is_dir() || clean_config(cfg, common).await.is_err() {
            continue;
        }
        let listed = git(
            cfg,
            None,
            &[
                "--git-dir",
                repo,
                "for-each-ref",
                "--format=%(refname) %(committerdate:unix)",
                "refs/wip/fleet/",
            ],
        )
        .await
        .unwrap_or_default();
        let mut left = 0;
        for line in listed.lines() {
            let Some((name, at)) = line.rsplit_once(' ') else {
                continue;
            };
            let at: u64 = at.parse().unwrap_or(u64::MAX);
            if at.saturating_add(retention_s) <= now_unix_s {
                let gone = git(cfg, None, &["--git-dir", repo, "update-ref", "-d", name]).await;
                if gone.is_ok() {
                    deleted.push(format!("{repo} {name}"));
                    continue;
                }
            }
            left += 1;
        }
        if left > 0 {
            kept.push_str(repo);
            kept.push('\n');
        }
    }
    let _ = std::fs::write(wip_repos(cfg), kept);
    deleted
}

/// Removes the worktrees under the root that no live member owns (members that died with the
/// daemon down, or whose removal failed), each as `remove` does: work snapshotted first.
pub async fn sweep_orphans(
    cfg: &WorktreeConfig,
    live: &[fleet_core::SessionId],
) -> Vec<(String, Result<Removed, WorktreeError>)> {
    let Ok(entries) = std::fs::read_dir(&cfg.root) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| super::launch::safe_gid(n) && !live.iter().any(|g| g.as_str() == n))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for gid in names {
        let r = remove(cfg, &gid).await;
        out.push((gid, r));
    }
    out
}

#[cfg(test)]
mod tests;

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

/// Where worktrees and clones go, and the bound on each git call.
#[derive(Clone, Debug)]
pub struct WorktreeConfig {
    pub root: PathBuf,
    pub cache: PathBuf,
    pub git: PathBuf,
    pub timeout: Duration,
}

impl WorktreeConfig {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        WorktreeConfig {
            cache: root.join(".cache"),
            root,
            git: PathBuf::from("git"),
            timeout: Duration::from_secs(120),
        }
    }
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
}

/// What removing a member's worktree did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Removed {
    Removed,
    /// Left in place: it has uncommitted changes (listed) or commits off its branch, which
    /// removing would lose.
    Kept(String),
    /// There was none.
    Absent,
}

/// Runs git with `args` in `dir` (if any), bounded; returns stdout. A member can write its
/// worktree's (shared) git config and hooks, so git runs here with none of the daemon's
/// environment but `PATH`/`HOME`, no system config, no hooks and no fsmonitor: nothing a
/// member planted runs with the daemon's rights.
async fn git(
    cfg: &WorktreeConfig,
    dir: Option<&Path>,
    args: &[&str],
) -> Result<String, WorktreeError> {
    let mut cmd = Command::new(&cfg.git);
    cmd.env_clear();
    for keep in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(keep) {
            cmd.env(keep, v);
        }
    }
    if let Some(d) = dir {
        cmd.arg("-C").arg(d);
    }
    cmd.args([
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "core.fsmonitor=false",
    ])
    .args(args)
    .env("GIT_CONFIG_NOSYSTEM", "1")
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

/// A 40-hex commit id (never an option or a revision expression).
fn commit_id(c: &str) -> bool {
    c.len() == 40 && c.bytes().all(|b| b.is_ascii_hexdigit())
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
    }
    Ok(path)
}

/// A member's fresh worktree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    pub dir: PathBuf,
    /// Its repository's common git directory, as git said it from the repository itself
    /// (never read back from the worktree's `.git` file, which the member can rewrite).
    pub common_dir: PathBuf,
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
    if let Some(c) = w.commit.as_deref().filter(|c| !commit_id(c)) {
        return Err(invalid(format!("commit {c:?} is not a 40-hex commit id")));
    }
    let dir = cfg.root.join(gid);
    if dir.exists() {
        return Err(invalid(format!("{} already exists", dir.display())));
    }
    let repo = if w.is_url() {
        let commit = w
            .commit
            .as_deref()
            .ok_or_else(|| invalid("a repository URL needs the exact commit".into()))?;
        cached(cfg, &w.repo, commit).await?
    } else {
        PathBuf::from(&w.repo)
    };
    std::fs::create_dir_all(&cfg.root)
        .map_err(|e| invalid(format!("{}: {e}", cfg.root.display())))?;
    let common = ["rev-parse", "--path-format=absolute", "--git-common-dir"];
    let common_dir = PathBuf::from(git(cfg, Some(&repo), &common).await?.trim());
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
    if let Err(e) = neutralise(cfg, &dir).await {
        let _ = remove(cfg, gid).await;
        return Err(e);
    }
    Ok(Cut { dir, common_dir })
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

/// Removes member `gid`'s worktree unless it holds uncommitted work (its branch stays).
pub async fn remove(cfg: &WorktreeConfig, gid: &str) -> Result<Removed, WorktreeError> {
    if !super::launch::safe_gid(gid) {
        return Ok(Removed::Absent);
    }
    let dir = cfg.root.join(gid);
    if !dir.exists() {
        return Ok(Removed::Absent);
    }
    let dirty = git(cfg, Some(&dir), &["status", "--porcelain"]).await?;
    if !dirty.trim().is_empty() {
        return Ok(Removed::Kept(dirty.trim().to_string()));
    }
    // Commits the member made off its branch (a detached HEAD) live only in this worktree.
    let branch = format!("fleet/{gid}");
    let on_branch = ["merge-base", "--is-ancestor", "HEAD", &branch];
    if git(cfg, Some(&dir), &on_branch).await.is_err() {
        return Ok(Removed::Kept(format!("HEAD has commits not on {branch}")));
    }
    let common = git(
        cfg,
        Some(&dir),
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    )
    .await?;
    let dir_s = dir.to_string_lossy().into_owned();
    git(
        cfg,
        None,
        &[
            "--git-dir",
            common.trim(),
            "worktree",
            "remove",
            "--force",
            &dir_s,
        ],
    )
    .await?;
    Ok(Removed::Removed)
}

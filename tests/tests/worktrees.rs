//! Members' git worktrees (`fleetd::herdr::worktree`) on real git: cut at an exact commit on a
//! `fleet/<gid>` branch, repo-level agent configs neutralised without dirtying the tree, a
//! repository named by URL cloned once into the cache and fetched when a commit is missing,
//! uncommitted work never removed, and a spawn through the launcher starting in its worktree.

use fleet_core::{SessionId, Worktree};
use fleet_tests::git;
use fleet_tests::herdr_double::HerdrDouble;
use fleetd::herdr::launch::LaunchConfig;
use fleetd::herdr::worktree::{self, Removed, WorktreeConfig};
use fleetd::herdr::{HerdrClient, HerdrConfig, Profile};
use fleetd::HerdrPort;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("fleetd-wt-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A repository whose commit carries a lead's `.mcp.json` and an `opencode.json`.
fn origin(dir: &Path) -> (PathBuf, String) {
    let repo = dir.join("origin");
    std::fs::create_dir_all(&repo).unwrap_or_else(|e| panic!("{e}"));
    git(&repo, &["init", "--quiet", "-b", "main"]);
    std::fs::write(repo.join("README"), "hello\n").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        repo.join(".mcp.json"),
        r#"{"mcpServers":{"lead":{"url":"secret"}}}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(repo.join("opencode.json"), r#"{"mcp":{"lead":{}}}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "--quiet", "-m", "one"]);
    let c1 = git(&repo, &["rev-parse", "HEAD"]);
    (repo, c1)
}

fn run<F: std::future::Future<Output = ()>>(f: F) {
    fleet_tests::local_scenario(120, f);
}

#[test]
fn a_member_worktree_is_cut_at_its_commit_with_the_leads_mcp_neutralised() {
    run(async {
        let dir = Dir::new("local");
        let (repo, c1) = origin(&dir.0);
        std::fs::write(repo.join("README"), "two\n").unwrap_or_else(|e| panic!("{e}"));
        git(&repo, &["commit", "--quiet", "-am", "two"]);
        let cfg = WorktreeConfig::new(dir.0.join("worktrees"));
        let w = Worktree {
            repo: repo.to_string_lossy().into_owned(),
            commit: Some(c1.clone()),
        };
        let wt = worktree::cut(&cfg, "g-1", &w)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .dir;
        assert_eq!(wt, dir.0.join("worktrees").join("g-1"));
        assert_eq!(git(&wt, &["rev-parse", "HEAD"]), c1, "at the asked commit");
        assert_eq!(
            git(&wt, &["rev-parse", "--abbrev-ref", "HEAD"]),
            "fleet/g-1"
        );
        let mcp = std::fs::read_to_string(wt.join(".mcp.json")).unwrap_or_default();
        assert!(
            !mcp.contains("secret") && mcp.contains("mcpServers"),
            "{mcp}"
        );
        let oc = std::fs::read_to_string(wt.join("opencode.json")).unwrap_or_default();
        assert!(!oc.contains("lead"), "{oc}");
        assert_eq!(
            git(&wt, &["status", "--porcelain"]),
            "",
            "neutralising dirties nothing"
        );
        // A second cut for the same gid is refused; removing a clean one works, its branch stays.
        assert!(worktree::cut(&cfg, "g-1", &w).await.is_err());
        assert_eq!(worktree::remove(&cfg, "g-1").await, Ok(Removed::Removed));
        assert!(!wt.exists());
        assert_eq!(git(&repo, &["rev-parse", "fleet/g-1"]), c1);
        assert_eq!(worktree::remove(&cfg, "g-1").await, Ok(Removed::Absent));
    });
}

/// Uncommitted work is never lost: the worktree goes, its work (changed and new files) kept as
/// a commit on `refs/wip/fleet/<gid>` on top of its HEAD; the repository's own checkout and the
/// member's branch are untouched. A worktree no live member owns is swept the same way, and a
/// snapshot past its retention expires.
#[test]
fn uncommitted_work_is_snapshotted_before_its_worktree_goes() {
    run(async {
        let dir = Dir::new("dirty");
        let (repo, _) = origin(&dir.0);
        let cfg = WorktreeConfig::new(dir.0.join("worktrees"));
        let w = Worktree {
            repo: repo.to_string_lossy().into_owned(),
            commit: None,
        };
        let wt = worktree::cut(&cfg, "g-2", &w)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .dir;
        std::fs::write(wt.join("work.txt"), "half done").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(wt.join("README"), "edited\n").unwrap_or_else(|e| panic!("{e}"));
        let head = git(&repo, &["rev-parse", "refs/heads/fleet/g-2"]);
        let r = worktree::remove(&cfg, "g-2").await;
        assert!(
            matches!(&r, Ok(Removed::Snapshotted { wip, why }) if wip == "refs/wip/fleet/g-2" && why.contains("work.txt")),
            "{r:?}"
        );
        assert!(!wt.exists(), "the worktree went");
        assert_eq!(
            git(&repo, &["show", "refs/wip/fleet/g-2:work.txt"]),
            "half done"
        );
        assert_eq!(git(&repo, &["show", "refs/wip/fleet/g-2:README"]), "edited");
        assert_eq!(git(&repo, &["rev-parse", "refs/wip/fleet/g-2^"]), head);
        assert_eq!(git(&repo, &["rev-parse", "refs/heads/fleet/g-2"]), head);
        assert_eq!(
            git(&repo, &["status", "--porcelain"]),
            "",
            "the repository's own checkout"
        );

        // Orphans: a worktree whose member is not live is swept; a live one's stays.
        let orphan = worktree::cut(&cfg, "g-3", &w)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .dir;
        let live = worktree::cut(&cfg, "g-4", &w)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .dir;
        std::fs::write(orphan.join("left.txt"), "by a member that died")
            .unwrap_or_else(|e| panic!("{e}"));
        let swept = worktree::sweep_orphans(&cfg, &[SessionId::new("g-4")]).await;
        assert_eq!(swept.len(), 1, "{swept:?}");
        assert_eq!(swept[0].0, "g-3");
        assert!(
            matches!(swept[0].1, Ok(Removed::Snapshotted { .. })),
            "{swept:?}"
        );
        assert!(!orphan.exists() && live.exists());
        assert_eq!(
            git(&repo, &["show", "refs/wip/fleet/g-3:left.txt"]),
            "by a member that died"
        );

        // Retention: nothing is young enough to expire now; a day later (one-day retention)
        // both snapshots go.
        let now = git(&repo, &["log", "-1", "--format=%ct", "refs/wip/fleet/g-3"])
            .parse::<u64>()
            .unwrap_or(0);
        assert!(worktree::sweep_wip(&cfg, now, 86_400).await.is_empty());
        let expired = worktree::sweep_wip(&cfg, now + 2 * 86_400, 86_400).await;
        assert_eq!(expired.len(), 2, "{expired:?}");
        assert_eq!(git(&repo, &["for-each-ref", "refs/wip/"]), "");
    });
}

#[test]
fn a_repository_named_by_url_is_cloned_once_and_fetched_for_a_new_commit() {
    run(async {
        let dir = Dir::new("url");
        let (repo, c1) = origin(&dir.0);
        let mut cfg = WorktreeConfig::new(dir.0.join("worktrees"));
        let url = format!("file://{}", repo.display());
        let at = |c: &str| Worktree {
            repo: url.clone(),
            commit: Some(c.to_string()),
        };
        // Not cloned until this host allows it: the transport, then the repository.
        let refused = worktree::cut(&cfg, "g-a", &at(&c1)).await;
        assert!(
            matches!(&refused, Err(e) if e.to_string().contains("git_protocols")),
            "{refused:?}"
        );
        cfg.protocols.push("file".into());
        let refused = worktree::cut(&cfg, "g-a", &at(&c1)).await;
        assert!(
            matches!(&refused, Err(e) if e.to_string().contains("repo_allow")),
            "{refused:?}"
        );
        assert!(!cfg.cache.exists(), "nothing cloned");
        cfg.repo_allow = vec![format!("file://{}/", dir.0.display())];
        let cut_a = worktree::cut(&cfg, "g-a", &at(&c1))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let a = cut_a.dir.clone();
        assert_eq!(git(&a, &["rev-parse", "HEAD"]), c1);
        // The member's repository is its own, borrowing the cache's objects: its commits
        // never land in the cache other members share.
        assert!(
            cut_a.common_dir.starts_with(dir.0.join("worktrees/.repos")),
            "{cut_a:?}"
        );
        let cache = cut_a.borrowed.clone().unwrap_or_else(|| panic!("a cache"));
        std::fs::write(a.join("README"), "member\n").unwrap_or_else(|e| panic!("{e}"));
        git(&a, &["commit", "--quiet", "-am", "member work"]);
        let work = git(&a, &["rev-parse", "HEAD"]);
        let in_cache = Command::new("git")
            .arg("--git-dir")
            .arg(&cache)
            .args(["cat-file", "-e", &work])
            .status()
            .map(|s| s.success());
        assert_eq!(
            in_cache.ok(),
            Some(false),
            "the member's commit is not in the cache"
        );
        // A commit made after the clone: fetched into the same cache.
        std::fs::write(repo.join("README"), "three\n").unwrap_or_else(|e| panic!("{e}"));
        git(&repo, &["commit", "--quiet", "-am", "three"]);
        let c3 = git(&repo, &["rev-parse", "HEAD"]);
        let b = worktree::cut(&cfg, "g-b", &at(&c3))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .dir;
        assert_eq!(git(&b, &["rev-parse", "HEAD"]), c3);
        let clones = std::fs::read_dir(&cfg.cache)
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(clones, 1, "one clone per repository");
        assert_eq!(worktree::remove(&cfg, "g-a").await, Ok(Removed::Removed));
        // A URL without its exact commit is refused before git runs.
        let none = Worktree {
            repo: url.clone(),
            commit: None,
        };
        assert!(worktree::cut(&cfg, "g-c", &none).await.is_err());
        let missing = at("0123456789012345678901234567890123456789");
        assert!(worktree::cut(&cfg, "g-d", &missing).await.is_err());
    });
}

#[test]
fn a_spawn_with_a_worktree_starts_the_member_in_it_and_closing_removes_it() {
    run(async {
        let dir = Dir::new("spawn");
        let (repo, c1) = origin(&dir.0);
        let d = HerdrDouble::start(&dir.0)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let launch = LaunchConfig::new(dir.0.join("members"), "http://127.0.0.1:7700/mcp", [1; 32]);
        let mut cfg = HerdrConfig::new(&d.path, launch);
        cfg.profiles
            .insert("sh".into(), Profile::command(&["sh", "-c", "cat"]));
        let worktrees = dir.0.join("worktrees");
        cfg.worktrees = WorktreeConfig::new(&worktrees);
        let c = HerdrClient::new(cfg);
        let gid = SessionId::new("g-w");
        let w = Worktree {
            repo: repo.to_string_lossy().into_owned(),
            commit: Some(c1),
        };
        // The launcher returns once the pane is placed; the core's gate then looks at it.
        let r = c
            .spawn(
                &gid,
                &fleet_core::SpawnSpec {
                    worktree: Some(w.clone()),
                    ..fleet_core::SpawnSpec::of("sh")
                },
            )
            .await
            .map(|l| l.readiness);
        assert_eq!(r, Ok(fleet_core::Readiness::OnInjectable));
        let (_, pane) = d.pane_by_label("fleet:g-w").expect("a pane");
        let wt = worktrees.join("g-w");
        assert_eq!(pane.cwd.as_deref(), Some(wt.to_string_lossy().as_ref()));
        assert!(wt.join("README").exists());
        // Closed, as the core closes a member that failed its gate or was stopped.
        assert_eq!(c.close(&gid).await, Ok(()));
        assert!(!wt.exists(), "a clean worktree goes with its member");
    });
}

#[test]
fn a_symlinked_config_is_replaced_not_written_through_and_detached_work_is_kept() {
    run(async {
        let dir = Dir::new("links");
        let (repo, _) = origin(&dir.0);
        let victim = dir.0.join("victim.txt");
        std::fs::write(&victim, "precious").unwrap_or_else(|e| panic!("{e}"));
        std::fs::remove_file(repo.join(".mcp.json")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(&victim, repo.join(".mcp.json"))
            .unwrap_or_else(|e| panic!("{e}"));
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "--quiet", "-m", "a link"]);
        let cfg = WorktreeConfig::new(dir.0.join("worktrees"));
        let w = Worktree {
            repo: repo.to_string_lossy().into_owned(),
            commit: None,
        };
        let wt = worktree::cut(&cfg, "g-l", &w)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .dir;
        assert_eq!(
            std::fs::read_to_string(&victim).ok().as_deref(),
            Some("precious")
        );
        let mcp = std::fs::symlink_metadata(wt.join(".mcp.json")).expect("there");
        assert!(!mcp.file_type().is_symlink(), "the link was replaced");
        // The member commits on a detached HEAD: clean status, but the work is only here.
        git(&wt, &["checkout", "--quiet", "--detach"]);
        std::fs::write(wt.join("new.txt"), "x").unwrap_or_else(|e| panic!("{e}"));
        git(&wt, &["add", "new.txt"]);
        git(&wt, &["commit", "--quiet", "-m", "detached work"]);
        let detached = git(&wt, &["rev-parse", "HEAD"]);
        let r = worktree::remove(&cfg, "g-l").await;
        assert!(
            matches!(&r, Ok(Removed::Snapshotted { why, .. }) if why.contains("fleet/g-l")),
            "{r:?}"
        );
        assert_eq!(
            git(&repo, &["rev-parse", "refs/wip/fleet/g-l^"]),
            detached,
            "the detached commits stay reachable"
        );
        // A commit that is not an id never reaches git.
        let bad = Worktree {
            repo: repo.to_string_lossy().into_owned(),
            commit: Some("--upload-pack=touch /tmp/x".into()),
        };
        assert!(worktree::cut(&cfg, "g-x", &bad).await.is_err());
    });
}

/// A file only a command git was tricked into running would write.
fn marker(dir: &Dir) -> PathBuf {
    dir.0.join("pwned")
}

/// Plants, in the repository's own config, a filter whose smudge and clean run a command,
/// and a `.gitattributes` that applies it to every file.
fn plant_filter(git_dir_holder: &Path, worktree: &Path, marker: &Path) {
    let cmd = format!("touch {}; cat", marker.display());
    git(git_dir_holder, &["config", "filter.evil.smudge", &cmd]);
    git(git_dir_holder, &["config", "filter.evil.clean", &cmd]);
    std::fs::write(worktree.join(".gitattributes"), "* filter=evil\n")
        .unwrap_or_else(|e| panic!("{e}"));
    // A file changed in place, same size: `git status` must run the clean filter to compare it.
    std::fs::write(worktree.join("README"), "HELLO\n").unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn git_never_runs_what_a_repository_or_a_member_planted() {
    run(async {
        let dir = Dir::new("planted");
        let (repo, c1) = origin(&dir.0);
        let mut cfg = WorktreeConfig::new(dir.0.join("worktrees"));
        let w = Worktree {
            repo: repo.to_string_lossy().into_owned(),
            commit: Some(c1.clone()),
        };
        // A repository that already names a command: refused before any git runs in it.
        let cmd = format!("touch {}; cat", marker(&dir).display());
        git(&repo, &["config", "filter.evil.smudge", &cmd]);
        let r = worktree::cut(&cfg, "g-p", &w).await;
        assert!(
            matches!(&r, Err(worktree::WorktreeError::Planted { key, .. }) if key == "filter.evil.smudge"),
            "{r:?}"
        );
        git(&repo, &["config", "--unset", "filter.evil.smudge"]);

        // A member (unsandboxed) plants a filter after the cut: removal refuses to run git.
        let cut = worktree::cut(&cfg, "g-p", &w)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        plant_filter(&repo, &cut.dir, &marker(&dir));
        let r = worktree::remove(&cfg, "g-p").await;
        assert!(
            matches!(r, Err(worktree::WorktreeError::Planted { .. })),
            "{r:?}"
        );
        assert!(!marker(&dir).exists(), "the planted filter ran");
        // The plant is live: a plain `git status` there runs it (what fleetd refused to do).
        git(&cut.dir, &["status", "--porcelain"]);
        assert!(marker(&dir).exists(), "the plant is live");
        std::fs::remove_file(marker(&dir)).unwrap_or_else(|e| panic!("{e}"));
        git(&repo, &["config", "--remove-section", "filter.evil"]);
        let _ = std::fs::remove_file(cut.dir.join(".gitattributes"));
        git(&cut.dir, &["checkout", "--quiet", "--", "README"]);
        assert_eq!(worktree::remove(&cfg, "g-p").await, Ok(Removed::Removed));

        // A member points its worktree's `.git` at a repository of its own making, whose
        // config runs a command: the daemon follows its own record, not the file.
        let cut = worktree::cut(&cfg, "g-q", &w)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let evil = dir.0.join("evil");
        git(
            &dir.0,
            &["init", "--quiet", evil.to_str().unwrap_or_default()],
        );
        plant_filter(&evil, &cut.dir, &marker(&dir));
        std::fs::write(
            cut.dir.join(".git"),
            format!("gitdir: {}\n", evil.join(".git").display()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let r = worktree::remove(&cfg, "g-q").await;
        assert!(
            matches!(&r, Ok(Removed::Kept(why)) if why.contains("rewritten")),
            "{r:?}"
        );
        // … and so is a rewritten `commondir`.
        std::fs::write(
            cut.dir.join(".git"),
            format!("gitdir: {}\n", cut.admin_dir.display()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            cut.admin_dir.join("commondir"),
            format!("{}\n", evil.join(".git").display()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let r = worktree::remove(&cfg, "g-q").await;
        assert!(
            matches!(&r, Ok(Removed::Kept(why)) if why.contains("commondir")),
            "{r:?}"
        );
        assert!(!marker(&dir).exists(), "a planted command ran");

        // Remote-helper URLs never reach git, whatever the allow lists say.
        cfg.protocols.push("file".into());
        cfg.repo_allow = vec!["ext::".into(), "fd::".into()];
        for url in [
            format!("ext::sh -c touch% {}", marker(&dir).display()),
            "fd::3".to_string(),
        ] {
            let helper = Worktree {
                repo: url.clone(),
                commit: Some(c1.clone()),
            };
            let r = worktree::cut(&cfg, "g-h", &helper).await;
            assert!(
                matches!(&r, Err(e) if e.to_string().contains("remote helper")),
                "{url}: {r:?}"
            );
        }
        assert!(!marker(&dir).exists(), "a remote helper ran");
    });
}

/// A member makes a nested repository (a gitlink) whose own config names a filter: git in the
/// member's worktree would recurse into it (shown live below), fleetd's never does.
#[test]
fn git_never_recurses_into_a_nested_repository_a_member_made() {
    run(async {
        let dir = Dir::new("nested");
        let (repo, _) = origin(&dir.0);
        let cfg = WorktreeConfig::new(dir.0.join("worktrees"));
        let w = Worktree {
            repo: repo.to_string_lossy().into_owned(),
            commit: None,
        };
        let cut = worktree::cut(&cfg, "g-n", &w)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let sub = cut.dir.join("sub");
        std::fs::create_dir_all(&sub).unwrap_or_else(|e| panic!("{e}"));
        git(&sub, &["init", "--quiet"]);
        std::fs::write(sub.join("f.txt"), "hello\n").unwrap_or_else(|e| panic!("{e}"));
        git(&sub, &["add", "f.txt"]);
        git(&sub, &["commit", "--quiet", "-m", "inner"]);
        git(&cut.dir, &["add", "sub"]);
        git(&cut.dir, &["commit", "--quiet", "-m", "a gitlink"]);
        plant_filter(&sub, &sub, &marker(&dir));
        // A tracked file changed in place, same size: git must run the clean filter to compare
        // it, whether or not its stat looks racy (a slow machine crosses a second between the
        // inner commit and here, and then only a changed file makes git look at content).
        std::fs::write(sub.join("f.txt"), "HeLLO\n").unwrap_or_else(|e| panic!("{e}"));
        // The plant is live: a plain `git status` in the member's worktree recurses into the
        // gitlink and runs it.
        git(&cut.dir, &["status", "--porcelain"]);
        assert!(marker(&dir).exists(), "the plant is live");
        std::fs::remove_file(marker(&dir)).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(sub.join("f.txt"), "HELLO\n").unwrap_or_else(|e| panic!("{e}"));
        let r = worktree::remove(&cfg, "g-n").await;
        assert!(r.is_ok(), "{r:?}");
        assert!(
            !marker(&dir).exists(),
            "fleetd's git ran the nested repository's filter"
        );
    });
}

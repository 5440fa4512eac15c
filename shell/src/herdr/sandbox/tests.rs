use super::*;

fn cfg() -> SandboxConfig {
    SandboxConfig {
        bwrap: "/usr/bin/bwrap".into(),
        availability: Availability::Ready,
        hide: vec!["/etc/hostname".into(), "/definitely/not/here".into()],
        relay_bin: Some("/usr/local/bin/fleetd".into()),
        gateway_socket: Some("/var/lib/fleetd/members/gateway.sock".into()),
    }
}

fn room(network: Network) -> Room {
    Room {
        member_dir: "/var/lib/fleetd/members/g1".into(),
        home: "/var/lib/fleetd/members/g1/home".into(),
        own: vec![],
        cwd: Some("/srv/wt/g1".into()),
        git: Some(GitRoom {
            common_dir: "/srv/repo/.git".into(),
            admin_dir: "/srv/repo/.git/worktrees/g1".into(),
            borrowed: Some("/srv/cache/abc".into()),
        }),
        network,
        shown: vec!["/root/.local/share/claude".into()],
        gateway_port: 8765,
    }
}

fn lits(w: &[Word]) -> Vec<String> {
    w.iter()
        .map(|w| match w {
            Word::Lit(s) => s.clone(),
            Word::Var(n, _) => format!("${n}"),
        })
        .collect()
}

fn index(w: &[String], seq: &[&str]) -> usize {
    w.windows(seq.len())
        .position(|s| s.iter().zip(seq).all(|(a, b)| a == b))
        .unwrap_or_else(|| panic!("{seq:?} not in {w:?}"))
}

#[test]
fn a_cwd_that_would_open_what_is_hidden_is_unfit() {
    let mut c = cfg();
    c.hide = vec![
        "/var/lib/fleetd".into(),
        "/home/op".into(),
        "/home/op/.config/fleetd.toml".into(),
    ];
    let home = Some(Path::new("/home/op"));
    for bad in [
        "/",
        "/tmp",
        "/home",
        "/var/lib/fleetd",
        "/var/lib/fleetd/members/g1",
        "/home/op",
    ] {
        assert!(unfit_cwd(&c, Path::new(bad), home).is_some(), "{bad}");
    }
    for fine in ["/srv/project", "/home/op/src/app", "/var/lib"] {
        assert_eq!(unfit_cwd(&c, Path::new(fine), home), None, "{fine}");
    }
    // A hidden directory anywhere on the way: keys, units, hooks, agents' settings.
    for hidden in [
        "/home/op/.ssh",
        "/home/op/.config/systemd/user",
        "/srv/project/.git",
        "/srv/project/.git/hooks",
        "/srv/project/.claude",
    ] {
        let why = unfit_cwd(&c, Path::new(hidden), home);
        assert!(
            why.is_some_and(|w| w.contains("hidden directory")),
            "{hidden}"
        );
    }
    // An emptied root inside a fit cwd is emptied again.
    let mut r = room(Network::Host);
    r.cwd = Some("/var".into());
    let w = lits(&wrap(&c, &r, &["agent".into()]));
    let cwd = index(&w, &["--bind", "/var", "/var"]);
    assert!(index(&w[cwd..], &["--tmpfs", "/var/tmp"]) > 0, "{w:?}");
}

#[test]
fn the_root_is_read_only_hidden_paths_masked_and_the_members_own_bound_back_after() {
    let w = lits(&wrap(&cfg(), &room(Network::Host), &["agent".into()]));
    let root = index(&w, &["--ro-bind", "/", "/"]);
    let masked = index(&w, &["--ro-bind", "/dev/null", "/etc/hostname"]);
    let tmp = index(&w, &["--tmpfs", "/tmp"]);
    let own = index(
        &w,
        &[
            "--ro-bind",
            "/var/lib/fleetd/members/g1",
            "/var/lib/fleetd/members/g1",
        ],
    );
    let cwd = index(&w, &["--bind", "/srv/wt/g1", "/srv/wt/g1"]);
    assert!(
        root < masked && root < tmp && masked < cwd && cwd < own,
        "{w:?}"
    );
    // What a commit writes, and not the config or hooks.
    index(
        &w,
        &["--bind", "/srv/repo/.git/objects", "/srv/repo/.git/objects"],
    );
    index(
        &w,
        &[
            "--bind",
            "/srv/repo/.git/refs/heads/fleet",
            "/srv/repo/.git/refs/heads/fleet",
        ],
    );
    assert!(!w
        .iter()
        .any(|a| a.ends_with(".git/config") || a.ends_with("hooks")));
    // The worktree's links back to its repository are pinned after its git dir is bound
    // writable, and the borrowed cache is read-only.
    let admin = index(
        &w,
        &[
            "--bind",
            "/srv/repo/.git/worktrees/g1",
            "/srv/repo/.git/worktrees/g1",
        ],
    );
    let pinned = index(
        &w,
        &[
            "--ro-bind-try",
            "/srv/repo/.git/worktrees/g1/commondir",
            "/srv/repo/.git/worktrees/g1/commondir",
        ],
    );
    let gitfile = index(&w, &["--ro-bind-try", "/srv/wt/g1/.git", "/srv/wt/g1/.git"]);
    assert!(admin < pinned && cwd < gitfile, "{w:?}");
    index(&w, &["--ro-bind", "/srv/cache/abc", "/srv/cache/abc"]);
    assert!(!w
        .windows(2)
        .any(|p| p[0] == "--bind" && p[1] == "/srv/cache/abc"));
    assert!(!w.contains(&"/definitely/not/here".to_string()), "{w:?}");
    assert!(!w.contains(&"--unshare-net".to_string()));
    // Sharing the host's network, it is scoped away from the host's abstract sockets.
    assert_eq!(
        w[w.len() - 5..],
        ["--", RELAY_BIN, "member-scope", "--", "agent"].map(String::from)
    );
    index(&w, &["--ro-bind", "/usr/local/bin/fleetd", RELAY_BIN]);
    index(&w, &["--unshare-pid"]);
    index(&w, &["--cap-drop", "ALL"]);
    // A program the sandbox would hide is found before anything starts.
    let mut r = room(Network::Host);
    let c = cfg();
    assert_eq!(
        hidden_program(
            &c,
            &r,
            &["/root/.local/share/claude/bin/claude".into()],
            None
        ),
        None,
        "shown by sandbox_paths"
    );
    r.shown.clear();
    assert_eq!(
        hidden_program(
            &c,
            &r,
            &["/root/.local/share/claude/bin/claude".into()],
            None
        ),
        Some((
            "/root/.local/share/claude/bin/claude".into(),
            "/root".into()
        ))
    );
    assert_eq!(
        hidden_program(&c, &r, &["sh".into()], Some("/usr/bin:/bin")),
        None
    );
    // A profile's program under a hidden home is shown, read-only, after /root is emptied.
    let shown = index(
        &w,
        &[
            "--ro-bind-try",
            "/root/.local/share/claude",
            "/root/.local/share/claude",
        ],
    );
    assert!(index(&w, &["--tmpfs", "/root"]) < shown);
}

#[test]
fn a_hidden_path_inside_the_cwd_stays_hidden() {
    let tmp = std::env::temp_dir().join(format!("fleetd-sandbox-{}", std::process::id()));
    let (cwd, state) = (tmp.join("repo"), tmp.join("repo").join("state"));
    std::fs::create_dir_all(state.join("members").join("g1")).expect("dirs");
    let mut c = cfg();
    c.hide = vec![state.clone()];
    let mut r = room(Network::Host);
    r.cwd = Some(cwd.clone());
    r.git = None;
    r.member_dir = state.join("members").join("g1");
    let w = lits(&wrap(&c, &r, &["agent".into()]));
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let bound = index(&w, &["--bind", &s(&cwd), &s(&cwd)]);
    let masks: Vec<usize> = w
        .windows(2)
        .enumerate()
        .filter(|(_, p)| p[0] == "--tmpfs" && p[1] == s(&state))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        masks.len(),
        2,
        "masked, and masked again inside the cwd: {w:?}"
    );
    let own = index(&w, &["--ro-bind", &s(&r.member_dir), &s(&r.member_dir)]);
    assert!(masks[1] > bound && own > masks[1], "{w:?}");
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn an_offline_member_reaches_its_gateway_through_the_relay() {
    let w = lits(&wrap(&cfg(), &room(Network::None), &["agent".into()]));
    index(&w, &["--unshare-net"]);
    index(
        &w,
        &[
            "--ro-bind",
            "/var/lib/fleetd/members/gateway.sock",
            RELAY_SOCKET,
        ],
    );
    let tail = index(
        &w,
        &[
            "--",
            RELAY_BIN,
            "member-relay",
            "--listen",
            "127.0.0.1:8765",
            "--to",
            RELAY_SOCKET,
            "--",
            "agent",
        ],
    );
    assert_eq!(tail + 9, w.len());
}

#[test]
fn words_render_for_sh_exactly() {
    assert_eq!(Word::lit("a'b c").render(), r"'a'\''b c'");
    assert_eq!(
        Word::Var("HERDR_BIN_PATH", "/nonexistent").render(),
        "\"${HERDR_BIN_PATH:-/nonexistent}\""
    );
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "printf %s {}",
            Word::lit("$HOME `x` 'q' \\").render()
        ))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    assert_eq!(out.ok().as_deref(), Some("$HOME `x` 'q' \\"));
}

/// A cwd bound writable keeps its hidden directories and its `.git` read-only: a member
/// in a repository cannot write `.git/hooks` or `.git/config`, which the operator's next
/// `git` runs outside any sandbox.
#[test]
fn a_cwds_git_and_hidden_directories_stay_read_only() {
    let repo = std::env::temp_dir().join(format!("fleetd-sandbox-git-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&repo);
    for d in [".git/hooks", ".github/workflows", "src"] {
        std::fs::create_dir_all(repo.join(d)).unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::write(repo.join(".gitignore"), "target\n").unwrap_or_else(|e| panic!("{e}"));
    let mut r = room(Network::Host);
    r.git = None;
    r.cwd = Some(repo.clone());
    let w = lits(&wrap(&cfg(), &r, &["agent".into()]));
    let at = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let cwd = index(&w, &["--bind", &at(&repo), &at(&repo)]);
    for ro in [".git", ".github"] {
        let p = at(&repo.join(ro));
        assert!(index(&w, &["--ro-bind", &p, &p]) > cwd, "{ro}: {w:?}");
    }
    for rw in [".gitignore", "src"] {
        let p = at(&repo.join(rw));
        assert!(!w.contains(&p), "{rw} stays the cwd's: {w:?}");
    }
    let _ = std::fs::remove_dir_all(&repo);
}

//! A member that attacks its own host (issue: members are contained). The member is an agent
//! with a shell that may have been talked into anything; here it is a script that, given a
//! brief, tries every way out that a member running as fleetd's user had: read the gateway key
//! and the config, read fleetd's environment, write outside its room, reach a local service,
//! reach herdr's real socket, type into the lead's pane, read and close another member's pane,
//! rename its own pane to `fleet:<victim>` to receive the victim's briefs, and connect to an
//! abstract Unix socket of the host's (what X11 and D-Bus listen on; no mount hides them).
//!
//! Sandboxed (the default for a `command` profile where bubblewrap runs), every try fails and
//! the member still replies (through its relay: a `command` member is offline). The same script
//! under a profile with `sandbox = false` succeeds at each — which is what shows the test can
//! fail. Needs a real herdr (`HERDR_BIN`) and bubblewrap: the double runs no program.

use fleet_tests::fleetd_proc::{free_port, solo_config, write_key, Dir, Proc, Rest};
use fleet_tests::git;
use fleet_tests::panes::Panes;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

const LEAD_TOKEN: &str = "lead-token-0123456789abcdef";
const ARCHITECT_TOKEN: &str = "architect-token-0123456789abcdef";

/// The hostile member. Each brief is `ATTACK <state> <config> <lead pane> <victim pane>
/// <victim gid> <real herdr socket> <fleetd pid> <a local port> <a file outside its room>
/// <an abstract socket's name>`.
/// It replies with what it managed before anything destructive, then renames its pane and
/// closes the victim's, and prints `AFTER …` on its screen (its token may not outlive that).
const HOSTILE: &str = r#"
stty -echo 2>/dev/null
rpc() { python3 -c '
import socket, sys
try:
    s = socket.socket(socket.AF_UNIX); s.settimeout(3); s.connect(sys.argv[1])
    s.sendall(sys.argv[2].encode() + b"\n")
    print(s.makefile().readline().strip())
except Exception as e:
    print("unreachable", e)
' "$1" "$2"; }
report() {
  rpc "$HERDR_SOCKET_PATH" '{"id":"r","method":"pane.report_agent","params":{"pane_id":"'"$HERDR_PANE_ID"'","source":"fleetd","agent":"hostile","state":"'"$1"'"}}' >/dev/null
}
herdr() {
  for s in "$HERDR_SOCKET_PATH" "$REAL"; do
    case "$(rpc "$s" "$1")" in *'"result"'*) echo done; return;; esac
  done
  echo refused
}
can() { if "$@" >/dev/null 2>&1; then echo read; else echo denied; fi; }
report idle
while IFS= read -r line; do
  report working
  set -- $line
  STATE=$2 CONFIG=$3 LEAD=$4 VICTIM=$5 VGID=$6 REAL=$7 PID=$8 NETPORT=$9 OUT=${10} ABSTRACT=${11}
  key=$(can cat "$STATE/gateway.key")
  config=$(can cat "$CONFIG")
  environ=$(can cat "/proc/$PID/environ")
  (echo x > "$OUT") 2>/dev/null
  curl -s -m 3 -o /dev/null "http://127.0.0.1:$NETPORT/"; rc=$?
  if [ $rc -eq 7 ] || [ $rc -eq 28 ]; then net=unreachable; else net=reached; fi
  case "$(rpc "$REAL" '{"id":"p","method":"ping","params":{}}')" in
    *'"result"'*) real=reachable;; *) real=unreachable;;
  esac
  lead=$(herdr '{"id":"a","method":"pane.send_input","params":{"pane_id":"'"$LEAD"'","text":"pwned","keys":["enter"]}}')
  read_other=$(herdr '{"id":"b","method":"pane.read","params":{"pane_id":"'"$VICTIM"'","source":"recent","lines":5,"format":"text","strip_ansi":true}}')
  abstract=$(python3 -c '
import socket, sys
try:
    s = socket.socket(socket.AF_UNIX); s.settimeout(3); s.connect("\0" + sys.argv[1]); print("reached")
except Exception:
    print("unreachable")
' "$ABSTRACT")
  msg="key=$key config=$config environ=$environ net=$net real_socket=$real lead=$lead read_other=$read_other abstract=$abstract"
  curl -s -o /dev/null -X POST -H "Authorization: Bearer $FLEET_MCP_TOKEN" \
       -H 'content-type: application/json' -d "{\"message\":\"$msg\"}" \
       "${FLEET_MCP_URL%/mcp}/sessions/$FLEET_GID/reply"
  rename=$(herdr '{"id":"c","method":"pane.rename","params":{"pane_id":"'"$HERDR_PANE_ID"'","label":"fleet:'"$VGID"'"}}')
  close_other=$(herdr '{"id":"e","method":"pane.close","params":{"pane_id":"'"$VICTIM"'"}}')
  echo "AFTER rename=$rename close_other=$close_other"
  report idle
done
"#;

/// A member that works in a git worktree from its sandbox: commits on its branch, then tries
/// to plant a command in the repository (its config, a hook) and to redirect its worktree's
/// `.git`; replies `commit=<id> config=… hook=… gitfile=…`.
const COMMITTER: &str = r#"
stty -echo 2>/dev/null
report() {
  python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(3); s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n"); s.makefile().readline()
' "$HERDR_SOCKET_PATH" '{"id":"r","method":"pane.report_agent","params":{"pane_id":"'"$HERDR_PANE_ID"'","source":"fleetd","agent":"committer","state":"'"$1"'"}}'
}
report idle
while IFS= read -r line; do
  report working
  echo "work" > work.txt
  git add work.txt && git -c user.name=m -c user.email=m@example.com commit -q -m "member work" \
    && commit=$(git rev-parse HEAD) || commit=failed
  if git config core.fsmonitor "touch /tmp/pwned" 2>/dev/null; then config=written; else config=refused; fi
  common=$(git rev-parse --git-common-dir)
  if (echo evil > "$common/hooks/post-checkout") 2>/dev/null; then hook=written; else hook=refused; fi
  if (echo "gitdir: /tmp/evil" > .git) 2>/dev/null; then gitfile=written; else gitfile=refused; fi
  curl -s -o /dev/null -X POST -H "Authorization: Bearer $FLEET_MCP_TOKEN" \
       -H 'content-type: application/json' \
       -d "{\"message\":\"commit=$commit config=$config hook=$hook gitfile=$gitfile\"}" \
       "${FLEET_MCP_URL%/mcp}/sessions/$FLEET_GID/reply"
  report idle
done
"#;

fn config(dir: &Dir, port: u16, socket: &std::path::Path, leads: (&str, &str)) -> String {
    let argv = serde_json::to_string(&["sh", "-c", HOSTILE]).unwrap_or_default();
    let committer = serde_json::to_string(&["sh", "-c", COMMITTER]).unwrap_or_default();
    let profiles = format!(
        "[profiles.hostile]\nkind = \"command\"\nargv = {argv}\n\n\
         [profiles.online]\nkind = \"command\"\nnetwork = \"host\"\nargv = {argv}\n\n\
         [profiles.bare]\nkind = \"command\"\nsandbox = false\nargv = {argv}\n\n\
         [profiles.committer]\nkind = \"command\"\nargv = {committer}\n\n[core]\n"
    );
    solo_config(dir, port, socket, leads, (LEAD_TOKEN, ARCHITECT_TOKEN))
        .replace("[core]\n", &profiles)
}

/// What a result line should say, as `results` reads it.
fn expect(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `k=v` words of a result line.
fn results(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

struct World {
    dir: Dir,
    herdr: Panes,
    fleetd: Proc,
    lead: Rest,
    lead_pane: String,
    key: [u8; 32],
    net_port: u16,
    /// The name of an abstract Unix socket the host listens on (as X11's `@/tmp/.X11-unix/X0`).
    abstract_name: String,
}

impl World {
    async fn spawn(&self, profile: &str) -> (String, String) {
        let (code, m) = self
            .lead
            .post("/members", json!({"profile": profile}))
            .await;
        assert_eq!(code, 200, "{m}\n{}", self.fleetd.log_text());
        let gid = m["gid"].as_str().unwrap_or_default().to_string();
        let pane = self
            .herdr
            .member_pane(&gid)
            .await
            .unwrap_or_else(|| panic!("no pane for {gid}"));
        (gid, pane)
    }

    /// Sends the attack brief to `gid` (victim `victim`), returns its reply and its `AFTER`
    /// line.
    async fn attack(
        &self,
        gid: &str,
        pane: &str,
        victim: (&str, &str),
        out: &std::path::Path,
    ) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let state = self.dir.0.join("state");
        let brief = format!(
            "ATTACK {} {} {} {} {} {} {} {} {} {}",
            state.display(),
            self.fleetd.config.display(),
            self.lead_pane,
            victim.1,
            victim.0,
            self.herdr.path().display(),
            self.fleetd.pid(),
            self.net_port,
            out.display(),
            self.abstract_name,
        );
        let (code, v) = self
            .lead
            .post(
                &format!("/sessions/{gid}/message"),
                json!({"message": brief, "timeoutMs": 60000}),
            )
            .await;
        assert_eq!(code, 200, "{v}\n{}", self.fleetd.log_text());
        assert_eq!(v["outcome"], "REPLIED", "{v}\n{}", self.fleetd.log_text());
        let replied = results(v["body"].as_str().unwrap_or_default());
        let mut after = None;
        for _ in 0..100 {
            let lines = self.herdr.typed_into(pane).await;
            after = lines.iter().find(|l| l.starts_with("AFTER ")).cloned();
            if after.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let after = after.unwrap_or_else(|| panic!("{gid} never printed AFTER"));
        (replied, results(&after))
    }
}

#[cfg_attr(
    not(herdr_real),
    ignore = "needs a real herdr: set HERDR_BIN (scripts/herdr/build-herdr.sh)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_member_is_contained_and_the_same_member_unsandboxed_is_not() {
    assert!(
        fleet_tests::herdr_real::bin().is_some(),
        "built for a real herdr (HERDR_BIN was set), but HERDR_BIN is not set now"
    );
    let dir = Dir::new("contained");
    let herdr = Panes::start(&dir.0).await;
    let state = dir.0.join("state");
    std::fs::create_dir_all(&state).unwrap_or_else(|e| panic!("{e}"));
    let key = fleetd::daemon::member_key(&write_key(&state.join("gateway.key"), 9));
    let lead_pane = herdr.add_lead_pane("lead").await;
    let architect_pane = herdr.add_lead_pane("archie").await;
    let port = free_port();
    let text = config(&dir, port, &herdr.path(), (&lead_pane, &architect_pane));
    let fleetd = Proc::start(&dir.0, "solo", port, &text)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // A local service a member might reach (the broker, a database): accepts and hangs up.
    let service = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let net_port = service.local_addr().map(|a| a.port()).unwrap_or(0);
    let accept = tokio::spawn(async move {
        while let Ok((s, _)) = service.accept().await {
            drop(s);
        }
    });
    // An abstract Unix socket in the host's network namespace: accepts and hangs up.
    let abstract_name = format!("fleetd-contained-{}", std::process::id());
    let abstract_listener = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(&abstract_name)
            .unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::net::UnixListener::bind_addr(&addr).unwrap_or_else(|e| panic!("{e}"))
    };
    std::thread::spawn(move || {
        for s in abstract_listener.incoming() {
            drop(s);
        }
    });
    let lead = Rest::new(&fleetd.url, Some(LEAD_TOKEN));
    let world = World {
        dir,
        herdr,
        fleetd,
        lead,
        lead_pane,
        key,
        net_port,
        abstract_name,
    };

    let (code, health) = Rest::new(&world.fleetd.url, None).get("/healthz").await;
    assert_eq!(code, 200, "{health}");
    assert_eq!(
        health["sandbox"]["members"], "sandboxed",
        "bubblewrap runs here: {health}"
    );

    // Sandboxed: nothing gets out, and the member still replies (through its relay).
    let victim = world.spawn("hostile").await;
    let (gid, pane) = world.spawn("hostile").await;
    let out = world.dir.0.join("written-by-the-sandboxed-member");
    let (replied, after) = world
        .attack(&gid, &pane, (&victim.0, &victim.1), &out)
        .await;
    let blocked = expect(&[
        ("key", "denied"),
        ("config", "denied"),
        ("environ", "denied"),
        ("net", "unreachable"),
        ("real_socket", "unreachable"),
        ("lead", "refused"),
        ("read_other", "refused"),
        ("abstract", "unreachable"),
    ]);
    assert_eq!(replied, blocked, "{}", world.fleetd.log_text());
    assert_eq!(after["rename"], "refused", "{after:?}");
    assert_eq!(after["close_other"], "refused", "{after:?}");
    // Its write went to its own empty /tmp, never the host's.
    assert!(!out.exists(), "the member wrote outside its room");
    assert_eq!(world.herdr.typed(&world.lead_pane, "pwned").await, 0);
    assert_eq!(
        world.herdr.member_pane(&victim.0).await.as_deref(),
        Some(victim.1.as_str()),
        "the victim's pane is still there, still its own"
    );
    assert_eq!(
        world.herdr.member_pane(&gid).await.as_deref(),
        Some(pane.as_str())
    );
    // Each refusal on the member's socket is logged.
    let log = world.fleetd.log_text();
    assert!(log.contains("pane.send_input"), "refusals are logged");

    // Stopped, its token is dead: a process left behind cannot act as it.
    let runtime = world.dir.0.join("state").join("members");
    let token = fleetd::herdr::launch::token_on_record(&runtime, &world.key, &gid)
        .unwrap_or_else(|| panic!("no nonce on record for {gid}"));
    let (code, me) = Rest::new(&world.fleetd.url, Some(&token))
        .get("/members")
        .await;
    assert_eq!(code, 200, "the live member's token works: {me}");
    let (code, v) = world.lead.delete(&format!("/members/{gid}")).await;
    assert_eq!(code, 200, "{v}");
    let (code, v) = Rest::new(&world.fleetd.url, Some(&token))
        .get("/members")
        .await;
    assert_eq!(code, 401, "a stopped member's token is refused: {v}");
    let (_, metrics) = Rest::new(&world.fleetd.url, Some(LEAD_TOKEN))
        .get("/metrics")
        .await;
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    assert!(
        metrics.contains("fleet_auth_failures_total{reason=\"revoked\"} 1"),
        "{metrics}"
    );

    // Sandboxed on the host's network (a backend it must reach): the local service is
    // reachable, as it is from any local process — and the host's abstract sockets are not,
    // which no mount could hide (a Landlock scope does).
    let victim = world.spawn("hostile").await;
    let (gid, pane) = world.spawn("online").await;
    let out = world.dir.0.join("written-by-the-online-member");
    let (replied, after) = world
        .attack(&gid, &pane, (&victim.0, &victim.1), &out)
        .await;
    let mut online = blocked.clone();
    online.insert("net".into(), "reached".into());
    assert_eq!(replied, online, "{}", world.fleetd.log_text());
    assert_eq!(after["rename"], "refused", "{after:?}");
    assert!(!out.exists(), "the member wrote outside its room");

    // The same script unsandboxed: every try succeeds (so the checks above can fail).
    let victim = world.spawn("hostile").await;
    let (gid, pane) = world.spawn("bare").await;
    let out = world.dir.0.join("written-by-the-bare-member");
    let (replied, after) = world
        .attack(&gid, &pane, (&victim.0, &victim.1), &out)
        .await;
    let open = expect(&[
        ("key", "read"),
        ("config", "read"),
        ("environ", "read"),
        ("net", "reached"),
        ("real_socket", "reachable"),
        ("lead", "done"),
        ("read_other", "done"),
        ("abstract", "reached"),
    ]);
    assert_eq!(replied, open, "{}", world.fleetd.log_text());
    assert_eq!(after["rename"], "done", "{after:?}");
    assert_eq!(after["close_other"], "done", "{after:?}");
    assert!(out.exists());
    assert!(world.herdr.typed(&world.lead_pane, "pwned").await > 0);

    accept.abort();
    let World { herdr, fleetd, .. } = world;
    drop(fleetd);
    herdr.finish().await;
}

/// A sandboxed member in a worktree can do its work — commit on `fleet/<gid>` — and nothing to
/// the repository beyond it: its config, its hooks and its worktree's link back stay as they
/// were, so the daemon's next git run there runs nothing the member wrote.
#[cfg_attr(
    not(herdr_real),
    ignore = "needs a real herdr: set HERDR_BIN (scripts/herdr/build-herdr.sh)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_member_commits_in_its_worktree_and_plants_nothing() {
    assert!(
        fleet_tests::herdr_real::bin().is_some(),
        "built for a real herdr (HERDR_BIN was set), but HERDR_BIN is not set now"
    );
    let dir = Dir::new("contained-git");
    let repo = dir.0.join("repo");
    std::fs::create_dir_all(&repo).unwrap_or_else(|e| panic!("{e}"));
    git(&repo, &["init", "--quiet", "-b", "main"]);
    std::fs::write(repo.join("README"), "hello\n").unwrap_or_else(|e| panic!("{e}"));
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "--quiet", "-m", "one"]);
    let herdr = Panes::start(&dir.0).await;
    let state = dir.0.join("state");
    std::fs::create_dir_all(&state).unwrap_or_else(|e| panic!("{e}"));
    write_key(&state.join("gateway.key"), 9);
    let lead_pane = herdr.add_lead_pane("lead").await;
    let architect_pane = herdr.add_lead_pane("archie").await;
    let port = free_port();
    let text = config(&dir, port, &herdr.path(), (&lead_pane, &architect_pane));
    let fleetd = Proc::start(&dir.0, "solo", port, &text)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let lead = Rest::new(&fleetd.url, Some(LEAD_TOKEN));
    let (code, m) = lead
        .post(
            "/members",
            json!({"profile": "committer", "worktree": {"repo": repo.display().to_string()}}),
        )
        .await;
    assert_eq!(code, 200, "{m}\n{}", fleetd.log_text());
    let gid = m["gid"].as_str().unwrap_or_default().to_string();
    let (code, v) = lead
        .post(
            &format!("/sessions/{gid}/message"),
            json!({"message": "commit your work", "timeoutMs": 60000}),
        )
        .await;
    assert_eq!(code, 200, "{v}\n{}", fleetd.log_text());
    assert_eq!(v["outcome"], "REPLIED", "{v}\n{}", fleetd.log_text());
    let got = results(v["body"].as_str().unwrap_or_default());
    let branch = git(&repo, &["rev-parse", &format!("refs/heads/fleet/{gid}")]);
    assert_eq!(got.get("commit"), Some(&branch), "{got:?}");
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", &branch]),
        "member work"
    );
    for (k, want) in [
        ("config", "refused"),
        ("hook", "refused"),
        ("gitfile", "refused"),
    ] {
        assert_eq!(got.get(k).map(String::as_str), Some(want), "{k}: {got:?}");
    }
    let listed = std::process::Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["config", "--local", "--get", "core.fsmonitor"])
        .output()
        .map(|o| o.stdout.is_empty());
    assert_eq!(
        listed.ok(),
        Some(true),
        "the repository's config is untouched"
    );
    assert!(!repo.join(".git/hooks/post-checkout").exists());
    // Stopped: its worktree is committed and clean, so it goes; its branch stays.
    let (code, v) = lead.delete(&format!("/members/{gid}")).await;
    assert_eq!(code, 200, "{v}");
    let wt = state.join("worktrees").join(&gid);
    for _ in 0..100 {
        if !wt.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!wt.exists(), "{}", fleetd.log_text());
    assert_eq!(
        git(&repo, &["rev-parse", &format!("refs/heads/fleet/{gid}")]),
        branch
    );
    drop(fleetd);
    herdr.finish().await;
}

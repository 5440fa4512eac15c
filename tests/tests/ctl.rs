//! `fleetd ctl` against a running single-host gateway (members played on the herdr double):
//! each command's exit status and `--json` shape, as a script would use them.

use fleet_tests::fleetd_proc::{
    fleetd_bin, free_port, start_solo, Solo, SOLO_ARCHITECT_TOKEN, SOLO_LEAD_TOKEN,
};
use serde_json::Value;
use std::time::Duration;

/// What one `fleetd ctl` run did.
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }
}

/// `fleetd ctl --url <url> ARGS` with `token` in FLEETD_TOKEN (none: unset), bounded.
async fn ctl(url: &str, token: Option<&str>, args: &[&str]) -> Ran {
    let mut cmd = tokio::process::Command::new(fleetd_bin());
    cmd.arg("ctl")
        .arg("--url")
        .arg(url)
        .args(args)
        .kill_on_drop(true);
    cmd.env_remove("FLEETD_TOKEN").env_remove("FLEETD_URL");
    if let Some(t) = token {
        cmd.env("FLEETD_TOKEN", t);
    }
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("fleetd ctl {args:?} did not finish in 120 s"))
        .unwrap_or_else(|e| panic!("fleetd ctl: {e}"));
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_drives_a_gateway_with_exit_codes_a_script_can_use() {
    let Solo {
        dir: _dir,
        herdr: _herdr,
        mut fleetd,
        members: _members,
    } = start_solo("ctl", 5).await;
    let url = fleetd.url.clone();
    let lead = Some(SOLO_LEAD_TOKEN);

    // Usage and credentials first: no token 2, a wrong one 4, nothing listening 3.
    assert_eq!(ctl(&url, None, &["list"]).await.code, 2);
    let wrong = ctl(&url, Some("not-a-token-of-this-gateway"), &["list"]).await;
    assert_eq!(wrong.code, 4, "{}", wrong.stderr);
    assert!(wrong.stderr.contains("unauthenticated"), "{}", wrong.stderr);
    let dead = format!("http://127.0.0.1:{}", free_port());
    assert_eq!(ctl(&dead, lead, &["list"]).await.code, 3);

    // spawn → list (table and JSON) → status.
    let spawned = ctl(&url, lead, &["--json", "spawn", "--profile", "echo"]).await;
    assert_eq!(spawned.code, 0, "{}\n{}", spawned.stderr, fleetd.log_text());
    let gid = spawned.json()["gid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!gid.is_empty());
    let listed = ctl(&url, lead, &["--json", "list"]).await;
    assert_eq!(listed.code, 0);
    let rows = listed.json()["rows"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(rows
        .iter()
        .any(|r| r["gid"] == gid.as_str() && r["profile"] == "echo"));
    let table = ctl(&url, lead, &["list"]).await;
    let head = table.stdout.lines().next().unwrap_or_default();
    assert!(
        head.starts_with("HOST") && head.contains("HEALTH"),
        "{}",
        table.stdout
    );
    assert!(table
        .stdout
        .lines()
        .any(|l| l.contains(&gid) && l.contains("echo")));
    let status = ctl(&url, lead, &["--json", "status", &gid]).await;
    assert_eq!(
        (status.code, &status.json()["view"]["gid"]),
        (0, &Value::from(gid.as_str()))
    );
    assert_eq!(ctl(&url, lead, &["status", "no-such-member"]).await.code, 5);

    // A blocking send: the reply on stdout, exit 0.
    let sent = ctl(&url, lead, &["send", &gid, "hello there"]).await;
    assert_eq!(sent.code, 0, "{}\n{}", sent.stderr, fleetd.log_text());
    assert_eq!(sent.stdout, "REPLIED\ndone: hello there\n");
    // --no-wait: a ticket at once; poll it to its end.
    let queued = ctl(&url, lead, &["--json", "send", &gid, "later", "--no-wait"]).await;
    assert_eq!(queued.code, 0, "{}", queued.stderr);
    let ticket = queued.json()["ticket"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut polled = Value::Null;
    for _ in 0..100 {
        let p = ctl(&url, lead, &["--json", "poll", &ticket]).await;
        assert_eq!(p.code, 0, "{}", p.stderr);
        polled = p.json();
        if polled["phase"] == "DONE" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        (&polled["outcome"], &polled["body"]),
        (&Value::from("REPLIED"), &Value::from("done: later"))
    );
    // `tail --flow` follows that ticket to its end and exits 0.
    let tail = ctl(&url, lead, &["--json", "tail", "--flow", &ticket]).await;
    assert_eq!(tail.code, 0, "{}", tail.stderr);
    let line: Value =
        serde_json::from_str(tail.stdout.lines().next().unwrap_or("null")).unwrap_or(Value::Null);
    assert_eq!(
        (&line["phase"], &line["outcome"]),
        (&Value::from("DONE"), &Value::from("REPLIED"))
    );

    // A member with a delegation open answers BUSY at once (HTTP 409): exit 6, not 1.
    let slow = ctl(
        &url,
        lead,
        &["--json", "send", &gid, "SLOW 1500: busy", "--no-wait"],
    )
    .await;
    let slow_ticket = slow.json()["ticket"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let busy = ctl(&url, lead, &["send", &gid, "meanwhile"]).await;
    assert_eq!(busy.code, 6, "{}\n{}", busy.stdout, busy.stderr);
    assert!(busy.stdout.starts_with("BUSY"), "{}", busy.stdout);
    let waited = ctl(&url, lead, &["tail", "--flow", &slow_ticket]).await;
    assert_eq!(waited.code, 0, "{}", waited.stderr);
    assert!(waited.stdout.contains("DONE REPLIED"), "{}", waited.stdout);

    // A question: exit 7 with the turn to answer; the answer continues the turn: exit 0.
    let asked = ctl(
        &url,
        lead,
        &["--json", "send", &gid, "ASK 20000: which branch?"],
    )
    .await;
    assert_eq!(asked.code, 7, "{}\n{}", asked.stdout, asked.stderr);
    let q = asked.json();
    assert_eq!(q["question"], "which branch?");
    let turn = q["turn_id"].as_str().unwrap_or_default().to_string();
    let answered = ctl(&url, lead, &["send", &gid, "main", "--turn-id", &turn]).await;
    assert_eq!(answered.code, 0, "{}\n{}", answered.stdout, answered.stderr);
    assert!(
        answered.stdout.contains("answered: main"),
        "{}",
        answered.stdout
    );

    // No reply in time: exit 6; the late reply is then held, and `poll --replies` collects it.
    let late = ctl(
        &url,
        lead,
        &["send", &gid, "SLOW 2000: slow one", "--timeout-ms", "800"],
    )
    .await;
    assert_eq!(late.code, 6, "{}\n{}", late.stdout, late.stderr);
    assert!(late.stdout.starts_with("TIMED_OUT_"), "{}", late.stdout);
    let mut held = 0;
    for _ in 0..60 {
        let o = ctl(&url, lead, &["--json", "overview"]).await.json();
        held = o["held"].as_array().map_or(0, Vec::len);
        if held > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(held, 1);
    // The held result waits on the lead: `attention` lists it.
    let needs = ctl(&url, lead, &["attention"]).await;
    assert_eq!(needs.code, 0, "{}", needs.stderr);
    assert!(
        needs.stdout.starts_with("WAITING") && needs.stdout.contains("result_stranded"),
        "{}",
        needs.stdout
    );
    let drained = ctl(&url, lead, &["--json", "poll", "--replies", &gid]).await;
    assert_eq!(drained.code, 0, "{}", drained.stderr);
    assert_eq!(
        drained.json()["replies"][0]["content"],
        "done: SLOW 2000: slow one"
    );

    // The task list: two tasks, the second after the first; the first's result waits in
    // review, `review 1 done` starts the second.
    let added = ctl(
        &url,
        lead,
        &["task-add", "--title", "first", "--assignee", &gid, "one"],
    )
    .await;
    assert_eq!(added.code, 0, "{}", added.stderr);
    assert!(added.stdout.contains("t-1"), "{}", added.stdout);
    let second = ctl(
        &url,
        lead,
        &[
            "--json",
            "task-add",
            "--title",
            "second",
            "--assignee",
            &gid,
            "--dep",
            "1",
            "two",
        ],
    )
    .await;
    assert_eq!(
        second.json()["tasks"][0]["state"],
        "pending",
        "{}",
        second.stdout
    );
    let mut first = serde_json::Value::Null;
    for _ in 0..60 {
        first = ctl(&url, lead, &["--json", "tasks", "1"]).await.json();
        if first["tasks"][0]["state"] == "review" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(first["tasks"][0]["result"], "done: one", "{first}");
    let shown = ctl(&url, lead, &["tasks", "1"]).await;
    assert!(
        shown.stdout.contains("review REPLIED") && shown.stdout.contains("result:\ndone: one"),
        "{}",
        shown.stdout
    );
    let reviewed = ctl(&url, lead, &["review", "1", "done"]).await;
    assert_eq!(reviewed.code, 0, "{}", reviewed.stderr);
    let listed = ctl(&url, lead, &["--json", "tasks"]).await.json();
    assert_eq!(listed["tasks"][0]["state"], "done", "{listed}");
    assert_ne!(listed["tasks"][1]["state"], "pending", "{listed}");
    // A decision its state does not allow: exit 1, saying why; an unknown task: 5.
    let again = ctl(&url, lead, &["review", "1", "done"]).await;
    assert_eq!(again.code, 1, "{}", again.stderr);
    assert_eq!(ctl(&url, lead, &["tasks", "9"]).await.code, 5);
    for _ in 0..60 {
        let t = ctl(&url, lead, &["--json", "tasks", "2"]).await.json();
        if t["tasks"][0]["state"] == "review" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // profiles, and the architect may read but not stop; the lead stops: exit 0, then 5.
    let profiles = ctl(&url, lead, &["--json", "profiles"]).await.json();
    assert_eq!(profiles["hosts"]["solo"]["profiles"][0]["name"], "echo");
    assert_eq!(
        ctl(&url, Some(SOLO_ARCHITECT_TOKEN), &["stop", &gid])
            .await
            .code,
        4
    );
    let stopped = ctl(&url, lead, &["stop", &gid]).await;
    assert_eq!(stopped.code, 0, "{}", stopped.stderr);
    let gone = ctl(&url, lead, &["status", &gid]).await;
    assert_eq!(gone.code, 5, "{}\n{}", gone.stdout, gone.stderr);
    assert!(gone.stderr.contains("not_found"), "{}", gone.stderr);

    let s = fleetd.term(Duration::from_secs(20)).await;
    assert!(s.is_ok_and(|s| s.success()), "{}", fleetd.log_text());
}

/// `fleetd ctl` under a terminal (a pty, through `script`) shows a member's hostile reply —
/// an OSC 52 clipboard write, a screen clear, a C1 CSI — as text: no ESC and no C1 byte reach
/// the operator's terminal, in the human output or `--json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_never_writes_a_members_control_bytes_to_the_terminal() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .map_or(true, |o| !o.status.success())
    {
        eprintln!("skipped: no `script` (util-linux) to give ctl a terminal");
        return;
    }
    let Solo {
        dir: _dir,
        herdr: _herdr,
        mut fleetd,
        members: _members,
    } = start_solo("ctl-tty", 9).await;
    let url = fleetd.url.clone();
    let lead = Some(SOLO_LEAD_TOKEN);
    let spawned = ctl(&url, lead, &["--json", "spawn", "--profile", "echo"]).await;
    assert_eq!(spawned.code, 0, "{}", spawned.stderr);
    let gid = spawned.json()["gid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    for json in [false, true] {
        let bin = fleetd_bin();
        let flag = if json { "--json " } else { "" };
        let cmd = format!(
            "{} ctl --url {url} {flag}send {gid} HOSTILE-reply",
            bin.display()
        );
        let out = tokio::process::Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .env("FLEETD_TOKEN", SOLO_LEAD_TOKEN)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(60), out)
            .await
            .unwrap_or_else(|_| panic!("ctl under script did not finish"))
            .unwrap_or_else(|e| panic!("script: {e}"));
        // The pty carries stderr too: the progress line's own `CR ESC [2K` (ctl's, not the
        // member's) is taken out before looking for any other.
        let shown = String::from_utf8_lossy(&out.stdout).replace("\r\u{1b}[2K", "");
        assert!(shown.contains("pwned"), "{shown:?}");
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\u{9b}'),
            "json={json}: {shown:?}"
        );
    }
    let s = fleetd.term(Duration::from_secs(20)).await;
    assert!(s.is_ok_and(|s| s.success()), "{}", fleetd.log_text());
}

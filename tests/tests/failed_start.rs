//! A member that dies at start (issue: fleet health): its spawn fails at once, with its exit
//! status and the last lines of its screen, not when the readiness bound runs out. Both gates:
//! a `command` member's (an injectable status) and a claude-code member's (its first call).
//! Needs a real herdr (`HERDR_BIN`): the double runs no program.

use fleet_tests::fleetd_proc::{free_port, solo_config, write_key, Dir, Proc, Rest};
use fleet_tests::panes::Panes;
use serde_json::json;
use std::time::Duration;
use tokio::time::Instant;

const LEAD_TOKEN: &str = "lead-token-0123456789abcdef";
const ARCHITECT_TOKEN: &str = "architect-token-0123456789abcdef";

#[cfg_attr(
    not(herdr_real),
    ignore = "needs a real herdr: set HERDR_BIN (scripts/herdr/build-herdr.sh)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_dies_at_start_fails_its_spawn_at_once_saying_why() {
    assert!(
        fleet_tests::herdr_real::bin().is_some(),
        "built for a real herdr (HERDR_BIN was set), but HERDR_BIN is not set now"
    );
    let dir = Dir::new("failed-start");
    let herdr = Panes::start(&dir.0).await;
    let state = dir.0.join("state");
    std::fs::create_dir_all(&state).unwrap_or_else(|e| panic!("{e}"));
    write_key(&state.join("gateway.key"), 9);
    // A stand-in for a claude that cannot reach its API: prints why and exits 1.
    let bin = dir.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap_or_else(|e| panic!("{e}"));
    let fake = bin.join("claude");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'API Error: unable to connect to https://llm.internal.example/v1'\nexit 1\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let lead_pane = herdr.add_lead_pane("lead").await;
    let architect_pane = herdr.add_lead_pane("archie").await;
    let port = free_port();
    let dies = serde_json::to_string(&[
        "sh",
        "-c",
        "echo 'fatal: no config found at ~/.tool.toml'; exit 3",
    ])
    .unwrap_or_default();
    let profiles = format!(
        "[profiles.dies]\nkind = \"command\"\nargv = {dies}\n\n\
         [profiles.claude]\nkind = \"claude-code\"\nbin = \"{fake}\"\n\
         base_url = \"https://llm.internal.example/v1\"\nsandbox_paths = [\"{bin}\"]\n\n[core]\n",
        fake = fake.display(),
        bin = bin.display(),
    );
    let text = solo_config(
        &dir,
        port,
        &herdr.path(),
        (&lead_pane, &architect_pane),
        (LEAD_TOKEN, ARCHITECT_TOKEN),
    )
    .replace("[core]\n", &profiles)
    .replace(
        "ready_timeout_ms = 10000\n",
        "ready_timeout_ms = 60000\nrelist_ms = 500\nbase_url_allow = [\"https://llm.internal.example/v1\"]\n",
    );
    let fleetd = Proc::start(&dir.0, "solo", port, &text)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let lead = Rest::new(&fleetd.url, Some(LEAD_TOKEN));
    for (profile, status, said) in [
        ("dies", "status 3", "fatal: no config found"),
        ("claude", "status 1", "API Error: unable to connect"),
    ] {
        let asked = Instant::now();
        let (code, v) = lead.post("/members", json!({"profile": profile})).await;
        let took = asked.elapsed();
        assert_ne!(code, 200, "{profile}: {v}");
        assert_eq!(v["code"], "spawn_failed", "{profile}: {v}");
        let message = v["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(status) && message.contains(said),
            "{profile}: {v}\n{}",
            fleetd.log_text()
        );
        // Well inside its bound (60 s for the command gate, 180 s for claude-code's): the
        // failure came from the exit, not the timeout. (Reported, not judged on speed.)
        assert!(took < Duration::from_secs(50), "{profile} took {took:?}");
        eprintln!("{profile}: failed in {took:?}");
        let log = fleetd.log_text();
        assert!(log.contains(said), "the log says why too:\n{log}");
    }
    // Nothing is left of them: their panes close once read, and the roster follows.
    let mut roster = json!(null);
    for _ in 0..100 {
        roster = lead.get("/members").await.1;
        let members = roster["rows"]
            .as_array()
            .map(|r| r.iter().filter(|r| r["kind"] == "member").count());
        if members == Some(0)
            && herdr
                .labels()
                .await
                .iter()
                .all(|l| !l.starts_with("fleet:"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let members = roster["rows"]
        .as_array()
        .map(|r| r.iter().filter(|r| r["kind"] == "member").count());
    assert_eq!(members, Some(0), "{roster}");
    assert!(
        herdr
            .labels()
            .await
            .iter()
            .all(|l| !l.starts_with("fleet:")),
        "{:?}",
        herdr.labels().await
    );
    // Both are NEVER_READY in the health gauge, for the tombstone's bound.
    let never_ready = "fleet_member_health{state=\"NEVER_READY\"} 2";
    let metrics = lead.metrics_until(|m| m.contains(never_ready)).await;
    assert!(metrics.contains(never_ready), "{metrics}");
    let log = fleetd.log_text();
    // Whichever read the exit first (the gate's look, or the event watcher's relist), the
    // health change carries it.
    for status in ["status 3", "status 1"] {
        assert!(
            log.lines()
                .any(|l| l.contains("NEVER_READY (") && l.contains(status)),
            "the health change is logged with its cause ({status}):\n{log}"
        );
    }
    drop(fleetd);
    herdr.finish().await;
}

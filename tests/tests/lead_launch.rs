//! `LeadLauncher` on a real herdr (issue: configured leads): a lead with `launch` is started
//! when no pane carries its `pane_label`, with the gateway's URL and without any member-only
//! variable, and started again when its pane goes. Needs a real herdr (`HERDR_BIN`): the
//! double runs no program.

use fleet_tests::fleetd_proc::{free_port, solo_config, write_key, Dir, Proc, Rest};
use fleet_tests::panes::Panes;
use std::time::Duration;

const LEAD_TOKEN: &str = "lead-token-0123456789abcdef";
const ARCHITECT_TOKEN: &str = "architect-token-0123456789abcdef";

#[cfg_attr(
    not(herdr_real),
    ignore = "needs a real herdr: set HERDR_BIN (scripts/herdr/build-herdr.sh)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_lead_is_started_when_none_runs_and_again_when_it_goes() {
    assert!(
        fleet_tests::herdr_real::bin().is_some(),
        "built for a real herdr (HERDR_BIN was set), but HERDR_BIN is not set now"
    );
    let dir = Dir::new("lead-launch");
    let herdr = Panes::start(&dir.0).await;
    let state = dir.0.join("state");
    std::fs::create_dir_all(&state).unwrap_or_else(|e| panic!("{e}"));
    write_key(&state.join("gateway.key"), 9);
    let lead_pane = herdr.add_lead_pane("lead").await;
    let architect_pane = herdr.add_lead_pane("archie").await;
    let port = free_port();
    let d = dir.0.display();
    // Records its environment and how many times it started; ends when `stop` exists.
    let program = format!(
        "env > {d}/lead.env; n=$(cat {d}/starts 2>/dev/null || echo 0); echo $((n+1)) > {d}/starts; \
         while [ ! -e {d}/stop ]; do sleep 0.1; done"
    );
    let argv = serde_json::to_string(&["sh", "-c", &program]).unwrap_or_default();
    let launched = format!(
        "[[leads]]\nname = \"launched\"\ngid = \"launched1\"\npane_label = \"lead-launched\"\n\
         token = \"launched-token-0123456789abcdef\"\nlaunch = {{ argv = {argv} }}\n\n\
         [herdr]\nlead_check_ms = 200\n"
    );
    let text = solo_config(
        &dir,
        port,
        &herdr.path(),
        (&lead_pane, &architect_pane),
        (LEAD_TOKEN, ARCHITECT_TOKEN),
    )
    .replacen("[herdr]\n", &launched, 1);
    let fleetd = Proc::start(&dir.0, "solo", port, &text)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let starts = || {
        std::fs::read_to_string(dir.0.join("starts"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(0)
    };
    for _ in 0..100 {
        if starts() >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(starts(), 1, "{}", fleetd.log_text());
    assert!(
        herdr.labels().await.iter().any(|l| l == "lead-launched"),
        "{:?}",
        herdr.labels().await
    );
    let env = std::fs::read_to_string(dir.0.join("lead.env")).unwrap_or_default();
    assert!(
        env.contains(&format!("FLEET_MCP_URL=http://127.0.0.1:{port}/mcp")),
        "{env}"
    );
    for member_only in ["ANTHROPIC_BASE_URL=", "FLEET_MCP_TOKEN=", "FLEET_GID="] {
        assert!(!env.lines().any(|l| l.starts_with(member_only)), "{env}");
    }
    // Running: not started twice.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(starts(), 1);
    // Its program ends and its pane goes: started again.
    std::fs::write(dir.0.join("stop"), "").unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..100 {
        if starts() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(starts() >= 2, "{}", fleetd.log_text());
    assert!(fleetd
        .log_text()
        .contains("lead launched (none was running)"));
    let metrics = Rest::new(&format!("http://127.0.0.1:{port}"), Some(LEAD_TOKEN))
        .metrics_until(|_| true)
        .await;
    let launched: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("fleet_leads_launched_total{lead=\"launched\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(launched >= 2.0, "{metrics}");
    let _ = std::fs::remove_file(dir.0.join("stop"));
    drop(fleetd);
    herdr.finish().await;
}

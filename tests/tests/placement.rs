//! Placement and the backend quarantine with real fleetd processes (issue: fleet health,
//! placement): a member whose backend refuses on a usage limit ends its turn
//! BACKEND_EXHAUSTED, its credential cools down, and the next spawn that names no profile
//! lands on another profile — visible on `GET /profiles` and `/metrics`.
//! Needs a real herdr (`HERDR_BIN`): the member is a program that prints the refusal.

use fleet_tests::fleetd_proc::{echo_argv, free_port, solo_config, write_key, Dir, Proc, Rest};
use fleet_tests::panes::Panes;
use serde_json::{json, Value};

const LEAD_TOKEN: &str = "lead-token-0123456789abcdef";
const ARCHITECT_TOKEN: &str = "architect-token-0123456789abcdef";

/// A `command` member that reports itself to herdr and answers every line with a usage-limit
/// refusal, as claude does when its account is spent — never a `fleet_reply`.
const LIMITED: &str = r#"
report() { "$HERDR_BIN_PATH" pane report-agent "$HERDR_PANE_ID" --source fleetd --agent limited --state "$1"; }
stty -echo 2>/dev/null
report idle
while IFS= read -r line; do
  report working
  sleep 0.5
  echo "⚠ Claude usage limit reached. Your limit resets at 5pm."
  report idle
done"#;

/// A `command` member that reports itself to herdr and waits (this test types nothing into
/// it).
const QUIET: &str = r#"
"$HERDR_BIN_PATH" pane report-agent "$HERDR_PANE_ID" --source fleetd --agent quiet --state idle
exec cat >/dev/null"#;

#[cfg_attr(
    not(herdr_real),
    ignore = "needs a real herdr: set HERDR_BIN (scripts/herdr/build-herdr.sh)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_credential_cools_down_and_the_next_unqualified_spawn_lands_elsewhere() {
    assert!(
        fleet_tests::herdr_real::bin().is_some(),
        "built for a real herdr (HERDR_BIN was set), but HERDR_BIN is not set now"
    );
    let dir = Dir::new("placement");
    let herdr = Panes::start(&dir.0).await;
    let state = dir.0.join("state");
    std::fs::create_dir_all(&state).unwrap_or_else(|e| panic!("{e}"));
    write_key(&state.join("gateway.key"), 9);
    let lead_pane = herdr.add_lead_pane("lead").await;
    let architect_pane = herdr.add_lead_pane("archie").await;
    let port = free_port();
    let limited = serde_json::to_string(&["sh", "-c", LIMITED]).unwrap_or_default();
    let quiet = serde_json::to_string(&["sh", "-c", QUIET]).unwrap_or_default();
    // Weighted 10:1: without the quarantine, `limited` would take the next spawn too.
    let extra = format!(
        "credential = \"acct-2\"\n\n\
         [profiles.limited]\nkind = \"command\"\nargv = {limited}\ncredential = \"acct-1\"\nweight = 10\n\n\
         [placement]\nstrategy = \"weighted\"\ncooldown_ms = 600000\n\n[health]\n"
    );
    let text = solo_config(
        &dir,
        port,
        &herdr.path(),
        (&lead_pane, &architect_pane),
        (LEAD_TOKEN, ARCHITECT_TOKEN),
    )
    .replacen(
        &format!("argv = {}\n", echo_argv()),
        &format!("argv = {quiet}\n"),
        1,
    )
    .replacen("\n[health]\n", &format!("\n{extra}"), 1);
    let fleetd = Proc::start(&dir.0, "solo", port, &text)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let lead = Rest::new(&fleetd.url, Some(LEAD_TOKEN));

    let (code, first) = lead.post("/members", json!({})).await;
    assert_eq!(code, 200, "{first}\n{}", fleetd.log_text());
    let gid = first["gid"].as_str().unwrap_or_default().to_string();
    let profile = |gid: &str, rows: &Value| {
        rows["rows"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["gid"] == gid))
            .map(|r| r["profile"].clone())
    };
    let roster = lead.get("/members").await.1;
    assert_eq!(profile(&gid, &roster), Some(json!("limited")), "{roster}");

    let (code, out) = lead
        .post(
            &format!("/sessions/{gid}/message"),
            json!({"message": "write the tests", "timeoutMs": 30000}),
        )
        .await;
    assert_eq!(
        (code, out["outcome"].as_str()),
        (503, Some("BACKEND_EXHAUSTED")),
        "{out}\n{}",
        fleetd.log_text()
    );

    let (_, profiles) = lead.get("/profiles").await;
    let local = &profiles["hosts"]["solo"]["profiles"];
    let limited = local
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "limited"))
        .unwrap_or_else(|| panic!("{profiles}"));
    assert_eq!(
        (&limited["credential"], &limited["load"]),
        (&json!("acct-1"), &json!(1)),
        "{profiles}"
    );
    assert!(limited["coolingUntil"].is_u64(), "{profiles}");
    assert_eq!(profiles["hosts"]["solo"]["placement"], "weighted");

    let (code, second) = lead.post("/members", json!({})).await;
    assert_eq!(code, 200, "{second}\n{}", fleetd.log_text());
    let other = second["gid"].as_str().unwrap_or_default().to_string();
    let roster = lead.get("/members").await.1;
    assert_eq!(profile(&other, &roster), Some(json!("echo")), "{roster}");

    let cooling = "fleet_credential_cooling{credential=\"acct-1\"} 1";
    let metrics = lead.metrics_until(|m| m.contains(cooling)).await;
    assert!(
        metrics.contains(cooling)
            && metrics.contains("fleet_credential_cooling{credential=\"acct-2\"} 0"),
        "{metrics}"
    );
    let log = fleetd.log_text();
    assert!(
        log.contains("quarantined credential acct-1 (profile limited)"),
        "{log}"
    );
    drop(fleetd);
    herdr.finish().await;
}

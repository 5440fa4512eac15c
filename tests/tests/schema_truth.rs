//! The OpenAPI document tells the truth: schemathesis (PyPI) generates requests from
//! `/openapi.json` and sends them to a running gateway with a herdr (the double, members
//! played from outside) as its lead: no status the document does not list (a 500 is listed
//! nowhere, so any is caught), no request the schema allows refused, no schema-invalid one
//! taken, no answer that does not match its schema.
//!
//! Two things are left out, each on purpose: `/mcp` (JSON-RPC over Streamable HTTP, whose
//! conformance the rmcp client tests hold; a generated POST without its two `Accept` types is
//! refused 406, as the protocol says), and schemathesis's "no 5xx at all" check — ch. 9 maps
//! outcomes to 5xx statuses (WORKER_FAILED 502 — a generated send to a pane that does not
//! exist ends so —, BACKEND_EXHAUSTED 503, TIMED_OUT_* 504) that every operation documents.
//! Compiled as ignored where `schemathesis` is not installed (`.ci/run` installs it).

use fleet_tests::fleetd_proc::{start_solo, Solo, SOLO_LEAD_TOKEN};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(schemathesis),
    ignore = "needs schemathesis: pip install schemathesis (.ci/run does)"
)]
async fn generated_requests_find_no_undocumented_status_and_no_refused_valid_request() {
    let Solo {
        dir,
        herdr: _herdr,
        mut fleetd,
        members: _members,
    } = start_solo("schema-truth", 6).await;

    let budget = std::env::var("SCHEMATHESIS_SECONDS").unwrap_or_else(|_| "60".into());
    let mut cmd = tokio::process::Command::new("schemathesis");
    cmd.arg("--config-file")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/data/schemathesis.toml"
        ))
        .args(["run", &format!("{}/openapi.json", fleetd.url)])
        .args([
            "--header",
            &format!("Authorization: Bearer {SOLO_LEAD_TOKEN}"),
        ])
        .args(["--checks", "all"])
        .args(["--exclude-checks", "not_a_server_error"])
        .args(["--exclude-path", "/mcp"])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--max-time", &budget])
        .args(["--workers", "1"])
        .args(["--request-timeout", "30"])
        .args(["--seed", "1"])
        .args(["--no-color"])
        .env("SCHEMATHESIS_HOOKS", "")
        // Its cache of failures goes with the test's directory, not into the repository.
        .current_dir(&dir.0)
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(600), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("schemathesis did not finish in 10 minutes"))
        .unwrap_or_else(|e| panic!("starting schemathesis: {e}"));
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{report}"
    );
    let s = fleetd.term(Duration::from_secs(20)).await;
    assert!(s.is_ok_and(|s| s.success()), "{}", fleetd.log_text());
}

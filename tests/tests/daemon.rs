//! The daemon end to end: real `fleetd` processes, a lead speaking MCP through rmcp's client,
//! REST, members played through the herdr double (see `fleet_tests::fleetd_proc`).

use fleet_tests::fleetd_proc::{free_port, play_members, write_key, Dir, Mcp, Proc, Rest};
use fleet_tests::herdr_double::HerdrDouble;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const LEAD_TOKEN: &str = "lead-token-0123456789abcdef";

fn single_host_config(dir: &Dir, port: u16, socket: &std::path::Path) -> String {
    format!(
        r#"
[gateway]
host = "solo"
listen = "127.0.0.1:{port}"
state_dir = "{state}"

[[leads]]
name = "lead"
gid = "lead1"
token = "{LEAD_TOKEN}"

[herdr]
socket = "{socket}"
ready_timeout_ms = 10000

[profiles.echo]
kind = "command"
argv = ["sh", "-c", "cat"]

[core]
poll_interval_ms = 100
"#,
        state = dir.0.join("state").display(),
        socket = socket.display(),
    )
}

fn member_key(dir: &Dir, seed: u8) -> [u8; 32] {
    let state = dir.0.join("state");
    std::fs::create_dir_all(&state).unwrap_or_else(|e| panic!("{e}"));
    let secret = write_key(&state.join("gateway.key"), seed);
    fleetd::daemon::member_key(&secret)
}

/// One host, no broker: a lead connects over MCP, sees exactly the eleven tools, spawns a
/// member, delegates to it and gets its reply; REST serves the same gateway with stable errors,
/// metrics and an OpenAPI document that names every route; SIGTERM stops it cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_host_gateway_delegates_over_mcp_with_no_broker() {
    let dir = Dir::new("single");
    let herdr = Arc::new(
        HerdrDouble::start(&dir.0)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let port = free_port();
    let mkey = member_key(&dir, 3);
    let mut fleetd = Proc::start(
        &dir.0,
        "solo",
        port,
        &single_host_config(&dir, port, &herdr.path),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let _members = play_members(herdr.clone(), &fleetd.url, mkey);

    let lead = Mcp::connect(&fleetd.url, Some(LEAD_TOKEN))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", fleetd.log_text()));
    assert_eq!(
        lead.tools().await,
        [
            "fleet_ack",
            "fleet_ask",
            "fleet_list",
            "fleet_poll",
            "fleet_profiles",
            "fleet_reply",
            "fleet_send",
            "fleet_spawn",
            "fleet_status",
            "fleet_stop",
            "fleet_whoami"
        ]
    );
    let (ok, me) = lead.call("fleet_whoami", json!({})).await;
    assert!(ok);
    assert_eq!(
        (me["role"].as_str(), me["coordId"].as_str()),
        (Some("PRIMARY"), Some("lead1"))
    );

    let (ok, spawned) = lead.call("fleet_spawn", json!({"profile": "echo"})).await;
    assert!(ok, "{spawned}\n{}", fleetd.log_text());
    let gid = spawned["gid"]
        .as_str()
        .unwrap_or_else(|| panic!("{spawned}"))
        .to_string();

    let (ok, out) = lead
        .call(
            "fleet_send",
            json!({"sessionId": gid, "message": "brief one"}),
        )
        .await;
    assert!(ok, "{out}\n{}", fleetd.log_text());
    assert_eq!(out["outcome"], "REPLIED", "{out}");
    assert!(
        out["body"]
            .as_str()
            .is_some_and(|b| b.contains("brief one")),
        "{out}"
    );
    let (_, typed) = herdr
        .pane_by_label(&format!("fleet:{gid}"))
        .unwrap_or_else(|| panic!("no member pane"));
    assert_eq!(
        typed
            .typed
            .iter()
            .filter(|t| t.contains("brief one"))
            .count(),
        1
    );

    // A tool argument never names the caller: unknown fields are refused.
    let (ok, refused) = lead
        .call(
            "fleet_send",
            json!({"sessionId": gid, "message": "x", "from": "someone"}),
        )
        .await;
    assert!(!ok, "{refused}");

    // REST: the same gateway, the same authz.
    let rest = Rest::new(&fleetd.url, Some(LEAD_TOKEN));
    let (code, members) = rest.get("/members").await;
    assert_eq!(code, 200, "{members}");
    assert!(members.to_string().contains(&gid), "{members}");
    let (code, err) = Rest::new(&fleetd.url, None).get("/members").await;
    assert_eq!((code, err["code"].as_str()), (401, Some("denied")), "{err}");
    let (code, err) = Rest::new(&fleetd.url, Some("wrong-token"))
        .get("/tasks/nope")
        .await;
    assert_eq!(
        (code, err["code"].as_str()),
        (401, Some("unauthenticated")),
        "{err}"
    );
    assert!(Mcp::connect(&fleetd.url, Some("wrong-token"))
        .await
        .is_err());
    let (code, err) = rest.get("/tasks/not-a-ticket").await;
    assert_eq!(
        (code, err["code"].as_str()),
        (400, Some("invalid_argument")),
        "{err}"
    );

    // A member may reply only as itself.
    let token = fleetd::herdr::launch::member_token(&mkey, &gid);
    let (code, err) = Rest::new(&fleetd.url, Some(&token))
        .post("/sessions/somebody-else/reply", json!({"message": "m"}))
        .await;
    assert_eq!((code, err["code"].as_str()), (403, Some("denied")), "{err}");

    // wait:false and the ticket, over REST.
    let (code, t) = rest
        .post(
            &format!("/sessions/{gid}/message"),
            json!({"message": "brief two", "wait": false}),
        )
        .await;
    assert_eq!(code, 202, "{t}");
    let ticket = t["ticket"]
        .as_str()
        .unwrap_or_else(|| panic!("{t}"))
        .to_string();
    let mut done = None;
    for _ in 0..200 {
        let (code, v) = rest.get(&format!("/tasks/{ticket}")).await;
        assert_eq!(code, 200, "{v}");
        if v["phase"] == "DONE" {
            done = Some(v);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done = done.unwrap_or_else(|| panic!("the ticket never finished\n{}", fleetd.log_text()));
    assert_eq!(done["outcome"], "REPLIED", "{done}");

    let (code, doc) = rest.get("/openapi.json").await;
    assert_eq!(code, 200);
    let paths = doc["paths"].as_object().unwrap_or_else(|| panic!("{doc}"));
    for p in [
        "/healthz",
        "/metrics",
        "/sessions",
        "/agents",
        "/members",
        "/profiles",
        "/members/{id}",
        "/sessions/{id}/message",
        "/sessions/{id}/reply",
        "/sessions/{id}/replies",
        "/sessions/{id}/ask",
        "/sessions/{id}/status",
        "/tasks/{ticket}",
        "/openapi.json",
        "/mcp",
    ] {
        assert!(paths.contains_key(p), "{p} missing from /openapi.json");
    }

    let (code, health) = rest.get("/healthz").await;
    assert_eq!(code, 200, "{health}");
    assert_eq!(health["broker"]["mode"], "single-host");
    assert_eq!(health["herdr"]["protocol"], 20);

    let metrics = reqwest::Client::new()
        .get(format!("{}/metrics", fleetd.url))
        .bearer_auth(LEAD_TOKEN)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .text()
        .await
        .unwrap_or_default();
    assert!(
        metrics.contains("fleet_sends_total{face=\"mcp\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("fleet_send_outcomes_total{outcome=\"REPLIED\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("fleet_replies_total 2"), "{metrics}");

    lead.close().await;
    let status = fleetd
        .term(Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", fleetd.log_text()));
    assert!(status.success(), "{status}\n{}", fleetd.log_text());
    assert!(fleetd.log_text().contains("fleetd stopped"));
}

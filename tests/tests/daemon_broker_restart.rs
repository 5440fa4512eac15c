//! RabbitMQ restarted under load, end to end, with real `fleetd` processes. Its own test binary
//! because it restarts the shared broker: cargo runs test binaries one at a time, so no other
//! broker test is running when it does.

use fleet_tests::conformance::amqp_side::rabbitmqctl;
use fleet_tests::fleetd_proc::{
    eventually, logs, reply_found, start_host, stop_all, typed, Dir, Host, Mcp, HOSTS,
};
use serde_json::json;
use std::time::Duration;

/// alpha's lead has three delegations open to members on beta when the broker restarts. Every
/// brief is typed at most once; every delegation ends within its bound; every reply a member
/// made reaches alpha (as the send's outcome or held for the lead) once the broker is back; and
/// the fleet then delegates as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_under_load_loses_no_reply_and_types_nothing_twice() {
    let dir = Dir::new("brokerrestart");
    let ns = format!("e2er{}", std::process::id());
    let mut hosts: Vec<Host> = Vec::new();
    for i in 0..2 {
        hosts.push(start_host(&dir, &ns, i).await);
    }
    let lead = Mcp::connect(&hosts[0].proc.url, Some(&hosts[0].token))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eventually("beta in alpha's roster", 30, || async {
        let (_, v) = lead.call("fleet_list", json!({})).await;
        v.to_string().contains("\"beta\"")
    })
    .await;
    let mut gids = Vec::new();
    for _ in 0..3 {
        let (ok, s) = lead
            .call("fleet_spawn", json!({"profile": "echo", "host": "beta"}))
            .await;
        assert!(ok, "{s}\n{}", logs(&hosts));
        gids.push(s["gid"].as_str().unwrap_or_default().to_string());
    }

    // Three delegations in flight; the members work 2 s each.
    let mut tickets = Vec::new();
    for (k, gid) in gids.iter().enumerate() {
        let (ok, t) = lead
            .call(
                "fleet_send",
                json!({"sessionId": gid, "message": format!("SLOW 2000: job {k}"),
                       "wait": false, "timeoutMs": 60000}),
            )
            .await;
        assert!(ok, "{t}");
        tickets.push(t["ticket"].as_str().unwrap_or_default().to_string());
    }
    eventually("every job typed on beta", 20, || async {
        for (k, gid) in gids.iter().enumerate() {
            if typed(&hosts[1], gid, &format!("job {k}")).await != 1 {
                return false;
            }
        }
        true
    })
    .await;
    rabbitmqctl(&["stop_app"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    rabbitmqctl(&["start_app"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    rabbitmqctl(&["await_startup"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // Each delegation ends, and its reply is found: as the outcome, or held for the lead.
    for (k, ticket) in tickets.iter().enumerate() {
        reply_found(&lead, ticket, &gids[k], &format!("job {k}"), 90, &hosts).await;
        assert_eq!(typed(&hosts[1], &gids[k], &format!("job {k}")).await, 1);
    }

    // The fleet works as before.
    let (ok, out) = lead
        .call(
            "fleet_send",
            json!({"sessionId": gids[0], "message": "after the restart"}),
        )
        .await;
    assert!(ok, "{out}\n{}", logs(&hosts));
    assert_eq!(out["outcome"], "REPLIED", "{out}");
    let (_, health) = fleet_tests::fleetd_proc::Rest::new(&hosts[0].proc.url, None)
        .get("/healthz")
        .await;
    assert_eq!(health["broker"]["connected"], true, "{health}");
    assert!(
        health["broker"]["generation"].as_u64() >= Some(2),
        "{health}"
    );

    lead.close().await;
    stop_all(&mut hosts).await;
    let mut inboxes: Vec<&str> = gids.iter().map(String::as_str).collect();
    inboxes.extend(["lead-alpha", "lead-beta"]);
    fleet_tests::gateways::delete_namespace(&ns, &HOSTS[..2], &inboxes).await;
}

//! A lead that never collects, on two real `fleetd` processes and the real RabbitMQ: ten
//! prefetch windows of `wait:false` results nobody polls, then a blocking send — answered,
//! because results waiting for their lead sit on its held queue, not in its inbox's window.
//! (The first build wedged here: after `prefetch` uncollected results nothing more reached the
//! lead, and the blocking send ended TIMED_OUT_QUEUED although its brief was typed.)

use fleet_tests::fleetd_proc::{eventually, logs, start_host_with, stop_all, typed, Dir, Mcp};
use serde_json::json;
use std::time::Duration;

const PREFETCH: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lead_that_never_collects_still_gets_its_blocking_send_answered() {
    let dir = Dir::new("negligent");
    let ns = format!("negligent{}", std::process::id());
    let mut hosts = Vec::new();
    for i in 0..2 {
        hosts.push(start_host_with(&dir, &ns, i, &format!("prefetch = {PREFETCH}")).await);
    }
    let alpha = Mcp::connect(&hosts[0].proc.url, Some(&hosts[0].token))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let beta_lead = Mcp::connect(&hosts[1].proc.url, Some(&hosts[1].token))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (ok, s) = beta_lead
        .call("fleet_spawn", json!({"profile": "echo"}))
        .await;
    assert!(ok, "{s}\n{}", logs(&hosts));
    let gid = s["gid"].as_str().unwrap_or_default().to_string();
    eventually("alpha lists beta's member", 30, || async {
        let (_, l) = alpha.call("fleet_list", json!({})).await;
        l.to_string().contains(&gid)
    })
    .await;

    // Ten windows of results, none ever polled. The member takes one task at a time: a brief
    // that reaches it while its last result is still on the way back ends BUSY (its ticket,
    // also never polled), and the task is sent again.
    for i in 0..10 * PREFETCH {
        let task = format!("uncollected task {i}.");
        let mut taken = false;
        for _ in 0..20 {
            let (ok, t) = alpha
                .call(
                    "fleet_send",
                    json!({"sessionId": gid, "message": task, "wait": false}),
                )
                .await;
            // (The lead's gateway may say BUSY itself while the last result is on its way.)
            assert!(ok || t["outcome"] == "BUSY", "{t}\n{}", logs(&hosts));
            for _ in 0..30 {
                if typed(&hosts[1], &gid, &task).await == 1 {
                    taken = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if taken {
                break;
            }
        }
        assert!(taken, "task {i} was never typed\n{}", logs(&hosts));
    }

    // BUSY (an error result on MCP) while the member still works on the last task — on a real
    // herdr the played member can answer it seconds after it was typed — then REPLIED.
    let mut end = serde_json::Value::Null;
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < until {
        let (ok, out) = alpha
            .call(
                "fleet_send",
                json!({"sessionId": gid, "message": "the blocking one", "timeoutMs": 30000}),
            )
            .await;
        end = out;
        if end["outcome"] == "BUSY" {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        assert!(ok, "{end}\n{}", logs(&hosts));
        break;
    }
    assert_eq!(end["outcome"], "REPLIED", "{end}\n{}", logs(&hosts));
    assert_eq!(typed(&hosts[1], &gid, "the blocking one").await, 1);

    alpha.close().await;
    beta_lead.close().await;
    stop_all(&mut hosts).await;
    // The hosts' own queues do not expire: leave the broker as it was found.
    fleet_tests::gateways::delete_namespace(&ns, &["alpha", "beta"], &["lead-alpha", "lead-beta"])
        .await;
}

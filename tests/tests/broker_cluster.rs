//! fleetd on a three-node RabbitMQ cluster with quorum queues, losing the node that leads the
//! inboxes under load — end to end, with real `fleetd` processes. The test builds its own
//! cluster (`scripts/cluster/rabbit-cluster.sh`: the machine's node plus rabbit2 and rabbit3)
//! and takes it down again; where `rabbitmq-server` is absent it says so and passes.
//!
//! Every gateway lists rabbit2 first, so rabbit2 takes their connections and, by RabbitMQ's
//! client-local placement, leads every inbox; the test checks that before it kills rabbit2
//! with `kill -9`, and starts it again later.

use fleet_tests::cluster::{cluster_uris, leaders, unavailable, Cluster};
use fleet_tests::fleetd_proc::{
    eventually, logs, reply_found, start_host_edited, stop_all, typed, Dir, Host, Mcp, Rest, HOSTS,
};
use serde_json::json;
use std::time::Duration;
use tokio::time::Instant;

/// Host `i`'s config, moved onto the cluster with quorum queues.
fn on_cluster(config: String) -> String {
    let uris = cluster_uris()
        .iter()
        .map(|u| format!("{u:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let line = config
        .lines()
        .find(|l| l.starts_with("uri = "))
        .unwrap_or_default()
        .to_string();
    config.replace(
        &line,
        &format!("uris = [{uris}]\nqueue_type = \"quorum\"\nconnect_timeout_ms = 3000"),
    )
}

async fn spawn(lead: &Mcp, host: &str, hosts: &[Host]) -> String {
    let (ok, s) = lead
        .call("fleet_spawn", json!({"profile": "echo", "host": host}))
        .await;
    assert!(ok, "{s}\n{}", logs(hosts));
    s["gid"].as_str().unwrap_or_default().to_string()
}

async fn health_all(hosts: &[Host]) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for h in hosts {
        out.push(Rest::new(&h.proc.url, None).get("/healthz").await.1);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_node_that_leads_the_inboxes_loses_no_reply_and_types_nothing_twice() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let cluster = Cluster::up().unwrap_or_else(|e| panic!("{e}"));
    let dir = Dir::new("cluster");
    let ns = format!("e2ec{}", std::process::id());
    let mut hosts: Vec<Host> = Vec::new();
    for i in 0..3 {
        hosts.push(start_host_edited(&dir, &ns, i, on_cluster).await);
    }
    let pids: Vec<u32> = hosts.iter().map(|h| h.proc.pid()).collect();
    let alpha = Mcp::connect(&hosts[0].proc.url, Some(&hosts[0].token))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let beta = Mcp::connect(&hosts[1].proc.url, Some(&hosts[1].token))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eventually("every host in the leads' rosters", 60, || async {
        let (_, a) = alpha.call("fleet_list", json!({})).await;
        let (_, b) = beta.call("fleet_list", json!({})).await;
        a.to_string().contains("\"beta\"") && b.to_string().contains("\"gamma\"")
    })
    .await;

    // alpha's lead works with three members on beta, beta's with two on gamma; one more idle
    // member on beta answers the probes that time the recovery.
    let mut work: Vec<(usize, String)> = Vec::new();
    for _ in 0..3 {
        work.push((0, spawn(&alpha, "beta", &hosts).await));
    }
    for _ in 0..2 {
        work.push((1, spawn(&beta, "gamma", &hosts).await));
    }
    let probe = spawn(&alpha, "beta", &hosts).await;
    // And one member each that answers at once: its result waits, unpolled, on its lead's
    // held queue (checked out to the lead's gateway on rabbit2) when the node dies.
    let quick = [
        (0, spawn(&alpha, "beta", &hosts).await),
        (1, spawn(&beta, "gamma", &hosts).await),
    ];
    let on = |lead: usize| if lead == 0 { &alpha } else { &beta };
    let host_of = |lead: usize| if lead == 0 { 1 } else { 2 };

    let mut tickets = Vec::new();
    for (k, (lead, gid)) in work.iter().enumerate() {
        let (ok, t) = on(*lead)
            .call(
                "fleet_send",
                json!({"sessionId": gid, "message": format!("SLOW 3000: job {k}"),
                       "wait": false, "timeoutMs": 120000}),
            )
            .await;
        assert!(ok, "{t}");
        tickets.push(t["ticket"].as_str().unwrap_or_default().to_string());
    }
    let mut held = Vec::new();
    for (k, (lead, gid)) in quick.iter().enumerate() {
        let (ok, t) = on(*lead)
            .call(
                "fleet_send",
                json!({"sessionId": gid, "message": format!("quick {k}"),
                       "wait": false, "timeoutMs": 120000}),
            )
            .await;
        assert!(ok, "{t}");
        held.push(t["ticket"].as_str().unwrap_or_default().to_string());
    }
    eventually("every job typed", 30, || async {
        for (k, (lead, gid)) in work.iter().enumerate() {
            if typed(&hosts[host_of(*lead)], gid, &format!("job {k}")).await != 1 {
                return false;
            }
        }
        for (k, (lead, gid)) in quick.iter().enumerate() {
            if typed(&hosts[host_of(*lead)], gid, &format!("quick {k}")).await != 1 {
                return false;
            }
        }
        true
    })
    .await;
    // The quick results travel back to their leads' gateways meanwhile.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // The node that leads the inboxes: rabbit2, where every gateway connected first.
    let inboxes: Vec<(String, String)> = leaders()
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .filter(|(q, _)| q.starts_with(&ns) && q.ends_with(".inbox.v2"))
        .collect();
    assert!(inboxes.len() >= 6, "{inboxes:?}");
    assert!(
        inboxes.iter().all(|(_, l)| l == "rabbit2@localhost"),
        "every inbox led by rabbit2: {inboxes:?}"
    );
    let killed = Instant::now();
    eprintln!(
        "{}",
        cluster
            .kill("rabbit2")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    );

    // The fleet goes on without rabbit2: time the first delegation that completes after it
    // died. A probe that fails (the broker moving under it) is retried with a new text.
    let mut recovered = None;
    let mut probes = Vec::new();
    let mut n = 0;
    while recovered.is_none() && killed.elapsed() < Duration::from_secs(90) {
        let (_, out) = alpha
            .call(
                "fleet_send",
                json!({"sessionId": probe, "message": format!("probe {n}"), "timeoutMs": 10000}),
            )
            .await;
        if out["outcome"] == "REPLIED" {
            recovered = Some(killed.elapsed());
        } else {
            probes.push(format!("{:?} probe {n}: {out}", killed.elapsed()));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        n += 1;
    }
    let health = health_all(&hosts).await;
    let recovered = recovered.unwrap_or_else(|| {
        panic!(
            "no delegation completed within 90 s of the node's death\n{}\n{health:#?}\n{}",
            probes.join("\n"),
            logs(&hosts)
        )
    });
    for p in &probes {
        eprintln!("{p}");
    }
    eprintln!("node death to the first delegation completing again: {recovered:?}");

    // Later, rabbit2 comes back and rejoins.
    tokio::time::sleep(Duration::from_secs(5)).await;
    eprintln!(
        "{}",
        cluster
            .start("rabbit2")
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    );

    // Every delegation ends, and its reply is found: as the outcome, or held for the lead.
    for (k, ticket) in tickets.iter().enumerate() {
        let (lead, gid) = &work[k];
        let needle = format!("job {k}");
        reply_found(on(*lead), ticket, gid, &needle, 120, &hosts).await;
        let host = &hosts[host_of(*lead)];
        assert_eq!(typed(host, gid, &needle).await, 1, "{needle} typed once");
    }
    for (k, ticket) in held.iter().enumerate() {
        let (lead, gid) = &quick[k];
        let needle = format!("quick {k}");
        reply_found(on(*lead), ticket, gid, &needle, 60, &hosts).await;
        let host = &hosts[host_of(*lead)];
        assert_eq!(typed(host, gid, &needle).await, 1, "{needle} typed once");
    }
    for k in 0..n {
        assert!(
            typed(&hosts[1], &probe, &format!("probe {k}")).await <= 1,
            "probe {k} typed twice"
        );
    }

    // The fleet works as before, with rabbit2 back, and no gateway was restarted.
    for (lead, gid) in [&work[0], &work[3]] {
        let (ok, out) = on(*lead)
            .call(
                "fleet_send",
                json!({"sessionId": gid, "message": "after the loss"}),
            )
            .await;
        assert!(ok, "{out}\n{}", logs(&hosts));
        assert_eq!(out["outcome"], "REPLIED", "{out}");
    }
    for (h, health) in hosts.iter().zip(health_all(&hosts).await) {
        assert_eq!(health["broker"]["connected"], true, "{}: {health}", h.name);
        assert!(
            health["broker"]["generation"].as_u64() >= Some(2),
            "{}: {health}",
            h.name
        );
    }
    assert_eq!(
        hosts.iter().map(|h| h.proc.pid()).collect::<Vec<_>>(),
        pids,
        "the same gateway processes throughout"
    );

    alpha.close().await;
    beta.close().await;
    stop_all(&mut hosts).await;
    let mut gids: Vec<&str> = work.iter().map(|(_, g)| g.as_str()).collect();
    gids.extend(quick.iter().map(|(_, g)| g.as_str()));
    gids.extend([probe.as_str(), "lead-alpha", "lead-beta", "lead-gamma"]);
    fleet_tests::gateways::delete_namespace(&ns, &HOSTS, &gids).await;
    drop(cluster);
}

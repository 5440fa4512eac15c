//! U6 and U7 end to end, with real `fleetd` processes on RabbitMQ: a lead spawns ARCHITECT
//! members on two hosts with different profiles; one delegates to a worker on the other host
//! (an architect may SEND), and may not spawn; the same brief goes to both architects, and the
//! two results come back apart, each attributed to its own architect.

use fleet_tests::fleetd_proc::{
    echo_argv, eventually, logs, start_host, start_host_edited, stop_all, ticket_end, Mcp, Rest,
    HOSTS,
};
use serde_json::{json, Value};
use std::time::Duration;

async fn spawn(lead: &Mcp, args: Value) -> String {
    let (ok, v) = lead.call("fleet_spawn", args).await;
    assert!(ok, "{v}");
    v["gid"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn u6_u7_two_architects_on_two_hosts_answer_one_brief_apart() {
    let dir = fleet_tests::fleetd_proc::Dir::new("architects");
    let ns = format!("arch{}", std::process::id());
    // beta offers a second profile (another model family, in a real fleet).
    let second = format!(
        "[profiles.echo2]\nkind = \"command\"\nargv = {}\n\n[profiles.echo]",
        echo_argv()
    );
    let mut hosts = vec![
        start_host(&dir, &ns, 0).await,
        start_host_edited(&dir, &ns, 1, |c| c.replace("[profiles.echo]", &second)).await,
    ];
    let scenario = async {
        let lead = Mcp::connect(&hosts[0].proc.url, Some(&hosts[0].token))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        eventually("beta's gateway in alpha's roster", 30, || async {
            let (_, v) = lead.call("fleet_profiles", json!({})).await;
            v["hosts"]["beta"].to_string().contains("echo2")
        })
        .await;
        let a1 = spawn(
            &lead,
            json!({"profile": "echo", "role": "ARCHITECT", "ticket": "CB-700"}),
        )
        .await;
        let a2 = spawn(
            &lead,
            json!({"profile": "echo2", "host": "beta", "role": "ARCHITECT", "ticket": "CB-700"}),
        )
        .await;
        let worker = spawn(&lead, json!({"profile": "echo"})).await;

        // The roster shows what each is, on both hosts.
        let beta_lead = Mcp::connect(&hosts[1].proc.url, Some(&hosts[1].token))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for (who, m) in [("alpha", &lead), ("beta", &beta_lead)] {
            eventually(
                &format!("{who} lists both architects as such"),
                20,
                || async {
                    let (_, v) = m.call("fleet_list", json!({})).await;
                    let rows = v["rows"].as_array().cloned().unwrap_or_default();
                    [&a1, &a2].iter().all(|g| {
                        rows.iter().any(|r| {
                            r["gid"] == g.as_str()
                                && r["role"] == "ARCHITECT"
                                && r["ticket"] == "CB-700"
                        })
                    })
                },
            )
            .await;
        }
        let (_, me) = lead.call("fleet_list", json!({})).await;
        assert_eq!(me["you"]["coordId"], "lead-alpha", "{me}");

        // U6: the architect on beta delegates to the worker on alpha, as an architect may.
        let (ok, out) = lead
            .call(
                "fleet_send",
                json!({"sessionId": a2, "message": format!("DELEGATE {worker}: index the tables")}),
            )
            .await;
        assert!(ok, "{out}");
        assert_eq!(out["outcome"], "REPLIED", "{out}");
        let body = out["body"].as_str().unwrap_or_default();
        assert!(
            body.contains("delegated (200): REPLIED done: index the tables"),
            "{out}"
        );
        // … but it may not spawn.
        let token = fleetd::herdr::launch::token_on_record(
            &dir.0.join(hosts[1].name).join("state/members"),
            &fleetd::daemon::member_key(&[11; 32]),
            &a2,
        )
        .unwrap_or_else(|| panic!("no nonce on record for {a2}"));
        let as_a2 = Rest::new(&hosts[1].proc.url, Some(&token));
        let (status, refused) = as_a2.post("/members", json!({"profile": "echo2"})).await;
        assert_eq!(status, 403, "{refused}");
        assert_eq!(refused["code"], "denied", "{refused}");
        // Nor delegate to a lead — on its host or another — whose pane holds an unsandboxed
        // agent: a member delegates to members only.
        for lead_gid in ["lead-beta", "lead-alpha"] {
            let (status, refused) = as_a2
                .post(
                    &format!("/sessions/{lead_gid}/message"),
                    json!({"message": "\u{1b}[201~ run this", "timeoutMs": 5000}),
                )
                .await;
            assert_eq!(status, 400, "{lead_gid}: {refused}");
            assert_eq!(refused["code"], "invalid_argument", "{refused}");
        }
        for h in &hosts {
            let typed = h.herdr.typed_into(&h.lead_pane).await.join("\n");
            assert!(!typed.contains("run this"), "{}: {typed}", h.name);
        }

        // U7: the same brief to both architects; two results, kept apart, each its own.
        let mut tickets = Vec::new();
        for a in [&a1, &a2] {
            let (ok, t) = lead
                .call(
                    "fleet_send",
                    json!({"sessionId": a, "message": "DESIGN: the cache layer", "wait": false}),
                )
                .await;
            assert!(ok, "{t}");
            tickets.push((
                a.clone(),
                t["ticket"].as_str().unwrap_or_default().to_string(),
            ));
        }
        for (a, ticket) in &tickets {
            let end = ticket_end(&lead, ticket, 30)
                .await
                .unwrap_or_else(|| panic!("{a}'s ticket never ended"));
            assert_eq!(end["outcome"], "REPLIED", "{end}");
            assert_eq!(end["target"], a.as_str(), "{end}");
            assert_eq!(
                end["body"].as_str(),
                Some(format!("design of the cache layer by {a}").as_str()),
                "{end}"
            );
        }
        beta_lead.close().await;
        lead
    };
    let lead = match tokio::time::timeout(Duration::from_secs(150), scenario).await {
        Ok(lead) => lead,
        Err(_) => panic!("the scenario hung\n{}", logs(&hosts)),
    };
    lead.close().await;
    stop_all(&mut hosts).await;
    fleet_tests::gateways::delete_namespace(&ns, &HOSTS[..2], &["lead-alpha", "lead-beta"]).await;
}

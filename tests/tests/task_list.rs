//! A lead's task list end to end: two `fleetd` processes on RabbitMQ, members played on herdr
//! doubles, and the lead's gateway killed (`kill -9`) and restarted while a task runs on the
//! other host.

use fleet_tests::fleetd_proc::{
    eventually, logs, start_host, stop_all, typed, Dir, Mcp, Rest, HOSTS,
};
use serde_json::{json, Value};
use std::time::Duration;

/// Task `id` of the lead's list once `done` holds of it (or panics naming what it was).
async fn task_until(rest: &Rest, id: u32, secs: u64, done: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..secs * 5 {
        if let Ok((200, v)) = rest.try_get(&format!("/tasklist/{id}")).await {
            last = v["tasks"][0].clone();
            if done(&last) {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("task {id} never got there: {last}");
}

fn state_is(s: &'static str) -> impl Fn(&Value) -> bool {
    move |t| t["state"] == s
}

/// t1 on alpha, then t2 on beta, then t3 on alpha again, each depending on the one before:
/// each runs only once the one before is reviewed done; alpha's gateway dies while t2 runs on
/// beta and comes back with its list, t2's result finds its task, and nothing is typed twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_task_chain_runs_in_order_on_two_hosts_across_a_restart_of_its_leads_gateway() {
    let dir = Dir::new("tasklist");
    let ns = format!("tasklist-{}", std::process::id());
    let mut hosts = vec![
        start_host(&dir, &ns, 0).await,
        start_host(&dir, &ns, 1).await,
    ];
    let scenario = async {
        let lead = Mcp::connect(&hosts[0].proc.url, Some(&hosts[0].token))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        eventually("beta in alpha's roster", 30, || async {
            let (_, v) = lead.call("fleet_list", json!({})).await;
            let rows = v["rows"].as_array().cloned().unwrap_or_default();
            rows.iter()
                .any(|r| r["host"] == "beta" && r["kind"] == "gateway")
        })
        .await;
        let spawn = |host: &'static str| {
            let lead = &lead;
            async move {
                let (ok, v) = lead
                    .call("fleet_spawn", json!({"profile": "echo", "host": host}))
                    .await;
                assert!(ok, "{v}");
                v["gid"].as_str().unwrap_or_default().to_string()
            }
        };
        let (a1, b1) = (spawn("alpha").await, spawn("beta").await);

        // The chain, over MCP: each added task says its state at once.
        let add = |title: &str, brief: &str, assignee: &str, deps: &[u32]| json!({"title": title, "brief": brief, "assignee": assignee, "deps": deps});
        let (ok, t1) = lead
            .call("fleet_task_add", add("one", "first", &a1, &[]))
            .await;
        assert!(ok, "{t1}");
        assert_eq!(t1["tasks"][0]["state"], "running", "{t1}");
        let (ok, t2) = lead
            .call("fleet_task_add", add("two", "SLOW 6000: second", &b1, &[1]))
            .await;
        assert!(ok, "{t2}");
        assert_eq!(t2["tasks"][0]["state"], "pending", "{t2}");
        let (ok, t3) = lead
            .call("fleet_task_add", add("three", "third", &a1, &[2]))
            .await;
        assert!(ok, "{t3}");
        // A dependency that is not on the list is refused, naming it.
        let (ok, bad) = lead
            .call("fleet_task_add", add("four", "x", &a1, &[9]))
            .await;
        assert!(!ok && bad["code"] == "unknown_task", "{bad}");
        lead.close().await;

        // Over REST from here: t1's result waits in review for the lead's decision.
        let rest = Rest::new(&hosts[0].proc.url, Some(&hosts[0].token));
        let t1 = task_until(&rest, 1, 30, state_is("review")).await;
        assert_eq!(t1["result"], "done: first", "{t1}");
        assert_eq!(t1["outcome"], "REPLIED", "{t1}");
        assert_eq!(
            typed(&hosts[1], &b1, "second").await,
            0,
            "t2 waits for the review"
        );
        let (code, v) = rest
            .post("/tasklist/1/review", json!({"decision": "done"}))
            .await;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["tasks"][0]["state"], "done", "{v}");

        // t2 starts on beta; alpha's gateway is killed while beta's member works on it.
        let beta = &hosts[1];
        eventually("t2 typed on beta", 20, || async {
            typed(beta, &b1, "second").await == 1
        })
        .await;
        let a = &mut hosts[0];
        a.proc.kill9().await;
        a.proc
            .restart(&dir.0.join(a.name), a.port)
            .await
            .unwrap_or_else(|e| panic!("{e}"));

        // The restarted gateway has its list back; t2's result, sent while it was down,
        // finds t2 and waits in review; t3 has not started.
        let rest = Rest::new(&hosts[0].proc.url, Some(&hosts[0].token));
        let t2 = task_until(&rest, 2, 40, state_is("review")).await;
        assert_eq!(t2["result"], "done: SLOW 6000: second", "{t2}");
        let (_, all) = rest.get("/tasklist").await;
        let states: Vec<&str> = all["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["state"].as_str())
            .collect();
        assert_eq!(states, ["done", "review", "pending"], "{all}");
        assert_eq!(typed(&hosts[0], &a1, "third").await, 0);
        // Nothing held for the lead as well: the result went to its task.
        let (_, attention) = rest.get("/attention").await;
        assert!(
            !attention.to_string().contains("result_stranded"),
            "{attention}"
        );

        let (code, v) = rest
            .post("/tasklist/2/review", json!({"decision": "done"}))
            .await;
        assert_eq!(code, 200, "{v}");
        let t3 = task_until(&rest, 3, 30, state_is("review")).await;
        assert_eq!(t3["result"], "done: third", "{t3}");

        // Each brief typed exactly once, each into its own member.
        assert_eq!(typed(&hosts[0], &a1, "first").await, 1);
        assert_eq!(typed(&hosts[1], &b1, "second").await, 1);
        assert_eq!(typed(&hosts[0], &a1, "third").await, 1);
        // Gauges are read at most once a second: wait for a reading after t3's review.
        let (done, review) = (
            "fleet_tasks{state=\"done\"} 2",
            "fleet_tasks{state=\"review\"} 1",
        );
        let metrics = rest
            .metrics_until(|m| m.contains(done) && m.contains(review))
            .await;
        assert!(
            metrics.contains(done) && metrics.contains(review),
            "{metrics}"
        );
    };
    if tokio::time::timeout(Duration::from_secs(180), scenario)
        .await
        .is_err()
    {
        panic!("the scenario hung\n{}", logs(&hosts));
    }
    stop_all(&mut hosts).await;
    fleet_tests::gateways::delete_namespace(&ns, &HOSTS[..2], &["lead-alpha", "lead-beta"]).await;
}

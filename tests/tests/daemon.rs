//! The daemon end to end: real `fleetd` processes, a lead speaking MCP through rmcp's client,
//! REST, members played through herdr's API on the herdr double, or on a real herdr when
//! `HERDR_BIN` names one (see `fleet_tests::fleetd_proc` and `fleet_tests::panes`).

use fleet_core::broker::Names;
use fleet_core::SessionId;
use fleet_tests::conformance::amqp_side::queue_exists;
use fleet_tests::fleetd_proc::{
    collect, eventually, free_port, logs, play_members, solo_config, start_host, stop_all,
    ticket_end, typed, write_key, Dir, Host, Mcp, Proc, Rest, HOSTS,
};
use fleet_tests::gateways::amqp_uri;
use fleet_tests::panes::Panes;
use serde_json::json;
use std::time::Duration;

const LEAD_TOKEN: &str = "lead-token-0123456789abcdef";

const ARCHITECT_TOKEN: &str = "architect-token-0123456789abcdef";

fn member_key(dir: &Dir, seed: u8) -> [u8; 32] {
    let state = dir.0.join("state");
    std::fs::create_dir_all(&state).unwrap_or_else(|e| panic!("{e}"));
    let secret = write_key(&state.join("gateway.key"), seed);
    fleetd::daemon::member_key(&secret)
}

/// One host, no broker: a lead connects over MCP, sees exactly the fifteen tools, spawns a
/// member, delegates to it and gets its reply; REST serves the same gateway with stable errors,
/// metrics and an OpenAPI document that names every route; SIGTERM stops it cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_host_gateway_delegates_over_mcp_with_no_broker() {
    let dir = Dir::new("single");
    // Its members are played from outside: the double, always (`Panes::start_double`).
    let herdr = Panes::start_double(&dir.0).await;
    let port = free_port();
    let mkey = member_key(&dir, 3);
    let lead_pane = herdr.add_lead_pane("lead").await;
    let architect_pane = herdr.add_lead_pane("archie").await;
    let config = solo_config(
        &dir,
        port,
        &herdr.path(),
        (&lead_pane, &architect_pane),
        (LEAD_TOKEN, ARCHITECT_TOKEN),
    );
    let mut fleetd = Proc::start(&dir.0, "solo", port, &config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _members = play_members(herdr.clone(), &fleetd.url, mkey, &dir.0.join("state"));

    let lead = Mcp::connect(&fleetd.url, Some(LEAD_TOKEN))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", fleetd.log_text()));
    assert_eq!(
        lead.tools().await,
        [
            "fleet_ack",
            "fleet_ask",
            "fleet_attention",
            "fleet_list",
            "fleet_poll",
            "fleet_profiles",
            "fleet_reply",
            "fleet_send",
            "fleet_spawn",
            "fleet_status",
            "fleet_stop",
            "fleet_task_add",
            "fleet_task_list",
            "fleet_task_review",
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
    assert!(herdr.member_pane(&gid).await.is_some(), "no member pane");
    assert_eq!(herdr.member_typed(&gid, "brief one").await, 1);

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
    let row = members["rows"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["gid"] == gid.as_str()))
        .unwrap_or_else(|| panic!("{gid} not listed: {members}"));
    // The row is truthful: who the member is, and a status even while idle.
    let who = (&row["profile"], &row["role"], &row["owner"], &row["ready"]);
    let want = (&json!("echo"), &json!("DEV"), &json!("lead1"), &json!(true));
    assert_eq!(who, want, "{row}");
    // Busy until the turn's end is seen (the reply came first); a status either way.
    let known = row["status"].is_string() && row["busy"].is_boolean() && row["since"].is_u64();
    assert!(known, "{row}");
    let (code, st) = rest.get(&format!("/sessions/{gid}/status")).await;
    assert_eq!(
        (code, &st["view"]["queued"], &st["view"]["host"]),
        (200, &json!(0), &row["host"]),
        "{st}"
    );
    // Its health, from the slow probe: at rest, the same on REST and MCP, and counted.
    let mut health = json!(null);
    for _ in 0..50 {
        health = rest.get(&format!("/sessions/{gid}/status")).await.1;
        if health["view"]["health"] == "IDLE" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        (&health["view"]["health"], &health["view"]["health_reason"]),
        (&json!("IDLE"), &json!("ready")),
        "{health}"
    );
    let (ok, status) = lead.call("fleet_status", json!({"sessionId": gid})).await;
    assert!(ok, "{status}");
    assert_eq!(status["view"]["health"], "IDLE", "{status}");
    let nobody = "99999999-9999-4999-8999-999999999999";
    let (code, err) = rest.get(&format!("/sessions/{nobody}/status")).await;
    assert_eq!(
        (code, err["code"].as_str()),
        (404, Some("not_found")),
        "{err}"
    );
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

    // A bad body is the same stable 400 as any bad argument.
    let (code, err) = rest.post("/members", json!({"profil": "echo"})).await;
    assert_eq!(
        (code, err["code"].as_str()),
        (400, Some("invalid_argument")),
        "{err}"
    );
    // The DNS-rebinding guard covers REST too.
    let rebound = reqwest::Client::new()
        .get(format!("{}/members", fleetd.url))
        .header("host", "attacker.example")
        .bearer_auth(LEAD_TOKEN)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rebound.status().as_u16(), 403);

    // A member may reply only as itself.
    let token = fleetd::herdr::launch::token_on_record(&dir.0.join("state/members"), &mkey, &gid)
        .unwrap_or_else(|| panic!("no nonce on record for {gid}"));
    let (code, err) = Rest::new(&fleetd.url, Some(&token))
        .post("/sessions/somebody-else/reply", json!({"message": "m"}))
        .await;
    assert_eq!((code, err["code"].as_str()), (403, Some("denied")), "{err}");
    // A member lists the fleet's panes only; the lead sees its own pane too.
    let labels = |v: &serde_json::Value| -> Vec<String> {
        v["panes"]
            .as_array()
            .map(|a| a.iter().map(|p| p["label"].to_string()).collect())
            .unwrap_or_default()
    };
    let (_, mine) = Rest::new(&fleetd.url, Some(&token)).get("/sessions").await;
    let (_, all) = rest.get("/sessions").await;
    assert!(
        labels(&mine).iter().all(|l| l.starts_with("\"fleet:")),
        "{mine}"
    );
    assert!(labels(&all).len() > labels(&mine).len(), "{all}\n{mine}");

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
    // Anyone may read it: it names no path of this host.
    let anyone = Rest::new(&fleetd.url, None).get("/healthz").await.1;
    let socket = herdr.path().display().to_string();
    assert!(!anyone.to_string().contains(&socket), "{anyone}");
    assert!(
        !anyone.to_string().contains(&dir.0.display().to_string()),
        "{anyone}"
    );

    // One member, in one of the seventeen states (which one moves with its turns).
    let health_rows = |metrics: &str| -> (usize, f64) {
        let rows: Vec<f64> = metrics
            .lines()
            .filter(|l| l.starts_with("fleet_member_health{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        (rows.len(), rows.iter().sum())
    };
    let metrics = rest.metrics_until(|m| health_rows(m) == (14, 1.0)).await;
    assert!(
        metrics.contains("fleet_sends_total{face=\"mcp\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("fleet_send_outcomes_total{outcome=\"REPLIED\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("fleet_replies_total 2"), "{metrics}");
    assert_eq!(health_rows(&metrics), (17, 1.0), "{metrics}");
    assert!(metrics.contains("fleet_mute_turns_total 0"), "{metrics}");
    // The latencies of what just happened: the delegation, its brief's wait, its herdr calls.
    for series in [
        "fleet_delegation_seconds_count{outcome=\"REPLIED\"} ",
        "fleet_inject_wait_seconds_count{result=\"typed\"} ",
        "fleet_herdr_call_seconds_count{op=\"inject\"} ",
        "fleet_herdr_call_seconds_count{op=\"spawn\"} 1\n",
    ] {
        assert!(metrics.contains(series), "{series}\n{metrics}");
    }

    // U6/U7: an architect delegates but may not spawn; each lead is nudged in its own pane
    // about its own items, and a reply that outlives the primary's send is held for it.
    let architect = Mcp::connect(&fleetd.url, Some(ARCHITECT_TOKEN))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (ok, denied) = architect
        .call("fleet_spawn", json!({"profile": "echo"}))
        .await;
    assert!(!ok);
    assert_eq!(denied["code"], "denied", "{denied}");
    let (ok, out) = architect
        .call(
            "fleet_send",
            json!({"sessionId": gid, "message": "from the architect"}),
        )
        .await;
    assert!(ok, "{out}");
    assert_eq!(out["outcome"], "REPLIED", "{out}");
    // Each lead is nudged about its own items only.
    let lead_nudges = herdr.typed(&lead_pane, "fleet_poll").await;
    let (ok, t) = architect
        .call(
            "fleet_send",
            json!({"sessionId": gid, "message": "async for the architect", "wait": false}),
        )
        .await;
    assert!(ok, "{t}");
    for _ in 0..100 {
        if herdr.typed(&architect_pane, "fleet_poll").await > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        herdr.typed(&architect_pane, "fleet_poll").await,
        1,
        "{}",
        fleetd.log_text()
    );
    assert_eq!(herdr.typed(&lead_pane, "fleet_poll").await, lead_nudges);
    let (_, t) = lead
        .call(
            "fleet_send",
            json!({"sessionId": gid, "message": "SLOW 6000: stranded", "timeoutMs": 3000}),
        )
        .await;
    assert_eq!(
        t["outcome"],
        "TIMED_OUT_WORKING",
        "{t}\n{}",
        fleetd.log_text()
    );
    // The stranded reply is held for the primary, who is nudged in its own pane (a nudge
    // still queued when the reply is drained is dropped, so look before collecting).
    let mut nudged = false;
    for _ in 0..200 {
        if herdr.typed(&lead_pane, "fleet_poll").await > lead_nudges {
            nudged = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(nudged, "{}", fleetd.log_text());
    // From a browser page: only this origin is answered, and a GET never drains.
    let browser = |method: reqwest::Method, path: &str, origin: &str, site: &str| {
        reqwest::Client::new()
            .request(method, format!("{}{path}", fleetd.url))
            .bearer_auth(LEAD_TOKEN)
            .header("origin", origin)
            .header("sec-fetch-site", site)
            .header("sec-fetch-mode", "cors")
            .send()
    };
    let own = fleetd.url.clone();
    let replies = format!("/sessions/{gid}/replies");
    for (origin, site) in [
        ("http://evil.example", "cross-site"),
        (
            &format!("http://127.0.0.1:{}", free_port())[..],
            "same-site",
        ),
    ] {
        let r = browser(reqwest::Method::POST, &replies, origin, site)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status().as_u16(), 403, "{origin}");
        let v: serde_json::Value = r.json().await.unwrap_or_default();
        assert_eq!(v["code"], "cross_origin", "{v}");
    }
    let r = browser(reqwest::Method::GET, &replies, &own, "same-origin")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status().as_u16(), 405, "a browser GET does not drain");
    let peeked = browser(
        reqwest::Method::GET,
        &format!("{replies}?peek=true"),
        &own,
        "same-origin",
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(peeked.status().as_u16(), 200);
    let peeked = peeked.text().await.unwrap_or_default();
    assert!(peeked.contains("stranded"), "{peeked}");
    collect(&lead, &gid, "stranded", 20).await;
    let r = browser(reqwest::Method::POST, &replies, &own, "same-origin")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status().as_u16(), 200, "a same-origin POST drains");
    assert_eq!(herdr.typed(&architect_pane, "fleet_poll").await, 1);

    // Audit: one JSON line per decision, never the content.
    let audit = std::fs::read_to_string(dir.0.join("audit.jsonl")).unwrap_or_default();
    assert!(audit.lines().count() > 5, "{audit}");
    for line in audit.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v["allowed"].is_boolean() && v["action"].is_string(),
            "{line}"
        );
    }
    assert!(
        audit.contains("\"allowed\":false"),
        "the architect's spawn is audited"
    );
    let sends_to_member = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["action"] == "SEND" && v["target"] == gid.as_str() && v["allowed"] == true)
        .count();
    assert!(sends_to_member >= 3, "{audit}");

    architect.close().await;
    lead.close().await;
    let status = fleetd
        .term(Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", fleetd.log_text()));
    assert!(status.success(), "{status}\n{}", fleetd.log_text());
    assert!(fleetd.log_text().contains("fleetd stopped"));
}

/// Three `fleetd` processes on one RabbitMQ, each with its own herdr: U5 (the union roster),
/// U4 (spawn on another host, and a control allowlist refusal), U1 (delegate across hosts),
/// U2 (a question answered, and one answered too late), U3 (a reply after the send timed
/// out, held and collected), U8 (a broadcast reaches every member once), then `kill -9` of the
/// worker's gateway mid-delegation and its restart: the sender is told WORKER_FAILED as soon
/// as the new process announces itself, the brief is typed once and the reply is not lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_on_rabbitmq_delegate_spawn_ask_and_survive_a_kill() {
    let dir = Dir::new("three");
    let ns = format!("e2e{}", std::process::id());
    let mut hosts = Vec::new();
    for i in 0..3 {
        hosts.push(start_host(&dir, &ns, i).await);
    }
    let scenario = async {
        let lead = Mcp::connect(&hosts[0].proc.url, Some(&hosts[0].token))
            .await
            .unwrap_or_else(|e| panic!("{e}"));

        // U5: alpha's roster has every gateway, with the profiles each offers.
        eventually("every gateway in alpha's roster", 30, || async {
            let (_, v) = lead.call("fleet_list", json!({})).await;
            let rows = v["rows"].as_array().cloned().unwrap_or_default();
            HOSTS.iter().all(|h| {
                rows.iter()
                    .any(|r| r["host"] == *h && r["kind"] == "gateway")
            })
        })
        .await;
        let (ok, profiles) = lead.call("fleet_profiles", json!({})).await;
        assert!(ok, "{profiles}");
        assert!(
            profiles["hosts"]["beta"].to_string().contains("echo"),
            "{profiles}"
        );

        // U4: a member spawned on beta from alpha.
        let (ok, spawned) = lead
            .call("fleet_spawn", json!({"profile": "echo", "host": "beta"}))
            .await;
        assert!(ok, "{spawned}");
        assert_eq!(spawned["host"], "beta", "{spawned}");
        let gid_b = spawned["gid"].as_str().unwrap_or_default().to_string();
        assert!(hosts[1].herdr.member_pane(&gid_b).await.is_some());
        // gamma does not take control from alpha: refused, nothing started there.
        let (ok, refused) = lead
            .call("fleet_spawn", json!({"profile": "echo", "host": "gamma"}))
            .await;
        assert!(!ok, "{refused}");
        assert_eq!(refused["code"], "not_allowed", "{refused}");
        let labels = hosts[2].herdr.labels().await;
        assert!(
            labels.iter().all(|l| !l.starts_with("fleet:")),
            "{labels:?}"
        );
        let gamma = Rest::new(&hosts[2].proc.url, Some(&hosts[2].token));
        eventually(
            "gamma counts the refused SPAWN and its broker link",
            10,
            || async {
                let (_, m) = gamma.get("/metrics").await;
                let m = m.as_str().unwrap_or_default().to_string();
                m.contains("fleet_dead_letters_total{code=\"not_allowed\"} 1")
                    && m.contains("fleet_broker_connected 1")
            },
        )
        .await;

        // U1: delegate across hosts.
        let (ok, out) = lead
            .call(
                "fleet_send",
                json!({"sessionId": gid_b, "message": "brief b1"}),
            )
            .await;
        assert!(ok, "{out}");
        assert_eq!(out["outcome"], "REPLIED", "{out}");
        assert!(
            out["body"].as_str().is_some_and(|b| b.contains("brief b1")),
            "{out}"
        );
        assert_eq!(typed(&hosts[1], &gid_b, "brief b1").await, 1);
        // The cross-host round trip and the broker's confirms are in alpha's histograms.
        let alpha = Rest::new(&hosts[0].proc.url, Some(&hosts[0].token));
        let m = alpha
            .metrics_until(|m| m.contains("fleet_delegation_seconds_count{outcome=\"REPLIED\"} "))
            .await;
        assert!(
            m.contains("fleet_broker_confirm_seconds_count{result=\"routed\"} "),
            "{m}"
        );
        // One traceId tells the delegation's story on both hosts.
        let alpha_log = hosts[0].proc.log_text();
        let trace = alpha_log
            .lines()
            .find(|l| l.contains("publish kind=SEND") && l.contains(&format!("to={gid_b}")))
            .and_then(|l| l.split("flow{trace_id=").nth(1))
            .and_then(|t| t.split('}').next())
            .unwrap_or_else(|| panic!("no SEND publish in alpha's log:\n{alpha_log}"))
            .to_string();
        let beta_log = hosts[1].proc.log_text();
        let story: Vec<&str> = beta_log.lines().filter(|l| l.contains(&trace)).collect();
        assert!(
            story.iter().any(|l| l.contains("delivery kind=SEND")),
            "{trace}: {story:?}"
        );
        assert!(
            story.iter().any(|l| l.contains("delivered")),
            "{trace}: {story:?}"
        );

        // Lead to lead (coordId): typed into beta's lead pane, once.
        let (ok, c) = lead
            .call(
                "fleet_send",
                json!({"coordId": "lead-beta", "message": "coordinate: hello beta", "wait": false}),
            )
            .await;
        assert!(ok, "{c}");
        eventually("alpha's note typed into beta's lead pane", 20, || async {
            let h = &hosts[1];
            h.herdr.typed(&h.lead_pane, "coordinate: hello beta").await == 1
        })
        .await;

        // U2: the member asks; the lead answers with the turnId.
        let (_, q) = lead
            .call(
                "fleet_send",
                json!({"sessionId": gid_b, "message": "ASK 20000: which colour?"}),
            )
            .await;
        assert_eq!(q["outcome"], "QUESTION", "{q}");
        assert!(
            q["body"]
                .as_str()
                .is_some_and(|b| b.contains("which colour?")),
            "{q}"
        );
        let turn = q["turn_id"].as_str().unwrap_or_default().to_string();
        let (ok, a) = lead
            .call("fleet_send", json!({"turnId": turn, "message": "blue"}))
            .await;
        assert!(ok, "{a}");
        assert_eq!(a["outcome"], "REPLIED", "{a}");
        assert!(
            a["body"]
                .as_str()
                .is_some_and(|b| b.contains("answered: blue")),
            "{a}"
        );
        // U2, too late: the ask times out before the answer; the answer is STALE_TURN and the
        // member's reply is held for the lead, not lost.
        let (_, q) = lead
            .call(
                "fleet_send",
                json!({"sessionId": gid_b, "message": "ASK 1000: too slow?"}),
            )
            .await;
        assert_eq!(q["outcome"], "QUESTION", "{q}");
        let turn = q["turn_id"].as_str().unwrap_or_default().to_string();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let (ok, late) = lead
            .call("fleet_send", json!({"turnId": turn, "message": "red"}))
            .await;
        assert!(!ok, "{late}");
        assert_eq!(late["outcome"], "STALE_TURN", "{late}");
        collect(&lead, &gid_b, "answered: TIMED_OUT", 15).await;

        // U3: the send times out while the member works; its reply is held and collected.
        let (_, t) = lead
            .call(
                "fleet_send",
                json!({"sessionId": gid_b, "message": "SLOW 7000: slow one", "timeoutMs": 4000}),
            )
            .await;
        assert_eq!(t["outcome"], "TIMED_OUT_WORKING", "{t}");
        collect(&lead, &gid_b, "slow one", 25).await;

        // U8: a broadcast reaches every member, each once.
        let (ok, local) = lead.call("fleet_spawn", json!({"profile": "echo"})).await;
        assert!(ok, "{local}");
        let gid_a = local["gid"].as_str().unwrap_or_default().to_string();
        let (ok, b) = lead
            .call(
                "fleet_send",
                json!({"broadcast": "all", "message": "everyone: report"}),
            )
            .await;
        assert!(ok, "{b}");
        eventually("the broadcast typed into both members", 20, || async {
            typed(&hosts[0], &gid_a, "everyone: report").await == 1
                && typed(&hosts[1], &gid_b, "everyone: report").await == 1
        })
        .await;
        lead
    };
    let lead = match tokio::time::timeout(Duration::from_secs(180), scenario).await {
        Ok(lead) => lead,
        Err(_) => panic!("the scenario hung\n{}", logs(&hosts)),
    };
    let gid_b = hosts[1]
        .herdr
        .members()
        .await
        .first()
        .map(|m| m.gid.clone())
        .unwrap_or_default();
    // Let the broadcast's replies settle, then drain them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = lead.call("fleet_poll", json!({"sessionId": gid_b})).await;

    // kill -9 of the worker's gateway mid-delegation, then its restart.
    let told = |h: &Host| h.proc.log_text().matches("publish kind=INJECTED").count();
    let told_before = told(&hosts[1]);
    let (ok, t) = lead
        .call(
            "fleet_send",
            json!({"sessionId": gid_b, "message": "SLOW 8000: survive", "wait": false, "timeoutMs": 60000}),
        )
        .await;
    assert!(ok, "{t}");
    let ticket = t["ticket"].as_str().unwrap_or_default().to_string();
    let b = &mut hosts[1];
    eventually("the brief typed on beta", 20, || async {
        typed(b, &gid_b, "survive").await == 1
    })
    .await;
    // Beta tells alpha the brief was typed `injected_defer_ms` (250 ms) later, and only then
    // does alpha's restart rule below know to fail it (a gateway killed sooner leaves its
    // brief to the INJECTED bound; docs/federation.md).
    eventually("beta told alpha the brief was typed", 20, || async {
        told(b) > told_before
    })
    .await;
    b.proc.kill9().await;
    b.proc
        .restart(&dir.0.join(b.name), b.port)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The new process's first heartbeat announces a later start, and alpha fails the typed
    // brief then, long before its 60 s timeout: the turn's record died with the old process.
    // The member, still working, replies later; that reply is held on beta for beta's leads
    // (docs/operations.md, "after a crash"), not lost.
    let outcome = ticket_end(&lead, &ticket, 25)
        .await
        .unwrap_or_else(|| panic!("the ticket never ended\n{}", logs(&hosts)));
    assert_eq!(outcome["outcome"], "WORKER_FAILED", "{outcome}");
    assert!(
        outcome.to_string().contains("beta's gateway restarted"),
        "{outcome}"
    );
    let beta_lead = Mcp::connect(&hosts[1].proc.url, Some(&hosts[1].token))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    collect(&beta_lead, &gid_b, "survive", 30).await;
    beta_lead.close().await;
    assert_eq!(
        typed(&hosts[1], &gid_b, "survive").await,
        1,
        "{}",
        logs(&hosts)
    );

    // U4's other half: alpha's lead stops the member on beta. Beta closes its pane and deletes
    // its inbox; alpha's call answers `stopped` once beta's leave says so.
    let stopping = async {
        let (ok, s) = lead.call("fleet_stop", json!({"sessionId": gid_b})).await;
        assert!(ok, "{s}");
        assert_eq!(s["type"], "stopped", "{s}");
        assert!(
            hosts[1].herdr.member_pane(&gid_b).await.is_none(),
            "beta's pane is gone"
        );
        let inbox = Names::new(&ns).inbox(&SessionId::new(&gid_b));
        eventually("beta deleted the member's inbox", 10, || async {
            queue_exists(&amqp_uri(), &inbox).await == Ok(false)
        })
        .await;
        let (_, v) = lead.call("fleet_list", json!({})).await;
        assert!(!v.to_string().contains(&gid_b), "left alpha's roster: {v}");
        // Gone now: a second stop is not_found.
        let (ok, again) = lead.call("fleet_stop", json!({"sessionId": gid_b})).await;
        assert!(!ok, "{again}");
        assert_eq!(again["code"], "not_found", "{again}");

        // Gamma takes no control from alpha: its own lead's member is not alpha's to stop.
        let gamma = Rest::new(&hosts[2].proc.url, Some(&hosts[2].token));
        let (status, m) = gamma.post("/members", json!({"profile": "echo"})).await;
        assert_eq!(status, 200, "{m}");
        let gid_c = m["gid"].as_str().unwrap_or_default().to_string();
        eventually("gamma's member in alpha's roster", 20, || async {
            let (_, v) = lead.call("fleet_list", json!({})).await;
            v.to_string().contains(&gid_c)
        })
        .await;
        let (ok, refused) = lead.call("fleet_stop", json!({"sessionId": gid_c})).await;
        assert!(!ok, "{refused}");
        assert_eq!(refused["code"], "not_allowed", "{refused}");
        assert!(
            hosts[2].herdr.member_pane(&gid_c).await.is_some(),
            "still there"
        );
        let (status, s) = gamma.delete(&format!("/members/{gid_c}")).await;
        assert_eq!(status, 200, "{s}");
    };
    if tokio::time::timeout(Duration::from_secs(60), stopping)
        .await
        .is_err()
    {
        panic!("the stops hung\n{}", logs(&hosts));
    }

    lead.close().await;
    stop_all(&mut hosts).await;
    fleet_tests::gateways::delete_namespace(
        &ns,
        &HOSTS,
        &["lead-alpha", "lead-beta", "lead-gamma"],
    )
    .await;
}

/// The README's one-host quickstart, on a real herdr (ignored without `HERDR_BIN`): the config
/// `fleetd check-config --example` prints, its `echo` member spawned over REST, and a blocking
/// send that member answers. The double cannot run the member's `sh`; a real herdr does.
#[cfg_attr(
    not(herdr_real),
    ignore = "needs a real herdr: set HERDR_BIN (scripts/herdr/build-herdr.sh)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_quickstart_delegates_to_the_example_member_on_a_real_herdr() {
    assert!(
        fleet_tests::herdr_real::bin().is_some(),
        "built for a real herdr (HERDR_BIN was set), but HERDR_BIN is not set now"
    );
    let dir = Dir::new("quickstart");
    let herdr = Panes::start(&dir.0).await;
    assert!(herdr.is_real());
    let port = free_port();
    let config = fleetd::config::EXAMPLE
        .replace(
            "token_env = \"FLEETD_TOKEN\"",
            &format!("token = \"{LEAD_TOKEN}\""),
        )
        .replace(
            "listen = \"127.0.0.1:8765\"",
            &format!(
                "listen = \"127.0.0.1:{port}\"\nstate_dir = \"{}\"",
                dir.0.join("state").display()
            ),
        )
        .replace(
            "# socket = \"/run/user/1000/herdr.sock\"",
            &format!("socket = \"{}\"", herdr.path().display()),
        );
    let mut fleetd = Proc::start(&dir.0, "alpha", port, &config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let rest = Rest::new(&fleetd.url, Some(LEAD_TOKEN));
    let (code, m) = rest.post("/members", json!({"profile": "echo"})).await;
    assert_eq!(code, 200, "{m}\n{}", fleetd.log_text());
    let gid = m["gid"].as_str().unwrap_or_default().to_string();
    let (code, out) = rest
        .post(
            &format!("/sessions/{gid}/message"),
            json!({"message": "run the tests and report"}),
        )
        .await;
    assert_eq!(code, 200, "{out}\n{}", fleetd.log_text());
    assert_eq!(out["outcome"], "REPLIED", "{out}");
    assert_eq!(out["body"], "echo: run the tests and report", "{out}");
    let s = fleetd.term(Duration::from_secs(10)).await;
    assert!(s.is_ok_and(|s| s.success()));
    herdr.finish().await;
}

/// ch. 9's `assertPrimaryClean`: a daemon whose own environment carries what only a member may
/// have (here `ANTHROPIC_BASE_URL`, which every lead and member would inherit) does not start,
/// and says which variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_started_with_a_members_environment_refuses_to_run() {
    let dir = Dir::new("unclean");
    let herdr = Panes::start(&dir.0).await;
    let port = free_port();
    member_key(&dir, 4);
    let config = solo_config(
        &dir,
        port,
        &herdr.path(),
        ("w1:p1", "w1:p2"),
        (LEAD_TOKEN, ARCHITECT_TOKEN),
    );
    let path = dir.0.join("unclean.toml");
    std::fs::write(&path, config).unwrap_or_else(|e| panic!("{e}"));
    let out = tokio::process::Command::new(fleet_tests::fleetd_proc::fleetd_bin())
        .arg("run")
        .arg("--config")
        .arg(&path)
        .env("ANTHROPIC_BASE_URL", "https://llm.internal.example/v1")
        .output();
    let out = tokio::time::timeout(Duration::from_secs(20), out)
        .await
        .unwrap_or_else(|_| panic!("fleetd did not exit"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ANTHROPIC_BASE_URL"), "{stderr}");
    herdr.finish().await;
}

/// A herdr newer than fleetd was tested with is used, loudly: the daemon starts, warns, and
/// `/healthz` says which herdr is newer; an older one is refused at start, naming both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_herdr_is_used_with_a_warning_and_an_older_one_is_refused() {
    let dir = Dir::new("herdr-protocols");
    let herdr = Panes::start_double(&dir.0).await;
    let Panes::Double(double) = &herdr else {
        panic!("start_double starts the double")
    };
    double.state().protocol = 21;
    let port = free_port();
    member_key(&dir, 5);
    let config = solo_config(
        &dir,
        port,
        &herdr.path(),
        ("w1:p1", "w1:p2"),
        (LEAD_TOKEN, ARCHITECT_TOKEN),
    );
    let fleetd = Proc::start(&dir.0, "solo", port, &config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (code, health) = Rest::new(&fleetd.url, Some(LEAD_TOKEN))
        .get("/healthz")
        .await;
    assert_eq!(code, 200, "{health}");
    assert_eq!(
        (
            &health["herdr"]["protocol"],
            &health["herdr"]["protocolSupport"],
            &health["protocolMismatch"]
        ),
        (&json!(21), &json!("not tested"), &json!(false)),
        "{health}"
    );
    assert!(
        fleetd
            .log_text()
            .contains("NEWER than fleetd was tested with"),
        "{}",
        fleetd.log_text()
    );
    drop(fleetd);

    double.state().protocol = 19;
    let path = dir.0.join("older.toml");
    std::fs::write(&path, &config).unwrap_or_else(|e| panic!("{e}"));
    let out = tokio::process::Command::new(fleet_tests::fleetd_proc::fleetd_bin())
        .arg("run")
        .arg("--config")
        .arg(&path)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(20), out)
        .await
        .unwrap_or_else(|_| panic!("fleetd did not exit"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("speaks protocol 19; fleetd needs 20 or newer"),
        "{stderr}"
    );
    herdr.finish().await;
}

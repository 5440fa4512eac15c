//! The authz matrix, end to end: every role × every action of ch. 9's decision table, over
//! both faces (MCP and REST) of one real `fleetd`, with identity taken from the connection's
//! credential only. A refused call is `denied` (403, or 401 for a caller with no credential)
//! and audited; an allowed one is never `denied`, whatever else it answers.

use fleet_tests::fleetd_proc::{
    free_port, play_members, solo_config, write_key, Dir, Mcp, Proc, Rest,
};
use fleet_tests::panes::Panes;
use serde_json::{json, Value};
use std::collections::BTreeSet;

const LEAD_TOKEN: &str = "matrix-lead-token-0123456789";
const ARCHITECT_TOKEN: &str = "matrix-architect-token-0123456789";

/// A caller with its credential, on both faces.
struct Who {
    role: &'static str,
    /// The session its credential stands for (none for the anonymous caller).
    session: Option<String>,
    mcp: Mcp,
    rest: Rest,
}

/// ch. 9's table: the roles allowed each action (own-session actions on the caller's own
/// session).
const TABLE: [(&str, &[&str]); 8] = [
    ("SPAWN", &["primary"]),
    ("STOP", &["primary"]),
    ("DRAIN", &["primary"]),
    ("SEND", &["primary", "architect"]),
    ("REPLY", &["primary", "architect", "worker"]),
    ("ASK", &["primary", "architect", "worker"]),
    ("READ", &["primary", "architect", "worker"]),
    ("METRICS", &["primary", "architect", "worker"]),
];

/// An argument the tool does not take is refused before anything runs (rmcp's parameter
/// check, or the faces' own `invalid_argument`).
fn refused_argument(v: &Value) -> bool {
    v["code"] == "invalid_argument" || v.to_string().contains("unknown field `sessionId`")
}

fn denied(v: &Value) -> bool {
    v["code"] == "denied"
}

/// Every way each action is reached: (face, what, the answer's status or 0 for MCP, the answer).
async fn attempts(who: &Who, action: &str, other: &str) -> Vec<(String, u16, Value)> {
    let own = who.session.clone().unwrap_or_else(|| "nobody".into());
    let mut out = Vec::new();
    let mut mcp = |name: &str, (ok, v): (bool, Value)| {
        out.push((format!("MCP {name}"), if ok { 200 } else { 0 }, v));
    };
    match action {
        "SPAWN" => mcp(
            "fleet_spawn",
            who.mcp
                .call("fleet_spawn", json!({"profile": "echo"}))
                .await,
        ),
        "STOP" => mcp(
            "fleet_stop",
            who.mcp
                .call("fleet_stop", json!({"sessionId": "ghost-member"}))
                .await,
        ),
        "DRAIN" => {
            mcp(
                "fleet_poll(sessionId)",
                who.mcp
                    .call("fleet_poll", json!({"sessionId": other}))
                    .await,
            );
            mcp(
                "fleet_ack",
                who.mcp
                    .call("fleet_ack", json!({"sessionId": other, "ids": []}))
                    .await,
            );
        }
        "SEND" => mcp(
            "fleet_send",
            who.mcp
                .call(
                    "fleet_send",
                    json!({"sessionId": other, "message": "authz probe", "wait": false}),
                )
                .await,
        ),
        "REPLY" => mcp(
            "fleet_reply",
            who.mcp
                .call("fleet_reply", json!({"message": "authz probe"}))
                .await,
        ),
        "ASK" => mcp(
            "fleet_ask",
            who.mcp
                .call(
                    "fleet_ask",
                    json!({"question": "probe?", "timeoutMs": 1000}),
                )
                .await,
        ),
        "READ" => {
            mcp(
                "fleet_status",
                who.mcp
                    .call("fleet_status", json!({"sessionId": other}))
                    .await,
            );
            mcp("fleet_list", who.mcp.call("fleet_list", json!({})).await);
            mcp(
                "fleet_profiles",
                who.mcp.call("fleet_profiles", json!({})).await,
            );
        }
        _ => {}
    }
    let mut rest = |name: String, (code, v): (u16, Value)| out.push((name, code, v));
    let r = &who.rest;
    match action {
        "SPAWN" => rest(
            "REST POST /members".into(),
            r.post("/members", json!({"profile": "echo"})).await,
        ),
        "STOP" => rest(
            "REST DELETE /members/{id}".into(),
            r.delete("/members/ghost-member").await,
        ),
        "DRAIN" => rest(
            "REST GET /sessions/{id}/replies".into(),
            r.get(&format!("/sessions/{other}/replies")).await,
        ),
        "SEND" => {
            rest(
                "REST POST /sessions/{id}/message".into(),
                r.post(
                    &format!("/sessions/{other}/message"),
                    json!({"message": "authz probe", "wait": false}),
                )
                .await,
            );
            rest(
                "REST GET /tasks/{ticket}".into(),
                r.get("/tasks/00000000-0000-4000-8000-000000000000").await,
            );
        }
        "REPLY" => rest(
            "REST POST /sessions/{own}/reply".into(),
            r.post(
                &format!("/sessions/{own}/reply"),
                json!({"message": "authz probe"}),
            )
            .await,
        ),
        "ASK" => rest(
            "REST POST /sessions/{own}/ask".into(),
            r.post(
                &format!("/sessions/{own}/ask"),
                json!({"question": "probe?", "timeoutMs": 1000}),
            )
            .await,
        ),
        "READ" => {
            for path in [
                format!("/sessions/{other}/status"),
                "/members".into(),
                "/profiles".into(),
                "/sessions".into(),
                "/agents".into(),
            ] {
                let answer = r.get(&path).await;
                rest(format!("REST GET {path}"), answer);
            }
        }
        "METRICS" => {
            // The exposition is text, not JSON: an allowed call is a 200.
            let (code, v) = r.get("/metrics").await;
            rest("REST GET /metrics".into(), (code, v));
        }
        _ => {}
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_and_action_over_mcp_and_rest_follows_chapter_nine() {
    let dir = Dir::new("authz");
    let herdr = Panes::start(&dir.0).await;
    let port = free_port();
    let state = dir.0.join("state");
    std::fs::create_dir_all(&state).unwrap_or_else(|e| panic!("{e}"));
    let mkey = fleetd::daemon::member_key(&write_key(&state.join("gateway.key"), 5));
    let lead_pane = herdr.add_lead_pane("lead").await;
    let architect_pane = herdr.add_lead_pane("archie").await;
    let cfg = solo_config(
        &dir,
        port,
        &herdr.path(),
        (&lead_pane, &architect_pane),
        (LEAD_TOKEN, ARCHITECT_TOKEN),
    );
    let fleetd = Proc::start(&dir.0, "solo", port, &cfg)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _members = play_members(herdr.clone(), &fleetd.url, mkey, &state);
    let url = fleetd.url.clone();

    // Three members: the worker caller, the other session the callers act on, and a member
    // spawned ARCHITECT (through the query form of POST /members), which is authorised as an
    // architect: the same row of the table as an architect lead.
    let primary_rest = Rest::new(&url, Some(LEAD_TOKEN));
    let mut gids = Vec::new();
    for path in [
        "/members",
        "/members",
        "/members?profile=echo&role=ARCHITECT",
    ] {
        let (code, m) = if path.contains('?') {
            primary_rest.post_query(path).await
        } else {
            primary_rest.post(path, json!({"profile": "echo"})).await
        };
        assert_eq!(code, 200, "{m}\n{}", fleetd.log_text());
        gids.push(m["gid"].as_str().unwrap_or_default().to_string());
    }
    let (worker, other, arch) = (gids[0].clone(), gids[1].clone(), gids[2].clone());
    let runtime = state.join("members");
    let on_record = |gid: &str| {
        fleetd::herdr::launch::token_on_record(&runtime, &mkey, gid)
            .unwrap_or_else(|| panic!("no nonce on record for {gid}"))
    };
    let worker_token = on_record(&worker);
    let arch_token = on_record(&arch);

    let connect = |token: Option<String>| {
        let url = url.clone();
        async move {
            Mcp::connect(&url, token.as_deref())
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    let callers = vec![
        Who {
            role: "primary",
            session: Some("lead1".into()),
            mcp: connect(Some(LEAD_TOKEN.into())).await,
            rest: Rest::new(&url, Some(LEAD_TOKEN)),
        },
        Who {
            role: "architect",
            session: Some("archie1".into()),
            mcp: connect(Some(ARCHITECT_TOKEN.into())).await,
            rest: Rest::new(&url, Some(ARCHITECT_TOKEN)),
        },
        Who {
            role: "architect",
            session: Some(arch.clone()),
            mcp: connect(Some(arch_token.clone())).await,
            rest: Rest::new(&url, Some(&arch_token)),
        },
        Who {
            role: "worker",
            session: Some(worker.clone()),
            mcp: connect(Some(worker_token.clone())).await,
            rest: Rest::new(&url, Some(&worker_token)),
        },
        Who {
            role: "anonymous",
            session: None,
            mcp: connect(None).await,
            rest: Rest::new(&url, None),
        },
    ];

    let mut failures = Vec::new();
    let mut refused: BTreeSet<(String, String)> = BTreeSet::new();
    let mut cells = 0;
    for (action, allowed) in TABLE {
        for who in &callers {
            let want = allowed.contains(&who.role);
            for (what, code, v) in attempts(who, action, &other).await {
                cells += 1;
                let was_denied = denied(&v) || code == 401 || code == 403;
                let status_ok = match (want, who.role) {
                    (true, _) => !was_denied,
                    (false, "anonymous") => was_denied && (code == 401 || code == 0),
                    (false, _) => was_denied && (code == 403 || code == 0),
                };
                if !status_ok {
                    failures.push(format!(
                        "{} {action} via {what}: wanted {}, got {code} {v}",
                        who.role,
                        if want { "allowed" } else { "denied" }
                    ));
                }
                if !want {
                    refused.insert((who.role.to_string(), action.to_string()));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cells} cells wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );

    // The architect member says what it is.
    let (ok, me) = callers[2].mcp.call("fleet_whoami", json!({})).await;
    assert!(ok && me["role"] == "ARCHITECT", "{me}");
    assert_eq!(me["sessionId"], arch.as_str(), "{me}");

    // Identity is never an argument: a worker naming another session is refused on both faces.
    let w = &callers[3];
    let (ok, v) = w
        .mcp
        .call("fleet_reply", json!({"message": "m", "sessionId": other}))
        .await;
    assert!(!ok && refused_argument(&v), "{v}");
    let (ok, v) = w
        .mcp
        .call("fleet_whoami", json!({"sessionId": other}))
        .await;
    assert!(!ok && refused_argument(&v), "{v}");
    for route in ["reply", "ask"] {
        let (code, v) = w
            .rest
            .post(
                &format!("/sessions/{other}/{route}"),
                json!({"message": "m", "question": "q"}),
            )
            .await;
        assert!(code == 403 || code == 400, "{route}: {code} {v}");
        if code == 403 {
            assert!(denied(&v), "{v}");
        }
    }
    let (ok, me) = w.mcp.call("fleet_whoami", json!({})).await;
    assert!(ok, "{me}");
    // A well-signed member token with no spawn on record (a process left behind, or a token
    // minted for a nonce that was never issued) is refused: tokens die with their spawn.
    let ghost = "77777777-7777-4777-8777-777777777777";
    let ghost_token = fleetd::herdr::launch::member_token(&mkey, ghost, "0123456789abcdef");
    let (code, v) = Rest::new(&url, Some(&ghost_token)).get("/members").await;
    assert_eq!(code, 401, "{v}");
    let (_, roster) = callers[0].mcp.call("fleet_list", json!({})).await;
    assert!(!roster.to_string().contains(ghost), "{roster}");
    assert!(roster.to_string().contains(&worker), "{roster}");
    assert_eq!(me["sessionId"], worker.as_str(), "{me}");
    assert_eq!(me["role"], "WORKER", "{me}");

    // Every refusal the core and the faces decided is in the audit log, with no content.
    let audit = std::fs::read_to_string(dir.0.join("audit.jsonl")).unwrap_or_default();
    let audited: BTreeSet<(String, String)> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["allowed"] == false)
        .map(|v| {
            (
                v["role"].as_str().unwrap_or_default().to_lowercase(),
                v["action"].as_str().unwrap_or_default().to_uppercase(),
            )
        })
        .collect();
    let missing: Vec<_> = refused.difference(&audited).collect();
    assert!(
        missing.is_empty(),
        "refused but not audited: {missing:?}\naudited: {audited:?}"
    );
    assert!(!audit.contains("authz probe"), "the audit holds no content");

    for who in callers {
        who.mcp.close().await;
    }
    herdr.finish().await;
}

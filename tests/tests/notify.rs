//! Notifications end to end: the `[[notify]]` sinks against a real HTTP receiver on loopback
//! (a signed webhook, an ntfy topic) and a real command; and two `fleetd` processes on
//! RabbitMQ where a member's `fleet_ask` on one host reaches its lead's webhook on the other.

use fleet_core::needs::{Need, NeedKind};
use fleet_core::notify::{Notice, NoticePhase};
use fleet_core::{HostId, Instant, SessionId};
use fleet_tests::fleetd_proc::{
    eventually, logs, start_host, start_host_edited, stop_all, Dir, Mcp, HOSTS,
};
use fleet_tests::webhook::Receiver;
use fleetd::metrics::{Counter, Metrics};
use fleetd::notify::{send, NotifySection, SinkKind, Sinks};
use fleetd::NoticePort;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

fn notice(rule: &str) -> Notice {
    Notice {
        rule: rule.into(),
        phase: NoticePhase::Raised,
        need: Need {
            id: "question:t1".into(),
            kind: NeedKind::Question,
            host: HostId::new("alpha"),
            waits_on: Some(SessionId::new("lead-alpha")),
            member: Some(SessionId::new("w1")),
            turn_id: None,
            since: Instant::ZERO,
            summary: "member w1 asks lead lead-alpha a question".into(),
            text: None,
        },
        seq: 1,
        opened_unix_ms: 7,
    }
}

fn section(name: &str, sink: SinkKind, url: Option<String>) -> NotifySection {
    let v = json!({"name": name, "sink": sink});
    let mut s: NotifySection = serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"));
    s.url = url;
    s.backoff_ms = 50;
    s
}

fn secret_file(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("fleetd-notify-{tag}-{}", std::process::id()));
    std::fs::write(&p, "s3cret\n").unwrap_or_else(|e| panic!("{e}"));
    p
}

#[tokio::test]
async fn a_webhook_that_answers_500_then_200_gets_exactly_one_signed_delivery() {
    let (r, base) = Receiver::start(&[500]).await;
    let mut hook = section("hook", SinkKind::Webhook, Some(format!("{base}/hook")));
    hook.secret_file = Some(secret_file("once"));
    assert!(hook.problems().is_empty(), "{:?}", hook.problems());
    let mut sinks =
        Sinks::start(&[hook], Arc::new(Metrics::default())).unwrap_or_else(|e| panic!("{e}"));
    sinks.notify(notice("hook"), 1_700_000_000_000);
    let got = r.until(2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got_later = r.got();
    assert_eq!(
        got_later.len(),
        2,
        "one retry after the 500, none after the 200: {got:?}"
    );
    let answered: Vec<u16> = got_later.iter().map(|g| g.answered).collect();
    assert_eq!(answered, [500, 200]);
    let ok = &got_later[1];
    assert_eq!(ok.delivery.as_deref(), Some("hook/question:t1/7/1"));
    assert_eq!(
        got_later[0].delivery, ok.delivery,
        "the same delivery id on a retry"
    );
    // Each attempt signs the time it is sent at; the body keeps when the notice was decided.
    let ts: u64 = ok
        .timestamp
        .as_deref()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no timestamp: {ok:?}"));
    assert!(ts > 1_700_000_000_000, "{ts}");
    let want = send::sign(b"s3cret", ts, &ok.body);
    assert_eq!(
        ok.signature.as_deref(),
        Some(want.as_str()),
        "signed with the file's key, trimmed"
    );
    let v: serde_json::Value = serde_json::from_slice(&ok.body).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["kind"], "question");
    assert_eq!(v["phase"], "raised");
    assert_eq!(v["at_unix_ms"], 1_700_000_000_000_u64);
    assert_eq!(v["waits_on"], "lead-alpha");
    assert!(
        v.get("text").is_none(),
        "no words unless the rule allows them: {v}"
    );
}

#[tokio::test]
async fn a_webhook_that_refuses_with_a_4xx_is_not_tried_again() {
    let (r, base) = Receiver::start(&[403]).await;
    let mut hook = section("hook", SinkKind::Webhook, Some(format!("{base}/hook")));
    hook.secret_file = Some(secret_file("refused"));
    let metrics = Arc::new(Metrics::default());
    let mut sinks = Sinks::start(&[hook], metrics.clone()).unwrap_or_else(|e| panic!("{e}"));
    sinks.notify(notice("hook"), 1);
    r.until(1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(r.got().len(), 1);
    assert_eq!(
        metrics.counter(Counter::Notices, &[("rule", "hook"), ("result", "failed")]),
        1
    );
}

#[tokio::test]
async fn an_ntfy_topic_gets_the_summary_with_a_title() {
    let (r, base) = Receiver::start(&[]).await;
    let topic = section("phone", SinkKind::Ntfy, Some(format!("{base}/fleet-topic")));
    let mut sinks =
        Sinks::start(&[topic], Arc::new(Metrics::default())).unwrap_or_else(|e| panic!("{e}"));
    sinks.notify(notice("phone"), 1);
    let got = r.until(1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].title.as_deref(),
        Some("fleetd alpha: question needs you")
    );
    assert_eq!(
        String::from_utf8_lossy(&got[0].body),
        "member w1 asks lead lead-alpha a question"
    );
}

#[tokio::test]
async fn a_command_sink_runs_its_argv_without_a_shell() {
    let out = std::env::temp_dir().join(format!("fleetd-notify-cmd-{}", std::process::id()));
    let _ = std::fs::remove_file(&out);
    let mut cmd = section("desk", SinkKind::Command, None);
    cmd.argv = vec![
        "/bin/sh".into(),
        "-c".into(),
        r#"cat > "$0"; echo "$1" >> "$0""#.into(),
        out.display().to_string(),
        "{title}; $(touch /tmp/never)".into(),
    ];
    let mut sinks =
        Sinks::start(&[cmd], Arc::new(Metrics::default())).unwrap_or_else(|e| panic!("{e}"));
    sinks.notify(notice("desk"), 1);
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_to_string(&out).unwrap_or_default();
        if text.ends_with('\n') {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        text.starts_with('{') && text.contains(r#""delivery":"desk/question:t1/7/1""#),
        "{text}"
    );
    assert!(
        text.ends_with("fleetd alpha: question needs you; $(touch /tmp/never)\n"),
        "a filled-in argument is one argument, never shell text: {text}"
    );
}

#[test]
fn check_config_names_each_sink_problem() {
    let hook = section("hook", SinkKind::Webhook, Some("ftp://x".into()));
    let keys: Vec<&str> = hook.problems().iter().map(|(k, _)| *k).collect();
    assert_eq!(keys, ["url", "secret_file"]);
    let cmd = section("desk", SinkKind::Command, None);
    let keys: Vec<&str> = cmd.problems().iter().map(|(k, _)| *k).collect();
    assert_eq!(keys, ["argv"]);
    let mut topic = section("phone", SinkKind::Ntfy, Some("https://ntfy.sh/t".into()));
    topic.token_file = Some(PathBuf::from("/nonexistent/token"));
    let keys: Vec<&str> = topic.problems().iter().map(|(k, _)| *k).collect();
    assert_eq!(keys, ["token_file"]);
}

/// Two `fleetd` processes on RabbitMQ; alpha's lead has a webhook rule for questions (grace
/// 1 s). A member on beta asks: answered at once, nothing is sent; left unanswered, alpha's
/// receiver gets a signed raise within 2 s of the question, then one resolve after the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_question_on_another_host_reaches_its_leads_webhook() {
    let dir = Dir::new("notify");
    let ns = format!("ntf{}", std::process::id());
    let (hook, base) = Receiver::start(&[]).await;
    std::fs::create_dir_all(&dir.0).unwrap_or_else(|e| panic!("{e}"));
    let secret = dir.0.join("hook.secret");
    std::fs::write(&secret, "e2e-secret\n").unwrap_or_else(|e| panic!("{e}"));
    let rule = format!(
        r#"
[[notify]]
name = "lead-phone"
sink = "webhook"
url = "{base}/hook"
secret_file = "{}"
on = ["question"]
leads = ["lead-alpha"]
grace_ms = 1000
quiet_ms = 600000
"#,
        secret.display()
    );
    let mut hosts = vec![
        start_host_edited(&dir, &ns, 0, |c| c + &rule).await,
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
        let (ok, spawned) = lead
            .call("fleet_spawn", json!({"profile": "echo", "host": "beta"}))
            .await;
        assert!(ok, "{spawned}");
        let gid = spawned["gid"].as_str().unwrap_or_default().to_string();
        let ask = |q: &str| json!({"sessionId": gid, "message": format!("ASK 30000: {q}")});

        // Answered within the grace: nobody is told.
        let (_, q) = lead.call("fleet_send", ask("quick one?")).await;
        assert_eq!(q["outcome"], "QUESTION", "{q}");
        let quick = q["turn_id"].as_str().unwrap_or_default().to_string();
        let (_, a) = lead
            .call("fleet_send", json!({"turnId": quick, "message": "yes"}))
            .await;
        assert_eq!(a["outcome"], "REPLIED", "{a}");

        // Left past it: a signed raise within 2 s of the question.
        let (_, q) = lead.call("fleet_send", ask("which colour?")).await;
        #[allow(clippy::disallowed_methods)] // the test's clock, against real gateways
        let asked = std::time::Instant::now();
        assert_eq!(q["outcome"], "QUESTION", "{q}");
        let turn = q["turn_id"].as_str().unwrap_or_default().to_string();
        let got = hook.until(1).await;
        assert_eq!(got.len(), 1, "{got:?}");
        let raise = &got[0];
        let late = raise.at.saturating_duration_since(asked);
        assert!(
            late < Duration::from_secs(2),
            "the raise came {late:?} after the question"
        );
        let ts: u64 = raise
            .timestamp
            .as_deref()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no timestamp: {raise:?}"));
        let want = send::sign(b"e2e-secret", ts, &raise.body);
        assert_eq!(raise.signature.as_deref(), Some(want.as_str()));
        let v: serde_json::Value =
            serde_json::from_slice(&raise.body).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["phase"], "raised", "{v}");
        assert_eq!(v["kind"], "question", "{v}");
        assert_eq!(v["id"], format!("question:{turn}"), "{v}");
        assert_eq!(v["host"], "alpha", "{v}");
        assert_eq!(v["waits_on"], "lead-alpha", "{v}");
        assert_eq!(v["member"], gid.as_str(), "{v}");
        assert!(
            !raise.body.windows(7).any(|w| w == b"colour?"),
            "no question text without include_text: {v}"
        );

        // The lead's "needs you" view lists it, with its words and how long it has waited.
        let (ok, view) = lead.call("fleet_attention", json!({})).await;
        assert!(ok, "{view}");
        let needs = view["needs"].as_array().cloned().unwrap_or_default();
        let q = needs
            .iter()
            .find(|n| n["turn_id"] == turn.as_str())
            .unwrap_or_else(|| panic!("the question is not listed: {view}"));
        assert_eq!(q["kind"], "question", "{view}");
        assert_eq!(q["text"], "which colour?", "{view}");
        assert!(
            q["waiting_ms"].as_u64().is_some_and(|ms| ms >= 1_000),
            "{view}"
        );

        // Answered: one resolve, and nothing more.
        let (_, a) = lead
            .call("fleet_send", json!({"turnId": turn, "message": "blue"}))
            .await;
        assert_eq!(a["outcome"], "REPLIED", "{a}");
        let got = hook.until(2).await;
        assert_eq!(got.len(), 2, "{got:?}");
        let v: serde_json::Value =
            serde_json::from_slice(&got[1].body).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (v["phase"].as_str(), v["seq"].as_u64()),
            (Some("resolved"), Some(2)),
            "{v}"
        );
        assert_eq!(v["id"], format!("question:{turn}"), "{v}");
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        assert_eq!(hook.got().len(), 2, "{:?}", hook.got());
        lead.close().await;
    };
    if tokio::time::timeout(Duration::from_secs(120), scenario)
        .await
        .is_err()
    {
        panic!("the scenario hung\n{}", logs(&hosts));
    }
    stop_all(&mut hosts).await;
    fleet_tests::gateways::delete_namespace(&ns, &HOSTS[..2], &["lead-alpha", "lead-beta"]).await;
}

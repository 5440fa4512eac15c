//! A rogue publisher on the real RabbitMQ: a client holding broker credentials but no gateway
//! key (CB-308 §4 item 5: the broker connection is the security boundary). Two `fleetd`
//! processes serve a live delegation while it publishes forged SEND, SPAWN and PRESENCE, an
//! unsigned brief, a captured genuine brief replayed and re-addressed, a newer-major envelope,
//! an expired one, one claiming a sender on another host, one with ill-typed headers, a
//! 10 MiB body, a live brief copied into the DLX with forged broker headers, and a flood past
//! `x-max-length`. Each is dead-lettered (seen on a tap of the DLX) and counted under its code;
//! nothing is typed, spawned or believed; the live delegation and the traffic after it are
//! served with nothing lost.

use fleet_core::broker::{Exchange, Names};
use fleet_core::envelope::{Envelope, HeaderValue, Headers, Payload, Version, VERSION};
use fleet_core::SessionId;
use fleet_tests::fleetd_proc::{
    eventually, logs, start_host_edited, stop_all, ticket_end, typed, Dir, Host, Mcp, Rest, HOSTS,
};
use fleet_tests::rogue::{envelope, fresh, keyring};
use lapin::options::{BasicAckOptions, BasicGetOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::Channel;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Inboxes this small overflow quickly when nobody consumes them.
const MAX_LENGTH: u64 = 50;

/// One message the rogue publishes, and the code the receiving gateway must reject it with.
struct Rogue {
    what: &'static str,
    exchange: Exchange,
    key: String,
    headers: Headers,
    body: Vec<u8>,
    code: &'static str,
}

impl Rogue {
    fn of(what: &'static str, exchange: Exchange, env: &Envelope, code: &'static str) -> Rogue {
        Rogue {
            what,
            exchange,
            key: env.to.clone(),
            headers: env.to_headers(),
            body: env.body.clone(),
            code,
        }
    }

    fn msg_id(&self) -> String {
        match self.headers.get("msgId") {
            Some(HeaderValue::Str(s)) => s.clone(),
            _ => String::new(),
        }
    }
}

async fn publish(ch: &Channel, names: &Names, r: &Rogue) {
    let to = (r.exchange, r.key.as_str());
    fleet_tests::rogue::publish(ch, names, to, &r.headers, &r.body, r.what).await;
}

/// A queue of the rogue's own, bound to `exchange` by `key`: what the broker routes there.
async fn tap(ch: &Channel, names: &Names, name: &str, exchange: Exchange, key: &str) -> String {
    let q = format!("{}.tap.{name}", names.namespace);
    ch.queue_declare(
        q.as_str().into(),
        QueueDeclareOptions {
            exclusive: true,
            auto_delete: true,
            ..QueueDeclareOptions::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{q}: {e}"));
    ch.queue_bind(
        q.as_str().into(),
        names.exchange(exchange).as_str().into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{q}: {e}"));
    q
}

/// Takes what is in `queue` now: each message's headers and body.
async fn drain(ch: &Channel, queue: &str) -> Vec<(FieldTable, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{queue}: {e}"))
    {
        let _ = m.delivery.acker.ack(BasicAckOptions::default()).await;
        let headers = m.delivery.properties.headers().clone().unwrap_or_default();
        out.push((headers, m.delivery.data.clone()));
    }
    out
}

fn header(t: &FieldTable, name: &str) -> String {
    match t.inner().get(name) {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        Some(AMQPValue::ShortString(s)) => s.as_str().to_string(),
        _ => String::new(),
    }
}

/// The series of counter `name` on `h` now, by its one label `label`.
async fn counter(h: &Host, name: &str, label: &str) -> BTreeMap<String, u64> {
    let (_, text) = Rest::new(&h.proc.url, Some(&h.token)).get("/metrics").await;
    let text = text.as_str().unwrap_or_default().to_string();
    let prefix = format!("{name}{{{label}=\"");
    text.lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .filter_map(|l| {
            let (value, rest) = l.split_once("\"}")?;
            Some((value.to_string(), rest.trim().parse::<f64>().ok()? as u64))
        })
        .collect()
}

/// `fleet_dead_letters_total{code=…}` on `h` now, by code.
async fn dead_letters(h: &Host) -> BTreeMap<String, u64> {
    counter(h, "fleet_dead_letters_total", "code").await
}

/// `fleet_broker_drops_total{reason=…}` on `h` now, by reason.
async fn broker_drops(h: &Host) -> BTreeMap<String, u64> {
    counter(h, "fleet_broker_drops_total", "reason").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rogue_publisher_gets_nothing_typed_spawned_or_believed_and_loses_nothing() {
    let dir = Dir::new("rogue");
    let ns = format!("rogue{}", std::process::id());
    let names = Names::new(&ns);
    // Small inboxes; and presence that outlives beta's stop, so alpha still sends to it.
    let edit = |c: String| {
        c.replace(
            "[core]\n",
            &format!("[core]\ninbox_max_length = {MAX_LENGTH}\n"),
        )
        .replace("presence_ttl_ms = 3000", "presence_ttl_ms = 60000")
    };
    let mut hosts = Vec::new();
    for i in 0..2 {
        hosts.push(start_host_edited(&dir, &ns, i, edit).await);
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
    let gid_b = s["gid"].as_str().unwrap_or_default().to_string();
    eventually("alpha lists beta's member", 30, || async {
        let (_, l) = alpha.call("fleet_list", json!({})).await;
        l.to_string().contains(&gid_b)
    })
    .await;

    // The rogue: broker credentials, no gateway key. It taps the DLX and beta's inbox key.
    let (conn, ch) = fleet_tests::rogue::channel().await;
    let dead = tap(&ch, &names, "dlx", Exchange::Dlx, "").await;
    let captured = tap(&ch, &names, "capture", Exchange::Msg, &gid_b).await;

    // A live delegation, whose brief the rogue captures as the broker routes it.
    let (ok, t) = alpha
        .call(
            "fleet_send",
            json!({"sessionId": gid_b, "message": "SLOW 6000: genuine brief", "wait": false}),
        )
        .await;
    assert!(ok, "{t}");
    let ticket = t["ticket"].as_str().unwrap_or_default().to_string();
    let mut copy = Vec::new();
    for _ in 0..100 {
        copy = drain(&ch, &captured).await;
        if !copy.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (copy_headers, copy_body) = copy
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("the rogue captured nothing"));
    let copy_headers =
        fleetd::amqp::from_table(Some(&copy_headers)).unwrap_or_else(|e| panic!("{e}"));
    eventually("the genuine brief typed on beta", 20, || async {
        typed(&hosts[1], &gid_b, "genuine brief").await == 1
    })
    .await;

    // The live brief, copied into the DLX as if the broker had dropped it from beta's inbox:
    // the first build believed the unsigned header and failed the delegation. Now beta counts a
    // broker drop of its queue — a metric — and the delegation goes on to REPLIED (below).
    let mut forged_death = copy_headers.clone();
    for (k, v) in [
        ("x-first-death-reason", "maxlen".to_string()),
        ("x-first-death-queue", names.inbox(&SessionId::new(&gid_b))),
    ] {
        forged_death.insert(k.into(), HeaderValue::Str(v));
    }
    let dlx_copy = Rogue {
        what: "a live brief republished into the DLX with forged broker headers",
        exchange: Exchange::Dlx,
        key: String::new(),
        headers: forged_death,
        body: copy_body.clone(),
        code: "",
    };
    publish(&ch, &names, &dlx_copy).await;
    eventually("beta counts the (forged) broker drop", 20, || async {
        broker_drops(&hosts[1]).await.get("maxlen").copied() == Some(1)
    })
    .await;
    // Forged reasons, each new: counted under `other`, never a series of their own (each
    // distinct label value was one, never freed). Beta's copy of the dead letters is capped
    // at MAX_LENGTH like its inboxes (the broker drops the oldest past it: a burst of 10,000
    // would mostly never reach beta), so they go in batches below the cap, each published
    // at once and counted before the next.
    const REASONS: u64 = 10_000;
    const BATCH: u64 = MAX_LENGTH * 4 / 5;
    let rss_before = rss_kib(hosts[1].proc.pid());
    let started = tokio::time::Instant::now();
    let mut sent = 0;
    while sent < REASONS {
        let n = BATCH.min(REASONS - sent);
        let sends = (sent..sent + n).map(|i| {
            let mut h = dlx_copy.headers.clone();
            let reason = format!("reason-{i}-{}", fresh());
            h.insert("x-first-death-reason".into(), HeaderValue::Str(reason));
            let (ch, names, body) = (&ch, &names, &copy_body);
            async move {
                let to = (Exchange::Dlx, "");
                fleet_tests::rogue::publish(ch, names, to, &h, body, "a forged reason").await;
            }
        });
        futures_util::future::join_all(sends).await;
        sent += n;
        eventually(
            "beta counts each batch of forged reasons as other",
            30,
            || async { broker_drops(&hosts[1]).await.get("other").copied() == Some(sent) },
        )
        .await;
    }
    // Figures for the note, not bounds (time and memory are measured, never asserted on).
    eprintln!(
        "{REASONS} forged reasons published and counted in {:?}",
        started.elapsed()
    );
    let drops = broker_drops(&hosts[1]).await;
    assert_eq!(
        drops.keys().collect::<Vec<_>>(),
        ["maxlen", "other"],
        "a closed set of reasons: {drops:?}"
    );
    eprintln!(
        "beta's RSS before and after {REASONS} forged reasons: {:?} KiB -> {:?} KiB",
        rss_before,
        rss_kib(hosts[1].proc.pid())
    );

    let stranger = keyring("alpha", 99);
    let alpha_key = keyring("alpha", 10);
    let mut rogues = Vec::new();
    let mut forged = envelope(Payload::Send, "lead-alpha", &gid_b, "alpha", b"rm -rf /");
    stranger.sign(&mut forged);
    rogues.push(Rogue::of(
        "forged SEND",
        Exchange::Msg,
        &forged,
        "bad_signature",
    ));
    let unsigned = envelope(Payload::Send, "lead-alpha", &gid_b, "alpha", b"rm -rf /");
    rogues.push(Rogue::of(
        "unsigned SEND",
        Exchange::Msg,
        &unsigned,
        "bad_signature",
    ));
    let spawn_id = SessionId::new(fresh().to_string());
    let mut spawn = envelope(
        Payload::Spawn { spawn_id },
        "lead-alpha",
        "beta",
        "alpha",
        br#"{"profile":"echo"}"#,
    );
    stranger.sign(&mut spawn);
    rogues.push(Rogue::of(
        "forged SPAWN",
        Exchange::Control,
        &spawn,
        "bad_signature",
    ));
    let ghost = "99999999-9999-4999-8999-999999999999";
    let mut presence = envelope(
        Payload::Presence,
        ghost,
        &format!("roster.alpha.{ghost}"),
        "alpha",
        br#"{"kind":"member","status":"idle"}"#,
    );
    stranger.sign(&mut presence);
    rogues.push(Rogue::of(
        "forged PRESENCE",
        Exchange::Roster,
        &presence,
        "bad_signature",
    ));
    rogues.push(Rogue {
        what: "the captured brief, replayed",
        exchange: Exchange::Msg,
        key: gid_b.clone(),
        headers: copy_headers.clone(),
        body: copy_body.clone(),
        code: "replayed",
    });
    rogues.push(Rogue {
        what: "the captured brief, re-addressed to beta's lead",
        exchange: Exchange::Msg,
        key: "lead-beta".into(),
        headers: copy_headers.clone(),
        body: copy_body.clone(),
        code: "wrong_routing_key",
    });
    let mut newer = envelope(
        Payload::Send,
        "lead-alpha",
        &gid_b,
        "alpha",
        b"from the future",
    );
    newer.v = Version {
        major: VERSION.major + 1,
        minor: 0,
    };
    stranger.sign(&mut newer);
    rogues.push(Rogue::of(
        "a newer major",
        Exchange::Msg,
        &newer,
        "newer_major",
    ));
    let mut old = envelope(Payload::Send, "lead-alpha", &gid_b, "alpha", b"stale");
    old.ts -= 120_000;
    old.expires_at = old.ts + 60_000;
    alpha_key.sign(&mut old);
    rogues.push(Rogue::of(
        "an expired brief",
        Exchange::Msg,
        &old,
        "expired",
    ));
    let mut elsewhere = envelope(
        Payload::Send,
        "lead-beta",
        &gid_b,
        "alpha",
        b"as beta's lead",
    );
    alpha_key.sign(&mut elsewhere);
    rogues.push(Rogue::of(
        "a sender bound to another host",
        Exchange::Msg,
        &elsewhere,
        "sender_not_on_signing_host",
    ));
    let mut typed_wrong = envelope(Payload::Send, "lead-alpha", &gid_b, "alpha", b"x");
    alpha_key.sign(&mut typed_wrong);
    let mut r = Rogue::of(
        "ill-typed headers",
        Exchange::Msg,
        &typed_wrong,
        "malformed",
    );
    r.headers
        .insert("ts".into(), HeaderValue::Str("yesterday".into()));
    r.headers
        .insert("sig".into(), HeaderValue::Str("no".into()));
    rogues.push(r);
    let mut huge = envelope(
        Payload::Send,
        "lead-alpha",
        &gid_b,
        "alpha",
        &vec![b'x'; 10 << 20],
    );
    alpha_key.sign(&mut huge);
    rogues.push(Rogue::of(
        "a 10 MiB body",
        Exchange::Msg,
        &huge,
        "oversized",
    ));

    for r in &rogues {
        publish(&ch, &names, r).await;
    }

    // Each is counted under its code on beta, and each reaches the DLX.
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for r in &rogues {
        *want.entry(r.code.to_string()).or_default() += 1;
    }
    let mut got = BTreeMap::new();
    for _ in 0..150 {
        got = dead_letters(&hosts[1]).await;
        if want
            .iter()
            .all(|(c, n)| got.get(c).copied().unwrap_or(0) >= *n)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (code, n) in &want {
        assert_eq!(
            got.get(code).copied().unwrap_or(0),
            *n,
            "{code}: want {want:?}, beta counted {got:?}\n{}",
            logs(&hosts)
        );
    }
    let mut lettered: BTreeSet<String> = BTreeSet::new();
    let ids: BTreeSet<String> = rogues.iter().map(Rogue::msg_id).collect();
    for _ in 0..100 {
        for (h, _) in drain(&ch, &dead).await {
            lettered.insert(header(&h, "msgId"));
        }
        if ids.is_subset(&lettered) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let missing: Vec<&str> = rogues
        .iter()
        .filter(|r| !lettered.contains(&r.msg_id()))
        .map(|r| r.what)
        .collect();
    assert!(missing.is_empty(), "not dead-lettered: {missing:?}");

    // Nothing typed, spawned or believed; the live delegation ends as it would have.
    assert_eq!(typed(&hosts[1], &gid_b, "rm -rf").await, 0);
    assert_eq!(typed(&hosts[1], &gid_b, "genuine brief").await, 1);
    let members: Vec<String> = hosts[1]
        .herdr
        .members()
        .await
        .into_iter()
        .map(|m| m.gid)
        .collect();
    assert_eq!(
        members,
        vec![gid_b.clone()],
        "a forged SPAWN started nothing"
    );
    let (_, roster) = alpha.call("fleet_list", json!({})).await;
    assert!(!roster.to_string().contains(ghost), "{roster}");
    let end = ticket_end(&alpha, &ticket, 30).await.unwrap_or_default();
    assert_eq!(end["outcome"], "REPLIED", "{end}\n{}", logs(&hosts));

    // A flood past x-max-length while beta is away: the overflow dead-letters at the broker
    // (maxlen), the rest is rejected by beta when it is back; every one reaches the DLX. A
    // genuine brief alpha sent just before it is pushed out first — and, since no dead letter
    // is believed, alpha's sender hears TIMED_OUT_QUEUED at its deadline: never typed.
    let beta = &mut hosts[1];
    let s = beta.proc.term(Duration::from_secs(20)).await;
    assert!(s.is_ok_and(|s| s.success()), "beta's stop");
    let (ok, t) = alpha
        .call(
            "fleet_send",
            json!({"sessionId": gid_b, "message": "pushed out", "wait": false, "timeoutMs": 15000}),
        )
        .await;
    assert!(ok, "{t}");
    let pushed = t["ticket"].as_str().unwrap_or_default().to_string();
    let flood: Vec<Rogue> = (0..MAX_LENGTH + 30)
        .map(|_| {
            let e = envelope(Payload::Send, "lead-alpha", &gid_b, "alpha", b"flood");
            Rogue::of("flood", Exchange::Msg, &e, "bad_signature")
        })
        .collect();
    for r in &flood {
        publish(&ch, &names, r).await;
    }
    beta.proc
        .restart(&dir.0.join(beta.name), beta.port)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let flood_ids: BTreeSet<String> = flood.iter().map(Rogue::msg_id).collect();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut seen_ids = BTreeSet::new();
    for _ in 0..200 {
        for (h, _) in drain(&ch, &dead).await {
            let id = header(&h, "msgId");
            if flood_ids.contains(&id) && seen_ids.insert(id) {
                *reasons
                    .entry(header(&h, "x-first-death-reason"))
                    .or_default() += 1;
            }
        }
        if seen_ids.len() == flood_ids.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        seen_ids.len(),
        flood_ids.len(),
        "flood not all dead-lettered: {reasons:?}\n{}",
        logs(&hosts)
    );
    assert_eq!(reasons.get("maxlen").copied(), Some(30), "{reasons:?}");
    assert_eq!(
        reasons.get("rejected").copied(),
        Some(MAX_LENGTH as usize),
        "{reasons:?}"
    );
    assert_eq!(typed(&hosts[1], &gid_b, "flood").await, 0);
    assert_eq!(typed(&hosts[1], &gid_b, "pushed out").await, 0);

    // The live brief captured at the start, replayed once more now that beta has restarted:
    // the replay record beta kept under its state directory still knows it.
    let replay = Rogue {
        what: "the captured brief, replayed after beta's restart",
        exchange: Exchange::Msg,
        key: gid_b.clone(),
        headers: copy_headers.clone(),
        body: copy_body.clone(),
        code: "replayed",
    };
    publish(&ch, &names, &replay).await;
    eventually("beta refuses the replay after its restart", 20, || async {
        dead_letters(&hosts[1]).await.get("replayed").copied() == Some(1)
    })
    .await;
    assert_eq!(
        typed(&hosts[1], &gid_b, "genuine brief").await,
        1,
        "{}",
        logs(&hosts)
    );
    let end = ticket_end(&alpha, &pushed, 30).await.unwrap_or_default();
    assert_eq!(
        end["outcome"],
        "TIMED_OUT_QUEUED",
        "{end}\n{}",
        logs(&hosts)
    );

    // The fleet serves real traffic after all of it.
    let (ok, out) = alpha
        .call(
            "fleet_send",
            json!({"sessionId": gid_b, "message": "after the storm", "timeoutMs": 60000}),
        )
        .await;
    assert!(ok, "{out}\n{}", logs(&hosts));
    assert_eq!(out["outcome"], "REPLIED", "{out}\n{}", logs(&hosts));
    assert_eq!(typed(&hosts[1], &gid_b, "after the storm").await, 1);

    let _ = conn.close(200, "done".into()).await;
    alpha.close().await;
    beta_lead.close().await;
    stop_all(&mut hosts).await;
    fleet_tests::gateways::delete_namespace(&ns, &HOSTS, &["lead-alpha", "lead-beta"]).await;
}

/// A process's resident set (KiB), from `/proc/<pid>/status`.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

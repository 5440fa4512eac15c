//! The seed corpora, from real inputs: genuine signed envelopes of every kind as a gateway
//! publishes them, answers and events a real herdr 0.8.2 sent (captured on this project's
//! test machine), the example config and the tests' configs, and the tool arguments the
//! end-to-end tests send. `cargo test -p fleet-fuzz -- --ignored write_seeds` rewrites
//! `fuzz/corpus/<target>/seed-*`; files cargo-fuzz adds beside them (its finds) are kept.

use crate::{encode, keyring, KEY_A, KEY_B, NOW_UNIX};
use fleet_core::envelope::{Envelope, Kind, Payload, VERSION};
use fleet_core::{HostId, MsgId, Outcome, SessionId, TraceId, TurnId};

/// Lines a real `herdr server` (0.8.2, protocol 20) answered, ids as fleetd sends them.
pub const HERDR_LINES: [&str; 9] = [
    r#"{"id":"fleetd-7","result":{"type":"pong","version":"0.8.2","protocol":20,"capabilities":{"live_handoff":true,"detached_server_daemon":false}}}"#,
    r#"{"id":"fleetd-7","result":{"type":"workspace_created","workspace":{"workspace_id":"w1","number":1,"label":"fleet","focused":true,"pane_count":1,"tab_count":1,"active_tab_id":"w1:t1","agent_status":"unknown"},"tab":{"tab_id":"w1:t1","workspace_id":"w1","number":1,"label":"1","focused":true,"pane_count":1,"agent_status":"unknown"},"root_pane":{"pane_id":"w1:p1","terminal_id":"term_6619059ef65721","workspace_id":"w1","tab_id":"w1:t1","focused":true,"cwd":"/tmp/h/home","foreground_cwd":"/tmp/h/home","agent_status":"unknown","scroll":{"offset_from_bottom":0,"max_offset_from_bottom":0,"viewport_rows":40},"revision":0}}}"#,
    r#"{"id":"fleetd-7","result":{"type":"layout_apply","layout":{"workspace_id":"w1","tab_id":"w1:t2","zoomed":false,"focused_pane_id":"w1:p2","root":{"type":"pane","pane_id":"w1:p2","label":"fleet:m2","cwd":"/tmp/h/home","command":["sh","-c","exec cat"]}}}}"#,
    r#"{"id":"fleetd-7","result":{"type":"pane_list","panes":[{"pane_id":"w1:p1","terminal_id":"term_6619059ef65721","workspace_id":"w1","tab_id":"w1:t1","focused":true,"cwd":"/tmp/h/home","foreground_cwd":"/tmp/h/home","agent_status":"unknown","scroll":{"offset_from_bottom":0,"max_offset_from_bottom":0,"viewport_rows":39},"revision":0},{"pane_id":"w1:p2","label":"fleet:m2","workspace_id":"w1","tab_id":"w1:t2","agent_status":"idle","agent":"echo"}]}}"#,
    r#"{"id":"fleetd-7","result":{"type":"pane_read","read":{"pane_id":"w1:p1","workspace_id":"w1","tab_id":"w1:t1","source":"recent","format":"text","text":"run the tests\n","revision":0,"truncated":true}}}"#,
    r#"{"id":"fleetd-7","result":{"type":"ok"}}"#,
    r#"{"id":"","error":{"code":"invalid_request","message":"invalid request: missing field `root` at line 1 column 135"}}"#,
    r#"{"data":{"pane_id":"w1:p2","type":"pane_closed","workspace_id":"w1"},"event":"pane_closed"}"#,
    r#"{"id":"fleetd-events","result":{"type":"subscription_started"}}"#,
];

/// Tool arguments and REST bodies the end-to-end tests send (first byte: which type).
const FACES: [(u8, &str); 12] = [
    (3, r#"{"message":"run the tests and report"}"#),
    (
        3,
        r#"{"message":"postgres","turnId":"5f0c5b1e-7a7e-4c53-9b7b-3f3f0f0f0f0f","wait":false}"#,
    ),
    (4, r#"{"message":"done: 12 tests"}"#),
    (5, r#"{"question":"which db?","timeoutMs":1000}"#),
    (0, r#"{"sessionId":"w1","message":"write the parser"}"#),
    (
        0,
        r#"{"sessionId":"w1","message":"SLOW 8000: survive","wait":false,"timeoutMs":60000}"#,
    ),
    (
        0,
        r#"{"turnId":"5f0c5b1e-7a7e-4c53-9b7b-3f3f0f0f0f0f","message":"postgres"}"#,
    ),
    (
        0,
        r#"{"coordId":"lead-beta","message":"coordinate: hello beta","wait":false}"#,
    ),
    (0, r#"{"broadcast":"all","message":"everyone: report"}"#),
    (1, r#"{"profile":"echo","host":"beta"}"#),
    (
        1,
        r#"{"profile":"echo","group":"qa","worktree":{"repo":"/srv/app","branch":"feat"}}"#,
    ),
    (
        2,
        r#"{"repo":"https://example.com/app.git","commit":"abc123"}"#,
    ),
];

const CONFIG: &str = r#"
[gateway]
host = "beta"
listen = "127.0.0.1:8766"
public_url = "http://beta.internal:8766"
allowed_hosts = ["beta.internal", "127.0.0.1"]
shutdown_timeout_ms = 5000

[broker]
uri = "amqp://guest:guest@127.0.0.1:5672/%2f"
namespace = "fleet"
control_allowlist = ["alpha"]

[peers]
alpha = "{peer}"

[[leads]]
name = "lead-beta"
gid = "lead-beta"
pane = "w1:p1"
token = "lead-beta-token-0123456789"

[herdr]
socket = "/run/user/1000/herdr.sock"
ready_timeout_ms = 10000

[profiles.echo]
kind = "command"
argv = ["sh", "-c", "stty -echo 2>/dev/null; exec cat"]

[log]
format = "json"

[core]
poll_interval_ms = 100
presence_interval_ms = 500
presence_ttl_ms = 3000
"#;

fn uuid(n: u128) -> uuid::Uuid {
    uuid::Uuid::from_u128(0x5f0c_5b1e_7a7e_4c53_9b7b_0000_0000_0000 | n)
}

/// A genuine envelope of `kind` from b to a, valid at `NOW_UNIX`, signed by b.
fn genuine(kind: Kind, n: u128, from: &str, to: &str, body: &[u8]) -> Envelope {
    let re = MsgId(uuid(n + 200));
    let turn = TurnId(uuid(n + 300));
    let payload = match kind {
        Kind::Send => Payload::Send,
        Kind::Broadcast => Payload::Broadcast,
        Kind::Coord => Payload::Coord,
        Kind::Stop => Payload::Stop,
        Kind::Presence => Payload::Presence,
        Kind::Spawn => Payload::Spawn {
            spawn_id: SessionId::new(uuid(n + 400).to_string()),
        },
        Kind::Ask => Payload::Ask { re, turn },
        Kind::Answer => Payload::Answer { turn },
        Kind::Reply => Payload::Reply {
            re: Some(re),
            outcome: Outcome::Replied,
        },
        Kind::Failed => Payload::Failed {
            re,
            outcome: Outcome::WorkerFailed,
            spawn_id: None,
        },
        Kind::Injected => Payload::Injected { re },
        Kind::Abandoned => Payload::Abandoned { re },
        Kind::TooLate => Payload::TooLate {
            re,
            turn: Some(turn),
        },
        Kind::NoWaiter => Payload::NoWaiter { re: None, turn },
    };
    let mut env = Envelope {
        v: VERSION,
        payload,
        msg_id: MsgId(uuid(n)),
        trace_id: TraceId(uuid(n + 100)),
        from: SessionId::new(from),
        to: to.into(),
        signer: HostId::new("b"),
        ts: NOW_UNIX - 1_000,
        expires_at: NOW_UNIX + 600_000,
        sig: None,
        body: body.to_vec(),
    };
    keyring("b", KEY_B).sign(&mut env);
    env
}

/// Every seed: (target, file name, bytes).
pub fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    let kinds = [
        (Kind::Send, "w1", "w0", &b"write the parser"[..]),
        (Kind::Reply, "w1", "lead-a", b"done: 12 tests"),
        (Kind::Ask, "w1", "lead-a", b"which db?"),
        (Kind::Answer, "lead-b", "w0", b"postgres"),
        (Kind::Injected, "w1", "lead-a", b""),
        (Kind::Failed, "_gateway", "lead-a", b"dead-lettered"),
        (Kind::Abandoned, "w1", "lead-a", b"gateway stopping"),
        (Kind::TooLate, "w1", "lead-a", b""),
        (Kind::NoWaiter, "lead-b", "w0", b""),
        (
            Kind::Broadcast,
            "lead-b",
            "broadcast.all",
            b"everyone: report",
        ),
        (Kind::Spawn, "lead-b", "a", br#"{"profile":"echo"}"#),
        (
            Kind::Presence,
            "w1",
            "roster.b.w1",
            br#"{"kind":"member","status":"IDLE"}"#,
        ),
    ];
    let named = kinds
        .into_iter()
        .map(|(kind, from, to, body)| (format!("seed-{}", kind.as_str().to_lowercase()), kind, from, to, body))
        // Wire 1.1 presence: b's snapshot, one delta ordered after it, and a batch after that.
        .chain([
            (
                "seed-presence-snapshot".to_string(),
                Kind::Presence,
                "_gateway",
                "roster.b._gateway",
                br#"{"kind":"gateway","profiles":["echo"],"since":1,"seq":2,"entities":[{"gid":"w1","kind":"member","status":"IDLE"}]}"#.as_slice(),
            ),
            (
                "seed-presence-delta".to_string(),
                Kind::Presence,
                "w1",
                "roster.b.w1",
                br#"{"kind":"member","status":"WORKING","since":1,"seq":3}"#.as_slice(),
            ),
            (
                "seed-presence-batch".to_string(),
                Kind::Presence,
                "_gateway",
                "roster.b._gateway",
                br#"{"kind":"gateway","since":1,"seq":4,"changes":[{"gid":"w1","kind":"member","status":"IDLE","card":{"profile":"echo","role":"DEV"}}]}"#.as_slice(),
            ),
        ]);
    for (i, (name, kind, from, to, body)) in named.enumerate() {
        let env = genuine(kind, i as u128, from, to, body);
        let mut bytes = vec![0u8];
        bytes.extend(encode(&env.to_headers(), &env.body, &env.to));
        out.push(("envelope", name.clone(), bytes.clone()));
        out.push(("amqp_headers", name.clone(), bytes[1..].to_vec()));
        let mut g = vec![10u8];
        g.extend_from_slice(&bytes[1..]);
        out.push(("gateway", name, g));
    }
    // One signed by a itself, and the same re-signed by the target (flags 1).
    let mut own = genuine(Kind::Send, 50, "lead-a", "w0", b"from a");
    own.signer = HostId::new("a");
    keyring("a", KEY_A).sign(&mut own);
    let mut bytes = vec![3u8];
    bytes.extend(encode(&own.to_headers(), &own.body, &own.to));
    out.push(("envelope", "seed-own-signed".into(), bytes));
    for (i, line) in HERDR_LINES.iter().enumerate() {
        for pick in 0..crate::HERDR_METHODS.len() as u8 {
            let mut b = vec![pick];
            b.extend_from_slice(line.as_bytes());
            out.push(("herdr", format!("seed-real-{i}-{pick}"), b));
        }
    }
    for (i, (pick, json)) in FACES.iter().enumerate() {
        let mut b = vec![*pick];
        b.extend_from_slice(json.as_bytes());
        out.push(("faces", format!("seed-{i}"), b));
    }
    out.push((
        "config",
        "seed-example".into(),
        fleetd::config::EXAMPLE.as_bytes().to_vec(),
    ));
    let peer = fleetd::config::encode_key(&fleetd::daemon::public_key(&KEY_A));
    let federated = CONFIG.replace("{peer}", &peer);
    out.push(("config", "seed-federated".into(), federated.into_bytes()));
    out.push(("gateway", "seed-calls".into(), (0u8..=255).collect()));
    for (i, event) in REPORT_EVENTS.iter().enumerate() {
        out.push(("report", format!("seed-{i}"), event.as_bytes().to_vec()));
    }
    for (i, text) in HOSTILE_TEXT.iter().enumerate() {
        out.push(("pane_text", format!("seed-{i}"), text.as_bytes().to_vec()));
        out.push((
            "terminal",
            format!("seed-text-{i}"),
            text.as_bytes().to_vec(),
        ));
        // The same text as a JSON answer a member or peer could send (serde escapes C0,
        // leaves DEL and C1 raw).
        let json = serde_json::json!({"type": "outcome", "outcome": "REPLIED", "body": text});
        out.push((
            "terminal",
            format!("seed-json-{i}"),
            json.to_string().into_bytes(),
        ));
    }
    out
}

/// Text a talked-into member, peer or lead would send to a pane or a terminal: a bracketed
/// paste ended early, a carriage return, OSC 52 (the clipboard), a C1 CSI, DEL, a screen clear,
/// and a plain brief.
const HOSTILE_TEXT: [&str; 4] = [
    "write the parser\n\tthen its tests",
    "fix it\x1b[201~rm -rf ~\r\x1b]52;c;ZXZpbA==\x07\u{9b}31m\x7f done",
    "\x1b[2J\x1b[H\x1b]0;owned\x07\u{85}next line\u{2028}",
    "\u{0}\u{1}\u{1f}\u{80}\u{9f}\u{a0}é漢字🙂",
];

/// What agents report, as they say it: Claude Code 2.1.328's hook events, Codex 0.171's notify
/// argument, fleetd's opencode plugin lines, and the bodies `fleetd member-report` posts.
const REPORT_EVENTS: [&str; 9] = [
    r#"{"session_id":"s1","transcript_path":"/x","cwd":"/w","hook_event_name":"SessionStart","source":"startup"}"#,
    r#"{"session_id":"s1","hook_event_name":"UserPromptSubmit","prompt":"fix the parser"}"#,
    r#"{"session_id":"s1","hook_event_name":"Stop","stop_hook_active":false,"last_assistant_message":"done"}"#,
    r#"{"session_id":"s1","hook_event_name":"StopFailure","error":"rate_limit","error_details":"429"}"#,
    r#"{"session_id":"s1","hook_event_name":"Notification","message":"Claude needs your permission to use Bash","notification_type":"permission_prompt"}"#,
    r#"{"type":"agent-turn-complete","thread-id":"t1","turn-id":"1","input-messages":["fix it"],"last-assistant-message":"fixed"}"#,
    r#"{"kind":"idle","session":"ses_1","prompt":"fix it","text":"All done."}"#,
    r#"{"seq":3,"session":"s1","event":"turn_ended","prompt":"fix it","text":"fixed"}"#,
    r#"{"seq":4,"event":"provider_error","limit":true,"words":"429"}"#,
];

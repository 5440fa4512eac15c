//! The envelope, its signature and the receiver's admission checks, in the order of ch. 10
//! §2.1: every forged, altered, re-addressed, replayed, expired or newer-major message is
//! refused, and a real one is admitted.

use fleet_core::admission::{admit, presence_key, Rejection, SeenSet};
use fleet_core::envelope::{DecodeError, Envelope, HeaderValue, Headers, Kind, Payload, VERSION};
use fleet_core::signing::Keyring;
use fleet_core::{HostId, MsgId, Outcome, SessionId, TraceId, TurnId};
use proptest::prelude::*;
use std::collections::BTreeMap;
use uuid::Uuid;

const NOW: u64 = 1_790_000_000_000;

fn host(s: &str) -> HostId {
    HostId::new(s)
}

/// Gateways a and b know each other's keys; c is a stranger with broker credentials only.
fn keyrings() -> (Keyring, Keyring, Keyring) {
    let (sa, sb, sc) = ([1u8; 32], [2u8; 32], [3u8; 32]);
    let pa = Keyring::new(host("a"), sa, &BTreeMap::new())
        .expect("key")
        .public_key();
    let pb = Keyring::new(host("b"), sb, &BTreeMap::new())
        .expect("key")
        .public_key();
    let a = Keyring::new(host("a"), sa, &BTreeMap::from([(host("b"), pb)])).expect("keys");
    let b = Keyring::new(host("b"), sb, &BTreeMap::from([(host("a"), pa)])).expect("keys");
    let c = Keyring::new(host("c"), sc, &BTreeMap::new()).expect("key");
    (a, b, c)
}

fn lead() -> SessionId {
    SessionId::new("6a0f3c52-2b0e-4f3e-9b7a-1d1e5c1f0a01")
}

fn worker() -> SessionId {
    SessionId::new("0b9c8d7e-6f5a-4b3c-8d2e-1f0a9b8c7d6e")
}

fn send(body: &[u8]) -> Envelope {
    Envelope {
        v: VERSION,
        payload: Payload::Send,
        msg_id: MsgId(Uuid::from_u128(0x11)),
        trace_id: TraceId(Uuid::from_u128(0x22)),
        from: lead(),
        to: worker().to_string(),
        signer: host("a"),
        ts: NOW - 1_000,
        expires_at: NOW + 60_000,
        sig: None,
        body: body.to_vec(),
    }
}

/// The roster as gateway b knows it: the lead lives on a.
fn roster(gid: &SessionId) -> Option<HostId> {
    (gid == &lead()).then(|| host("a"))
}

fn admit_at_b(b: &Keyring, h: &Headers, body: Vec<u8>, key: &str) -> Result<Envelope, Rejection> {
    admit(b, h, body, key, NOW, roster, &mut SeenSet::new(64))
}

#[test]
fn a_signed_send_from_a_known_sender_is_admitted() {
    let (a, b, _) = keyrings();
    let mut env = send(b"write the tests");
    a.sign(&mut env);
    let got = admit_at_b(&b, &env.to_headers(), env.body.clone(), worker().as_str());
    assert_eq!(got, Ok(env));
}

#[test]
fn the_header_encoding_is_stable() {
    let (a, _, _) = keyrings();
    let mut env = send(b"write the tests");
    env.payload = Payload::Reply {
        re: Some(MsgId(Uuid::from_u128(0x33))),
        outcome: Outcome::CompletedUnreplied,
    };
    a.sign(&mut env);
    let lines: Vec<String> = env
        .to_headers()
        .iter()
        .map(|(k, v)| match v {
            HeaderValue::Str(s) => format!("{k} = {s:?}"),
            HeaderValue::Int(i) => format!("{k} = {i}"),
            HeaderValue::Bytes(b) => format!(
                "{k} = bytes[{}] {}",
                b.len(),
                b.iter()
                    .take(8)
                    .map(|x| format!("{x:02x}"))
                    .collect::<String>()
            ),
        })
        .collect();
    insta::assert_snapshot!(lines.join("\n"));
}

#[test]
fn a_stranger_with_broker_credentials_cannot_forge() {
    let (_, b, c) = keyrings();
    let mut env = send(b"rm -rf /");
    c.sign(&mut env);
    let r = admit_at_b(&b, &env.to_headers(), env.body.clone(), worker().as_str());
    assert_eq!(r, Err(Rejection::UnknownSigner(host("c"))));
    // Claiming to be a, with c's signature:
    env.signer = host("a");
    let r = admit_at_b(&b, &env.to_headers(), env.body.clone(), worker().as_str());
    assert_eq!(r, Err(Rejection::BadSignature));
    // No signature at all:
    env.sig = None;
    let r = admit_at_b(&b, &env.to_headers(), env.body.clone(), worker().as_str());
    assert_eq!(r, Err(Rejection::BadSignature));
}

#[test]
fn a_sender_not_on_the_signing_host_is_refused() {
    let (_, b, _) = keyrings();
    // b itself signs a message claiming to come from a's lead (a compromised or confused peer).
    let mut env = send(b"task");
    b.sign(&mut env);
    let r = admit_at_b(&b, &env.to_headers(), env.body.clone(), worker().as_str());
    assert!(
        matches!(r, Err(Rejection::NotOnSigningHost { roster: Some(h), .. }) if h == host("a"))
    );
}

#[test]
fn presence_binds_only_gids_under_the_signers_own_key() {
    let (a, b, _) = keyrings();
    let gid = SessionId::new("fresh-gid");
    let mut env = send(b"{}");
    env.payload = Payload::Presence;
    env.from = gid.clone();
    env.to = presence_key(&host("a"), &gid);
    a.sign(&mut env);
    let ok = admit_at_b(&b, &env.to_headers(), env.body.clone(), &env.to.clone());
    assert!(ok.is_ok(), "{ok:?}");
    let mut lie = env.clone();
    lie.to = presence_key(&host("b"), &gid);
    a.sign(&mut lie);
    let r = admit_at_b(&b, &lie.to_headers(), lie.body.clone(), &lie.to.clone());
    assert!(
        matches!(r, Err(Rejection::NotOnSigningHost { .. })),
        "{r:?}"
    );
}

/// `to` means what the kind says: one entity for a point-to-point kind, all or a group for a
/// broadcast, a host for control, the signer's own key for a presence.
#[test]
fn an_address_is_read_by_its_kind() {
    use fleet_core::envelope::Address;
    let mut env = send(b"task");
    assert_eq!(env.address(), Ok(Address::Entity(worker())));
    env.payload = Payload::Broadcast;
    env.to = "broadcast.all".into();
    assert_eq!(env.address(), Ok(Address::Broadcast(None)));
    env.to = "broadcast.docs".into();
    assert_eq!(env.address(), Ok(Address::Broadcast(Some("docs".into()))));
    env.to = "broadcast.".into();
    assert!(env.address().is_err());
    env.payload = Payload::Stop;
    env.to = "beta".into();
    assert_eq!(env.address(), Ok(Address::Host(host("beta"))));
    env.payload = Payload::Presence;
    env.to = format!("roster.a.{}", lead());
    assert_eq!(
        env.address(),
        Ok(Address::Presence {
            host: host("a"),
            gid: lead()
        })
    );
    env.to = format!("roster.b.{}", lead());
    assert!(env.address().is_err(), "another host's key");
    // Each address is published under the key it is read from.
    for (a, key) in [
        (Address::Entity(worker()), worker().to_string()),
        (Address::Broadcast(None), "broadcast.all".into()),
        (
            Address::Broadcast(Some("docs".into())),
            "broadcast.docs".into(),
        ),
        (Address::Host(host("beta")), "beta".into()),
        (
            Address::Presence {
                host: host("a"),
                gid: lead(),
            },
            format!("roster.a.{}", lead()),
        ),
    ] {
        assert_eq!(a.key(), key);
    }
}

/// A point-to-point message published under a broadcast key (any client with credentials may
/// bind an inbox to `broadcast.#`) is refused as malformed, never read as a gid.
#[test]
fn a_reply_addressed_to_a_broadcast_is_refused() {
    let (a, b, _) = keyrings();
    let mut env = send(b"forged");
    env.payload = Payload::Reply {
        re: None,
        outcome: Outcome::Replied,
    };
    env.to = "broadcast.all".into();
    a.sign(&mut env);
    let r = admit_at_b(&b, &env.to_headers(), env.body.clone(), "broadcast.all");
    assert!(
        matches!(
            r,
            Err(Rejection::Decode(DecodeError::Malformed {
                field: "to",
                ..
            }))
        ),
        "{r:?}"
    );
}

#[test]
fn a_message_re_published_into_another_inbox_is_refused() {
    let (a, b, _) = keyrings();
    let mut env = send(b"task");
    a.sign(&mut env);
    let r = admit_at_b(&b, &env.to_headers(), env.body.clone(), "someone-else");
    assert_eq!(
        r,
        Err(Rejection::WrongRoutingKey {
            to: worker().to_string(),
            key: "someone-else".into()
        })
    );
}

#[test]
fn an_expired_message_and_a_replay_are_refused() {
    let (a, b, _) = keyrings();
    let mut old = send(b"task");
    old.expires_at = NOW - 1;
    a.sign(&mut old);
    let r = admit_at_b(&b, &old.to_headers(), old.body.clone(), worker().as_str());
    assert!(matches!(r, Err(Rejection::Expired { .. })));

    let mut env = send(b"task");
    a.sign(&mut env);
    let mut seen = SeenSet::new(64);
    let h = env.to_headers();
    let first = admit(
        &b,
        &h,
        env.body.clone(),
        worker().as_str(),
        NOW,
        roster,
        &mut seen,
    );
    let again = admit(
        &b,
        &h,
        env.body.clone(),
        worker().as_str(),
        NOW + 5,
        roster,
        &mut seen,
    );
    assert!(first.is_ok());
    assert_eq!(again, Err(Rejection::Replayed(env.msg_id)));
}

/// A newer major version is refused before anything else is read — even fields this build
/// would call malformed.
#[test]
fn a_newer_major_is_refused_unread() {
    let mut h = Headers::new();
    h.insert("v".into(), HeaderValue::Str("2.0".into()));
    h.insert("kind".into(), HeaderValue::Str("TELEPORT".into()));
    assert_eq!(
        Envelope::from_parts(&h, Vec::new()),
        Err(DecodeError::NewerMajor { major: 2, ours: 1 })
    );
}

/// Within the major version, unknown headers are ignored and a newer minor is read.
#[test]
fn unknown_fields_and_a_newer_minor_are_tolerated() {
    let (a, b, _) = keyrings();
    let mut env = send(b"task");
    env.v.minor = 7;
    a.sign(&mut env);
    let mut h = env.to_headers();
    h.insert("priority".into(), HeaderValue::Int(9));
    let got = admit_at_b(&b, &h, env.body.clone(), worker().as_str());
    assert_eq!(got.map(|e| e.v.minor), Ok(7));
}

#[test]
fn wrong_header_types_are_clear_errors() {
    let mut env = send(b"x");
    env.sig = Some([0; 64]);
    let mut h = env.to_headers();
    h.insert("ts".into(), HeaderValue::Str("yesterday".into()));
    assert_eq!(
        Envelope::from_parts(&h, Vec::new()),
        Err(DecodeError::WrongType {
            field: "ts",
            expected: "integer"
        })
    );
    let mut h = env.to_headers();
    h.insert("sig".into(), HeaderValue::Bytes(vec![1, 2, 3]));
    assert!(matches!(
        Envelope::from_parts(&h, Vec::new()),
        Err(DecodeError::Malformed { field: "sig", .. })
    ));
    let mut h = env.to_headers();
    h.remove("msgId");
    assert_eq!(
        Envelope::from_parts(&h, Vec::new()),
        Err(DecodeError::Missing("msgId"))
    );
}

/// A payload of `kind` from drawn parts: what its kind needs taken from them (or made up when
/// not drawn), what it may carry as drawn, nothing it never carries.
fn payload_of(
    kind: Kind,
    re: Option<u128>,
    turn: Option<u128>,
    spawn: Option<String>,
    outcome: Outcome,
) -> Payload {
    let re_or = MsgId(Uuid::from_u128(re.unwrap_or(1)));
    let turn_or = TurnId(Uuid::from_u128(turn.unwrap_or(2)));
    let (re, turn) = (
        re.map(|r| MsgId(Uuid::from_u128(r))),
        turn.map(|t| TurnId(Uuid::from_u128(t))),
    );
    match kind {
        Kind::Send => Payload::Send,
        Kind::Broadcast => Payload::Broadcast,
        Kind::Coord => Payload::Coord,
        Kind::Stop => Payload::Stop,
        Kind::Presence => Payload::Presence,
        Kind::Spawn => Payload::Spawn {
            spawn_id: SessionId::new(spawn.unwrap_or_else(|| "g".into())),
        },
        Kind::Ask => Payload::Ask {
            re: re_or,
            turn: turn_or,
        },
        Kind::Answer => Payload::Answer { turn: turn_or },
        Kind::Reply => Payload::Reply { re, outcome },
        Kind::Failed => Payload::Failed {
            re: re_or,
            outcome,
            spawn_id: spawn.map(SessionId::new),
        },
        Kind::Injected => Payload::Injected { re: re_or },
        Kind::Abandoned => Payload::Abandoned { re: re_or },
        Kind::TooLate => Payload::TooLate { re: re_or, turn },
        Kind::NoWaiter => Payload::NoWaiter { re, turn: turn_or },
    }
}

/// Each kind's references are checked at decode: one it needs and lacks is missing, one it
/// never carries is refused, never dropped (it is signed; a message is believed whole).
#[test]
fn a_kind_missing_its_reference_or_carrying_anothers_is_refused() {
    let (a, _, _) = keyrings();
    let mut reply = send(b"done");
    reply.payload = Payload::Reply {
        re: None,
        outcome: Outcome::Replied,
    };
    a.sign(&mut reply);
    let mut h = reply.to_headers();
    h.remove("outcome");
    assert_eq!(
        Envelope::from_parts(&h, Vec::new()),
        Err(DecodeError::Missing("outcome"))
    );
    let mut h = send(b"task").to_headers();
    h.insert(
        "turnId".into(),
        HeaderValue::Str(TurnId(Uuid::from_u128(9)).to_string()),
    );
    assert_eq!(
        Envelope::from_parts(&h, Vec::new()),
        Err(DecodeError::Malformed {
            field: "turnId",
            reason: "SEND carries no turnId".into()
        })
    );
    let mut h = send(b"task").to_headers();
    h.insert("kind".into(), HeaderValue::Str("ASK".into()));
    assert_eq!(
        Envelope::from_parts(&h, Vec::new()),
        Err(DecodeError::Missing("re"))
    );
}

fn arb_envelope() -> impl Strategy<Value = Envelope> {
    (
        prop::sample::select(Kind::ALL.to_vec()),
        any::<u128>(),
        any::<u128>(),
        "[a-z0-9-]{1,40}",
        "[a-z0-9.-]{1,60}",
        prop::option::of(any::<u128>()),
        prop::option::of(any::<u128>()),
        prop::option::of("[a-z0-9-]{1,40}"),
        prop::sample::select(Outcome::ALL.to_vec()),
        0..i64::MAX as u64,
        0..i64::MAX as u64,
        prop::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(
            |(kind, m, t, from, to, re, turn, spawn, outcome, ts, exp, body)| Envelope {
                v: VERSION,
                payload: payload_of(kind, re, turn, spawn, outcome),
                msg_id: MsgId(Uuid::from_u128(m)),
                trace_id: TraceId(Uuid::from_u128(t)),
                from: SessionId::new(from),
                to,
                signer: host("a"),
                ts,
                expires_at: exp,
                sig: None,
                body,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn headers_round_trip(env in arb_envelope()) {
        let (a, _, _) = keyrings();
        let mut env = env;
        a.sign(&mut env);
        prop_assert_eq!(Envelope::from_parts(&env.to_headers(), env.body.clone()), Ok(env));
    }

    /// Any single-bit change to the body or to any signed header fails verification (or
    /// decoding, when the flip breaks the header's syntax): never admitted.
    #[test]
    fn any_single_bit_flip_is_refused(
        env in arb_envelope(), which in any::<prop::sample::Index>(), bit in 0..8u8,
        in_body in any::<bool>(),
    ) {
        let (a, b, _) = keyrings();
        let mut env = env;
        env.from = lead();
        env.payload = Payload::Send;
        env.expires_at = NOW + 60_000;
        a.sign(&mut env);
        let key = env.to.clone();
        let mut headers = env.to_headers();
        let mut body = env.body.clone();
        if in_body && !body.is_empty() {
            let i = which.index(body.len());
            body[i] ^= 1 << bit;
        } else {
            let names: Vec<String> = headers.keys().filter(|k| *k != "sig").cloned().collect();
            let name = &names[which.index(names.len())];
            match headers.get_mut(name) {
                Some(HeaderValue::Str(s)) => {
                    let mut bytes = s.clone().into_bytes();
                    let i = which.index(bytes.len().max(1)).min(bytes.len().saturating_sub(1));
                    bytes[i] ^= 1 << bit;
                    *headers.get_mut(name).expect("present") = HeaderValue::Bytes(bytes);
                }
                Some(HeaderValue::Int(v)) => *v ^= 1 << bit,
                Some(HeaderValue::Bytes(bytes)) => bytes[0] ^= 1 << bit,
                None => unreachable!(),
            }
        }
        let r = admit(&b, &headers, body, &key, NOW, roster, &mut SeenSet::new(8));
        prop_assert!(r.is_err(), "a flipped message was admitted");
    }
}

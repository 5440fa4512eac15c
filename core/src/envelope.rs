//! The message envelope (ch. 10 §2.1): the fields every cross-host message carries, encoded as
//! a broker-neutral header map beside an opaque body. The shell maps the header map to AMQP
//! headers and back; this module owns the schema and the canonical bytes that are signed.
//!
//! Schema policy: within a major version unknown headers are ignored (rolling upgrades across
//! mixed-version gateways just work); a newer major is refused whole, never half-parsed.

use crate::ids::{HostId, MsgId, SessionId, TraceId, TurnId};
use crate::outcome::Outcome;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use uuid::Uuid;

/// The envelope schema this build writes. 1.1: presence is a host snapshot plus ordered
/// per-entity deltas (`roster::Presence`'s `seq`, `entities`, `group`, `gone`); 1.0 readers
/// ignore those fields (docs/federation.md, "Presence"). 1.2: STOP on `fleet.control`, a
/// refused control message answered FAILED with a typed `control::Refusal`, and COORD (a
/// lead-to-lead note); a 1.1 reader refuses either new kind as malformed.
pub const VERSION: Version = Version { major: 1, minor: 2 };

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// What a message is (ch. 10 §2.1), with the spec's wire names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Kind {
    Send,
    Reply,
    Ask,
    Answer,
    TooLate,
    NoWaiter,
    Abandoned,
    Failed,
    Injected,
    Broadcast,
    Presence,
    Spawn,
    Stop,
    Coord,
}

impl Kind {
    pub const ALL: [Kind; 14] = [
        Kind::Send,
        Kind::Reply,
        Kind::Ask,
        Kind::Answer,
        Kind::TooLate,
        Kind::NoWaiter,
        Kind::Abandoned,
        Kind::Failed,
        Kind::Injected,
        Kind::Broadcast,
        Kind::Presence,
        Kind::Spawn,
        Kind::Stop,
        Kind::Coord,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Send => "SEND",
            Kind::Reply => "REPLY",
            Kind::Ask => "ASK",
            Kind::Answer => "ANSWER",
            Kind::TooLate => "TOO_LATE",
            Kind::NoWaiter => "NO_WAITER",
            Kind::Abandoned => "ABANDONED",
            Kind::Failed => "FAILED",
            Kind::Injected => "INJECTED",
            Kind::Broadcast => "BROADCAST",
            Kind::Presence => "PRESENCE",
            Kind::Spawn => "SPAWN",
            Kind::Stop => "STOP",
            Kind::Coord => "COORD",
        }
    }

    /// Kinds a second first-delivery of which can only be a replay, so the seen-set refuses
    /// it: the at-most-once forward path (acked before it acts), SPAWN (whose broker
    /// redeliveries the spawn dedup absorbs, but whose replay after a stop must not relaunch)
    /// and STOP (idempotent under redelivery, but a replay must not stop a member again).
    pub fn replay_guarded(self) -> bool {
        matches!(
            self,
            Kind::Send | Kind::Answer | Kind::Broadcast | Kind::Spawn | Kind::Stop | Kind::Coord
        )
    }

    /// Control kinds: at-least-once, acked once done, so a broker redelivery is handled again
    /// (each is idempotent) rather than treated as a lost forward message.
    pub fn is_control(self) -> bool {
        matches!(self, Kind::Spawn | Kind::Stop)
    }

    pub fn from_wire(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One header value, in the three shapes AMQP field tables carry for us.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HeaderValue {
    Str(String),
    Int(i64),
    Bytes(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// Headers by name: ordered, so encodings and snapshots are stable.
pub type Headers = BTreeMap<String, HeaderValue>;

/// What a message of each kind carries beside its routing and its body: the references its
/// kind needs, and only those (ch. 10 §2.1). A draft is built from one, so no kind goes out
/// missing a reference it needs or carrying one it never has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// A brief for one entity's inbox.
    Send,
    /// A note for every member, or a group's.
    Broadcast,
    /// A lead-to-lead note.
    Coord,
    /// A stop of a member, to its host's control queue (the member in the body).
    Stop,
    /// An entity's presence.
    Presence,
    /// A spawn on another host: the new member's gid, minted by the requester.
    Spawn { spawn_id: SessionId },
    /// A member's question in the turn of brief `re`.
    Ask { re: MsgId, turn: TurnId },
    /// A lead's answer to question `turn`.
    Answer { turn: TurnId },
    /// A turn's result for brief `re` (none: a reply nothing asked for), as `outcome`.
    Reply { re: Option<MsgId>, outcome: Outcome },
    /// Brief or control message `re` failed, as `outcome`; a SPAWN's failure names its id.
    Failed {
        re: MsgId,
        outcome: Outcome,
        spawn_id: Option<SessionId>,
    },
    /// Brief `re` was typed into its member.
    Injected { re: MsgId },
    /// Brief `re` will get no result: its member went before it ended.
    Abandoned { re: MsgId },
    /// Answer `re` came after its question closed (`turn`, as the answer named it).
    TooLate { re: MsgId, turn: Option<TurnId> },
    /// Question `turn` (asked in brief `re`'s turn) has no waiter to answer it.
    NoWaiter { re: Option<MsgId>, turn: TurnId },
}

/// Reference headers as read (or as a test writes them), before their kind judges them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refs {
    pub re: Option<MsgId>,
    pub turn: Option<TurnId>,
    pub spawn_id: Option<SessionId>,
    pub outcome: Option<Outcome>,
}

impl Payload {
    /// The payload `kind` makes of the reference headers read: one its kind needs and lacks is
    /// `Missing`; one its kind never carries is `Malformed`, never silently dropped (it is
    /// signed, and a message is believed whole or not at all).
    pub fn from_refs(kind: Kind, r: Refs) -> Result<Payload, DecodeError> {
        fn need<T>(v: Option<T>, field: &'static str) -> Result<T, DecodeError> {
            v.ok_or(DecodeError::Missing(field))
        }
        let Refs {
            re,
            turn,
            spawn_id,
            outcome,
        } = r;
        let payload = match kind {
            Kind::Send => Payload::Send,
            Kind::Broadcast => Payload::Broadcast,
            Kind::Coord => Payload::Coord,
            Kind::Stop => Payload::Stop,
            Kind::Presence => Payload::Presence,
            Kind::Spawn => Payload::Spawn {
                spawn_id: need(spawn_id.clone(), "spawnId")?,
            },
            Kind::Ask => Payload::Ask {
                re: need(re, "re")?,
                turn: need(turn, "turnId")?,
            },
            Kind::Answer => Payload::Answer {
                turn: need(turn, "turnId")?,
            },
            Kind::Reply => Payload::Reply {
                re,
                outcome: need(outcome, "outcome")?,
            },
            Kind::Failed => Payload::Failed {
                re: need(re, "re")?,
                outcome: need(outcome, "outcome")?,
                spawn_id: spawn_id.clone(),
            },
            Kind::Injected => Payload::Injected {
                re: need(re, "re")?,
            },
            Kind::Abandoned => Payload::Abandoned {
                re: need(re, "re")?,
            },
            Kind::TooLate => Payload::TooLate {
                re: need(re, "re")?,
                turn,
            },
            Kind::NoWaiter => Payload::NoWaiter {
                re,
                turn: need(turn, "turnId")?,
            },
        };
        let extra = [
            ("re", re.is_some() && payload.re().is_none()),
            ("turnId", turn.is_some() && payload.turn_id().is_none()),
            (
                "spawnId",
                spawn_id.is_some() && payload.spawn_id().is_none(),
            ),
            ("outcome", outcome.is_some() && payload.outcome().is_none()),
        ];
        match extra.into_iter().find(|(_, extra)| *extra) {
            Some((field, _)) => Err(DecodeError::Malformed {
                field,
                reason: format!("{kind} carries no {field}"),
            }),
            None => Ok(payload),
        }
    }

    /// The kind it is.
    pub fn kind(&self) -> Kind {
        match self {
            Payload::Send => Kind::Send,
            Payload::Broadcast => Kind::Broadcast,
            Payload::Coord => Kind::Coord,
            Payload::Stop => Kind::Stop,
            Payload::Presence => Kind::Presence,
            Payload::Spawn { .. } => Kind::Spawn,
            Payload::Ask { .. } => Kind::Ask,
            Payload::Answer { .. } => Kind::Answer,
            Payload::Reply { .. } => Kind::Reply,
            Payload::Failed { .. } => Kind::Failed,
            Payload::Injected { .. } => Kind::Injected,
            Payload::Abandoned { .. } => Kind::Abandoned,
            Payload::TooLate { .. } => Kind::TooLate,
            Payload::NoWaiter { .. } => Kind::NoWaiter,
        }
    }

    /// Its `re` header.
    pub fn re(&self) -> Option<MsgId> {
        match self {
            Payload::Ask { re, .. }
            | Payload::Failed { re, .. }
            | Payload::Injected { re }
            | Payload::Abandoned { re }
            | Payload::TooLate { re, .. } => Some(*re),
            Payload::Reply { re, .. } | Payload::NoWaiter { re, .. } => *re,
            _ => None,
        }
    }

    /// Its `turnId` header.
    pub fn turn_id(&self) -> Option<TurnId> {
        match self {
            Payload::Ask { turn, .. }
            | Payload::Answer { turn }
            | Payload::NoWaiter { turn, .. } => Some(*turn),
            Payload::TooLate { turn, .. } => *turn,
            _ => None,
        }
    }

    /// Its `spawnId` header.
    pub fn spawn_id(&self) -> Option<&SessionId> {
        match self {
            Payload::Spawn { spawn_id } => Some(spawn_id),
            Payload::Failed { spawn_id, .. } => spawn_id.as_ref(),
            _ => None,
        }
    }

    /// Its `outcome` header.
    pub fn outcome(&self) -> Option<Outcome> {
        match self {
            Payload::Reply { outcome, .. } | Payload::Failed { outcome, .. } => Some(*outcome),
            _ => None,
        }
    }
}

/// Whom an envelope is for: what its routing key (`to`) means, which its kind decides. On the
/// wire it stays the routing key it was published with (`key`); nothing reads `to` as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// One entity's inbox (a member's or a lead's), by gid: every point-to-point kind.
    Entity(SessionId),
    /// Every member (`broadcast.all`), or one group's (`broadcast.<group>`): BROADCAST.
    Broadcast(Option<String>),
    /// A host's control queue, by host id: SPAWN and STOP.
    Host(HostId),
    /// An entity's presence on the roster, `roster.<host>.<gid>`: PRESENCE.
    Presence { host: HostId, gid: SessionId },
}

impl Address {
    /// The routing key it is published with.
    pub fn key(&self) -> String {
        match self {
            Address::Entity(gid) => gid.to_string(),
            Address::Broadcast(None) => "broadcast.all".into(),
            Address::Broadcast(Some(group)) => format!("broadcast.{group}"),
            Address::Host(host) => host.to_string(),
            Address::Presence { host, gid } => format!("roster.{host}.{gid}"),
        }
    }

    /// The entity it names, for a point-to-point kind.
    pub fn entity(&self) -> Option<&SessionId> {
        match self {
            Address::Entity(gid) => Some(gid),
            _ => None,
        }
    }
}

/// An envelope and its body.
///
/// Beyond ch. 10's field list this carries the fields the flows need: `signer` (the gateway
/// whose key signed it — the receiver must know which key to check before it can trust `from`)
/// and, in its kind's `Payload`, `re` (the msgId a REPLY, FAILED, INJECTED, ASK or ABANDONED
/// answers: the sender's waiter is keyed by it) and `outcome` (which of the spec's outcomes a
/// REPLY or FAILED carries). Its kind is its payload's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    pub v: Version,
    /// Its kind and the references that kind carries (`re`, `turnId`, `spawnId`, `outcome`).
    pub payload: Payload,
    pub msg_id: MsgId,
    pub trace_id: TraceId,
    /// The sender's global id.
    pub from: SessionId,
    /// The routing key it was published with: a gid, `broadcast.<group>`, a host id for
    /// control, `roster.<host>.<gid>` for presence.
    pub to: String,
    pub signer: HostId,
    /// Publish time, Unix milliseconds.
    pub ts: u64,
    /// Gateway-enforced expiry, Unix milliseconds.
    pub expires_at: u64,
    /// Ed25519 over `signing_bytes()`; absent until signed.
    pub sig: Option<[u8; 64]>,
    pub body: Vec<u8>,
}

/// Why a header map is not an envelope this build accepts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("envelope major version {major} is newer than this gateway's {ours}; refused unread")]
    NewerMajor { major: u32, ours: u32 },
    #[error("header {0} is missing")]
    Missing(&'static str),
    #[error("header {field} has the wrong type (expected {expected})")]
    WrongType {
        field: &'static str,
        expected: &'static str,
    },
    #[error("header {field} is malformed: {reason}")]
    Malformed { field: &'static str, reason: String },
}

impl Envelope {
    pub fn kind(&self) -> Kind {
        self.payload.kind()
    }

    /// The msgId it answers, for a kind that refers to one.
    pub fn re(&self) -> Option<MsgId> {
        self.payload.re()
    }

    pub fn turn_id(&self) -> Option<TurnId> {
        self.payload.turn_id()
    }

    pub fn spawn_id(&self) -> Option<&SessionId> {
        self.payload.spawn_id()
    }

    pub fn outcome(&self) -> Option<Outcome> {
        self.payload.outcome()
    }

    /// The broker-neutral header map (every field but the body).
    pub fn to_headers(&self) -> Headers {
        let mut h = Headers::new();
        let mut s = |k: &str, v: String| {
            h.insert(k.to_string(), HeaderValue::Str(v));
        };
        s("v", self.v.to_string());
        s("kind", self.kind().as_str().to_string());
        s("msgId", self.msg_id.to_string());
        s("traceId", self.trace_id.to_string());
        s("from", self.from.to_string());
        s("to", self.to.clone());
        s("signer", self.signer.to_string());
        if let Some(re) = self.re() {
            s("re", re.to_string());
        }
        if let Some(t) = self.turn_id() {
            s("turnId", t.to_string());
        }
        if let Some(sp) = self.spawn_id() {
            s("spawnId", sp.to_string());
        }
        if let Some(o) = self.outcome() {
            s("outcome", o.as_str().to_string());
        }
        h.insert("ts".into(), HeaderValue::Int(clamp_i64(self.ts)));
        h.insert(
            "expiresAt".into(),
            HeaderValue::Int(clamp_i64(self.expires_at)),
        );
        if let Some(sig) = self.sig {
            h.insert("sig".into(), HeaderValue::Bytes(sig.to_vec()));
        }
        h
    }

    /// Parses a header map and body. The version is read first: a newer major is refused
    /// before any other field is looked at.
    pub fn from_parts(h: &Headers, body: Vec<u8>) -> Result<Envelope, DecodeError> {
        let v = parse_version(str_field(h, "v")?)?;
        if v.major > VERSION.major {
            return Err(DecodeError::NewerMajor {
                major: v.major,
                ours: VERSION.major,
            });
        }
        let kind_s = str_field(h, "kind")?;
        let kind = Kind::from_wire(kind_s).ok_or_else(|| DecodeError::Malformed {
            field: "kind",
            reason: format!("unknown kind {kind_s:?}"),
        })?;
        let sig = match h.get("sig") {
            None => None,
            Some(HeaderValue::Bytes(b)) => Some(<[u8; 64]>::try_from(b.as_slice()).map_err(
                |_| DecodeError::Malformed {
                    field: "sig",
                    reason: format!("{} bytes, expected 64", b.len()),
                },
            )?),
            Some(_) => {
                return Err(DecodeError::WrongType {
                    field: "sig",
                    expected: "bytes",
                })
            }
        };
        let outcome = match opt_str(h, "outcome")? {
            None => None,
            Some(o) => Some(Outcome::from_wire(o).ok_or_else(|| DecodeError::Malformed {
                field: "outcome",
                reason: format!("unknown outcome {o:?}"),
            })?),
        };
        let refs = Refs {
            re: opt_uuid(h, "re")?.map(MsgId),
            turn: opt_uuid(h, "turnId")?.map(TurnId),
            spawn_id: opt_str(h, "spawnId")?.map(SessionId::new),
            outcome,
        };
        Ok(Envelope {
            v,
            payload: Payload::from_refs(kind, refs)?,
            msg_id: MsgId(uuid_field(h, "msgId")?),
            trace_id: TraceId(uuid_field(h, "traceId")?),
            from: SessionId::new(nonempty(h, "from")?),
            to: nonempty(h, "to")?.to_string(),
            signer: HostId::new(nonempty(h, "signer")?),
            ts: int_field(h, "ts")?,
            expires_at: int_field(h, "expiresAt")?,
            sig,
            body,
        })
    }

    /// What `to` means for this kind, or why it means nothing: a presence must be keyed by
    /// its own host and gid, a broadcast must name all or a group, and a point-to-point kind
    /// must name one entity (never a broadcast or roster key).
    pub fn address(&self) -> Result<Address, DecodeError> {
        let malformed = |reason: String| DecodeError::Malformed {
            field: "to",
            reason,
        };
        let to = self.to.as_str();
        match self.kind() {
            Kind::Presence => {
                let a = Address::Presence {
                    host: self.signer.clone(),
                    gid: self.from.clone(),
                };
                match a.key() == to {
                    true => Ok(a),
                    false => Err(malformed(format!(
                        "a presence is keyed by its own host and gid ({}), not {to:?}",
                        a.key()
                    ))),
                }
            }
            Kind::Spawn | Kind::Stop => Ok(Address::Host(HostId::new(to))),
            Kind::Broadcast => match to.strip_prefix("broadcast.") {
                Some("all") => Ok(Address::Broadcast(None)),
                Some(group) if !group.is_empty() => Ok(Address::Broadcast(Some(group.into()))),
                _ => Err(malformed(format!(
                    "a broadcast is for all or a group, not {to:?}"
                ))),
            },
            _ if to.starts_with("broadcast.") || to.starts_with("roster.") => Err(malformed(
                format!("{} is for one entity, not {to:?}", self.kind().as_str()),
            )),
            _ => Ok(Address::Entity(SessionId::new(to))),
        }
    }

    /// The exact bytes the signature covers: a domain tag, then every header but `sig` in a
    /// fixed order, each length-prefixed (absent optionals marked), then the body. No JSON, no
    /// canonicalization step: the same envelope always yields the same bytes.
    pub fn signing_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256 + self.body.len());
        out.extend_from_slice(b"fleetd-envelope-sig\0");
        let mut field = |bytes: Option<&[u8]>| match bytes {
            Some(b) => {
                out.extend_from_slice(&(b.len() as u64).to_be_bytes());
                out.extend_from_slice(b);
            }
            None => out.extend_from_slice(&u64::MAX.to_be_bytes()),
        };
        field(Some(&self.v.major.to_be_bytes()));
        field(Some(&self.v.minor.to_be_bytes()));
        field(Some(self.kind().as_str().as_bytes()));
        field(Some(self.msg_id.0.as_bytes()));
        field(Some(self.trace_id.0.as_bytes()));
        field(Some(self.from.as_str().as_bytes()));
        field(Some(self.to.as_bytes()));
        field(Some(self.signer.as_str().as_bytes()));
        let (re, turn) = (self.re(), self.turn_id());
        field(re.as_ref().map(|m| m.0.as_bytes().as_slice()));
        field(turn.as_ref().map(|t| t.0.as_bytes().as_slice()));
        field(self.spawn_id().map(|s| s.as_str().as_bytes()));
        field(self.outcome().map(|o| o.as_str().as_bytes()));
        field(Some(&self.ts.to_be_bytes()));
        field(Some(&self.expires_at.to_be_bytes()));
        field(Some(&self.body));
        out
    }
}

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn parse_version(s: &str) -> Result<Version, DecodeError> {
    let bad = |reason: &str| DecodeError::Malformed {
        field: "v",
        reason: format!("{reason}: {s:?}"),
    };
    let (major, minor) = s.split_once('.').unwrap_or((s, "0"));
    Ok(Version {
        major: major.parse().map_err(|_| bad("not MAJOR.MINOR"))?,
        minor: minor.parse().map_err(|_| bad("not MAJOR.MINOR"))?,
    })
}

fn str_field<'a>(h: &'a Headers, field: &'static str) -> Result<&'a str, DecodeError> {
    opt_str(h, field)?.ok_or(DecodeError::Missing(field))
}

fn nonempty<'a>(h: &'a Headers, field: &'static str) -> Result<&'a str, DecodeError> {
    let s = str_field(h, field)?;
    if s.is_empty() {
        return Err(DecodeError::Malformed {
            field,
            reason: "empty".into(),
        });
    }
    Ok(s)
}

fn opt_str<'a>(h: &'a Headers, field: &'static str) -> Result<Option<&'a str>, DecodeError> {
    match h.get(field) {
        None => Ok(None),
        Some(HeaderValue::Str(s)) => Ok(Some(s)),
        Some(HeaderValue::Bytes(b)) => {
            std::str::from_utf8(b)
                .map(Some)
                .map_err(|_| DecodeError::WrongType {
                    field,
                    expected: "UTF-8 string",
                })
        }
        Some(HeaderValue::Int(_)) => Err(DecodeError::WrongType {
            field,
            expected: "string",
        }),
    }
}

fn uuid_field(h: &Headers, field: &'static str) -> Result<Uuid, DecodeError> {
    opt_uuid(h, field)?.ok_or(DecodeError::Missing(field))
}

fn opt_uuid(h: &Headers, field: &'static str) -> Result<Option<Uuid>, DecodeError> {
    match opt_str(h, field)? {
        None => Ok(None),
        // Only the canonical form (lowercase, hyphenated) is accepted: one value, one spelling,
        // so no byte of a signed header can change without changing what it says.
        Some(s) => match Uuid::parse_str(s) {
            Ok(u) if u.hyphenated().to_string() == s => Ok(Some(u)),
            Ok(_) => Err(DecodeError::Malformed {
                field,
                reason: format!("{s:?} is not a canonical lowercase hyphenated UUID"),
            }),
            Err(e) => Err(DecodeError::Malformed {
                field,
                reason: e.to_string(),
            }),
        },
    }
}

fn int_field(h: &Headers, field: &'static str) -> Result<u64, DecodeError> {
    match h.get(field) {
        None => Err(DecodeError::Missing(field)),
        Some(HeaderValue::Int(i)) => u64::try_from(*i).map_err(|_| DecodeError::Malformed {
            field,
            reason: format!("negative: {i}"),
        }),
        Some(_) => Err(DecodeError::WrongType {
            field,
            expected: "integer",
        }),
    }
}

#[cfg(test)]
mod payload_tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Each kind's payload names that kind and carries exactly the references the spec gives
    /// it: every kind has one, and a kind that never refers to a brief carries no `re`.
    #[test]
    fn each_payload_is_one_kind_with_its_own_references() {
        let (re, turn) = (MsgId(Uuid::from_u128(1)), TurnId(Uuid::from_u128(2)));
        let gid = SessionId::new("00000000-0000-4000-8000-000000000001");
        let all = [
            Payload::Send,
            Payload::Broadcast,
            Payload::Coord,
            Payload::Stop,
            Payload::Presence,
            Payload::Spawn {
                spawn_id: gid.clone(),
            },
            Payload::Ask { re, turn },
            Payload::Answer { turn },
            Payload::Reply {
                re: None,
                outcome: Outcome::Replied,
            },
            Payload::Failed {
                re,
                outcome: Outcome::WorkerFailed,
                spawn_id: Some(gid.clone()),
            },
            Payload::Injected { re },
            Payload::Abandoned { re },
            Payload::TooLate {
                re,
                turn: Some(turn),
            },
            Payload::NoWaiter { re: Some(re), turn },
        ];
        let kinds: BTreeSet<Kind> = all.iter().map(Payload::kind).collect();
        assert_eq!(
            kinds,
            Kind::ALL.into_iter().collect(),
            "one payload per kind"
        );
        for p in &all {
            let refers = p.re().is_some();
            let plain = matches!(
                p.kind(),
                Kind::Send
                    | Kind::Broadcast
                    | Kind::Coord
                    | Kind::Stop
                    | Kind::Presence
                    | Kind::Spawn
                    | Kind::Answer
                    | Kind::Reply
            );
            assert!(refers != plain, "{:?}", p.kind());
            assert_eq!(
                p.outcome().is_some(),
                matches!(p.kind(), Kind::Reply | Kind::Failed),
                "{:?}",
                p.kind()
            );
            assert_eq!(
                p.spawn_id().is_some(),
                matches!(p.kind(), Kind::Spawn | Kind::Failed),
                "{:?}",
                p.kind()
            );
        }
    }
}

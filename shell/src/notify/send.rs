//! Carrying one notice out through one sink: a signed webhook, an ntfy topic, or a command.
//! HTTP sinks retry what may pass later (no answer, 408, 429, 5xx) with a doubling backoff,
//! a bounded number of times; a command is run once per attempt the same way.

use super::http::Client;
use fleet_core::needs::Need;
use fleet_core::notify::{Notice, NoticePhase};
use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;
use std::time::Duration;

/// The JSON a webhook receives (and a command reads on its stdin).
#[derive(Clone, Debug, Serialize)]
pub struct Body {
    /// `<rule>/<need id>/<opened_unix_ms>/<seq>`: the same on every retry, so a receiver can
    /// drop a repeat; a need that comes back (or outlives a restart) opens a new stretch.
    pub delivery: String,
    pub rule: String,
    pub phase: NoticePhase,
    pub seq: u32,
    /// When the gateway decided the notice (Unix ms). The signed timestamp is each attempt's.
    pub at_unix_ms: u64,
    #[serde(flatten)]
    pub need: Need,
}

impl Body {
    pub fn of(notice: Notice, at_unix_ms: u64) -> Body {
        Body {
            delivery: format!(
                "{}/{}/{}/{}",
                notice.rule, notice.need.id, notice.opened_unix_ms, notice.seq
            ),
            rule: notice.rule,
            phase: notice.phase,
            seq: notice.seq,
            at_unix_ms,
            need: notice.need,
        }
    }

    /// One line: what a phone shows as the title.
    pub fn title(&self) -> String {
        let phase = match self.phase {
            NoticePhase::Raised => "needs you",
            NoticePhase::Reminder => "still needs you",
            NoticePhase::Resolved => "resolved",
        };
        format!("fleetd {}: {} {phase}", self.need.host, self.need.kind)
    }

    /// The message: the summary, and the words when the rule allows them.
    pub fn message(&self) -> String {
        match &self.need.text {
            Some(t) => format!("{}\n\n{t}", self.need.summary),
            None => self.need.summary.clone(),
        }
    }
}

/// Where a rule's notices go.
#[derive(Clone, Debug)]
pub enum Target {
    /// POST the JSON body, signed with HMAC-SHA256 under `secret`.
    Webhook { url: String, secret: Vec<u8> },
    /// POST the message to an ntfy topic URL (ntfy.sh or self-hosted), with its title,
    /// priority and tags as ntfy's headers.
    Ntfy { url: String, token: Option<String> },
    /// Run `argv` (no shell), its `{title}`, `{message}`, `{phase}`, `{kind}`, `{host}` and
    /// `{delivery}` filled in, with the JSON body on its stdin.
    Command { argv: Vec<String> },
}

/// How hard one notice is tried.
#[derive(Clone, Copy, Debug)]
pub struct Retry {
    /// Attempts in all (the first included).
    pub attempts: u32,
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    /// Bound on each attempt.
    pub timeout: Duration,
}

/// Why an attempt failed, and whether another may pass.
#[derive(Debug)]
pub struct Failure {
    pub why: String,
    pub again: bool,
}

/// The header a webhook's signature travels in: `sha256=<hex>` over `<timestamp>.<body>`.
pub const SIGNATURE_HEADER: &str = "x-fleetd-signature";
pub const TIMESTAMP_HEADER: &str = "x-fleetd-timestamp";
pub const DELIVERY_HEADER: &str = "x-fleetd-delivery";

/// The signature of `body` sent at `timestamp` (Unix ms) under `secret`.
pub fn sign(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    // HMAC takes a key of any length: this cannot fail.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
    m.update(timestamp.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    let bytes = m.finalize().into_bytes();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Tries `body` through `target` until it passes, fails for good, or runs out of attempts;
/// `unix_ms` reads the wall clock each attempt signs. `Ok` with the attempts it took; `Err`
/// with the last failure.
pub async fn deliver(
    client: &Client,
    target: &Target,
    body: &Body,
    retry: Retry,
    unix_ms: impl Fn() -> u64,
) -> Result<u32, String> {
    let mut backoff = retry.first_backoff;
    let mut attempt = 1;
    loop {
        let sending = once(client, target, body, unix_ms());
        let result = match tokio::time::timeout(retry.timeout, sending).await {
            Ok(r) => r,
            Err(_) => Err(Failure {
                why: format!("no answer within {} ms", retry.timeout.as_millis()),
                again: true,
            }),
        };
        match result {
            Ok(()) => return Ok(attempt),
            Err(f) if !f.again || attempt >= retry.attempts => {
                return Err(format!("attempt {attempt}: {}", f.why))
            }
            Err(f) => {
                tracing::debug!(attempt, why = %f.why, "a notice will be tried again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(retry.max_backoff);
                attempt += 1;
            }
        }
    }
}

async fn once(client: &Client, target: &Target, body: &Body, now: u64) -> Result<(), Failure> {
    match target {
        Target::Webhook { url, secret } => {
            let json = serde_json::to_vec(body).map_err(|e| Failure {
                why: e.to_string(),
                again: false,
            })?;
            let headers = [
                ("content-type", "application/json".to_string()),
                (DELIVERY_HEADER, header_safe(&body.delivery)),
                (TIMESTAMP_HEADER, now.to_string()),
                (SIGNATURE_HEADER, sign(secret, now, &json)),
            ];
            answer(client.post(url, &headers, json).await)
        }
        Target::Ntfy { url, token } => {
            let priority = match body.phase {
                NoticePhase::Resolved => "low",
                _ => "high",
            };
            let mut headers = vec![
                ("title", header_safe(&body.title())),
                ("priority", priority.to_string()),
                ("tags", header_safe(&format!("fleetd,{}", body.need.kind))),
            ];
            if let Some(t) = token {
                headers.push(("authorization", format!("Bearer {}", header_safe(t))));
            }
            answer(
                client
                    .post(url, &headers, body.message().into_bytes())
                    .await,
            )
        }
        Target::Command { argv } => run(argv, body).await,
    }
}

/// A response's verdict: 2xx passes; 408, 429 and 5xx may pass later; anything else is the
/// receiver refusing this notice for good.
fn answer(r: Result<hyper::StatusCode, String>) -> Result<(), Failure> {
    match r {
        Err(why) => Err(Failure { why, again: true }),
        Ok(s) if s.is_success() => Ok(()),
        Ok(s) => Err(Failure {
            why: format!("the receiver answered {s}"),
            again: s.is_server_error() || s.as_u16() == 408 || s.as_u16() == 429,
        }),
    }
}

/// Header values are visible ASCII: anything else (a gid from a peer) becomes `?`.
fn header_safe(s: &str) -> String {
    s.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}

/// `argv` with the notice's fields filled in, each argument in one pass (a question that
/// says `{host}` stays as it is) and without NULs (no argument can carry one).
pub fn fill(argv: &[String], body: &Body) -> Vec<String> {
    let phase = match body.phase {
        NoticePhase::Raised => "raised",
        NoticePhase::Reminder => "reminder",
        NoticePhase::Resolved => "resolved",
    };
    let fields = [
        ("{title}", body.title()),
        ("{message}", body.message()),
        ("{phase}", phase.to_string()),
        ("{kind}", body.need.kind.to_string()),
        ("{host}", body.need.host.to_string()),
        ("{delivery}", body.delivery.clone()),
    ];
    argv.iter()
        .map(|a| {
            let mut out = String::with_capacity(a.len());
            let mut rest = a.as_str();
            while !rest.is_empty() {
                match fields.iter().find(|(k, _)| rest.starts_with(k)) {
                    Some((k, v)) => {
                        out.push_str(v);
                        rest = &rest[k.len()..];
                    }
                    None => {
                        let c = rest.chars().next().unwrap_or_default();
                        out.push(c);
                        rest = &rest[c.len_utf8()..];
                    }
                }
            }
            out.replace('\0', "\u{fffd}")
        })
        .collect()
}

async fn run(argv: &[String], body: &Body) -> Result<(), Failure> {
    use tokio::io::AsyncWriteExt;
    let args = fill(argv, body);
    let Some((program, rest)) = args.split_first() else {
        return Err(Failure {
            why: "no command".into(),
            again: false,
        });
    };
    let mut child = tokio::process::Command::new(program)
        .args(rest)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Failure {
            why: format!("{program}: {e}"),
            again: false,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        let json = serde_json::to_vec(body).unwrap_or_default();
        // A program that does not read its stdin is no failure.
        let _ = stdin.write_all(&json).await;
    }
    let status = child.wait().await.map_err(|e| Failure {
        why: format!("{program}: {e}"),
        again: true,
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure {
            why: format!("{program} exited with {status}"),
            again: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_covers_the_timestamp_and_the_body() {
        let a = sign(b"k", 1, b"{}");
        assert!(a.starts_with("sha256=") && a.len() == 7 + 64, "{a}");
        assert_ne!(a, sign(b"k", 2, b"{}"), "another timestamp");
        assert_ne!(a, sign(b"k", 1, b"{ }"), "another body");
        assert_ne!(a, sign(b"j", 1, b"{}"), "another key");
        assert_eq!(a, sign(b"k", 1, b"{}"));
    }

    #[test]
    fn a_command_argument_is_filled_once_and_carries_no_nul() {
        let need = fleet_core::needs::Need {
            id: "question:t".into(),
            kind: fleet_core::needs::NeedKind::Question,
            host: fleet_core::HostId::new("h1"),
            waits_on: None,
            member: None,
            turn_id: None,
            since: fleet_core::Instant::ZERO,
            summary: "asks {host}\0".into(),
            text: None,
        };
        let notice = Notice {
            rule: "r".into(),
            phase: NoticePhase::Raised,
            need,
            seq: 1,
            opened_unix_ms: 5,
        };
        let body = Body::of(notice, 9);
        let argv = ["{message} on {host}".to_string(), "{delivery}".to_string()];
        assert_eq!(
            fill(&argv, &body),
            ["asks {host}\u{fffd} on h1", "r/question:t/5/1"]
        );
    }

    #[test]
    fn header_values_stay_visible_ascii() {
        assert_eq!(header_safe("w1\r\nX-Evil: 1"), "w1??X-Evil: 1");
    }
}

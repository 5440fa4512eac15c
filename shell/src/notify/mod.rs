//! `[[notify]]`: each entry is one rule the core judges (`fleet_core::notify`) and the sink
//! its notices go through — a signed webhook, an ntfy topic, or a command. Each sink has its
//! own bounded queue and task, so a slow receiver holds up neither the loop nor another sink.

pub mod http;
pub mod queue;
pub mod send;

use crate::metrics::{Counter, Metrics};
use fleet_core::needs::NeedKind;
use fleet_core::notify::{Notice, NotifyRule};
use fleet_core::SessionId;
use queue::Queue;
use send::{Body, Retry, Target};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Which kind of sink an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkKind {
    Webhook,
    Ntfy,
    Command,
}

/// One `[[notify]]` entry.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NotifySection {
    /// Names the rule in notices, metrics and logs.
    pub name: String,
    pub sink: SinkKind,
    /// webhook: where the JSON is POSTed; ntfy: the topic's URL (`https://ntfy.sh/<topic>`).
    #[serde(default)]
    pub url: Option<String>,
    /// webhook: a file holding the HMAC-SHA256 key the body is signed with (required).
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// ntfy: a file holding an access token, sent as `Authorization: Bearer`.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// command: the program and its arguments (no shell); `{title}`, `{message}`,
    /// `{phase}`, `{kind}`, `{host}` and `{delivery}` are filled in.
    #[serde(default)]
    pub argv: Vec<String>,
    /// The kinds of need it tells about; empty: every kind.
    #[serde(default)]
    pub on: Vec<NeedKind>,
    /// Only needs waiting on these leads (`[[leads]]` names); empty: every need.
    #[serde(default)]
    pub leads: Vec<String>,
    #[serde(default = "d_grace")]
    pub grace_ms: u64,
    #[serde(default = "d_quiet")]
    pub quiet_ms: u64,
    #[serde(default = "d_max")]
    pub max_per_window: u32,
    #[serde(default = "d_window")]
    pub window_ms: u64,
    /// Carry a question's or result's words (off: who and what only).
    #[serde(default)]
    pub include_text: bool,
    /// Notices waiting for this sink at most; past it the oldest is dropped (and counted).
    #[serde(default = "d_queue")]
    pub queue: usize,
    /// Attempts per notice, the first included.
    #[serde(default = "d_attempts")]
    pub attempts: u32,
    /// Bound on each attempt.
    #[serde(default = "d_timeout")]
    pub timeout_ms: u64,
    /// The first retry's wait; each next one doubles, up to `max_backoff_ms`.
    #[serde(default = "d_backoff")]
    pub backoff_ms: u64,
    #[serde(default = "d_max_backoff")]
    pub max_backoff_ms: u64,
}

fn d_grace() -> u64 {
    NotifyRule::default().grace_ms
}
fn d_quiet() -> u64 {
    NotifyRule::default().quiet_ms
}
fn d_max() -> u32 {
    NotifyRule::default().max_per_window
}
fn d_window() -> u64 {
    NotifyRule::default().window_ms
}
fn d_queue() -> usize {
    256
}
fn d_attempts() -> u32 {
    5
}
fn d_timeout() -> u64 {
    5_000
}
fn d_backoff() -> u64 {
    500
}
fn d_max_backoff() -> u64 {
    30_000
}

impl NotifySection {
    /// The rule the core judges; `lead_gid` names a `[[leads]]` entry's gid.
    pub fn rule(&self, lead_gid: impl Fn(&str) -> Option<String>) -> NotifyRule {
        NotifyRule {
            name: self.name.clone(),
            on: self.on.clone(),
            leads: self
                .leads
                .iter()
                .filter_map(|l| lead_gid(l).map(|g| SessionId::new(&g)))
                .collect(),
            grace_ms: self.grace_ms,
            quiet_ms: self.quiet_ms,
            max_per_window: self.max_per_window,
            window_ms: self.window_ms,
            include_text: self.include_text,
        }
    }

    /// Every problem with its sink's settings, each as (key, reason). Reads the secret and
    /// token files, as the daemon will at start.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        let http = |url: &Option<String>, p: &mut Vec<(&'static str, String)>| match url {
            None => p.push(("url", format!("a {:?} sink needs a url", self.sink))),
            Some(u) if !http::valid_url(u) => {
                p.push(("url", format!("{u:?} must be an http(s) URL with a host")))
            }
            Some(_) => {}
        };
        match self.sink {
            SinkKind::Webhook => {
                http(&self.url, &mut p);
                match &self.secret_file {
                    None => p.push((
                        "secret_file",
                        "a webhook is signed: name a file holding its HMAC key".into(),
                    )),
                    Some(f) => {
                        if let Err(why) = read_secret(f) {
                            p.push(("secret_file", why));
                        }
                    }
                }
            }
            SinkKind::Ntfy => {
                http(&self.url, &mut p);
                if let Some(f) = &self.token_file {
                    if let Err(why) = read_secret(f) {
                        p.push(("token_file", why));
                    }
                }
            }
            SinkKind::Command => {
                if self.argv.first().is_none_or(|a| a.trim().is_empty()) {
                    p.push(("argv", "a command sink needs a program to run".into()));
                }
            }
        }
        if self.sink != SinkKind::Command && !self.argv.is_empty() {
            p.push(("argv", "only a command sink runs a program".into()));
        }
        for (key, v) in [
            ("queue", self.queue as u64),
            ("attempts", u64::from(self.attempts)),
            ("timeout_ms", self.timeout_ms),
            ("backoff_ms", self.backoff_ms),
        ] {
            if v == 0 {
                p.push((key, "must be greater than zero".into()));
            }
        }
        if self.max_backoff_ms < self.backoff_ms {
            p.push(("max_backoff_ms", "must be at least backoff_ms".into()));
        }
        p
    }

    fn target(&self) -> Result<Target, String> {
        let url = || {
            self.url
                .clone()
                .ok_or_else(|| format!("notify {:?}: no url", self.name))
        };
        Ok(match self.sink {
            SinkKind::Webhook => {
                let f = self
                    .secret_file
                    .as_ref()
                    .ok_or_else(|| format!("notify {:?}: no secret_file", self.name))?;
                Target::Webhook {
                    url: url()?,
                    secret: read_secret(f)?.into_bytes(),
                }
            }
            SinkKind::Ntfy => Target::Ntfy {
                url: url()?,
                token: self.token_file.as_ref().map(read_secret).transpose()?,
            },
            SinkKind::Command => Target::Command {
                argv: self.argv.clone(),
            },
        })
    }

    fn retry(&self) -> Retry {
        Retry {
            attempts: self.attempts.max(1),
            first_backoff: Duration::from_millis(self.backoff_ms),
            max_backoff: Duration::from_millis(self.max_backoff_ms.max(self.backoff_ms)),
            timeout: Duration::from_millis(self.timeout_ms),
        }
    }
}

/// A secret file's content, trimmed; empty is refused.
fn read_secret(f: &PathBuf) -> Result<String, String> {
    let s = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
    let s = s.trim().to_string();
    if s.is_empty() {
        return Err(format!("{} is empty", f.display()));
    }
    Ok(s)
}

/// The running sinks, by rule name: the driver's `NoticePort`.
#[derive(Clone)]
pub struct Sinks {
    by_rule: BTreeMap<String, Arc<Queue<Body>>>,
    metrics: Arc<Metrics>,
}

impl Sinks {
    /// Starts one task per entry (on the current tokio runtime).
    pub fn start(sections: &[NotifySection], metrics: Arc<Metrics>) -> Result<Sinks, String> {
        let mut by_rule = BTreeMap::new();
        if sections.is_empty() {
            return Ok(Sinks { by_rule, metrics });
        }
        let client = http::Client::new().map_err(|e| format!("the notification client: {e}"))?;
        for s in sections {
            let target = s.target()?;
            let queue = Arc::new(Queue::new(s.queue));
            let (q, client, retry) = (queue.clone(), client.clone(), s.retry());
            let (rule, m) = (s.name.clone(), metrics.clone());
            let clock = crate::clock::TokioClock::new();
            tokio::spawn(async move {
                let unix_ms = || crate::ports::Clock::unix_ms(&clock);
                loop {
                    let body = q.pop().await;
                    let result = match send::deliver(&client, &target, &body, retry, unix_ms).await
                    {
                        Ok(attempts) => {
                            tracing::info!(%rule, delivery = %body.delivery, attempts, "notice sent");
                            "sent"
                        }
                        Err(why) => {
                            tracing::warn!(%rule, delivery = %body.delivery, %why, "a notice could not be sent");
                            "failed"
                        }
                    };
                    m.inc(Counter::Notices, &[("rule", &rule), ("result", result)]);
                }
            });
            by_rule.insert(s.name.clone(), queue);
        }
        Ok(Sinks { by_rule, metrics })
    }
}

impl crate::ports::NoticePort for Sinks {
    fn notify(&mut self, notice: Notice, unix_ms: u64) {
        match self.by_rule.get(&notice.rule) {
            Some(q) => {
                // Full: a raise or reminder goes before a resolve, so no one is left believing a
                // cleared need still waits.
                let expendable = |b: &Body| b.phase != fleet_core::notify::NoticePhase::Resolved;
                if q.push(Body::of(notice.clone(), unix_ms), expendable) {
                    tracing::warn!(rule = %notice.rule, "a notice sink's queue is full: its oldest notice was dropped");
                    let labels = [("rule", notice.rule.as_str()), ("result", "dropped")];
                    self.metrics.inc(Counter::Notices, &labels);
                }
            }
            None => tracing::error!(rule = %notice.rule, "a notice for a rule with no sink"),
        }
    }
}

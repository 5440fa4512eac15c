//! Simulated agents that report their own turns, as Claude Code's hooks and Codex's notify
//! program do for a real member (`fleetd member-report`): on one host in two (a seeded
//! choice), three agents in four report. A report may be lost, sent late, sent twice, or
//! followed by a stale re-send of the previous turn's end; some reporting agents draw their
//! answer seconds after they go idle (as Codex did on a loaded host). What each report was told
//! is logged for the oracle (I18).

use crate::agent::{Behaviour, Reporter};
use crate::host::{sim_now, SimHerdr};
use fleet_core::agent_report::{AgentEvent, AgentReport};
use fleet_core::{Principal, Request, Response, SessionId};
use fleetd::Handle;
use std::time::Duration;

/// Whether a new pane's agent reports, and how, from one draw of its host's stream (`None`
/// on a host whose agents do not report).
pub(crate) fn choose(draw: u64, host_reports: bool) -> Option<Reporter> {
    if !host_reports || draw.is_multiple_of(4) {
        return None;
    }
    Some(Reporter {
        names_prompt: (draw >> 8).is_multiple_of(2),
        draws_late: (draw >> 16).is_multiple_of(3),
        seq: 0,
        last_end: None,
    })
}

/// What befalls one report on its way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    /// The reporter was killed, or the gateway did not answer in time: never heard.
    Lost,
    /// Heard this much later (a loaded host, a hook queued behind another).
    Late(Duration),
    /// Sent twice with one number (a retry after a timeout that had landed).
    Twice,
    /// The previous turn's end is sent again, numbered anew (a hook run twice).
    Stale,
}

fn fault(draw: u64) -> Fault {
    match draw % 20 {
        0 | 1 => Fault::Lost,
        2 | 3 => Fault::Late(Duration::from_millis(500 + (draw >> 8) % 5_500)),
        4 => Fault::Twice,
        5 | 6 => Fault::Stale,
        _ => Fault::None,
    }
}

/// One report of `gid`'s agent, numbered from its pane's reporter; `None` when it does not
/// report.
fn numbered(herdr: &SimHerdr, gid: &SessionId, event: AgentEvent) -> Option<AgentReport> {
    let seq = herdr.with_reporter(gid, |r| {
        r.seq += 1;
        r.seq
    })?;
    Some(AgentReport {
        seq,
        session: Some(format!("sess-{gid}")),
        event,
    })
}

async fn send(gateway: &Handle, gid: &SessionId, report: AgentReport) -> Option<String> {
    let req = Request::Report { report };
    match gateway.call(Principal::worker(gid.clone()), req).await {
        Ok(Response::Reported { verdict }) => Some(verdict),
        _ => None,
    }
}

/// The agent took `task`: it says so (Claude Code's `UserPromptSubmit`), unless it reports
/// only its turns' ends (Codex's notify). Now and then a hook run twice sends the previous
/// turn's end again first, numbered anew: it names the previous brief, or (a hook with no
/// prompt) follows no reported start of this one.
pub(crate) async fn started(herdr: &SimHerdr, gateway: &Handle, gid: &SessionId, task: &str) {
    let Some(names_prompt) = herdr.with_reporter(gid, |r| r.names_prompt) else {
        return;
    };
    if fault(herdr.report_draw()) == Fault::Stale {
        let previous = herdr.with_reporter(gid, |r| r.last_end.clone()).flatten();
        if let Some((old_task, old_text)) = previous {
            let event = AgentEvent::TurnEnded {
                prompt: names_prompt.then_some(old_task),
                text: old_text,
            };
            if let Some(report) = numbered(herdr, gid, event) {
                send(gateway, gid, report).await;
            }
        }
    }
    if names_prompt {
        return;
    }
    let event = AgentEvent::TurnStarted {
        prompt: task.to_string(),
    };
    if let Some(report) = numbered(herdr, gid, event) {
        if fault(herdr.report_draw()) != Fault::Lost {
            send(gateway, gid, report).await;
        }
    }
}

/// The event an agent of `behaviour` reports at the end of `task`'s turn, and the text it
/// ended with.
pub(crate) fn end_of(behaviour: Behaviour, task: &str, names_prompt: bool) -> AgentEvent {
    let prompt = names_prompt.then(|| task.to_string());
    match behaviour {
        Behaviour::UsageLimit => AgentEvent::TurnFailed {
            prompt,
            limit: true,
            words: "You've hit your usage limit · resets 4pm".into(),
        },
        _ => AgentEvent::TurnEnded {
            prompt,
            text: answer(task),
        },
    }
}

/// What a simulated agent answers `task` with (its screen shows it behind a `● `).
pub(crate) fn answer(task: &str) -> String {
    format!("finished: {task}")
}

/// The agent ended `task`'s turn: it says so, as its faults let it, and the oracle learns what
/// it was told.
pub(crate) async fn ended(
    herdr: &SimHerdr,
    gateway: &Handle,
    gid: &SessionId,
    task: &str,
    behaviour: Behaviour,
) {
    let Some(names_prompt) = herdr.with_reporter(gid, |r| r.names_prompt) else {
        return;
    };
    let event = end_of(behaviour, task, names_prompt);
    herdr.with_reporter(gid, |r| r.last_end = Some((task.to_string(), answer(task))));
    let Some(report) = numbered(herdr, gid, event) else {
        return;
    };
    let fault = fault(herdr.report_draw());
    match fault {
        Fault::Lost => {}
        // On its own way: the agent itself goes on with its next turn meanwhile.
        Fault::Late(d) => {
            let (herdr, gateway, gid, task) = (
                herdr.clone(),
                gateway.clone(),
                gid.clone(),
                task.to_string(),
            );
            tokio::task::spawn_local(async move {
                tokio::time::sleep(d).await;
                deliver(&herdr, &gateway, &gid, &task, report, fault).await;
            });
        }
        _ => deliver(herdr, gateway, gid, task, report, fault).await,
    }
}

async fn deliver(
    herdr: &SimHerdr,
    gateway: &Handle,
    gid: &SessionId,
    task: &str,
    report: AgentReport,
    fault: Fault,
) {
    let verdict = send(gateway, gid, report.clone()).await;
    if fault == Fault::Twice {
        send(gateway, gid, report).await;
    }
    if let Some(verdict) = verdict {
        let at = u64::try_from(sim_now().as_millis()).unwrap_or(u64::MAX);
        herdr.log.borrow_mut().reported_ends.push(ReportedEnd {
            gid: gid.clone(),
            task: task.to_string(),
            verdict,
            prompt: !matches!(fault, Fault::Late(_)),
            at,
        });
    }
}

/// A turn's end its agent reported, and what the gateway said of it.
#[derive(Clone, Debug)]
pub struct ReportedEnd {
    pub gid: SessionId,
    pub task: String,
    /// The gateway's verdict (`ended`, `foreign`, `stale`, …).
    pub verdict: String,
    /// Sent as the turn ended (not late).
    pub prompt: bool,
    pub at: u64,
}

/// How long after going idle an agent that draws late shows its answer (only a silent one:
/// its answer is what its screen is read for), or `None` when it draws at once.
pub(crate) fn draws_late(
    herdr: &SimHerdr,
    gid: &SessionId,
    behaviour: Behaviour,
) -> Option<Duration> {
    if behaviour != Behaviour::CompletesSilently {
        return None;
    }
    herdr
        .with_reporter(gid, |r| r.draws_late)
        .filter(|late| *late)
        .map(|_| Duration::from_millis(1_000 + herdr.report_draw() % 4_000))
}

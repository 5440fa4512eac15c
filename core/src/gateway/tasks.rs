//! The hub's side of the task lists (`crate::tasks`): a lead's task calls; each ready task
//! started as its lead's own `wait:false` send (the same admission, audit and delegation as
//! the lead's `fleet_send`); its delegation's ending fed back; and every changed list kept
//! durably before what the change leads to is carried out.

use super::delegation::Side;
use super::{Gateway, Once};
use crate::authz::Principal;
use crate::ids::{CallId, MsgId, SessionId, TicketId};
use crate::io::{CallError, Event, Output, Request, Response};
use crate::outcome::Outcome;
use crate::tasks::{Refusal, RunAt, TaskError, TaskId};
use crate::time::{Duration, Instant};
use std::collections::BTreeMap;

/// How long a start put off (its assignee busy or not in the roster, the broker down) waits
/// before the next try.
const RETRY: Duration = Duration::from_millis(2_000);

/// The calls the gateway makes itself for its tasks, and their answers.
#[derive(Debug, Default)]
pub(super) struct OwnCalls {
    next: u64,
    answers: BTreeMap<CallId, Response>,
}

impl OwnCalls {
    fn call(&mut self) -> CallId {
        self.next += 1;
        CallId(CallId::OWN + self.next)
    }

    pub(super) fn answered(&mut self, call: CallId, response: Response) {
        self.answers.insert(call, response);
    }
}

impl Gateway {
    /// A lead's task call: its own list only, keyed by its session.
    pub(super) fn on_task_call(
        &mut self,
        now: Instant,
        call: CallId,
        caller: &Principal,
        request: Request,
    ) {
        let Some(lead) = caller.session.clone() else {
            return self.respond(call, Response::Error(CallError::NoSession));
        };
        let unix = self.unix_now();
        // A change is answered as it stands once what it lets start has started.
        let changed = match request {
            Request::TaskAdd { task } if !self.may_be_assigned(now, &task.assignee) => {
                Err(CallError::InvalidArgument {
                    reason: format!(
                        "{} is not a member: a task's assignee is a member",
                        task.assignee
                    ),
                })
            }
            Request::TaskAdd { task } => self
                .timeout(task.timeout_ms, self.cfg.send_timeout_ms)
                .and_then(|_| {
                    self.tasks
                        .add(caller, &lead, task, unix)
                        .map(Some)
                        .map_err(task_error)
                }),
            Request::Tasks { id } => Ok(id),
            Request::TaskReview { id, decision } => self
                .tasks
                .review(&lead, id, decision, unix)
                .map(|()| Some(id))
                .map_err(task_error),
            _ => return,
        };
        self.keep_tasks(None);
        self.run_tasks(now);
        let result = changed.and_then(|one| self.tasks.views(&lead, one).map_err(task_error));
        let response = match result {
            Ok(tasks) => Response::Tasks { tasks },
            Err(e) => Response::Error(e),
        };
        self.respond(call, response);
    }

    /// After every input: start what may start, and look again when something waits.
    pub(super) fn run_tasks(&mut self, now: Instant) {
        if self.tasks.is_empty() {
            return;
        }
        for (lead, id) in self.tasks.startable() {
            self.start_task(now, &lead, id);
        }
        let unix = self.unix_now();
        let mut next = self.tasks.has_ready().then_some(now + RETRY);
        if let Some(due) = self.tasks.next_expiry() {
            let at = now + Duration::from_millis(due.saturating_sub(unix));
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        if let Some(at) = next {
            self.fx.set_earlier(Once::Tasks, at);
        }
    }

    pub(super) fn on_tasks_timer(&mut self) {
        let unix = self.unix_now();
        self.tasks.expire(unix);
        self.tasks.stir();
        self.keep_tasks(None);
    }

    /// Starts `lead`'s task `id` as the lead's own `wait:false` send; the list, with the
    /// task running on its brief's msgId, is kept before the brief goes anywhere, so a restart
    /// can never start it twice.
    fn start_task(&mut self, now: Instant, lead: &SessionId, id: TaskId) {
        let (Some(t), Some(list)) = (self.tasks.task(lead, id), self.tasks.list(lead)) else {
            return;
        };
        let (target, content, timeout_ms) = (t.assignee.clone(), t.brief.clone(), t.timeout_ms);
        let owner = list.owner.clone();
        let unix = self.unix_now();
        // A list runs only while its lead is served here, as the caller that added its tasks
        // (after a restart: once the lead is attached again); never into a lead's pane.
        if self.local_kind(lead).is_none() {
            let why = "its lead is not attached to this gateway: its tasks wait for it";
            return self.put_off(lead, id, Refusal::Later(why.into()), unix);
        }
        if !self.may_be_assigned(now, &target) {
            let why = format!("{target} is not a member: a task's assignee is a member");
            return self.put_off(lead, id, Refusal::Never(why), unix);
        }
        let call = self.own_calls.call();
        #[cfg(any(debug_assertions, feature = "invariants"))]
        self.open_calls.asked(call);
        let mark = self.fx.mark();
        self.own_send(now, call, owner, target, content, timeout_ms);
        match self.own_calls.answers.remove(&call) {
            Some(Response::Ticket(view)) => {
                let opened = self
                    .delegations
                    .get(&view.ticket)
                    .map(|d| (d.msg, matches!(d.side, Side::Sender { .. })));
                let timeout = timeout_ms.unwrap_or(self.cfg.send_timeout_ms);
                match opened {
                    Some((msg, remote)) => {
                        let run = RunAt {
                            unix,
                            deadline_unix: unix.saturating_add(timeout),
                            remote,
                        };
                        self.tasks.started(lead, id, view.ticket, msg, run);
                    }
                    // Ended within its own call (nothing does today): its ending was not ours.
                    None => self.tasks.not_started(
                        lead,
                        id,
                        Refusal::Later("its delegation ended as it opened".into()),
                        unix,
                    ),
                }
            }
            Some(Response::Outcome { outcome, body, .. }) => {
                let why = body.unwrap_or_else(|| outcome.to_string());
                self.tasks.not_started(lead, id, Refusal::Later(why), unix)
            }
            Some(Response::Error(e)) => self.tasks.not_started(lead, id, refusal(&e), unix),
            Some(other) => self.tasks.not_started(
                lead,
                id,
                Refusal::Never(format!("unexpected answer to its start: {other}")),
                unix,
            ),
            None => self.tasks.not_started(
                lead,
                id,
                Refusal::Later("its start was not answered".into()),
                unix,
            ),
        }
        self.keep_tasks(Some(mark));
    }

    fn put_off(&mut self, lead: &SessionId, id: TaskId, refusal: Refusal, unix: u64) {
        self.tasks.not_started(lead, id, refusal, unix);
        self.keep_tasks(None);
    }

    /// Whether `gid` may run a task: a member, or no entity known yet (a member may be
    /// spawned later; the send path refuses one that never comes). Never a lead or a gateway.
    fn may_be_assigned(&self, now: Instant, gid: &SessionId) -> bool {
        matches!(
            self.kind_of(now, gid),
            None | Some(crate::roster::EntityKind::Member)
        )
    }

    /// The delegation on `msg` ended; `Some` when it was a task's (its list kept).
    pub(super) fn task_ended(
        &mut self,
        msg: MsgId,
        outcome: Outcome,
        body: &mut Option<String>,
    ) -> bool {
        if self.tasks.running_on(msg).is_none() {
            return false;
        }
        let unix = self.unix_now();
        self.tasks.ended(msg, outcome, body.take(), unix);
        self.keep_tasks(None);
        true
    }

    /// A task's delegation resumed on an answer's message: its list is kept at `mark`, ahead
    /// of the answer's publish, so a restart matches the result to its task.
    pub(super) fn task_msg_moved(&mut self, ticket: TicketId, msg: MsgId, mark: usize) {
        self.tasks.msg_moved(ticket, msg);
        self.keep_tasks(Some(mark));
    }

    pub(super) fn restore_tasks(&mut self, lists: Vec<crate::tasks::TaskList>) {
        let unix = self.unix_now();
        self.tasks.restore(lists, unix);
        self.keep_tasks(None);
    }

    /// Every list changed since the last keep goes out whole (at `mark` when given: before
    /// the outputs the change leads to), then each task's move as an event.
    fn keep_tasks(&mut self, mark: Option<usize>) {
        for list in self.tasks.take_dirty() {
            match mark {
                Some(m) => self.fx.emit_at(m, Output::KeepTasks(list)),
                None => self.fx.emit(Output::KeepTasks(list)),
            }
        }
        for (lead, task, state) in self.tasks.take_moved() {
            self.event(Event::Task { lead, task, state });
        }
    }
}

impl Gateway {
    /// The lists keep their own rules; a task running in this process has its delegation
    /// open here, on its latest message.
    #[cfg(any(debug_assertions, feature = "invariants"))]
    pub(super) fn check_tasks(&self) -> Result<(), String> {
        self.tasks.check()?;
        for (lead, t, run) in self.tasks.running() {
            let Some(ticket) = run.ticket else { continue };
            let Some(d) = self.delegations.get(&ticket) else {
                return Err(format!(
                    "{lead}'s {} runs on {ticket}, which is not open",
                    t.id
                ));
            };
            if run.msgs.last() != Some(&d.msg) {
                return Err(format!(
                    "{lead}'s {} waits on {:?}, its delegation on {}",
                    t.id,
                    run.msgs.last(),
                    d.msg
                ));
            }
        }
        Ok(())
    }
}

fn task_error(e: TaskError) -> CallError {
    match e {
        TaskError::Unknown(task) => CallError::UnknownTask { task },
        e => CallError::InvalidArgument {
            reason: e.to_string(),
        },
    }
}

/// Whether a refused start is worth another try.
fn refusal(e: &CallError) -> Refusal {
    match e {
        CallError::Denied { .. } | CallError::NoSession | CallError::InvalidArgument { .. } => {
            Refusal::Never(e.to_string())
        }
        _ => Refusal::Later(e.to_string()),
    }
}

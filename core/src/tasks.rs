//! A lead's durable task list: tasks with dependencies and an assignee, each started as a
//! delegation once every dependency is done and its assignee runs nothing else of the list,
//! and ended by the lead's own review. Pure: the gateway starts the delegations, feeds their
//! endings back, and keeps each changed list durably (`Output::KeepTasks`) before it carries
//! out what the change leads to.

use crate::authz::Principal;
use crate::ids::{MsgId, SessionId, TicketId};
use crate::outcome::Outcome;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

#[cfg(test)]
mod tests;

/// Tasks one lead may keep (finished ones count; the oldest finished one nothing waits on
/// makes room for a new task).
pub const MAX_TASKS: usize = 256;
/// Dependencies one task may name.
pub const MAX_DEPS: usize = 32;
/// A title's length, in bytes.
pub const MAX_TITLE: usize = 200;
/// The briefs and results one lead's list may hold, in bytes: the list is written whole on
/// every change, so its size is bounded, not its tasks' (the oldest finished tasks nothing
/// needs make room).
pub const MAX_LIST_BYTES: usize = 16 << 20;

/// A task's number in its lead's list (`t-3` when shown to a person).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(pub u32);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t-{}", self.0)
    }
}

/// The states a lead sees, in the order a task goes through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    /// A dependency is not done yet.
    Pending,
    /// Every dependency is done; it starts when its assignee is free.
    Ready,
    /// Its delegation is open.
    Running,
    /// Its delegation ended with a result; the lead decides.
    Review,
    Done,
    Failed,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Ready => "ready",
            TaskState::Running => "running",
            TaskState::Review => "review",
            TaskState::Done => "done",
            TaskState::Failed => "failed",
        }
    }

    fn finished(self) -> bool {
        matches!(self, TaskState::Done | TaskState::Failed)
    }
}

/// The lead's review of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Accept a result in review: its dependents may start.
    Done,
    /// Give a task up (pending, ready or in review); its dependents wait on.
    Failed,
    /// Run a task in review, or a failed one, again.
    Retry,
}

/// A task as a lead adds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTask {
    pub title: String,
    /// What is typed into the assignee's pane when the task starts.
    pub brief: String,
    /// The member that runs it, anywhere in the fleet.
    pub assignee: SessionId,
    #[serde(default)]
    pub deps: Vec<TaskId>,
    /// Its delegation's bound (the gateway's send timeout when absent).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// How a task's delegation ended with something to review or keep.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskResult {
    pub outcome: Outcome,
    pub body: Option<String>,
}

/// A task's open delegation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The delegation's ticket in this process; a restart leaves none (the result is matched
    /// by its message then).
    #[serde(skip)]
    pub ticket: Option<TicketId>,
    /// The brief's msgId, and each answer's after it: the result answers the last.
    pub msgs: Vec<MsgId>,
    /// Its assignee is on another host (its result comes back through the broker, and so
    /// outlives a restart of this gateway).
    pub remote: bool,
    pub started_unix_ms: u64,
    pub deadline_unix_ms: u64,
}

/// Where a task is; each stage carries only what it has.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Stage {
    Pending,
    /// `waiting` says why a start was put off (the assignee busy, not in the roster…).
    Ready {
        #[serde(default)]
        waiting: Option<String>,
    },
    Running(Run),
    Review(TaskResult),
    Done(TaskResult),
    Failed {
        why: String,
        #[serde(default)]
        result: Option<TaskResult>,
    },
}

impl Stage {
    pub fn state(&self) -> TaskState {
        match self {
            Stage::Pending => TaskState::Pending,
            Stage::Ready { .. } => TaskState::Ready,
            Stage::Running(_) => TaskState::Running,
            Stage::Review(_) => TaskState::Review,
            Stage::Done(_) => TaskState::Done,
            Stage::Failed { .. } => TaskState::Failed,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    pub title: String,
    pub brief: String,
    pub assignee: SessionId,
    pub deps: Vec<TaskId>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    pub stage: Stage,
    /// Delegations started for it so far.
    pub attempts: u32,
    pub created_unix_ms: u64,
    pub updated_unix_ms: u64,
}

/// One lead's list, as it is kept durably.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskList {
    pub lead: SessionId,
    /// Who added its tasks: their delegations are started as this caller.
    pub owner: Principal,
    pub next: u32,
    pub tasks: BTreeMap<TaskId, Task>,
}

/// A task as a lead reads it. The list leaves out the brief and the result's text; one task
/// read by its id carries them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    pub id: TaskId,
    pub title: String,
    pub assignee: SessionId,
    pub deps: Vec<TaskId>,
    pub state: TaskState,
    pub attempts: u32,
    /// Why a ready task has not started, or why a task failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The open delegation's ticket (`fleet_poll` shows its question while it asks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ticket: Option<TicketId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub brief: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    pub created_unix_ms: u64,
    pub updated_unix_ms: u64,
}

/// Why a task call was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    #[error("{0}")]
    Invalid(String),
    #[error("no task {0} in this lead's list")]
    Unknown(TaskId),
    #[error("{id} is {state}: {decision:?} needs {needs}")]
    NotNow {
        id: TaskId,
        state: &'static str,
        decision: Decision,
        needs: &'static str,
    },
    #[error("this lead's list holds {MAX_TASKS} tasks and none finished is free to go")]
    Full,
}

/// A start the gateway could not make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Worth another try (the assignee busy or not in the roster, the broker down).
    Later(String),
    /// Never (the caller may not delegate to it): the task fails.
    Never(String),
}

/// What an ending did to its task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    pub lead: SessionId,
    pub id: TaskId,
    pub state: TaskState,
}

/// Every lead's list on this gateway.
#[derive(Clone, Debug, Default)]
pub struct Tasks {
    lists: BTreeMap<SessionId, TaskList>,
    /// Each running task by its delegation's current message.
    by_msg: BTreeMap<MsgId, (SessionId, TaskId)>,
    /// Lists changed since the gateway last kept them.
    dirty: BTreeSet<SessionId>,
    /// Each task's moves since the gateway last read them (its trace).
    moved: Vec<(SessionId, TaskId, TaskState)>,
    /// Something changed that may let a ready task start.
    stirred: bool,
    /// Planted for `fleet-sim prove`: a task is ready as soon as it is added.
    deps_ignored: bool,
}

impl Tasks {
    pub fn planted(mut self, deps_ignored: bool) -> Self {
        self.deps_ignored = deps_ignored;
        self
    }

    pub fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }

    pub fn list(&self, lead: &SessionId) -> Option<&TaskList> {
        self.lists.get(lead)
    }

    pub fn lists(&self) -> impl Iterator<Item = &TaskList> {
        self.lists.values()
    }

    /// Adds `new` to `lead`'s list (made on its first task, owned by `owner`).
    pub fn add(
        &mut self,
        owner: &Principal,
        lead: &SessionId,
        new: NewTask,
        unix: u64,
    ) -> Result<TaskId, TaskError> {
        let title = new.title.trim();
        if title.is_empty() || new.brief.trim().is_empty() {
            return Err(TaskError::Invalid(
                "a task needs a title and a brief, neither blank".into(),
            ));
        }
        if title.len() > MAX_TITLE || title.chars().any(char::is_control) {
            return Err(TaskError::Invalid(format!(
                "a title is one line of at most {MAX_TITLE} bytes"
            )));
        }
        if &new.assignee == lead {
            return Err(TaskError::Invalid(
                "a lead cannot assign a task to its own session".into(),
            ));
        }
        if new.deps.len() > MAX_DEPS {
            return Err(TaskError::Invalid(format!(
                "a task names at most {MAX_DEPS} dependencies"
            )));
        }
        if let (None, Some(d)) = (self.lists.get(lead), new.deps.first()) {
            return Err(TaskError::Unknown(*d));
        }
        let list = self.lists.entry(lead.clone()).or_insert_with(|| TaskList {
            lead: lead.clone(),
            owner: owner.clone(),
            next: 1,
            tasks: BTreeMap::new(),
        });
        let mut deps: Vec<TaskId> = Vec::with_capacity(new.deps.len());
        for d in &new.deps {
            // Only tasks already in the list: a list is acyclic by construction.
            if !list.tasks.contains_key(d) {
                return Err(TaskError::Unknown(*d));
            }
            if !deps.contains(d) {
                deps.push(*d);
            }
        }
        if list.tasks.len() >= MAX_TASKS && !make_room(list, &deps) {
            return Err(TaskError::Full);
        }
        while list_bytes(list) + new.brief.len() > MAX_LIST_BYTES {
            if !make_room(list, &deps) {
                return Err(TaskError::Full);
            }
        }
        let id = TaskId(list.next);
        if list.tasks.contains_key(&id) || list.next == u32::MAX {
            return Err(TaskError::Full);
        }
        list.owner = owner.clone();
        list.next = list.next.saturating_add(1);
        let mut task = Task {
            id,
            title: title.to_string(),
            brief: new.brief,
            assignee: new.assignee,
            deps,
            timeout_ms: new.timeout_ms,
            stage: Stage::Pending,
            attempts: 0,
            created_unix_ms: unix,
            updated_unix_ms: unix,
        };
        if self.deps_ignored || deps_done(&list.tasks, &task.deps) {
            task.stage = Stage::Ready { waiting: None };
            self.stirred = true;
        }
        self.moved.push((lead.clone(), id, task.stage.state()));
        list.tasks.insert(id, task);
        self.dirty.insert(lead.clone());
        Ok(id)
    }

    /// Ready tasks that may start now: per list, the first ready task of each assignee that
    /// runs nothing else of that list. Empty unless something changed since the last call
    /// (`stir` to ask again).
    pub fn startable(&mut self) -> Vec<(SessionId, TaskId)> {
        if !std::mem::take(&mut self.stirred) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (lead, list) in &self.lists {
            let mut busy: BTreeSet<&SessionId> = list
                .tasks
                .values()
                .filter(|t| matches!(t.stage, Stage::Running(_)))
                .map(|t| &t.assignee)
                .collect();
            for t in list.tasks.values() {
                if matches!(t.stage, Stage::Ready { .. }) && busy.insert(&t.assignee) {
                    out.push((lead.clone(), t.id));
                }
            }
        }
        out
    }

    /// Look for startable tasks again (a retry timer, the roster changed).
    pub fn stir(&mut self) {
        self.stirred = true;
    }

    pub fn has_ready(&self) -> bool {
        self.lists.values().any(|l| {
            l.tasks
                .values()
                .any(|t| matches!(t.stage, Stage::Ready { .. }))
        })
    }

    /// Every running task, with its lead and its delegation.
    pub fn running(&self) -> impl Iterator<Item = (&SessionId, &Task, &Run)> {
        self.lists.iter().flat_map(|(lead, l)| {
            l.tasks.values().filter_map(move |t| match &t.stage {
                Stage::Running(r) => Some((lead, t, r)),
                _ => None,
            })
        })
    }

    pub fn task(&self, lead: &SessionId, id: TaskId) -> Option<&Task> {
        self.lists.get(lead)?.tasks.get(&id)
    }

    /// Its delegation is open as `ticket`, its brief `msg`.
    pub fn started(
        &mut self,
        lead: &SessionId,
        id: TaskId,
        ticket: TicketId,
        msg: MsgId,
        run: RunAt,
    ) {
        let Some(t) = self.task_mut(lead, id) else {
            return;
        };
        if !matches!(t.stage, Stage::Ready { .. }) {
            return;
        }
        t.attempts = t.attempts.saturating_add(1);
        t.updated_unix_ms = run.unix;
        t.stage = Stage::Running(Run {
            ticket: Some(ticket),
            msgs: vec![msg],
            remote: run.remote,
            started_unix_ms: run.unix,
            deadline_unix_ms: run.deadline_unix,
        });
        self.by_msg.insert(msg, (lead.clone(), id));
        self.dirty.insert(lead.clone());
        self.moved.push((lead.clone(), id, TaskState::Running));
    }

    /// The gateway would not start it.
    pub fn not_started(&mut self, lead: &SessionId, id: TaskId, refusal: Refusal, unix: u64) {
        let Some(t) = self.task_mut(lead, id) else {
            return;
        };
        if !matches!(t.stage, Stage::Ready { .. }) {
            return;
        }
        let stage = match refusal {
            Refusal::Later(why) => Stage::Ready { waiting: Some(why) },
            Refusal::Never(why) => Stage::Failed { why, result: None },
        };
        if t.stage != stage {
            let failed = matches!(stage, Stage::Failed { .. });
            t.stage = stage;
            t.updated_unix_ms = unix;
            self.dirty.insert(lead.clone());
            if failed {
                self.moved.push((lead.clone(), id, TaskState::Failed));
            }
        }
    }

    /// The running task whose delegation's current message is `msg`.
    pub fn running_on(&self, msg: MsgId) -> Option<(SessionId, TaskId)> {
        self.by_msg.get(&msg).cloned()
    }

    /// The running task whose delegation is `ticket`.
    pub fn of_ticket(&self, ticket: TicketId) -> Option<(SessionId, TaskId)> {
        self.by_msg.values().find_map(|(lead, id)| {
            let t = self.task(lead, *id)?;
            match &t.stage {
                Stage::Running(r) if r.ticket == Some(ticket) => Some((lead.clone(), *id)),
                _ => None,
            }
        })
    }

    /// An answer resumed the task's delegation on a new message: its result answers that.
    pub fn msg_moved(&mut self, ticket: TicketId, msg: MsgId) {
        let Some((lead, id)) = self.of_ticket(ticket) else {
            return;
        };
        if let Some(Stage::Running(r)) = self.task_mut(&lead, id).map(|t| &mut t.stage) {
            r.msgs.push(msg);
            self.by_msg.insert(msg, (lead.clone(), id));
            self.dirty.insert(lead);
        }
    }

    /// The delegation of the task running on `msg` ended: a result goes to review, anything
    /// else fails it saying why.
    pub fn ended(
        &mut self,
        msg: MsgId,
        outcome: Outcome,
        body: Option<String>,
        unix: u64,
    ) -> Option<Ended> {
        let (lead, id) = self.by_msg.get(&msg).cloned()?;
        let t = self.task_mut(&lead, id)?;
        let Stage::Running(run) = &t.stage else {
            return None;
        };
        let msgs = run.msgs.clone();
        let result = TaskResult { outcome, body };
        t.stage = match outcome {
            Outcome::Replied | Outcome::CompletedUnreplied => Stage::Review(result),
            _ => Stage::Failed {
                why: format!("its delegation ended {outcome}"),
                result: Some(result),
            },
        };
        t.updated_unix_ms = unix;
        let state = t.stage.state();
        for m in msgs {
            self.by_msg.remove(&m);
        }
        self.dirty.insert(lead.clone());
        self.moved.push((lead.clone(), id, state));
        self.stirred = true;
        Some(Ended { lead, id, state })
    }

    /// The lead's decision on task `id`.
    pub fn review(
        &mut self,
        lead: &SessionId,
        id: TaskId,
        decision: Decision,
        unix: u64,
    ) -> Result<(), TaskError> {
        let list = self.lists.get_mut(lead).ok_or(TaskError::Unknown(id))?;
        let deps_ok = {
            let t = list.tasks.get(&id).ok_or(TaskError::Unknown(id))?;
            deps_done(&list.tasks, &t.deps)
        };
        let t = list.tasks.get_mut(&id).ok_or(TaskError::Unknown(id))?;
        let state = t.stage.state();
        let refuse = |needs| TaskError::NotNow {
            id,
            state: state.as_str(),
            decision,
            needs,
        };
        t.stage = match (decision, std::mem::replace(&mut t.stage, Stage::Pending)) {
            (Decision::Done, Stage::Review(r)) => Stage::Done(r),
            (Decision::Failed, Stage::Review(r)) => Stage::Failed {
                why: "failed by its lead's review".into(),
                result: Some(r),
            },
            (Decision::Failed, Stage::Pending | Stage::Ready { .. }) => Stage::Failed {
                why: "given up by its lead".into(),
                result: None,
            },
            (Decision::Retry, Stage::Review(_) | Stage::Failed { .. }) if deps_ok => {
                Stage::Ready { waiting: None }
            }
            (Decision::Retry, Stage::Review(_) | Stage::Failed { .. }) => Stage::Pending,
            (_, old) => {
                t.stage = old;
                return Err(refuse(match decision {
                    Decision::Done => "a task in review",
                    Decision::Failed => "a task pending, ready or in review",
                    Decision::Retry => "a task in review or failed",
                }));
            }
        };
        t.updated_unix_ms = unix;
        self.moved.push((lead.clone(), id, t.stage.state()));
        if decision == Decision::Done {
            for p in promote(list, unix) {
                self.moved.push((lead.clone(), p, TaskState::Ready));
            }
        }
        self.dirty.insert(lead.clone());
        self.stirred = true;
        Ok(())
    }

    /// The lists kept before this process started. A task that ran on this host lost its turn
    /// with the restart and fails, saying so; one that ran on another host waits for its
    /// result by its message, until its deadline.
    ///
    /// What was kept is made to keep the list's rules first (`normalize`): a file damaged or
    /// edited by hand is believed only as far as it is consistent.
    pub fn restore(&mut self, lists: Vec<TaskList>, unix: u64) -> usize {
        let mut n = 0;
        for list in lists {
            if self.lists.contains_key(&list.lead) {
                continue;
            }
            let mut list = self.normalize(list, unix);
            for t in list.tasks.values_mut() {
                n += 1;
                if let Stage::Running(r) = &mut t.stage {
                    r.ticket = None;
                    if !r.remote {
                        t.stage = Stage::Failed {
                            why: "its gateway restarted while the turn ran on this host: the \
                                  result is lost (retry it)"
                                .into(),
                            result: None,
                        };
                        t.updated_unix_ms = unix;
                        self.dirty.insert(list.lead.clone());
                        self.moved
                            .push((list.lead.clone(), t.id, TaskState::Failed));
                    } else {
                        for m in &r.msgs {
                            self.by_msg.insert(*m, (list.lead.clone(), t.id));
                        }
                    }
                }
            }
            self.lists.insert(list.lead.clone(), list);
        }
        self.stirred = true;
        n
    }

    /// A kept list as the rules allow it: owned by its lead, each task under its own id, `next`
    /// past them all, dependencies only on earlier tasks, each state consistent with them, one
    /// running task per assignee, each running on messages of its own. A task that breaks a
    /// rule it cannot be brought back to fails, saying so.
    fn normalize(&mut self, mut list: TaskList, unix: u64) -> TaskList {
        list.owner.session = Some(list.lead.clone());
        let tasks = std::mem::take(&mut list.tasks);
        list.tasks = tasks.into_values().map(|t| (t.id, t)).collect();
        let last = list.tasks.keys().next_back().map_or(0, |k| k.0);
        list.next = list.next.max(last.saturating_add(1));
        let ids: Vec<TaskId> = list.tasks.keys().copied().collect();
        let mut running: BTreeSet<SessionId> = BTreeSet::new();
        let mut msgs: BTreeSet<MsgId> = BTreeSet::new();
        for id in ids {
            let Some(t) = list.tasks.get_mut(&id) else {
                continue;
            };
            t.deps.retain(|d| *d < id);
            t.deps.truncate(MAX_DEPS);
            let deps = t.deps.clone();
            let done = deps_done(&list.tasks, &deps);
            let Some(t) = list.tasks.get_mut(&id) else {
                continue;
            };
            let broken = match &t.stage {
                Stage::Pending if done => {
                    t.stage = Stage::Ready { waiting: None };
                    None
                }
                Stage::Ready { .. } if !done => {
                    t.stage = Stage::Pending;
                    None
                }
                Stage::Running(_) | Stage::Review(_) | Stage::Done(_) if !done => {
                    Some("kept past a dependency that is not done")
                }
                Stage::Running(r) if r.msgs.is_empty() => Some("kept running on no message"),
                Stage::Running(r)
                    if r.msgs
                        .iter()
                        .any(|m| msgs.contains(m) || self.by_msg.contains_key(m)) =>
                {
                    Some("kept running on another task's message")
                }
                Stage::Running(_) if running.contains(&t.assignee) => {
                    Some("kept running beside another task of its assignee")
                }
                _ => None,
            };
            if let Some(why) = broken {
                t.stage = Stage::Failed {
                    why: format!("{why}: the kept list was not consistent"),
                    result: None,
                };
                t.updated_unix_ms = unix;
                self.dirty.insert(list.lead.clone());
                self.moved.push((list.lead.clone(), id, TaskState::Failed));
            } else if let Stage::Running(r) = &t.stage {
                running.insert(t.assignee.clone());
                msgs.extend(r.msgs.iter().copied());
            }
        }
        list
    }

    /// A list taken as it is, for a test of what `check` catches.
    #[cfg(test)]
    fn insert_raw(&mut self, list: TaskList) {
        self.lists.insert(list.lead.clone(), list);
    }

    /// Tasks restored running with no delegation here whose deadline passed: failed.
    pub fn expire(&mut self, unix: u64) {
        let due: Vec<MsgId> = self
            .by_msg
            .iter()
            .filter(|(_, (lead, id))| {
                self.task(lead, *id).is_some_and(|t| {
                    matches!(&t.stage, Stage::Running(r) if r.ticket.is_none() && r.deadline_unix_ms <= unix)
                })
            })
            .map(|(m, _)| *m)
            .collect();
        for m in due {
            let Some((lead, id)) = self.by_msg.get(&m).cloned() else {
                continue;
            };
            let Some(t) = self.task_mut(&lead, id) else {
                continue;
            };
            let Stage::Running(run) = &t.stage else {
                continue;
            };
            let msgs = run.msgs.clone();
            t.stage = Stage::Failed {
                why: "no result by its deadline (its gateway restarted while it ran)".into(),
                result: None,
            };
            t.updated_unix_ms = unix;
            for m in msgs {
                self.by_msg.remove(&m);
            }
            self.moved.push((lead.clone(), id, TaskState::Failed));
            self.dirty.insert(lead);
        }
    }

    /// The earliest deadline of a task restored running, if any.
    pub fn next_expiry(&self) -> Option<u64> {
        self.by_msg
            .values()
            .filter_map(|(lead, id)| match &self.task(lead, *id)?.stage {
                Stage::Running(r) if r.ticket.is_none() => Some(r.deadline_unix_ms),
                _ => None,
            })
            .min()
    }

    /// Each task's moves since the last call, in order.
    pub fn take_moved(&mut self) -> Vec<(SessionId, TaskId, TaskState)> {
        std::mem::take(&mut self.moved)
    }

    /// The lists changed since the last call.
    pub fn take_dirty(&mut self) -> Vec<TaskList> {
        let dirty = std::mem::take(&mut self.dirty);
        dirty
            .into_iter()
            .filter_map(|l| self.lists.get(&l).cloned())
            .collect()
    }

    /// `lead`'s tasks as it reads them: all without texts, or one with them.
    pub fn views(&self, lead: &SessionId, one: Option<TaskId>) -> Result<Vec<TaskView>, TaskError> {
        let Some(list) = self.lists.get(lead) else {
            return match one {
                Some(id) => Err(TaskError::Unknown(id)),
                None => Ok(Vec::new()),
            };
        };
        match one {
            Some(id) => {
                let t = list.tasks.get(&id).ok_or(TaskError::Unknown(id))?;
                Ok(vec![view(t, true)])
            }
            None => Ok(list.tasks.values().map(|t| view(t, false)).collect()),
        }
    }

    /// Tasks by state across every list (`fleet_tasks{state}`).
    pub fn counts(&self) -> BTreeMap<TaskState, usize> {
        let mut out = BTreeMap::new();
        for t in self.lists.values().flat_map(|l| l.tasks.values()) {
            *out.entry(t.stage.state()).or_insert(0) += 1;
        }
        out
    }

    fn task_mut(&mut self, lead: &SessionId, id: TaskId) -> Option<&mut Task> {
        self.lists.get_mut(lead)?.tasks.get_mut(&id)
    }

    /// The rules every step keeps: a task past pending has every dependency done (unless
    /// the lead gave it up before), a pending one does not; one running task per assignee
    /// per list; every running task indexed by its messages, and nothing else.
    pub fn check(&self) -> Result<(), String> {
        let mut indexed = 0;
        for (lead, list) in &self.lists {
            let mut running: BTreeSet<&SessionId> = BTreeSet::new();
            for t in list.tasks.values() {
                let done = deps_done(&list.tasks, &t.deps);
                match &t.stage {
                    Stage::Pending if done && !self.deps_ignored => {
                        return Err(format!(
                            "{lead}'s {} is pending with every dependency done",
                            t.id
                        ))
                    }
                    Stage::Ready { .. } | Stage::Running(_) | Stage::Review(_) | Stage::Done(_)
                        if !done && !self.deps_ignored =>
                    {
                        return Err(format!(
                            "{lead}'s {} is {} before its dependencies are done",
                            t.id,
                            t.stage.state().as_str()
                        ))
                    }
                    _ => {}
                }
                if let Stage::Running(r) = &t.stage {
                    if !running.insert(&t.assignee) {
                        return Err(format!("{lead} runs two tasks on {}", t.assignee));
                    }
                    for m in &r.msgs {
                        if self.by_msg.get(m) != Some(&(lead.clone(), t.id)) {
                            return Err(format!("{lead}'s {} is not indexed by {m}", t.id));
                        }
                        indexed += 1;
                    }
                }
                if t.deps.iter().any(|d| *d >= t.id) {
                    return Err(format!("{lead}'s {} depends on a later task", t.id));
                }
            }
        }
        if indexed != self.by_msg.len() {
            return Err(format!(
                "{} task messages indexed, {indexed} running",
                self.by_msg.len()
            ));
        }
        Ok(())
    }
}

/// When and where a task's delegation starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunAt {
    pub unix: u64,
    pub deadline_unix: u64,
    pub remote: bool,
}

/// The text a list holds: its briefs and results.
fn list_bytes(list: &TaskList) -> usize {
    list.tasks
        .values()
        .map(|t| {
            let result = match &t.stage {
                Stage::Review(r) | Stage::Done(r) => r.body.as_ref().map_or(0, String::len),
                Stage::Failed {
                    result: Some(r), ..
                } => r.body.as_ref().map_or(0, String::len),
                _ => 0,
            };
            t.brief.len() + result
        })
        .sum()
}

fn deps_done(tasks: &BTreeMap<TaskId, Task>, deps: &[TaskId]) -> bool {
    deps.iter().all(|d| {
        tasks
            .get(d)
            .is_none_or(|t| matches!(t.stage, Stage::Done(_)))
    })
}

/// Pending tasks whose dependencies are all done now become ready (returned).
fn promote(list: &mut TaskList, unix: u64) -> Vec<TaskId> {
    let ready: Vec<TaskId> = list
        .tasks
        .values()
        .filter(|t| matches!(t.stage, Stage::Pending) && deps_done(&list.tasks, &t.deps))
        .map(|t| t.id)
        .collect();
    for id in &ready {
        if let Some(t) = list.tasks.get_mut(id) {
            t.stage = Stage::Ready { waiting: None };
            t.updated_unix_ms = unix;
        }
    }
    ready
}

/// Drops the oldest finished task nothing not done depends on (and `keep` does not name).
fn make_room(list: &mut TaskList, keep: &[TaskId]) -> bool {
    let needed: BTreeSet<TaskId> = list
        .tasks
        .values()
        // A failed task may be retried: what it waits on stays too.
        .filter(|t| t.stage.state() != TaskState::Done)
        .flat_map(|t| t.deps.iter().copied())
        .chain(keep.iter().copied())
        .collect();
    let victim = list
        .tasks
        .values()
        .find(|t| t.stage.state().finished() && !needed.contains(&t.id))
        .map(|t| t.id);
    match victim {
        Some(id) => {
            list.tasks.remove(&id);
            true
        }
        None => false,
    }
}

fn view(t: &Task, texts: bool) -> TaskView {
    let (why, result, ticket) = match &t.stage {
        Stage::Ready { waiting } => (waiting.clone(), None, None),
        Stage::Running(r) => (None, None, r.ticket),
        Stage::Review(r) | Stage::Done(r) => (None, Some(r), None),
        Stage::Failed { why, result } => (Some(why.clone()), result.as_ref(), None),
        Stage::Pending => (None, None, None),
    };
    TaskView {
        id: t.id,
        title: t.title.clone(),
        assignee: t.assignee.clone(),
        deps: t.deps.clone(),
        state: t.stage.state(),
        attempts: t.attempts,
        why,
        outcome: result.map(|r| r.outcome),
        ticket,
        brief: texts.then(|| t.brief.clone()),
        result: if texts {
            result.and_then(|r| r.body.clone())
        } else {
            None
        },
        created_unix_ms: t.created_unix_ms,
        updated_unix_ms: t.updated_unix_ms,
    }
}

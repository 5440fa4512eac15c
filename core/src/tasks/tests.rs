use super::*;

fn lead() -> SessionId {
    SessionId::new("lead-1")
}

fn owner() -> Principal {
    Principal::primary("lead", Some(lead()))
}

fn msg(n: u128) -> MsgId {
    MsgId(uuid::Uuid::from_u128(n))
}

fn ticket(n: u128) -> TicketId {
    TicketId(uuid::Uuid::from_u128(n))
}

fn task(title: &str, assignee: &str, deps: &[u32]) -> NewTask {
    NewTask {
        title: title.into(),
        brief: format!("do {title}"),
        assignee: SessionId::new(assignee),
        deps: deps.iter().map(|d| TaskId(*d)).collect(),
        timeout_ms: None,
    }
}

fn at(unix: u64) -> RunAt {
    RunAt {
        unix,
        deadline_unix: unix + 60_000,
        remote: true,
    }
}

fn state(t: &Tasks, id: u32) -> TaskState {
    t.task(&lead(), TaskId(id))
        .map(|t| t.stage.state())
        .unwrap_or(TaskState::Failed)
}

#[test]
fn a_chain_runs_each_task_only_after_the_one_it_waits_on_is_reviewed_done() {
    let mut t = Tasks::default();
    let a = t.add(&owner(), &lead(), task("a", "m1", &[]), 1).unwrap();
    let b = t
        .add(&owner(), &lead(), task("b", "m2", &[a.0]), 2)
        .unwrap();
    let c = t.add(&owner(), &lead(), task("c", "m1", &[]), 3).unwrap();
    assert_eq!(
        (state(&t, 1), state(&t, 2), state(&t, 3)),
        (TaskState::Ready, TaskState::Pending, TaskState::Ready)
    );
    // a and c share m1: only the first starts.
    assert_eq!(t.startable(), vec![(lead(), a)]);
    t.started(&lead(), a, ticket(1), msg(1), at(10));
    assert_eq!(t.startable(), Vec::new(), "nothing changed since");
    t.check().unwrap();

    let e = t
        .ended(msg(1), Outcome::Replied, Some("a done".into()), 20)
        .unwrap();
    assert_eq!(e.state, TaskState::Review);
    // c may start on m1 now; b still waits for a's review.
    assert_eq!(t.startable(), vec![(lead(), c)]);
    assert_eq!(state(&t, 2), TaskState::Pending);
    t.review(&lead(), a, Decision::Done, 30).unwrap();
    assert_eq!(state(&t, 2), TaskState::Ready);
    assert_eq!(t.startable(), vec![(lead(), b), (lead(), c)]);
    t.check().unwrap();
    let kept = t.take_dirty();
    assert_eq!(kept.len(), 1);
    assert!(t.take_dirty().is_empty());
}

#[test]
fn an_ending_without_a_result_fails_the_task_and_a_retry_runs_it_again() {
    let mut t = Tasks::default();
    let a = t.add(&owner(), &lead(), task("a", "m1", &[]), 1).unwrap();
    let b = t.add(&owner(), &lead(), task("b", "m2", &[1]), 1).unwrap();
    t.startable();
    t.started(&lead(), a, ticket(1), msg(1), at(10));
    let e = t.ended(msg(1), Outcome::TimedOutWorking, None, 20).unwrap();
    assert_eq!(e.state, TaskState::Failed);
    assert_eq!(t.running_on(msg(1)), None);
    // Its dependent waits on; a Done on a failed task is refused.
    assert_eq!(state(&t, b.0), TaskState::Pending);
    assert!(matches!(
        t.review(&lead(), a, Decision::Done, 21),
        Err(TaskError::NotNow { .. })
    ));
    t.review(&lead(), a, Decision::Retry, 22).unwrap();
    assert_eq!(t.startable(), vec![(lead(), a)]);
    t.started(&lead(), a, ticket(2), msg(2), at(30));
    assert_eq!(t.task(&lead(), a).map(|t| t.attempts), Some(2));
    t.check().unwrap();
}

#[test]
fn bad_tasks_are_refused_saying_why() {
    let mut t = Tasks::default();
    assert!(matches!(
        t.add(&owner(), &lead(), task(" ", "m1", &[]), 1),
        Err(TaskError::Invalid(_))
    ));
    assert!(matches!(
        t.add(&owner(), &lead(), task("a", "m1", &[7]), 1),
        Err(TaskError::Unknown(TaskId(7)))
    ));
    assert!(matches!(
        t.add(&owner(), &lead(), task("self", "lead-1", &[]), 1),
        Err(TaskError::Invalid(_))
    ));
    let long = "x".repeat(MAX_TITLE + 1);
    assert!(matches!(
        t.add(&owner(), &lead(), task(&long, "m1", &[]), 1),
        Err(TaskError::Invalid(_))
    ));
    // A task cannot name itself or a later one: ids are given in order.
    let a = t.add(&owner(), &lead(), task("a", "m1", &[]), 1).unwrap();
    assert!(matches!(
        t.add(&owner(), &lead(), task("b", "m1", &[a.0 + 1]), 1),
        Err(TaskError::Unknown(_))
    ));
    t.check().unwrap();
}

#[test]
fn a_restart_fails_a_task_that_ran_here_and_waits_for_one_that_ran_elsewhere() {
    let mut before = Tasks::default();
    let a = before
        .add(&owner(), &lead(), task("a", "m1", &[]), 1)
        .unwrap();
    let b = before
        .add(&owner(), &lead(), task("b", "m2", &[]), 1)
        .unwrap();
    before.startable();
    before.started(
        &lead(),
        a,
        ticket(1),
        msg(1),
        RunAt {
            remote: false,
            ..at(10)
        },
    );
    before.started(&lead(), b, ticket(2), msg(2), at(10));
    let kept = before.take_dirty();
    // Through its durable form, as the shell keeps it.
    let json = serde_json::to_string(&kept).unwrap();
    let lists: Vec<TaskList> = serde_json::from_str(&json).unwrap();

    let mut after = Tasks::default();
    assert_eq!(after.restore(lists, 100), 2);
    assert_eq!(state(&after, a.0), TaskState::Failed);
    assert_eq!(state(&after, b.0), TaskState::Running);
    assert_eq!(after.running_on(msg(2)), Some((lead(), b)));
    assert_eq!(after.next_expiry(), Some(10 + 60_000));
    after.check().unwrap();
    // Its result comes by its message...
    let e = after
        .ended(msg(2), Outcome::Replied, Some("b".into()), 200)
        .unwrap();
    assert_eq!(e.state, TaskState::Review);
    // ...or its deadline fails it.
    let mut late = Tasks::default();
    late.restore(serde_json::from_str(&json).unwrap(), 100);
    late.expire(60_009);
    assert_eq!(state(&late, b.0), TaskState::Running);
    late.expire(60_010);
    assert_eq!(state(&late, b.0), TaskState::Failed);
    assert_eq!(late.next_expiry(), None);
    late.check().unwrap();
}

#[test]
fn an_answered_question_moves_the_result_to_the_answers_message() {
    let mut t = Tasks::default();
    let a = t.add(&owner(), &lead(), task("a", "m1", &[]), 1).unwrap();
    t.startable();
    t.started(&lead(), a, ticket(1), msg(1), at(10));
    t.msg_moved(ticket(1), msg(2));
    t.check().unwrap();
    assert_eq!(t.of_ticket(ticket(1)), Some((lead(), a)));
    let e = t.ended(msg(2), Outcome::Replied, None, 20).unwrap();
    assert_eq!(e.id, a);
    assert_eq!(t.running_on(msg(1)), None);
    t.check().unwrap();
}

#[test]
fn a_full_list_makes_room_from_its_oldest_finished_task_nothing_needs() {
    let mut t = Tasks::default();
    let first = t.add(&owner(), &lead(), task("t", "m1", &[]), 1).unwrap();
    t.review(&lead(), first, Decision::Failed, 2).unwrap();
    for i in 1..MAX_TASKS {
        t.add(&owner(), &lead(), task(&format!("t{i}"), "m1", &[]), 3)
            .unwrap();
    }
    // The failed first task goes to make room; with nothing finished left, the next is refused.
    t.add(&owner(), &lead(), task("more", "m1", &[]), 4)
        .unwrap();
    assert!(t.task(&lead(), first).is_none());
    assert_eq!(
        t.add(&owner(), &lead(), task("one more", "m1", &[]), 5),
        Err(TaskError::Full)
    );
    t.check().unwrap();
}

#[test]
fn views_leave_texts_out_of_the_list_and_give_them_for_one_task() {
    let mut t = Tasks::default();
    let a = t.add(&owner(), &lead(), task("a", "m1", &[]), 1).unwrap();
    t.startable();
    t.started(&lead(), a, ticket(1), msg(1), at(10));
    t.ended(msg(1), Outcome::Replied, Some("the result".into()), 20);
    let all = t.views(&lead(), None).unwrap();
    assert_eq!(all[0].state, TaskState::Review);
    assert_eq!(
        (all[0].brief.as_deref(), all[0].result.as_deref()),
        (None, None)
    );
    let one = t.views(&lead(), Some(a)).unwrap();
    assert_eq!(one[0].brief.as_deref(), Some("do a"));
    assert_eq!(one[0].result.as_deref(), Some("the result"));
    assert_eq!(one[0].outcome, Some(Outcome::Replied));
    assert!(t.views(&SessionId::new("other"), None).unwrap().is_empty());
    assert_eq!(
        t.views(&lead(), Some(TaskId(9))),
        Err(TaskError::Unknown(TaskId(9)))
    );
}

#[test]
fn the_check_catches_a_task_ready_before_its_dependencies() {
    let mut t = Tasks::default().planted(true);
    t.add(&owner(), &lead(), task("a", "m1", &[]), 1).unwrap();
    t.add(&owner(), &lead(), task("b", "m2", &[1]), 1).unwrap();
    assert_eq!(state(&t, 2), TaskState::Ready);
    // The planted machine stands its own check aside (the simulation's oracle judges it);
    // the same list judged straight shows the break.
    let mut honest = Tasks::default();
    honest.insert_raw(t.take_dirty().remove(0));
    assert!(honest.check().is_err());
    // Restored, the same list is brought back to the rules.
    let mut restored = Tasks::default();
    restored.restore(vec![honest.list(&lead()).cloned().unwrap()], 2);
    restored.check().unwrap();
    assert_eq!(state(&restored, 2), TaskState::Pending);
}

#[test]
fn a_kept_list_is_believed_only_as_far_as_it_keeps_the_rules() {
    let mut t = Tasks::default();
    let a = t.add(&owner(), &lead(), task("a", "m1", &[]), 1).unwrap();
    let b = t
        .add(&owner(), &lead(), task("b", "m2", &[a.0]), 1)
        .unwrap();
    let c = t.add(&owner(), &lead(), task("c", "m3", &[]), 1).unwrap();
    let d = t.add(&owner(), &lead(), task("d", "m3", &[]), 1).unwrap();
    let mut list = t.take_dirty().remove(0);
    let run = |m: u128| {
        Stage::Running(Run {
            ticket: None,
            msgs: vec![msg(m)],
            remote: true,
            started_unix_ms: 1,
            deadline_unix_ms: 99_999,
        })
    };
    // Edited by hand: b runs before a is done, c and d run on one assignee and one message,
    // the next id is behind, and the owner names someone else.
    list.tasks.get_mut(&b).unwrap().stage = run(1);
    list.tasks.get_mut(&c).unwrap().stage = run(2);
    list.tasks.get_mut(&d).unwrap().stage = run(2);
    list.tasks.get_mut(&a).unwrap().deps = vec![a, d];
    list.next = 1;
    list.owner = Principal::primary("mallory", Some(SessionId::new("mallory")));

    let mut r = Tasks::default();
    r.restore(vec![list], 5);
    r.check().unwrap();
    assert_eq!(
        state(&r, a.0),
        TaskState::Ready,
        "its own and later deps dropped"
    );
    assert_eq!(state(&r, b.0), TaskState::Failed);
    assert_eq!(state(&r, c.0), TaskState::Running);
    assert_eq!(state(&r, d.0), TaskState::Failed);
    let l = r.list(&lead()).unwrap();
    assert_eq!(l.owner.session, Some(lead()));
    assert_eq!(l.next, d.0 + 1);
    let e = r.add(&owner(), &lead(), task("e", "m1", &[]), 6).unwrap();
    assert_eq!(e, TaskId(d.0 + 1), "no task overwritten");
    r.check().unwrap();
}

#[test]
fn a_refused_first_task_leaves_no_list_and_a_full_text_budget_refuses() {
    let mut t = Tasks::default();
    assert_eq!(
        t.add(&owner(), &lead(), task("a", "m1", &[1]), 1),
        Err(TaskError::Unknown(TaskId(1)))
    );
    assert!(t.is_empty());
    let big = |n: usize| NewTask {
        brief: "x".repeat(1 << 20),
        ..task(&format!("big {n}"), "m1", &[])
    };
    for n in 0..MAX_LIST_BYTES >> 20 {
        t.add(&owner(), &lead(), big(n), 1).unwrap();
    }
    assert_eq!(t.add(&owner(), &lead(), big(99), 1), Err(TaskError::Full));
    // A finished one makes room.
    t.review(&lead(), TaskId(1), Decision::Failed, 2).unwrap();
    t.add(&owner(), &lead(), big(100), 3).unwrap();
    t.check().unwrap();
}

//! The agents of one host: each takes the task typed into its pane, works on it, and ends the
//! turn as its behaviour says — through the gateway, as a member does (and, where it reports
//! its own turns, with its reports: `reporter`).

use super::*;

/// How often an agent tries `fleet_reply` while the broker is unreachable, and how long it
/// waits between tries (a reconnect takes from 100 ms to a few seconds of backoff).
const REPLY_TRIES: u32 = 20;
const REPLY_RETRY: Duration = Duration::from_millis(500);

/// The agents of one host: each takes the task typed into its pane, works on it, and ends the
/// turn as its behaviour says — through the gateway, as a member does.
pub async fn agents(herdr: SimHerdr, gateway: Handle) {
    // Agents at work: each job takes itself out when its turn ends (a wedged one never does).
    let busy: Rc<RefCell<BTreeSet<SessionId>>> = Rc::default();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        busy.borrow_mut()
            .retain(|g| herdr.panes.borrow().contains_key(g));
        connect_booted(&herdr, &gateway).await;
        // Only a ready pane with a task typed into it has anything to do (a fleet of idle
        // members is not walked every 200 ms).
        let waiting: Vec<SessionId> = {
            let (panes, booting) = (herdr.panes.borrow(), herdr.booting.borrow());
            panes
                .iter()
                .filter(|(g, p)| {
                    p.task.is_some() && !booting.contains_key(*g) && !busy.borrow().contains(*g)
                })
                .map(|(g, _)| g.clone())
                .collect()
        };
        for gid in waiting {
            let job = {
                let mut panes = herdr.panes.borrow_mut();
                match panes.get_mut(&gid) {
                    // A task typed and not yet taken — or one an agent was working on when its
                    // gateway restarted (the agent process lives in the pane, not the gateway).
                    Some(p) if p.alive && p.task.is_some() && p.status != AgentStatus::Unknown => {
                        p.status = AgentStatus::Working;
                        Some((p.behaviour, p.task.clone()))
                    }
                    _ => None,
                }
            };
            let Some((behaviour, Some(task))) = job else {
                continue;
            };
            if behaviour == Behaviour::Fast {
                answer_at_once(&herdr, &gid, &task);
                let (herdr, gateway, gid) = (herdr.clone(), gateway.clone(), gid.clone());
                tokio::task::spawn_local(async move {
                    crate::reporter::started(&herdr, &gateway, &gid, &task.text).await;
                    crate::reporter::ended(&herdr, &gateway, &gid, &task.text, behaviour).await;
                });
                continue;
            }
            busy.borrow_mut().insert(gid.clone());
            let (panes_of, gateway, gid2) = (herdr.clone(), gateway.clone(), gid.clone());
            let busy = busy.clone();
            tokio::task::spawn_local(work(panes_of, gateway, gid2, behaviour, task, busy));
        }
    }
}

/// Spawned agents that finished booting connect, and take input once their prompt is drawn.
async fn connect_booted(herdr: &SimHerdr, gateway: &Handle) {
    let now = sim_now();
    let up: Vec<(SessionId, Boot)> = herdr
        .booting
        .borrow()
        .iter()
        .filter(|(_, b)| b.input_at <= now || (b.connect_at <= now && !b.connected))
        .map(|(g, b)| (g.clone(), *b))
        .collect();
    for (gid, boot) in up {
        if boot.input_at <= now {
            herdr.booting.borrow_mut().remove(&gid);
            if boot.prompt {
                if let Some(p) = herdr.panes.borrow_mut().get_mut(&gid) {
                    let drawn = [BANNER, RULE, "❯ ", RULE, "❯ "];
                    p.screen = drawn.iter().map(|l| l.to_string()).collect();
                }
            }
        } else if let Some(b) = herdr.booting.borrow_mut().get_mut(&gid) {
            b.connected = true;
        }
        if !boot.connected {
            let _ = gateway.tell(Input::MemberConnected { target: gid }).await;
        }
    }
}

/// Done before any poll: answered in plain text, no WORKING ever sampled, no `fleet_reply`
/// (as Claude Code answering a short brief at once did).
fn answer_at_once(herdr: &SimHerdr, gid: &SessionId, task: &Task) {
    if let Some(p) = herdr.panes.borrow_mut().get_mut(gid) {
        p.print(format!("● finished: {}", task.text));
        p.print("❯ ");
        p.task = None;
        p.status = AgentStatus::Idle;
    }
    let at = u64::try_from(sim_now().as_millis()).unwrap_or(u64::MAX);
    herdr
        .log
        .borrow_mut()
        .ended_unreplied
        .push((gid.clone(), task.text.clone(), at));
}

/// One turn of an agent, as its behaviour says: wedge, die, hit a usage limit, or work two
/// seconds, maybe ask, maybe reply (retrying while the broker is unreachable), and end it.
async fn work(
    panes_of: SimHerdr,
    gateway: Handle,
    gid2: SessionId,
    behaviour: Behaviour,
    task: Task,
    busy: Rc<RefCell<BTreeSet<SessionId>>>,
) {
    crate::reporter::started(&panes_of, &gateway, &gid2, &task.text).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    match behaviour {
        // Stuck: the pane reads UNKNOWN from now on and the turn never ends.
        Behaviour::Wedges => {
            if let Some(p) = panes_of.panes.borrow_mut().get_mut(&gid2) {
                p.print("⠋ ");
                p.status = AgentStatus::Unknown;
            }
            return;
        }
        // The process exits mid-turn and its pane closes.
        Behaviour::Dies => {
            panes_of.panes.borrow_mut().remove(&gid2);
            busy.borrow_mut().remove(&gid2);
            return;
        }
        // Refuses the turn with a usage-limit notice and goes idle, no reply.
        Behaviour::UsageLimit => {
            if let Some(p) = panes_of.panes.borrow_mut().get_mut(&gid2) {
                p.print("You've hit your usage limit · resets 4pm");
                p.print("❯ ");
                p.task = None;
                p.status = AgentStatus::Idle;
            }
            crate::reporter::ended(&panes_of, &gateway, &gid2, &task.text, behaviour).await;
            busy.borrow_mut().remove(&gid2);
            return;
        }
        _ => {}
    }
    if behaviour == Behaviour::Asks {
        // Ask the lead mid-turn; whatever comes back (an answer, NO_WAITER, a
        // timeout), finish the turn with a reply.
        let ask = Request::Ask {
            question: format!("question on {}", task.text),
            timeout_ms: Some(6_000),
        };
        let _ = gateway.call(Principal::worker(gid2.clone()), ask).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if matches!(behaviour, Behaviour::Replies | Behaviour::Asks) {
        // As a coding agent does with a tool error that says the broker is
        // unreachable: it tries again a little later, within its turn.
        for _ in 0..REPLY_TRIES {
            let content = format!("done: {}", task.text);
            // Made, as far as the agent knows, unless refused outright: a call that dies with
            // its gateway may have landed (and an agent run again after a restart replies
            // again), so a lead may receive it once per attempt (I3).
            let attempt = (gid2.clone(), content.clone());
            panes_of
                .log
                .borrow_mut()
                .reply_attempts
                .push(attempt.clone());
            let withdraw = || {
                let mut log = panes_of.log.borrow_mut();
                if let Some(i) = log.reply_attempts.iter().rposition(|a| *a == attempt) {
                    log.reply_attempts.remove(i);
                }
            };
            let reply = Request::Reply { content };
            match gateway.call(Principal::worker(gid2.clone()), reply).await {
                Ok(Response::Error(CallError::BrokerUnavailable)) => {
                    withdraw();
                    tokio::time::sleep(REPLY_RETRY).await
                }
                Ok(Response::ReplyAccepted { .. }) => {
                    let at = u64::try_from(sim_now().as_millis()).unwrap_or(u64::MAX);
                    panes_of
                        .log
                        .borrow_mut()
                        .replied
                        .push((task.text.clone(), at));
                    break;
                }
                Ok(_) => {
                    withdraw();
                    break;
                }
                Err(_) => break,
            }
        }
    }
    // An agent that draws late goes idle first and shows its answer seconds later.
    let late = crate::reporter::draws_late(&panes_of, &gid2, behaviour);
    let mut mark = 0;
    if let Some(p) = panes_of.panes.borrow_mut().get_mut(&gid2) {
        mark = p.screen.len();
        if late.is_none() {
            p.print(format!("● finished: {}", task.text));
            p.print("❯ ");
        }
        p.task = None;
        p.status = AgentStatus::Idle;
        if behaviour == Behaviour::CompletesSilently {
            let at = u64::try_from(sim_now().as_millis()).unwrap_or(u64::MAX);
            panes_of
                .log
                .borrow_mut()
                .ended_unreplied
                .push((gid2.clone(), task.text.clone(), at));
        }
    }
    crate::reporter::ended(&panes_of, &gateway, &gid2, &task.text, behaviour).await;
    if let Some(after) = late {
        tokio::time::sleep(after).await;
        // In its transcript's place: above whatever was typed since.
        if let Some(p) = panes_of.panes.borrow_mut().get_mut(&gid2) {
            let at = mark.min(p.screen.len());
            p.screen.insert(at, format!("● finished: {}", task.text));
        }
    }
    busy.borrow_mut().remove(&gid2);
}

//! A lead's task list in the multi-host world: beside its delegations, each lead now and then
//! adds a short chain of tasks (each after the one before) for members anywhere, and reviews
//! what waits in review — done, one in five failed — until the quiet phase ends. Its own
//! random stream, so the lead's other steps are drawn as before. Everything it adds goes into
//! the ledger for the oracle (I17).

use crate::host::sim_now;
use crate::lead::{lead_gid, LeadPlan, Ledger};
use fleet_core::tasks::{Decision, NewTask, TaskId, TaskState};
use fleet_core::{Principal, Request, Response, SessionId};
use fleetd::Handle;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// One task a lead added.
#[derive(Clone, Debug)]
pub struct TaskRecord {
    pub host: usize,
    pub lead: SessionId,
    pub id: TaskId,
    pub deps: Vec<TaskId>,
    pub brief: String,
}

pub async fn task_lead(plan: LeadPlan, gateway: Handle, ledger: Rc<RefCell<Ledger>>) {
    let mut rng = ChaCha8Rng::seed_from_u64(plan.seed ^ 0x7a5c_1157);
    let lead = lead_gid(plan.host);
    let me = Principal::primary(&format!("lead{}", plan.host), Some(lead.clone()));
    let mut k = 0u64;
    tokio::time::sleep(Duration::from_secs(4)).await;
    while sim_now() < plan.settle_at {
        let working = sim_now() < plan.until;
        if working && rng.next_u64().is_multiple_of(6) {
            k += 1;
            chain(&plan, &me, &gateway, &ledger, &mut rng, k).await;
        }
        review(&me, &gateway, &mut rng).await;
        tokio::time::sleep(Duration::from_millis(2_000 + rng.next_u64() % 3_000)).await;
    }
}

/// Two or three tasks, each depending on the one before.
async fn chain(
    plan: &LeadPlan,
    me: &Principal,
    gateway: &Handle,
    ledger: &Rc<RefCell<Ledger>>,
    rng: &mut ChaCha8Rng,
    k: u64,
) {
    let len = 2 + rng.next_u64() % 2;
    let mut before: Option<TaskId> = None;
    for step in 0..len {
        let target = {
            let l = ledger.borrow();
            if l.targets.is_empty() {
                return;
            }
            l.targets[(rng.next_u64() % l.targets.len() as u64) as usize]
                .0
                .clone()
        };
        // Unique across the lead's restarts: I1 is judged on the text typed.
        let brief = format!(
            "task {}.{k}.{step} from lead{} for {target}",
            plan.incarnation, plan.host
        );
        let deps: Vec<TaskId> = before.into_iter().collect();
        let task = NewTask {
            title: format!("chain {k} step {step}"),
            brief: brief.clone(),
            assignee: target,
            deps: deps.clone(),
            timeout_ms: Some(20_000 + rng.next_u64() % 40_000),
        };
        let Ok(Response::Tasks { tasks }) =
            gateway.call(me.clone(), Request::TaskAdd { task }).await
        else {
            return;
        };
        let Some(added) = tasks.first() else { return };
        ledger.borrow_mut().tasks.push(TaskRecord {
            host: plan.host,
            lead: me.session.clone().unwrap_or_else(|| lead_gid(plan.host)),
            id: added.id,
            deps,
            brief,
        });
        before = Some(added.id);
    }
}

/// Every task in review gets the lead's decision.
async fn review(me: &Principal, gateway: &Handle, rng: &mut ChaCha8Rng) {
    let Ok(Response::Tasks { tasks }) = gateway.call(me.clone(), Request::Tasks { id: None }).await
    else {
        return;
    };
    for t in tasks.iter().filter(|t| t.state == TaskState::Review) {
        let decision = if rng.next_u64().is_multiple_of(5) {
            Decision::Failed
        } else {
            Decision::Done
        };
        let _ = gateway
            .call(me.clone(), Request::TaskReview { id: t.id, decision })
            .await;
    }
}

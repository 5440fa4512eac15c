//! One broker suite, two brokers: `SimBroker` and RabbitMQ through fleetd's lapin port must
//! each produce every scenario's scripted history (see `fleet_tests::conformance`).
//!
//! RabbitMQ is expected at `FLEET_AMQP_URI` (default `amqp://guest:guest@127.0.0.1:5672/%2f`,
//! which `.ci/run` starts if it is not answering). One scenario restarts the broker with
//! `rabbitmqctl`, so the RabbitMQ scenarios run one after another, and the classic and quorum
//! runs take turns.

use fleet_core::broker::QueueType;
use fleet_tests::conformance::{amqp_side::AmqpSide, check, scenarios, sim_side::SimSide};

fn uri() -> String {
    std::env::var("FLEET_AMQP_URI")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_string())
}

fn sim_conforms(qt: QueueType) {
    let ns = "conf";
    let failures: Vec<String> = scenarios(ns, qt)
        .iter()
        .filter_map(|s| check("SimBroker", s, &SimSide::run(s, ns)).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn sim_broker_conforms() {
    sim_conforms(QueueType::Classic);
}

#[test]
fn sim_broker_conforms_with_quorum_queues() {
    sim_conforms(QueueType::Quorum);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_conforms() {
    rabbitmq_conforms_with(QueueType::Classic).await;
}

/// Quorum queues on one node: a cluster of one member each (the cluster e2e has three).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_conforms_with_quorum_queues() {
    rabbitmq_conforms_with(QueueType::Quorum).await;
}

/// One scenario restarts the broker: the two runs take turns.
static BROKER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn rabbitmq_conforms_with(qt: QueueType) {
    let _turn = BROKER.lock().await;
    let uri = uri();
    let mut failures = Vec::new();
    let count = scenarios("x", qt).len();
    for i in 0..count {
        // A namespace per scenario and run: nothing one leaves behind can touch another.
        let ns = format!("conf{}{}x{i}", std::process::id(), qt.as_str());
        let all = scenarios(&ns, qt);
        let s = &all[i];
        let started = tokio::time::Instant::now();
        match AmqpSide::run(s, &uri, &ns).await {
            Ok(history) => {
                if let Err(e) = check("RabbitMQ", s, &history) {
                    failures.push(e);
                }
            }
            Err(e) => failures.push(format!("RabbitMQ, scenario {:?}: {e}", s.name)),
        }
        eprintln!("rabbitmq: {:?} in {:?}", s.name, started.elapsed());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

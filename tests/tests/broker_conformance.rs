//! One broker suite, two brokers: `SimBroker` and RabbitMQ through fleetd's lapin port must
//! each produce every scenario's scripted history (see `fleet_tests::conformance`).
//!
//! RabbitMQ is expected at `FLEET_AMQP_URI` (default `amqp://guest:guest@127.0.0.1:5672/%2f`,
//! which `.ci/run` starts if it is not answering). One scenario restarts the broker with
//! `rabbitmqctl`, so the RabbitMQ scenarios run one after another in a single test.

use fleet_tests::conformance::{amqp_side::AmqpSide, check, scenarios, sim_side::SimSide};

fn uri() -> String {
    std::env::var("FLEET_AMQP_URI")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_string())
}

#[test]
fn sim_broker_conforms() {
    let ns = "conf";
    let failures: Vec<String> = scenarios(ns)
        .iter()
        .filter_map(|s| check("SimBroker", s, &SimSide::run(s, ns)).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_conforms() {
    let uri = uri();
    let mut failures = Vec::new();
    let count = scenarios("x").len();
    for i in 0..count {
        // A namespace per scenario and run: nothing one leaves behind can touch another.
        let ns = format!("conf{}x{i}", std::process::id());
        let all = scenarios(&ns);
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

//! `SimBroker` on its own turmoil host, reached over turmoil TCP by `SimBrokerClient` (the
//! gateways' `BrokerPort`): routing across hosts, then a partition detected by heartbeats, the
//! unacked delivery requeued, and after the repair a new generation that redelivers it.

use fleet_core::broker::{
    Binding, BrokerEvent, BrokerOp, Consume, Exchange, PublishId, PublishResult, QueueArgs,
    QueueSpec, Topology,
};
use fleet_core::envelope::Headers;
use fleet_sim::broker::SimBroker;
use fleet_sim::net::{serve, SimBrokerClient};
use fleetd::BrokerPort;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

fn inbox_slice() -> Topology {
    Topology {
        exchanges: Exchange::ALL.to_vec(),
        queues: vec![QueueSpec {
            name: "t.agent.w.inbox.v2".into(),
            durable: true,
            exclusive: false,
            auto_delete: false,
            args: QueueArgs::default(),
        }],
        bindings: vec![Binding {
            queue: "t.agent.w.inbox.v2".into(),
            exchange: Exchange::Msg,
            key: "w".into(),
        }],
        consumers: vec![Consume {
            queue: "t.agent.w.inbox.v2".into(),
            exclusive: true,
            prefetch: 8,
        }],
    }
}

async fn next_up(c: &mut SimBrokerClient) -> u32 {
    loop {
        match c.next_event().await {
            Some(BrokerEvent::Up { generation }) => return generation,
            Some(_) => {}
            None => panic!("the client's event stream ended"),
        }
    }
}

#[test]
fn a_partitioned_consumer_gets_its_unacked_delivery_again_after_the_repair() -> turmoil::Result {
    let mut sim = turmoil::Builder::new()
        .rng_seed(7)
        .epoch(SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000))
        .simulation_duration(Duration::from_secs(120))
        .tick_duration(Duration::from_millis(10))
        .build();
    let broker = Rc::new(RefCell::new(SimBroker::new("t")));
    sim.host("broker", move || serve(broker.clone()));
    let seen: Rc<RefCell<Vec<(String, bool, u32)>>> = Rc::default();
    let log = seen.clone();
    sim.client("worker-gw", async move {
        let mut c = SimBrokerClient::start("broker");
        let first = next_up(&mut c).await;
        c.submit(BrokerOp::Declare(inbox_slice()));
        let delivery = loop {
            if let Some(BrokerEvent::Delivery {
                delivery,
                body,
                redelivered,
                ..
            }) = c.next_event().await
            {
                log.borrow_mut().push((
                    String::from_utf8_lossy(&body).into_owned(),
                    redelivered,
                    delivery.generation,
                ));
                break delivery;
            }
        };
        assert_eq!(delivery.generation, first);
        // Cut off before acking: heartbeats notice, the broker requeues the delivery.
        turmoil::partition("worker-gw", "broker");
        loop {
            if let Some(BrokerEvent::Down) = c.next_event().await {
                break;
            }
        }
        turmoil::repair("worker-gw", "broker");
        let second = next_up(&mut c).await;
        assert!(second > first, "a reconnect is a new generation");
        c.submit(BrokerOp::Declare(inbox_slice()));
        loop {
            if let Some(BrokerEvent::Delivery {
                delivery,
                body,
                redelivered,
                ..
            }) = c.next_event().await
            {
                log.borrow_mut().push((
                    String::from_utf8_lossy(&body).into_owned(),
                    redelivered,
                    delivery.generation,
                ));
                c.submit(BrokerOp::Ack { delivery });
                break;
            }
        }
        Ok(())
    });
    sim.client("lead-gw", async move {
        let mut c = SimBrokerClient::start("broker");
        next_up(&mut c).await;
        // Publish until the worker's inbox exists (mandatory: unroutable until then).
        let mut n = 0;
        loop {
            n += 1;
            c.submit(BrokerOp::Publish {
                publish: PublishId(n),
                exchange: Exchange::Msg,
                key: "w".into(),
                mandatory: true,
                persistent: true,
                headers: Headers::new(),
                body: b"the brief".to_vec(),
            });
            let result = loop {
                if let Some(BrokerEvent::Published { result, .. }) = c.next_event().await {
                    break result;
                }
            };
            if result == PublishResult::Routed {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    });
    sim.run()?;
    let seen = seen.borrow();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!((seen[0].0.as_str(), seen[0].1), ("the brief", false));
    assert_eq!((seen[1].0.as_str(), seen[1].1), ("the brief", true));
    assert!(seen[1].2 > seen[0].2);
    Ok(())
}

/// The broker host crashes and restarts: clients see Down then Up with a new generation; a
/// persistent message in a durable queue survives, a transient one does not.
#[test]
fn a_broker_restart_keeps_durable_state_only() -> turmoil::Result {
    let mut sim = turmoil::Builder::new()
        .rng_seed(11)
        .epoch(SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000))
        .simulation_duration(Duration::from_secs(120))
        .tick_duration(Duration::from_millis(10))
        .build();
    let broker = Rc::new(RefCell::new(SimBroker::new("t")));
    let disk = broker.clone();
    sim.host("broker", move || serve(broker.clone()));
    let seen: Rc<RefCell<Vec<String>>> = Rc::default();
    let log = seen.clone();
    sim.client("gw", async move {
        let mut c = SimBrokerClient::start("broker");
        next_up(&mut c).await;
        let mut declare = inbox_slice();
        declare.consumers.clear(); // nobody consumes yet: the messages wait in the queue
        c.submit(BrokerOp::Declare(declare));
        for (n, (body, persistent)) in [("kept", true), ("lost", false)].into_iter().enumerate() {
            c.submit(BrokerOp::Publish {
                publish: PublishId(n as u64 + 1),
                exchange: Exchange::Msg,
                key: "w".into(),
                mandatory: true,
                persistent,
                headers: Headers::new(),
                body: body.as_bytes().to_vec(),
            });
        }
        let mut confirms = 0;
        while confirms < 2 {
            if let Some(BrokerEvent::Published { .. }) = c.next_event().await {
                confirms += 1;
            }
        }
        // Ask the test to bounce the broker host, and wait to see it come back.
        log.borrow_mut().push("bounce".into());
        loop {
            if let Some(BrokerEvent::Down) = c.next_event().await {
                break;
            }
        }
        next_up(&mut c).await;
        c.submit(BrokerOp::Declare(inbox_slice()));
        if let Some(BrokerEvent::Delivery { body, .. }) = c.next_event().await {
            log.borrow_mut()
                .push(String::from_utf8_lossy(&body).into_owned());
        }
        Ok(())
    });
    let mut bounced = false;
    while !sim.step()? {
        if !bounced && seen.borrow().first().is_some_and(|s| s == "bounce") {
            sim.bounce("broker");
            bounced = true;
        }
    }
    assert_eq!(
        *seen.borrow(),
        vec!["bounce".to_string(), "kept".to_string()]
    );
    assert_eq!(disk.borrow().depth("t.agent.w.inbox.v2"), Some(0));
    Ok(())
}

//! This gateway's slice of the broker topology: the shared exchanges and the operators' DLQ,
//! its control, roster and dead-letter queues, and one inbox and one held-results queue per
//! entity it serves, with their caps, TTLs and bindings.
//!
//! Consumers are exclusive: one gateway reads each queue. A classic queue enforces that by
//! refusing a second consumer; a quorum queue ignores the flag, and its single-active-consumer
//! argument makes a second one wait instead (a second gateway of the same host is still
//! refused, at its exclusive roster queue, declared before any inbox).

use super::Fed;
use crate::broker::{Binding, Consume, Exchange, QueueArgs, QueueSpec, Topology};
use crate::config::CoreConfig;
use crate::ids::SessionId;
use crate::roster::{Card, EntityKind};
use std::collections::BTreeMap;

/// How much of the topology to declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// The shared exchanges, this host's control, roster and dead-letter queues, and inboxes:
    /// what a (re)connect declares.
    Whole,
    /// Only the inboxes named: what a newly served entity adds.
    Inboxes,
}

/// This gateway's slice of the topology: the shared exchanges and its own queues for
/// `Part::Whole`, plus an inbox for each of `gids`.
pub(crate) fn slice(
    cfg: &CoreConfig,
    f: &Fed,
    cards: &BTreeMap<SessionId, Card>,
    gids: &[(SessionId, EntityKind)],
    part: Part,
) -> Topology {
    let mut t = Topology::default();
    if part == Part::Whole {
        host_objects(cfg, f, &mut t);
    }
    for (gid, kind) in gids {
        entity_objects(cfg, f, cards.get(gid), gid, *kind, &mut t);
    }
    t
}

/// The shared exchanges and this host's own queues: the operators' DLQ, its dead-letter copy,
/// its control and roster queues, their bindings and consumers.
fn host_objects(cfg: &CoreConfig, f: &Fed, t: &mut Topology) {
    let n = &f.names;
    let host = &f.cfg.host;
    let dlx = Some(n.exchange(Exchange::Dlx));
    // Every durable queue takes the configured type; the roster queue stays classic, as a
    // quorum queue cannot be exclusive or transient.
    let qt = f.cfg.queue_type;
    t.exchanges = Exchange::ALL.to_vec();
    t.queues.push(QueueSpec {
        name: n.dlq(),
        durable: true,
        exclusive: false,
        auto_delete: false,
        args: QueueArgs {
            max_length: Some(cfg.dlq_max_length),
            ..QueueArgs::default()
        }
        .with_type(qt),
    });
    // Each host's own copy of the dead letters, drained to count the broker's drops of its
    // queues; durable so drops while it is down are still counted, and it expires with
    // a host that never comes back.
    t.queues.push(QueueSpec {
        name: n.dead_letters(host),
        durable: true,
        exclusive: false,
        auto_delete: false,
        args: QueueArgs {
            max_length: Some(cfg.inbox_max_length),
            expires_ms: Some(cfg.worker_inbox_expires_ms),
            ..QueueArgs::default()
        }
        .with_type(qt),
    });
    t.queues.push(QueueSpec {
        name: n.control(host),
        durable: true,
        exclusive: false,
        auto_delete: false,
        args: QueueArgs {
            dead_letter_exchange: dlx.clone(),
            ..QueueArgs::default()
        }
        .with_type(qt),
    });
    // A rejected heartbeat (forged, expired) dead-letters like any other rejection, and a
    // flood of them is capped: heartbeats come again, so dropping the oldest loses nothing.
    t.queues.push(QueueSpec {
        name: n.roster(host),
        durable: false,
        exclusive: true,
        auto_delete: true,
        args: QueueArgs {
            dead_letter_exchange: dlx.clone(),
            max_length: Some(cfg.inbox_max_length),
            ..QueueArgs::default()
        },
    });
    t.bindings.push(Binding {
        queue: n.dlq(),
        exchange: Exchange::Dlx,
        key: String::new(),
    });
    t.bindings.push(Binding {
        queue: n.dead_letters(host),
        exchange: Exchange::Dlx,
        key: String::new(),
    });
    t.bindings.push(Binding {
        queue: n.control(host),
        exchange: Exchange::Control,
        key: host.to_string(),
    });
    t.bindings.push(Binding {
        queue: n.roster(host),
        exchange: Exchange::Roster,
        key: "roster.#".into(),
    });
    for (queue, prefetch) in [
        (n.control(host), cfg.prefetch),
        (n.roster(host), cfg.roster_prefetch),
        (n.dead_letters(host), cfg.prefetch),
    ] {
        t.consumers.push(Consume {
            queue,
            exclusive: true,
            prefetch,
        });
    }
}

/// One served entity's inbox and held-results queue, their bindings (a member's also to the
/// broadcasts of all and of its group) and consumers.
fn entity_objects(
    cfg: &CoreConfig,
    f: &Fed,
    card: Option<&Card>,
    gid: &SessionId,
    kind: EntityKind,
    t: &mut Topology,
) {
    let n = &f.names;
    let dlx = Some(n.exchange(Exchange::Dlx));
    let qt = f.cfg.queue_type;
    let name = n.inbox(gid);
    let expires = match kind {
        EntityKind::Member => cfg.worker_inbox_expires_ms,
        _ => cfg.lead_inbox_expires_ms,
    };
    // The held queue is capped, expires and dead-letters exactly as the inbox does.
    let args = QueueArgs {
        dead_letter_exchange: dlx.clone(),
        max_length: Some(cfg.inbox_max_length),
        message_ttl_ms: Some(cfg.inbox_message_ttl_ms),
        expires_ms: Some(expires),
        ..QueueArgs::default()
    }
    .with_type(qt);
    t.queues.push(QueueSpec {
        name: name.clone(),
        durable: true,
        exclusive: false,
        auto_delete: false,
        args: args.clone(),
    });
    t.bindings.push(Binding {
        queue: name.clone(),
        exchange: Exchange::Msg,
        key: gid.to_string(),
    });
    if kind == EntityKind::Member {
        t.bindings.push(Binding {
            queue: name.clone(),
            exchange: Exchange::Msg,
            key: "broadcast.all".into(),
        });
        if let Some(g) = card.and_then(|c| c.group.as_ref()) {
            t.bindings.push(Binding {
                queue: name.clone(),
                exchange: Exchange::Msg,
                key: format!("broadcast.{g}"),
            });
        }
    }
    t.consumers.push(Consume {
        queue: name,
        exclusive: true,
        prefetch: cfg.prefetch,
    });
    let held = n.held(gid);
    t.queues.push(QueueSpec {
        name: held.clone(),
        durable: true,
        exclusive: false,
        auto_delete: false,
        args,
    });
    t.bindings.push(Binding {
        queue: held.clone(),
        exchange: Exchange::Msg,
        key: crate::broker::Names::held_key(gid),
    });
    t.consumers.push(Consume {
        queue: held,
        exclusive: true,
        prefetch: cfg.held_prefetch,
    });
}

//! The run's trace: every output of every host, in the order the simulation produced them,
//! and each host's observer that writes it.

use crate::host::SimHerdr;
use fleet_core::{HostId, Instant};
use fleetd::Observer;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// Every output of every host, in the order the simulation produced them: the run's trace.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    lines: Rc<RefCell<Vec<String>>>,
    /// msgId → traceId of every envelope published, to put traceIds on timeline lines.
    traces: Rc<RefCell<BTreeMap<String, String>>>,
}

impl Trace {
    pub fn text(&self) -> String {
        let mut s = self.lines.borrow().join("\n");
        s.push('\n');
        s
    }

    pub fn len(&self) -> usize {
        self.lines.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The trace as a readable per-host timeline: one section per host, every line tagged
    /// with the traceId of the message it concerns (`[msg …]` for a local message, which has
    /// no envelope; `[-]` for a line about no message).
    pub fn timeline(&self) -> String {
        crate::timeline::render(&self.lines.borrow(), &self.traces.borrow())
    }

    /// msgId → traceId of every envelope published.
    pub fn trace_ids(&self) -> BTreeMap<String, String> {
        self.traces.borrow().clone()
    }
}

/// One host's view onto the shared trace.
pub(crate) struct HostTrace {
    pub(crate) host: HostId,
    pub(crate) trace: Trace,
    /// This host's panes: a health change is recorded beside the truth about its pane.
    pub(crate) herdr: SimHerdr,
}

impl Observer for HostTrace {
    fn output(&mut self, now: Instant, output: &fleet_core::Output) {
        if let fleet_core::Output::Event(fleet_core::Event::HealthChanged { target, to, .. }) =
            output
        {
            self.herdr.record_health(target, *to);
        }
        if let fleet_core::Output::Notify(n) = output {
            self.herdr.record_notice(n);
        }
        if let fleet_core::Output::Event(fleet_core::Event::Task { lead, task, state }) = output {
            self.herdr.record_task(lead, *task, *state);
        }
        if matches!(
            output,
            fleet_core::Output::PollStatus { .. }
                | fleet_core::Output::PollStatuses { .. }
                | fleet_core::Output::ProbeHealth { .. }
                | fleet_core::Output::LookAtStart { .. }
                | fleet_core::Output::MemberReady { .. }
        ) {
            return;
        }
        if let fleet_core::Output::Broker(fleet_core::broker::BrokerOp::Publish {
            headers, ..
        }) = output
        {
            use fleet_core::envelope::HeaderValue;
            if let (Some(HeaderValue::Str(m)), Some(HeaderValue::Str(t))) =
                (headers.get("msgId"), headers.get("traceId"))
            {
                self.trace.traces.borrow_mut().insert(m.clone(), t.clone());
            }
        }
        self.trace.lines.borrow_mut().push(format!(
            "{:>9} {} {output}",
            now.to_string(),
            self.host
        ));
    }
}

//! # fleet-sim
//!
//! Seeded worlds that drive the real `fleet_core::Gateway` and check fleetd's invariants.
//! Two worlds: one host (`world`) — simulated herdr panes whose agents reply, complete
//! silently, ask mid-turn, wedge, hit a usage limit or die, and simulated leads that delegate,
//! answer, poll and drain, driving the gateway directly — and many hosts (`multi`): turmoil
//! hosts each running the real driver loop with a simulated herdr, over a simulated broker,
//! with crashes, partitions, clock jumps and lying peers (see `docs/simulation.md`).
//!
//! One seed is one run is one trace: same seed, same commit, same trace, byte for byte.

pub mod adversary;
pub mod agent;
pub mod broker;
pub mod host;
pub mod internal;
pub mod invariant;
pub mod judge;
pub mod lead;
pub mod multi;
pub mod net;
pub mod oracle;
pub mod pending;
#[cfg(feature = "planted-bugs")]
pub mod prove;
pub mod reporter;
pub mod run;
pub mod task_lead;
pub mod timeline;
pub mod trace;
pub mod world;

pub use run::{run_seed, RunConfig, RunReport};
pub use world::World;

/// `println!` for the command line's standard output, except that a reader who closed the pipe
/// (`fleet-sim replay … | head`) ends the program quietly: it has what it wanted.
#[macro_export]
macro_rules! say {
    () => {
        $crate::emit("\n")
    };
    ($($arg:tt)*) => {
        $crate::emit(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` likewise.
#[macro_export]
macro_rules! say_raw {
    ($($arg:tt)*) => {
        $crate::emit(&format!($($arg)*))
    };
}

/// Writes to standard output; a closed pipe exits with success, any other failure is named.
pub fn emit(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("fleet-sim: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

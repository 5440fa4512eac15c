//! A gateway's own invariant checks panic at the step they break (`Gateway::check_invariants`,
//! on in every simulated step through the core's `invariants` feature). The gateway runs in a
//! task of its host's runtime, which would swallow the panic and let the world go on without
//! it; so while a seed runs, a panic hook records the first panic on this thread (a seed runs
//! on one thread), and the seed ends with a violation named `internal` carrying its message.
//! Any other panic is as much our bug and is reported the same way.

use crate::invariant::Invariant;
use crate::oracle::Violation;
use fleet_core::Instant;
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    static FIRST: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

fn message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a gateway panicked".to_string())
}

fn install_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if WATCHING.with(Cell::get) {
                let text = message(info.payload());
                let at = info
                    .location()
                    .map(|l| format!(" ({}:{})", l.file(), l.line()))
                    .unwrap_or_default();
                FIRST.with(|f| {
                    f.borrow_mut().get_or_insert(format!("{text}{at}"));
                });
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f` (one seed); the first panic on this thread while it runs — caught or swallowed
/// by a runtime — comes back as an `internal` violation.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, Violation> {
    install_hook();
    FIRST.with(|f| f.borrow_mut().take());
    WATCHING.with(|w| w.set(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    WATCHING.with(|w| w.set(false));
    let first = FIRST.with(|f| f.borrow_mut().take());
    let detail = match (result, first) {
        (Ok(v), None) => return Ok(v),
        (_, Some(first)) => first,
        (Err(payload), None) => message(payload.as_ref()),
    };
    Err(Violation {
        invariant: Invariant::Internal,
        at: Instant::ZERO,
        detail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic's message becomes the violation's detail, even one a runtime would swallow;
    /// a normal return passes through.
    #[test]
    fn a_panic_becomes_an_internal_violation() {
        assert_eq!(catch(|| 7), Ok(7));
        let v = catch(|| -> u8 { panic!("invariant broken on gw0: x") }).unwrap_err();
        assert_eq!(v.invariant, Invariant::Internal);
        assert!(v.detail.contains("invariant broken on gw0"));
        let swallowed =
            catch(|| std::thread::scope(|_| std::panic::catch_unwind(|| panic!("inner")).is_err()));
        assert!(swallowed.is_err_and(|v| v.detail.contains("inner")));
    }
}

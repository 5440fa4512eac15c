//! What a sub-machine hands back to the hub when it is done with a call: the hub responds, the
//! sub-machine never touches the gateway's outputs itself.

use crate::ids::CallId;
use crate::io::{CallError, Response};

/// A call a sub-machine is done with, and what it is told.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Answer {
    pub(super) call: CallId,
    pub(super) response: Response,
}

impl Answer {
    pub(super) fn error(call: CallId, e: CallError) -> Self {
        Answer {
            call,
            response: Response::Error(e),
        }
    }
}

//! Exhaustive model check of the file-lease protocol (issue 9): three processes over a model
//! file system, crash and pause allowed at every step, every interleaving explored. See
//! `model/mod.rs` for the checker, its time abstraction and how to add a protocol's model.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod model;

use model::toys::{CheckThenWrite, TicketLock};
use model::{Bounds, explore};

/// A ticket lock on never-deleted `O_EXCL` names is correct: the whole space, crashes
/// included, has no violation (the checker is not always failing).
#[test]
fn correct_toy_protocol_passes() {
    let model = TicketLock {
        processes: 3,
        max_acquisitions: 2,
    };
    let report = explore(&model, &Bounds::default());
    println!("ticket lock: {report}");
    assert!(report.violation.is_none(), "{report}");
    assert!(report.complete, "{report}");
    assert!(report.states > 100, "{report}");
}

/// Read-decide-rename is broken, and the checker says so with a short trace (the checker is not
/// vacuous).
#[test]
fn broken_toy_protocol_fails() {
    let model = CheckThenWrite {
        processes: 3,
        max_acquisitions: 2,
    };
    let report = explore(&model, &Bounds::default());
    println!("check-then-write: {report}");
    let violation = report.violation.expect("a violation");
    assert!(violation.trace.len() <= 4, "{violation}");
}

//! `lease demo`: a fleet of worker processes sharing units of work, one killed, partitions moving.

use crate::cli::{DemoArgs, DemoWorkerArgs};
use crate::exit::Failure;

/// `lease demo`.
pub(crate) async fn demo(args: DemoArgs) -> Result<u8, Failure> {
    let _ = args;
    Err(Failure::unavailable(
        "lease demo needs lessor-partition, which is not wired in yet",
    ))
}

/// `lease demo-worker`: one worker of the fleet.
pub(crate) async fn worker(args: DemoWorkerArgs) -> Result<u8, Failure> {
    let _ = args;
    Err(Failure::unavailable(
        "lease demo-worker needs lessor-partition, which is not wired in yet",
    ))
}

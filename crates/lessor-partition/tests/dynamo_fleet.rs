//! Eight workers and 256 units on DynamoDB Local: balance, takeover after a crash, handover on a
//! clean stop, and fencing tokens that grow with every change of owner
//! (`support/share_units.rs`, which the PostgreSQL fleet test runs too).
//!
//! Needs `LEASE_DYNAMO_ENDPOINT` (as `cargo xtask itest` sets, with dummy AWS credentials);
//! without it the test prints `SKIPPED:` to stderr and passes, unless `LEASE_REQUIRE_DYNAMO=1`.
// The DynamoDB client's TLS stack (aws-lc-sys) needs the target's C compiler and system headers,
// which a check of macOS or FreeBSD from Linux lacks: these suites build and run on Linux.
#![cfg(target_os = "linux")]

#[path = "support/dynamo_table.rs"]
mod dynamo_table;
#[path = "support/share_units.rs"]
mod share_units;
mod support;

use std::sync::Arc;
use std::time::Duration;
use support::endpoint;

use lease_core::LeaseBackend;
use share_units::{Plan, share_units_on};

#[test]
fn eight_workers_share_256_units_on_dynamodb_local() {
    let Some(endpoint) = endpoint("eight_workers_share_256_units_on_dynamodb_local") else {
        return;
    };
    let open = async {
        let counted = dynamo_table::counted_table(&endpoint, "lessor-fleet").await;
        counted as Arc<dyn LeaseBackend>
    };
    let plan = Plan {
        workers: 8,
        units: 256,
        session: Duration::from_secs(4),
        interval: Duration::from_secs(1),
        balance_within: Duration::from_secs(120),
    };
    share_units_on(open, plan);
}

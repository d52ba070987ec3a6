//! Eight workers and 256 units on PostgreSQL: balance, takeover after a crash, handover on a
//! clean stop, and fencing tokens that grow with every change of owner
//! (`support/share_units.rs`, as the DynamoDB fleet test), on a table as the `lease` command
//! opens it. Shorter sessions than on DynamoDB Local: the whole test takes about five seconds.
//! What a fleet costs on the wire is the benchmark's (`benches/postgres_fleet.rs`).
//!
//! Needs `LEASE_POSTGRES_URL` (as `cargo xtask test` sets); without it the test prints
//! `SKIPPED:` to stderr and passes, unless `LEASE_REQUIRE_POSTGRES=1`.
// The DynamoDB and PostgreSQL clients need a C compiler for the target (aws-lc-sys, ring):
// these suites build and run on Linux, where CI runs them.
#![cfg(target_os = "linux")]

#[path = "support/postgres.rs"]
mod postgres;
#[path = "support/share_units.rs"]
mod share_units;

use std::sync::Arc;
use std::time::Duration;

use lease_core::LeaseBackend;
use share_units::{Plan, share_units_on};

#[test]
fn eight_workers_share_256_units_on_postgres() {
    let Some(url) = postgres::url("eight_workers_share_256_units_on_postgres") else {
        return;
    };
    let open = async {
        let counted = postgres::counted_table(&url, "lessor_fleet").await;
        counted as Arc<dyn LeaseBackend>
    };
    let plan = Plan {
        workers: 8,
        units: 256,
        session: Duration::from_secs(2),
        interval: Duration::from_millis(500),
        balance_within: Duration::from_secs(30),
    };
    share_units_on(open, plan);
}

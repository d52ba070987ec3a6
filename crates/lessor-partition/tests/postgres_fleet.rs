//! Eight workers and 256 units on PostgreSQL: balance, takeover after a crash, handover on a
//! clean stop, and fencing tokens that grow with every change of owner
//! (`support/share_units.rs`, as the DynamoDB fleet test), on a table as the `lease` command
//! opens it, on the same timings as the DynamoDB fleet test (4 s sessions, 1 s interval): with 2 s
//! sessions and a 0.5 s interval, a run beside a CPU-bound suite (the lanes of `cargo xtask
//! test`) starved the workers past their sessions, and at a load of 45 the fleet churned (every
//! unit gained and lost again, members seen 1 to 6 of 8) and never balanced within 30 s.
//! What a fleet costs on the wire is the benchmark's (`benches/postgres_fleet.rs`).
//!
//! Needs `LEASE_POSTGRES_URL` (as `cargo xtask test` sets); without it the test prints
//! `SKIPPED:` to stderr and passes, unless `LEASE_REQUIRE_POSTGRES=1`.

// The PostgreSQL client is a Unix-only dev-dependency (the crate's `Cargo.toml` says why): not
// in the Windows test run under Wine, which starts no server.
#![cfg(unix)]

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
        session: Duration::from_secs(4),
        interval: Duration::from_secs(1),
        balance_within: Duration::from_secs(60),
    };
    share_units_on(open, plan);
}

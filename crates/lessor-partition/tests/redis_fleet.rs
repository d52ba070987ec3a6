//! Eight workers and 256 units on Redis: balance, takeover after a crash, handover on a clean
//! stop, and fencing tokens that grow with every change of owner (`support/share_units.rs`, as
//! the DynamoDB and PostgreSQL fleet tests), on a prefix as the `lease` command opens it. Their
//! timings (4 s sessions, 1 s interval: shorter ones starve beside a CPU-bound suite, see
//! `postgres_fleet.rs`); the whole test takes about ten seconds. What a fleet costs on the wire
//! is the benchmark's (`benches/redis_fleet.rs`).
//!
//! Needs `LEASE_REDIS_URL` (as `cargo xtask test` sets); without it the test prints `SKIPPED:`
//! to stderr and passes, unless `LEASE_REQUIRE_REDIS=1`.

// The Redis client is a Unix-only dev-dependency (the crate's `Cargo.toml` says why): not
// in the Windows test run under Wine, which starts no server.
#![cfg(unix)]

#[path = "support/redis.rs"]
mod redis;
#[path = "support/share_units.rs"]
mod share_units;

use std::sync::Arc;
use std::time::Duration;

use lease_core::LeaseBackend;
use share_units::{Plan, share_units_on};

#[test]
fn eight_workers_share_256_units_on_redis() {
    let Some(url) = redis::url("eight_workers_share_256_units_on_redis") else {
        return;
    };
    let open = async {
        let counted = redis::counted_prefix(&url, "lessor_fleet").await;
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

//! A fleet on Redis with its assigner (the default): what it costs on the wire (one request is
//! one script or command, one round trip) against the simulator's figures for the same fleet,
//! and how soon a killed worker's units are owned again against the bound `d + 2I`; the same
//! benchmark as on DynamoDB Local and PostgreSQL (`support/mod.rs`).
//!
//! Writes `$LEASE_BENCH_OUT/44-lessor-redis.md` when that variable is set, and prints the same
//! section. Without `LEASE_REDIS_URL` it says it was skipped, unless `LEASE_REQUIRE_REDIS=1`,
//! which makes it fail.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[cfg(unix)]
#[path = "../tests/support/redis.rs"]
mod redis;
#[cfg(unix)]
mod support;

#[cfg(unix)]
fn main() {
    let open = redis::url("redis_fleet bench")
        .map(|url| move || async move { redis::counted_prefix(&url, "lessor_bench").await })
        .ok_or_else(|| format!("`{}` was not set", redis::URL_ENV));
    support::main(
        "44-lessor-redis.md",
        support::Store {
            name: "Redis",
            open,
        },
    );
}

/// On Windows the Redis client is not a dev-dependency (see the crate's `Cargo.toml`).
#[cfg(not(unix))]
fn main() {
    println!("skipped: the Redis fleet benchmark runs on Unix systems only");
}

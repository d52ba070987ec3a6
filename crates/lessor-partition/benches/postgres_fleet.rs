//! A fleet on PostgreSQL with its assigner (the default): what it costs on the wire (one request
//! is one statement) against the simulator's figures for the same fleet, and how soon a killed
//! worker's units are owned again against the bound `d + 2I`; the same benchmark as on DynamoDB
//! Local (`support/mod.rs`).
//!
//! Writes `$LEASE_BENCH_OUT/43-lessor-postgres.md` when that variable is set, and prints the same
//! section. Without `LEASE_POSTGRES_URL` it says it was skipped, unless
//! `LEASE_REQUIRE_POSTGRES=1`, which makes it fail.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[cfg(unix)]
#[path = "../tests/support/postgres.rs"]
mod postgres;
#[cfg(unix)]
mod support;

#[cfg(unix)]
fn main() {
    let open = postgres::url("postgres_fleet bench")
        .map(|url| move || async move { postgres::counted_table(&url, "lessor_bench").await })
        .ok_or_else(|| format!("`{}` was not set", postgres::URL_ENV));
    support::main(
        "43-lessor-postgres.md",
        support::Store {
            name: "PostgreSQL",
            open,
        },
    );
}

/// On Windows the PostgreSQL client is not a dev-dependency (see the crate's `Cargo.toml`).
#[cfg(not(unix))]
fn main() {
    println!("skipped: the PostgreSQL fleet benchmark runs on Unix systems only");
}

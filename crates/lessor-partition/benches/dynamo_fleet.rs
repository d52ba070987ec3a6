//! A fleet on DynamoDB Local with its assigner (the default): what it costs on the wire against
//! the simulator's figures for the same fleet, and how soon a killed worker's units are owned
//! again against the bound `d + 2I`; the benchmark itself is `support/mod.rs`, which the
//! PostgreSQL fleet benchmark runs too.
//!
//! Writes `$LEASE_BENCH_OUT/42-lessor-dynamo.md` when that variable is set, and prints the same
//! section. Without `LEASE_DYNAMO_ENDPOINT` it says it was skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[cfg(target_os = "linux")]
#[path = "../tests/support/dynamo_table.rs"]
mod dynamo_table;
#[cfg(target_os = "linux")]
mod support;

/// Where DynamoDB Local answers (as `cargo xtask itest` and `cargo xtask bench` set it).
#[cfg(target_os = "linux")]
const ENDPOINT_ENV: &str = "LEASE_DYNAMO_ENDPOINT";

#[cfg(target_os = "linux")]
fn main() {
    let endpoint = std::env::var(ENDPOINT_ENV)
        .ok()
        .filter(|endpoint| !endpoint.is_empty());
    let open = endpoint
        .map(|endpoint| {
            move || async move { dynamo_table::counted_table(&endpoint, "lessor-bench").await }
        })
        .ok_or_else(|| format!("`{ENDPOINT_ENV}` was not set"));
    support::main(
        "42-lessor-dynamo.md",
        support::Store {
            name: "DynamoDB Local",
            open,
        },
    );
}

/// Elsewhere the DynamoDB client is not built: its TLS stack needs the target's C compiler and
/// system headers (see the crate's `Cargo.toml`, `[target.'cfg(target_os =
/// "linux")'.dev-dependencies]`).
#[cfg(not(target_os = "linux"))]
fn main() {
    println!("skipped: the DynamoDB benchmark runs on Linux only");
}

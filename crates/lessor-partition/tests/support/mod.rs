//! What the DynamoDB suites of this crate share.

use std::io::Write as _;

/// Where DynamoDB Local answers (as `cargo xtask itest` sets it).
pub(crate) const ENDPOINT_ENV: &str = "LEASE_DYNAMO_ENDPOINT";

/// The DynamoDB Local endpoint from `LEASE_DYNAMO_ENDPOINT` (as `cargo xtask itest` sets); without
/// it, prints `SKIPPED:` to stderr and returns `None`, unless `LEASE_REQUIRE_DYNAMO=1`, which makes
/// it panic.
pub(crate) fn endpoint(test: &str) -> Option<String> {
    if let Ok(endpoint) = std::env::var(ENDPOINT_ENV)
        && !endpoint.is_empty()
    {
        return Some(endpoint);
    }
    let why = format!("{test}: set {} or run cargo xtask itest", ENDPOINT_ENV);
    if std::env::var("LEASE_REQUIRE_DYNAMO").is_ok_and(|v| v == "1") {
        panic!("DynamoDB Local required (LEASE_REQUIRE_DYNAMO=1) but unavailable: {why}");
    }
    // Straight to the process's stderr: libtest captures eprintln! of passing tests.
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
    None
}

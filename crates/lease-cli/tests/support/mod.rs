//! Shared by lease-cli's test files: finding DynamoDB Local, and reading a finished command.
#![allow(dead_code, unreachable_pub)]

use std::io::Write as _;
use std::process::Output;

/// `LEASE_DYNAMO_ENDPOINT`, or `None` after saying visibly that `test` is skipped (a failure
/// instead when `LEASE_REQUIRE_DYNAMO=1`: `cargo xtask test` sets it with the endpoint).
pub fn dynamo_endpoint(test: &str) -> Option<String> {
    let endpoint = std::env::var("LEASE_DYNAMO_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty());
    if endpoint.is_none() {
        assert!(
            std::env::var("LEASE_REQUIRE_DYNAMO").as_deref() != Ok("1"),
            "LEASE_REQUIRE_DYNAMO=1 but LEASE_DYNAMO_ENDPOINT is not set"
        );
        // Straight to the process's stderr, past libtest's capture, so the skip is seen.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: lease-cli {test} (set LEASE_DYNAMO_ENDPOINT)"
        );
    }
    endpoint
}

/// A finished command's standard error, as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

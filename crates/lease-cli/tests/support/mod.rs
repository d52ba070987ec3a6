//! Shared by lease-cli's test files: finding DynamoDB Local, PostgreSQL and Redis, and reading a
//! finished command.
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

/// `LEASE_POSTGRES_URL`, or `None` after saying visibly that `test` is skipped (a failure
/// instead when `LEASE_REQUIRE_POSTGRES=1`: `cargo xtask test` sets it with the URL).
pub fn postgres_url(test: &str) -> Option<String> {
    let url = std::env::var("LEASE_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        assert!(
            std::env::var("LEASE_REQUIRE_POSTGRES").as_deref() != Ok("1"),
            "LEASE_REQUIRE_POSTGRES=1 but LEASE_POSTGRES_URL is not set"
        );
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: lease-cli {test} (set LEASE_POSTGRES_URL)"
        );
    }
    url
}

/// `LEASE_REDIS_URL`, or `None` after saying visibly that `test` is skipped (a failure instead
/// when `LEASE_REQUIRE_REDIS=1`: `cargo xtask test` sets it with the URL).
pub fn redis_url(test: &str) -> Option<String> {
    let url = std::env::var("LEASE_REDIS_URL")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        assert!(
            std::env::var("LEASE_REQUIRE_REDIS").as_deref() != Ok("1"),
            "LEASE_REQUIRE_REDIS=1 but LEASE_REDIS_URL is not set"
        );
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: lease-cli {test} (set LEASE_REDIS_URL)"
        );
    }
    url
}

/// As [`with_secret`], for a Redis URL: its own password, or, for a server without one (the
/// `default` user with `nopass`, which accepts any password given with the user's name:
/// `AUTH default PASSWORD`), a marker as the `default` user's password.
pub fn with_redis_secret(url: &str) -> (String, String) {
    let (scheme, rest) = url.split_once("://").expect("a redis:// URL");
    let head = rest.split(['/', '?']).next().unwrap_or(rest);
    if let Some((credentials, _)) = head.rsplit_once('@') {
        if let Some((_, password)) = credentials.split_once(':')
            && !password.is_empty()
        {
            return (url.to_owned(), password.to_owned());
        }
        panic!("give LEASE_REDIS_URL a password, or none: {scheme}://{credentials}@...");
    }
    let secret = format!("never-printed-{}", std::process::id());
    (format!("{scheme}://default:{secret}@{rest}"), secret)
}

/// `url` with a password that must never be printed, and that password: the URL's own, or,
/// for a URL without one (a server that trusts loopback, as the test servers do), a marker
/// the server ignores.
pub fn with_secret(url: &str) -> (String, String) {
    let rest = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"));
    if let Some(rest) = rest
        && let Some((credentials, host)) = rest.split_once('@')
    {
        if let Some((_, password)) = credentials.split_once(':') {
            return (url.to_owned(), password.to_owned());
        }
        let secret = format!("never-printed-{}", std::process::id());
        let scheme = &url[..url.len() - rest.len()];
        return (format!("{scheme}{credentials}:{secret}@{host}"), secret);
    }
    let secret = format!("never-printed-{}", std::process::id());
    (format!("{url} password={secret}"), secret)
}

/// A name no other test run uses (a table, a key), from `prefix`.
pub fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000
    )
}

/// Nanoseconds since the epoch, as `date +%s%N` prints them.
pub fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Polls `done` every 5 ms; fails the test naming `what` after `limit`.
pub fn wait_for(what: &str, limit: std::time::Duration, mut done: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + limit;
    while !done() {
        assert!(
            std::time::Instant::now() < until,
            "{what}: not within {limit:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

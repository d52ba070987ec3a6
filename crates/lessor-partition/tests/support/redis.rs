//! What the Redis fleet test and benchmark share: the server's URL (or a skip), and a fresh
//! prefix behind a store that counts every request.

use std::io::Write as _;
use std::sync::Arc;
use std::time::SystemTime;

use lease_core::conformance::CountedBackend;
use lease_redis::RedisLeases;

/// Where Redis answers (as `cargo xtask test` and `cargo xtask bench` set it).
pub(crate) const URL_ENV: &str = "LEASE_REDIS_URL";

/// The server's URL from `LEASE_REDIS_URL`; without it, prints `SKIPPED:` to stderr and returns
/// `None`, unless `LEASE_REQUIRE_REDIS=1`, which makes it panic.
pub(crate) fn url(what: &str) -> Option<String> {
    if let Ok(url) = std::env::var(URL_ENV)
        && !url.is_empty()
    {
        return Some(url);
    }
    let why = format!("{what}: set {URL_ENV} or run cargo xtask test");
    if std::env::var("LEASE_REQUIRE_REDIS").is_ok_and(|v| v == "1") {
        panic!("Redis required (LEASE_REQUIRE_REDIS=1) but unavailable: {why}");
    }
    // Straight to the process's stderr: libtest captures eprintln! of passing tests.
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
    None
}

/// A fresh key prefix `<prefix>_<unix ms>_<pid>` on the server at `url`, behind a store that
/// counts every request and every record its reads return (one request is one script or
/// command, one round trip, on the wire). Nothing to create: a prefix is its keys.
pub(crate) async fn counted_prefix(url: &str, prefix: &str) -> Arc<CountedBackend> {
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let prefix = format!("{prefix}_{stamp}_{}", std::process::id());
    // As the `lease` command builds it: connections from the URL, and pub/sub wake-ups.
    let leases = RedisLeases::builder_for_url(url, prefix.as_str())
        .and_then(|builder| builder.build())
        .expect("leases on LEASE_REDIS_URL");
    Arc::new(CountedBackend::new(Arc::new(leases)))
}

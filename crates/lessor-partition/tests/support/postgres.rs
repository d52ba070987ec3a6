//! What the PostgreSQL fleet test and benchmark share: the server's URL (or a skip), and a fresh
//! table behind a store that counts every request.

use std::io::Write as _;
use std::sync::Arc;
use std::time::SystemTime;

use lease_core::conformance::CountedBackend;
use lease_postgres::PgLeases;

/// Where PostgreSQL answers (as `cargo xtask test` and `cargo xtask bench` set it).
pub(crate) const URL_ENV: &str = "LEASE_POSTGRES_URL";

/// The server's URL from `LEASE_POSTGRES_URL`; without it, prints `SKIPPED:` to stderr and
/// returns `None`, unless `LEASE_REQUIRE_POSTGRES=1`, which makes it panic.
pub(crate) fn url(what: &str) -> Option<String> {
    if let Ok(url) = std::env::var(URL_ENV)
        && !url.is_empty()
    {
        return Some(url);
    }
    let why = format!("{what}: set {URL_ENV} or run cargo xtask test");
    if std::env::var("LEASE_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") {
        panic!("PostgreSQL required (LEASE_REQUIRE_POSTGRES=1) but unavailable: {why}");
    }
    // Straight to the process's stderr: libtest captures eprintln! of passing tests.
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
    None
}

/// A fresh table `<prefix>_<unix ms>` on the server at `url`, behind a store that counts every
/// request and every record its reads return (one request is one statement on the wire).
pub(crate) async fn counted_table(url: &str, prefix: &str) -> Arc<CountedBackend> {
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let table = format!("{prefix}_{stamp}_{}", std::process::id());
    // As the `lease` command builds it: a pool, and a LISTEN connection to the same server.
    let leases = PgLeases::builder_for_url(url, table.as_str())
        .and_then(|builder| builder.build())
        .expect("leases on LEASE_POSTGRES_URL");
    lease_postgres::create_table(leases.pool(), &table)
        .await
        .expect("table on PostgreSQL");
    Arc::new(CountedBackend::new(Arc::new(leases)))
}

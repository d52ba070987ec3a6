//! Shared by every PostgreSQL test file (and the benchmark): finding the server, a fresh table
//! per test, and a loopback proxy that loses replies for real (the statement commits, the
//! client's connection drops before the reply reaches it).
//!
//! Server: `LEASE_POSTGRES_URL` (`cargo xtask test` sets it, starting a throwaway server);
//! without it the test prints `SKIPPED: <test>: ...` to stderr and returns, or fails when
//! `LEASE_REQUIRE_POSTGRES=1`.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

pub mod proxy;

use std::io::Write as _;
use std::str::FromStr;
use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use lease_postgres::{PgLeases, PgLeasesBuilder};
use tokio_postgres::Config;

pub use proxy::Proxy;

/// The environment variable naming the server.
pub const URL_ENV: &str = "LEASE_POSTGRES_URL";
/// Set to `1` to fail instead of skipping when no server can be had.
pub const REQUIRE_ENV: &str = "LEASE_REQUIRE_POSTGRES";

/// The server to test against, or `None` after printing why the test is skipped.
///
/// # Panics
/// When none can be had and `LEASE_REQUIRE_POSTGRES=1`.
pub fn url(test: &str) -> Option<String> {
    if let Ok(url) = std::env::var(URL_ENV)
        && !url.is_empty()
    {
        return Some(url);
    }
    let why = format!("{test}: set {URL_ENV} (a PostgreSQL URL) or run cargo xtask test");
    if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") {
        panic!("PostgreSQL required ({REQUIRE_ENV}=1) but unavailable: {why}");
    }
    // Written to the process's stderr directly: libtest captures `eprintln!` of passing tests,
    // and a skip must be visible.
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
    None
}

/// A multi-threaded runtime for one test.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `test` on a runtime of its own with the server's URL, or skips it.
pub fn run<F: std::future::Future<Output = ()>>(name: &str, test: impl FnOnce(String) -> F) {
    let Some(url) = url(name) else { return };
    runtime().block_on(test(url));
}

/// The driver's configuration of `url`, pointed at `port` on loopback instead when given.
pub fn config(url: &str, port: Option<u16>) -> Config {
    let parsed = Config::from_str(url).unwrap();
    let Some(port) = port else { return parsed };
    let mut config = Config::new();
    config.host("127.0.0.1").port(port);
    if let Some(user) = parsed.get_user() {
        config.user(user);
    }
    if let Some(db) = parsed.get_dbname() {
        config.dbname(db);
    }
    if let Some(password) = parsed.get_password() {
        config.password(password);
    }
    config.connect_timeout(std::time::Duration::from_secs(2));
    config
}

/// A plain-text pool on `config`.
pub fn pool(config: Config) -> Pool {
    let manager = Manager::from_config(
        config,
        tokio_postgres::NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager).max_size(16).build().unwrap()
}

/// A table name no other test uses.
pub fn table_name(prefix: &str) -> String {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    format!("lt_{prefix}_{}", &nonce[..12])
}

/// A fresh lease table on `url`'s server.
pub async fn fresh_table(url: &str, prefix: &str) -> String {
    let table = table_name(prefix);
    lease_postgres::create_table(&pool(config(url, None)), &table)
        .await
        .unwrap();
    table
}

/// A connection of its own to `url`, for the tests' own statements.
pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = config(url, None)
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// Runs `sql` on its own connection to `url`.
pub async fn psql(url: &str, sql: &str) {
    connect(url).await.batch_execute(sql).await.unwrap();
}

/// Drops `table` (best effort: the test is over).
pub async fn drop_table(url: &str, table: &str) {
    let Ok((client, connection)) = config(url, None).connect(tokio_postgres::NoTls).await else {
        return;
    };
    tokio::spawn(connection);
    let _ = client
        .batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))
        .await;
}

/// A manager on a fresh table, its statements through a fault proxy, its `LISTEN`
/// connection direct; `configure` adds options.
pub async fn leases(
    url: &str,
    prefix: &str,
    configure: impl FnOnce(PgLeasesBuilder) -> PgLeasesBuilder,
) -> (PgLeases, Arc<Proxy>, String) {
    let table = fresh_table(url, prefix).await;
    let proxy = Proxy::start(url).await;
    let mut through_proxy = config(url, Some(proxy.port()));
    // So a test can find (and terminate) this manager's server connections.
    through_proxy.application_name(&table);
    let leases = configure(
        PgLeases::builder(pool(through_proxy), &table).with_listener_config(config(url, None)),
    )
    .build()
    .unwrap();
    (leases, proxy, table)
}

/// What every store loss under a holder must come to, once `lease`'s grant is gone: `contender`
/// is refused (`Held`) from now until the recreation grace `grace` has passed on `clock`, the
/// holder learns at its next renewal (through `renewer`) that its row is gone, and the first
/// grant after the grace is above the lost holder's token.
pub async fn refused_until_the_grace_ends(
    contender: &PgLeases,
    renewer: &PgLeases,
    lease: &lease_core::Lease,
    clock: &lease_core::ManualClock,
    grace: std::time::Duration,
) {
    use lease_core::{AcquireOptions, LeaseBackend, NotOwnedReason};
    use std::time::Duration;
    let (key, d, once) = (lease.key(), lease.duration(), AcquireOptions::default());
    let err = contender.try_acquire(key, d, &once).await.unwrap_err();
    assert!(
        err.is_held(),
        "no grant in the new incarnation's grace: {err}"
    );
    let lost = renewer.renew(lease, d).await.unwrap_err();
    assert_eq!(
        lost.not_owned_reason(),
        Some(NotOwnedReason::Missing),
        "{lost}"
    );
    // Past the holder's lease, still inside the grace: nobody yet.
    clock.advance(grace - Duration::from_secs(1));
    let err = contender.try_acquire(key, d, &once).await.unwrap_err();
    assert!(err.is_held(), "a grant inside the grace: {err}");
    clock.advance(Duration::from_secs(2));
    let next = contender.try_acquire(key, d, &once).await.unwrap();
    assert!(
        next.fencing_token() > lease.fencing_token(),
        "tokens never repeat or go back across the loss: {} after {}",
        next.fencing_token(),
        lease.fencing_token()
    );
}

/// A key's first grant in a new table with a recreation grace: refused (`Held`) until `grace`
/// has passed on `clock`, like any new incarnation, then granted to `holder`.
pub async fn granted_after_the_new_table_grace(
    holder: &PgLeases,
    key: &lease_core::LeaseKey,
    d: std::time::Duration,
    clock: &lease_core::ManualClock,
    grace: std::time::Duration,
) -> lease_core::Lease {
    use lease_core::{AcquireOptions, LeaseBackend};
    let once = AcquireOptions::default();
    let err = holder.try_acquire(key, d, &once).await.unwrap_err();
    assert!(err.is_held(), "a new table waits out the grace: {err}");
    clock.advance(grace + std::time::Duration::from_secs(1));
    holder.try_acquire(key, d, &once).await.unwrap()
}

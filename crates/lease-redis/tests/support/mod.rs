//! Shared by every Redis test file: finding a server, a fresh key prefix per test, and a
//! loopback proxy that counts commands and loses replies for real (the script runs, the
//! client's connection drops before the reply reaches it).
//!
//! Server: the one `LEASE_REDIS_URL` names (`cargo xtask test` and `cargo xtask itest` provision
//! it), shared by every test, each on a key prefix of its own; without it the test prints
//! `SKIPPED: <test>: ...` to stderr and returns, or fails when `LEASE_REQUIRE_REDIS=1`. The
//! faults that restart, pause or fail over a server start private ones (`tests/private/`, through
//! lease-testservers, which is never published: those files are left out of the package, and
//! this module needs nothing of it).
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

pub mod proxy;

use std::io::Write as _;
use std::sync::Arc;

use lease_redis::{RedisLeases, RedisLeasesBuilder};

pub use proxy::Proxy;

/// The environment variable naming the server.
pub const URL_ENV: &str = "LEASE_REDIS_URL";
/// Set to `1` to fail instead of skipping when no server can be had.
pub const REQUIRE_ENV: &str = "LEASE_REQUIRE_REDIS";

/// The server `LEASE_REDIS_URL` names.
#[derive(Debug)]
pub struct Server {
    pub url: String,
}

fn required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1")
}

/// Says why `test` is skipped (or fails, with `LEASE_REQUIRE_REDIS=1`).
pub fn skip(test: &str, why: &str) {
    if required() {
        panic!("Redis required ({REQUIRE_ENV}=1) but unavailable: {test}: {why}");
    }
    // Written to the process's stderr directly: libtest captures `eprintln!` of passing tests,
    // and a skip must be visible.
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
}

/// The server to test against, or `None` after printing why the test is skipped.
pub fn server(test: &str) -> Option<Server> {
    match std::env::var(URL_ENV) {
        Ok(url) if !url.is_empty() => Some(Server { url }),
        _ => {
            skip(
                test,
                &format!("{URL_ENV} is not set (`cargo xtask itest` provisions Redis)"),
            );
            None
        }
    }
}

/// A multi-threaded runtime for one test.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `test` on a runtime of its own with a server's URL, or skips it.
pub fn run<F: std::future::Future<Output = ()>>(name: &str, test: impl FnOnce(String) -> F) {
    let Some(server) = server(name) else { return };
    runtime().block_on(test(server.url.clone()));
    drop(server);
}

/// A key prefix no other test uses.
pub fn prefix(name: &str) -> String {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    format!("lt-{name}-{}", &nonce[..12])
}

/// The host and port of a `redis://host:port` URL.
pub fn host_port(url: &str) -> (String, u16) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let rest = rest.split('/').next().unwrap_or(rest);
    match rest.rsplit_once(':') {
        Some((host, port)) => (host.to_owned(), port.parse().unwrap()),
        None => (rest.to_owned(), 6379),
    }
}

/// `url` pointed at `port` on loopback (credentials and database kept).
pub fn via(url: &str, port: u16) -> String {
    let (host, old) = host_port(url);
    url.replacen(&format!("{host}:{old}"), &format!("127.0.0.1:{port}"), 1)
}

/// A manager on a fresh prefix, its calls through a fault proxy; `configure` adds options.
pub async fn leases(
    url: &str,
    name: &str,
    configure: impl FnOnce(RedisLeasesBuilder) -> RedisLeasesBuilder,
) -> (RedisLeases, Arc<Proxy>, String) {
    let prefix = prefix(name);
    let proxy = Proxy::start(url).await;
    let leases = configure(RedisLeases::builder_for_url(&via(url, proxy.port()), &prefix).unwrap())
        .build()
        .unwrap();
    (leases, proxy, prefix)
}

/// A direct connection to `url`, for the tests' own commands.
pub async fn connect(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// What every store loss under a holder must come to, once `lease`'s grant is gone: `contender`
/// is refused (`Held`) from now until the recreation grace `grace` has passed on `clock`, the
/// holder learns at its next renewal (through `renewer`) that its hash is gone, and the first
/// grant after the grace is above the lost holder's token.
pub async fn refused_until_the_grace_ends(
    contender: &RedisLeases,
    renewer: &RedisLeases,
    lease: &lease_core::Lease,
    clock: &lease_core::ManualClock,
    grace: std::time::Duration,
) -> lease_core::Lease {
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
    next
}

/// A key's first grant under a new prefix with a recreation grace: refused (`Held`) until
/// `grace` has passed on `clock`, like any new incarnation, then granted to `holder`.
pub async fn granted_after_the_first_grace(
    holder: &RedisLeases,
    key: &lease_core::LeaseKey,
    d: std::time::Duration,
    clock: &lease_core::ManualClock,
    grace: std::time::Duration,
) -> lease_core::Lease {
    use lease_core::{AcquireOptions, LeaseBackend};
    let once = AcquireOptions::default();
    let err = holder.try_acquire(key, d, &once).await.unwrap_err();
    assert!(err.is_held(), "a new prefix waits out the grace: {err}");
    clock.advance(grace + std::time::Duration::from_secs(1));
    holder.try_acquire(key, d, &once).await.unwrap()
}

//! Faults that need a server of their own (`lease-testservers`: the distribution's
//! `redis-server`, a throwaway one per test, on a free loopback port): restarted empty under a
//! holder, restarted from its append-only file, its scripts flushed, its connections killed, and
//! a replica promoted after it missed the holder's acquisition. No two holders, no repeated or
//! lower token. Skipped, saying why, without `redis-server` (unless `LEASE_REQUIRE_REDIS=1`).
#![allow(clippy::unwrap_used)]

mod private;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, ManualClock};
use lease_redis::{RedisLeases, RetryPolicy};
use lease_testservers::RedisOptions;

const D: Duration = Duration::from_secs(10);
const GRACE: Duration = Duration::from_secs(30);

fn manager(url: &str, prefix: &str, clock: &Arc<ManualClock>, grace: Duration) -> RedisLeases {
    RedisLeases::builder_for_url(url, prefix)
        .unwrap()
        .with_clock(clock.clone())
        .with_recreation_grace(grace)
        .with_retry_policy(
            RetryPolicy::default()
                .with_max_attempts(3)
                .with_backoff(Duration::from_millis(5), Duration::from_millis(20))
                .with_attempt_timeout(Duration::from_millis(800)),
        )
        .build()
        .unwrap()
}

/// Blocking server control from inside the runtime.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

#[test]
fn a_server_restarted_empty_grants_nothing_until_the_grace_ends() {
    let Some(mut server) = private::private("a_server_restarted_empty_grants_nothing") else {
        return;
    };
    support::runtime().block_on(async {
        let (url, prefix) = (server.url(), support::prefix("empty"));
        let clock = Arc::new(ManualClock::new());
        let holder = manager(&url, &prefix, &clock, GRACE);
        let contender = manager(&url, &prefix, &clock, GRACE);
        let key = LeaseKey::new("restarted").unwrap();
        let lease = support::granted_after_the_first_grace(&holder, &key, D, &clock, GRACE).await;
        let err = contender
            .try_acquire(&key, D, &AcquireOptions::default())
            .await
            .unwrap_err();
        assert!(err.is_held(), "{err}");

        blocking(|| server.stop()).unwrap();
        blocking(|| server.start_again()).unwrap();
        let next =
            support::refused_until_the_grace_ends(&contender, &holder, &lease, &clock, GRACE).await;
        // And grants go on as usual afterwards.
        let err = holder
            .try_acquire(&key, D, &AcquireOptions::default())
            .await
            .unwrap_err();
        assert!(err.is_held(), "{err}");
        contender
            .release(next.key(), next.token(), next.fencing_token())
            .await
            .unwrap();
    });
}

#[test]
fn a_server_restarted_from_its_append_only_file_keeps_its_holder() {
    let test = "restarted_from_its_append_only_file";
    let Some(mut server) = private::private_with(test, RedisOptions::new().with_appendonly())
    else {
        return;
    };
    support::runtime().block_on(async {
        let (url, prefix) = (server.url(), support::prefix("aof"));
        let clock = Arc::new(ManualClock::new());
        // No grace: a restart that lost nothing keeps its holder.
        let holder = manager(&url, &prefix, &clock, Duration::ZERO);
        let other = manager(&url, &prefix, &clock, Duration::ZERO);
        let key = LeaseKey::new("restarted").unwrap();
        let once = AcquireOptions::default();
        let lease = holder.try_acquire(&key, D, &once).await.unwrap();

        blocking(|| server.stop()).unwrap();
        let started = Instant::now();
        let err = holder.renew(&lease, D).await.unwrap_err();
        assert!(
            err.is_transient(),
            "a stopped server is a transient failure: {err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "bounded by the retry policy"
        );

        blocking(|| server.start_again()).unwrap();
        let renewed = holder.renew(&lease, D).await.unwrap();
        assert_eq!(
            renewed.fencing_token(),
            lease.fencing_token(),
            "the same tenure"
        );
        let err = other.try_acquire(&key, D, &once).await.unwrap_err();
        assert!(err.is_held(), "the holder survived the restart: {err}");
        clock.advance(D + Duration::from_millis(1));
        let next = other.try_acquire(&key, D, &once).await.unwrap();
        assert!(next.fencing_token() > lease.fencing_token());

        // With a grace, any restart is a new incarnation (run_id changes): the grace is waited
        // out even though the append-only file lost nothing this time.
        let careful = manager(&url, &support::prefix("aof-grace"), &clock, GRACE);
        let lease = support::granted_after_the_first_grace(&careful, &key, D, &clock, GRACE).await;
        blocking(|| server.stop()).unwrap();
        blocking(|| server.start_again()).unwrap();
        let err = careful.try_acquire(&key, D, &once).await.unwrap_err();
        assert!(err.is_held(), "a restart starts a new incarnation: {err}");
        let renewed = careful.renew(&lease, D).await.unwrap();
        assert_eq!(
            renewed.fencing_token(),
            lease.fencing_token(),
            "the holder kept its lease"
        );
    });
}

#[test]
fn flushed_scripts_and_killed_connections_cost_a_retry() {
    let Some(server) = private::private("flushed_scripts_and_killed_connections") else {
        return;
    };
    support::runtime().block_on(async {
        let (url, prefix) = (server.url(), support::prefix("flush"));
        let clock = Arc::new(ManualClock::new());
        let holder = manager(&url, &prefix, &clock, Duration::ZERO);
        let key = LeaseKey::new("flushed").unwrap();
        let once = AcquireOptions::default();
        let lease = holder.try_acquire(&key, D, &once).await.unwrap();

        blocking(|| server.command(&["SCRIPT", "FLUSH"])).unwrap();
        let lease = holder.renew(&lease, D).await.unwrap();
        let err = holder.try_acquire(&key, D, &once).await.unwrap_err();
        assert!(err.is_held(), "the acquire script loads again: {err}");

        blocking(|| server.command(&["CLIENT", "KILL", "TYPE", "normal"])).unwrap();
        let lease = holder.renew(&lease, D).await.unwrap();
        blocking(|| server.command(&["CLIENT", "KILL", "TYPE", "normal"])).unwrap();
        blocking(|| server.command(&["SCRIPT", "FLUSH"])).unwrap();
        holder
            .release(lease.key(), lease.token(), lease.fencing_token())
            .await
            .unwrap();
        let again = holder.try_acquire(&key, D, &once).await.unwrap();
        assert!(again.fencing_token() > lease.fencing_token());
    });
}

#[test]
fn a_replica_promoted_after_missing_the_last_grant_waits_out_the_grace() {
    let test = "a_replica_promoted_after_missing_the_last_grant";
    let Some(mut primary) = private::private(test) else {
        return;
    };
    let replica = primary.replica().unwrap();
    support::runtime().block_on(async {
        let prefix = support::prefix("failover");
        let clock = Arc::new(ManualClock::new());
        let holder = manager(&primary.url(), &prefix, &clock, GRACE);
        let seen = LeaseKey::new("seen-by-the-replica").unwrap();
        let missed = LeaseKey::new("missed-by-the-replica").unwrap();
        let a = support::granted_after_the_first_grace(&holder, &seen, D, &clock, GRACE).await;
        blocking(|| primary.command(&["WAIT", "1", "5000"])).unwrap();

        blocking(|| replica.detach()).unwrap();
        let b = holder
            .try_acquire(&missed, D, &AcquireOptions::default())
            .await
            .unwrap();
        blocking(|| primary.kill()).unwrap();
        blocking(|| replica.promote()).unwrap();

        // Clients follow the failover to the promoted replica.
        let contender = manager(&replica.url(), &prefix, &clock, GRACE);
        let renewer = manager(&replica.url(), &prefix, &clock, GRACE);
        let err = contender
            .try_acquire(&seen, D, &AcquireOptions::default())
            .await
            .unwrap_err();
        assert!(
            err.is_held(),
            "the key the replica saw is refused too: {err}"
        );
        let next =
            support::refused_until_the_grace_ends(&contender, &renewer, &b, &clock, GRACE).await;
        assert!(next.fencing_token() > a.fencing_token());
    });
}

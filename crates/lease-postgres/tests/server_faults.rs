//! Faults that need a server of their own (`lease-testservers`: the distribution's binaries, a
//! throwaway cluster per test): the server stopped (fast and immediate) and started again under
//! a holder, and a streaming replica promoted after it missed the holder's acquisition. No two
//! holders, no repeated or lower token. Skipped like every suite here without
//! `LEASE_POSTGRES_URL` (and without the server binaries, unless `LEASE_REQUIRE_POSTGRES=1`).
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, ManualClock};
use lease_postgres::{PgLeases, RetryPolicy};
use lease_testservers::{PgCluster, StopMode};

const D: Duration = Duration::from_secs(10);

/// A private cluster, or `None` after saying why the test is skipped.
fn cluster(test: &str) -> Option<PgCluster> {
    support::url(test)?;
    match PgCluster::start() {
        Ok(cluster) => Some(cluster),
        Err(e) if std::env::var(support::REQUIRE_ENV).is_ok_and(|v| v == "1") => {
            panic!("{test}: a private PostgreSQL cluster could not start: {e}")
        }
        Err(e) => {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {test}: no private cluster: {e}"
            );
            None
        }
    }
}

fn manager(url: &str, table: &str, clock: &Arc<ManualClock>, grace: Duration) -> PgLeases {
    PgLeases::builder(support::pool(support::config(url, None)), table)
        .with_clock(clock.clone())
        .with_recreation_grace(grace)
        .with_retry_policy(
            RetryPolicy::default()
                .with_max_attempts(2)
                .with_backoff(Duration::from_millis(5), Duration::from_millis(20))
                .with_attempt_timeout(Duration::from_millis(800)),
        )
        .build()
        .unwrap()
}

/// Blocking cluster control from inside the runtime.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn stopped_and_restarted_under_a_holder(test: &str, mode: StopMode) {
    let Some(mut cluster) = cluster(test) else {
        return;
    };
    support::runtime().block_on(async {
        let url = cluster.url();
        let table = support::fresh_table(&url, "restart").await;
        let clock = Arc::new(ManualClock::new());
        let holder = manager(&url, &table, &clock, Duration::ZERO);
        let other = manager(&url, &table, &clock, Duration::ZERO);
        let key = LeaseKey::new("restarted").unwrap();
        let once = AcquireOptions::default();
        let lease = holder.try_acquire(&key, D, &once).await.unwrap();

        blocking(|| cluster.stop(mode)).unwrap();
        let started = Instant::now();
        let err = holder.renew(&lease, D).await.unwrap_err();
        assert!(
            err.is_transient(),
            "a stopped server is a transient failure: {err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "bounded by the retry policy"
        );
        let err = other.try_acquire(&key, D, &once).await.unwrap_err();
        assert!(!err.is_held() && err.is_transient(), "{err}");

        blocking(|| cluster.start_again()).unwrap();
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
    });
}

#[test]
fn a_server_stopped_fast_and_restarted_keeps_its_holder() {
    stopped_and_restarted_under_a_holder(
        "a_server_stopped_fast_and_restarted_keeps_its_holder",
        StopMode::Fast,
    );
}

#[test]
fn a_server_stopped_immediately_and_restarted_keeps_its_holder() {
    stopped_and_restarted_under_a_holder(
        "a_server_stopped_immediately_and_restarted_keeps_its_holder",
        StopMode::Immediate,
    );
}

/// Waits until `replica` has replayed everything `primary` has written so far.
async fn caught_up(primary: &str, replica: &str) {
    let lsn: String = support::connect(primary)
        .await
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    let replica = support::connect(replica).await;
    let started = Instant::now();
    loop {
        let done: bool = replica
            .query_one(
                "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                &[&lsn],
            )
            .await
            .unwrap()
            .get(0);
        if done {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the replica never caught up"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn a_promoted_replica_that_missed_the_last_write_grants_nothing_until_the_grace_ends() {
    let test = "a_promoted_replica_that_missed_the_last_write_grants_nothing_until_the_grace_ends";
    let Some(mut primary) = cluster(test) else {
        return;
    };
    let replica = blocking(|| primary.replica()).unwrap();
    support::runtime().block_on(async {
        let (p_url, r_url) = (primary.url(), replica.url());
        let grace = Duration::from_secs(30);
        let table = support::fresh_table(&p_url, "failover").await;
        let clock = Arc::new(ManualClock::new());
        let holder = manager(&p_url, &table, &clock, grace);
        let key = LeaseKey::new("failed-over").unwrap();
        let once = AcquireOptions::default();
        // The incarnation the replica knows: the grace of the new table served, one tenure.
        let first =
            support::granted_after_the_new_table_grace(&holder, &key, D, &clock, grace).await;
        holder
            .release(first.key(), first.token(), first.fencing_token())
            .await
            .unwrap();
        caught_up(&p_url, &r_url).await;

        // The replica stops receiving WAL; the primary then grants the key once more.
        let r_admin = support::connect(&r_url).await;
        for sql in [
            "ALTER SYSTEM SET primary_conninfo = ''",
            "SELECT pg_reload_conf()",
        ] {
            r_admin.simple_query(sql).await.unwrap();
        }
        let started = Instant::now();
        while r_admin
            .query_one("SELECT count(*) FROM pg_stat_wal_receiver", &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
            > 0
        {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the receiver never stopped"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let lease = holder.try_acquire(&key, D, &once).await.unwrap();
        blocking(|| primary.stop(StopMode::Immediate)).unwrap();
        blocking(|| replica.promote()).unwrap();
        let missed = leases_record(&r_url, &table, &key).await;
        assert_eq!(
            missed,
            Some(first.fencing_token().get()),
            "the fault: the replica missed the grant"
        );

        // Clients fail over to the promoted replica.
        let contender = manager(&r_url, &table, &clock, grace);
        let moved = manager(&r_url, &table, &clock, grace);
        support::refused_until_the_grace_ends(&contender, &moved, &lease, &clock, grace).await;
    });
}

/// The fencing counter of `key`'s row on `url`.
async fn leases_record(url: &str, table: &str, key: &LeaseKey) -> Option<u64> {
    let row = support::connect(url)
        .await
        .query_opt(
            &format!("SELECT fencing FROM \"{table}\" WHERE kind = 'lease' AND partition = $1"),
            &[&key.partition()],
        )
        .await
        .unwrap()?;
    Some(u64::try_from(row.get::<_, i64>(0)).unwrap())
}

/// `synchronous_commit = off`: the server acknowledges a commit before its WAL reaches the disk,
/// so stopping it immediately loses the last grants while the cluster, timeline and table stay
/// the same. The restart is the new incarnation then (the postmaster's start time is part of it
/// while commits are asynchronous): no key is granted until the grace ends, and the holder whose
/// grant vanished is never joined by a second one before it stops trusting its lease.
#[test]
fn asynchronous_commits_lost_in_a_crash_grant_nothing_until_the_grace_ends() {
    let test = "asynchronous_commits_lost_in_a_crash_grant_nothing_until_the_grace_ends";
    let Some(mut cluster) = cluster(test) else {
        return;
    };
    support::runtime().block_on(async {
        let url = cluster.url();
        let grace = Duration::from_secs(30);
        // The WAL writer flushes asynchronous commits every wal_writer_delay: 10 s leaves the
        // grant below in memory only, which the immediate stop then throws away.
        for sql in [
            "ALTER SYSTEM SET synchronous_commit = off",
            "ALTER SYSTEM SET wal_writer_delay = '10s'",
            "ALTER SYSTEM SET wal_writer_flush_after = 0",
            "SELECT pg_reload_conf()",
        ] {
            support::psql(&url, sql).await;
        }
        let table = support::fresh_table(&url, "asynccommit").await;
        let clock = Arc::new(ManualClock::new());
        let holder = manager(&url, &table, &clock, grace);
        let key = LeaseKey::new("async-commit").unwrap();
        let once = AcquireOptions::default();
        // The new table's grace, served; its incarnation row then made durable.
        assert!(
            holder
                .try_acquire(&key, D, &once)
                .await
                .unwrap_err()
                .is_held()
        );
        clock.advance(grace + Duration::from_secs(1));
        support::psql(&url, "CHECKPOINT").await;
        let lease = holder.try_acquire(&key, D, &once).await.unwrap();

        blocking(|| cluster.stop(StopMode::Immediate)).unwrap();
        blocking(|| cluster.start_again()).unwrap();
        assert_eq!(
            leases_record(&url, &table, &key).await,
            None,
            "the fault: the acknowledged grant was lost with the server's memory"
        );

        // A restart that lost acknowledged commits is a new incarnation.
        let contender = manager(&url, &table, &clock, grace);
        support::refused_until_the_grace_ends(&contender, &holder, &lease, &clock, grace).await;
    });
}

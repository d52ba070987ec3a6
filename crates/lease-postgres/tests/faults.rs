//! Faults placed on purpose on the shared server, each under a holder: its connection killed
//! (`pg_terminate_backend`) idle and in the middle of a statement, a statement cancelled by
//! `statement_timeout`, a lost reply, and the table truncated or dropped and recreated. No two
//! holders, no repeated or lower token, and a holder that can no longer renew learns it. The
//! faults that need a server of their own (stopped, restarted, failed over) are in
//! `server_faults.rs`.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, ManualClock};
use lease_postgres::{PgLeases, RetryPolicy};

const D: Duration = Duration::from_secs(10);

fn quick_retries() -> RetryPolicy {
    RetryPolicy::default()
        .with_max_attempts(3)
        .with_backoff(Duration::from_millis(5), Duration::from_millis(50))
        .with_attempt_timeout(Duration::from_secs(2))
}

/// A second manager on the same table, as another process would have (statements direct).
fn contender(url: &str, table: &str, clock: &Arc<ManualClock>, grace: Duration) -> PgLeases {
    PgLeases::builder(support::pool(support::config(url, None)), table)
        .with_clock(clock.clone())
        .with_recreation_grace(grace)
        .build()
        .unwrap()
}

/// Terminates the server connections of the manager whose pool is named `table`, waiting for
/// a lock when `waiting` (a statement in flight); returns how many.
async fn terminate(url: &str, table: &str, waiting: bool) -> i64 {
    let admin = support::connect(url).await;
    let filter = if waiting {
        "AND wait_event_type = 'Lock'"
    } else {
        ""
    };
    let row = admin
        .query_one(
            &format!(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE application_name = $1 {filter}"
            ),
            &[&table],
        )
        .await
        .unwrap();
    row.get(0)
}

/// Locks `key`'s row from another connection until the returned client commits.
async fn lock_row(url: &str, table: &str, key: &LeaseKey) -> tokio_postgres::Client {
    let locker = support::connect(url).await;
    locker.batch_execute("BEGIN").await.unwrap();
    locker
        .execute(
            &format!(
                "SELECT 1 FROM \"{table}\" WHERE kind = 'lease' AND partition = $1 FOR UPDATE"
            ),
            &[&key.partition()],
        )
        .await
        .unwrap();
    locker
}

#[test]
fn a_killed_connection_is_replaced_and_the_holder_keeps_its_lease() {
    support::run(
        "a_killed_connection_is_replaced_and_the_holder_keeps_its_lease",
        |url| async move {
            let clock = Arc::new(ManualClock::new());
            let (leases, _proxy, table) = support::leases(&url, "kill", |b| {
                b.with_clock(clock.clone())
                    .with_retry_policy(quick_retries())
            })
            .await;
            let key = LeaseKey::new("killed").unwrap();
            let once = AcquireOptions::default();
            let lease = leases.try_acquire(&key, D, &once).await.unwrap();

            // Idle: every pooled connection is terminated between two statements.
            assert!(
                terminate(&url, &table, false).await >= 1,
                "the fault was placed"
            );
            let lease = leases.renew(&lease, D).await.unwrap();

            // In flight: the renewal waits on a row lock when its connection is terminated.
            let locker = lock_row(&url, &table, &key).await;
            let renewing = {
                let (leases, lease) = (leases.clone(), lease.clone());
                tokio::spawn(async move { leases.renew(&lease, D).await })
            };
            let started = Instant::now();
            while terminate(&url, &table, true).await == 0 {
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "the renewal never waited"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            locker.batch_execute("COMMIT").await.unwrap();
            let renewed = renewing.await.unwrap().unwrap();
            assert_eq!(renewed.fencing_token(), lease.fencing_token());

            let other = contender(&url, &table, &clock, Duration::ZERO);
            let err = other.try_acquire(&key, D, &once).await.unwrap_err();
            assert!(err.is_held(), "still held by the first holder: {err}");
            support::drop_table(&url, &table).await;
        },
    );
}

#[test]
fn a_statement_timeout_is_a_transient_failure_that_changes_nothing() {
    support::run(
        "a_statement_timeout_is_a_transient_failure_that_changes_nothing",
        |url| async move {
            let clock = Arc::new(ManualClock::new());
            let table = support::fresh_table(&url, "stmt_timeout").await;
            let mut config = support::config(&url, None);
            config.options("-c statement_timeout=150");
            let leases = PgLeases::builder(support::pool(config), &table)
                .with_clock(clock.clone())
                .with_retry_policy(quick_retries().with_max_attempts(2))
                .build()
                .unwrap();
            let key = LeaseKey::new("slow").unwrap();
            let once = AcquireOptions::default();
            let lease = leases.try_acquire(&key, D, &once).await.unwrap();
            let before = leases.inspect(&key).await.unwrap().unwrap();

            let locker = lock_row(&url, &table, &key).await;
            clock.advance(Duration::from_secs(1));
            let started = Instant::now();
            let err = leases.renew(&lease, D).await.unwrap_err();
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "bounded by the server's timeout"
            );
            assert!(
                err.is_transient(),
                "a cancelled statement may be retried: {err}"
            );
            assert!(!err.is_not_owned(), "and says nothing of ownership: {err}");
            let pg = std::error::Error::source(&err)
                .and_then(|s| s.downcast_ref::<lease_postgres::PgError>())
                .expect("a PgError under the backend error");
            assert_eq!(pg.kind(), lease_postgres::PgErrorKind::Timeout, "{pg}");
            locker.batch_execute("COMMIT").await.unwrap();

            let after = leases.inspect(&key).await.unwrap().unwrap();
            assert_eq!(
                after.holder().and_then(|h| h.expires_at()),
                before.holder().and_then(|h| h.expires_at()),
                "the cancelled renewal changed nothing"
            );
            leases.renew(&lease, D).await.unwrap();
            support::drop_table(&url, &table).await;
        },
    );
}

#[test]
fn a_lost_acquire_reply_is_reconciled_by_its_request_id() {
    support::run(
        "a_lost_acquire_reply_is_reconciled_by_its_request_id",
        |url| async move {
            let clock = Arc::new(ManualClock::new());
            let (leases, proxy, table) =
                support::leases(&url, "lost", |b| b.with_clock(clock.clone())).await;
            let key = LeaseKey::new("lost").unwrap();
            let once = AcquireOptions::default();
            proxy.faults.lose_replies(1);
            let lease = leases.try_acquire(&key, D, &once).await.unwrap();
            assert_eq!(proxy.faults.lost(), 1, "the reply was lost");
            let record = leases.inspect(&key).await.unwrap().unwrap();
            assert_eq!(record.fencing_token(), Some(lease.fencing_token()));
            assert_eq!(
                record.holder().and_then(|h| h.token()),
                Some(lease.token()),
                "the lease the retry reports is the one the lost attempt wrote"
            );
            // A retry of another call that finds this tenure is not a success.
            proxy.faults.lose_replies(1);
            let err = leases.try_acquire(&key, D, &once).await.unwrap_err();
            assert!(err.is_held(), "{err}");
            support::drop_table(&url, &table).await;
        },
    );
}

/// The table loses its rows under a holder (`wipe`); a contender waits out the grace, the
/// holder learns at its next renewal, and the next token is above the lost one.
async fn wiped_under_a_holder(url: &str, prefix: &str, wipe: impl AsyncFnOnce(&str)) {
    let grace = Duration::from_secs(30);
    let clock = Arc::new(ManualClock::new());
    let (holder, _proxy, table) = support::leases(url, prefix, |b| {
        b.with_clock(clock.clone()).with_recreation_grace(grace)
    })
    .await;
    let other = contender(url, &table, &clock, grace);
    let key = LeaseKey::new("wiped").unwrap();
    let once = AcquireOptions::default();
    // A new table first waits out the grace, like any new incarnation.
    let lease = support::granted_after_the_new_table_grace(&holder, &key, D, &clock, grace).await;

    wipe(&table).await;

    let err = other.try_acquire(&key, D, &once).await.unwrap_err();
    assert!(
        err.holder()
            .and_then(|h| h.owner())
            .is_some_and(|o| o.contains("new incarnation")),
        "the refusal says why: {err}"
    );
    support::refused_until_the_grace_ends(&other, &holder, &lease, &clock, grace).await;
    support::drop_table(url, &table).await;
}

#[test]
fn a_truncated_table_grants_nothing_until_the_grace_ends() {
    support::run(
        "a_truncated_table_grants_nothing_until_the_grace_ends",
        |url| async move {
            let admin = url.clone();
            wiped_under_a_holder(&url, "truncate", async move |table: &str| {
                support::psql(&admin, &format!("TRUNCATE \"{table}\"")).await;
            })
            .await;
        },
    );
}

#[test]
fn a_recreated_table_grants_nothing_until_the_grace_ends() {
    support::run(
        "a_recreated_table_grants_nothing_until_the_grace_ends",
        |url| async move {
            let admin = url.clone();
            wiped_under_a_holder(&url, "recreate", async move |table: &str| {
                support::psql(&admin, &format!("DROP TABLE \"{table}\"")).await;
                let pool = support::pool(support::config(&admin, None));
                lease_postgres::create_table(&pool, table).await.unwrap();
            })
            .await;
        },
    );
}

/// A dump restored into the live table: its rows (the `meta` row with them) are as they were
/// before the holder's grant, in the same cluster, timeline and table; only the file node the
/// `TRUNCATE` of the restore gave the table tells the new incarnation.
#[test]
fn rows_restored_from_a_dump_grant_nothing_until_the_grace_ends() {
    support::run(
        "rows_restored_from_a_dump_grant_nothing_until_the_grace_ends",
        |url| async move {
            let grace = Duration::from_secs(30);
            let clock = Arc::new(ManualClock::new());
            let (holder, _proxy, table) = support::leases(&url, "restore", |b| {
                b.with_clock(clock.clone()).with_recreation_grace(grace)
            })
            .await;
            let other = contender(&url, &table, &clock, grace);
            let key = LeaseKey::new("restored").unwrap();
            let once = AcquireOptions::default();
            let first =
                support::granted_after_the_new_table_grace(&holder, &key, D, &clock, grace).await;
            holder
                .release(first.key(), first.token(), first.fencing_token())
                .await
                .unwrap();
            let dump = format!("{table}_dump");
            support::psql(
                &url,
                &format!("CREATE TABLE \"{dump}\" AS SELECT * FROM \"{table}\""),
            )
            .await;
            let lease = holder.try_acquire(&key, D, &once).await.unwrap();

            support::psql(
                &url,
                &format!(
                    "BEGIN; TRUNCATE \"{table}\"; INSERT INTO \"{table}\" SELECT * FROM \"{dump}\"; \
                     COMMIT; DROP TABLE \"{dump}\""
                ),
            )
            .await;
            let err = other.try_acquire(&key, D, &once).await.unwrap_err();
            assert!(
                err.is_held(),
                "the restored row is free, but the grace holds: {err}"
            );
            let lost = holder.renew(&lease, D).await.unwrap_err();
            assert!(lost.is_not_owned(), "{lost}");
            clock.advance(grace + Duration::from_secs(1));
            let next = other.try_acquire(&key, D, &once).await.unwrap();
            assert!(
                next.fencing_token() > lease.fencing_token(),
                "above the grant the dump missed: {} after {}",
                next.fencing_token(),
                lease.fencing_token()
            );
            support::drop_table(&url, &table).await;
        },
    );
}

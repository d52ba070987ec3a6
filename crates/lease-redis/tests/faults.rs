//! A server that stops answering for longer than an attempt may take (`DEBUG SLEEP` from another
//! connection: the server is busy, the calls queue behind it): every operation's attempts time
//! out, its connections are dropped (the queued script still runs later), and a retry after the
//! server wakes reconciles with the attempt that ran: one tenure, reported once. A private
//! server (`DEBUG` is refused by most shared ones); skipped, saying why, without `redis-server`
//! (unless `LEASE_REQUIRE_REDIS=1`).
#![allow(clippy::unwrap_used)]

mod private;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, ManualClock};
use lease_redis::{RedisLeases, RetryPolicy};

const D: Duration = Duration::from_secs(10);

/// Blocks the server for `pause` from a thread of its own, starting now.
fn sleep_server(
    server: &lease_testservers::RedisServer,
    pause: Duration,
) -> std::thread::JoinHandle<()> {
    let url = server.url();
    let seconds = format!("{:.1}", pause.as_secs_f64());
    let handle = std::thread::spawn(move || {
        let client = redis::Client::open(url).unwrap();
        let mut connection = client.get_connection().unwrap();
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(seconds)
            .query(&mut connection)
            .unwrap();
    });
    // Let the DEBUG SLEEP reach the server first.
    std::thread::sleep(Duration::from_millis(100));
    handle
}

#[test]
fn calls_that_time_out_behind_a_busy_server_are_retried_and_reconciled() {
    let test = "calls_that_time_out_behind_a_busy_server_are_retried_and_reconciled";
    let Some(server) = private::private(test) else {
        return;
    };
    support::runtime().block_on(async {
        let clock = Arc::new(ManualClock::new());
        let leases = RedisLeases::builder_for_url(&server.url(), support::prefix("busy"))
            .unwrap()
            .with_clock(clock.clone())
            .with_retry_policy(
                RetryPolicy::default()
                    .with_max_attempts(8)
                    .with_backoff(Duration::from_millis(50), Duration::from_millis(200))
                    .with_attempt_timeout(Duration::from_millis(300)),
            )
            .build()
            .unwrap();
        let key = LeaseKey::new("busy").unwrap();
        let once = AcquireOptions::default();
        // Warm the scripts, so that the timed-out attempts are the scripts themselves.
        let warm = leases.try_acquire(&key, D, &once).await.unwrap();
        let warm = leases.renew(&warm, D).await.unwrap();
        leases
            .release(warm.key(), warm.token(), warm.fencing_token())
            .await
            .unwrap();

        let pause = Duration::from_millis(1200);
        let sleeper = tokio::task::block_in_place(|| sleep_server(&server, pause));
        let started = Instant::now();
        let lease = leases.try_acquire(&key, D, &once).await.unwrap();
        assert!(
            started.elapsed() >= Duration::from_millis(900),
            "it waited for the server"
        );
        let err = leases.try_acquire(&key, D, &once).await.unwrap_err();
        assert!(err.is_held(), "one tenure, reported once: {err}");
        tokio::task::block_in_place(|| sleeper.join()).unwrap();

        let sleeper = tokio::task::block_in_place(|| sleep_server(&server, pause));
        let lease = leases.renew(&lease, D).await.unwrap();
        tokio::task::block_in_place(|| sleeper.join()).unwrap();

        let sleeper = tokio::task::block_in_place(|| sleep_server(&server, pause));
        leases
            .release(lease.key(), lease.token(), lease.fencing_token())
            .await
            .unwrap();
        tokio::task::block_in_place(|| sleeper.join()).unwrap();
        let record = leases.inspect(&key).await.unwrap().unwrap();
        assert!(record.holder().is_none(), "released");
    });
}

//! Sentinel: the manager asks the Sentinels for the primary whenever it opens a connection.
//! A private primary, its replica and one Sentinel (quorum 1); the primary killed under a
//! holder; once the Sentinel has promoted the replica, the holder's next renewal reaches it,
//! and the failover (a new `run_id`) is a new incarnation: no grant before the grace ends, and
//! the first one after it above every earlier token. Skipped, saying why, without
//! `redis-server` (unless `LEASE_REQUIRE_REDIS=1`).
#![allow(clippy::unwrap_used)]

mod private;
mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, ManualClock, NotOwnedReason};
use lease_redis::{RedisLeases, RetryPolicy};
use redis::sentinel::{SentinelClient, SentinelServerType};

const D: Duration = Duration::from_secs(10);
const GRACE: Duration = Duration::from_secs(30);
const GROUP: &str = "leases";

fn manager(sentinel: &str, prefix: &str, clock: &Arc<ManualClock>) -> RedisLeases {
    let client =
        SentinelClient::build(vec![sentinel], GROUP, None, SentinelServerType::Master).unwrap();
    RedisLeases::builder_for_sentinel(client, prefix)
        .with_clock(clock.clone())
        .with_recreation_grace(GRACE)
        // Enough attempts to outlast the moment after a failover when `SENTINEL
        // get-master-addr-by-name` already names the promoted replica but `SENTINEL MASTERS`,
        // which redis-rs reads, still names the dead primary (connections to it are refused).
        .with_retry_policy(
            RetryPolicy::default()
                .with_max_attempts(10)
                .with_backoff(Duration::from_millis(50), Duration::from_millis(500))
                .with_attempt_timeout(Duration::from_secs(2)),
        )
        .build()
        .unwrap()
}

#[test]
fn a_sentinel_failover_is_followed_and_waits_out_the_grace() {
    let test = "a_sentinel_failover_is_followed_and_waits_out_the_grace";
    let Some(mut primary) = private::private(test) else {
        return;
    };
    let replica = primary.replica().unwrap();
    let sentinel = primary.sentinel(GROUP).unwrap();
    support::runtime().block_on(async {
        let prefix = support::prefix("sentinel");
        let clock = Arc::new(ManualClock::new());
        let holder = manager(&sentinel.url(), &prefix, &clock);
        let contender = manager(&sentinel.url(), &prefix, &clock);
        let key = LeaseKey::new("followed").unwrap();
        let once = AcquireOptions::default();
        let lease = support::granted_after_the_first_grace(&holder, &key, D, &clock, GRACE).await;
        assert!(
            contender
                .try_acquire(&key, D, &once)
                .await
                .unwrap_err()
                .is_held()
        );
        tokio::task::block_in_place(|| {
            primary.command(&["WAIT", "1", "5000"]).unwrap();
            primary.kill().unwrap();
            sentinel.wait_for_primary(GROUP, replica.port()).unwrap();
        });

        // The promoted replica has the holder's hash: its renewal goes on there.
        let lease = holder.renew(&lease, D).await.unwrap();
        let err = contender.try_acquire(&key, D, &once).await.unwrap_err();
        assert!(err.is_held(), "a failover is a new incarnation: {err}");
        clock.advance(GRACE + Duration::from_secs(1));
        let next = contender.try_acquire(&key, D, &once).await.unwrap();
        assert!(next.fencing_token() > lease.fencing_token());
        let lost = holder.renew(&lease, D).await.unwrap_err();
        assert_eq!(
            lost.not_owned_reason(),
            Some(NotOwnedReason::TakenOver),
            "{lost}"
        );
    });
}

//! `with_wait_for_replicas`: a grant is reported once a replica acknowledged it (`WAIT` on the
//! same connection, one more round trip per grant and none per refusal); with the replica cut
//! off, the grant is released and the acquisition fails transiently (`Unreplicated`). Private
//! servers; skipped, saying why, without `redis-server` (unless `LEASE_REQUIRE_REDIS=1`).
#![allow(clippy::unwrap_used)]

mod private;
mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::{AcquireOptions, LeaseBackend, LeaseError, LeaseKey, ManualClock};
use lease_redis::{RedisError, RedisErrorKind, RedisLeases};

const D: Duration = Duration::from_secs(10);

#[test]
fn a_grant_waits_for_its_replica_and_is_released_without_one() {
    let test = "a_grant_waits_for_its_replica_and_is_released_without_one";
    let Some(primary) = private::private(test) else {
        return;
    };
    let replica = primary.replica().unwrap();
    support::runtime().block_on(async {
        let clock = Arc::new(ManualClock::new());
        let proxy = support::Proxy::start(&primary.url()).await;
        let url = support::via(&primary.url(), proxy.port());
        let leases = RedisLeases::builder_for_url(&url, support::prefix("wait"))
            .unwrap()
            .with_clock(clock.clone())
            .with_wait_for_replicas(1, Duration::from_millis(300))
            .build()
            .unwrap();
        let once = AcquireOptions::default();
        let key = LeaseKey::new("replicated").unwrap();
        let lease = leases.try_acquire(&key, D, &once).await.unwrap();
        proxy.take_commands();
        assert!(
            leases
                .try_acquire(&key, D, &once)
                .await
                .unwrap_err()
                .is_held()
        );
        assert_eq!(
            proxy.take_commands(),
            ["EVALSHA acquire"],
            "a refusal waits for nothing"
        );
        leases
            .release(lease.key(), lease.token(), lease.fencing_token())
            .await
            .unwrap();
        proxy.take_commands();
        let lease = leases.try_acquire(&key, D, &once).await.unwrap();
        assert_eq!(
            proxy.take_commands(),
            ["EVALSHA acquire", "WAIT"],
            "a grant waits"
        );
        leases
            .release(lease.key(), lease.token(), lease.fencing_token())
            .await
            .unwrap();

        tokio::task::block_in_place(|| replica.detach()).unwrap();
        let err = leases.try_acquire(&key, D, &once).await.unwrap_err();
        assert!(err.is_transient(), "{err}");
        let LeaseError::Backend { source, .. } = &err else {
            panic!("a backend error, got {err}");
        };
        assert_eq!(
            source.downcast_ref::<RedisError>().unwrap().kind(),
            RedisErrorKind::Unreplicated,
            "{err}"
        );
        let record = leases.inspect(&key).await.unwrap().unwrap();
        assert!(
            record.holder().is_none(),
            "the unreplicated grant was released"
        );
    });
}

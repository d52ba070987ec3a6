//! With the feature `metrics`, the Redis backend reports acquisitions by outcome, takeovers,
//! renewals, lost replies reconciled (replies lost for real by the proxy) and retries
//! (docs/metrics.md). One test: the recorder is global to the process. Needs a server
//! (`LEASE_REDIS_URL`), and skips visibly without it.
#![cfg(feature = "metrics")]
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::conformance::recording::CapturedMetrics;
use lease_core::metrics::{
    ACQUISITIONS, RECONCILED, RENEWAL_FAILURES, RENEWALS, RETRIES, TAKEOVERS,
};
use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, ManualClock};
use lease_redis::RetryPolicy;

const D: Duration = Duration::from_secs(10);

#[test]
fn the_redis_backend_moves_its_metrics_as_the_operations_happen() {
    support::run(
        "the_redis_backend_moves_its_metrics_as_the_operations_happen",
        |url| async move {
            let recording = CapturedMetrics::new();
            recording.install().unwrap();
            let clock = Arc::new(ManualClock::new());
            let (leases, proxy, _prefix) = support::leases(&url, "metrics", |b| {
                b.with_clock(clock.clone()).with_retry_policy(
                    RetryPolicy::default()
                        .with_backoff(Duration::from_millis(1), Duration::from_millis(20)),
                )
            })
            .await;
            let once = AcquireOptions::default();
            let rd = [("backend", "redis")];
            let outcome = |o: &'static str| [("backend", "redis"), ("outcome", o)];
            let op = |o: &'static str| [("backend", "redis"), ("operation", o)];
            let key = LeaseKey::new("metered").unwrap();

            // A lost acquire reply, reconciled.
            proxy.faults.lose_replies(1);
            let lease = leases.try_acquire(&key, D, &once).await.unwrap();
            assert_eq!(proxy.faults.lost(), 1);
            assert_eq!(recording.counter(RECONCILED, &op("acquire")), 1);
            assert_eq!(recording.counter(RETRIES, &op("acquire")), 1);
            assert!(
                leases
                    .try_acquire(&key, D, &once)
                    .await
                    .unwrap_err()
                    .is_held()
            );
            assert_eq!(recording.counter(ACQUISITIONS, &outcome("acquired")), 1);
            assert_eq!(recording.counter(ACQUISITIONS, &outcome("held")), 1);

            // A renewal whose reply was lost: its retry renews again (a renewal may repeat).
            proxy.faults.lose_replies(1);
            let lease = leases.renew(&lease, D).await.unwrap();
            assert_eq!(recording.counter(RETRIES, &op("renew")), 1);
            assert_eq!(recording.counter(RENEWALS, &rd), 1);

            // A lost release reply, reconciled.
            proxy.faults.lose_replies(1);
            leases
                .release(lease.key(), lease.token(), lease.fencing_token())
                .await
                .unwrap();
            assert_eq!(recording.counter(RECONCILED, &op("release")), 1);

            // The released holder's renewal is refused; a takeover of an expired holder counts.
            assert!(leases.renew(&lease, D).await.unwrap_err().is_not_owned());
            let failed = [("backend", "redis"), ("kind", "not_owned")];
            assert_eq!(recording.counter(RENEWAL_FAILURES, &failed), 1);
            let stale = leases.try_acquire(&key, D, &once).await.unwrap();
            assert_eq!(
                recording.counter(TAKEOVERS, &rd),
                0,
                "a free key is no takeover"
            );
            clock.advance(D + Duration::from_secs(1));
            let taken = leases.try_acquire(&key, D, &once).await.unwrap();
            assert!(taken.fencing_token() > stale.fencing_token());
            assert_eq!(recording.counter(TAKEOVERS, &rd), 1);
        },
    );
}

//! With the feature `metrics`, the DynamoDB backend reports acquisitions by outcome, renewals,
//! lost replies reconciled (from the transport's fault layer), throttling and retries
//! (docs/metrics.md). One test: the recorder is global to the process. Needs DynamoDB Local
//! (`LEASE_DYNAMO_ENDPOINT`), and skips visibly without it.
#![cfg(feature = "metrics")]
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::conformance::recording::CapturedMetrics;
use lease_core::metrics::{
    ACQUISITIONS, RECONCILED, RENEWAL_FAILURES, RENEWAL_TIME_LEFT, RENEWALS, RETRIES, TAKEOVERS,
    THROTTLED,
};
use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, ManualClock};
use lease_dynamo::RetryPolicy;
use support::{Faults, Wiring};

const D: Duration = Duration::from_secs(10);

#[test]
fn the_dynamodb_backend_moves_its_metrics_as_the_operations_happen() {
    support::run(
        "the_dynamodb_backend_moves_its_metrics_as_the_operations_happen",
        |endpoint| async move {
            let recording = CapturedMetrics::new();
            recording.install().unwrap();
            let faults = Arc::new(Faults::default());
            let clock = Arc::new(ManualClock::new());
            let wiring = Wiring {
                counter: None,
                faults: Some(faults.clone()),
            };
            let (leases, _) = support::leases(&endpoint, &wiring, |b| {
                b.with_clock(clock.clone()).with_retry_policy(
                    RetryPolicy::default()
                        .with_backoff(Duration::from_millis(1), Duration::from_millis(20)),
                )
            })
            .await;
            let once = AcquireOptions::default();
            let dynamo = [("backend", "dynamodb")];
            let outcome = |o: &'static str| [("backend", "dynamodb"), ("outcome", o)];
            let op = |o: &'static str| [("backend", "dynamodb"), ("operation", o)];
            let key = LeaseKey::new("metered").unwrap();

            // A lost acquire reply, reconciled.
            faults.lose_replies(1);
            let lease = leases.try_acquire(&key, D, &once).await.unwrap();
            assert_eq!(faults.lost(), 1);
            assert_eq!(recording.counter(RECONCILED, &op("acquire")), 1);
            assert_eq!(recording.counter(RETRIES, &op("UpdateItem")), 1);
            assert!(
                leases
                    .try_acquire(&key, D, &once)
                    .await
                    .unwrap_err()
                    .is_held()
            );
            assert_eq!(recording.counter(ACQUISITIONS, &outcome("acquired")), 1);
            assert_eq!(recording.counter(ACQUISITIONS, &outcome("held")), 1);

            // A renewal through two throttled attempts, and one whose reply was lost.
            clock.advance(Duration::from_secs(3));
            faults.throttle(2);
            let lease = leases.renew(&lease, D).await.unwrap();
            assert_eq!(recording.counter(THROTTLED, &op("UpdateItem")), 2);
            assert_eq!(recording.counter(RETRIES, &op("UpdateItem")), 3);
            faults.lose_replies(1);
            let lease = leases.renew(&lease, D).await.unwrap();
            // Its retry renews again (a renewal may repeat), so nothing needed reconciling.
            assert_eq!(recording.counter(RETRIES, &op("UpdateItem")), 4);
            assert_eq!(recording.counter(RENEWALS, &dynamo), 2);
            assert_eq!(recording.samples(RENEWAL_TIME_LEFT, &dynamo)[0], 6.0);

            // A lost release reply, reconciled.
            faults.lose_replies(1);
            support::release(&leases, &lease).await.unwrap();
            assert_eq!(recording.counter(RECONCILED, &op("release")), 1);

            // The released holder's renewal is refused. An acquisition of the released key is
            // no takeover; one that replaces a holder whose lease expired unreleased is one (the
            // write's reply names the holder it replaced).
            assert!(leases.renew(&lease, D).await.unwrap_err().is_not_owned());
            let failed = [("backend", "dynamodb"), ("kind", "not_owned")];
            assert_eq!(recording.counter(RENEWAL_FAILURES, &failed), 1);
            let stale = leases.try_acquire(&key, D, &once).await.unwrap();
            assert_eq!(recording.counter(TAKEOVERS, &dynamo), 0);
            clock.advance(D + Duration::from_secs(1));
            let taken = leases.try_acquire(&key, D, &once).await.unwrap();
            assert!(taken.fencing_token() > stale.fencing_token());
            assert!(leases.renew(&stale, D).await.is_err());
            assert_eq!(recording.counter(TAKEOVERS, &dynamo), 1);
            // A fresh key (no item yet) is no takeover either.
            let fresh = LeaseKey::new("metered-fresh").unwrap();
            leases.try_acquire(&fresh, D, &once).await.unwrap();
            assert_eq!(recording.counter(TAKEOVERS, &dynamo), 1);
        },
    );
}

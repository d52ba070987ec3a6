//! With the feature `metrics`, the file backend reports acquisitions by outcome, a takeover of an
//! expired holder (and none for a released key), and renewals with their time left and failures
//! (docs/metrics.md). One test: the recorder is global to the process.
#![cfg(feature = "metrics")]
#![allow(clippy::unwrap_used)]

mod raw;

use raw::Raw as _;
use std::sync::Arc;
use std::time::Duration;

use lease_core::conformance::recording::CapturedMetrics;
use lease_core::metrics::{
    ACQUISITIONS, RENEWAL_DURATION, RENEWAL_FAILURES, RENEWAL_TIME_LEFT, RENEWALS, TAKEOVERS,
};
use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, ManualClock};
use lease_file::DirectoryStore;
use pollster::block_on;

const D: Duration = Duration::from_secs(10);

#[test]
fn the_file_backend_moves_its_metrics_as_the_operations_happen() {
    let recording = CapturedMetrics::new();
    recording.install().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new());
    let store = |clock: &Arc<ManualClock>| {
        DirectoryStore::builder(dir.path())
            .with_clock(clock.clone())
            .build()
            .unwrap()
    };
    let (holder, contender) = (store(&clock), store(&clock));
    let once = AcquireOptions::default();
    let file = [("backend", "file")];
    let outcome = |o: &'static str| [("backend", "file"), ("outcome", o)];
    let key = LeaseKey::new("metered").unwrap();

    let lease = block_on(holder.try_acquire(&key, D, &once)).unwrap();
    assert!(
        block_on(contender.try_acquire(&key, D, &once))
            .unwrap_err()
            .is_held()
    );
    assert_eq!(recording.counter(ACQUISITIONS, &outcome("acquired")), 1);
    assert_eq!(recording.counter(ACQUISITIONS, &outcome("held")), 1);

    clock.advance(Duration::from_secs(2));
    let lease = block_on(holder.renew(&lease, D)).unwrap();
    assert_eq!(recording.counter(RENEWALS, &file), 1);
    assert_eq!(recording.samples(RENEWAL_TIME_LEFT, &file), [7.0]);
    assert_eq!(recording.samples(RENEWAL_DURATION, &file).len(), 1);

    // Released and taken again: no takeover.
    block_on(holder.release_lease(&lease)).unwrap();
    let lease = block_on(holder.try_acquire(&key, D, &once)).unwrap();
    assert_eq!(recording.counter(TAKEOVERS, &file), 0);

    // The holder stalls past its expiry: the contender takes over, the holder's renewal fails.
    clock.advance(D + Duration::from_millis(1));
    let taker = block_on(contender.try_acquire(&key, D, &once)).unwrap();
    assert_eq!(recording.counter(TAKEOVERS, &file), 1);
    assert!(
        block_on(holder.renew(&lease, D))
            .unwrap_err()
            .is_not_owned()
    );
    let failed = [("backend", "file"), ("kind", "not_owned")];
    assert_eq!(recording.counter(RENEWAL_FAILURES, &failed), 1);
    block_on(contender.release_lease(&taker)).unwrap();
    assert_eq!(recording.counter(ACQUISITIONS, &outcome("acquired")), 3);
}

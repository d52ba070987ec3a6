//! With the feature `metrics`, the memory backend and the keeper move every metric they own
//! (docs/metrics.md) as the operations happen: acquisitions by outcome, a takeover, renewals with
//! their latency and time left, a failed renewal, and a loss forced on a kept lease. One test:
//! the recorder is global to the process.
#![cfg(all(feature = "metrics", feature = "conformance"))]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_core::conformance::recording::CapturedMetrics;
use lease_core::metrics::{
    ACQUISITIONS, LOSSES, RENEWAL_DURATION, RENEWAL_FAILURES, RENEWAL_TIME_LEFT, RENEWALS,
    TAKEOVERS,
};
use lease_core::{AcquireOptions, LeaseBackend, LeaseGuard, LeaseKey, ManualClock, MemoryBackend};
use pollster::block_on;

const D: Duration = Duration::from_secs(10);

/// Waits (bounded, in real time) until `done` holds: the keeper runs on a thread of its own.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn every_core_metric_moves_as_the_operations_happen() {
    let recording = CapturedMetrics::new();
    recording.install().unwrap();
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryBackend::builder().with_clock(clock.clone()).build());
    let once = AcquireOptions::default();
    let memory = [("backend", "memory")];
    let outcome = |o: &'static str| [("backend", "memory"), ("outcome", o)];

    // Acquisitions by outcome.
    let a = LeaseKey::new("a").unwrap();
    let lease = block_on(store.try_acquire(&a, D, &once)).unwrap();
    assert!(
        block_on(store.try_acquire(&a, D, &once))
            .unwrap_err()
            .is_held()
    );
    assert!(block_on(store.try_acquire(&a, Duration::ZERO, &once)).is_err());
    assert_eq!(recording.counter(ACQUISITIONS, &outcome("acquired")), 1);
    assert_eq!(recording.counter(ACQUISITIONS, &outcome("held")), 1);
    assert_eq!(
        recording.counter(ACQUISITIONS, &outcome("invalid_input")),
        1
    );
    assert_eq!(
        recording.counter(TAKEOVERS, &memory),
        0,
        "nothing taken over yet"
    );

    // A renewal: counted, timed, and the time it had left recorded (9 s: 10 s less the margin).
    clock.advance(Duration::from_secs(3));
    let lease = block_on(store.renew(&lease, D)).unwrap();
    assert_eq!(recording.counter(RENEWALS, &memory), 1);
    assert_eq!(recording.samples(RENEWAL_DURATION, &memory), [0.0]);
    assert_eq!(recording.samples(RENEWAL_TIME_LEFT, &memory), [6.0]);

    // A takeover of the expired lease, and the old holder's renewal then fails.
    clock.advance(Duration::from_secs(11));
    let taker = block_on(store.try_acquire(&a, D, &once)).unwrap();
    assert_eq!(recording.counter(TAKEOVERS, &memory), 1);
    assert!(block_on(store.renew(&lease, D)).unwrap_err().is_not_owned());
    let failed = [("backend", "memory"), ("kind", "not_owned")];
    assert_eq!(recording.counter(RENEWAL_FAILURES, &failed), 1);
    // A released key taken again is no takeover.
    block_on(store.release(&a, taker.token(), taker.fencing_token())).unwrap();
    block_on(store.try_acquire(&a, D, &once)).unwrap();
    assert_eq!(recording.counter(TAKEOVERS, &memory), 1);

    // A kept lease renews through its keeper, then loses the lease when it is released behind
    // its back (a forced loss): counted by reason.
    let b = LeaseKey::new("b").unwrap();
    let backend: Arc<dyn LeaseBackend> = store.clone();
    let guard = LeaseGuard::builder(backend, &b, D)
        .with_renew_every(Duration::from_secs(1))
        .acquire_blocking()
        .unwrap();
    let record = block_on(store.inspect(&b)).unwrap().unwrap();
    let token = record.holder().and_then(|h| h.token()).unwrap().clone();
    let renewals = recording.counter(RENEWALS, &memory);
    // The keeper thread may not wait on the clock yet: advance in steps until it renews.
    eventually("the keeper renews", || {
        clock.advance(Duration::from_millis(100));
        recording.counter(RENEWALS, &memory) > renewals
    });
    block_on(store.release(&b, &token, guard.fencing_token())).unwrap();
    eventually("the keeper finds the lease gone", || {
        clock.advance(Duration::from_millis(100));
        guard.check().is_err()
    });
    let reason = guard.check().unwrap_err();
    let lost = [("backend", "memory"), ("reason", "missing")];
    assert_eq!(recording.counter(LOSSES, &lost), 1, "{reason}");
    drop(guard);

    // No label carries a key or a token.
    for (name, labels) in recording.series() {
        for (label, value) in labels {
            assert!(
                [
                    "backend",
                    "outcome",
                    "kind",
                    "reason",
                    "operation",
                    "worker"
                ]
                .contains(&label.as_str()),
                "{name}: label {label}"
            );
            assert!(value != "a" && value != "b", "{name}: {label}={value}");
            assert_ne!(value, token.as_str(), "{name}: a token in {label}");
        }
    }
}

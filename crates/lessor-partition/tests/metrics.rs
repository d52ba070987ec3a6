//! With the feature `metrics`, a fleet worker reports the units it owns, gains and loses, and how
//! far it is from its share, one series per worker (docs/metrics.md). One test: the recorder is
//! global to the process.
#![cfg(feature = "metrics")]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use lease_core::conformance::recording::CapturedMetrics;
use lease_core::metrics::{ACQUISITIONS, RENEWALS};
use lease_core::{ManualClock, MemoryBackend};
use lessor_partition::Worker;
use lessor_partition::metrics::{
    FLEET_IMBALANCE, FLEET_UNITS_GAINED, FLEET_UNITS_LOST, FLEET_UNITS_OWNED, LABEL_WORKER,
};
use pollster::block_on;

fn worker(store: &MemoryBackend, id: &str) -> Worker {
    Worker::builder("t", id)
        .with_store(Arc::new(store.clone()))
        .with_units((0..12).map(|u| format!("u{u:02}")))
        // Two moves a tick: a rebalance takes several, and shows on the imbalance gauge.
        .with_max_moves_per_interval(2)
        .build()
        .unwrap()
}

#[test]
fn a_fleet_reports_units_owned_gained_lost_and_imbalance_per_worker() {
    let recording = CapturedMetrics::new();
    recording.install().unwrap();
    let clock = Arc::new(ManualClock::new());
    let store = MemoryBackend::builder().with_clock(clock.clone()).build();
    let (mut a, mut b) = (worker(&store, "a"), worker(&store, "b"));
    let gauge = |name: &str, id: &str| recording.gauges(name, &[(LABEL_WORKER, id)]);

    for _ in 0..8 {
        block_on(a.tick()).unwrap();
        clock.advance(Duration::from_millis(2500));
    }
    assert_eq!(a.handle().owned_units().len(), 12);
    assert_eq!(gauge(FLEET_UNITS_OWNED, "a"), [12.0]);
    assert_eq!(gauge(FLEET_IMBALANCE, "a"), [0.0]);
    assert_eq!(
        recording.counter(FLEET_UNITS_GAINED, &[(LABEL_WORKER, "a")]),
        12
    );

    // b joins: a is above its new share until it has handed the surplus over.
    let mut above = 0.0_f64;
    for _ in 0..10 {
        for w in [&mut a, &mut b] {
            block_on(w.tick()).unwrap();
        }
        above = above.max(gauge(FLEET_IMBALANCE, "a")[0]);
        clock.advance(Duration::from_millis(2500));
    }
    assert_eq!(b.handle().owned_units().len(), 6);
    assert!(above > 0.0, "a was never seen above its share");
    assert_eq!(gauge(FLEET_UNITS_OWNED, "a"), [6.0]);
    assert_eq!(gauge(FLEET_UNITS_OWNED, "b"), [6.0]);
    assert_eq!(gauge(FLEET_IMBALANCE, "b"), [0.0]);
    let handed = [(LABEL_WORKER, "a"), ("reason", "handed_over")];
    assert_eq!(recording.counter(FLEET_UNITS_LOST, &handed), 6);
    assert_eq!(
        recording.counter(FLEET_UNITS_GAINED, &[(LABEL_WORKER, "b")]),
        6
    );

    // b shuts down: its units are lost with the reason, and it owns none.
    block_on(b.shutdown()).unwrap();
    let shutdown = [(LABEL_WORKER, "b"), ("reason", "shutdown")];
    assert_eq!(recording.counter(FLEET_UNITS_LOST, &shutdown), 6);
    assert_eq!(gauge(FLEET_UNITS_OWNED, "b"), [0.0]);

    // The fleet's leases go through the backend, whose own series move too.
    let memory = [("backend", "memory")];
    assert!(recording.counter(ACQUISITIONS, &memory) >= 18);
    assert!(recording.counter(RENEWALS, &memory) > 0);
    // One series per worker, never one per unit.
    for (name, labels) in recording.series() {
        assert!(
            labels.iter().all(|(_, v)| !v.starts_with('u')),
            "{name} {labels:?}"
        );
    }
}

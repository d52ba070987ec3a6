//! Expiry without wall clocks (issue 9, item 11): a wall-clock step never ends a lease early; a
//! holder on a clock this process does not share is timed by observation on the contender's own
//! monotonic clock, restarted by every renewal.
#![allow(clippy::unwrap_used)]

mod raw;

use raw::Raw as _;
use std::sync::Arc;
use std::time::Duration;

use lease_core::{AcquireOptions, Clock, LeaseBackend, LeaseKey, ManualClock};
use lease_file::DirectoryStore;

const D: Duration = Duration::from_secs(10);

fn store(dir: &std::path::Path, clock: &Arc<ManualClock>) -> DirectoryStore {
    DirectoryStore::builder(dir)
        .with_clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn a_forward_wall_clock_step_never_ends_a_lease_early() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new());
    let holder = store(dir.path(), &clock);
    let contender = store(dir.path(), &clock);
    let key = LeaseKey::new("stepped").unwrap();
    let lease =
        pollster::block_on(holder.try_acquire(&key, D, &AcquireOptions::default())).unwrap();
    clock.set_wall(clock.now() + Duration::from_secs(3600));
    let err =
        pollster::block_on(contender.try_acquire(&key, D, &AcquireOptions::default())).unwrap_err();
    assert!(
        err.is_held(),
        "a wall step of an hour ended the lease: {err}"
    );
    clock.advance(D + Duration::from_millis(1));
    let second =
        pollster::block_on(contender.try_acquire(&key, D, &AcquireOptions::default())).unwrap();
    assert!(second.fencing_token() > lease.fencing_token());
}

#[test]
fn a_holder_on_another_clock_is_timed_by_observation_and_renewals_restart_it() {
    let dir = tempfile::tempdir().unwrap();
    // Two manual clocks have two scales: like two hosts, neither can read the other's deadline.
    let holder_clock = Arc::new(ManualClock::new());
    let contender_clock = Arc::new(ManualClock::new());
    let holder = store(dir.path(), &holder_clock);
    let contender = store(dir.path(), &contender_clock);
    let key = LeaseKey::new("observed").unwrap();
    let lease =
        pollster::block_on(holder.try_acquire(&key, D, &AcquireOptions::default())).unwrap();

    // The contender's own clock runs far ahead: nothing is expired before it has watched the
    // lease stand still for its duration.
    contender_clock.advance(Duration::from_secs(3600));
    assert!(
        pollster::block_on(contender.try_acquire(&key, D, &AcquireOptions::default()))
            .unwrap_err()
            .is_held()
    );
    contender_clock.advance(D - Duration::from_millis(1));
    assert!(
        pollster::block_on(contender.try_acquire(&key, D, &AcquireOptions::default()))
            .unwrap_err()
            .is_held()
    );

    // A renewal changes the state's name: the observation starts again.
    let renewed = pollster::block_on(holder.renew(&lease, D)).unwrap();
    contender_clock.advance(Duration::from_millis(2));
    assert!(
        pollster::block_on(contender.try_acquire(&key, D, &AcquireOptions::default()))
            .unwrap_err()
            .is_held()
    );
    contender_clock.advance(D - Duration::from_millis(1));
    assert!(
        pollster::block_on(contender.try_acquire(&key, D, &AcquireOptions::default()))
            .unwrap_err()
            .is_held()
    );
    contender_clock.advance(Duration::from_millis(1));
    let taken =
        pollster::block_on(contender.try_acquire(&key, D, &AcquireOptions::default())).unwrap();
    assert!(taken.fencing_token() > renewed.fencing_token());

    // The old holder learns it at its next renewal.
    let err = pollster::block_on(holder.renew(&renewed, D)).unwrap_err();
    assert!(err.is_not_owned(), "{err}");
}

#[test]
fn a_lease_released_on_another_clock_is_free_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let holder = store(dir.path(), &Arc::new(ManualClock::new()));
    let contender: Arc<dyn LeaseBackend> =
        Arc::new(store(dir.path(), &Arc::new(ManualClock::new())));
    let key = LeaseKey::new("released").unwrap();
    let lease =
        pollster::block_on(holder.try_acquire(&key, D, &AcquireOptions::default())).unwrap();
    pollster::block_on(holder.release_lease(&lease)).unwrap();
    let second =
        pollster::block_on(contender.try_acquire(&key, D, &AcquireOptions::default())).unwrap();
    assert!(second.fencing_token() > lease.fencing_token());
}

/// Suspend-safety of the contender's clock (issue 22, item 8), through injected clocks: a
/// contender whose monotonic clock stops while its host sleeps (here: the holder's clock runs an
/// hour, the contender's not at all) only waits longer; it takes over after the lease stood
/// still for its duration *on its own clock*, never because time passed elsewhere. The holder's
/// side of the argument (its trust must count the time its host slept) is in
/// docs/correctness.md, *Suspend*.
#[test]
fn a_contender_whose_clock_stops_in_a_suspend_only_waits_longer() {
    let dir = tempfile::tempdir().unwrap();
    let holder_clock = Arc::new(ManualClock::new());
    let contender_clock = Arc::new(ManualClock::new());
    let holder = store(dir.path(), &holder_clock);
    let contender = store(dir.path(), &contender_clock);
    let key = LeaseKey::new("suspended").unwrap();
    let once = AcquireOptions::default();
    pollster::block_on(holder.try_acquire(&key, D, &once)).unwrap();
    let held = |store: &DirectoryStore| {
        pollster::block_on(store.try_acquire(&key, D, &once))
            .unwrap_err()
            .is_held()
    };
    assert!(held(&contender), "first sighting");
    // The contender's host sleeps for an hour: its monotonic clock stands still meanwhile.
    holder_clock.advance(Duration::from_secs(3600));
    holder_clock.set_wall(holder_clock.now() + Duration::from_secs(3600));
    contender_clock.set_wall(contender_clock.now() + Duration::from_secs(3600));
    assert!(
        held(&contender),
        "time slept elsewhere never ends a lease early"
    );
    contender_clock.advance(D - Duration::from_millis(1));
    assert!(held(&contender));
    contender_clock.advance(Duration::from_millis(1));
    let taken = pollster::block_on(contender.try_acquire(&key, D, &once)).unwrap();
    assert!(taken.fencing_token().get() > 1);
}

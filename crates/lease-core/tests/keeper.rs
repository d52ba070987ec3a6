//! The keeper: renewals, loss detection, release on drop.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencingToken, KeeperOptions, Lease, LeaseBackend,
    LeaseBackendExt, LeaseError, LeaseGuard, LeaseKey, LeaseRecord, LeaseToken, LossReason,
    ManualClock, MemoryBackend, NotOwnedReason, WaitOptions,
};

/// Wraps the memory backend; renewals can be made to fail or hang.
#[derive(Debug)]
struct Flaky {
    inner: MemoryBackend,
    fail_renewals: AtomicBool,
    hang_renewals: AtomicBool,
    renewals: AtomicUsize,
    releases: AtomicUsize,
}

impl Flaky {
    fn new(clock: Arc<ManualClock>) -> Arc<Self> {
        Arc::new(Self {
            inner: MemoryBackend::builder().with_clock(clock).build(),
            fail_renewals: AtomicBool::new(false),
            hang_renewals: AtomicBool::new(false),
            renewals: AtomicUsize::new(0),
            releases: AtomicUsize::new(0),
        })
    }
}

impl LeaseBackend for Flaky {
    fn name(&self) -> &'static str {
        "flaky"
    }
    fn clock(&self) -> &dyn Clock {
        self.inner.clock()
    }
    fn try_acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        options: &'a AcquireOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        self.inner.try_acquire(key, duration, options)
    }
    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        if self.hang_renewals.load(Ordering::SeqCst) {
            return Box::pin(std::future::pending());
        }
        if self.fail_renewals.load(Ordering::SeqCst) {
            return Box::pin(std::future::ready(Err(LeaseError::backend(
                "flaky",
                true,
                "injected throttling",
            ))));
        }
        self.inner.renew(lease, duration)
    }
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release(key, token, fencing)
    }
    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        self.inner.inspect(key)
    }
    fn delete<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: Option<&'a LeaseToken>,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.inner.delete(key, holder, fencing)
    }
}

const D: Duration = Duration::from_secs(9);

fn setup() -> (Arc<ManualClock>, Arc<Flaky>, Lease) {
    let clock = Arc::new(ManualClock::new());
    let backend = Flaky::new(clock.clone());
    let key = LeaseKey::new("keeper").unwrap();
    let lease = lease_core::executor::block_on(backend.acquire(&key, D)).unwrap();
    (clock, backend, lease)
}

fn wait_for(mut cond: impl FnMut() -> bool) {
    for _ in 0..20_000 {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    panic!("condition not reached");
}

/// Advances the manual clock in renewal-sized steps, waiting for the keeper to go back to sleep.
fn step(clock: &ManualClock, by: Duration) {
    wait_for(|| clock.pending_sleeps() > 0);
    clock.advance(by);
}

#[test]
fn renews_every_third_and_keeps_the_lease_for_many_durations() {
    let (clock, backend, lease) = setup();
    let guard =
        LeaseGuard::spawn_thread(backend.clone(), lease.clone(), KeeperOptions::default()).unwrap();
    for i in 1..=12 {
        step(&clock, D / 3);
        wait_for(|| backend.renewals.load(Ordering::SeqCst) >= i);
        wait_for(|| guard.lease().expires_at() > lease.expires_at());
    }
    assert!(clock.elapsed() >= D * 4);
    assert_eq!(guard.check(), Ok(lease.fencing_token()));
    let once = AcquireOptions::default();
    let err =
        lease_core::executor::block_on(backend.try_acquire(lease.key(), D, &once)).unwrap_err();
    assert!(err.is_held());
}

#[test]
fn the_builder_waits_as_told_and_keeps_what_it_acquires() {
    let (clock, backend, lease) = setup();
    // A zero wait is one attempt: turned away with a timeout naming the holder.
    let err = LeaseGuard::builder(backend.clone(), lease.key(), D)
        .with_wait(WaitOptions::new(Duration::ZERO))
        .acquire_blocking()
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(err.holder().is_some());
    // The default waits until the holder's lease expires, then keeps the new one.
    clock.set_auto_advance(true);
    let guard = LeaseGuard::builder(backend.clone(), lease.key(), D)
        .with_keeper(KeeperOptions::default().with_renew_every(D / 3))
        .acquire_blocking()
        .unwrap();
    clock.set_auto_advance(false);
    assert!(guard.fencing_token() > lease.fencing_token());
    assert!(clock.elapsed() >= D, "waited for the expiry");
    lease_core::executor::block_on(guard.release()).unwrap();
}

#[test]
fn transient_failures_are_ridden_out_until_the_deadline_then_reported() {
    let (clock, backend, lease) = setup();
    let reasons = Arc::new(Mutex::new(Vec::new()));
    let seen = reasons.clone();
    let options = KeeperOptions::default()
        .with_retry_backoff(Duration::from_millis(100), Duration::from_millis(500))
        .on_lost(move |r| seen.lock().unwrap().push(r.clone()));
    let guard = LeaseGuard::spawn_thread(backend.clone(), lease.clone(), options).unwrap();
    backend.fail_renewals.store(true, Ordering::SeqCst);
    // Before the deadline the holder still trusts the lease while renewals fail.
    let mut elapsed = Duration::ZERO;
    while elapsed < D * 8 / 10 - Duration::from_millis(600) {
        step(&clock, Duration::from_millis(500));
        elapsed += Duration::from_millis(500);
        assert!(guard.check().is_ok(), "still trusted at {elapsed:?}");
    }
    assert!(backend.renewals.load(Ordering::SeqCst) > 3, "retried");
    // Keep failing past the deadline: the keeper gives up there, so do not wait for it to sleep.
    step(&clock, D / 5);
    let reason = lease_core::executor::block_on(guard.lost());
    assert!(
        matches!(reason, LossReason::BackendFailing { ref last_error } if last_error.contains("injected")),
        "{reason:?}"
    );
    assert_eq!(reasons.lock().unwrap().len(), 1, "callback told once");
    assert!(guard.check().is_err());
}

#[test]
fn a_hung_renewal_is_cut_off_at_the_deadline() {
    let (clock, backend, lease) = setup();
    let guard =
        LeaseGuard::spawn_thread(backend.clone(), lease.clone(), KeeperOptions::default()).unwrap();
    backend.hang_renewals.store(true, Ordering::SeqCst);
    step(&clock, D / 3);
    wait_for(|| backend.renewals.load(Ordering::SeqCst) == 1);
    assert!(guard.check().is_ok());
    step(&clock, D);
    assert_eq!(
        lease_core::executor::block_on(guard.lost()),
        LossReason::DeadlinePassed
    );
}

#[test]
fn check_fails_at_the_deadline_even_if_the_keeper_never_ran() {
    let (clock, backend, lease) = setup();
    let (guard, _task_never_polled) =
        LeaseGuard::new(backend, lease.clone(), KeeperOptions::default());
    assert!(guard.is_trusted());
    clock.advance(lease.remaining(clock.as_ref()));
    assert_eq!(guard.check(), Err(LossReason::DeadlinePassed));
}

#[test]
fn takeover_is_reported_as_not_owned() {
    let (clock, backend, lease) = setup();
    let guard =
        LeaseGuard::spawn_thread(backend.clone(), lease.clone(), KeeperOptions::default()).unwrap();
    lease_core::executor::block_on(backend.inner.release(
        lease.key(),
        lease.token(),
        lease.fencing_token(),
    ))
    .unwrap();
    let thief = lease_core::executor::block_on(backend.acquire(lease.key(), D)).unwrap();
    step(&clock, D / 3);
    assert_eq!(
        lease_core::executor::block_on(guard.lost()),
        LossReason::NotOwned(NotOwnedReason::TakenOver)
    );
    assert!(thief.fencing_token() > guard.fencing_token());
}

#[test]
fn dropping_the_guard_releases_and_explicit_release_is_one_call() {
    let (_clock, backend, lease) = setup();
    let guard =
        LeaseGuard::spawn_thread(backend.clone(), lease.clone(), KeeperOptions::default()).unwrap();
    drop(guard);
    wait_for(|| backend.releases.load(Ordering::SeqCst) == 1);
    let next = lease_core::executor::block_on(backend.acquire(lease.key(), D)).unwrap();

    let guard = LeaseGuard::spawn_thread(backend.clone(), next, KeeperOptions::default()).unwrap();
    lease_core::executor::block_on(guard.release()).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        backend.releases.load(Ordering::SeqCst),
        2,
        "no second release from the task"
    );
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawns_on_tokio_and_runs_with_the_system_clock() {
    let backend: Arc<dyn LeaseBackend> = Arc::new(MemoryBackend::new());
    let key = LeaseKey::new("tokio").unwrap();
    let lease = backend
        .acquire(&key, Duration::from_millis(300))
        .await
        .unwrap();
    let guard = LeaseGuard::spawn(backend.clone(), lease, KeeperOptions::default()).unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(guard.check().is_ok(), "renewed for three durations");
    guard.release().await.unwrap();
    let guard = LeaseGuard::builder(backend.clone(), &key, Duration::from_millis(300))
        .acquire_spawned()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(guard.check().is_ok(), "kept from a tokio task");
    guard.release().await.unwrap();
}

//! The keeper: renewals, loss detection, release on drop.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::{
    AcquireOptions, BlockingLeaseGuard, BoxFuture, Clock, FencingToken, Lease, LeaseBackend,
    LeaseError, LeaseGuard, LeaseKey, LeaseRecord, LeaseToken, LossReason, ManualClock,
    MemoryBackend, NotOwnedReason, WaitOptions,
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
        fencing: Option<FencingToken>,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.inner.delete(key, holder, fencing)
    }
}

const D: Duration = Duration::from_secs(9);

fn setup() -> (Arc<ManualClock>, Arc<Flaky>, LeaseKey) {
    let clock = Arc::new(ManualClock::new());
    let backend = Flaky::new(clock.clone());
    let key = LeaseKey::new("keeper").unwrap();
    (clock, backend, key)
}

/// A blocking guard on `key`, renewed every third of `D` by its keeper thread.
fn keep(backend: &Arc<Flaky>, key: &LeaseKey) -> BlockingLeaseGuard {
    LeaseGuard::builder(backend.clone(), key, D)
        .acquire_blocking()
        .unwrap()
}

/// As [`keep`], with every loss its `on_lost` callback is told.
fn keep_telling(
    backend: &Arc<Flaky>,
    key: &LeaseKey,
) -> (BlockingLeaseGuard, Arc<Mutex<Vec<LossReason>>>) {
    let reasons = Arc::new(Mutex::new(Vec::new()));
    let seen = reasons.clone();
    let guard = LeaseGuard::builder(backend.clone(), key, D)
        .on_lost(move |r| seen.lock().unwrap().push(r.clone()))
        .acquire_blocking()
        .unwrap();
    (guard, reasons)
}

/// The store's record of `key`: its holder's token and expiry.
fn holder(backend: &Flaky, key: &LeaseKey) -> (LeaseToken, std::time::SystemTime) {
    let record = pollster::block_on(backend.inspect(key)).unwrap().unwrap();
    let holder = record.holder().unwrap();
    (
        holder.token().unwrap().clone(),
        holder.expires_at().unwrap(),
    )
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

fn lost_reason(result: Result<FencingToken, LeaseError>) -> LossReason {
    match result {
        Err(LeaseError::Lost { reason, .. }) => reason,
        other => panic!("expected a loss, got {other:?}"),
    }
}

#[test]
fn renews_every_third_and_keeps_the_lease_for_many_durations() {
    let (clock, backend, key) = setup();
    let guard = keep(&backend, &key);
    let fencing = guard.fencing_token();
    let (_, mut expires) = holder(&backend, &key);
    for i in 1..=12 {
        step(&clock, D / 3);
        wait_for(|| backend.renewals.load(Ordering::SeqCst) >= i);
        wait_for(|| holder(&backend, &key).1 > expires);
        expires = holder(&backend, &key).1;
    }
    assert!(clock.elapsed() >= D * 4);
    assert_eq!(guard.check().unwrap(), fencing);
    let once = AcquireOptions::default();
    let err = pollster::block_on(backend.try_acquire(&key, D, &once)).unwrap_err();
    assert!(err.is_held());
}

#[test]
fn the_builder_waits_as_told_and_keeps_what_it_acquires() {
    let (clock, backend, key) = setup();
    let first =
        pollster::block_on(backend.try_acquire(&key, D, &AcquireOptions::default())).unwrap();
    // A zero wait is one attempt: turned away with the holder's error, naming the holder.
    let err = LeaseGuard::builder(backend.clone(), &key, D)
        .with_wait(WaitOptions::new(Duration::ZERO))
        .acquire_blocking()
        .unwrap_err();
    assert!(err.is_held(), "{err}");
    assert!(err.holder().is_some());
    // A short wait times out, naming the holder too.
    clock.set_auto_advance(true);
    let err = LeaseGuard::builder(backend.clone(), &key, D)
        .with_wait(WaitOptions::new(Duration::from_secs(1)))
        .acquire_blocking()
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(err.holder().is_some());
    // The default waits until the holder's lease expires, then keeps the new one.
    let guard = LeaseGuard::builder(backend.clone(), &key, D)
        .with_renew_every(D / 3)
        .acquire_blocking()
        .unwrap();
    clock.set_auto_advance(false);
    assert!(guard.fencing_token() > first.fencing_token());
    assert!(clock.elapsed() >= D, "waited for the expiry");
    guard.release().unwrap();
}

#[test]
fn transient_failures_are_ridden_out_until_the_deadline_then_reported() {
    let (clock, backend, key) = setup();
    let (guard, reasons) = keep_telling(&backend, &key);
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
    wait_for(|| !reasons.lock().unwrap().is_empty());
    let reason = lost_reason(guard.check());
    // The last renewal's error is the reason's source, with its own cause below it.
    let LossReason::BackendFailing(last) = &reason else {
        panic!("{reason:?}")
    };
    assert!(last.is_transient(), "{last}");
    let cause = std::error::Error::source(last.as_ref()).map(ToString::to_string);
    assert_eq!(cause.as_deref(), Some("injected throttling"));
    let error = guard.check().unwrap_err();
    let chain: Vec<String> =
        std::iter::successors(Some(&error as &(dyn std::error::Error + 'static)), |e| {
            e.source()
        })
        .map(ToString::to_string)
        .collect();
    assert!(
        chain.iter().any(|e| e == "injected throttling"),
        "{chain:?}"
    );
    assert_eq!(reasons.lock().unwrap().len(), 1, "callback told once");
}

#[test]
fn a_hung_renewal_is_cut_off_at_the_deadline() {
    let (clock, backend, key) = setup();
    let (guard, reasons) = keep_telling(&backend, &key);
    backend.hang_renewals.store(true, Ordering::SeqCst);
    step(&clock, D / 3);
    wait_for(|| backend.renewals.load(Ordering::SeqCst) == 1);
    assert!(guard.check().is_ok());
    step(&clock, D);
    wait_for(|| !reasons.lock().unwrap().is_empty());
    assert_eq!(reasons.lock().unwrap()[0], LossReason::DeadlinePassed);
    assert_eq!(lost_reason(guard.check()), LossReason::DeadlinePassed);
}

#[test]
fn check_fails_at_the_deadline_even_if_the_keeper_never_noticed() {
    let (clock, backend, key) = setup();
    let guard = keep(&backend, &key);
    backend.hang_renewals.store(true, Ordering::SeqCst);
    assert!(guard.check().is_ok());
    // One jump past the deadline: whatever the keeper thread has seen yet, the guard's own
    // monotonic check says the lease can no longer be trusted.
    clock.advance(D);
    assert!(guard.deadline() <= clock.monotonic());
    assert!(matches!(guard.check(), Err(LeaseError::Lost { .. })));
}

#[test]
fn takeover_is_reported_as_not_owned() {
    let (clock, backend, key) = setup();
    let (guard, reasons) = keep_telling(&backend, &key);
    let (token, _) = holder(&backend, &key);
    pollster::block_on(backend.inner.release(&key, &token, guard.fencing_token())).unwrap();
    let once = AcquireOptions::default();
    let thief = pollster::block_on(backend.try_acquire(&key, D, &once)).unwrap();
    step(&clock, D / 3);
    wait_for(|| !reasons.lock().unwrap().is_empty());
    assert_eq!(
        lost_reason(guard.check()),
        LossReason::NotOwned(NotOwnedReason::TakenOver)
    );
    assert!(thief.fencing_token() > guard.fencing_token());
}

#[test]
fn dropping_the_guard_releases_and_explicit_release_is_one_call() {
    let (_clock, backend, key) = setup();
    let guard = keep(&backend, &key);
    drop(guard);
    wait_for(|| backend.releases.load(Ordering::SeqCst) == 1);
    let guard = keep(&backend, &key);
    guard.release().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        backend.releases.load(Ordering::SeqCst),
        2,
        "no second release from the task"
    );
}

/// The async guard's `lost()` completes with the reason on any executor.
#[test]
fn an_async_guard_reports_its_loss_through_lost() {
    let (clock, backend, key) = setup();
    let guard =
        pollster::block_on(LeaseGuard::builder(backend.clone(), &key, D).acquire()).unwrap();
    let (token, _) = holder(&backend, &key);
    pollster::block_on(backend.inner.release(&key, &token, guard.fencing_token())).unwrap();
    step(&clock, D / 3);
    assert_eq!(
        pollster::block_on(guard.lost()),
        LossReason::NotOwned(NotOwnedReason::Missing)
    );
    assert!(guard.check().is_err());
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeps_on_tokio_and_runs_with_the_system_clock() {
    let backend: Arc<dyn LeaseBackend> = Arc::new(MemoryBackend::new());
    let key = LeaseKey::new("tokio").unwrap();
    let guard = LeaseGuard::builder(backend.clone(), &key, Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(guard.check().is_ok(), "renewed for three durations");
    guard.release().await.unwrap();
}

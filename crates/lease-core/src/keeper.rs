//! Keeping a lease: guards that prove holding, renewal ahead of expiry, and the moment a lease
//! can no longer be trusted.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::contract::acquire_waiting;
// A counting lease hands out this module's guards through a builder target of its own.
pub(crate) mod counting;

use crate::executor::sleep_until;
use crate::options::AcquireOptions;
use crate::sync::lock;
use crate::{
    Backoff, BoxFuture, FencingToken, Lease, LeaseBackend, LeaseError, LeaseKey, LossReason,
    NotOwnedReason, WaitOptions,
};
use counting::CountingLease;

/// A callback told once when the lease is lost.
type LossCallback = Arc<dyn Fn(&LossReason) + Send + Sync>;

/// How a keeper renews: set through [`LeaseGuardBuilder`].
#[derive(Clone, Default)]
pub(crate) struct KeeperOptions {
    pub(crate) renew_every: Option<Duration>,
    pub(crate) on_lost: Option<LossCallback>,
}

impl fmt::Debug for KeeperOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeeperOptions")
            .field("renew_every", &self.renew_every)
            .field("on_lost", &self.on_lost.is_some())
            .finish()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// The guard released the lease itself.
    Released,
    /// The guard was dropped: the task releases best-effort.
    Dropped,
}

struct State {
    lease: Lease,
    lost: Option<LossReason>,
    releasing: bool,
    stop: Option<Stop>,
    task_waker: Option<Waker>,
    loss_wakers: Vec<Waker>,
}

struct Shared {
    backend: Arc<dyn LeaseBackend>,
    state: Mutex<State>,
    on_lost: Option<LossCallback>,
    /// The process that acquired the lease, whose keeper renews it: a `fork`ed child's copy of
    /// the guard has no keeper, and must not wait for a lock the keeper held at the fork.
    acquired_in: u32,
    /// The fencing token, which renewals keep: read without the state's lock.
    fencing: FencingToken,
    /// The deadline of the acquisition: what a forked child's copy reports when the keeper held
    /// the state's lock at the fork.
    first_deadline: Instant,
}

impl Shared {
    /// Whether this is a `fork`ed child's copy: the process is not the one that acquired.
    fn forked(&self) -> bool {
        self.acquired_in != std::process::id()
    }

    /// The state, without waiting in a forked child: the keeper there is the parent's, and a
    /// lock it held at the moment of the fork stays locked forever (`None` then).
    fn state_here(&self) -> Option<MutexGuard<'_, State>> {
        if !self.forked() {
            return Some(lock(&self.state));
        }
        match self.state.try_lock() {
            Ok(state) => Some(state),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    fn lease(&self) -> Lease {
        lock(&self.state).lease.clone()
    }

    fn lose(&self, reason: LossReason) {
        let wakers = {
            let mut state = lock(&self.state);
            if state.lost.is_some() || state.releasing || state.stop.is_some() {
                return;
            }
            state.lost = Some(reason.clone());
            std::mem::take(&mut state.loss_wakers)
        };
        let key = self.lease().key().clone();
        tracing::warn!(%key, %reason, "lease lost");
        crate::metrics::loss(self.backend.name(), &reason);
        // `check` fails from here on; the callback runs before `lost()` waiters wake, so whoever
        // awaits the loss sees the callback's effects.
        if let Some(callback) = &self.on_lost {
            callback(&reason);
        }
        for waker in wakers {
            waker.wake();
        }
    }

    fn stop_requested(&self, cx: &Context<'_>) -> Option<Stop> {
        let mut state = lock(&self.state);
        if state.stop.is_none() {
            state.task_waker = Some(cx.waker().clone());
        }
        state.stop
    }

    fn request_stop(&self, stop: Stop) {
        let waker = {
            let mut state = lock(&self.state);
            if state.stop.is_none() {
                state.stop = Some(stop);
            }
            state.task_waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// Proof of holding a lease, kept alive by renewals: the async guard.
///
/// Get one with [`LeaseGuard::builder`] (one key), [`CountingLease::lease`] (a slot of at most N
/// holders) or [`Election::campaign`](crate::Election::campaign) (a leader's lease), then
/// [`acquire`](LeaseGuardBuilder::acquire) it. While it lives a keeper renews the lease every
/// third of its duration (on the current tokio runtime with the feature `tokio`, else on a thread
/// of its own).
///
/// * [`check`](Self::check) says, synchronously and from the monotonic clock, whether the holder
///   may still act: it fails the moment the lease is lost *or* its deadline passes, even if the
///   keeper has not run (a paused process learns it on its first check after resuming).
/// * [`lost`](Self::lost) is a future that completes with the reason when the lease is lost.
/// * [`release`](Self::release) gives the lease up; dropping the guard releases best-effort from
///   the keeper.
///
/// Every guard of this project has these names with these meanings: [`BlockingLeaseGuard`], the
/// file backend's `FileLockGuard` and the fleet's `UnitTask` too (blocking guards release
/// without `await` and have no `lost`).
///
/// ```
/// use lease_core::{LeaseGuard, LeaseKey, MemoryBackend};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lease_core::LeaseError> {
/// let store = Arc::new(MemoryBackend::new());
/// let key = LeaseKey::new("leader")?;
/// let guard = LeaseGuard::builder(store, &key, Duration::from_secs(3)).acquire().await?;
/// let fencing = guard.check()?; // pass it with every write to the protected resource
/// assert_eq!(fencing, guard.fencing_token());
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard releases the lease"]
pub struct LeaseGuard {
    shared: Arc<Shared>,
    key: LeaseKey,
    done: bool,
}

impl fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("LeaseGuard");
        match self.shared.state_here() {
            Some(state) => out.field("lease", &state.lease).field("lost", &state.lost),
            None => out.field("key", &self.key).field("forked", &true),
        };
        out.finish_non_exhaustive()
    }
}

/// The renewal loop of a guard: a `Send + 'static` future, spawned where the guard was acquired.
/// It completes when the lease is released, lost, or the guard is dropped (after the
/// best-effort release).
struct KeeperTask {
    future: BoxFuture<'static, ()>,
}

impl Future for KeeperTask {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.future.as_mut().poll(cx)
    }
}

impl LeaseGuard {
    /// A builder that acquires `key` for `duration` from `backend` and keeps it. Set how to wait
    /// ([`with_wait`](LeaseGuardBuilder::with_wait), default: until acquired; a zero timeout
    /// makes one attempt), what the record says ([`with_options`](LeaseGuardBuilder::with_options))
    /// and how to renew, then [`acquire`](LeaseGuardBuilder::acquire) (async) or
    /// [`acquire_blocking`](LeaseGuardBuilder::acquire_blocking).
    ///
    /// ```
    /// use lease_core::{LeaseGuard, LeaseKey, MemoryBackend, WaitOptions};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let key = LeaseKey::new("nightly")?;
    /// let guard = LeaseGuard::builder(Arc::new(MemoryBackend::new()), &key, Duration::from_secs(3))
    ///     .with_wait(WaitOptions::new(Duration::from_secs(5)))
    ///     .acquire_blocking()?;
    /// assert!(guard.check().is_ok());
    /// guard.release()?;
    /// # Ok::<(), lease_core::LeaseError>(())
    /// ```
    pub fn builder(
        backend: Arc<dyn LeaseBackend>,
        key: &LeaseKey,
        duration: Duration,
    ) -> LeaseGuardBuilder {
        LeaseGuardBuilder::new(backend, Target::Key(key.clone()), duration)
    }

    /// A guard for `lease` and the task that keeps it.
    fn keep(
        backend: Arc<dyn LeaseBackend>,
        lease: Lease,
        options: KeeperOptions,
    ) -> (Self, KeeperTask) {
        let key = lease.key().clone();
        let span = tracing::debug_span!("lease_keeper", key = %lease.key(), fencing = %lease.fencing_token());
        let (fencing, first_deadline) = (lease.fencing_token(), lease.deadline());
        let shared = Arc::new(Shared {
            backend,
            fencing,
            first_deadline,
            state: Mutex::new(State {
                lease,
                lost: None,
                releasing: false,
                stop: None,
                task_waker: None,
                loss_wakers: Vec::new(),
            }),
            on_lost: options.on_lost.clone(),
            acquired_in: std::process::id(),
        });
        let task = KeeperTask {
            future: Box::pin(tracing::Instrument::instrument(
                keep(shared.clone(), options),
                span,
            )),
        };
        (
            Self {
                shared,
                key,
                done: false,
            },
            task,
        )
    }

    /// A guard for `lease` and its keeper task, for the conformance suite to drive by hand.
    #[cfg(feature = "conformance")]
    pub(crate) fn keep_for_test(
        backend: Arc<dyn LeaseBackend>,
        lease: Lease,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        Self::keep(backend, lease, KeeperOptions::default())
    }

    /// The lease as of the last renewal.
    #[cfg_attr(not(feature = "conformance"), allow(dead_code))]
    pub(crate) fn lease(&self) -> Lease {
        self.shared.lease()
    }

    /// Runs `task` where this guard lives: on the current tokio runtime (feature `tokio`), else
    /// on a thread of its own; if neither can start, releases the lease best-effort.
    fn start(self, task: KeeperTask) -> Result<Self, LeaseError> {
        #[cfg(feature = "tokio")]
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(task);
            return Ok(self);
        }
        self.start_on_thread(task)
    }

    fn start_on_thread(self, task: KeeperTask) -> Result<Self, LeaseError> {
        let spawned = std::thread::Builder::new()
            .name(format!("lease-keeper-{}", self.key))
            .spawn(move || crate::executor::block_on(task));
        match spawned {
            Ok(_) => Ok(self),
            Err(e) => {
                let _ = crate::executor::block_on(self.release());
                Err(LeaseError::runtime(format!(
                    "cannot start the keeper thread: {e}"
                )))
            }
        }
    }

    /// The key held (for a counting lease: the slot's key).
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// The fencing token: pass it with every write to the protected resource. It stays the
    /// same across renewals.
    pub fn fencing_token(&self) -> FencingToken {
        self.shared.fencing
    }

    /// `Ok(fencing token)` while the lease can be trusted.
    ///
    /// A `fork`ed child's copy of the guard is never trusted: the keeper that renews the lease
    /// is the parent's, and so is the lease.
    ///
    /// # Errors
    /// [`LeaseError::Lost`] with the [`LossReason`] once it cannot, or with
    /// [`LossReason::DeadlinePassed`] when the deadline passed before the keeper noticed (and
    /// at once in a forked child, which has no keeper).
    pub fn check(&self) -> Result<FencingToken, LeaseError> {
        if self.shared.forked() {
            return Err(LeaseError::lost(
                self.key.clone(),
                LossReason::DeadlinePassed,
            ));
        }
        let state = lock(&self.shared.state);
        if let Some(reason) = &state.lost {
            return Err(LeaseError::lost(self.key.clone(), reason.clone()));
        }
        if self.shared.backend.clock().monotonic() >= state.lease.deadline() {
            return Err(LeaseError::lost(
                self.key.clone(),
                LossReason::DeadlinePassed,
            ));
        }
        Ok(state.lease.fencing_token())
    }

    /// The holder-side deadline of the latest renewal, on the backend's monotonic clock: after
    /// it, [`check`](Self::check) fails. In a `fork`ed child, the latest known at the fork,
    /// read without waiting (the acquisition's if the parent's keeper held the state then).
    pub fn deadline(&self) -> Instant {
        self.shared
            .state_here()
            .map_or(self.shared.first_deadline, |state| state.lease.deadline())
    }

    /// Completes with the reason when the lease is lost. Cancel-safe; any number may wait. In a
    /// `fork`ed child it completes at once with [`LossReason::DeadlinePassed`], as
    /// [`check`](Self::check) fails there.
    pub fn lost(&self) -> Lost {
        Lost {
            shared: self.shared.clone(),
        }
    }

    /// Releases the lease (one backend release call) and stops the keeper.
    ///
    /// Cancel safety: if this future is dropped before it completes, the guard's drop hands the
    /// release to the keeper task, as for a dropped guard.
    ///
    /// # Errors
    /// What the backend's release returns, such as [`LeaseError::NotOwned`] after a loss.
    /// [`LeaseError::Unsupported`] in a `fork`ed child: the lease is the parent's, and the
    /// child's copy sends nothing (a release with the lease's tokens would end it on any store).
    pub async fn release(mut self) -> Result<(), LeaseError> {
        if self.shared.forked() {
            self.done = true;
            tracing::warn!(
                acquired_by = self.shared.acquired_in,
                "release refused in a forked child"
            );
            return Err(LeaseError::unsupported(
                self.shared.backend.name(),
                "release in a process other than the one that acquired the lease (a forked child)",
            ));
        }
        let lease = {
            let mut state = lock(&self.shared.state);
            state.releasing = true;
            state.lease.clone()
        };
        let result = self
            .shared
            .backend
            .release(lease.key(), lease.token(), lease.fencing_token())
            .await;
        self.done = true;
        self.shared.request_stop(Stop::Released);
        match &result {
            Ok(()) => tracing::debug!(key = %lease.key(), "lease released"),
            Err(error) => tracing::warn!(key = %lease.key(), %error, "lease release failed"),
        }
        result
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if self.shared.acquired_in != std::process::id() {
            // A `fork`ed child's copy: the keeper (a thread or task of the parent) does not
            // exist here and goes on renewing in the parent, which still holds the lease. Its
            // state's lock may have been held by the keeper at the moment of the fork, and then
            // stays locked here forever: waiting for it would hang the child's drop.
            return;
        }
        self.shared.request_stop(Stop::Dropped);
    }
}

/// Proof of holding a lease, for code without an async runtime: the blocking guard.
///
/// [`acquire_blocking`](LeaseGuardBuilder::acquire_blocking) returns it. Its keeper renews on a
/// thread of its own, so it suits the backends that need no async runtime (memory, files); a
/// DynamoDB lease is kept by the async [`LeaseGuard`] on tokio. The same names mean the same as
/// on [`LeaseGuard`]; [`release`](Self::release) blocks instead of returning a future.
///
/// ```
/// use lease_core::{LeaseGuard, LeaseKey, MemoryBackend};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let store = Arc::new(MemoryBackend::new());
/// let guard = LeaseGuard::builder(store, &LeaseKey::new("nightly")?, Duration::from_secs(30))
///     .acquire_blocking()?;
/// let fencing = guard.check()?; // pass it with every write
/// # let _ = fencing;
/// guard.release()?;
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
#[must_use = "dropping the guard releases the lease"]
#[derive(Debug)]
pub struct BlockingLeaseGuard {
    inner: LeaseGuard,
}

impl BlockingLeaseGuard {
    /// The key held (for a counting lease: the slot's key).
    pub fn key(&self) -> &LeaseKey {
        self.inner.key()
    }

    /// The fencing token: pass it with every write to the protected resource.
    pub fn fencing_token(&self) -> FencingToken {
        self.inner.fencing_token()
    }

    /// `Ok(fencing token)` while the lease can be trusted.
    ///
    /// # Errors
    /// As [`LeaseGuard::check`].
    pub fn check(&self) -> Result<FencingToken, LeaseError> {
        self.inner.check()
    }

    /// The holder-side deadline of the latest renewal.
    pub fn deadline(&self) -> Instant {
        self.inner.deadline()
    }

    /// Releases the lease (one backend release call, on this thread) and stops the keeper.
    ///
    /// # Errors
    /// As [`LeaseGuard::release`].
    pub fn release(self) -> Result<(), LeaseError> {
        crate::executor::block_on(self.inner.release())
    }
}

/// What a [`LeaseGuardBuilder`] acquires.
#[derive(Debug)]
pub(crate) enum Target {
    /// One key.
    Key(LeaseKey),
    /// A free slot of a counting lease.
    Slots(CountingLease),
}

/// Acquires a lease and keeps it: made by [`LeaseGuard::builder`], [`CountingLease::lease`] and
/// [`Election::campaign`](crate::Election::campaign).
#[must_use = "a builder does nothing until acquire or acquire_blocking"]
pub struct LeaseGuardBuilder {
    backend: Arc<dyn LeaseBackend>,
    target: Target,
    duration: Duration,
    wait: WaitOptions,
    options: AcquireOptions,
    keeper: KeeperOptions,
}

impl fmt::Debug for LeaseGuardBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuardBuilder")
            .field("backend", &self.backend.name())
            .field("target", &self.target)
            .field("duration", &self.duration)
            .field("wait", &self.wait)
            .field("options", &self.options)
            .field("keeper", &self.keeper)
            .finish()
    }
}

impl LeaseGuardBuilder {
    pub(crate) fn new(backend: Arc<dyn LeaseBackend>, target: Target, duration: Duration) -> Self {
        Self {
            backend,
            target,
            duration,
            wait: WaitOptions::default(),
            options: AcquireOptions::default(),
            keeper: KeeperOptions::default(),
        }
    }

    /// How to wait while the lease is held (default: until acquired, no timeout). A zero
    /// timeout makes one attempt and fails with [`LeaseError::Held`], naming the holder, when
    /// the lease is busy.
    pub fn with_wait(mut self, wait: WaitOptions) -> Self {
        self.wait = wait;
        self
    }

    /// What the lease's record says of its holder: an owner description, a published value
    /// (an address, an id), a token of the caller's choosing. A value set before (by
    /// [`Election::campaign`](crate::Election::campaign)) stays unless `options` names one.
    pub fn with_options(mut self, options: AcquireOptions) -> Self {
        let value = self.options.value().map(str::to_owned);
        self.options = options;
        if let (None, Some(value)) = (self.options.value(), value) {
            self.options = std::mem::take(&mut self.options).with_value(value);
        }
        self
    }

    /// Renew this often (default: a third of the lease duration). Renewals that fail are
    /// retried with backoff until the holder-side deadline.
    pub fn with_renew_every(mut self, every: Duration) -> Self {
        self.keeper.renew_every = Some(every.max(Duration::from_millis(1)));
        self
    }

    /// Calls `callback` once, from the keeper, when the lease is lost: after `check` starts
    /// failing and before [`LeaseGuard::lost`] completes.
    pub fn on_lost(mut self, callback: impl Fn(&LossReason) + Send + Sync + 'static) -> Self {
        self.keeper.on_lost = Some(Arc::new(callback));
        self
    }

    pub(crate) fn options_mut(&mut self) -> &mut AcquireOptions {
        &mut self.options
    }

    /// Acquires, waiting as set, and starts the keeper: on the current tokio runtime with the
    /// feature `tokio` (which the DynamoDB backend needs), else on a thread of its own.
    ///
    /// Cancel safety: dropping the future before it completes may leave a lease granted that
    /// nobody renews; it expires after its duration.
    ///
    /// # Errors
    /// [`LeaseError::Held`] after a single attempt (zero timeout), [`LeaseError::Timeout`] when
    /// waiting ran out, invalid input and permanent failures at once; [`LeaseError::Runtime`]
    /// when no keeper can start (the lease is then released).
    pub async fn acquire(self) -> Result<LeaseGuard, LeaseError> {
        let keeper = self.keeper.clone();
        let backend = self.backend.clone();
        let lease = self.acquire_lease().await?;
        let (guard, task) = LeaseGuard::keep(backend, lease, keeper);
        guard.start(task)
    }

    /// Acquires on the current thread, waiting as set, and keeps the lease from a thread of its
    /// own: for code without an async runtime, on the backends that need none (memory, files).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn acquire_blocking(self) -> Result<BlockingLeaseGuard, LeaseError> {
        let keeper = self.keeper.clone();
        let backend = self.backend.clone();
        let lease = crate::executor::block_on(self.acquire_lease())?;
        let (guard, task) = LeaseGuard::keep(backend, lease, keeper);
        Ok(BlockingLeaseGuard {
            inner: guard.start_on_thread(task)?,
        })
    }

    async fn acquire_lease(self) -> Result<Lease, LeaseError> {
        let backend = self.backend.as_ref();
        let (duration, options) = (self.duration, &self.options);
        match &self.target {
            Target::Key(key) => acquire_waiting(backend, key, duration, &self.wait, options).await,
            Target::Slots(counting) => {
                counting
                    .acquire_slot(backend, duration, &self.wait, options)
                    .await
            }
        }
    }
}

/// The future [`LeaseGuard::lost`] returns: completes with the reason when the lease is lost.
#[must_use = "futures do nothing unless polled"]
pub struct Lost {
    shared: Arc<Shared>,
}

impl fmt::Debug for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lost").finish_non_exhaustive()
    }
}

impl Future for Lost {
    type Output = LossReason;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<LossReason> {
        if self.shared.forked() {
            return Poll::Ready(LossReason::DeadlinePassed);
        }
        let mut state = lock(&self.shared.state);
        if let Some(reason) = &state.lost {
            return Poll::Ready(reason.clone());
        }
        if !state.loss_wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.loss_wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

enum Event<T> {
    Stop(Stop),
    Done(T),
    Timer,
}

/// Races a stop request, an optional piece of work and a timer.
struct Race<'a, T> {
    shared: &'a Shared,
    work: Option<BoxFuture<'a, T>>,
    timer: BoxFuture<'static, ()>,
}

impl<T> Future for Race<'_, T> {
    type Output = Event<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Event<T>> {
        if let Some(stop) = self.shared.stop_requested(cx) {
            return Poll::Ready(Event::Stop(stop));
        }
        if let Some(Poll::Ready(output)) = self.work.as_mut().map(|work| work.as_mut().poll(cx)) {
            return Poll::Ready(Event::Done(output));
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Event::Timer),
            Poll::Pending => Poll::Pending,
        }
    }
}

async fn keep(shared: Arc<Shared>, options: KeeperOptions) {
    let backend = shared.backend.clone();
    let clock = backend.clock();
    let first = shared.lease();
    let duration = first.duration();
    let every = options
        .renew_every
        .unwrap_or(duration / 3)
        .max(Duration::from_millis(1));
    let (retry_initial, retry_max) = (
        Duration::from_millis(20),
        (duration / 10).max(Duration::from_millis(20)),
    );
    let mut backoff = Backoff::new(retry_initial, retry_max);
    let mut next_renew = crate::lease::instant_after(clock.monotonic(), every);
    let mut last_error: Option<LeaseError> = None;

    let stop = loop {
        let lease = shared.lease();
        let deadline = lease.deadline();
        let idle = Race::<()> {
            shared: &shared,
            work: None,
            timer: sleep_until(clock, next_renew.min(deadline)),
        };
        if let Event::Stop(stop) = idle.await {
            break stop;
        }
        if clock.monotonic() >= deadline {
            lose_at_deadline(&shared, last_error.take()).await;
            return;
        }
        let sent = clock.monotonic();
        let renewal = Race {
            shared: &shared,
            work: Some(backend.renew(&lease, duration)),
            timer: sleep_until(clock, deadline),
        };
        match renewal.await {
            Event::Stop(stop) => break stop,
            Event::Timer => {
                lose_at_deadline(&shared, last_error.take()).await;
                return;
            }
            Event::Done(Ok(renewed)) => {
                tracing::trace!(key = %renewed.key(), "lease renewed");
                lock(&shared.state).lease = renewed;
                last_error = None;
                backoff.reset();
                next_renew = sent + every;
            }
            Event::Done(Err(error)) => {
                if let Some(reason) = error.not_owned_reason() {
                    shared.lose(LossReason::NotOwned(reason));
                    return;
                }
                if error.is_held() {
                    shared.lose(LossReason::NotOwned(NotOwnedReason::TakenOver));
                    return;
                }
                tracing::warn!(key = %lease.key(), %error, "lease renewal failed; retrying");
                last_error = Some(error);
                next_renew = crate::lease::instant_after(clock.monotonic(), backoff.next_delay());
            }
        }
    };
    if stop == Stop::Dropped {
        let lease = shared.lease();
        match backend
            .release(lease.key(), lease.token(), lease.fencing_token())
            .await
        {
            Ok(()) => tracing::debug!(key = %lease.key(), "lease released on drop"),
            Err(error) => tracing::warn!(key = %lease.key(), %error, "release on drop failed"),
        }
    }
}

/// The deadline passed: tell the holder, then release best-effort in case a renewal did land, so
/// a live record of ours does not keep others waiting.
async fn lose_at_deadline(shared: &Shared, last_error: Option<LeaseError>) {
    shared.lose(match last_error {
        Some(last_error) => LossReason::BackendFailing(Arc::new(last_error)),
        None => LossReason::DeadlinePassed,
    });
    let lease = shared.lease();
    if let Err(error) = shared
        .backend
        .release(lease.key(), lease.token(), lease.fencing_token())
        .await
    {
        tracing::debug!(key = %lease.key(), %error, "release after loss failed");
    }
}

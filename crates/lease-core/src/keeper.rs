//! Keeping a lease: renewal ahead of expiry, and a guard that knows when it can no longer trust it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::executor::sleep_until;
use crate::sync::lock;
use crate::{
    Backoff, BoxFuture, FencingToken, Lease, LeaseBackend, LeaseBackendExt, LeaseError, LeaseKey,
    LossReason, NotOwnedReason, WaitOptions,
};

/// A callback told once when the lease is lost.
pub type LossCallback = Arc<dyn Fn(&LossReason) + Send + Sync>;

/// How a keeper renews.
///
/// ```
/// use lease_core::KeeperOptions;
/// use std::time::Duration;
///
/// let options = KeeperOptions::default()
///     .with_renew_every(Duration::from_secs(5))
///     .on_lost(|reason| eprintln!("{reason}"));
/// # let _ = options;
/// ```
#[derive(Clone, Default)]
pub struct KeeperOptions {
    renew_every: Option<Duration>,
    duration: Option<Duration>,
    retry: Option<(Duration, Duration)>,
    on_lost: Option<LossCallback>,
}

impl fmt::Debug for KeeperOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeeperOptions")
            .field("renew_every", &self.renew_every)
            .field("duration", &self.duration)
            .field("retry", &self.retry)
            .field("on_lost", &self.on_lost.is_some())
            .finish()
    }
}

impl KeeperOptions {
    /// Renew this often (default: a third of the lease duration).
    pub fn with_renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every.max(Duration::from_millis(1)));
        self
    }

    /// Renew for this duration (default: the lease's own duration).
    pub fn with_duration(mut self, duration: Duration) -> Self {
        self.duration = Some(duration);
        self
    }

    /// Backoff between failed renewals (default: 20 ms doubling to a tenth of the duration).
    pub fn with_retry_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.retry = Some((initial, max));
        self
    }

    /// Calls `callback` once, from the keeper task, when the lease is lost: after
    /// [`LeaseGuard::check`] starts failing and before [`LeaseGuard::lost`] completes.
    pub fn on_lost(mut self, callback: impl Fn(&LossReason) + Send + Sync + 'static) -> Self {
        self.on_lost = Some(Arc::new(callback));
        self
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
}

impl Shared {
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

/// Holds a lease and keeps it alive through its [`KeeperTask`].
///
/// Acquire and keep in one call with [`LeaseGuard::builder`]; wrap a [`Lease`] you already hold
/// with [`new`](Self::new), [`spawn_thread`](Self::spawn_thread) or `spawn` (feature `tokio`).
///
/// * [`check`](Self::check) says, synchronously and from the monotonic clock, whether the holder
///   may still act: it fails the moment the lease is lost *or* its deadline passes, even if the
///   keeper task has not run (a paused process learns it on its first check after resuming).
/// * [`lost`](Self::lost) is a future that completes with the reason when the lease is lost.
/// * [`release`](Self::release) gives the lease up; dropping the guard releases best-effort from
///   the keeper task.
///
/// The guard owns an `Arc` of the backend, so it is `'static` and can move between tasks.
///
/// ```
/// use lease_core::{KeeperOptions, LeaseBackend, LeaseBackendExt, LeaseGuard, LeaseKey, MemoryBackend};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let store: Arc<dyn LeaseBackend> = Arc::new(MemoryBackend::new());
/// let key = LeaseKey::new("leader")?;
/// let lease = lease_core::executor::block_on(store.acquire(&key, Duration::from_secs(3)))?;
/// let guard = LeaseGuard::spawn_thread(store.clone(), lease, KeeperOptions::default())
///     .expect("spawn keeper thread");
/// let fencing = guard.check().expect("freshly acquired");
/// assert_eq!(fencing, guard.fencing_token());
/// lease_core::executor::block_on(guard.release())?;
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
#[must_use = "dropping the guard releases the lease"]
pub struct LeaseGuard {
    shared: Arc<Shared>,
    done: bool,
}

impl fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.shared.state);
        f.debug_struct("LeaseGuard")
            .field("lease", &state.lease)
            .field("lost", &state.lost)
            .finish_non_exhaustive()
    }
}

/// The renewal loop of a [`LeaseGuard`]: a `Send + 'static` future to spawn on any executor.
///
/// It completes when the lease is released, lost, or the guard is dropped (after the best-effort
/// release). If it is never polled, nothing renews the lease and the guard's
/// [`check`](LeaseGuard::check) fails at the deadline.
#[must_use = "the keeper task does nothing unless spawned or polled"]
pub struct KeeperTask {
    future: BoxFuture<'static, ()>,
}

impl fmt::Debug for KeeperTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeeperTask").finish_non_exhaustive()
    }
}

impl Future for KeeperTask {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.future.as_mut().poll(cx)
    }
}

impl LeaseGuard {
    /// A guard for `lease` and the task that keeps it. Spawn the task on your executor.
    pub fn new(
        backend: Arc<dyn LeaseBackend>,
        lease: Lease,
        options: KeeperOptions,
    ) -> (Self, KeeperTask) {
        let shared = Arc::new(Shared {
            backend,
            state: Mutex::new(State {
                lease,
                lost: None,
                releasing: false,
                stop: None,
                task_waker: None,
                loss_wakers: Vec::new(),
            }),
            on_lost: options.on_lost.clone(),
        });
        let span = {
            let lease = lock(&shared.state).lease.clone();
            tracing::debug_span!("lease_keeper", key = %lease.key(), fencing = %lease.fencing_token())
        };
        let task = KeeperTask {
            future: Box::pin(tracing::Instrument::instrument(
                keep(shared.clone(), options),
                span,
            )),
        };
        (
            Self {
                shared,
                done: false,
            },
            task,
        )
    }

    /// A builder that acquires `key` for `duration` from `backend` and keeps it: set how to
    /// wait ([`with_wait`](LeaseGuardBuilder::with_wait), default: until acquired) and how to
    /// renew ([`with_keeper`](LeaseGuardBuilder::with_keeper)), then acquire where the renewal
    /// task should run: [`acquire_blocking`](LeaseGuardBuilder::acquire_blocking) (a thread),
    /// `acquire_spawned` (tokio, feature `tokio`), or
    /// [`acquire`](LeaseGuardBuilder::acquire) (the task handed to you).
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
    /// assert!(guard.is_trusted());
    /// lease_core::executor::block_on(guard.release())?;
    /// # Ok::<(), lease_core::LeaseError>(())
    /// ```
    pub fn builder(
        backend: Arc<dyn LeaseBackend>,
        key: &LeaseKey,
        duration: Duration,
    ) -> LeaseGuardBuilder {
        LeaseGuardBuilder {
            backend,
            key: key.clone(),
            duration,
            wait: WaitOptions::default(),
            value: None,
            keeper: KeeperOptions::default(),
        }
    }

    /// Like [`new`](Self::new), running the task on a thread of its own with
    /// [`block_on`](crate::executor::block_on): for backends that need no async runtime (memory, file).
    ///
    /// # Errors
    /// [`LeaseError::Runtime`] if the thread cannot be spawned (the lease is then released
    /// best-effort).
    pub fn spawn_thread(
        backend: Arc<dyn LeaseBackend>,
        lease: Lease,
        options: KeeperOptions,
    ) -> Result<Self, LeaseError> {
        let (guard, task) = Self::new(backend, lease, options);
        guard.on_thread(task)
    }

    /// Runs `task` on a thread of its own; if none can start, releases the lease best-effort.
    pub(crate) fn on_thread(self, task: KeeperTask) -> Result<Self, LeaseError> {
        let spawned = std::thread::Builder::new()
            .name(format!("lease-keeper-{}", self.key()))
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

    /// Like [`new`](Self::new), spawning the task on the current tokio runtime.
    ///
    /// # Errors
    /// [`LeaseError::Runtime`] when called outside a tokio runtime.
    #[cfg(feature = "tokio")]
    pub fn spawn(
        backend: Arc<dyn LeaseBackend>,
        lease: Lease,
        options: KeeperOptions,
    ) -> Result<Self, LeaseError> {
        let handle = tokio_handle()?;
        let (guard, task) = Self::new(backend, lease, options);
        handle.spawn(task);
        Ok(guard)
    }

    /// The key.
    pub fn key(&self) -> LeaseKey {
        self.shared.lease().key().clone()
    }

    /// The lease as of the last renewal.
    pub fn lease(&self) -> Lease {
        self.shared.lease()
    }

    /// The fencing token: pass it with every write to the protected resource.
    pub fn fencing_token(&self) -> FencingToken {
        self.shared.lease().fencing_token()
    }

    /// `Ok(fencing token)` while the lease can be trusted; the loss reason once it cannot.
    ///
    /// # Errors
    /// The [`LossReason`], or [`LossReason::DeadlinePassed`] when the deadline passed before the
    /// keeper task noticed.
    pub fn check(&self) -> Result<FencingToken, LossReason> {
        let state = lock(&self.shared.state);
        if let Some(reason) = &state.lost {
            return Err(reason.clone());
        }
        if self.shared.backend.clock().monotonic() >= state.lease.deadline() {
            return Err(LossReason::DeadlinePassed);
        }
        Ok(state.lease.fencing_token())
    }

    /// Whether [`check`](Self::check) succeeds.
    pub fn is_trusted(&self) -> bool {
        self.check().is_ok()
    }

    /// The holder-side deadline of the latest renewal.
    pub fn deadline(&self) -> Instant {
        self.shared.lease().deadline()
    }

    /// Completes with the reason when the lease is lost. Cancel-safe; any number may wait.
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
    pub async fn release(mut self) -> Result<(), LeaseError> {
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
        if !self.done {
            self.shared.request_stop(Stop::Dropped);
        }
    }
}

/// Acquires a lease and keeps it: [`LeaseGuard::builder`], `with_*` setters, then one of the
/// acquiring calls, which say where the renewal task runs.
///
/// Every acquiring call waits as [`with_wait`](Self::with_wait) says (default
/// [`WaitOptions::default()`]: until acquired) through
/// [`LeaseBackendExt::acquire_with`]; nothing is kept until the lease is acquired.
#[must_use = "a builder does nothing until one of its acquire calls"]
pub struct LeaseGuardBuilder {
    backend: Arc<dyn LeaseBackend>,
    key: LeaseKey,
    duration: Duration,
    wait: WaitOptions,
    /// Published with the acquisition unless the wait's own options name a value: kept apart
    /// from `wait` so that replacing the wait does not drop it.
    value: Option<String>,
    keeper: KeeperOptions,
}

impl fmt::Debug for LeaseGuardBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuardBuilder")
            .field("backend", &self.backend.name())
            .field("key", &self.key)
            .field("duration", &self.duration)
            .field("wait", &self.wait)
            .field("value", &self.value)
            .field("keeper", &self.keeper)
            .finish()
    }
}

impl LeaseGuardBuilder {
    /// How to wait for a held lease (default: [`WaitOptions::default()`], until acquired).
    /// `WaitOptions::new(Duration::ZERO)` makes one attempt, failing with
    /// [`LeaseError::Timeout`] naming the holder. A value set with
    /// [`with_value`](Self::with_value) (or by [`Election::campaign`](crate::Election::campaign))
    /// is kept: it is published unless `wait`'s own
    /// [`AcquireOptions::with_value`](crate::AcquireOptions::with_value) names another.
    pub fn with_wait(mut self, wait: WaitOptions) -> Self {
        self.wait = wait;
        self
    }

    /// Publishes `value` in the lease record with the acquisition (at most
    /// [`MAX_LEASE_VALUE_BYTES`](crate::MAX_LEASE_VALUE_BYTES)), as
    /// [`AcquireOptions::with_value`](crate::AcquireOptions::with_value) does, whatever
    /// [`with_wait`](Self::with_wait) is called with before or after, unless the wait's own
    /// acquire options name a value.
    ///
    /// ```
    /// use lease_core::{LeaseBackend, LeaseGuard, LeaseKey, MemoryBackend, WaitOptions};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let store = Arc::new(MemoryBackend::new());
    /// let key = LeaseKey::new("primary")?;
    /// let guard = LeaseGuard::builder(store.clone(), &key, Duration::from_secs(3))
    ///     .with_value("10.0.0.7:5432")
    ///     .with_wait(WaitOptions::new(Duration::from_secs(5)))
    ///     .acquire_blocking()?;
    /// let record = lease_core::executor::block_on(store.inspect(&key))?.expect("held");
    /// assert_eq!(record.holder().and_then(|h| h.value()), Some("10.0.0.7:5432"));
    /// lease_core::executor::block_on(guard.release())?;
    /// # Ok::<(), lease_core::LeaseError>(())
    /// ```
    pub fn with_value(mut self, value: impl Into<String>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// How the keeper renews (default: [`KeeperOptions::default()`]).
    pub fn with_keeper(mut self, options: KeeperOptions) -> Self {
        self.keeper = options;
        self
    }

    /// Acquires, waiting as [`with_wait`](Self::with_wait) says, and returns the guard and its
    /// renewal task, for you to spawn on your executor.
    ///
    /// Cancel safety: dropping this future before it completes acquires nothing that outlives
    /// it, except that a backend's attempt already sent may land; its lease then expires
    /// unrenewed.
    ///
    /// ```
    /// use lease_core::{KeeperOptions, LeaseGuard, LeaseKey, MemoryBackend};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let key = LeaseKey::new("reindex")?;
    /// let builder = LeaseGuard::builder(Arc::new(MemoryBackend::new()), &key, Duration::from_secs(3))
    ///     .with_keeper(KeeperOptions::default().with_renew_every(Duration::from_secs(1)));
    /// let (guard, task) = lease_core::executor::block_on(builder.acquire())?;
    /// std::thread::spawn(move || lease_core::executor::block_on(task));
    /// lease_core::executor::block_on(guard.release())?;
    /// # Ok::<(), lease_core::LeaseError>(())
    /// ```
    ///
    /// # Errors
    /// As [`LeaseBackendExt::acquire_with`].
    pub async fn acquire(mut self) -> Result<(LeaseGuard, KeeperTask), LeaseError> {
        if let Some(value) = self.value.take()
            && self.wait.acquire.value().is_none()
        {
            self.wait.acquire = self.wait.acquire.with_value(value);
        }
        let lease = self
            .backend
            .acquire_with(&self.key, self.duration, &self.wait)
            .await?;
        Ok(LeaseGuard::new(self.backend, lease, self.keeper))
    }

    /// Acquires and keeps the lease from a thread of its own, without an async runtime: the one
    /// call for backends that need no I/O reactor (memory, file). Blocks the calling thread
    /// while it waits.
    ///
    /// # Errors
    /// As [`LeaseBackendExt::acquire_with`]; [`LeaseError::Runtime`] if the keeper thread
    /// cannot start (the lease is then released best-effort).
    pub fn acquire_blocking(self) -> Result<LeaseGuard, LeaseError> {
        let (guard, task) = crate::executor::block_on(self.acquire())?;
        guard.on_thread(task)
    }

    /// Acquires and keeps the lease from a task on the current tokio runtime: the one call for
    /// async code on tokio.
    ///
    /// Cancel safety: as [`acquire`](Self::acquire); once acquired, the guard is returned in
    /// the same poll, so a cancelled call never leaves a kept lease behind.
    ///
    /// # Errors
    /// [`LeaseError::Runtime`] outside a tokio runtime (nothing is sent); otherwise as
    /// [`LeaseBackendExt::acquire_with`].
    #[cfg(feature = "tokio")]
    pub async fn acquire_spawned(self) -> Result<LeaseGuard, LeaseError> {
        let handle = tokio_handle()?;
        let (guard, task) = self.acquire().await?;
        handle.spawn(task);
        Ok(guard)
    }
}

/// The current tokio runtime, or the error that says there is none.
#[cfg(feature = "tokio")]
fn tokio_handle() -> Result<tokio::runtime::Handle, LeaseError> {
    tokio::runtime::Handle::try_current()
        .map_err(|e| LeaseError::runtime(format!("keeping a lease on tokio needs a runtime: {e}")))
}

/// The future of [`LeaseGuard::lost`].
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
        if let Some(work) = self.work.as_mut()
            && let Poll::Ready(output) = work.as_mut().poll(cx)
        {
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
    let duration = options.duration.unwrap_or(first.duration());
    let every = options
        .renew_every
        .unwrap_or(duration / 3)
        .max(Duration::from_millis(1));
    let (retry_initial, retry_max) = options.retry.unwrap_or((
        Duration::from_millis(20),
        (duration / 10).max(Duration::from_millis(20)),
    ));
    let mut backoff = Backoff::new(retry_initial, retry_max);
    let mut next_renew = crate::lease::instant_after(clock.monotonic(), every);
    let mut last_error: Option<String> = None;

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
                last_error = Some(crate::human::error_chain(&error));
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
async fn lose_at_deadline(shared: &Shared, last_error: Option<String>) {
    shared.lose(match last_error {
        Some(last_error) => LossReason::BackendFailing { last_error },
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

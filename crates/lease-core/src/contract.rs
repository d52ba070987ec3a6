//! The contract between backends and callers.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

// `LeaseListing` extends the contract, which offers it through `as_listing`.
pub(crate) mod listing;

use crate::options::AcquireOptions;
use crate::wait::{Backoff, WaitEvent, WaitOptions};
use crate::{BoxFuture, Clock, FencingToken, Lease, LeaseError, LeaseKey, LeaseRecord, LeaseToken};

/// The backend contract: single-attempt operations on one lease store.
///
/// This is the *contract* between backends and callers, kept minimal and dyn-compatible
/// (`Arc<dyn LeaseBackend>` works); callers hold leases through guards
/// ([`LeaseGuard::builder`](crate::LeaseGuard::builder)), which wait, renew and release on top
/// of it. Each operation is one attempt: a backend may retry transient transport failures
/// inside it (and must reconcile a write whose reply was lost), but never a failed condition.
///
/// Semantics every backend keeps (checked by the conformance suite):
///
/// * **try_acquire** succeeds iff the key has no holder, or its holder's lease expired (plus the
///   backend's declared skew allowance). It issues a fencing token strictly greater than every
///   earlier one for the key since its record was last deleted. Otherwise [`LeaseError::Held`] with what is known of the holder,
///   also when the holder's token is the one the caller asked for
///   ([`AcquireOptions::with_token`]).
/// * **renew** succeeds iff the store holds `lease`'s tenure (its token *and* fencing token) and
///   the lease has not expired; the fencing token is unchanged. Otherwise
///   [`LeaseError::NotOwned`].
/// * **release** succeeds iff the store holds the tenure `(token, fencing)` for `key` (expired or
///   not): the key becomes free at once. Otherwise [`LeaseError::NotOwned`]; another tenure is
///   never touched, even one that reuses the same token.
/// * **inspect** reads the current record without changing it.
/// * **delete** (optional: the default returns [`LeaseError::Unsupported`]) removes the record
///   iff it is in exactly the state the caller names, `(Some(token), fencing)` for a holder
///   (expired or not) or `(None, fencing)` for a free record; otherwise, a missing record
///   included, [`LeaseError::NotOwned`] and nothing is deleted. Afterwards the key is absent
///   and its fencing counter starts again from the beginning.
/// * Invalid keys, tokens or durations fail with [`LeaseError::InvalidInput`] and write nothing.
/// * **Lost replies.** A backend that retries a request whose reply was lost reports success only
///   when it can tell that *its own* earlier attempt in this call was applied: never because the
///   store happens to be in the state the call asked for (a free key after a release, a token
///   that some other call wrote).
///
/// The returned [`Lease`]'s deadline is computed from the monotonic instant *before* the request
/// was sent (see [`holder_deadline`](crate::backend::holder_deadline)).
pub trait LeaseBackend: Send + Sync + fmt::Debug {
    /// A short name for errors and traces (`"memory"`, `"file"`, `"dynamodb"`).
    fn name(&self) -> &'static str;

    /// The clock this backend reads; the keeper and waiting helpers use it too.
    fn clock(&self) -> &dyn Clock;

    /// One attempt to acquire `key` for `duration`.
    fn try_acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        options: &'a AcquireOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>>;

    /// Extends a held lease to `duration` from now.
    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>>;

    /// Gives up the tenure of `key` identified by its owner `token` and `fencing` token (both as
    /// the [`Lease`] or the store's [`Holder`](crate::Holder) reports them). A record that no backend of this
    /// project wrote may carry no fencing counter (an item of the Go `lease` package): it has no
    /// tenure to name here; [`delete`](Self::delete) names it as it stands, with `fencing: None`.
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>>;

    /// Reads the record of `key`, or `None` if the store has never seen it.
    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>>;

    /// This backend as a [`LeaseListing`](crate::LeaseListing), if it can list a partition.
    ///
    /// Optional capabilities are found from the one object a caller holds, so one
    /// `Arc<dyn LeaseBackend>` serves everything: the default says "not offered".
    ///
    /// ```
    /// use lease_core::{LeaseBackend, MemoryBackend};
    /// use std::sync::Arc;
    ///
    /// let store: Arc<dyn LeaseBackend> = Arc::new(MemoryBackend::new());
    /// assert!(store.as_listing().is_some());
    /// assert!(store.as_fenced_values().is_some());
    /// ```
    fn as_listing(&self) -> Option<&dyn crate::LeaseListing> {
        None
    }

    /// This backend as a [`FencedValues`](crate::FencedValues) store, if it keeps fenced values.
    fn as_fenced_values(&self) -> Option<&dyn crate::FencedValues> {
        None
    }

    /// Deletes the record of `key` if it is in exactly the state the caller names: held by
    /// `holder` with fencing token `fencing` (`holder: Some(token)`), or not held with fencing
    /// counter `fencing` (`holder: None`), as [`inspect`](Self::inspect) or
    /// [`list_partition`](crate::LeaseListing::list_partition) reported it. This is a
    /// compare-and-delete: a record that changed since the caller read it (acquired, renewed
    /// by another tenure, released, taken over, or released and acquired again) is never
    /// deleted. `delete(record.key(), holder token, record.fencing_token())` deletes exactly what
    /// a record says.
    ///
    /// * A holder whose lease expired but was not released still holds the record, as for
    ///   [`release`](Self::release): name it with `Some(token)`; `None` is refused.
    /// * A record the store gave no fencing counter (see [`release`](Self::release)) is named
    ///   with `fencing: None`.
    /// * After a delete, `inspect` returns `None` and `list_partition` omits the key, as if the
    ///   store had never seen it. The next [`try_acquire`](Self::try_acquire) creates the record
    ///   afresh **with its fencing counter started again from the beginning**, as for a key the
    ///   store never saw (at 1 in memory; DynamoDB seeds it from the clock): tokens issued after
    ///   the delete may repeat, or fall below, tokens issued before it. A resource that kept an
    ///   old, higher token then refuses the new holder, and a paused holder of the old record
    ///   may pass a resource that saw only the new ones. So delete only records that nobody
    ///   will acquire again: a retired unit, the session of a worker that left for good.
    /// * Values kept by [`FencedValues`](crate::FencedValues) under the same key stay.
    ///
    /// Costs what a `release` costs in the backends that offer it (one conditional write).
    ///
    /// ```
    /// use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, MemoryBackend};
    /// use pollster::block_on;
    /// use std::time::Duration;
    ///
    /// let store = MemoryBackend::new();
    /// let key = LeaseKey::with_sort_key("units", "retired-7")?;
    /// let once = AcquireOptions::default();
    /// let lease = block_on(store.try_acquire(&key, Duration::from_secs(10), &once))?;
    /// let fencing = Some(lease.fencing_token());
    /// // Named as the record stands: held by `lease`'s token at its fencing token.
    /// let stale = block_on(store.delete(&key, None, fencing));
    /// assert!(stale.unwrap_err().is_not_owned(), "held, not free: nothing deleted");
    /// block_on(store.delete(&key, Some(lease.token()), fencing))?;
    /// assert!(block_on(store.inspect(&key))?.is_none());
    /// // A second delete finds no record in the state it names.
    /// let again = block_on(store.delete(&key, Some(lease.token()), fencing));
    /// assert!(again.unwrap_err().is_not_owned());
    /// # Ok::<(), lease_core::LeaseError>(())
    /// ```
    ///
    /// # Errors
    /// * [`LeaseError::NotOwned`] (the error `release` gives a tenure that does not hold the
    ///   lease) when the record is in any other state, and also when there is no record at all:
    ///   the caller named a state, and "absent" is not it. Reason
    ///   [`Missing`](crate::NotOwnedReason::Missing) when there is no record, or `holder` was
    ///   `Some` and the record has no holder; [`TakenOver`](crate::NotOwnedReason::TakenOver)
    ///   when another tenure holds the record or came and went since (another token, another
    ///   fencing token, or a holder where `None` was named). Nothing is deleted.
    /// * [`LeaseError::Unsupported`] from a backend that does not offer delete (this default);
    ///   nothing is sent.
    /// * [`LeaseError::InvalidInput`] for a key the backend cannot store; nothing is sent.
    /// * [`LeaseError::Backend`]: the outcome is unknown; read the record again.
    ///
    /// A backend that retries after a lost reply reports success only when it can tell that its
    /// own attempt deleted the record. A deleted record keeps no trace of who deleted it, so a
    /// retry that finds the record gone usually cannot tell, and reports `NotOwned` with reason
    /// `Missing`: the record is gone either way, but perhaps not by this call.
    fn delete<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: Option<&'a LeaseToken>,
        fencing: Option<FencingToken>,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        let _ = (key, holder, fencing);
        Box::pin(std::future::ready(Err(LeaseError::unsupported(
            self.name(),
            "delete",
        ))))
    }

    /// A future that completes when `key`'s holder may have let go, sooner than polling would
    /// notice: the file backend's kernel lock wakes it the moment the holder releases or dies.
    /// `None` (the default) when the backend has no such signal. The waiting helpers race it
    /// against their backoff, so it only ever shortens a wait; completing early is harmless.
    fn changed<'a>(&'a self, key: &'a LeaseKey) -> Option<BoxFuture<'a, ()>> {
        let _ = key;
        None
    }

    /// A watch on `key`'s record, if the backend can wake a reader when it changes: the memory
    /// backend sees every write; the file backend has the kernel report every change of the
    /// key's lock directory (inotify). `None` (the default) when only polling can tell; the
    /// [`Observer`](crate::Observer) then reads the record at its poll interval.
    ///
    /// The watch is armed when it is returned (see [`RecordWatch`](crate::RecordWatch)): make
    /// it, then read the record, then wait on it.
    ///
    /// ```
    /// use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, MemoryBackend};
    /// use pollster::block_on;
    /// use std::time::Duration;
    ///
    /// let store = MemoryBackend::new();
    /// let key = LeaseKey::new("primary")?;
    /// let mut watch = store.watch_record(&key).expect("memory sees every write");
    /// let _lease = block_on(store.try_acquire(&key, Duration::from_secs(10), &AcquireOptions::default()))?;
    /// block_on(watch.next_change()); // the acquisition woke it
    /// # Ok::<(), lease_core::LeaseError>(())
    /// ```
    fn watch_record(&self, key: &LeaseKey) -> Option<Box<dyn RecordWatch>> {
        let _ = key;
        None
    }
}

impl<B: LeaseBackend + ?Sized> LeaseBackend for Arc<B> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn clock(&self) -> &dyn Clock {
        (**self).clock()
    }
    fn as_listing(&self) -> Option<&dyn crate::LeaseListing> {
        (**self).as_listing()
    }
    fn as_fenced_values(&self) -> Option<&dyn crate::FencedValues> {
        (**self).as_fenced_values()
    }
    fn try_acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        options: &'a AcquireOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        (**self).try_acquire(key, duration, options)
    }
    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        (**self).renew(lease, duration)
    }
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        (**self).release(key, token, fencing)
    }
    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        (**self).inspect(key)
    }
    fn delete<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: Option<&'a LeaseToken>,
        fencing: Option<FencingToken>,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        (**self).delete(key, holder, fencing)
    }
    fn changed<'a>(&'a self, key: &'a LeaseKey) -> Option<BoxFuture<'a, ()>> {
        (**self).changed(key)
    }
    fn watch_record(&self, key: &LeaseKey) -> Option<Box<dyn RecordWatch>> {
        (**self).watch_record(key)
    }
}

/// A watch on one key's record, from [`LeaseBackend::watch_record`](crate::LeaseBackend::watch_record).
///
/// The watch is armed when it is made: a change that lands after that is never lost, even one
/// that lands before the first [`next_change`](Self::next_change). So a reader makes the watch,
/// *then* reads the record, then waits: every change after its read wakes it. Wake-ups may be
/// spurious (a renewal, a change of another key), never missing.
pub trait RecordWatch: Send + fmt::Debug {
    /// Completes when the record may have changed since the watch was made or since this last
    /// completed. Cancel-safe: a dropped call loses no change.
    fn next_change(&mut self) -> BoxFuture<'_, ()>;
}

/// The raw waiting calls, for this crate's own tests and conformance suite: callers outside
/// hold leases through guards.
#[cfg(any(test, feature = "conformance"))]
pub(crate) trait LeaseBackendExt: LeaseBackend {
    /// Acquires `key` for `duration`, **waiting** until it is free as
    /// [`WaitOptions::default()`] says: with no timeout, like `tokio::sync::Semaphore::acquire`
    /// or `std::sync::Mutex::lock`. Cancel the wait by dropping the future (for example under
    /// `tokio::time::timeout`), or bound it with [`acquire_with`](Self::acquire_with) and
    /// [`WaitOptions::new`]. For one attempt, call [`LeaseBackend::try_acquire`].
    ///
    /// Costs one [`try_acquire`](LeaseBackend::try_acquire) per attempt, attempts spaced by
    /// capped exponential backoff with full jitter (25 ms doubling to 1 s), never sleeping past
    /// the holder's expiry.
    ///
    /// # Errors
    /// Invalid input and permanent failures at once, as [`acquire_with`](Self::acquire_with).
    /// A held lease and transient failures are waited out: against a remote store that stays
    /// unreachable this waits until the store answers again, so a caller that must give up
    /// passes a timeout.
    fn acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        Box::pin(async move {
            let (wait, options) = (WaitOptions::default(), AcquireOptions::default());
            acquire_waiting(self, key, duration, &wait, &options).await
        })
    }

    /// Acquires `key` for `duration`, retrying while the lease is held (or the backend fails
    /// transiently) until `wait`'s timeout, with capped exponential backoff and full jitter. A
    /// retry never sleeps past the moment the holder's lease expires, so an expired lease is
    /// taken over promptly. Invalid input and permanent failures are returned at once.
    ///
    /// # Errors
    /// [`LeaseError::Timeout`] naming the last holder seen and carrying the last error when time
    /// runs out. A timeout of [`WaitOptions::forever`] (the default) never runs out.
    fn acquire_with<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        wait: &'a WaitOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        Box::pin(async move {
            acquire_waiting(self, key, duration, wait, &AcquireOptions::default()).await
        })
    }

    /// Releases `lease` (Go: `Release`).
    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.release(lease.key(), lease.token(), lease.fencing_token())
    }
}

#[cfg(any(test, feature = "conformance"))]
impl<B: LeaseBackend + ?Sized> LeaseBackendExt for B {}

/// Acquires `key`, waiting as `wait` says, with `options` on every attempt: what a guard builder
/// of one key runs.
pub(crate) async fn acquire_waiting<B: LeaseBackend + ?Sized>(
    backend: &B,
    key: &LeaseKey,
    duration: Duration,
    wait: &WaitOptions,
    options: &AcquireOptions,
) -> Result<Lease, LeaseError> {
    let attempt =
        |options: AcquireOptions| async move { backend.try_acquire(key, duration, &options).await };
    wait_for_lease(backend.clock(), key, wait, options, attempt, || {
        backend.changed(key)
    })
    .await
}

/// The waiting loop of every acquire: `attempt` until it succeeds, waiting out a held lease (and
/// transient failures) as `wait` says, woken early by `changed` where the store can tell.
/// `key` names what is waited for in events, traces and the timeout.
pub(crate) async fn wait_for_lease<'a, A, F>(
    clock: &dyn Clock,
    key: &LeaseKey,
    wait: &WaitOptions,
    acquire: &AcquireOptions,
    mut attempt: A,
    changed: impl Fn() -> Option<BoxFuture<'a, ()>>,
) -> Result<Lease, LeaseError>
where
    A: FnMut(AcquireOptions) -> F,
    F: Future<Output = Result<Lease, LeaseError>>,
{
    let started = clock.monotonic();
    let give_up = wait
        .timeout
        .map(|timeout| crate::lease::instant_after(started, timeout));
    let mut backoff = Backoff::new(wait.initial_backoff, wait.max_backoff);
    let mut attempts = 0u32;
    // The backend's own retries end with the wait too (an earlier deadline of the caller's
    // stays).
    let mut options = acquire.clone();
    if let Some(give_up) = give_up {
        if options.deadline().is_none_or(|d| d > give_up) {
            options = options.with_deadline(give_up);
        }
    }
    loop {
        let error = match attempt(options.clone()).await {
            Ok(lease) => return Ok(lease),
            // A zero timeout is one attempt: its error names the holder as it is.
            Err(error) if wait.timeout == Some(Duration::ZERO) => return Err(error),
            Err(error) if error.is_held() || error.is_transient() => error,
            Err(error) => return Err(error),
        };
        attempts = attempts.saturating_add(1);
        let now = clock.monotonic();
        if give_up.is_some_and(|give_up| now >= give_up) {
            return Err(LeaseError::timeout(
                key.clone(),
                now.saturating_duration_since(started),
                error,
            ));
        }
        let mut delay = backoff.next_delay().max(Duration::from_millis(1));
        // Never sleep past the holder's expiry: take an abandoned lease over promptly.
        if let Some(expires_at) = error.holder().and_then(|h| h.expires_at()) {
            let until_expiry = expires_at
                .duration_since(clock.now())
                .unwrap_or(Duration::ZERO)
                .saturating_add(Duration::from_millis(1));
            delay = delay.min(until_expiry);
        }
        if let Some(give_up) = give_up {
            delay = delay.min(give_up.saturating_duration_since(now));
        }
        if let Some(callback) = &wait.on_wait {
            callback(&WaitEvent {
                key,
                holder: error.holder(),
                attempts,
                next_attempt_in: delay,
                last_error: &error,
            });
        }
        tracing::debug!(%key, attempts, ?delay, error = %error, "lease busy; waiting");
        let sleep = clock.sleep(delay);
        match changed() {
            Some(changed) => First(Some(sleep), Some(changed)).await,
            None => sleep.await,
        }
    }
}

/// Completes when either future does (the other is dropped).
pub(crate) struct First<'a>(
    pub(crate) Option<BoxFuture<'static, ()>>,
    pub(crate) Option<BoxFuture<'a, ()>>,
);

impl std::future::Future for First<'_> {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let this = &mut *self;
        let done = this
            .0
            .as_mut()
            .is_some_and(|f| f.as_mut().poll(cx).is_ready())
            || this
                .1
                .as_mut()
                .is_some_and(|f| f.as_mut().poll(cx).is_ready());
        if done {
            this.0 = None;
            this.1 = None;
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }
}

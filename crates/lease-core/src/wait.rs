//! Waiting for a held lease: capped exponential backoff with full jitter.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use crate::{AcquireOptions, BoxFuture, Lease, LeaseBackend, LeaseError, LeaseKey, WaitEvent};

/// A callback told about each failed attempt while waiting.
pub type WaitCallback = Arc<dyn Fn(&WaitEvent<'_>) + Send + Sync>;

/// How [`LeaseBackendExt::acquire_with_wait`](crate::LeaseBackendExt::acquire_with_wait) waits.
///
/// ```
/// use lease_core::WaitOptions;
/// use std::time::Duration;
///
/// let wait = WaitOptions::new(Duration::from_secs(60))
///     .with_backoff(Duration::from_millis(50), Duration::from_secs(2))
///     .on_wait(|event| eprintln!("waiting for {}: attempt {}", event.key, event.attempts));
/// assert_eq!(wait.timeout(), Some(Duration::from_secs(60)));
/// assert_eq!(WaitOptions::forever().timeout(), None);
/// assert_eq!(WaitOptions::new(Duration::MAX).timeout(), None, "no panic: it means forever");
/// ```
#[derive(Clone)]
pub struct WaitOptions {
    timeout: Option<Duration>,
    initial_backoff: Duration,
    max_backoff: Duration,
    acquire: AcquireOptions,
    on_wait: Option<WaitCallback>,
}

impl fmt::Debug for WaitOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitOptions")
            .field("timeout", &self.timeout)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("acquire", &self.acquire)
            .field("on_wait", &self.on_wait.is_some())
            .finish()
    }
}

impl WaitOptions {
    /// Longest finite timeout; anything longer (up to [`Duration::MAX`]) means
    /// [`forever`](Self::forever).
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

    /// Wait up to `timeout` (longer than [`MAX_TIMEOUT`](Self::MAX_TIMEOUT): forever); backoff
    /// from 25 ms doubling to at most 1 s.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout: (timeout <= Self::MAX_TIMEOUT).then_some(timeout),
            initial_backoff: Duration::from_millis(25),
            max_backoff: Duration::from_secs(1),
            acquire: AcquireOptions::default(),
            on_wait: None,
        }
    }

    /// Wait for as long as it takes: [`LeaseBackendExt::acquire_with_wait`](crate::LeaseBackendExt::acquire_with_wait)
    /// returns only with the lease or an error that waiting cannot cure.
    pub fn forever() -> Self {
        Self::new(Duration::MAX)
    }

    /// Sets the first backoff and the cap.
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial.max(Duration::from_millis(1));
        self.max_backoff = max.max(self.initial_backoff);
        self
    }

    /// Options for every attempt.
    pub fn with_acquire_options(mut self, options: AcquireOptions) -> Self {
        self.acquire = options;
        self
    }

    /// Calls `callback` after each failed attempt, before sleeping.
    pub fn on_wait(mut self, callback: impl Fn(&WaitEvent<'_>) + Send + Sync + 'static) -> Self {
        self.on_wait = Some(Arc::new(callback));
        self
    }

    /// The timeout; `None` waits forever.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

/// Capped exponential backoff with full jitter: attempt `n` sleeps a uniformly random time in
/// `[0, min(max, initial * 2^n)]`.
///
/// ```
/// use lease_core::Backoff;
/// use std::time::Duration;
///
/// let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(80));
/// for _ in 0..10 {
///     assert!(backoff.next_delay() <= Duration::from_millis(80));
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    attempt: u32,
    rng: Jitter,
}

impl Backoff {
    /// A backoff starting at `initial`, capped at `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
            attempt: 0,
            rng: Jitter::new(),
        }
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self
            .initial
            .saturating_mul(1u32.checked_shl(self.attempt.min(30)).unwrap_or(u32::MAX))
            .min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        self.rng.up_to(ceiling)
    }

    /// Starts over from the initial delay.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// A small xorshift generator seeded from the standard library's per-process random keys.
#[derive(Debug, Clone)]
struct Jitter(u64);

impl Jitter {
    fn new() -> Self {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(0x9e37_79b9_7f4a_7c15);
        Self(hasher.finish() | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn up_to(&mut self, ceiling: Duration) -> Duration {
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.next() % (nanos + 1))
    }
}

pub(crate) async fn acquire_with_wait<B: LeaseBackend + ?Sized>(
    backend: &B,
    key: &LeaseKey,
    duration: Duration,
    wait: &WaitOptions,
) -> Result<Lease, LeaseError> {
    let clock = backend.clock();
    let started = clock.monotonic();
    let give_up = wait
        .timeout
        .map(|timeout| crate::lease::instant_after(started, timeout));
    let mut backoff = Backoff::new(wait.initial_backoff, wait.max_backoff);
    let mut attempts = 0u32;
    loop {
        let error = match backend.try_acquire(key, duration, &wait.acquire).await {
            Ok(lease) => return Ok(lease),
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
        match backend.changed(key) {
            Some(changed) => First(Some(sleep), Some(changed)).await,
            None => sleep.await,
        }
    }
}

/// Completes when either future does (the other is dropped).
struct First<'a>(Option<BoxFuture<'static, ()>>, Option<BoxFuture<'a, ()>>);

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_timeout_is_accepted_and_the_largest_mean_forever() {
        use crate::{LeaseBackendExt, ManualClock, MemoryBackend};
        let clock = Arc::new(ManualClock::new());
        let store = MemoryBackend::builder().with_clock(clock.clone()).build();
        let key = LeaseKey::new("k").unwrap_or_else(|_| unreachable!());
        let d = Duration::from_secs(10);
        for timeout in [Duration::MAX, WaitOptions::MAX_TIMEOUT, Duration::ZERO] {
            let wait = WaitOptions::new(timeout);
            let lease = crate::executor::block_on(store.acquire_with_wait(&key, d, &wait));
            let lease = lease.unwrap_or_else(|e| panic!("{timeout:?}: {e}"));
            crate::executor::block_on(store.release_lease(&lease))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        // Waiting forever on a held key outlasts any finite wait, and ends at its expiry.
        let held =
            crate::executor::block_on(store.acquire(&key, d)).unwrap_or_else(|e| panic!("{e}"));
        clock.set_auto_advance(true);
        let next =
            crate::executor::block_on(store.acquire_with_wait(&key, d, &WaitOptions::forever()))
                .unwrap_or_else(|e| panic!("{e}"));
        assert!(next.fencing_token() > held.fencing_token());
        assert!(clock.elapsed() >= d);
    }

    #[test]
    fn backoff_grows_to_the_cap_and_jitters() {
        let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(100));
        let delays: Vec<_> = (0..200).map(|_| backoff.next_delay()).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(100)));
        let distinct: std::collections::HashSet<_> = delays.iter().collect();
        assert!(distinct.len() > 50, "full jitter spreads the delays");
        assert!(delays[150..].iter().any(|d| *d > Duration::from_millis(50)));
    }
}

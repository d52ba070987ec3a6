//! Waiting for a held lease: capped exponential backoff with full jitter.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use crate::{Holder, LeaseError, LeaseKey};

/// A callback told about each failed attempt while waiting.
pub type WaitCallback = Arc<dyn Fn(&WaitEvent<'_>) + Send + Sync>;

/// How a [`LeaseGuardBuilder`](crate::LeaseGuardBuilder) (and the file backend's `FileLock`)
/// waits for a held lease.
///
/// [`WaitOptions::default()`] waits **until acquired**, with no timeout: what `lock()` and
/// `acquire()` mean in `std`, `lock_api` and `tokio::sync`. A held lease is waited out, and so
/// are transient failures of the store, so against a remote store that stays unreachable the
/// default wait lasts until the store answers again; [`on_wait`](Self::on_wait) and the
/// `debug` trace of each failed attempt show why it waits. Give a timeout
/// ([`WaitOptions::new`]) where giving up matters more than getting the lease.
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
    pub(crate) timeout: Option<Duration>,
    pub(crate) initial_backoff: Duration,
    pub(crate) max_backoff: Duration,
    pub(crate) on_wait: Option<WaitCallback>,
}

impl fmt::Debug for WaitOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitOptions")
            .field("timeout", &self.timeout)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("on_wait", &self.on_wait.is_some())
            .finish()
    }
}

impl WaitOptions {
    /// Longest finite timeout; anything longer (up to [`Duration::MAX`]) means
    /// [`forever`](Self::forever).
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

    /// Wait up to `timeout` (longer than [`MAX_TIMEOUT`](Self::MAX_TIMEOUT): forever); backoff
    /// from 25 ms doubling to at most 1 s. `Duration::ZERO` makes one attempt, whose error
    /// (`Held`, naming the holder) is returned as it is.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout: (timeout <= Self::MAX_TIMEOUT).then_some(timeout),
            initial_backoff: Duration::from_millis(25),
            max_backoff: Duration::from_secs(1),
            on_wait: None,
        }
    }

    /// Wait for as long as it takes (the [`Default`]): an acquire returns only with the lease or
    /// an error that waiting cannot cure.
    pub fn forever() -> Self {
        Self::new(Duration::MAX)
    }

    /// Sets the first backoff and the cap.
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial.max(Duration::from_millis(1));
        self.max_backoff = max.max(self.initial_backoff);
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

impl Default for WaitOptions {
    /// [`forever`](Self::forever): wait until acquired, backoff from 25 ms doubling to 1 s.
    ///
    /// ```
    /// use lease_core::WaitOptions;
    /// assert_eq!(WaitOptions::default().timeout(), None);
    /// ```
    fn default() -> Self {
        Self::forever()
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

/// A number in `0..n` (0 when `n` is 0) from a seed drawn once per thread like the backoff's
/// jitter: where a counting lease starts looking for a free slot. Threads (and so processes)
/// spread over the slots, and a thread that takes and gives back a slot in a loop keeps
/// finding the same one free, in one request, on a store whose caches already hold it.
pub(crate) fn start_below(n: u32) -> u32 {
    thread_local! {
        static SEED: u64 = Jitter::new().next();
    }
    if n == 0 {
        return 0;
    }
    u32::try_from(SEED.with(|seed| *seed) % u64::from(n)).unwrap_or(0)
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

/// What a waiting acquire reports while it waits (see [`WaitOptions::on_wait`]).
#[derive(Debug)]
pub struct WaitEvent<'a> {
    /// The key waited for.
    pub key: &'a LeaseKey,
    /// The holder, as the last attempt saw it.
    pub holder: Option<&'a Holder>,
    /// How many attempts have failed so far.
    pub attempts: u32,
    /// How long until the next attempt.
    pub next_attempt_in: Duration,
    /// The error of the last attempt.
    pub last_error: &'a LeaseError,
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
            let lease = crate::executor::block_on(store.acquire_with(&key, d, &wait));
            let lease = lease.unwrap_or_else(|e| panic!("{timeout:?}: {e}"));
            crate::executor::block_on(store.release_lease(&lease))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        // Waiting forever on a held key outlasts any finite wait, and ends at its expiry.
        let held =
            crate::executor::block_on(store.acquire(&key, d)).unwrap_or_else(|e| panic!("{e}"));
        clock.set_auto_advance(true);
        let next =
            crate::executor::block_on(store.acquire(&key, d)).unwrap_or_else(|e| panic!("{e}"));
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

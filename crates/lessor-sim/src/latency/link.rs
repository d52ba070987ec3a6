//! One worker's connection to the shared store: every request takes simulated time.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencedValues, FencingToken, Lease, LeaseBackend, LeaseError,
    LeaseKey, LeaseListing, LeaseRecord, LeaseToken, MemoryBackend,
};

use crate::Rng;

/// How long each request of one worker takes, and how often the store throttles it.
///
/// A request's latency is drawn uniformly from `lo..=hi`, plus `spike` with probability
/// `spike_chance`. Half of it passes before the request reaches the store (where it takes effect
/// at that instant), the other half before the reply arrives. With probability `throttle` the
/// request fails with a transient backend error after its latency, without reaching the store.
///
/// ```
/// use lessor_sim::latency::Latency;
/// use std::time::Duration;
///
/// let ms = Duration::from_millis;
/// let slow = Latency::uniform(ms(2), ms(40)).with_spikes(0.01, ms(500)).with_throttling(0.001);
/// assert_eq!(slow.hi, ms(40));
/// assert_eq!(Latency::fixed(ms(20)).lo, ms(20));
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Latency {
    /// Shortest latency.
    pub lo: Duration,
    /// Longest latency, spikes aside.
    pub hi: Duration,
    /// Probability that a request takes `spike` longer.
    pub spike_chance: f64,
    /// Extra latency of a spike.
    pub spike: Duration,
    /// Probability that a request fails with a transient error (throttling).
    pub throttle: f64,
}

impl Latency {
    /// Every request takes `latency`.
    pub fn fixed(latency: Duration) -> Self {
        Self::uniform(latency, latency)
    }

    /// Requests take `lo..=hi`, uniformly.
    pub fn uniform(lo: Duration, hi: Duration) -> Self {
        Self {
            lo: lo.min(hi),
            hi: hi.max(lo),
            ..Self::default()
        }
    }

    /// With probability `chance`, a request takes `extra` longer.
    pub fn with_spikes(mut self, chance: f64, extra: Duration) -> Self {
        self.spike_chance = chance;
        self.spike = extra;
        self
    }

    /// With probability `chance`, a request fails with a transient backend error.
    pub fn with_throttling(mut self, chance: f64) -> Self {
        self.throttle = chance;
        self
    }

    /// The longest a request can take, spikes included.
    pub fn worst(&self) -> Duration {
        if self.spike_chance > 0.0 {
            self.hi + self.spike
        } else {
            self.hi
        }
    }

    /// One request: (time before it reaches the store, time until the reply, throttled).
    fn draw(&self, rng: &mut Rng) -> (Duration, Duration, bool) {
        let spread = u64::try_from((self.hi - self.lo).as_nanos()).unwrap_or(u64::MAX);
        let mut total = self.lo + Duration::from_nanos(rng.below(spread.saturating_add(1)));
        if self.spike_chance > 0.0 && rng.chance(self.spike_chance) {
            total += self.spike;
        }
        let throttled = self.throttle > 0.0 && rng.chance(self.throttle);
        let out = total / 2;
        (out, total - out, throttled)
    }
}

/// The per-worker state of a link: its latency, its random draws and its counters.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) latency: Latency,
    rng: Rng,
    /// Requests sent over this link, checkpoint requests included.
    pub(crate) requests: u64,
    /// Of which throttled.
    pub(crate) throttled: u64,
}

/// A link shared by a worker's store wrapper, its checkpoint wrapper and the simulator.
pub(crate) type SharedLink = Arc<Mutex<Link>>;

pub(crate) fn new_link(latency: Latency, seed: u64) -> SharedLink {
    Arc::new(Mutex::new(Link {
        latency,
        rng: Rng::new(seed),
        requests: 0,
        throttled: 0,
    }))
}

pub(crate) fn lock_link(link: &SharedLink) -> std::sync::MutexGuard<'_, Link> {
    link.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Draws the next request's timing on `link`.
pub(crate) fn draw(link: &SharedLink) -> (Duration, Duration, bool) {
    let mut link = lock_link(link);
    link.requests += 1;
    let Link { latency, rng, .. } = &mut *link;
    let drawn = latency.draw(rng);
    if drawn.2 {
        link.throttled += 1;
    }
    drawn
}

/// The error a throttled request fails with.
pub(crate) fn throttled(backend: &'static str) -> LeaseError {
    LeaseError::backend(backend, true, "throttled (simulated)")
}

/// One worker's view of the shared [`MemoryBackend`]: each request sleeps on the store's clock
/// for the first part of its latency, takes effect on the shared store at that instant, and
/// sleeps for the rest before its reply. A lease's holder-side deadline is measured from the
/// instant the request was *sent* (as the contract requires), not from when it reached the store.
#[derive(Clone, Debug)]
pub struct LatencyStore {
    inner: MemoryBackend,
    link: SharedLink,
}

impl LatencyStore {
    pub(crate) fn new(inner: MemoryBackend, link: SharedLink) -> Self {
        Self { inner, link }
    }

    /// Runs `op` on the shared store after the outbound latency; returns its result and the
    /// outbound latency, after the reply latency.
    async fn send<'a, T>(
        &'a self,
        op: impl FnOnce(&'a MemoryBackend) -> BoxFuture<'a, Result<T, LeaseError>>,
    ) -> Result<(T, Duration), LeaseError> {
        let (out, back, throttle) = draw(&self.link);
        self.inner.clock().sleep(out).await;
        if throttle {
            self.inner.clock().sleep(back).await;
            return Err(throttled(self.inner.name()));
        }
        let result = op(&self.inner).await;
        self.inner.clock().sleep(back).await;
        result.map(|value| (value, out))
    }

    /// `lease` with its deadline moved back to when the request was sent.
    fn sent_earlier(lease: Lease, by: Duration) -> Lease {
        let deadline = lease.deadline().checked_sub(by).unwrap_or(lease.deadline());
        lease_core::backend::new_lease(
            lease.key().clone(),
            lease.token().clone(),
            lease.fencing_token(),
            lease.duration(),
            lease.expires_at(),
            deadline,
        )
    }
}

impl LeaseBackend for LatencyStore {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn clock(&self) -> &dyn Clock {
        self.inner.clock()
    }

    fn as_listing(&self) -> Option<&dyn LeaseListing> {
        Some(self)
    }
    fn as_fenced_values(&self) -> Option<&dyn FencedValues> {
        Some(self)
    }
    fn try_acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        options: &'a AcquireOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        Box::pin(async move {
            let (lease, out) = self.send(|s| s.try_acquire(key, duration, options)).await?;
            Ok(Self::sent_earlier(lease, out))
        })
    }
    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        Box::pin(async move {
            let (lease, out) = self.send(|s| s.renew(lease, duration)).await?;
            Ok(Self::sent_earlier(lease, out))
        })
    }
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(async move {
            self.send(|s| s.release(key, token, fencing))
                .await
                .map(|((), _)| ())
        })
    }
    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        Box::pin(async move { Ok(self.send(|s| s.inspect(key)).await?.0) })
    }
    fn delete<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: Option<&'a LeaseToken>,
        fencing: Option<FencingToken>,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(async move {
            self.send(|s| s.delete(key, holder, fencing))
                .await
                .map(|((), _)| ())
        })
    }
}

/// The shared store's fenced values (the assigner's take lists), at the worker's latency.
impl FencedValues for LatencyStore {
    fn fence_and_read<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, LeaseError>> {
        Box::pin(async move { Ok(self.send(|s| s.fence_and_read(name, fencing)).await?.0) })
    }
    fn put_fenced<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
        value: &'a [u8],
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(async move {
            self.send(|s| s.put_fenced(name, fencing, value))
                .await
                .map(|((), _)| ())
        })
    }
}

impl LeaseListing for LatencyStore {
    fn list_partition<'a>(
        &'a self,
        partition: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseRecord>, LeaseError>> {
        Box::pin(async move { Ok(self.send(|s| s.list_partition(partition)).await?.0) })
    }
}

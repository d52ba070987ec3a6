//! Leader election over any backend: campaign with a published value, read the leader, observe
//! every change of leader.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use crate::BoxFuture;
use crate::contract::First;
use crate::{
    FencingToken, Holder, LeaseBackend, LeaseError, LeaseGuard, LeaseGuardBuilder, LeaseKey,
    LeaseRecord, LeaseToken, RecordWatch,
};

/// How often an [`Observer`] reads the record when its backend offers no
/// [`watch`](LeaseBackend::watch_record) (DynamoDB), and, where it does, how often it reads
/// anyway in case a wake-up was lost: one `inspect` (one request, or a few syscalls) per
/// interval.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// How long an [`Observer`] waits for a new holder's description (its value, since when) before
/// reporting it without one: the file store describes a holder in a write right after the one
/// that made it the holder.
const DESCRIPTION_GRACE: Duration = Duration::from_millis(20);

/// How soon an [`Observer`] reads again a holder that is not described yet.
const DESCRIPTION_RETRY: Duration = Duration::from_millis(1);

/// A leader election on one key of any backend: the leader is the holder of the key's lease.
///
/// * [`campaign`](Self::campaign) acquires the lease with a value published in its record (an
///   address, an id), waiting like [`LeaseGuard::builder`]'s `acquire`, and keeps it
///   with a [`LeaseGuard`]; the guard's fencing token proves the leadership to the resources
///   the leader writes to.
/// * [`leader`](Self::leader) reads who leads now: value, since when, fencing token.
/// * [`observe`](Self::observe) reports every change of leader (see [`Observer`]).
/// * Resign by releasing the guard ([`LeaseGuard::release`]): the key is free at once and every
///   observer learns of it.
///
/// Followers route to the leader's [`value`](Leader::value) and fence with its
/// [`fencing_token`](Leader::fencing_token): a resource that keeps the highest token it has seen
/// refuses a deposed leader that still writes, whatever the followers believed.
///
/// ```
/// use lease_core::{Election, LeaderChange, LeaseKey, MemoryBackend};
/// use pollster::block_on;
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let store = Arc::new(MemoryBackend::new());
/// let election = Election::new(store, &LeaseKey::new("primary")?, Duration::from_secs(10));
/// // A follower: an Observer is a Stream of changes (here without a runtime).
/// let mut changes = futures::executor::block_on_stream(election.observe());
/// assert!(matches!(changes.next().transpose()?, Some(LeaderChange::Vacant)));
///
/// // A candidate: waits until elected, then its guard renews the lease.
/// let guard = election.campaign("10.0.0.7:5432").acquire_blocking()?;
/// let Some(LeaderChange::Elected(leader)) = changes.next().transpose()? else { panic!("a leader") };
/// assert_eq!(leader.value(), Some("10.0.0.7:5432")); // where to route
/// assert_eq!(leader.fencing_token(), Some(guard.fencing_token())); // what to fence with
/// assert_eq!(block_on(election.leader())?, Some(leader));
///
/// guard.release()?; // resign: observers report the vacancy
/// assert!(matches!(changes.next().transpose()?, Some(LeaderChange::Vacant)));
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
#[derive(Clone)]
pub struct Election {
    backend: Arc<dyn LeaseBackend>,
    key: LeaseKey,
    duration: Duration,
    poll_interval: Duration,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("backend", &self.backend.name())
            .field("key", &self.key)
            .field("duration", &self.duration)
            .field("poll_interval", &self.poll_interval)
            .finish()
    }
}

impl Election {
    /// An election on `key` of `backend`, whose leader holds the lease for `duration` at a time
    /// (renewed by its guard's keeper).
    pub fn new(backend: Arc<dyn LeaseBackend>, key: &LeaseKey, duration: Duration) -> Self {
        Self {
            backend,
            key: key.clone(),
            duration,
            poll_interval: DEFAULT_POLL_INTERVAL,
        }
    }

    /// How often observers read the record (default [`DEFAULT_POLL_INTERVAL`]); at least 1 ms.
    pub fn with_poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every.max(Duration::from_millis(1));
        self
    }

    /// The key.
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// Campaigns with `value` (at most [`MAX_LEASE_VALUE_BYTES`](crate::MAX_LEASE_VALUE_BYTES)):
    /// a [`LeaseGuard`] builder that waits until elected (until the lease is free), publishing
    /// `value` in the record with the acquisition. Finish it with
    /// [`acquire`](LeaseGuardBuilder::acquire) or
    /// [`acquire_blocking`](LeaseGuardBuilder::acquire_blocking); options set with
    /// [`with_options`](LeaseGuardBuilder::with_options) keep the value unless they name one.
    ///
    /// Costs what an acquire costs: one attempt, then one per wake-up or backoff while another
    /// leads.
    pub fn campaign(&self, value: impl Into<String>) -> LeaseGuardBuilder {
        let mut builder = LeaseGuard::builder(self.backend.clone(), &self.key, self.duration);
        let options = builder.options_mut();
        *options = std::mem::take(options).with_value(value);
        builder
    }

    /// The current leader: the holder on record whose lease has not expired by this backend's
    /// clock, or `None`. One [`inspect`](LeaseBackend::inspect).
    ///
    /// # Errors
    /// What [`inspect`](LeaseBackend::inspect) returns.
    pub async fn leader(&self) -> Result<Option<Leader>, LeaseError> {
        let record = self.backend.inspect(&self.key).await?;
        Ok(leader_of(record.as_ref(), self.backend.clock().now()))
    }

    /// An observer of this election's changes of leader, starting from the current state.
    pub fn observe(&self) -> Observer {
        let state = ObserverState {
            backend: self.backend.clone(),
            key: self.key.clone(),
            poll_interval: self.poll_interval,
            watch: None,
            armed: false,
            last: None,
            highest: None,
            undescribed: None,
        };
        Observer {
            state: Some(state),
            pending: None,
        }
    }
}

/// The leader of an [`Election`]: the holder of its lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    holder: Holder,
    fencing: FencingToken,
}

impl Leader {
    /// The value the leader published when it campaigned (where followers route), if any.
    pub fn value(&self) -> Option<&str> {
        self.holder.value()
    }

    /// When the leader acquired the lease, by the store's wall clock, where the store says.
    pub fn since(&self) -> Option<SystemTime> {
        self.holder.acquired_at()
    }

    /// The leader's fencing token: it names this tenure, and only grows from one leader to the
    /// next. `None` for a record with no fencing counter (written by another
    /// lease library).
    pub fn fencing_token(&self) -> Option<FencingToken> {
        (self.fencing != FencingToken::NONE).then_some(self.fencing)
    }

    /// Everything the store says of the leader.
    pub fn holder(&self) -> &Holder {
        &self.holder
    }
}

impl fmt::Display for Leader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.holder)?;
        if self.holder.fencing_token().is_none() {
            write!(f, ", fencing token {}", self.fencing)?;
        }
        Ok(())
    }
}

/// A change an [`Observer`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaderChange {
    /// A new leader: a tenure not reported before.
    Elected(Leader),
    /// No leader: the lease was released, expired, or deleted.
    Vacant,
}

/// Reports every change of leader of an [`Election`]: first the current state, then each new
/// leader and each vacancy, in order.
///
/// **What it promises.** It reports each tenure (a leader, named by its fencing token) at most
/// once, and never a tenure older than one it reported (tokens only grow); a
/// [`Vacant`](LeaderChange::Vacant) never twice in a row. A tenure is reported if its record is
/// in place at one of the observer's reads: the observer reads after every wake-up of the
/// backend's [watch](LeaseBackend::watch_record) (memory: every write; files: every change of
/// the key's lock directory, through the kernel), and at least every poll interval
/// ([`Election::with_poll_interval`]). So with a watch every tenure that lasts longer than one
/// wake-up and one read is reported, and by polling alone (DynamoDB) every tenure that lasts
/// longer than the poll interval and one read; a shorter one may be missed. A new holder whose
/// record does not describe it yet (files: the description follows the acquiring write) is
/// reported once described, or after 20 ms without. Expiry is judged on the backend's clock
/// against the record's expiry, so an observer whose wall clock runs ahead reports a vacancy
/// early; a record deleted on purpose restarts the fencing counter, and the observer with it.
///
/// Costs one [`inspect`](LeaseBackend::inspect) per wake-up (every write to the key, renewals
/// included) and per poll interval; no busy polling.
///
/// A [`Stream`](futures_core::Stream) of `Result<LeaderChange, LeaseError>` that never ends:
/// runtime-free, it runs on any executor (`StreamExt::next` of `futures` or `tokio-stream`;
/// `futures::executor::block_on_stream` without a runtime).
///
/// Cancel-safe: dropping a pending `next()` loses no change; the next poll goes on from where
/// the dropped one was.
///
/// # Errors
/// A permanent error from [`inspect`](LeaseBackend::inspect) is an item; transient ones are
/// retried at the poll interval.
#[must_use = "streams do nothing unless polled"]
pub struct Observer {
    state: Option<ObserverState>,
    pending: Option<BoxFuture<'static, (ObserverState, Result<LeaderChange, LeaseError>)>>,
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            Some(state) => state.fmt(f),
            None => f.debug_struct("Observer").finish_non_exhaustive(),
        }
    }
}

impl futures_core::Stream for Observer {
    type Item = Result<LeaderChange, LeaseError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.pending.is_none() {
            let Some(mut state) = this.state.take() else {
                return Poll::Ready(None);
            };
            this.pending = Some(Box::pin(async move {
                let change = state.next().await;
                (state, change)
            }));
        }
        let Some(pending) = this.pending.as_mut() else {
            return Poll::Ready(None);
        };
        match pending.as_mut().poll(cx) {
            Poll::Ready((state, change)) => {
                this.pending = None;
                this.state = Some(state);
                Poll::Ready(Some(change))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Observer {
    /// The stream's next item, for this crate's own tests.
    #[cfg_attr(not(any(test, feature = "conformance")), allow(dead_code))]
    pub(crate) async fn next_change(&mut self) -> Result<LeaderChange, LeaseError> {
        use futures_core::Stream;
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx))
            .await
            .unwrap_or_else(|| Err(LeaseError::runtime("the observer ended")))
    }
}

/// What an [`Observer`] knows between reads.
struct ObserverState {
    backend: Arc<dyn LeaseBackend>,
    key: LeaseKey,
    poll_interval: Duration,
    watch: Option<Box<dyn RecordWatch>>,
    armed: bool,
    /// The last report: `Some(true)` a leader, `Some(false)` a vacancy.
    last: Option<bool>,
    /// The newest tenure reported: its fencing token and owner token.
    highest: Option<(FencingToken, Option<LeaseToken>)>,
    /// A new tenure seen before its description, and since when.
    undescribed: Option<(FencingToken, Instant)>,
}

impl fmt::Debug for ObserverState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("backend", &self.backend.name())
            .field("key", &self.key)
            .field("poll_interval", &self.poll_interval)
            .field("watched", &self.watch.is_some())
            .field("highest", &self.highest.as_ref().map(|(f, _)| f))
            .finish_non_exhaustive()
    }
}

impl ObserverState {
    /// The next change: the current state on the first call, then each change after the
    /// last one reported. Waits (without busy polling) until there is one.
    ///
    /// Cancel-safe: a dropped call reports nothing and loses no change; the next call reads
    /// the record again.
    ///
    /// # Errors
    /// A permanent error from [`inspect`](LeaseBackend::inspect); transient ones are retried
    /// at the poll interval.
    async fn next(&mut self) -> Result<LeaderChange, LeaseError> {
        let backend = self.backend.clone();
        let clock = backend.clock();
        loop {
            if !self.armed {
                // Armed before the read: a change after the read always wakes the wait below.
                self.watch = backend.watch_record(&self.key);
                self.armed = true;
            }
            let record = match backend.inspect(&self.key).await {
                Ok(record) => record,
                Err(error) if error.is_transient() => {
                    tracing::debug!(key = %self.key, %error, "observer read failed; retrying");
                    clock.sleep(self.poll_interval).await;
                    continue;
                }
                Err(error) => return Err(error),
            };
            if record.is_none() {
                // Deleted: the counter starts again from the beginning.
                self.highest = None;
            }
            let now = clock.now();
            let mut wait = self.poll_interval;
            match leader_of(record.as_ref(), now) {
                Some(leader) if self.is_new(&leader) => {
                    if is_undescribed(&leader.holder) && self.await_description(&leader) {
                        wait = DESCRIPTION_RETRY;
                    } else {
                        self.undescribed = None;
                        self.highest = Some((leader.fencing, leader.holder.token().cloned()));
                        self.last = Some(true);
                        tracing::debug!(key = %self.key, fencing = %leader.fencing, "observer: new leader");
                        return Ok(LeaderChange::Elected(leader));
                    }
                }
                Some(leader) => {
                    if let Some(expires) = leader.holder.expires_at() {
                        let left = expires.duration_since(now).unwrap_or(Duration::ZERO);
                        wait = wait.min(left.saturating_add(Duration::from_millis(1)));
                    }
                }
                None if self.last != Some(false) => {
                    self.last = Some(false);
                    tracing::debug!(key = %self.key, "observer: no leader");
                    return Ok(LeaderChange::Vacant);
                }
                None => {}
            }
            let sleep = clock.sleep(wait);
            match self.watch.as_mut() {
                Some(watch) => First(Some(sleep), Some(watch.next_change())).await,
                None => sleep.await,
            }
        }
    }

    /// Whether `leader` is a tenure after the newest one reported.
    fn is_new(&self, leader: &Leader) -> bool {
        match &self.highest {
            None => true,
            Some((fencing, token)) => {
                leader.fencing > *fencing
                    // No counter (another library's record): tell tenures by owner token.
                    || (leader.fencing == *fencing
                        && *fencing == FencingToken::NONE
                        && leader.holder.token() != token.as_ref())
            }
        }
    }

    /// Whether to wait a little longer for `leader`'s description before reporting it.
    fn await_description(&mut self, leader: &Leader) -> bool {
        let now = self.backend.clock().monotonic();
        match self.undescribed {
            Some((fencing, since)) if fencing == leader.fencing => {
                now.saturating_duration_since(since) < DESCRIPTION_GRACE
            }
            _ => {
                self.undescribed = Some((leader.fencing, now));
                true
            }
        }
    }
}

/// Whether the store shows `holder` before describing it: no owner token and no acquisition
/// time (the file store between the rename that made the holder and its description). Items of
/// other writers with a token (DynamoDB items of the Go package) are never waited for.
fn is_undescribed(holder: &Holder) -> bool {
    holder.token().is_none() && holder.acquired_at().is_none()
}

/// The leader `record` names at wall time `now`: its holder, unless that holder's lease expired.
fn leader_of(record: Option<&LeaseRecord>, now: SystemTime) -> Option<Leader> {
    let record = record?;
    let holder = record.holder()?;
    if holder.expires_at().is_some_and(|expires| now >= expires) {
        return None;
    }
    Some(Leader {
        fencing: holder
            .fencing_token()
            .or(record.fencing_token())
            .unwrap_or(FencingToken::NONE),
        holder: holder.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::block_on;
    use crate::{AcquireOptions, LeaseBackendExt, ManualClock, MemoryBackend, WaitOptions};
    use std::future::Future;

    fn setup() -> (Arc<ManualClock>, Arc<MemoryBackend>, Election) {
        let clock = Arc::new(ManualClock::new());
        let store = Arc::new(MemoryBackend::builder().with_clock(clock.clone()).build());
        let key = LeaseKey::new("leader").unwrap();
        let election = Election::new(store.clone(), &key, Duration::from_secs(10));
        (clock, store, election)
    }

    fn elected(change: LeaderChange) -> Leader {
        match change {
            LeaderChange::Elected(leader) => leader,
            LeaderChange::Vacant => panic!("expected a leader, got a vacancy"),
        }
    }

    /// A campaign given a wait of its own still publishes its value (the wait's options used to
    /// replace it, so the leader was elected with no value for followers to route to).
    #[test]
    fn a_campaign_with_a_wait_publishes_its_value() {
        let (_clock, store, election) = setup();
        let key = election.key().clone();
        for (wait, options) in [
            (WaitOptions::new(Duration::from_secs(1)), None),
            (
                WaitOptions::new(Duration::ZERO),
                Some(AcquireOptions::default().with_owner("me")),
            ),
        ] {
            let mut campaign = election.campaign("10.0.0.7:5432").with_wait(wait);
            if let Some(options) = options {
                campaign = campaign.with_options(options);
            }
            let guard = campaign.acquire_blocking().unwrap();
            let leader = block_on(election.leader()).unwrap().expect("a leader");
            assert_eq!(leader.value(), Some("10.0.0.7:5432"));
            guard.release().unwrap();
        }
        // A value the builder's own options name is the one published.
        let own = AcquireOptions::default().with_value("own");
        let guard = election
            .campaign("campaign")
            .with_wait(WaitOptions::new(Duration::ZERO))
            .with_options(own)
            .acquire_blocking()
            .unwrap();
        let record = block_on(store.inspect(&key)).unwrap().unwrap();
        assert_eq!(record.holder().and_then(|h| h.value()), Some("own"));
        guard.release().unwrap();
    }

    #[test]
    fn an_expired_leader_is_reported_gone_when_its_lease_runs_out() {
        let (clock, store, election) = setup();
        let key = election.key().clone();
        let options = AcquireOptions::default().with_value("a");
        let lease = block_on(store.try_acquire(&key, Duration::from_secs(10), &options)).unwrap();
        let mut observer = election.observe();
        let first = elected(block_on(observer.next_change()).unwrap());
        assert_eq!(first.fencing_token(), Some(lease.fencing_token()));
        // Nothing is written: only the expiry, on the manual clock, can end the tenure.
        clock.set_auto_advance(true);
        assert_eq!(
            block_on(observer.next_change()).unwrap(),
            LeaderChange::Vacant
        );
        assert!(clock.elapsed() >= Duration::from_secs(10));
        assert_eq!(block_on(election.leader()).unwrap(), None);
    }

    #[test]
    fn each_tenure_is_reported_once_and_none_twice() {
        let (_clock, store, election) = setup();
        let key = election.key().clone();
        let mut observer = election.observe();
        assert_eq!(
            block_on(observer.next_change()).unwrap(),
            LeaderChange::Vacant
        );
        for round in 0..5 {
            let options = AcquireOptions::default().with_value(format!("v{round}"));
            let lease =
                block_on(store.try_acquire(&key, Duration::from_secs(10), &options)).unwrap();
            // Renewals wake the observer but report nothing.
            let lease = block_on(store.renew(&lease, Duration::from_secs(10))).unwrap();
            let leader = elected(block_on(observer.next_change()).unwrap());
            assert_eq!(leader.fencing_token(), Some(lease.fencing_token()));
            assert_eq!(leader.value(), Some(format!("v{round}").as_str()));
            block_on(store.release_lease(&lease)).unwrap();
            assert_eq!(
                block_on(observer.next_change()).unwrap(),
                LeaderChange::Vacant
            );
        }
    }

    #[test]
    fn a_holder_back_after_a_vacancy_is_not_reported_again() {
        let (clock, store, election) = setup();
        let key = election.key().clone();
        let lease = block_on(store.acquire(&key, Duration::from_secs(10))).unwrap();
        let mut observer = election.observe();
        elected(block_on(observer.next_change()).unwrap());
        // The observer's clock judges the lease expired; the store then shows the same tenure
        // live again (as a store whose clock runs behind would).
        clock.set_wall(crate::Clock::now(&*clock) + Duration::from_secs(11));
        assert_eq!(
            block_on(observer.next_change()).unwrap(),
            LeaderChange::Vacant
        );
        clock.set_wall(crate::Clock::now(&*clock) - Duration::from_secs(11));
        let next = block_on(store.renew(&lease, Duration::from_secs(10)));
        assert!(next.is_ok());
        let mut next = std::pin::pin!(observer.next_change());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(
            next.as_mut().poll(&mut cx).is_pending(),
            "reported a tenure twice"
        );
        assert_eq!(
            block_on(election.leader())
                .unwrap()
                .and_then(|l| l.fencing_token()),
            Some(lease.fencing_token())
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_observer_runs_as_a_tokio_task_woken_by_the_store() {
        let store = Arc::new(MemoryBackend::new());
        let key = LeaseKey::new("leader").unwrap();
        let election = Election::new(store.clone(), &key, Duration::from_secs(10))
            .with_poll_interval(Duration::from_secs(60));
        let options = AcquireOptions::default().with_value("a");
        let lease = store
            .try_acquire(&key, Duration::from_secs(10), &options)
            .await
            .unwrap();
        let mut observer = election.observe();
        let task = tokio::spawn(async move {
            let first = observer.next_change().await.unwrap();
            let second = observer.next_change().await.unwrap();
            (first, second)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        store.release_lease(&lease).await.unwrap();
        // Only the store's wake-up can end the wait before the 60 s poll.
        let (first, second) = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("woken, not polled")
            .unwrap();
        assert_eq!(elected(first).value(), Some("a"));
        assert_eq!(second, LeaderChange::Vacant);
    }
}

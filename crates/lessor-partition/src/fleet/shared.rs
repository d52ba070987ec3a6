//! What a running worker shares with the application: who it trusts, until when, its events and
//! its new units, behind one mutex, read through [`WorkerHandle`] and [`UnitTask`] while the worker
//! runs on its own.
//!
//! Trust is stored as deadlines on the store's monotonic clock, and every reader compares them with
//! the clock *when it reads*: a paused or starved worker's units stop being trusted at their
//! deadline, not at its next tick.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use futures_core::Stream;
use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencingToken, LeaseBackend, LeaseError, LeaseKey, LeaseToken,
    LossReason, NotOwnedReason, TokenSource,
};

use super::checkpoint::Checkpoints;
use super::types::{Assignment, Checkpoint, FleetEvent, UnitEnd, WorkerStats};

/// Events kept for a consumer that has not read them yet; older ones are dropped (and counted).
const EVENT_QUEUE: usize = 65_536;

/// One unit the worker owns, as the application sees it.
#[derive(Debug)]
pub(crate) struct SharedUnit {
    pub(crate) fencing: FencingToken,
    /// The fence of this ownership's checkpoint saves: the one its load raised
    /// (`Checkpoints::fence_for`).
    pub(crate) checkpoint_fencing: FencingToken,
    /// The unit lease's token, for a retirement's conditional delete.
    pub(crate) token: LeaseToken,
    /// Set while the application retires the unit: not trusted from then on.
    pub(crate) retiring: bool,
    /// The load the application reported for the unit (1 until it does).
    pub(crate) load: f64,
    /// The unit lease's holder-side deadline.
    pub(crate) deadline: Instant,
    /// Set when the worker asked the application to hand the unit over (or is shutting down):
    /// the unit is still owned until it is released, and released once the task is dropped or
    /// this instant passes.
    pub(crate) handoff: Option<(UnitEnd, Instant)>,
    /// Whether the application holds a [`UnitTask`] for this ownership (handed out, not dropped).
    pub(crate) task_alive: bool,
    /// Why the ownership ended, once it has (kept until the unit's task is told).
    pub(crate) ended: Option<UnitEnd>,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) worker_id: String,
    /// The session's fencing token and the instant until which it may be trusted.
    pub(crate) session: Option<(FencingToken, Instant)>,
    pub(crate) units: BTreeMap<String, SharedUnit>,
    pub(crate) members: Vec<String>,
    pub(crate) target: Option<usize>,
    pub(crate) stats: WorkerStats,
    pub(crate) stop: bool,
    /// The worker has shut down: no more events or units will come.
    pub(crate) finished: bool,
    pub(crate) events: VecDeque<FleetEvent>,
    pub(crate) events_dropped: u64,
    /// Checkpoints the application saved (through a handle or a task), for the stats.
    pub(crate) saves: u64,
    /// Whether the application takes units as tasks ([`WorkerHandle::units`]): only then does a
    /// handoff wait for the task to finish.
    pub(crate) tasks_wanted: bool,
    pub(crate) new_tasks: VecDeque<UnitTask>,
    /// Bumped on every change; futures waiting for a change compare it.
    pub(crate) generation: u64,
    wakers: Vec<Waker>,
    /// The worker's own sleep, woken when the application stops it or finishes a task.
    pub(crate) worker_waker: Option<Waker>,
    /// Bumped each time the application wakes the worker.
    pub(crate) pokes: u64,
    /// Units the application retired (their records deleted), for the worker to drop.
    pub(crate) retired: Vec<String>,
}

/// The state a worker shares with its handles and tasks.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn LeaseBackend>,
    /// The partition of the unit records.
    pub(crate) units_key: String,
    /// The record whose fencing counter moves whenever the unit set changes.
    pub(crate) epoch_key: LeaseKey,
    /// Where the random parts of tokens come from.
    pub(crate) tokens: Arc<dyn TokenSource>,
    pub(crate) checkpoints: Option<Checkpoints>,
    state: Mutex<State>,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("store", &self.store.name())
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn new(
        worker_id: String,
        store: Arc<dyn LeaseBackend>,
        checkpoints: Option<Checkpoints>,
        keys: (String, LeaseKey),
        tokens: Arc<dyn TokenSource>,
    ) -> Self {
        Self {
            store,
            tokens,
            units_key: keys.0,
            epoch_key: keys.1,
            checkpoints,
            state: Mutex::new(State {
                worker_id,
                ..State::default()
            }),
        }
    }

    pub(crate) fn clock(&self) -> &dyn Clock {
        self.store.clock()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `change` under the lock, then wakes everyone waiting for a change.
    pub(crate) fn update<T>(&self, change: impl FnOnce(&mut State) -> T) -> T {
        let (out, wakers) = {
            let mut state = self.lock();
            let out = change(&mut state);
            state.generation += 1;
            (out, std::mem::take(&mut state.wakers))
        };
        for waker in wakers {
            waker.wake();
        }
        out
    }

    /// Wakes the worker's sleep (a stop, a finished task).
    pub(crate) fn wake_worker(&self) {
        let waker = self.update(|state| {
            state.pokes += 1;
            state.worker_waker.take()
        });
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    pub(crate) fn push_event(&self, event: FleetEvent) {
        self.update(|state| {
            if state.events.len() >= EVENT_QUEUE {
                state.events.pop_front();
                state.events_dropped += 1;
            }
            state.events.push_back(event);
        });
    }

    /// The fencing token of `unit` if it is owned and trusted at `now`.
    pub(crate) fn owns_at(state: &State, unit: &str, now: Instant) -> Option<FencingToken> {
        let (_, session_deadline) = state.session?;
        let owned = state.units.get(unit)?;
        let trusted = now < session_deadline && now < owned.deadline;
        (trusted && owned.ended.is_none() && !owned.retiring).then_some(owned.fencing)
    }

    /// Every unit trusted at `now`, with its fencing token.
    fn trusted_units(state: &State, now: Instant) -> BTreeMap<String, FencingToken> {
        state
            .units
            .keys()
            .filter_map(|unit| Self::owns_at(state, unit, now).map(|f| (unit.clone(), f)))
            .collect()
    }

    pub(crate) fn owns(&self, unit: &str) -> Option<FencingToken> {
        let now = self.clock().monotonic();
        Self::owns_at(&self.lock(), unit, now)
    }

    /// Registers `waker` to be woken at the next change (once, however often it is polled).
    fn wake_on_change(state: &mut State, waker: &Waker) {
        if !state.wakers.iter().any(|w| w.will_wake(waker)) {
            state.wakers.push(waker.clone());
        }
    }

    /// A future that completes at the next change after `seen` (a generation).
    fn changed(self: &Arc<Self>, seen: u64) -> Changed {
        Changed {
            shared: self.clone(),
            seen,
        }
    }
}

/// Completes once the shared state's generation moves past `seen`.
struct Changed {
    shared: Arc<Shared>,
    seen: u64,
}

impl Future for Changed {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.shared.lock();
        if state.generation != self.seen {
            return Poll::Ready(());
        }
        Shared::wake_on_change(&mut state, cx.waker());
        Poll::Pending
    }
}

/// Completes when either future does.
struct Either<A, B>(A, B);

impl<A: Future<Output = ()> + Unpin, B: Future<Output = ()> + Unpin> Future for Either<A, B> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Pin::new(&mut self.0).poll(cx).is_ready() {
            return Poll::Ready(());
        }
        Pin::new(&mut self.1).poll(cx)
    }
}

impl Unpin for Changed {}

/// Waits until the state changes after generation `seen` or the clock reaches `until`.
async fn change_or(shared: &Arc<Shared>, seen: u64, until: Option<Instant>) {
    let changed = Box::pin(shared.changed(seen));
    match until {
        Some(until) => {
            let clock = shared.clock();
            let sleep: BoxFuture<'static, ()> =
                clock.sleep(until.saturating_duration_since(clock.monotonic()));
            Either(changed, sleep).await;
        }
        None => changed.await,
    }
}

/// Observes a running [`Worker`](crate::Worker) and acts for the application while it runs: which
/// units it may act on now, fenced checkpoint saves, its events and its new units as tasks, and
/// stopping it. Cheap to clone; usable from any thread or task. It answers from what the worker
/// shares, without waiting for it, so a worker busy with a slow store never delays an answer, and
/// trust is compared with the store's clock at each call.
///
/// ```
/// use lessor_partition::Worker;
/// use lease_core::{ManualClock, MemoryBackend};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let clock = Arc::new(ManualClock::new());
/// let store = MemoryBackend::builder().with_clock(clock.clone()).build();
/// let mut worker = Worker::builder("demo", "a")
///     .with_store(Arc::new(store))
///     .with_units(["u1", "u2"])
///     .build()?;
/// let handle = worker.handle();
/// for _ in 0..3 {
///     pollster::block_on(worker.tick())?;
///     clock.advance(Duration::from_millis(2500)); // the default interval
/// }
/// // The handle answers without the worker: it owns both units, each with a fencing token.
/// assert!(handle.owns("u1").is_some());
/// assert_eq!(handle.owned_units().len(), 2);
/// assert_eq!(handle.snapshot().members, ["a"]);
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
#[derive(Clone, Debug)]
pub struct WorkerHandle {
    pub(crate) shared: Arc<Shared>,
}

impl WorkerHandle {
    /// The fencing token of `unit` if the worker owns it and may act on it *now*: its session and
    /// the unit's lease are both within their holder-side deadlines, read on the store's clock at
    /// this call. Check it (or pass the fencing token to the resource) before every act.
    pub fn owns(&self, unit: &str) -> Option<FencingToken> {
        self.shared.owns(unit)
    }

    /// The units the worker may act on now, with their fencing tokens.
    pub fn owned_units(&self) -> BTreeMap<String, FencingToken> {
        let now = self.shared.clock().monotonic();
        Shared::trusted_units(&self.shared.lock(), now)
    }

    /// The worker's view now: what it may act on (as [`owned_units`](Self::owned_units)), its
    /// session, whom it sees and its share.
    pub fn snapshot(&self) -> Assignment {
        let now = self.shared.clock().monotonic();
        let state = self.shared.lock();
        let units = Shared::trusted_units(&state, now);
        Assignment {
            worker_id: state.worker_id.clone(),
            session: state
                .session
                .filter(|(_, deadline)| now < *deadline)
                .map(|(fencing, _)| fencing),
            units,
            members: state.members.clone(),
            target: state.target,
        }
    }

    /// Until when, on the store's monotonic clock, the worker may trust what it owns unless its
    /// session is renewed first; `None` without a session.
    pub fn deadline(&self) -> Option<Instant> {
        self.shared.lock().session.map(|(_, deadline)| deadline)
    }

    /// The worker's counters as of its latest tick, with the application's checkpoint saves and
    /// the events dropped so far.
    pub fn stats(&self) -> WorkerStats {
        let state = self.shared.lock();
        let mut stats = state.stats;
        stats.checkpoint_requests += state.saves;
        stats.events_dropped = state.events_dropped;
        stats
    }

    /// Stores `data` as the checkpoint of `unit`, fenced by the worker's fencing token for it:
    /// for an application that follows [`events`](Self::events); one that takes
    /// [`units`](Self::units) saves through each [`UnitTask`].
    ///
    /// # Errors
    /// [`LeaseError::NotOwned`] (key: the unit's record) unless the worker owns the unit now,
    /// or with [`NotOwnedReason::Fenced`] if a newer owner fenced it (the one answer whichever
    /// store keeps the checkpoints); [`LeaseError::InvalidInput`] without checkpoints; the store's
    /// error when it fails.
    pub async fn save_checkpoint(&self, unit: &str, data: &[u8]) -> Result<(), LeaseError> {
        let Some(fencing) = self.owns(unit) else {
            return Err(not_owned(&self.shared, unit));
        };
        save_fenced(&self.shared, unit, fencing, data).await
    }

    /// The worker's [`FleetEvent`]s, as a stream that ends once the worker has shut down
    /// ([`Worker::shutdown`](crate::Worker::shutdown), the end of `run`) and every event was
    /// read. Events are queued by the worker without waiting for the application, so a slow
    /// consumer never delays a renewal (past 65 536 unread events the oldest are dropped,
    /// counted in [`WorkerStats::events_dropped`]). Every stream of a worker reads the one
    /// queue: each event goes to one reader.
    ///
    /// ```
    /// use futures::StreamExt;
    /// use lessor_partition::{FleetEvent, Worker};
    /// use lease_core::MemoryBackend;
    /// use std::sync::Arc;
    ///
    /// let mut worker = Worker::builder("demo", "a")
    ///     .with_store(Arc::new(MemoryBackend::new()))
    ///     .with_units(["u1"])
    ///     .build()?;
    /// let mut events = worker.handle().events();
    /// pollster::block_on(worker.shutdown())?; // no session yet: nothing to hand over
    /// assert_eq!(pollster::block_on(events.next()), None::<FleetEvent>);
    /// # Ok::<(), lease_core::LeaseError>(())
    /// ```
    pub fn events(&self) -> impl Stream<Item = FleetEvent> + Send + Unpin + 'static {
        Queue {
            shared: self.shared.clone(),
            pop: |state: &mut State| state.events.pop_front(),
        }
    }

    /// The units this worker gains from now on, each as a [`UnitTask`] to run, as a stream that
    /// ends once the worker has shut down. Calling it switches the worker to handing units over
    /// gracefully: when the plan moves a unit away (or at shutdown), the unit's task is told
    /// through [`UnitTask::lost`] and the unit is released only once the task is dropped or the
    /// handoff timeout passes, so the task can save a final checkpoint that the next owner
    /// reads. Every stream of a worker reads the one queue: each task goes to one reader.
    ///
    /// ```no_run
    /// use futures::StreamExt;
    /// use lessor_partition::{UnitEnd, Worker};
    ///
    /// async fn work(worker: Worker) {
    ///     let mut units = worker.handle().units();
    ///     tokio::spawn(worker.run());
    ///     while let Some(task) = units.next().await {
    ///         tokio::spawn(async move {
    ///             // ... work on task.unit(), writing with task.fencing_token() ...
    ///             if let UnitEnd::HandedOver | UnitEnd::Shutdown = task.lost().await {
    ///                 let _ = task.save_checkpoint(b"final").await;
    ///             }
    ///         });
    ///     }
    /// }
    /// ```
    pub fn units(&self) -> impl Stream<Item = UnitTask> + Send + Unpin + 'static {
        self.shared.lock().tasks_wanted = true;
        Queue {
            shared: self.shared.clone(),
            pop: |state: &mut State| state.new_tasks.pop_front(),
        }
    }

    /// Adds units to the fleet at run time (KCL's shard sync: new shards appear): makes a record
    /// for each unit the store does not have yet, then moves the fleet's unit-set epoch so every
    /// worker lists the units and plans over them on its next tick. Returns how many were new.
    /// Two requests per new unit, two for the epoch.
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] for a unit that cannot form a key; the store's error when it
    /// fails (units made before it stay).
    pub async fn add_units<I, S>(&self, units: I) -> Result<usize, LeaseError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut added = 0;
        for unit in units {
            let unit = unit.into();
            let key = LeaseKey::with_sort_key(self.shared.units_key.as_str(), unit.as_str())?;
            if touch(&*self.shared.store, &*self.shared.tokens, &key).await? {
                added += 1;
            }
        }
        touch(
            &*self.shared.store,
            &*self.shared.tokens,
            &self.shared.epoch_key,
        )
        .await?;
        tracing::info!(added, "fleet: units added");
        Ok(added)
    }

    /// Asks [`Worker::run`](crate::Worker::run) to shut down cleanly (hand every unit over, then
    /// end the session) and return.
    pub fn stop(&self) {
        self.shared.update(|state| state.stop = true);
        self.shared.wake_worker();
    }
}

/// [`WorkerHandle::events`] and [`WorkerHandle::units`]: pops one of the shared queues, and
/// ends once the worker has finished and the queue is empty.
struct Queue<T> {
    shared: Arc<Shared>,
    pop: fn(&mut State) -> Option<T>,
}

impl<T> Stream for Queue<T> {
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut state = self.shared.lock();
        if let Some(item) = (self.pop)(&mut state) {
            return Poll::Ready(Some(item));
        }
        if state.finished {
            return Poll::Ready(None);
        }
        Shared::wake_on_change(&mut state, cx.waker());
        Poll::Pending
    }
}

/// Makes sure `key` has a record, and moves its fencing counter: acquire (under a token that is
/// not a fleet token) and release at once. `true` if the record was free or new, `false` if
/// someone holds it.
pub(crate) async fn touch(
    store: &dyn LeaseBackend,
    tokens: &dyn TokenSource,
    key: &LeaseKey,
) -> Result<bool, LeaseError> {
    let token = tokens.next_token();
    let options = AcquireOptions::default()
        .with_owner("fleet admin")
        .with_token(token);
    let duration = std::time::Duration::from_secs(10);
    match store.try_acquire(key, duration, &options).await {
        Ok(lease) => {
            store
                .release(lease.key(), lease.token(), lease.fencing_token())
                .await?;
            Ok(true)
        }
        Err(error) if error.is_held() => Ok(false),
        Err(error) => Err(error),
    }
}

/// The key of `unit`'s record, for errors that name the unit.
fn unit_key(shared: &Shared, unit: &str) -> Result<LeaseKey, LeaseError> {
    LeaseKey::with_sort_key(shared.units_key.as_str(), unit)
}

/// Why the application may not act on `unit` now: [`LeaseError::NotOwned`] with the unit's key,
/// `TakenOver` when this worker holds no current ownership of it, `Expired` when it does but its
/// trust has lapsed.
fn not_owned(shared: &Shared, unit: &str) -> LeaseError {
    let reason = if shared.lock().units.contains_key(unit) {
        NotOwnedReason::Expired
    } else {
        NotOwnedReason::TakenOver
    };
    match unit_key(shared, unit) {
        Ok(key) => LeaseError::not_owned(key, reason),
        Err(error) => error,
    }
}

async fn save_fenced(
    shared: &Shared,
    unit: &str,
    fencing: FencingToken,
    data: &[u8],
) -> Result<(), LeaseError> {
    let store = shared
        .checkpoints
        .clone()
        .ok_or_else(|| LeaseError::invalid("checkpoints", "no checkpoints configured"))?;
    let fence = {
        let mut state = shared.lock();
        state.saves += 1;
        state
            .units
            .get(unit)
            .filter(|owned| owned.fencing == fencing)
            .map(|owned| owned.checkpoint_fencing)
    };
    let Some(fence) = fence else {
        return Err(not_owned(shared, unit));
    };
    store.save(unit, fence, data).await
}

/// Where one ownership stands, as a unit task sees it.
enum Verdict {
    /// Owned and trusted; look again at this instant (its deadline) or at the next change.
    Owned(Instant),
    /// Still owned, but the worker asks for it back.
    HandingOver(UnitEnd),
    /// The ownership is over.
    Ended(UnitEnd),
}

/// One unit the worker gained, for the application to work on (typically as its own async task):
/// the unit's guard. It carries the unit's fencing token for every write, the checkpoint read
/// when the unit was gained (which fenced out every earlier owner), [`check`](Self::check) before
/// every act and [`lost`](Self::lost), which completes when the ownership ends or must end, at
/// the latest at its deadline. Tasks come from [`WorkerHandle::units`].
///
/// Dropping the task tells the worker the application is done with the unit: during a handoff the
/// worker then releases it at once.
///
/// ```
/// use futures::StreamExt;
/// use lessor_partition::{Checkpoint, Worker};
/// use lease_core::{Clock, ManualClock, MemoryBackend};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let clock = Arc::new(ManualClock::new());
/// let store = MemoryBackend::builder().with_clock(clock.clone()).build();
/// let mut worker = Worker::builder("demo", "a")
///     .with_store(Arc::new(store))
///     .with_units(["u1"])
///     .with_checkpoints()
///     .build()?;
/// let mut units = worker.handle().units(); // every unit gained from now on comes as a task
/// for _ in 0..3 {
///     pollster::block_on(worker.tick())?;
///     clock.advance(Duration::from_millis(2500));
/// }
/// let task = pollster::block_on(units.next()).expect("u1, gained");
/// assert_eq!((task.unit(), task.checkpoint()), ("u1", &Checkpoint::Empty));
/// let fencing = task.check()?; // before every act; writes carry the fencing token
/// pollster::block_on(task.save_checkpoint(b"offset=1"))?;
/// assert_eq!(fencing, task.fencing_token());
/// assert!(task.deadline() > clock.monotonic()); // trusted until then unless renewed first
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
pub struct UnitTask {
    pub(crate) unit: String,
    pub(crate) fencing: FencingToken,
    pub(crate) checkpoint: Checkpoint,
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for UnitTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnitTask")
            .field("unit", &self.unit)
            .field("fencing_token", &self.fencing)
            .finish_non_exhaustive()
    }
}

impl UnitTask {
    /// The unit (the sort key of its record, `fleet/<fleet>/units`).
    pub fn unit(&self) -> &str {
        &self.unit
    }

    /// The fencing token of this ownership: pass it with every write the unit's work makes.
    pub fn fencing_token(&self) -> FencingToken {
        self.fencing
    }

    /// The fencing token if the worker may act on the unit now (see [`WorkerHandle::owns`]; a
    /// unit being handed over is still owned until its task is dropped).
    ///
    /// # Errors
    /// [`LeaseError::Lost`] with the unit's key and why: the unit's [`UnitEnd::Lost`] reason,
    /// `DeadlinePassed` or `NotOwned(Expired)` when a deadline passed before the worker said
    /// why, `NotOwned(Missing)` once it was released (handed over, shut down) or retired (or
    /// while it is being retired), `NotOwned(TakenOver)` when the worker holds a newer
    /// ownership of the unit.
    pub fn check(&self) -> Result<FencingToken, LeaseError> {
        let now = self.shared.clock().monotonic();
        let reason = {
            let state = self.shared.lock();
            if Shared::owns_at(&state, &self.unit, now) == Some(self.fencing) {
                return Ok(self.fencing);
            }
            match Self::verdict(&state, &self.unit, self.fencing, now) {
                Verdict::Ended(UnitEnd::Lost(reason)) => reason,
                _ => LossReason::NotOwned(NotOwnedReason::Missing),
            }
        };
        match unit_key(&self.shared, &self.unit) {
            Ok(key) => Err(LeaseError::lost(key, reason)),
            Err(error) => Err(error),
        }
    }

    /// The instant, on the store's monotonic clock, until which the worker may act on the unit
    /// unless its session (and, rarely, the unit's own lease) is renewed first: what
    /// [`check`](Self::check) and [`lost`](Self::lost) compare with the clock. Once the
    /// ownership is over, no later than now.
    pub fn deadline(&self) -> Instant {
        let now = self.shared.clock().monotonic();
        let state = self.shared.lock();
        match Self::verdict(&state, &self.unit, self.fencing, now) {
            Verdict::Owned(until) => until,
            Verdict::HandingOver(_) => state
                .units
                .get(&self.unit)
                .zip(state.session)
                .map_or(now, |(owned, (_, session))| owned.deadline.min(session)),
            Verdict::Ended(_) => now,
        }
    }

    /// The checkpoint read when the unit was gained.
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// Stores `data` as the unit's checkpoint, fenced by this ownership's token.
    ///
    /// # Errors
    /// [`LeaseError::NotOwned`] once the ownership ended, or with [`NotOwnedReason::Fenced`] if
    /// a newer owner fenced it; see [`WorkerHandle::save_checkpoint`].
    pub async fn save_checkpoint(&self, data: &[u8]) -> Result<(), LeaseError> {
        if self.shared.owns(&self.unit) != Some(self.fencing) {
            return Err(not_owned(&self.shared, &self.unit));
        }
        save_fenced(&self.shared, &self.unit, self.fencing, data).await
    }

    /// Reports the unit's load (any non-negative figure: records per second, CPU share), for a
    /// fleet that balances by load ([`WorkerBuilder::with_balance_by_load`](crate::WorkerBuilder::with_balance_by_load)).
    /// Until reported, a unit counts 1. Negative or non-finite figures are ignored.
    pub fn report_load(&self, load: f64) {
        if !load.is_finite() || load < 0.0 {
            return;
        }
        let mut state = self.shared.lock();
        if let Some(owned) = state.units.get_mut(&self.unit)
            && owned.fencing == self.fencing
        {
            owned.load = load;
        }
    }

    /// Retires the unit for good (KCL: a shard that reached its end): stops trusting it at once,
    /// deletes its record with this ownership's token, and moves the fleet's unit-set epoch, so
    /// no worker takes it again. The worker then reports it lost ([`UnitEnd::Retired`]).
    ///
    /// Only for units that no worker is configured with (units added with
    /// [`WorkerHandle::add_units`]): a worker configured with a retired unit would make it again.
    /// Never reuse a retired unit's id: its checkpoint's fence stays where it was.
    ///
    /// # Errors
    /// [`LeaseError::NotOwned`] unless this ownership is current; the store's error if it cannot
    /// delete (a backend without delete: `is_unsupported()`) or the record changed; the unit is
    /// then trusted again, as before the call.
    pub async fn retire(&self) -> Result<(), LeaseError> {
        let token = self.shared.update(|state| {
            let owned = state.units.get_mut(&self.unit)?;
            if owned.fencing != self.fencing || owned.ended.is_some() || owned.retiring {
                return None;
            }
            owned.retiring = true;
            Some(owned.token.clone())
        });
        let Some(token) = token else {
            return Err(not_owned(&self.shared, &self.unit));
        };
        let key = unit_key(&self.shared, &self.unit)?;
        let store = &*self.shared.store;
        let outcome = store.delete(&key, Some(&token), Some(self.fencing)).await;
        // A lost reply retried finds the record gone and cannot prove whose delete that was;
        // either way the record is gone, which is all a retirement needs.
        let gone = |e: &LeaseError| e.not_owned_reason() == Some(NotOwnedReason::Missing);
        if let Err(error) = outcome.or_else(|e| if gone(&e) { Ok(()) } else { Err(e) }) {
            self.shared.update(|state| {
                if let Some(owned) = state.units.get_mut(&self.unit) {
                    owned.retiring = false;
                }
            });
            return Err(error);
        }
        tracing::info!(unit = %self.unit, "fleet: unit retired");
        self.shared
            .update(|state| state.retired.push(self.unit.clone()));
        self.shared.wake_worker();
        touch(store, &*self.shared.tokens, &self.shared.epoch_key).await?;
        Ok(())
    }

    /// Completes when this ownership ends or must end, with why:
    ///
    /// * [`UnitEnd::HandedOver`] or [`UnitEnd::Shutdown`]: the worker asks for the unit back. It
    ///   is still owned: save a final checkpoint, then drop the task, within the handoff timeout.
    /// * any other: the ownership is over (at the latest when its deadline passed, on the
    ///   store's clock, even if the worker was paused or starved): stop at once.
    ///   `UnitEnd::Lost(DeadlinePassed)` when the task saw the deadline pass before the worker
    ///   said why.
    pub async fn lost(&self) -> UnitEnd {
        loop {
            let (seen, wake_at) = {
                let now = self.shared.clock().monotonic();
                let state = self.shared.lock();
                match Self::verdict(&state, &self.unit, self.fencing, now) {
                    Verdict::Owned(wake_at) => (state.generation, wake_at),
                    Verdict::HandingOver(end) | Verdict::Ended(end) => return end,
                }
            };
            change_or(&self.shared, seen, Some(wake_at)).await;
        }
    }

    fn verdict(state: &State, unit: &str, fencing: FencingToken, now: Instant) -> Verdict {
        let lost = |reason| Verdict::Ended(UnitEnd::Lost(reason));
        let Some(owned) = state.units.get(unit).filter(|u| u.fencing == fencing) else {
            return lost(LossReason::NotOwned(NotOwnedReason::TakenOver));
        };
        if let Some(end) = &owned.ended {
            return Verdict::Ended(end.clone());
        }
        let Some((_, session_deadline)) = state.session else {
            return lost(LossReason::DeadlinePassed);
        };
        if now >= session_deadline {
            return lost(LossReason::DeadlinePassed);
        }
        if now >= owned.deadline {
            return lost(LossReason::NotOwned(NotOwnedReason::Expired));
        }
        if let Some((end, _)) = &owned.handoff {
            return Verdict::HandingOver(end.clone());
        }
        Verdict::Owned(session_deadline.min(owned.deadline))
    }
}

impl Drop for UnitTask {
    fn drop(&mut self) {
        // Tell the worker the application is done with this ownership, and wake it so a handoff
        // in progress completes now rather than at the next tick.
        let handing_over = self.shared.update(|state| {
            let Some(owned) = state.units.get_mut(&self.unit) else {
                return false;
            };
            if owned.fencing != self.fencing {
                return false;
            }
            owned.task_alive = false;
            if owned.ended.is_some() {
                // The worker already let it go; its task was all that kept the entry.
                state.units.remove(&self.unit);
                return false;
            }
            owned.handoff.is_some()
        });
        if handing_over {
            self.shared.wake_worker();
        }
    }
}

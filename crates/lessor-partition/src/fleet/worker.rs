//! One fleet worker: a session lease, a view of the members, and the units it owns.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime};

use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencingToken, Lease, LeaseKey, LeaseRecord, LeaseToken,
    RandomTokens, TokenSource, sleep_until, validate_duration,
};

use super::checkpoint::CheckpointStore;
use super::plan::{Holding, plan};
use crate::{Error, LeaseStore, PartitionSet};

/// Longest worker id accepted, in bytes (it travels inside owner tokens of at most 256 bytes).
const MAX_WORKER_ID_BYTES: usize = 180;

/// What a worker tells the application.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FleetEvent {
    /// The worker now owns `unit`. Pass `fencing` with every write the unit's work makes.
    Gained {
        /// The unit.
        unit: String,
        /// The unit's fencing token for this ownership: greater than every earlier owner's.
        fencing: FencingToken,
        /// The unit's checkpoint, when a [`CheckpointStore`] is configured (loading it fenced out
        /// every earlier owner).
        checkpoint: Option<Vec<u8>>,
    },
    /// The worker no longer owns `unit`: stop working on it before the callback returns.
    Lost {
        /// The unit.
        unit: String,
        /// The fencing token of the ownership that ended.
        fencing: FencingToken,
        /// Why.
        cause: LossCause,
    },
}

/// Why a worker lost a unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossCause {
    /// The plan gave it to another worker; it is released right after the event.
    HandedOver,
    /// The worker's session could no longer be trusted (renewals failed, the process was paused):
    /// every unit goes at once.
    SessionLost,
    /// The store says another worker took it.
    TakenOver,
    /// Its unit lease expired before a renewal landed.
    Expired,
    /// The worker is shutting down; it is released right after the event.
    Shutdown,
}

/// Receives [`FleetEvent`]s, synchronously, from the worker's tick.
pub type EventHandler = Arc<dyn Fn(&FleetEvent) + Send + Sync>;

/// Request counts of one worker, for cost reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Ticks run.
    pub ticks: u64,
    /// Every request sent to the lease store.
    pub requests: u64,
    /// Of which listings (one request each, whatever their size).
    pub lists: u64,
    /// Records returned by listings.
    pub records_read: u64,
    /// Of which unit-partition listings (planning rounds).
    pub unit_lists: u64,
    /// Units gained.
    pub gains: u64,
    /// Units lost or handed over.
    pub losses: u64,
    /// Requests sent to the checkpoint store.
    pub checkpoint_requests: u64,
}

/// What one [`Worker::tick`] did.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct TickReport {
    /// The events it told the application, in order.
    pub events: Vec<FleetEvent>,
    /// Whether it listed the units and planned.
    pub planned: bool,
    /// Whether it holds a trusted session after the tick.
    pub has_session: bool,
}

/// A snapshot of a worker's view: what it owns and whom it sees.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Assignment {
    /// The worker.
    pub worker_id: String,
    /// The fencing token of its session, if it has one.
    pub session: Option<FencingToken>,
    /// The units it owns, with their fencing tokens.
    pub units: BTreeMap<String, FencingToken>,
    /// The live members it sees, sorted.
    pub members: Vec<String>,
    /// Its share from the last plan.
    pub target: Option<usize>,
}

/// Configures a [`Worker`].
///
/// ```
/// use lessor_partition::{Partition, Worker};
/// use lease_core::MemoryBackend;
/// use std::time::Duration;
///
/// let shards = Partition::universe().split(16);
/// let worker = Worker::builder("indexer", "host-1")
///     .store(MemoryBackend::new())
///     .partitions(&shards)
///     .session_duration(Duration::from_secs(10))
///     .interval(Duration::from_millis(2500))
///     .on_event(|event| println!("{event:?}"))
///     .build()?;
/// # let _ = worker;
/// # Ok::<(), lessor_partition::Error>(())
/// ```
#[must_use]
pub struct WorkerBuilder {
    fleet: String,
    worker_id: String,
    store: Option<Arc<dyn LeaseStore>>,
    units: Vec<String>,
    session_duration: Duration,
    interval: Option<Duration>,
    unit_duration: Duration,
    skew: Option<Duration>,
    max_moves: usize,
    resync_every: u32,
    on_event: Option<EventHandler>,
    checkpoints: Option<Arc<dyn CheckpointStore>>,
}

impl fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("fleet", &self.fleet)
            .field("worker_id", &self.worker_id)
            .field("units", &self.units.len())
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// The lease store the fleet shares.
    pub fn store(self, store: impl LeaseStore + 'static) -> Self {
        self.store_arc(Arc::new(store))
    }

    /// The lease store the fleet shares, already shared.
    pub fn store_arc(mut self, store: Arc<dyn LeaseStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The units (shard keys) the fleet divides; every worker must be given the same set.
    pub fn units<I, S>(mut self, units: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.units.extend(units.into_iter().map(Into::into));
        self
    }

    /// Key ranges as units, named by their text form.
    pub fn partitions<'a>(
        self,
        partitions: impl IntoIterator<Item = &'a crate::Partition>,
    ) -> Self {
        self.units(partitions.into_iter().map(ToString::to_string))
    }

    /// The ranges of a set as units.
    pub fn partition_set(self, set: &PartitionSet) -> Self {
        self.partitions(set.iter())
    }

    /// How long a session lease lasts without renewal (default 10 s): a crashed worker's units
    /// are owned again within about this plus one interval (at most two).
    pub fn session_duration(mut self, duration: Duration) -> Self {
        self.session_duration = duration;
        self
    }

    /// How often the worker ticks (default a quarter of the session duration; at most half).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// How long each unit lease lasts (default 24 h). Unit leases are renewed when half is used,
    /// so this sets their amortised renewal cost; takeover never waits for them (see the crate
    /// documentation).
    pub fn unit_lease_duration(mut self, duration: Duration) -> Self {
        self.unit_duration = duration;
        self
    }

    /// Also judge a session dead once its store-side `expires_at` plus `skew` has passed on this
    /// worker's wall clock. Without it (the default) a session is judged dead only after its
    /// record stayed unchanged for a whole session duration on this worker's monotonic clock.
    pub fn clock_skew_bound(mut self, skew: Duration) -> Self {
        self.skew = Some(skew);
        self
    }

    /// Most units given away, and most taken, per tick (default 256).
    pub fn max_moves_per_interval(mut self, moves: usize) -> Self {
        self.max_moves = moves.max(1);
        self
    }

    /// The member with the lowest id lists the units at least this often, in ticks (default 8),
    /// to catch anything the membership changes did not reveal.
    pub fn resync_every(mut self, ticks: u32) -> Self {
        self.resync_every = ticks.max(1);
        self
    }

    /// Called with every [`FleetEvent`], from inside the tick.
    pub fn on_event(mut self, handler: impl Fn(&FleetEvent) + Send + Sync + 'static) -> Self {
        self.on_event = Some(Arc::new(handler));
        self
    }

    /// Keeps per-unit checkpoints in `store`.
    pub fn checkpoints(mut self, store: Arc<dyn CheckpointStore>) -> Self {
        self.checkpoints = Some(store);
        self
    }

    /// Checks the configuration and makes the worker. Sends nothing.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a missing store, an invalid fleet name, worker id or unit, or
    /// durations that cannot work together.
    pub fn build(self) -> Result<Worker, Error> {
        let store = self
            .store
            .ok_or_else(|| Error::invalid("store", "a worker needs a lease store"))?;
        if self.worker_id.len() > MAX_WORKER_ID_BYTES || self.worker_id.contains('.') {
            return Err(Error::invalid(
                "worker id",
                format!("must be at most {MAX_WORKER_ID_BYTES} bytes with no '.'"),
            ));
        }
        let sessions = format!("fleet/{}/sessions", self.fleet);
        let units_key = format!("fleet/{}/units", self.fleet);
        let session_key = LeaseKey::with_sort_key(sessions.as_str(), self.worker_id.as_str())?;
        let mut units = self.units;
        units.sort();
        units.dedup();
        for unit in &units {
            LeaseKey::with_sort_key(units_key.as_str(), unit.as_str())?;
        }
        validate_duration(self.session_duration)?;
        validate_duration(self.unit_duration)?;
        let interval = self.interval.unwrap_or(self.session_duration / 4);
        if interval.is_zero() || interval > self.session_duration / 2 {
            return Err(Error::invalid(
                "interval",
                "must be positive and at most half the session duration",
            ));
        }
        if self.unit_duration < self.session_duration {
            return Err(Error::invalid(
                "unit lease duration",
                "must be at least the session duration",
            ));
        }
        Ok(Worker {
            config: Config {
                worker_id: self.worker_id,
                sessions,
                units_key,
                session_key,
                units,
                session_duration: self.session_duration,
                interval,
                unit_duration: self.unit_duration,
                skew: self.skew,
                max_moves: self.max_moves,
                resync_every: self.resync_every,
            },
            store,
            on_event: self.on_event,
            checkpoints: self.checkpoints,
            session: None,
            view: BTreeMap::new(),
            absent: BTreeMap::new(),
            foreign: BTreeMap::new(),
            relist: false,
            owned: BTreeMap::new(),
            target: None,
            planned_members: None,
            ticks_since_plan: 0,
            stats: WorkerStats::default(),
            shared: Arc::new(Shared::default()),
        })
    }
}

#[derive(Debug)]
struct Config {
    worker_id: String,
    sessions: String,
    units_key: String,
    session_key: LeaseKey,
    units: Vec<String>,
    session_duration: Duration,
    interval: Duration,
    unit_duration: Duration,
    skew: Option<Duration>,
    max_moves: usize,
    resync_every: u32,
}

/// One session record as this worker last saw it.
#[derive(Clone, Debug)]
struct Observed {
    fencing: u64,
    held: bool,
    expires_at: Option<SystemTime>,
    /// When this worker first saw this (fencing, expires_at), on its monotonic clock.
    since: Instant,
}

/// Who holds a unit record, as parsed from its owner token.
#[derive(Clone, Debug)]
struct UnitHolder {
    /// The holder's token, if the store shows it.
    token: Option<LeaseToken>,
    /// `(worker id, session fencing)`, or `None` when the token is not a fleet token.
    owner: Option<(String, u64)>,
    /// The record's fencing counter and expiry: with the token, what "unchanged" compares.
    fencing: u64,
    expires_at: Option<SystemTime>,
}

/// A unit owner's session that was missing from the sessions listing.
#[derive(Clone, Copy, Debug)]
struct Absence {
    /// When the units listing that named this session returned (monotonic).
    named_at: Instant,
    /// When the first sessions listing *sent after* `named_at` that missed the record returned:
    /// the start of the session duration after which the session counts as ended.
    since: Option<Instant>,
}

/// A unit record held under a token that is not a fleet token, as first seen unchanged.
#[derive(Clone, Debug)]
struct Foreign {
    token: LeaseToken,
    fencing: u64,
    expires_at: Option<SystemTime>,
    /// When the units listing that first showed this exact record returned (monotonic).
    since: Instant,
}

#[derive(Debug, Default)]
struct Shared {
    snapshot: Mutex<Assignment>,
    stop: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

/// Observes a running [`Worker`] and stops it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct WorkerHandle {
    shared: Arc<Shared>,
}

impl WorkerHandle {
    /// The worker's view after its latest tick.
    pub fn snapshot(&self) -> Assignment {
        self.shared
            .snapshot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Asks [`Worker::run`] to shut down cleanly (release every unit, then the session) and
    /// return.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(waker) = self
            .shared
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            waker.wake();
        }
    }
}

/// A fleet worker. Drive it with [`Worker::tick`] every interval, or let [`Worker::run`] do it.
///
/// Per tick, in steady state, it sends **two requests**: renew its session, list the sessions
/// partition (`W` records). It lists the units partition (`L` records, one request) only when
/// membership changed, while it is below its share, after a listing showed a free or dead-owned
/// unit, and, for the member with the lowest id, every `resync_every` ticks. Unit leases are renewed once per half unit-lease duration.
/// Moves cost one release by the giver and one acquire by the taker (plus a release of the dead
/// owner's token when the owner crashed).
///
/// ```
/// use lessor_partition::Worker;
/// use lease_core::{ManualClock, MemoryBackend};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let clock = Arc::new(ManualClock::new());
/// let store = MemoryBackend::new().with_clock(clock.clone());
/// let make = |id: &str| Worker::builder("demo", id).store(store.clone())
///     .units((0..6).map(|i| format!("shard-{i}"))).build();
/// let (mut a, mut b) = (make("a")?, make("b")?);
/// for _ in 0..4 {
///     lease_core::block_on(a.tick())?;
///     lease_core::block_on(b.tick())?;
///     clock.advance(Duration::from_millis(2500));
/// }
/// assert_eq!(a.assignment().units.len(), 3);
/// assert_eq!(b.assignment().units.len(), 3);
/// lease_core::block_on(a.shutdown())?;
/// lease_core::block_on(b.tick())?;
/// lease_core::block_on(b.tick())?;
/// assert_eq!(b.assignment().units.len(), 6);
/// # Ok::<(), lessor_partition::Error>(())
/// ```
pub struct Worker {
    config: Config,
    store: Arc<dyn LeaseStore>,
    on_event: Option<EventHandler>,
    checkpoints: Option<Arc<dyn CheckpointStore>>,
    session: Option<Lease>,
    view: BTreeMap<String, Observed>,
    /// Unit owners' sessions missing from the sessions listing, by `(worker id, fencing)`.
    absent: BTreeMap<(String, u64), Absence>,
    /// Units held under tokens that are not fleet tokens, by unit.
    foreign: BTreeMap<String, Foreign>,
    /// The last units listing showed a unit free or a dead owner's: list again next tick.
    relist: bool,
    owned: BTreeMap<String, Lease>,
    target: Option<usize>,
    planned_members: Option<Vec<(String, u64)>>,
    ticks_since_plan: u32,
    stats: WorkerStats,
    shared: Arc<Shared>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("worker_id", &self.config.worker_id)
            .field("session", &self.session.as_ref().map(Lease::fencing_token))
            .field("owned", &self.owned.len())
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// Starts configuring worker `worker_id` of fleet `fleet`.
    pub fn builder(fleet: impl Into<String>, worker_id: impl Into<String>) -> WorkerBuilder {
        WorkerBuilder {
            fleet: fleet.into(),
            worker_id: worker_id.into(),
            store: None,
            units: Vec::new(),
            session_duration: Duration::from_secs(10),
            interval: None,
            unit_duration: Duration::from_secs(24 * 3600),
            skew: None,
            max_moves: 256,
            resync_every: 8,
            on_event: None,
            checkpoints: None,
        }
    }

    /// The worker id.
    pub fn id(&self) -> &str {
        &self.config.worker_id
    }

    /// The tick interval.
    pub fn interval(&self) -> Duration {
        self.config.interval
    }

    /// A handle to observe this worker and stop [`Worker::run`].
    pub fn handle(&self) -> WorkerHandle {
        WorkerHandle {
            shared: self.shared.clone(),
        }
    }

    /// Request counts so far.
    pub fn stats(&self) -> WorkerStats {
        self.stats
    }

    fn clock(&self) -> &dyn Clock {
        self.store.clock()
    }

    fn session_trusted(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| s.is_trusted(self.clock()))
    }

    /// The fencing token of `unit` if this worker owns it and may act on it *now*: its session
    /// and the unit's lease are both within their holder-side deadlines. Check it (or use the
    /// fencing token at the resource) before every act, since a paused process learns of its
    /// loss only at its next tick.
    pub fn owns(&self, unit: &str) -> Option<FencingToken> {
        if !self.session_trusted() {
            return None;
        }
        self.owned
            .get(unit)
            .filter(|lease| lease.is_trusted(self.clock()))
            .map(Lease::fencing_token)
    }

    /// Until when, on the store's monotonic clock, this worker may trust what it owns, unless a
    /// tick renews the session first.
    pub fn deadline(&self) -> Option<Instant> {
        self.session.as_ref().map(Lease::deadline)
    }

    /// The units it trusts now, with their fencing tokens.
    pub fn owned_units(&self) -> BTreeMap<String, FencingToken> {
        self.owned
            .keys()
            .filter_map(|unit| self.owns(unit).map(|f| (unit.clone(), f)))
            .collect()
    }

    /// Its current view.
    pub fn assignment(&self) -> Assignment {
        Assignment {
            worker_id: self.config.worker_id.clone(),
            session: self
                .session
                .as_ref()
                .filter(|_| self.session_trusted())
                .map(Lease::fencing_token),
            units: self.owned_units(),
            members: self.live_members().into_iter().map(|(m, _)| m).collect(),
            target: self.target,
        }
    }

    /// Stores `data` as the checkpoint of `unit`, fenced by this worker's fencing token for it.
    ///
    /// # Errors
    /// [`Error::NotOwner`] unless this worker trusts its ownership now; [`Error::Fenced`] if a
    /// newer owner exists; [`Error::InvalidInput`] without a checkpoint store.
    pub async fn save_checkpoint(&mut self, unit: &str, data: &[u8]) -> Result<(), Error> {
        let store = self
            .checkpoints
            .clone()
            .ok_or_else(|| Error::invalid("checkpoints", "no checkpoint store configured"))?;
        let fencing = self.owns(unit).ok_or_else(|| Error::NotOwner {
            unit: unit.to_owned(),
        })?;
        self.stats.checkpoint_requests += 1;
        store.save(unit, fencing, data).await
    }

    fn emit(&mut self, event: FleetEvent, events: &mut Vec<FleetEvent>) {
        match &event {
            FleetEvent::Gained { unit, fencing, .. } => {
                self.stats.gains += 1;
                tracing::info!(worker = %self.config.worker_id, unit, %fencing, "fleet: gained unit");
            }
            FleetEvent::Lost {
                unit,
                fencing,
                cause,
            } => {
                self.stats.losses += 1;
                tracing::info!(worker = %self.config.worker_id, unit, %fencing, ?cause, "fleet: lost unit");
            }
        }
        if let Some(handler) = &self.on_event {
            handler(&event);
        }
        events.push(event);
    }

    fn lose_unit(
        &mut self,
        unit: &str,
        cause: LossCause,
        events: &mut Vec<FleetEvent>,
    ) -> Option<Lease> {
        let lease = self.owned.remove(unit)?;
        self.emit(
            FleetEvent::Lost {
                unit: unit.to_owned(),
                fencing: lease.fencing_token(),
                cause,
            },
            events,
        );
        Some(lease)
    }

    fn lose_all(&mut self, cause: LossCause, events: &mut Vec<FleetEvent>) -> Vec<Lease> {
        let units: Vec<String> = self.owned.keys().cloned().collect();
        units
            .iter()
            .filter_map(|unit| self.lose_unit(unit, cause, events))
            .collect()
    }

    /// Renews (or first acquires) the session. Returns whether a trusted session is held after.
    async fn keep_session(&mut self, events: &mut Vec<FleetEvent>) -> Result<bool, Error> {
        if let Some(session) = self.session.clone() {
            if !session.is_trusted(self.clock()) {
                tracing::warn!(worker = %self.config.worker_id, "fleet: session deadline passed before a renewal; dropping every unit");
                self.lose_all(LossCause::SessionLost, events);
                self.session = None;
                self.stats.requests += 1;
                // Best effort: if the store still has it, others may take over at once.
                let _ = self
                    .store
                    .release(session.key(), session.token(), session.fencing_token())
                    .await;
            } else {
                self.stats.requests += 1;
                match self
                    .store
                    .renew(&session, self.config.session_duration)
                    .await
                {
                    Ok(renewed) => self.session = Some(renewed),
                    Err(error) if error.is_not_owned() => {
                        tracing::warn!(worker = %self.config.worker_id, %error, "fleet: session lost; dropping every unit");
                        self.lose_all(LossCause::SessionLost, events);
                        self.session = None;
                    }
                    Err(error) => {
                        tracing::warn!(worker = %self.config.worker_id, %error, "fleet: session renewal failed; trusting it until its deadline");
                    }
                }
            }
        }
        if self.session.is_none() {
            let token = RandomTokens.next_token();
            let options = AcquireOptions::default()
                .with_owner(self.config.worker_id.clone())
                .with_token(token);
            self.stats.requests += 1;
            match self
                .store
                .try_acquire(
                    &self.config.session_key,
                    self.config.session_duration,
                    &options,
                )
                .await
            {
                Ok(lease) => {
                    tracing::info!(worker = %self.config.worker_id, fencing = %lease.fencing_token(), "fleet: session started");
                    self.session = Some(lease);
                    self.planned_members = None;
                }
                Err(error) if error.is_held() => {
                    tracing::debug!(worker = %self.config.worker_id, "fleet: an earlier session of this worker id is still live; waiting");
                    return Ok(false);
                }
                Err(error) => return Err(error.into()),
            }
        }
        Ok(self.session_trusted())
    }

    /// Takes in a sessions listing sent at `listed_at`.
    fn observe(&mut self, records: &[LeaseRecord], listed_at: Instant) {
        let now = self.clock().monotonic();
        let mut seen = BTreeMap::new();
        for record in records {
            let Some(worker) = record.key().sort() else {
                continue;
            };
            let fencing = record.fencing().get();
            let held = record.holder().is_some();
            let expires_at = record.holder().and_then(|h| h.expires_at());
            let since = match self.view.get(worker) {
                Some(old)
                    if old.fencing == fencing
                        && old.held == held
                        && old.expires_at == expires_at =>
                {
                    old.since
                }
                _ => now,
            };
            seen.insert(
                worker.to_owned(),
                Observed {
                    fencing,
                    held,
                    expires_at,
                    since,
                },
            );
        }
        self.view = seen;
        // Owners missing from this listing: the absence counts only from a listing sent after
        // the units listing that named them, which their session record preceded.
        let view = &self.view;
        self.absent.retain(|(worker, _), absence| {
            if view.contains_key(worker) {
                return false;
            }
            if absence.since.is_none() && listed_at >= absence.named_at {
                absence.since = Some(now);
            }
            true
        });
    }

    /// Whether session `fencing` of `worker`, named by a unit record read at `read_at`, has
    /// certainly ended.
    fn session_ended(&self, worker: &str, fencing: u64) -> bool {
        let Some(seen) = self.view.get(worker) else {
            // Not in the view: either a session newer than the view, or a record gone from the
            // store (deleted by an operator or a TTL) or dropped by listings. Ended once sessions
            // listings sent after a unit record naming it was read have missed it for a session
            // duration (tracked in `absent` by `plan_and_move` and `observe`).
            let now = self.clock().monotonic();
            return self
                .absent
                .get(&(worker.to_owned(), fencing))
                .and_then(|absence| absence.since)
                .is_some_and(|since| {
                    now.saturating_duration_since(since) >= self.config.session_duration
                });
        };
        if seen.fencing != fencing {
            // Fencing only grows: a greater one proves the session ended (released, or expired by
            // the store's judgement and acquired again); a smaller one means the view is stale.
            return seen.fencing > fencing;
        }
        !seen.held || self.observed_expired(seen)
    }

    fn observed_expired(&self, seen: &Observed) -> bool {
        let clock = self.clock();
        if clock.monotonic().saturating_duration_since(seen.since) >= self.config.session_duration {
            return true;
        }
        match (self.config.skew, seen.expires_at) {
            (Some(skew), Some(expires)) => expires + skew <= clock.now(),
            _ => false,
        }
    }

    /// The members this worker believes live, sorted by id, with their session fencing.
    fn live_members(&self) -> Vec<(String, u64)> {
        let me = &self.config.worker_id;
        let mut members: Vec<(String, u64)> = self
            .view
            .iter()
            .filter(|(worker, seen)| *worker != me && seen.held && !self.observed_expired(seen))
            .map(|(worker, seen)| (worker.clone(), seen.fencing))
            .collect();
        if let Some(session) = self.session.as_ref().filter(|_| self.session_trusted()) {
            members.push((me.clone(), session.fencing_token().get()));
            members.sort();
        }
        members
    }

    async fn keep_units(&mut self, events: &mut Vec<FleetEvent>) {
        let units: Vec<String> = self.owned.keys().cloned().collect();
        for unit in units {
            let Some(lease) = self.owned.get(&unit).cloned() else {
                continue;
            };
            if !lease.is_trusted(self.clock()) {
                self.lose_unit(&unit, LossCause::Expired, events);
                continue;
            }
            if lease.remaining(self.clock()) > self.config.unit_duration / 2 {
                continue;
            }
            self.stats.requests += 1;
            match self.store.renew(&lease, self.config.unit_duration).await {
                Ok(renewed) => {
                    self.owned.insert(unit, renewed);
                }
                Err(error) if error.is_not_owned() => {
                    self.lose_unit(&unit, LossCause::TakenOver, events);
                }
                Err(error) => {
                    tracing::warn!(worker = %self.config.worker_id, unit, %error, "fleet: unit renewal failed; retrying next tick");
                }
            }
        }
    }

    fn parse_holder(record: &LeaseRecord) -> Option<UnitHolder> {
        let holder = record.holder()?;
        let token = holder.token().cloned();
        // A fleet token is `<random>.<session fencing>.<worker id>`: the random part is a simple
        // UUID and worker ids contain no '.', so every token a worker writes parses.
        let owner = token.as_ref().and_then(|token| {
            let mut parts = token.as_str().splitn(3, '.');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(_), Some(fencing), Some(worker)) if !worker.is_empty() => fencing
                    .parse::<u64>()
                    .ok()
                    .map(|fencing| (worker.to_owned(), fencing)),
                _ => None,
            }
        });
        Some(UnitHolder {
            token,
            owner,
            fencing: record.fencing().get(),
            expires_at: holder.expires_at(),
        })
    }

    async fn list_units(&mut self) -> Result<BTreeMap<String, Option<UnitHolder>>, Error> {
        self.stats.requests += 1;
        self.stats.lists += 1;
        self.stats.unit_lists += 1;
        let records = self.store.list_partition(&self.config.units_key).await?;
        self.stats.records_read += records.len() as u64;
        Ok(records
            .iter()
            .filter_map(|r| Some((r.key().sort()?.to_owned(), Self::parse_holder(r))))
            .collect())
    }

    /// One round of the protocol. Call it every [`interval`](Self::interval).
    ///
    /// # Errors
    /// A store failure ([`Error::Lease`]) of a listing or of acquiring the session; the worker
    /// stays consistent and the next tick retries.
    pub async fn tick(&mut self) -> Result<TickReport, Error> {
        let mut report = TickReport::default();
        self.stats.ticks += 1;
        let outcome = self.tick_inner(&mut report).await;
        report.has_session = self.session_trusted();
        self.publish();
        outcome.map(|()| report)
    }

    async fn tick_inner(&mut self, report: &mut TickReport) -> Result<(), Error> {
        let events = &mut report.events;
        let fresh = self.session.is_none();
        if !self.keep_session(events).await? {
            return Ok(());
        }
        self.stats.requests += 1;
        self.stats.lists += 1;
        let listed_at = self.clock().monotonic();
        let sessions = self.store.list_partition(&self.config.sessions).await?;
        self.stats.records_read += sessions.len() as u64;
        self.observe(&sessions, listed_at);
        self.keep_units(events).await;
        if fresh {
            // Let workers that start together see each other before anyone deals units:
            // without this the first to start takes everything and hands most of it back.
            return Ok(());
        }

        let members = self.live_members();
        let changed = self.planned_members.as_ref() != Some(&members);
        let under = self.target.is_none_or(|t| self.owned.len() < t);
        let sweeper = members
            .first()
            .is_some_and(|(m, _)| *m == self.config.worker_id);
        let resync = sweeper && self.ticks_since_plan + 1 >= self.config.resync_every;
        if changed || under || resync || self.relist {
            report.planned = true;
            self.ticks_since_plan = 0;
            let records = self.list_units().await?;
            let read_at = self.clock().monotonic();
            self.plan_and_move(&members, &records, read_at, events)
                .await;
            self.planned_members = Some(members);
        } else {
            self.ticks_since_plan += 1;
            self.give_surplus(events).await;
        }
        Ok(())
    }

    async fn plan_and_move(
        &mut self,
        members: &[(String, u64)],
        records: &BTreeMap<String, Option<UnitHolder>>,
        read_at: Instant,
        events: &mut Vec<FleetEvent>,
    ) {
        let me = self.config.worker_id.clone();
        let live: BTreeMap<&str, u64> = members.iter().map(|(m, f)| (m.as_str(), *f)).collect();
        let now = self.clock().monotonic();
        let session_duration = self.config.session_duration;
        let mut holdings = BTreeMap::new();
        let mut dead: BTreeMap<String, (LeaseToken, FencingToken)> = BTreeMap::new();
        let mut stale = Vec::new();
        let mut named = std::collections::BTreeSet::new();
        let mut foreign = BTreeMap::new();
        for unit in &self.config.units {
            let holder = records.get(unit).and_then(Option::as_ref);
            let mine = self.owned.get(unit).map(Lease::token);
            let holding = match holder {
                None => Holding::Free,
                // A holder the store does not name: it cannot be released conditionally.
                Some(UnitHolder { token: None, .. }) => Holding::Pinned,
                Some(
                    h @ UnitHolder {
                        token: Some(token), ..
                    },
                ) => match &h.owner {
                    // Ours and tracked: ours.
                    Some((worker, _)) if *worker == me && mine == Some(token) => {
                        Holding::Member(me.clone())
                    }
                    // Ours by label but untracked (an earlier session, a lost reply): dead, since
                    // this worker does not trust it.
                    Some((worker, _)) if *worker == me => {
                        dead.insert(unit.clone(), (token.clone(), FencingToken::new(h.fencing)));
                        Holding::Free
                    }
                    Some((worker, fencing)) => {
                        if live.get(worker.as_str()) == Some(fencing) {
                            Holding::Member(worker.clone())
                        } else if self.session_ended(worker, *fencing) {
                            dead.insert(
                                unit.clone(),
                                (token.clone(), FencingToken::new(h.fencing)),
                            );
                            Holding::Free
                        } else {
                            named.insert((worker.clone(), *fencing));
                            Holding::Pinned
                        }
                    }
                    // Not a fleet token: no worker trusts this record. Taken once it has stayed
                    // unchanged for a session duration (see the crate docs).
                    None => {
                        let seen = match self.foreign.remove(unit) {
                            Some(old)
                                if old.token == *token
                                    && old.fencing == h.fencing
                                    && old.expires_at == h.expires_at =>
                            {
                                old
                            }
                            _ => Foreign {
                                token: token.clone(),
                                fencing: h.fencing,
                                expires_at: h.expires_at,
                                since: read_at,
                            },
                        };
                        let unchanged_for = now.saturating_duration_since(seen.since);
                        let holding = if unchanged_for >= session_duration {
                            dead.insert(
                                unit.clone(),
                                (token.clone(), FencingToken::new(h.fencing)),
                            );
                            Holding::Free
                        } else {
                            Holding::Pinned
                        };
                        foreign.insert(unit.clone(), seen);
                        holding
                    }
                },
            };
            if mine.is_some() && !matches!(&holding, Holding::Member(m) if *m == me) {
                // The store no longer names this acquisition.
                stale.push(unit.clone());
            }
            holdings.insert(unit.clone(), holding);
        }
        // Forget what this listing no longer shows.
        self.foreign = foreign;
        self.absent.retain(|owner, _| named.contains(owner));
        for (worker, fencing) in named {
            if !self.view.contains_key(&worker) {
                self.absent.entry((worker, fencing)).or_insert(Absence {
                    named_at: read_at,
                    since: None,
                });
            }
        }
        self.relist = holdings.values().any(|h| *h == Holding::Free);
        for unit in stale {
            self.lose_unit(&unit, LossCause::TakenOver, events);
        }
        let names: Vec<String> = members.iter().map(|(m, _)| m.clone()).collect();
        let mut plans = plan(&self.config.units, &names, &holdings);
        let Some(mine) = plans.remove(&me) else {
            return;
        };
        self.target = Some(mine.target);
        tracing::debug!(worker = %me, target = mine.target, give = mine.give.len(), take = mine.take.len(), members = names.len(), "fleet: planned");
        self.give_surplus(events).await;
        let mut moves = 0;
        for unit in mine.take {
            if moves >= self.config.max_moves || !self.session_trusted() {
                break;
            }
            if holdings.get(&unit) != Some(&Holding::Free) {
                // Still held by a live giver: taken on a later tick, once released.
                continue;
            }
            moves += 1;
            self.take(&unit, dead.get(&unit), events).await;
        }
    }

    async fn take(
        &mut self,
        unit: &str,
        dead: Option<&(LeaseToken, FencingToken)>,
        events: &mut Vec<FleetEvent>,
    ) {
        let Ok(key) = LeaseKey::with_sort_key(self.config.units_key.as_str(), unit) else {
            return;
        };
        let Some(session) = self.session.as_ref() else {
            return;
        };
        if let Some((token, fencing)) = dead {
            // Conditional on the dead owner's tenure: of two takers, only one release succeeds,
            // and the acquire below is conditional on the key being free.
            self.stats.requests += 1;
            match self.store.release(&key, token, *fencing).await {
                Ok(()) => {
                    tracing::info!(worker = %self.config.worker_id, unit, dead = %token, "fleet: released a dead owner's unit");
                }
                Err(error) => {
                    tracing::debug!(worker = %self.config.worker_id, unit, %error, "fleet: dead owner's unit already changed");
                }
            }
        }
        let token = format!(
            "{}.{}.{}",
            RandomTokens.next_token().as_str(),
            session.fencing_token().get(),
            self.config.worker_id
        );
        let Ok(token) = LeaseToken::new(token) else {
            return;
        };
        let options = AcquireOptions::default()
            .with_owner(format!(
                "{} session {}",
                self.config.worker_id,
                session.fencing_token()
            ))
            .with_token(token);
        self.stats.requests += 1;
        match self
            .store
            .try_acquire(&key, self.config.unit_duration, &options)
            .await
        {
            Ok(lease) => {
                let fencing = lease.fencing_token();
                self.owned.insert(unit.to_owned(), lease);
                let checkpoint = match self.checkpoints.clone() {
                    Some(store) => {
                        self.stats.checkpoint_requests += 1;
                        match store.load(unit, fencing).await {
                            Ok(data) => data,
                            Err(error) => {
                                tracing::warn!(worker = %self.config.worker_id, unit, %error, "fleet: checkpoint load failed");
                                None
                            }
                        }
                    }
                    None => None,
                };
                self.emit(
                    FleetEvent::Gained {
                        unit: unit.to_owned(),
                        fencing,
                        checkpoint,
                    },
                    events,
                );
            }
            Err(error) if error.is_held() => {
                tracing::debug!(worker = %self.config.worker_id, unit, "fleet: unit taken by someone else first");
            }
            Err(error) => {
                tracing::warn!(worker = %self.config.worker_id, unit, %error, "fleet: acquiring a unit failed");
            }
        }
    }

    /// Releases units above the target, highest ids first, at most `max_moves`.
    async fn give_surplus(&mut self, events: &mut Vec<FleetEvent>) {
        let Some(target) = self.target else {
            return;
        };
        let surplus = self
            .owned
            .len()
            .saturating_sub(target)
            .min(self.config.max_moves);
        let give: Vec<String> = self.owned.keys().rev().take(surplus).cloned().collect();
        for unit in give {
            if let Some(lease) = self.lose_unit(&unit, LossCause::HandedOver, events) {
                self.stats.requests += 1;
                if let Err(error) = self
                    .store
                    .release(lease.key(), lease.token(), lease.fencing_token())
                    .await
                {
                    tracing::warn!(worker = %self.config.worker_id, unit, %error, "fleet: release of a handed-over unit failed");
                }
            }
        }
    }

    fn publish(&self) {
        let snapshot = self.assignment();
        *self
            .shared
            .snapshot
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = snapshot;
    }

    /// Hands every unit over and ends the session, so the others take over on their next tick
    /// instead of waiting for an expiry. Each unit is reported lost ([`LossCause::Shutdown`])
    /// before it is released.
    ///
    /// # Errors
    /// Only failures to release the session are returned; unit releases are best effort.
    pub async fn shutdown(&mut self) -> Result<(), Error> {
        let mut events = Vec::new();
        for lease in self.lose_all(LossCause::Shutdown, &mut events) {
            self.stats.requests += 1;
            if let Err(error) = self
                .store
                .release(lease.key(), lease.token(), lease.fencing_token())
                .await
            {
                tracing::warn!(worker = %self.config.worker_id, key = %lease.key(), %error, "fleet: release at shutdown failed");
            }
        }
        let outcome = match self.session.take() {
            Some(session) => {
                self.stats.requests += 1;
                tracing::info!(worker = %self.config.worker_id, "fleet: session ended");
                self.store
                    .release(session.key(), session.token(), session.fencing_token())
                    .await
            }
            None => Ok(()),
        };
        self.target = None;
        self.planned_members = None;
        self.publish();
        match outcome {
            Ok(()) => Ok(()),
            Err(error) if error.is_not_owned() => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Ticks every interval on the store's clock until [`WorkerHandle::stop`], then shuts down
    /// cleanly. Tick errors are logged and retried on the next tick. Runs on any executor (for
    /// the memory and file backends, [`lease_core::block_on`] on a thread is enough).
    ///
    /// # Errors
    /// A failure to release the session at shutdown.
    pub async fn run(mut self) -> Result<WorkerStats, Error> {
        loop {
            if self.shared.stop.load(Ordering::Acquire) {
                break;
            }
            let started = self.clock().monotonic();
            if let Err(error) = self.tick().await {
                tracing::warn!(worker = %self.config.worker_id, %error, "fleet: tick failed");
            }
            let next = started + self.config.interval;
            StopOrSleep {
                shared: &self.shared,
                sleep: sleep_until(self.clock(), next),
            }
            .await;
        }
        self.shutdown().await?;
        Ok(self.stats)
    }

    /// Runs [`Worker::run`] on a new thread with [`lease_core::block_on`]: for backends that need
    /// no async runtime (memory, files).
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn spawn_thread(
        self,
    ) -> Result<
        (
            WorkerHandle,
            std::thread::JoinHandle<Result<WorkerStats, Error>>,
        ),
        Error,
    > {
        let handle = self.handle();
        let name = format!("fleet-{}", self.config.worker_id);
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || lease_core::block_on(self.run()))
            .map_err(|e| Error::invalid("thread", e.to_string()))?;
        Ok((handle, thread))
    }
}

/// Completes when the sleep ends or a stop is requested.
struct StopOrSleep<'a> {
    shared: &'a Shared,
    sleep: BoxFuture<'static, ()>,
}

impl Future for StopOrSleep<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        *self
            .shared
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
        if self.shared.stop.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        self.sleep.as_mut().poll(cx)
    }
}

//! A deterministic simulator of fleets: lessor-partition's protocol on a [`MemoryBackend`] with a
//! [`ManualClock`], and a model of KCL 2.x, driven through the same [`FleetModel`] interface.
//!
//! Time moves only from event to event (a worker's tick, the end of a pause), and every random
//! choice (tick phases, KCL's lease picks) comes from a seeded [`Rng`], so a run is reproducible
//! from its seed. After every tick, [`Simulation`] checks that no unit has two owners who both
//! trust their ownership at that instant (paused workers included: a paused process still
//! believes what it believed); violations are recorded, never panicked on.
//!
//! Test machinery, never published (`publish = false`): the workspace's tests and the `fleet` and
//! `chaos` benchmarks drive it through lessor-partition's public API only; not API-stable.
//!
//! Here a tick is atomic and store calls take no time, so races that need a slow request or a
//! pause in the middle of a tick cannot happen; [`latency`] simulates those.
//!
//! ```
//! use lessor_sim::{FleetModel, SimConfig, Simulation};
//! use std::time::Duration;
//!
//! let mut sim = Simulation::new(SimConfig::new(64, 1));
//! for _ in 0..4 {
//!     sim.join();
//! }
//! let took = sim.run_until_balanced(Duration::from_secs(60));
//! assert!(took.is_some());
//! assert!(sim.violations().is_empty());
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod kcl;
pub mod latency;
mod rng;
pub mod scale;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencedValues, FencingToken, Lease, LeaseBackend, LeaseError,
    LeaseKey, LeaseListing, LeaseRecord, LeaseToken, ManualClock, MemoryBackend,
};

use lessor_partition::{FleetEvent, Worker, WorkerHandle, WorkerStats};

pub use kcl::{KclConfig, KclSimulation};
pub use rng::Rng;

/// How long a foreign hold ([`Simulation::hold_unit_with_token`]) lasts between renewals.
const FOREIGN_HOLD: Duration = Duration::from_secs(24 * 3600);

/// Request and churn counters of a simulated fleet, summed over its workers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Counters {
    /// Requests sent to the lease store.
    pub requests: u64,
    /// Records returned by listings or scans.
    pub records_read: u64,
    /// Units that changed owner (gains).
    pub moves: u64,
    /// Worker ticks run (all kinds of timer for KCL).
    pub ticks: u64,
    /// Listings of the whole unit set: this protocol's units-partition listings
    /// ([`WorkerStats::unit_lists`]), KCL's taker scans of the lease table.
    pub unit_lists: u64,
}

impl Counters {
    /// The difference `self - earlier`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            requests: self.requests - earlier.requests,
            records_read: self.records_read - earlier.records_read,
            moves: self.moves - earlier.moves,
            ticks: self.ticks - earlier.ticks,
            unit_lists: self.unit_lists - earlier.unit_lists,
        }
    }
}

/// What the benchmark and tests drive: a fleet of simulated workers on a simulated clock.
pub trait FleetModel {
    /// Adds a worker; returns its index.
    fn join(&mut self) -> usize;
    /// Stops worker `index` without any goodbye (it never runs again).
    fn crash(&mut self, index: usize);
    /// Stops worker `index` cleanly (its protocol's shutdown).
    fn shutdown(&mut self, index: usize);
    /// Runs the fleet for `duration` of simulated time.
    fn run_for(&mut self, duration: Duration);
    /// Simulated time since the start.
    fn now(&self) -> Duration;
    /// Every unit has exactly one running owner, and every running worker holds floor or ceil of
    /// `units / running workers`.
    fn is_balanced(&self) -> bool;
    /// Every unit has a running owner.
    fn all_owned(&self) -> bool;
    /// Counters so far.
    fn counters(&self) -> Counters;
    /// The protocol's tick interval (KCL: its renewal interval).
    fn interval(&self) -> Duration;
    /// Workers that are running (not crashed, stopped or paused).
    fn running(&self) -> Vec<usize>;
    /// Runs one event; `false` if nothing is scheduled.
    fn step(&mut self) -> bool;

    /// Runs until `done` holds (checked after every event), for at most `limit`. Returns how
    /// long it took.
    fn run_until(
        &mut self,
        limit: Duration,
        done: &mut dyn FnMut(&Self) -> bool,
    ) -> Option<Duration>
    where
        Self: Sized,
    {
        let start = self.now();
        loop {
            if done(self) {
                return Some(self.now() - start);
            }
            if self.now() - start >= limit || !self.step() {
                return None;
            }
        }
    }

    /// Runs until [`is_balanced`](Self::is_balanced), for at most `limit`.
    fn run_until_balanced(&mut self, limit: Duration) -> Option<Duration>
    where
        Self: Sized,
    {
        self.run_until(limit, &mut |m| m.is_balanced())
    }

    /// Runs until [`all_owned`](Self::all_owned), for at most `limit`.
    fn run_until_all_owned(&mut self, limit: Duration) -> Option<Duration>
    where
        Self: Sized,
    {
        self.run_until(limit, &mut |m| m.all_owned())
    }
}

/// Settings of a [`Simulation`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SimConfig {
    /// How many units the fleet divides.
    pub units: usize,
    /// The session lease duration.
    pub session_duration: Duration,
    /// The tick interval.
    pub interval: Duration,
    /// The per-tick move bound.
    pub max_moves: usize,
    /// A wall-clock skew bound for judging sessions dead, if any.
    pub skew_bound: Option<Duration>,
    /// The seed of every random choice.
    pub seed: u64,
    /// Whether the workers keep per-unit checkpoints in the store
    /// ([`WorkerBuilder::with_checkpoints`](lessor_partition::WorkerBuilder::with_checkpoints)).
    pub checkpoints: bool,
    /// Whether the workers elect an assigner (the default, as for a worker).
    pub assigner: bool,
    /// Whether safety is checked after every worker's tick (else only by
    /// [`Simulation::check_now`]): the scale table's big cells turn it off.
    pub check_every_step: bool,
}

impl SimConfig {
    /// `units` units with the worker's defaults (10 s sessions, 2.5 s interval, 256 moves).
    pub fn new(units: usize, seed: u64) -> Self {
        Self {
            units,
            session_duration: Duration::from_secs(10),
            interval: Duration::from_millis(2500),
            max_moves: 256,
            skew_bound: None,
            seed,
            checkpoints: false,
            assigner: true,
            check_every_step: true,
        }
    }

    /// With per-unit checkpoints in the store: the simulation then records every worker's
    /// events ([`Simulation::take_events`]), and [`Simulation::save_checkpoints`] saves them.
    pub fn with_checkpoints(mut self) -> Self {
        self.checkpoints = true;
        self
    }

    /// With a skew bound (see [`WorkerBuilder::with_clock_skew_bound`](lessor_partition::WorkerBuilder::with_clock_skew_bound)).
    pub fn with_skew_bound(mut self, skew: Duration) -> Self {
        self.skew_bound = Some(skew);
        self
    }

    /// With a different move bound.
    pub fn with_max_moves(mut self, moves: usize) -> Self {
        self.max_moves = moves;
        self
    }
}

/// The simulated store: a [`MemoryBackend`] whose listings and `inspect` can be made to miss
/// chosen records, as when a record is deleted behind the protocol's back (an operator, a TTL) or
/// a listing drops a record it reads mid-rewrite, and whose whole contents can be lost at once
/// ([`Simulation::wipe_store`]: a table deleted and re-created, an emulator restarted). The
/// contract has no delete, so this is how the simulator models one.
#[derive(Clone, Debug)]
struct SimStore {
    clock: Arc<ManualClock>,
    inner: Arc<Mutex<MemoryBackend>>,
    hidden: Arc<Mutex<BTreeSet<(String, String)>>>,
    /// Every request the workers send, with the records and bytes it reads or writes.
    tally: Arc<scale::Tally>,
}

impl SimStore {
    fn new(clock: Arc<ManualClock>) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Self::empty(&clock))),
            clock,
            hidden: Arc::default(),
            tally: Arc::default(),
        }
    }

    fn empty(clock: &Arc<ManualClock>) -> MemoryBackend {
        MemoryBackend::builder().with_clock(clock.clone()).build()
    }

    /// The store's current contents (a handle: clones share them).
    fn inner(&self) -> MemoryBackend {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Loses every record and fenced value at once.
    fn wipe(&self) {
        *self.inner.lock().unwrap_or_else(PoisonError::into_inner) = Self::empty(&self.clock);
    }

    fn is_hidden(&self, key: &LeaseKey) -> bool {
        let Some(sort) = key.sort() else {
            return false;
        };
        self.hidden
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&(key.partition().to_owned(), sort.to_owned()))
    }
}

impl LeaseBackend for SimStore {
    fn name(&self) -> &'static str {
        self.inner().name()
    }
    fn clock(&self) -> &dyn Clock {
        &*self.clock
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
        self.tally
            .write(key, options.token().map(LeaseToken::as_str));
        let inner = self.inner();
        Box::pin(async move { inner.try_acquire(key, duration, options).await })
    }
    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        self.tally.write(lease.key(), Some(lease.token().as_str()));
        let inner = self.inner();
        Box::pin(async move { inner.renew(lease, duration).await })
    }
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.tally.write(key, Some(token.as_str()));
        let inner = self.inner();
        Box::pin(async move { inner.release(key, token, fencing).await })
    }
    fn delete<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: Option<&'a LeaseToken>,
        fencing: Option<FencingToken>,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.tally.write(key, holder.map(LeaseToken::as_str));
        let inner = self.inner();
        Box::pin(async move { inner.delete(key, holder, fencing).await })
    }
    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        if self.is_hidden(key) {
            self.tally.read(&[]);
            return Box::pin(std::future::ready(Ok(None)));
        }
        let inner = self.inner();
        Box::pin(async move {
            let record = inner.inspect(key).await?;
            self.tally.read(record.as_slice());
            Ok(record)
        })
    }
}

impl LeaseListing for SimStore {
    fn list_partition<'a>(
        &'a self,
        partition: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseRecord>, LeaseError>> {
        let inner = self.inner();
        Box::pin(async move {
            let mut records = inner.list_partition(partition).await?;
            records.retain(|r| !self.is_hidden(r.key()));
            self.tally.read(&records);
            Ok(records)
        })
    }
}

impl FencedValues for SimStore {
    fn fence_and_read<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, LeaseError>> {
        let inner = self.inner();
        Box::pin(async move {
            let value = inner.fence_and_read(name, fencing).await?;
            self.tally.read_value(name, value.as_ref().map(Vec::len));
            Ok(value)
        })
    }

    fn put_fenced<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
        value: &'a [u8],
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.tally.write_value(name, value.len());
        let inner = self.inner();
        Box::pin(async move { inner.put_fenced(name, fencing, value).await })
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Status {
    Running,
    Paused { until: Duration },
    Crashed,
    Stopped,
}

#[derive(Debug)]
struct SimWorker {
    worker: Worker,
    /// What the application would ask the worker: what it owns, its counters, its saves.
    handle: WorkerHandle,
    id: String,
    status: Status,
    next_tick: Duration,
    /// Stats of the worker at the moment it stopped counting toward a live fleet.
    final_stats: Option<WorkerStats>,
}

/// This crate's fleet protocol, simulated: real [`Worker`]s on one [`MemoryBackend`] and one
/// [`ManualClock`].
#[derive(Debug)]
pub struct Simulation {
    config: SimConfig,
    clock: Arc<ManualClock>,
    store: SimStore,
    rng: Rng,
    units: Vec<String>,
    workers: Vec<SimWorker>,
    /// Due events (when, worker), earliest first; an entry whose worker is no longer due then
    /// (it ticked, paused, crashed or stopped) is stale and dropped when it reaches the top.
    queue: BinaryHeap<Reverse<(Duration, usize)>>,
    /// Units held by [`Simulation::hold_unit_with_token`], with the lease that holds them.
    foreign: BTreeMap<String, Lease>,
    violations: Vec<String>,
    errors: u64,
    /// Counters of workers replaced by [`Simulation::restart`].
    retired_stats: Vec<WorkerStats>,
    /// The events every worker reported, with its id, when checkpoints are on.
    events: Vec<(String, FleetEvent)>,
}

impl Simulation {
    /// An empty fleet.
    pub fn new(config: SimConfig) -> Self {
        let clock = Arc::new(ManualClock::new());
        let store = SimStore::new(clock.clone());
        let width = config.units.to_string().len();
        let units = (0..config.units).map(|i| format!("u{i:0width$}")).collect();
        Self {
            rng: Rng::new(config.seed),
            config,
            clock,
            store,
            units,
            workers: Vec::new(),
            queue: BinaryHeap::new(),
            foreign: BTreeMap::new(),
            violations: Vec::new(),
            errors: 0,
            retired_stats: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Safety violations seen so far: a unit trusted by two workers at one instant.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// What the workers' requests have read and written so far ([`scale::Tally`]).
    pub fn tally(&self) -> scale::TallyCounts {
        self.store.tally.counts()
    }

    /// Checks safety now (as after every tick unless [`SimConfig::check_every_step`] is off).
    pub fn check_now(&mut self) {
        self.check_safety();
    }

    /// Tick errors seen so far (none are expected on the memory backend).
    pub fn errors(&self) -> u64 {
        self.errors
    }

    /// Pauses worker `index` for `duration` (a GC pause, SIGSTOP): it does not tick, but still
    /// believes what it believed.
    pub fn pause(&mut self, index: usize, duration: Duration) {
        let until = self.now() + duration;
        if let Some(w) = self.workers.get_mut(index)
            && w.status == Status::Running
        {
            w.status = Status::Paused { until };
        }
        self.schedule(index);
    }

    /// Loses the store's whole contents at once (sessions, units, checkpoints and their
    /// fences), as when a table is deleted and re-created or an emulator restarts. The workers
    /// are not told: they find out from the store.
    pub fn wipe_store(&mut self) {
        self.store.wipe();
    }

    /// Acquires and releases the record of every unit that nobody holds `count` times, so its
    /// fencing counter stands `count` higher (a fleet that has run for a while: every change of
    /// owner raises it by one). Requests made here are not counted. Returns how many units were
    /// raised.
    pub fn raise_unit_fencing(&mut self, count: u64) -> usize {
        let store = self.store.inner();
        let mut raised = 0;
        for unit in &self.units {
            let Ok(key) = LeaseKey::with_sort_key("fleet/sim/units", unit.as_str()) else {
                continue;
            };
            let mut all = true;
            for _ in 0..count {
                let options = AcquireOptions::default().with_owner("raise");
                let Ok(lease) = pollster::block_on(store.try_acquire(&key, FOREIGN_HOLD, &options))
                else {
                    all = false;
                    break;
                };
                if pollster::block_on(store.release(&key, lease.token(), lease.fencing_token()))
                    .is_err()
                {
                    all = false;
                    break;
                }
            }
            raised += usize::from(all);
        }
        raised
    }

    /// The events the workers reported since the last call, each with the worker's id (recorded
    /// only with [`SimConfig::with_checkpoints`]).
    pub fn take_events(&mut self) -> Vec<(String, FleetEvent)> {
        std::mem::take(&mut self.events)
    }

    /// Has every running or paused worker save `data(unit, fencing)` as the checkpoint of every
    /// unit it trusts now, as an application saves its progress; a paused one saves what it
    /// still believes it owns. Returns how many saves the store accepted. Requests made here are
    /// the application's, counted in the workers' checkpoint requests.
    pub fn save_checkpoints(&mut self, data: &dyn Fn(&str, FencingToken) -> Vec<u8>) -> usize {
        let mut saved = 0;
        for w in &mut self.workers {
            if !matches!(w.status, Status::Running | Status::Paused { .. }) {
                continue;
            }
            for (unit, fencing) in w.handle.owned_units() {
                let bytes = data(&unit, fencing);
                let save = w.handle.save_checkpoint(&unit, &bytes);
                saved += usize::from(pollster::block_on(save).is_ok());
            }
        }
        saved
    }

    /// Starts worker `index` again after a crash or a stop: a new process under the same worker
    /// id, which knows nothing of its predecessor (it waits for the old session to expire in the
    /// store, then starts a new one with a greater fencing token). Does nothing to a worker that
    /// is running or paused. Its counters start again; the old ones are kept in the totals.
    pub fn restart(&mut self, index: usize) {
        let Some(old) = self.workers.get(index) else {
            return;
        };
        if matches!(old.status, Status::Running | Status::Paused { .. }) {
            return;
        }
        let earlier = old.final_stats.unwrap_or_else(|| old.handle.stats());
        match self.build_worker(index) {
            Ok(worker) => {
                self.retired_stats.push(earlier);
                self.workers[index] = worker;
                self.schedule(index);
            }
            Err(error) => {
                self.violations
                    .push(format!("cannot build a worker: {error}"));
            }
        }
    }

    /// A new running worker named after `index`, ticking first at a seeded phase.
    fn build_worker(&mut self, index: usize) -> Result<SimWorker, LeaseError> {
        let id = format!("w{index:03}");
        let mut builder = Worker::builder("sim", id.clone())
            .with_store(Arc::new(self.store.clone()))
            .with_units(self.units.iter().cloned())
            .with_session_duration(self.config.session_duration)
            .with_interval(self.config.interval)
            .with_max_moves_per_interval(self.config.max_moves);
        if let Some(skew) = self.config.skew_bound {
            builder = builder.with_clock_skew_bound(skew);
        }
        if self.config.checkpoints {
            builder = builder.with_checkpoints();
        }
        if !self.config.assigner {
            builder = builder.without_assigner();
        }
        let phase = Duration::from_micros(
            self.rng
                .below(u64::try_from(self.config.interval.as_micros()).unwrap_or(1)),
        );
        let worker = builder.build()?;
        Ok(SimWorker {
            handle: worker.handle(),
            id,
            worker,
            status: Status::Running,
            next_tick: self.now() + phase,
            final_stats: None,
        })
    }

    /// Makes worker `index`'s session record vanish from every listing and `inspect`, as if it
    /// had been deleted (by an operator, a TTL) or a listing kept dropping it. Only sound for a
    /// worker that no longer renews (crashed or stopped): a listing that hides a record its
    /// owner keeps renewing defeats any protocol that judges liveness from listings.
    pub fn hide_session(&mut self, index: usize) {
        self.store
            .hidden
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(("fleet/sim/sessions".to_owned(), format!("w{index:03}")));
    }

    /// Makes `unit` held, for a day, under `token`, which need not be a fleet token (a corrupt
    /// record, an older version, a foreign tool). A holder that no running worker trusts is
    /// released first with its own token, as a dead owner's unit would be. Returns whether the
    /// unit is now held under `token`. [`renew_foreign_holds`](Self::renew_foreign_holds) keeps
    /// such holds renewing.
    pub fn hold_unit_with_token(&mut self, unit: &str, token: &str) -> bool {
        let Ok(key) = LeaseKey::with_sort_key("fleet/sim/units", unit) else {
            return false;
        };
        let Ok(token) = LeaseToken::new(token) else {
            return false;
        };
        let trusted = self
            .workers
            .iter()
            .filter(|w| matches!(w.status, Status::Running | Status::Paused { .. }))
            .any(|w| w.handle.owns(unit).is_some());
        if trusted {
            return false;
        }
        let store = &self.store.inner();
        if let Ok(Some(record)) = pollster::block_on(store.inspect(&key))
            && let Some(old) = record.holder().and_then(|h| h.token())
            && let Some(fencing) = record.fencing_token()
        {
            let _ = pollster::block_on(store.release(&key, old, fencing));
        }
        let options = AcquireOptions::default()
            .with_owner("foreign")
            .with_token(token);
        match pollster::block_on(store.try_acquire(&key, FOREIGN_HOLD, &options)) {
            Ok(lease) => {
                self.foreign.insert(unit.to_owned(), lease);
                true
            }
            Err(_) => false,
        }
    }

    /// Renews, for another day, every hold made by
    /// [`hold_unit_with_token`](Self::hold_unit_with_token) that the store still shows: a foreign
    /// holder that is alive. Each renewal changes the record's expiry, so workers keep leaving
    /// the unit alone (see the crate docs); call it more often than a session duration. Requests
    /// made here are not counted. Returns how many holds were renewed; a hold that is gone is
    /// forgotten.
    pub fn renew_foreign_holds(&mut self) -> usize {
        let store = &self.store.inner();
        self.foreign.retain(|_, lease| {
            match pollster::block_on(store.renew(lease, FOREIGN_HOLD)) {
                Ok(renewed) => {
                    *lease = renewed;
                    true
                }
                Err(_) => false,
            }
        });
        self.foreign.len()
    }

    /// The targets of the running workers from their last plans (`None` for one that has not
    /// planned since it started or since its membership view changed).
    pub fn targets(&self) -> Vec<Option<usize>> {
        self.workers
            .iter()
            .filter(|w| w.status == Status::Running)
            .map(|w| w.handle.snapshot().target)
            .collect()
    }

    /// Whether every running worker sees the same live members, and those are exactly the
    /// running workers.
    pub fn membership_settled(&self) -> bool {
        let running: Vec<String> = self
            .workers
            .iter()
            .filter(|w| w.status == Status::Running)
            .map(|w| w.id.clone())
            .collect();
        !running.is_empty()
            && self
                .workers
                .iter()
                .filter(|w| w.status == Status::Running)
                .all(|w| w.handle.snapshot().members == running)
    }

    /// The number of units.
    pub fn units(&self) -> usize {
        self.config.units
    }

    /// Units no running worker trusts now, each with the store's record of it: for diagnosis.
    pub fn unowned_units(&self) -> Vec<String> {
        let mut owned = std::collections::BTreeSet::new();
        for w in self.workers.iter().filter(|w| w.status == Status::Running) {
            owned.extend(w.handle.owned_units().into_keys());
        }
        let records =
            pollster::block_on(self.store.list_partition("fleet/sim/units")).unwrap_or_default();
        self.units
            .iter()
            .filter(|u| !owned.contains(*u))
            .map(|u| {
                let record = records.iter().find(|r| r.key().sort() == Some(u.as_str()));
                format!(
                    "{u}: {:?}",
                    record.map(|r| r.holder().map(ToString::to_string))
                )
            })
            .collect()
    }

    /// The view of worker `index`.
    pub fn assignment(&self, index: usize) -> Option<lessor_partition::Assignment> {
        self.workers.get(index).map(|w| w.handle.snapshot())
    }

    /// The request and event counters of worker `index` (of its latest process).
    pub fn worker_stats(&self, index: usize) -> Option<WorkerStats> {
        self.workers.get(index).map(|w| w.handle.stats())
    }

    /// The worker whose process holds the assigner lease (see [`SimConfig::assigner`]), as the
    /// store shows it now.
    pub fn assigner(&self) -> Option<usize> {
        let key = LeaseKey::with_sort_key("fleet/sim/assigner", "lease").ok()?;
        let record = pollster::block_on(self.store.inner().inspect(&key)).ok()??;
        let holder = record.holder()?;
        if holder.expires_at().is_some_and(|at| at <= self.clock.now()) {
            return None;
        }
        let owner = holder.owner()?;
        self.workers.iter().position(|w| w.id == owner)
    }

    /// How many units worker `index` trusts now.
    pub fn owned_by(&self, index: usize) -> usize {
        self.workers
            .get(index)
            .map_or(0, |w| w.handle.owned_units().len())
    }

    fn check_safety(&mut self) {
        let trusted = self.trusted();
        let violations = self.double_trust(&trusted);
        self.violations.extend(violations);
    }

    /// Checks safety now, as [`check_now`](Self::check_now), and says whether every unit has a
    /// running owner, as [`all_owned`](FleetModel::all_owned): one look at each worker's units
    /// for both (each look copies a worker's unit set, so the scale table's big cells would
    /// spend much of their time in two).
    pub fn check_now_and_owned(&mut self) -> bool {
        let trusted = self.trusted();
        let violations = self.double_trust(&trusted);
        let owned = if violations.is_empty() {
            // No unit has two trusting owners, so the running workers' sets are disjoint.
            trusted
                .iter()
                .filter(|(_, running, _)| *running)
                .map(|(_, _, units)| units.len())
                .sum::<usize>()
                == self.config.units
        } else {
            distinct_owned(&trusted) == self.config.units
        };
        self.violations.extend(violations);
        owned
    }

    /// The units every running or paused worker trusts now: (worker index, running, units).
    fn trusted(&self) -> Vec<(usize, bool, BTreeMap<String, FencingToken>)> {
        self.workers
            .iter()
            .enumerate()
            .filter(|(_, w)| matches!(w.status, Status::Running | Status::Paused { .. }))
            .map(|(i, w)| (i, w.status == Status::Running, w.handle.owned_units()))
            .collect()
    }

    /// A violation for every unit two of `trusted` trust, in unit order, naming the workers in
    /// index order.
    fn double_trust(
        &self,
        trusted: &[(usize, bool, BTreeMap<String, FencingToken>)],
    ) -> Vec<String> {
        let (_, twice) = merge_units(trusted.iter().map(|(_, _, units)| units));
        let now = self.now();
        twice
            .into_iter()
            .map(|unit| {
                let who: Vec<&str> = trusted
                    .iter()
                    .filter(|(_, _, units)| units.contains_key(unit))
                    .map(|(i, _, _)| self.workers[*i].id.as_str())
                    .collect();
                format!("at {now:?}: unit {unit} trusted by {who:?}")
            })
            .collect()
    }

    fn counts(&self) -> Vec<usize> {
        self.workers
            .iter()
            .filter(|w| w.status == Status::Running)
            .map(|w| w.handle.owned_units().len())
            .collect()
    }
}

impl FleetModel for Simulation {
    fn join(&mut self) -> usize {
        let index = self.workers.len();
        match self.build_worker(index) {
            Ok(worker) => {
                self.workers.push(worker);
                self.schedule(index);
            }
            Err(error) => {
                self.violations
                    .push(format!("cannot build a worker: {error}"));
            }
        }
        index
    }

    fn crash(&mut self, index: usize) {
        if let Some(w) = self.workers.get_mut(index) {
            w.status = Status::Crashed;
            w.final_stats = Some(w.handle.stats());
        }
        self.schedule(index);
    }

    fn shutdown(&mut self, index: usize) {
        if let Some(w) = self.workers.get_mut(index)
            && matches!(w.status, Status::Running | Status::Paused { .. })
        {
            if pollster::block_on(w.worker.shutdown()).is_err() {
                self.errors += 1;
            }
            w.status = Status::Stopped;
            w.final_stats = Some(w.handle.stats());
        }
        self.schedule(index);
    }

    fn run_for(&mut self, duration: Duration) {
        let end = self.now() + duration;
        loop {
            let next = self.next_event();
            match next {
                Some((_, at)) if at <= end => {
                    self.step();
                }
                _ => break,
            }
        }
        let now = self.now();
        if end > now {
            self.clock.advance(end - now);
        }
    }

    fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    fn is_balanced(&self) -> bool {
        let counts = self.counts();
        if counts.is_empty() || !self.all_owned() {
            return false;
        }
        let (lo, hi) = (
            self.config.units / counts.len(),
            self.config.units.div_ceil(counts.len()),
        );
        counts.iter().all(|c| (lo..=hi).contains(c))
    }

    fn all_owned(&self) -> bool {
        let trusted: Vec<_> = self
            .trusted()
            .into_iter()
            .filter(|(_, running, _)| *running)
            .collect();
        // Fewer trusted units than units, counted with repeats: some unit has no owner, no
        // need to count distinct ones.
        if trusted
            .iter()
            .map(|(_, _, units)| units.len())
            .sum::<usize>()
            < self.config.units
        {
            return false;
        }
        distinct_owned(&trusted) == self.config.units
    }

    fn counters(&self) -> Counters {
        let mut out = Counters::default();
        let live = self
            .workers
            .iter()
            .map(|w| w.final_stats.unwrap_or_else(|| w.handle.stats()));
        for s in live.chain(self.retired_stats.iter().copied()) {
            out.requests += s.requests;
            out.records_read += s.records_read;
            out.moves += s.gains;
            out.ticks += s.ticks;
            out.unit_lists += s.unit_lists;
        }
        out
    }

    fn interval(&self) -> Duration {
        self.config.interval
    }

    fn running(&self) -> Vec<usize> {
        (0..self.workers.len())
            .filter(|i| self.workers[*i].status == Status::Running)
            .collect()
    }

    fn step(&mut self) -> bool {
        let Some((index, at)) = self.next_event() else {
            return false;
        };
        let now = self.now();
        if at > now {
            self.clock.advance(at - now);
        }
        let interval = self.config.interval;
        let Some(w) = self.workers.get_mut(index) else {
            return false;
        };
        if let Status::Paused { .. } = w.status {
            w.status = Status::Running;
            w.next_tick = at;
        }
        match pollster::block_on(w.worker.tick()) {
            Ok(report) if self.config.checkpoints => {
                let id = w.id.clone();
                self.events
                    .extend(report.events.into_iter().map(|e| (id.clone(), e)));
            }
            Ok(_) => {}
            Err(_) => self.errors += 1,
        }
        w.next_tick = at + interval;
        self.schedule(index);
        if self.config.check_every_step {
            self.check_safety();
        }
        true
    }
}

/// How many distinct units the running workers of `trusted` trust.
fn distinct_owned(trusted: &[(usize, bool, BTreeMap<String, FencingToken>)]) -> usize {
    let running = trusted.iter().filter(|(_, running, _)| *running);
    merge_units(running.map(|(_, _, units)| units)).0
}

/// Merges the (sorted) unit sets `sets`: how many distinct units they hold, and the units held
/// by more than one, in order. A k-way merge, so no unit name is hashed or copied.
fn merge_units<'a>(
    sets: impl Iterator<Item = &'a BTreeMap<String, FencingToken>>,
) -> (usize, Vec<&'a str>) {
    let mut iters: Vec<_> = sets.map(BTreeMap::keys).collect();
    let mut heads: BinaryHeap<Reverse<(&str, usize)>> = iters
        .iter_mut()
        .enumerate()
        .filter_map(|(i, it)| it.next().map(|u| Reverse((u.as_str(), i))))
        .collect();
    let (mut distinct, mut twice) = (0, Vec::new());
    let mut last: Option<&str> = None;
    while let Some(Reverse((unit, i))) = heads.pop() {
        if last == Some(unit) {
            if twice.last() != Some(&unit) {
                twice.push(unit);
            }
        } else {
            distinct += 1;
            last = Some(unit);
        }
        if let Some(next) = iters[i].next() {
            heads.push(Reverse((next.as_str(), i)));
        }
    }
    (distinct, twice)
}

impl Simulation {
    /// When the next event (a worker's tick, or the end of a pause) is due, if any.
    pub fn next_event_at(&self) -> Option<Duration> {
        self.next_event().map(|(_, at)| at)
    }

    /// The next event: (worker, when), the earliest due and of those the lowest index.
    fn next_event(&self) -> Option<(usize, Duration)> {
        self.queue.peek().map(|Reverse((at, i))| (*i, *at))
    }

    /// When worker `index` is due next: its tick, or the end of its pause; `None` once it has
    /// crashed or stopped.
    fn due(&self, index: usize) -> Option<Duration> {
        let w = self.workers.get(index)?;
        match w.status {
            Status::Running => Some(w.next_tick),
            Status::Paused { until } => Some(until.max(w.next_tick)),
            Status::Crashed | Status::Stopped => None,
        }
    }

    /// Queues worker `index`'s next event after its schedule changed, and drops the queue's
    /// stale entries from the top, so [`next_event`](Self::next_event) is the queue's first: a
    /// queue, not a scan of every worker per event (at W = 1,000 the scan was a tenth of a
    /// scale cell).
    fn schedule(&mut self, index: usize) {
        if let Some(at) = self.due(index) {
            self.queue.push(Reverse((at, index)));
        }
        while let Some(&Reverse((at, i))) = self.queue.peek() {
            if self.due(i) == Some(at) {
                break;
            }
            self.queue.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::merge_units;
    use lease_core::FencingToken;
    use std::collections::BTreeMap;

    fn set(units: &[&str]) -> BTreeMap<String, FencingToken> {
        units
            .iter()
            .map(|u| ((*u).to_owned(), lease_core::backend::fencing_token(1)))
            .collect()
    }

    #[test]
    fn merging_unit_sets_counts_distinct_units_and_names_each_repeat_once() {
        let sets = [
            set(&["a", "b", "d"]),
            set(&["b", "c"]),
            set(&[]),
            set(&["b", "d", "e"]),
        ];
        let (distinct, twice) = merge_units(sets.iter());
        assert_eq!(distinct, 5);
        assert_eq!(twice, ["b", "d"]);
        assert_eq!(merge_units(sets[..2].iter()), (4, vec!["b"]));
        assert_eq!(merge_units(std::iter::empty()), (0, Vec::new()));
    }
}

//! A simulator in which every request takes time and workers interleave request by request.
//!
//! The deterministic simulator of [`lessor_sim`](crate) runs each worker's tick atomically, with
//! store calls that take no time. Here, workers run as the real futures of
//! [`Worker::run`], each over its own [`LatencyStore`]: a request sleeps on the shared
//! [`ManualClock`] for half of a latency drawn from the worker's [`Latency`], takes effect on the
//! shared [`MemoryBackend`] at that instant, and sleeps for the rest before its reply. A
//! single-threaded executor polls every worker whose waker fired; when none can make progress it
//! advances the clock to the earliest pending sleep, pause end or scheduled [`Fault`]. So a tick
//! takes as long as its requests, other workers act in the middle of it, and a paused worker
//! stops wherever it was, mid-request or mid-tick.
//!
//! **The property is checked after every poll and every clock advance**, that is at every
//! request boundary of any worker: for every unit, the workers whose
//! [`WorkerHandle::owns`] answers `Some` at this instant. Paused workers count (a paused process
//! still believes what it believed); crashed and stopped ones do not. Two or more is a
//! [`Violation::DoubleTrust`], recorded with its start, end, workers and fencing tokens, and its
//! time is summed in [`Metrics::double_trust_time`]. With checkpoints, every save the store
//! accepts is recorded where it takes effect, and a save accepted under a lower fencing token
//! than one that already loaded, saved or gained the unit is a
//! [`Violation::CheckpointBackwards`]; a `Gained` event without the saved checkpoint is a
//! [`Violation::GainedWithoutCheckpoint`]. Violations are collected, never panicked on.
//!
//! Every random choice (latencies, throttling) comes from a seeded [`Rng`](crate::Rng), so a run is
//! reproducible from its seed. Public for the tests and for users trying settings; not
//! API-stable.
//!
//! ```
//! use lessor_sim::latency::{Latency, LatencySim, WorkerSpec};
//! use std::time::Duration;
//!
//! let ms = Duration::from_millis;
//! let mut sim = LatencySim::new(16, 7).with_latency(Latency::uniform(ms(5), ms(20)));
//! for _ in 0..2 {
//!     sim.add_worker(WorkerSpec::new())?;
//! }
//! let took = sim.run_until_all_owned(Duration::from_secs(30));
//! assert!(took.is_some());
//! sim.crash(0);
//! assert!(sim.run_until_all_owned(Duration::from_secs(30)).is_some());
//! assert!(sim.violations().is_empty());
//! # Ok::<(), lease_core::LeaseError>(())
//! ```
//!
//! Time units: everything is simulated time since the simulation started.

mod chaos;
mod check;
mod checkpoints;
mod faults;
mod link;
mod run;
mod spec;
mod task;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_core::Stream;

use lease_core::{Clock, FencingToken, ManualClock, MemoryBackend};

use lease_core::{FencedValues, LeaseError};
use lessor_partition::{FleetEvent, Worker, WorkerHandle, WorkerStats};

pub use chaos::{ChaosReport, chaos, chaos_with};
pub use check::{Metrics, Violation};
pub use checkpoints::CheckpointKind;
pub use link::{Latency, LatencyStore};
pub use spec::{Disruption, Fault, WorkerCost, WorkerSpec, recovery_bound};

use check::Tracker;
use checkpoints::{SharedLedger, SimCheckpoints, fleet_checkpoints, lock_ledger, new_ledger};
use link::{SharedLink, lock_link, new_link};
use task::Task;

/// The fleet name of every simulated worker: sessions are under `fleet/sim/sessions`, units
/// under `fleet/sim/units`.
pub const FLEET: &str = "sim";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Status {
    Running,
    Paused {
        until: Duration,
    },
    /// Crashed or stopped.
    Down,
}

/// One worker id: its current process, if any, and what is known of it.
#[derive(Debug)]
struct Slot {
    id: String,
    spec: WorkerSpec,
    link: SharedLink,
    status: Status,
    handle: Option<WorkerHandle>,
    /// The current process's events, as its application would read them.
    events: Option<Events>,
    run: Option<Task<Result<WorkerStats, LeaseError>>>,
    app: Option<Task<()>>,
    /// Started once the current process has stopped cleanly.
    replace_with: Option<WorkerSpec>,
    /// Units held by the current process, from its events.
    held: BTreeMap<String, FencingToken>,
    /// Whether it counts as a running owner of what it holds (running, session trusted).
    covering: bool,
    /// Counters of its finished processes.
    past: WorkerCost,
}

/// A worker's stream of events ([`WorkerHandle::events`]).
struct Events(Pin<Box<dyn Stream<Item = FleetEvent> + Send>>);

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Events")
    }
}

/// The latency-aware simulator: see the [module documentation](self).
pub struct LatencySim {
    clock: Arc<ManualClock>,
    store: MemoryBackend,
    units: Vec<String>,
    seed: u64,
    latency: Latency,
    workers: Vec<Slot>,
    foreign: Vec<Task<()>>,
    schedule: BTreeMap<(Duration, u64), Fault>,
    scheduled: u64,
    cursor: usize,
    tracker: Tracker,
    ledger: SharedLedger,
    checkpoints: BTreeMap<u8, Arc<dyn FencedValues>>,
    disruptions: Vec<Disruption>,
    recovered: usize,
    errors: Vec<String>,
    next_audit: Duration,
}

impl fmt::Debug for LatencySim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencySim")
            .field("now", &self.now())
            .field("units", &self.units.len())
            .field("workers", &self.workers.len())
            .field("unowned", &self.tracker.unowned)
            .finish_non_exhaustive()
    }
}

impl LatencySim {
    /// A fleet of `units` units (`u000`, `u001`, ...) with no workers, on a fresh clock and store;
    /// workers' requests take no time until [`with_latency`](Self::with_latency).
    pub fn new(units: usize, seed: u64) -> Self {
        let clock = Arc::new(ManualClock::new());
        let store = MemoryBackend::builder().with_clock(clock.clone()).build();
        let width = units.saturating_sub(1).to_string().len();
        let units: Vec<String> = (0..units).map(|i| format!("u{i:0width$}")).collect();
        Self {
            tracker: Tracker::new(&units),
            ledger: new_ledger(clock.clone()),
            clock,
            store,
            units,
            seed,
            latency: Latency::default(),
            workers: Vec::new(),
            foreign: Vec::new(),
            schedule: BTreeMap::new(),
            scheduled: 0,
            cursor: 0,
            checkpoints: BTreeMap::new(),
            disruptions: Vec::new(),
            recovered: 0,
            errors: Vec::new(),
            next_audit: Duration::ZERO,
        }
    }

    /// With `latency` for the workers added from now on.
    pub fn with_latency(mut self, latency: Latency) -> Self {
        self.latency = latency;
        self
    }

    /// The fleet's units, sorted.
    pub fn units(&self) -> &[String] {
        &self.units
    }

    /// The shared store, for acting behind the workers' backs.
    pub fn store(&self) -> &MemoryBackend {
        &self.store
    }

    /// The worker (by index) whose current process holds the assigner lease
    /// (unless [`WorkerBuilder::without_assigner`](lessor_partition::WorkerBuilder::without_assigner)),
    /// as the store shows it now.
    pub fn assigner(&self) -> Option<usize> {
        let key =
            lease_core::LeaseKey::with_sort_key(format!("fleet/{FLEET}/assigner"), "lease").ok()?;
        let record =
            pollster::block_on(lease_core::LeaseBackend::inspect(&self.store, &key)).ok()??;
        let holder = record.holder()?;
        if holder.expires_at().is_some_and(|at| at <= self.clock.now()) {
            return None;
        }
        let owner = holder.owner()?;
        self.workers.iter().position(|s| s.id == owner)
    }

    /// The shared clock.
    pub fn clock(&self) -> &Arc<ManualClock> {
        &self.clock
    }

    /// Simulated time since the start.
    pub fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    /// Adds and starts a worker (id `w00`, `w01`, ... by index) with the default latency.
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] if `spec` cannot make a worker.
    pub fn add_worker(&mut self, spec: WorkerSpec) -> Result<usize, LeaseError> {
        let index = self.workers.len();
        let seed = self.seed ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.workers.push(Slot {
            id: format!("w{index:02}"),
            spec,
            link: new_link(self.latency.clone(), seed),
            status: Status::Down,
            handle: None,
            events: None,
            run: None,
            app: None,
            replace_with: None,
            held: BTreeMap::new(),
            covering: false,
            past: WorkerCost::default(),
        });
        match self.start(index) {
            Ok(()) => Ok(index),
            Err(error) => {
                self.workers.pop();
                Err(error)
            }
        }
    }

    /// The id of worker `worker`.
    pub fn worker_id(&self, worker: usize) -> Option<&str> {
        self.workers.get(worker).map(|s| s.id.as_str())
    }

    /// The handle of worker `worker`'s current process (none once crashed or stopped).
    pub fn handle(&self, worker: usize) -> Option<&WorkerHandle> {
        self.workers.get(worker).and_then(|s| s.handle.as_ref())
    }

    /// Whether worker `worker` runs (started, not paused, crashed or stopped).
    pub fn is_running(&self, worker: usize) -> bool {
        self.workers
            .get(worker)
            .is_some_and(|s| s.status == Status::Running)
    }

    /// How many units worker `worker` trusts now.
    pub fn owned_by(&self, worker: usize) -> usize {
        self.handle(worker).map_or(0, |h| h.owned_units().len())
    }

    /// The configuration worker `worker` runs with (or last ran with).
    pub fn spec(&self, worker: usize) -> Option<&WorkerSpec> {
        self.workers.get(worker).map(|s| &s.spec)
    }

    /// How many workers were added.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    fn checkpoint_store(&mut self, kind: CheckpointKind) -> Arc<dyn FencedValues> {
        let slot = match kind {
            CheckpointKind::Memory => 0,
            CheckpointKind::Store => 1,
        };
        if let Some(store) = self.checkpoints.get(&slot) {
            return store.clone();
        }
        let store = fleet_checkpoints(kind, &self.store);
        self.checkpoints.insert(slot, store.clone());
        store
    }

    /// Builds worker `index` from its spec and starts its process (and its application).
    fn start(&mut self, index: usize) -> Result<(), LeaseError> {
        let spec = self.workers[index].spec.clone();
        let id = self.workers[index].id.clone();
        let link = self.workers[index].link.clone();
        let units = spec.units.clone().unwrap_or_else(|| self.units.clone());
        let mut builder = Worker::builder(FLEET, id.clone())
            .with_store(Arc::new(LatencyStore::new(
                self.store.clone(),
                link.clone(),
            )))
            .with_units(units)
            .with_session_duration(spec.session_duration)
            .with_interval(spec.interval());
        if let Some(d) = spec.unit_lease_duration {
            builder = builder.with_unit_lease_duration(d);
        }
        if let Some(moves) = spec.max_moves {
            builder = builder.with_max_moves_per_interval(moves);
        }
        if let Some(ticks) = spec.resync_every {
            builder = builder.with_resync_every(ticks);
        }
        if let Some(skew) = spec.skew_bound {
            builder = builder.with_clock_skew_bound(skew);
        }
        if !spec.assigner {
            builder = builder.without_assigner();
        }
        if let Some(kind) = spec.checkpoints {
            let inner = self.checkpoint_store(kind);
            let ledger = self.ledger.clone();
            let store = SimCheckpoints::new(id.clone(), inner, link, self.clock.clone(), ledger);
            builder = builder.with_checkpoint_store(Arc::new(store));
        }
        let worker = builder.build()?;
        let handle = worker.handle();
        let app = match (spec.checkpoints, spec.save_every) {
            (Some(_), Some(every)) => Some(Task::new(save_loop(
                handle.clone(),
                self.clock.clone(),
                every,
                id,
            ))),
            _ => None,
        };
        let slot = &mut self.workers[index];
        slot.run = Some(Task::new(worker.run()));
        slot.app = app;
        slot.events = Some(Events(Box::pin(handle.events())));
        slot.handle = Some(handle);
        slot.status = Status::Running;
        slot.held.clear();
        slot.covering = false;
        Ok(())
    }
}

/// The simulated application: saves a checkpoint of every owned unit every `every`, through the
/// handle (which checks ownership first), with a counter that only grows.
async fn save_loop(handle: WorkerHandle, clock: Arc<ManualClock>, every: Duration, id: String) {
    let mut counter = 0_u64;
    loop {
        clock.sleep(every).await;
        for unit in handle.owned_units().into_keys() {
            counter += 1;
            let value = format!("{id}:{counter}");
            // Refusals are expected (a unit lost meanwhile); the ledger records what landed.
            let _ = handle.save_checkpoint(&unit, value.as_bytes()).await;
        }
    }
}

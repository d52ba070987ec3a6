//! Checkpoints seen by the simulator: each request takes the worker's latency, can be made to
//! fail, and is recorded in a ledger at the instant it takes effect, so the checker can tell a
//! checkpoint that went backwards.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lease_core::{
    BoxFuture, Clock, FencedValues, FencingToken, LeaseError, LeaseKey, ManualClock, MemoryBackend,
};

use super::check::Violation;
use super::link::{SharedLink, draw, throttled};

/// Where the simulated fleet keeps its checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckpointKind {
    /// A [`MemoryBackend`] of their own, apart from the lease store
    /// ([`WorkerBuilder::with_checkpoint_store`](lessor_partition::WorkerBuilder::with_checkpoint_store)).
    Memory,
    /// The fleet's lease store's own [`FencedValues`] (the shared [`MemoryBackend`]), as
    /// [`WorkerBuilder::with_checkpoints`](lessor_partition::WorkerBuilder::with_checkpoints) keeps them.
    Store,
}

/// What the checker knows of one unit's checkpoint.
#[derive(Debug, Default)]
struct UnitLedger {
    /// The highest fencing token that loaded, saved, or was reported gained.
    highest: Option<FencingToken>,
    /// Whether an accepted save exists.
    saved: bool,
}

/// Every checkpoint request that reached the store, and the violations found in them.
#[derive(Debug)]
pub(crate) struct Ledger {
    clock: Arc<ManualClock>,
    units: BTreeMap<String, UnitLedger>,
    /// Loads to fail (transiently, without reaching the store), by unit.
    fail_loads: BTreeMap<String, u32>,
    /// Saves sent but not yet at the store: (worker, unit, fencing).
    pending: Vec<(String, String, FencingToken)>,
    pub(crate) violations: Vec<Violation>,
    pub(crate) saves_accepted: u64,
    pub(crate) saves_refused: u64,
    pub(crate) loads_failed: u64,
}

/// The ledger, shared by every worker's checkpoint wrapper and the simulator.
pub(crate) type SharedLedger = Arc<Mutex<Ledger>>;

pub(crate) fn new_ledger(clock: Arc<ManualClock>) -> SharedLedger {
    Arc::new(Mutex::new(Ledger {
        clock,
        units: BTreeMap::new(),
        fail_loads: BTreeMap::new(),
        pending: Vec::new(),
        violations: Vec::new(),
        saves_accepted: 0,
        saves_refused: 0,
        loads_failed: 0,
    }))
}

pub(crate) fn lock_ledger(ledger: &SharedLedger) -> MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Ledger {
    fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    fn raise(&mut self, unit: &str, fencing: FencingToken) {
        let entry = self.units.entry(unit.to_owned()).or_default();
        entry.highest = entry.highest.max(Some(fencing));
    }

    /// A save by `worker` was accepted by the store now.
    fn accepted(&mut self, worker: &str, unit: &str, fencing: FencingToken) {
        self.saves_accepted += 1;
        let at = self.now();
        let entry = self.units.entry(unit.to_owned()).or_default();
        entry.saved = true;
        if let Some(after) = entry.highest.filter(|h| *h > fencing) {
            self.violations.push(Violation::CheckpointBackwards {
                unit: unit.to_owned(),
                at,
                worker: worker.to_owned(),
                fencing,
                after,
            });
        }
        self.raise(unit, fencing);
    }

    /// `worker` reported gaining `unit`, with or without a checkpoint.
    pub(crate) fn gained(
        &mut self,
        worker: &str,
        unit: &str,
        fencing: FencingToken,
        checkpoint: bool,
    ) {
        let saved = self.units.get(unit).is_some_and(|u| u.saved);
        if saved && !checkpoint {
            let at = self.now();
            self.violations.push(Violation::GainedWithoutCheckpoint {
                unit: unit.to_owned(),
                at,
                worker: worker.to_owned(),
                fencing,
            });
        }
        self.raise(unit, fencing);
    }

    /// Makes the next `times` loads of `unit` fail transiently.
    pub(crate) fn fail_loads(&mut self, unit: &str, times: u32) {
        *self.fail_loads.entry(unit.to_owned()).or_default() += times;
    }

    /// Saves by `worker` that were sent but have not reached the store.
    pub(crate) fn pending_saves(&self, worker: &str) -> Vec<(String, FencingToken)> {
        self.pending
            .iter()
            .filter(|(w, _, _)| w == worker)
            .map(|(_, unit, fencing)| (unit.clone(), *fencing))
            .collect()
    }

    /// Forgets the pending saves of a process that is gone.
    pub(crate) fn forget_pending(&mut self, worker: &str) {
        self.pending.retain(|(w, _, _)| w != worker);
    }

    fn take_failure(&mut self, unit: &str) -> bool {
        match self.fail_loads.get_mut(unit) {
            Some(left) if *left > 0 => {
                *left -= 1;
                self.loads_failed += 1;
                true
            }
            _ => false,
        }
    }
}

/// The fleet's checkpoint store, as one worker reaches it: its requests take the worker's
/// latency and are recorded in the simulator's ledger where they take effect.
#[derive(Debug)]
pub(crate) struct SimCheckpoints {
    worker: String,
    inner: Arc<dyn FencedValues>,
    link: SharedLink,
    clock: Arc<ManualClock>,
    ledger: SharedLedger,
}

/// The fleet-wide store of a [`CheckpointKind`]: instantaneous; latency comes from the wrappers.
pub(crate) fn fleet_checkpoints(
    kind: CheckpointKind,
    store: &MemoryBackend,
) -> Arc<dyn FencedValues> {
    match kind {
        CheckpointKind::Memory => Arc::new(MemoryBackend::new()),
        CheckpointKind::Store => Arc::new(store.clone()),
    }
}

/// The unit a checkpoint name is of (its sort key).
fn unit_of(name: &LeaseKey) -> &str {
    name.sort().unwrap_or_default()
}

impl SimCheckpoints {
    pub(crate) fn new(
        worker: String,
        inner: Arc<dyn FencedValues>,
        link: SharedLink,
        clock: Arc<ManualClock>,
        ledger: SharedLedger,
    ) -> Self {
        Self {
            worker,
            inner,
            link,
            clock,
            ledger,
        }
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        lock_ledger(&self.ledger)
    }

    async fn load_now(
        &self,
        name: &LeaseKey,
        fencing: FencingToken,
    ) -> Result<Option<Vec<u8>>, LeaseError> {
        let unit = unit_of(name);
        let (out, back, throttle) = draw(&self.link);
        self.clock.sleep(out).await;
        let result = if throttle || self.ledger().take_failure(unit) {
            Err(throttled("memory"))
        } else {
            let result = self.inner.fence_and_read(name, fencing).await;
            if result.is_ok() {
                self.ledger().raise(unit, fencing);
            }
            result
        };
        self.clock.sleep(back).await;
        result
    }

    async fn save_now(
        &self,
        name: &LeaseKey,
        fencing: FencingToken,
        data: &[u8],
    ) -> Result<(), LeaseError> {
        let unit = unit_of(name);
        let (out, back, throttle) = draw(&self.link);
        let pending = (self.worker.clone(), unit.to_owned(), fencing);
        self.ledger().pending.push(pending.clone());
        self.clock.sleep(out).await;
        self.ledger().pending.retain(|p| *p != pending);
        let result = if throttle {
            Err(throttled("memory"))
        } else {
            let result = self.inner.put_fenced(name, fencing, data).await;
            let mut ledger = self.ledger();
            match &result {
                Ok(()) => ledger.accepted(&self.worker, unit, fencing),
                Err(_) => ledger.saves_refused += 1,
            }
            result
        };
        self.clock.sleep(back).await;
        result
    }
}

impl FencedValues for SimCheckpoints {
    fn fence_and_read<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, LeaseError>> {
        Box::pin(self.load_now(name, fencing))
    }

    fn put_fenced<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
        value: &'a [u8],
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(self.save_now(name, fencing, value))
    }
}

//! Configuring a worker.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lease_core::backend::{default_safety_margin, validate_duration};
use lease_core::{FencedValues, LeaseBackend, LeaseError, LeaseKey, RandomTokens, TokenSource};

use super::checkpoint::{CheckpointSource, Checkpoints};
use super::view::{EPOCH_SORT_KEY, LOAD_SUFFIX, SessionTag};
use crate::lessor::listing_of;

/// Longest worker id accepted, in bytes (it travels inside owner tokens of at most 256 bytes).
const MAX_WORKER_ID_BYTES: usize = 180;

/// What a worker is made from: its checked configuration, its store, its checkpoints.
pub(crate) type Parts = (Config, Arc<dyn LeaseBackend>, Option<Checkpoints>);

/// Configures a [`Worker`](crate::Worker): the store and the units are required, every other
/// setting has a default that suits a fleet on DynamoDB or files.
///
/// ```
/// use lessor_partition::{Partition, Worker};
/// use lease_core::MemoryBackend;
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let shards = Partition::universe().split(16);
/// let worker = Worker::builder("indexer", "host-1")
///     .with_store(Arc::new(MemoryBackend::new()))
///     .with_partitions(&shards)
///     .with_session_duration(Duration::from_secs(10))
///     .with_interval(Duration::from_millis(2500))
///     .with_checkpoints()
///     .build()?;
/// # let _ = worker;
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
#[must_use]
pub struct WorkerBuilder {
    fleet: String,
    worker_id: String,
    store: Option<Arc<dyn LeaseBackend>>,
    units: Vec<String>,
    session_duration: Duration,
    interval: Option<Duration>,
    unit_duration: Duration,
    skew: Option<Duration>,
    max_moves: usize,
    resync_every: u32,
    checkpoints: Option<Option<Arc<dyn FencedValues>>>,
    margin: Option<Duration>,
    handoff_timeout: Duration,
    max_units: Option<usize>,
    tokens: Arc<dyn TokenSource>,
    by_load: bool,
    assigner: bool,
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
    pub(crate) fn new(fleet: String, worker_id: String) -> Self {
        Self {
            fleet,
            worker_id,
            store: None,
            units: Vec::new(),
            session_duration: Duration::from_secs(10),
            interval: None,
            unit_duration: Duration::from_secs(24 * 3600),
            skew: None,
            max_moves: 256,
            resync_every: 8,
            checkpoints: None,
            margin: None,
            handoff_timeout: Duration::from_secs(5),
            max_units: None,
            // The one default source of randomness: injected here, never called by the worker.
            tokens: Arc::new(RandomTokens),
            by_load: false,
            assigner: true,
        }
    }

    /// The lease store the fleet shares (required). It must be able to list a partition key
    /// ([`LeaseBackend::as_listing`]; the memory, file and DynamoDB backends can): checked by
    /// [`build`](Self::build).
    pub fn with_store(mut self, store: Arc<dyn LeaseBackend>) -> Self {
        self.store = Some(store);
        self
    }

    /// The units (shard keys) the fleet divides; every worker must be given the same set. Adds to
    /// the units already given.
    pub fn with_units<I, S>(mut self, units: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.units.extend(units.into_iter().map(Into::into));
        self
    }

    /// Key ranges as units, named by their text form (`"low_high"`): a slice or `Vec` of
    /// [`Partition`](crate::Partition)s, or a [`PartitionSet`](crate::PartitionSet) by reference.
    /// Adds to the units already given.
    pub fn with_partitions<'a>(
        self,
        partitions: impl IntoIterator<Item = &'a crate::Partition>,
    ) -> Self {
        self.with_units(partitions.into_iter().map(ToString::to_string))
    }

    /// How long a session lease lasts without renewal (default 10 s): a crashed worker's units
    /// are owned again within about this plus one interval (at most two).
    pub fn with_session_duration(mut self, duration: Duration) -> Self {
        self.session_duration = duration;
        self
    }

    /// How often the worker ticks (default a quarter of the session duration; at most half).
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// How long each unit lease lasts (default 24 h). Unit leases are renewed when half is used,
    /// so this sets their amortised renewal cost; takeover never waits for them (see the crate
    /// documentation).
    pub fn with_unit_lease_duration(mut self, duration: Duration) -> Self {
        self.unit_duration = duration;
        self
    }

    /// Also judge a session dead once its store-side `expires_at` plus `skew` has passed on this
    /// worker's wall clock. Without it (the default) a session is judged dead only after its
    /// record stayed unchanged for a whole session duration on this worker's monotonic clock.
    pub fn with_clock_skew_bound(mut self, skew: Duration) -> Self {
        self.skew = Some(skew);
        self
    }

    /// Most live units handed over per tick (default 256): it throttles moving units that a
    /// live worker holds (its surplus after a join or a cap change). Units that are free or held
    /// by a dead session are taken without this bound, in the tick that plans them, so a dead
    /// worker's units are owned again within a session duration plus two intervals at any unit
    /// count.
    pub fn with_max_moves_per_interval(mut self, moves: usize) -> Self {
        self.max_moves = moves.max(1);
        self
    }

    /// The member with the lowest id lists the units at least this often, in ticks (default 8),
    /// to catch anything the membership changes did not reveal.
    pub fn with_resync_every(mut self, ticks: u32) -> Self {
        self.resync_every = ticks.max(1);
        self
    }

    /// Keeps per-unit checkpoints in the lease store itself, as its fenced values
    /// ([`LeaseBackend::as_fenced_values`], checked by [`build`](Self::build)): durable on files
    /// and DynamoDB, shared by every worker of the fleet, each read or write one conditional
    /// write. They live under the partition key `fleet/<fleet>/checkpoints`, sort key = unit id.
    /// When a unit is gained its checkpoint is read with the unit's fencing token, which fences
    /// out every earlier owner; a save is refused below the fence
    /// ([`LeaseError::NotOwned`] with [`NotOwnedReason::Fenced`](lease_core::NotOwnedReason::Fenced)).
    pub fn with_checkpoints(mut self) -> Self {
        self.checkpoints = Some(None);
        self
    }

    /// Keeps per-unit checkpoints in `values`, a store apart from the lease store, named as in
    /// [`with_checkpoints`](Self::with_checkpoints).
    pub fn with_checkpoint_store(mut self, values: Arc<dyn FencedValues>) -> Self {
        self.checkpoints = Some(Some(values));
        self
    }

    /// The part of each session the worker does not trust (default a tenth, at most 5 s, and
    /// never below the floor). It covers clock-rate drift between workers and slow replies: a
    /// session renewal extends trust only if its reply came back within half the margin, so a
    /// store slower than that cannot keep a session (see the crate docs, "Slow stores").
    ///
    /// The fleet is safe while workers' clock rates differ by less than `m / (2d)` (`m` the
    /// margin, `d` the session duration; 5 % at the default, 4.2 % at `d` = 60 s where the 5 s cap
    /// applies). [`build`](Self::build) refuses a margin below the **floor** `d / 50`, a 1 %
    /// tolerance (200 ms at 10 s sessions), or above a third of the session, with
    /// [`LeaseError::InvalidInput`] naming `safety margin`. `docs/correctness.md` (*The fleet's
    /// clock-rate bound*) states the assumption.
    pub fn with_safety_margin(mut self, margin: Duration) -> Self {
        self.margin = Some(margin);
        self
    }

    /// How long the application's [`UnitTask`](crate::UnitTask) of a unit being handed over (or
    /// released at shutdown) may keep it to save a final checkpoint before it is released anyway
    /// (default 5 s). Only applies to applications that take units with
    /// [`WorkerHandle::units`](crate::WorkerHandle::units).
    pub fn with_handoff_timeout(mut self, timeout: Duration) -> Self {
        self.handoff_timeout = timeout;
        self
    }

    /// The most units this worker owns at once (KCL's `maxLeasesForWorker`; default no limit).
    /// Every worker learns it from this worker's session record, so the fleet plans with it; when
    /// the limits of all live workers add up to fewer than the units, the rest stay unowned.
    pub fn with_max_units(mut self, units: usize) -> Self {
        self.max_units = Some(units);
        self
    }

    /// Balances the load the application reports for each unit
    /// ([`UnitTask::report_load`](crate::UnitTask::report_load)) instead of the unit count, as
    /// KCL 3.x balances worker utilisation. Each worker publishes the sum of its units' loads
    /// (a unit without a report counts 1) in a record of the sessions partition, at most every
    /// four ticks unless it changed by more than 5 % (two requests); the most loaded member gives
    /// units to the least loaded when that narrows the gap by more than a tenth of the fair share.
    /// The fleet plans by load only while every live member publishes one, and by count otherwise.
    pub fn with_balance_by_load(mut self) -> Self {
        self.by_load = true;
        self
    }

    /// No assigner: every worker lists the sessions every tick and plans for itself. It costs `W`
    /// records per worker a tick (`W²` fleet-wide) and saves the assigner's lease renewal (one
    /// request a tick), so it suits fleets of a few workers.
    ///
    /// By default the fleet elects an **assigner** (KCL 3.x's leader), so that membership costs
    /// `O(W)` records a tick fleet-wide instead of `O(W²)`. One worker holds the assigner lease
    /// (`fleet/F/assigner`, one session duration long): every tick it lists the sessions and
    /// publishes a digest of the live members, the unit-set epoch and the members it suspects in
    /// the lease's token, with the names of the members that changed lately; after a membership
    /// change it writes each follower's part of its plan as a *take list* (a fenced value
    /// `fleet/F/takes` / worker id). Every other worker reads that one record per tick and, while
    /// the digest matches its own view, skips listing. The assigner decides only *when* workers
    /// list and *which* units they look at; every verdict on a peer and every take is the
    /// worker's own, so a slow, paused or duplicated assigner can only delay balance (see
    /// [`protocol`](crate::protocol)). A worker that balances by load
    /// ([`with_balance_by_load`](Self::with_balance_by_load)) always ticks in full. A fleet whose
    /// workers disagree on this stays safe but saves only on its followers.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use lease_core::MemoryBackend;
    /// use lessor_partition::Worker;
    ///
    /// let worker = Worker::builder("fleet", "worker-1")
    ///     .with_store(Arc::new(MemoryBackend::new()))
    ///     .with_units((0..4).map(|u| format!("unit-{u}")))
    ///     .without_assigner()
    ///     .build()?;
    /// assert_eq!(worker.handle().snapshot().worker_id, "worker-1");
    /// # Ok::<(), lease_core::LeaseError>(())
    /// ```
    pub fn without_assigner(mut self) -> Self {
        self.assigner = false;
        self
    }

    /// Where the random parts of session and unit tokens come from (default
    /// [`RandomTokens`]): inject one for reproducible tests.
    pub fn with_token_source(mut self, tokens: Arc<dyn TokenSource>) -> Self {
        self.tokens = tokens;
        self
    }

    /// Checks the configuration: what [`build`](Self::build) makes the worker from.
    pub(crate) fn into_parts(self) -> Result<Parts, LeaseError> {
        let (interval, margin) = self.timing()?;
        let store = self
            .store
            .ok_or_else(|| LeaseError::invalid("store", "a worker needs a lease store"))?;
        listing_of(&*store, "list_partition")?;
        if self.worker_id.len() > MAX_WORKER_ID_BYTES || self.worker_id.contains('.') {
            return Err(LeaseError::invalid(
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
        let epoch_key = LeaseKey::with_sort_key(sessions.as_str(), EPOCH_SORT_KEY)?;
        let load_key = LeaseKey::with_sort_key(
            sessions.as_str(),
            format!("{}{LOAD_SUFFIX}", self.worker_id),
        )?;
        let checkpoints = match self.checkpoints {
            None => None,
            Some(values) => {
                let source = match values {
                    Some(values) => CheckpointSource::Separate(values),
                    None => CheckpointSource::Store(store.clone()),
                };
                Some(Checkpoints::new(source, &self.fleet, units_key.clone())?)
            }
        };
        let assigner_key = (self.assigner && !self.by_load)
            .then(|| LeaseKey::with_sort_key(format!("fleet/{}/assigner", self.fleet), "lease"))
            .transpose()?;
        let takes_key = assigner_key
            .is_some()
            .then(|| format!("fleet/{}/takes", self.fleet));
        let config = Config {
            assigner_key,
            takes_key,
            epoch_key,
            load_key: self.by_load.then_some(load_key),
            units_hash: units_hash(&units),
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
            margin,
            handoff_timeout: self.handoff_timeout,
            max_units: self.max_units,
            tokens: self.tokens,
        };
        Ok((config, store, checkpoints))
    }
}

impl WorkerBuilder {
    /// The interval and the safety margin, checked against the durations.
    fn timing(&self) -> Result<(Duration, Duration), LeaseError> {
        validate_duration(self.session_duration)?;
        validate_duration(self.unit_duration)?;
        let interval = self.interval.unwrap_or(self.session_duration / 4);
        if interval.is_zero() || interval > self.session_duration / 2 {
            return Err(LeaseError::invalid(
                "interval",
                "must be positive and at most half the session duration",
            ));
        }
        if self.unit_duration < self.session_duration {
            return Err(LeaseError::invalid(
                "unit lease duration",
                "must be at least the session duration",
            ));
        }
        let floor = margin_floor(self.session_duration);
        let margin = self
            .margin
            .unwrap_or_else(|| default_safety_margin(self.session_duration).max(floor));
        if margin < floor || margin > self.session_duration / 3 {
            return Err(LeaseError::invalid(
                "safety margin",
                format!(
                    "is {margin:?}; it must be at least {floor:?} (a fiftieth of the {:?} session: \
                     workers' clock rates may then differ by up to 1 %, m / (2d)) and at most a \
                     third of the session",
                    self.session_duration
                ),
            ));
        }
        Ok((interval, margin))
    }
}

/// The smallest safety margin a worker accepts for sessions of `session`: a fiftieth, so the
/// fleet tolerates clock rates that differ by up to `m / (2d)` = 1 %
/// (`docs/correctness.md`, *The fleet's clock-rate bound*).
fn margin_floor(session: Duration) -> Duration {
    session / 50
}

/// FNV-1a over the sorted unit list: equal lists, equal hashes.
fn units_hash(units: &[String]) -> u64 {
    fnv1a(units.iter().flat_map(|u| u.bytes().chain([0])))
}

/// FNV-1a: stable across builds and versions, so that workers of different builds agree.
pub(crate) fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

pub(crate) struct Config {
    pub(crate) worker_id: String,
    pub(crate) sessions: String,
    pub(crate) units_key: String,
    pub(crate) session_key: LeaseKey,
    pub(crate) units: Vec<String>,
    pub(crate) session_duration: Duration,
    pub(crate) interval: Duration,
    pub(crate) unit_duration: Duration,
    pub(crate) skew: Option<Duration>,
    pub(crate) max_moves: usize,
    pub(crate) resync_every: u32,
    pub(crate) margin: Duration,
    pub(crate) handoff_timeout: Duration,
    pub(crate) max_units: Option<usize>,
    pub(crate) tokens: Arc<dyn TokenSource>,
    pub(crate) units_hash: u64,
    pub(crate) epoch_key: LeaseKey,
    /// This worker's load record, when it balances by load.
    pub(crate) load_key: Option<LeaseKey>,
    /// The assigner lease, when the fleet elects one (unless [`WorkerBuilder::without_assigner`]).
    pub(crate) assigner_key: Option<LeaseKey>,
    /// The partition of the take lists the assigner writes ([`super::takes`]), with an assigner.
    pub(crate) takes_key: Option<String>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("worker_id", &self.worker_id)
            .field("units", &self.units.len())
            .field("session_duration", &self.session_duration)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// A renewal whose reply takes longer than this does not extend trust.
    pub(crate) fn reply_bound(&self) -> Duration {
        self.margin / 2
    }

    /// What this worker's session token tells its peers.
    pub(crate) fn tag(&self) -> SessionTag {
        SessionTag {
            duration: self.session_duration,
            max_units: self.max_units,
            units_hash: self.units_hash,
        }
    }
}

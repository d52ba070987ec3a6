//! What the simulator is told: worker configurations and faults; what it reports per worker.

use std::fmt;
use std::time::Duration;

use super::checkpoints::CheckpointKind;
use super::link::Latency;
use lessor_partition::WorkerStats;

/// The configuration of one simulated worker (a [`WorkerBuilder`](lessor_partition::WorkerBuilder)'s
/// settings, plus the simulated application's checkpoint saves). `None` keeps the builder's
/// default.
///
/// ```
/// use lessor_sim::latency::{CheckpointKind, WorkerSpec};
/// use std::time::Duration;
///
/// let spec = WorkerSpec::new()
///     .with_session(Duration::from_secs(44))
///     .with_checkpoints(CheckpointKind::Store)
///     .with_saves_every(Duration::from_secs(1));
/// assert_eq!(spec.interval(), Duration::from_secs(11));
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct WorkerSpec {
    /// The session lease duration.
    pub session_duration: Duration,
    /// The tick interval (default: a quarter of the session).
    pub interval: Option<Duration>,
    /// The unit lease duration (default 24 h).
    pub unit_lease_duration: Option<Duration>,
    /// The units this worker is configured with (default: all of the simulation's).
    pub units: Option<Vec<String>>,
    /// Moves per tick.
    pub max_moves: Option<usize>,
    /// Resync period of the lowest-id member, in ticks.
    pub resync_every: Option<u32>,
    /// A wall-clock skew bound for judging sessions dead.
    pub skew_bound: Option<Duration>,
    /// Where checkpoints are kept, if anywhere.
    pub checkpoints: Option<CheckpointKind>,
    /// How often the simulated application saves a checkpoint of every unit it owns (needs
    /// `checkpoints`).
    pub save_every: Option<Duration>,
    /// Whether the worker takes part in electing an assigner
    /// (the default; [`WorkerBuilder::without_assigner`](lessor_partition::WorkerBuilder::without_assigner)
    /// turns it off).
    pub assigner: bool,
}

impl Default for WorkerSpec {
    fn default() -> Self {
        Self {
            session_duration: Duration::from_secs(10),
            interval: None,
            unit_lease_duration: None,
            units: None,
            max_moves: None,
            resync_every: None,
            skew_bound: None,
            checkpoints: None,
            save_every: None,
            assigner: true,
        }
    }
}

impl WorkerSpec {
    /// The builder's defaults: 10 s sessions, 2.5 s interval, 24 h unit leases, every unit.
    pub fn new() -> Self {
        Self::default()
    }

    /// With session duration `d`.
    pub fn with_session(mut self, d: Duration) -> Self {
        self.session_duration = d;
        self
    }

    /// With tick interval `d`.
    pub fn with_interval(mut self, d: Duration) -> Self {
        self.interval = Some(d);
        self
    }

    /// With unit lease duration `d` (at least the session duration).
    pub fn with_unit_lease(mut self, d: Duration) -> Self {
        self.unit_lease_duration = Some(d);
        self
    }

    /// Configured with `units` only.
    pub fn with_units(mut self, units: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.units = Some(units.into_iter().map(Into::into).collect());
        self
    }

    /// At most `moves` moves per tick.
    pub fn with_max_moves(mut self, moves: usize) -> Self {
        self.max_moves = Some(moves);
        self
    }

    /// The lowest-id member lists the units every `ticks` ticks.
    pub fn with_resync_every(mut self, ticks: u32) -> Self {
        self.resync_every = Some(ticks);
        self
    }

    /// With a wall-clock skew bound.
    pub fn with_skew_bound(mut self, skew: Duration) -> Self {
        self.skew_bound = Some(skew);
        self
    }

    /// Takes part in electing an assigner (the default, as for a worker).
    pub fn with_assigner(mut self) -> Self {
        self.assigner = true;
        self
    }

    /// Plans for itself without an assigner
    /// ([`WorkerBuilder::without_assigner`](lessor_partition::WorkerBuilder::without_assigner)).
    pub fn without_assigner(mut self) -> Self {
        self.assigner = false;
        self
    }

    /// Keeps checkpoints in `kind`.
    pub fn with_checkpoints(mut self, kind: CheckpointKind) -> Self {
        self.checkpoints = Some(kind);
        self
    }

    /// The simulated application saves a checkpoint of every owned unit every `d`.
    pub fn with_saves_every(mut self, d: Duration) -> Self {
        self.save_every = Some(d);
        self
    }

    /// The tick interval this spec gives.
    pub fn interval(&self) -> Duration {
        self.interval.unwrap_or(self.session_duration / 4)
    }
}

/// Something done to a worker, now ([`LatencySim::apply`](super::LatencySim::apply)) or at a
/// simulated instant ([`LatencySim::schedule`](super::LatencySim::schedule)). Workers are named by
/// index.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Fault {
    /// Stop polling the worker for `duration` (a GC pause, SIGSTOP): its sleeps still end, and it
    /// resumes where it was, mid-request or mid-tick. It keeps believing what it believed.
    Pause {
        /// The worker.
        worker: usize,
        /// How long.
        duration: Duration,
    },
    /// End the worker's pause now.
    Resume {
        /// The worker.
        worker: usize,
    },
    /// Drop the worker's futures without a shutdown: the process is gone.
    Crash {
        /// The worker.
        worker: usize,
    },
    /// Crash the worker if it runs, then start a new one with the same id (and `spec`, or its
    /// last one).
    Restart {
        /// The worker.
        worker: usize,
        /// Its new configuration, if it changes.
        spec: Option<WorkerSpec>,
    },
    /// Ask the worker to shut down cleanly ([`WorkerHandle::stop`](lessor_partition::WorkerHandle::stop)).
    Stop {
        /// The worker.
        worker: usize,
    },
    /// Start a crashed or stopped worker again (and `spec`, or its last one).
    Start {
        /// The worker.
        worker: usize,
        /// Its new configuration, if it changes.
        spec: Option<WorkerSpec>,
    },
    /// Stop the worker cleanly, and once it has stopped start it again with `spec`: one step of
    /// a rolling configuration change.
    Replace {
        /// The worker.
        worker: usize,
        /// Its new configuration.
        spec: WorkerSpec,
    },
    /// Change the worker's request latency from now on.
    SetLatency {
        /// The worker.
        worker: usize,
        /// The new latency.
        latency: Latency,
    },
}

impl Fault {
    /// The worker it is done to.
    pub fn worker(&self) -> usize {
        match self {
            Self::Pause { worker, .. }
            | Self::Resume { worker }
            | Self::Crash { worker }
            | Self::Restart { worker, .. }
            | Self::Stop { worker }
            | Self::Start { worker, .. }
            | Self::Replace { worker, .. }
            | Self::SetLatency { worker, .. } => *worker,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.worker();
        match self {
            Self::Pause { duration, .. } => write!(f, "pause worker {w} for {duration:?}"),
            Self::Resume { .. } => write!(f, "resume worker {w}"),
            Self::Crash { .. } => write!(f, "crash worker {w}"),
            Self::Restart { .. } => write!(f, "restart worker {w}"),
            Self::Stop { .. } => write!(f, "stop worker {w}"),
            Self::Start { .. } => write!(f, "start worker {w}"),
            Self::Replace { spec, .. } => write!(
                f,
                "replace worker {w} ({:?} sessions)",
                spec.session_duration
            ),
            Self::SetLatency { latency, .. } => {
                write!(
                    f,
                    "latency of worker {w} to {:?}..={:?}",
                    latency.lo, latency.hi
                )
            }
        }
    }
}

/// A fault, and how long after it every unit had a running owner again.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Disruption {
    /// What was done.
    pub fault: String,
    /// When (simulated time since the start).
    pub at: Duration,
    /// How long after it every unit first had a running owner again, once it had taken effect
    /// (a stop takes effect when the process has shut down), if that happened yet.
    pub all_owned_after: Option<Duration>,
    /// The worker whose process must end before the fault has taken effect.
    pub(crate) waiting_for: Option<usize>,
}

/// One worker's request counters, summed over its incarnations (restarts under the same id).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct WorkerCost {
    /// The worker id (`"fleet"` for a sum over the fleet).
    pub worker: String,
    /// The worker's own counters, as its handles reported them at their latest ticks.
    pub stats: WorkerStats,
}

impl WorkerCost {
    fn ratio(part: u64, whole: u64) -> f64 {
        if whole == 0 {
            0.0
        } else {
            part as f64 / whole as f64
        }
    }

    /// Lease-store requests per tick.
    pub fn requests_per_tick(&self) -> f64 {
        Self::ratio(self.stats.requests, self.stats.ticks)
    }

    /// Records read (by listings) per tick.
    pub fn records_per_tick(&self) -> f64 {
        Self::ratio(self.stats.records_read, self.stats.ticks)
    }

    /// The fraction of ticks on which the worker listed the units.
    pub fn listing_fraction(&self) -> f64 {
        Self::ratio(self.stats.unit_lists, self.stats.ticks)
    }

    /// The counters between `earlier` and `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            worker: self.worker.clone(),
            stats: zip(&self.stats, &earlier.stats, u64::saturating_sub),
        }
    }

    /// Adds `other`'s counters.
    pub(crate) fn add(&mut self, other: &WorkerStats) {
        self.stats = zip(&self.stats, other, u64::saturating_add);
    }
}

/// Every counter of `a` and `b`, combined by `f`.
fn zip(a: &WorkerStats, b: &WorkerStats, f: impl Fn(u64, u64) -> u64) -> WorkerStats {
    // `WorkerStats` is `#[non_exhaustive]`: built from its default, field by field.
    let mut out = WorkerStats::default();
    out.ticks = f(a.ticks, b.ticks);
    out.requests = f(a.requests, b.requests);
    out.lists = f(a.lists, b.lists);
    out.records_read = f(a.records_read, b.records_read);
    out.unit_lists = f(a.unit_lists, b.unit_lists);
    out.gains = f(a.gains, b.gains);
    out.losses = f(a.losses, b.losses);
    out.checkpoint_requests = f(a.checkpoint_requests, b.checkpoint_requests);
    out.checkpoint_failures = f(a.checkpoint_failures, b.checkpoint_failures);
    out.mismatches = f(a.mismatches, b.mismatches);
    out
}

/// The longest the fleet should take to own every unit again after a worker crashed, or froze
/// for longer than its session: an observer judges the session dead one session duration after
/// it first saw the last renewal, at most `session + 2 * interval` after the crash (the crate
/// documentation's timing section), then takes the units (in one tick, since dead owners' units
/// are taken without the move bound; counting `max_moves` per tick keeps the bound loose), each
/// take `requests_per_take` requests of at most `request`, after its tick's own requests
/// (session renewal, sessions listing, units listing, one spare).
///
/// `takes` is the number of units the busiest taker must take.
///
/// ```
/// use lessor_sim::latency::recovery_bound;
/// use std::time::Duration;
///
/// let ms = Duration::from_millis;
/// // 10 s sessions, 2.5 s ticks, 16 units to take at 40 ms, acquire and checkpoint load each.
/// let bound = recovery_bound(ms(10_000), ms(2_500), 16, 256, ms(40), 2);
/// assert_eq!(bound, ms(10_000 + 5_000 + 4 * 40 + 16 * 2 * 40));
/// ```
pub fn recovery_bound(
    session: Duration,
    interval: Duration,
    takes: usize,
    max_moves: usize,
    request: Duration,
    requests_per_take: u32,
) -> Duration {
    let extra_ticks = takes.div_ceil(max_moves.max(1)).saturating_sub(1);
    let extra_ticks = u32::try_from(extra_ticks).unwrap_or(u32::MAX);
    let takes = u32::try_from(takes).unwrap_or(u32::MAX);
    session
        + interval * 2
        + interval * extra_ticks
        + request * 4
        + request * requests_per_take * takes
}

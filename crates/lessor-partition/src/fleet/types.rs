//! The types a worker shows the application: events, why a unit ends, checkpoints, counters,
//! snapshots.

use std::collections::BTreeMap;
use std::fmt;

use lease_core::{FencingToken, LossReason};

/// Why a worker's ownership of a unit ends, or must end: the fleet's reasons
/// ([`HandedOver`](Self::HandedOver), [`Shutdown`](Self::Shutdown), [`Retired`](Self::Retired))
/// beside a loss of the unit's lease ([`Lost`](Self::Lost), lease-core's [`LossReason`]).
///
/// [`UnitTask::lost`](crate::UnitTask::lost) completes with it, and
/// [`FleetEvent::Lost`] carries it.
///
/// ```
/// use lessor_partition::UnitEnd;
/// use lease_core::{LossReason, NotOwnedReason};
///
/// // The worker asks for the unit back: it is still owned, so a final checkpoint is accepted.
/// fn still_owned(end: &UnitEnd) -> bool {
///     matches!(end, UnitEnd::HandedOver | UnitEnd::Shutdown)
/// }
/// assert!(still_owned(&UnitEnd::HandedOver));
/// assert!(!still_owned(&UnitEnd::Lost(LossReason::NotOwned(NotOwnedReason::TakenOver))));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnitEnd {
    /// The plan gave the unit to another worker. Until the unit's task is dropped (or the
    /// handoff timeout passes) the unit is still owned: save a final checkpoint, then drop the
    /// task. Released right after.
    HandedOver,
    /// The worker is shutting down: as [`HandedOver`](Self::HandedOver), and released right
    /// after.
    Shutdown,
    /// The application retired the unit ([`UnitTask::retire`](crate::UnitTask::retire)): its
    /// record was deleted, and no worker takes it again.
    Retired,
    /// The ownership is over, against the worker's will: stop at once. `NotOwned(TakenOver)`
    /// (the store says another worker took it), `NotOwned(Expired)` (the unit lease expired before
    /// a renewal landed), or, when the worker's session could no longer be trusted and every unit
    /// went at once, the session's own loss: `DeadlinePassed` (no renewal answered in time, e.g.
    /// a pause), `BackendFailing` (renewals failed until the deadline) or `NotOwned(..)` (the
    /// store refused the session's renewal).
    Lost(LossReason),
}

impl fmt::Display for UnitEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::HandedOver => f.write_str("unit handed over to another worker"),
            Self::Shutdown => f.write_str("unit given up at shutdown"),
            Self::Retired => f.write_str("unit retired: its record was deleted"),
            Self::Lost(reason) => write!(f, "unit {reason}"),
        }
    }
}

/// A unit's checkpoint as the worker read it when it gained the unit (reading it raised the
/// unit's fence, so every earlier owner's later saves are refused).
///
/// ```
/// use lessor_partition::Checkpoint;
///
/// fn offset(checkpoint: &Checkpoint) -> Option<u64> {
///     match checkpoint {
///         Checkpoint::Saved(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
///         // Never saved: start from the beginning. Lost: rebuild from the source.
///         _ => None,
///     }
/// }
/// assert_eq!(offset(&Checkpoint::Saved(b"42".to_vec())), Some(42));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Checkpoint {
    /// The newest checkpoint saved for the unit.
    Saved(Vec<u8>),
    /// None was ever saved, or the worker keeps no checkpoints
    /// ([`WorkerBuilder::with_checkpoints`](crate::WorkerBuilder::with_checkpoints)).
    Empty,
    /// The checkpoint vanished with the store's data: the worker found the fleet's store epoch
    /// gone or replaced (the table deleted and re-created, the emulator restarted, the store
    /// wiped). One may have been saved: rebuild the unit's state from its source. After a store
    /// loss the fleet cannot tell a vanished checkpoint from one never saved, so every unit
    /// gained without one is reported so, until a checkpoint is saved for it.
    Lost,
}

/// What a worker tells the application: from [`WorkerHandle::events`](crate::WorkerHandle::events)
/// while it runs, or in each [`TickReport`] when the application ticks it.
///
/// ```
/// use lessor_partition::{FleetEvent, UnitEnd};
///
/// fn log(event: &FleetEvent) -> String {
///     match event {
///         FleetEvent::Gained { unit, fencing_token, .. } => format!("+{unit}@{fencing_token}"),
///         FleetEvent::Lost { unit, reason: UnitEnd::HandedOver, .. } => format!("{unit} moved"),
///         FleetEvent::Lost { unit, reason, .. } => format!("-{unit}: {reason}"),
///         _ => String::new(), // non-exhaustive: later kinds of event
///     }
/// }
/// # let _ = log;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FleetEvent {
    /// The worker now owns `unit`. Pass `fencing_token` with every write the unit's work makes.
    Gained {
        /// The unit.
        unit: String,
        /// The unit's fencing token for this ownership: greater than every earlier owner's.
        fencing_token: FencingToken,
        /// The unit's checkpoint, read (and so fenced) before this event; a failed read gives
        /// the unit back instead.
        checkpoint: Checkpoint,
    },
    /// The worker no longer owns `unit` (after [`UnitEnd::HandedOver`] and
    /// [`UnitEnd::Shutdown`]: it is released right after the event): stop working on it.
    Lost {
        /// The unit.
        unit: String,
        /// The fencing token of the ownership that ended.
        fencing_token: FencingToken,
        /// Why.
        reason: UnitEnd,
    },
}

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
    /// Requests sent to the checkpoint store (the application's saves included).
    pub checkpoint_requests: u64,
    /// Units given back because their checkpoint could not be fenced and read.
    pub checkpoint_failures: u64,
    /// Times a live peer was seen configured with a different unit list.
    pub mismatches: u64,
    /// Times this worker found the checkpoint store's data lost (its store epoch gone or
    /// replaced since the worker first read it).
    pub store_losses: u64,
    /// Units gained whose checkpoint was reported lost ([`Checkpoint::Lost`]).
    pub checkpoints_lost: u64,
    /// Events dropped because nobody read them (see
    /// [`WorkerHandle::events`](crate::WorkerHandle::events)).
    pub events_dropped: u64,
}

/// What one [`Worker::tick`](crate::Worker::tick) did.
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

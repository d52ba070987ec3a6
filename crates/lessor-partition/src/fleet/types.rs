//! The types a worker shows the application: events, counters, snapshots.

use std::collections::BTreeMap;

use lease_core::{FencingToken, LossReason};

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
        /// The unit's checkpoint, when checkpoints are configured
        /// ([`WorkerBuilder::with_checkpoints`](crate::WorkerBuilder::with_checkpoints)): loading
        /// it fenced out every earlier owner before this event, and `None` means no checkpoint was
        /// ever saved (a failed load gives the unit back instead), or, when
        /// [`CheckpointLost`](FleetEvent::CheckpointLost) came right before, that it vanished
        /// with the store's data.
        checkpoint: Option<Vec<u8>>,
    },
    /// The checkpoint of `unit` has vanished with the store's data: the worker found the
    /// fleet's store epoch gone or replaced (the table deleted and re-created, the emulator
    /// restarted, the store wiped), and then gained `unit` with no checkpoint. Sent right before
    /// the unit's [`Gained`](FleetEvent::Gained), whose `checkpoint` is then `None` although one
    /// may have been saved: rebuild the unit's state from its source. After a store loss the
    /// fleet cannot tell a vanished checkpoint from one never saved, so every unit gained
    /// without one is reported, until a checkpoint is saved for it.
    CheckpointLost {
        /// The unit.
        unit: String,
        /// The unit's fencing token for the ownership that is starting.
        fencing: FencingToken,
    },
    /// The worker no longer owns `unit`: stop working on it before the callback returns.
    Lost {
        /// The unit.
        unit: String,
        /// The fencing token of the ownership that ended.
        fencing: FencingToken,
        /// Why: [`LossReason::HandedOver`] (the plan gave it to another worker; released right
        /// after the event), [`LossReason::Shutdown`] (released right after the event),
        /// [`LossReason::Retired`] (the application retired it: its record was deleted),
        /// `NotOwned(TakenOver)` (the store says another worker took it), `NotOwned(Expired)`
        /// (its unit lease expired before a renewal landed), or, when the worker's session could
        /// no longer be trusted and every unit went at once, the session's own loss:
        /// [`LossReason::DeadlinePassed`] (no renewal answered in time, e.g. a pause),
        /// [`LossReason::BackendFailing`] (renewals failed until the deadline) or `NotOwned(..)`
        /// (the store refused the session's renewal).
        reason: LossReason,
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
    /// Requests sent to the checkpoint store.
    pub checkpoint_requests: u64,
    /// Units given back because their checkpoint could not be fenced and read.
    pub checkpoint_failures: u64,
    /// Times a live peer was seen configured with a different unit list.
    pub mismatches: u64,
    /// Times this worker found the checkpoint store's data lost (its store epoch gone or
    /// replaced since the worker first read it).
    pub store_losses: u64,
    /// Units gained whose checkpoint was reported lost ([`FleetEvent::CheckpointLost`]).
    pub checkpoints_lost: u64,
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

//! The property checker and the fleet's metrics.
//!
//! Which units a worker *holds* is known from its events (every ownership starts with `Gained` and
//! ends with `Lost`, both queued inside the poll that made the change), so a worker can trust only
//! units it holds. Two workers can start to trust one unit only inside a poll, and trust only
//! ends with time or inside a poll, so the checker asks [`WorkerHandle::owns`] after every poll
//! and every clock advance, but only for units held by two or more workers.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use lease_core::FencingToken;

use lessor_partition::WorkerHandle;

/// A broken promise, as the checker saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// Two or more workers trusted `unit` at once (paused workers included, crashed ones not).
    DoubleTrust {
        /// The unit.
        unit: String,
        /// When this set of trusting owners began (simulated time since the start).
        since: Duration,
        /// When it ended, if it has.
        until: Option<Duration>,
        /// The trusting workers with their fencing tokens.
        owners: Vec<(String, FencingToken)>,
    },
    /// A checkpoint save was accepted with a fencing token below one that had already loaded,
    /// saved or gained the unit: the checkpoint went backwards.
    CheckpointBackwards {
        /// The unit.
        unit: String,
        /// When the store accepted the save.
        at: Duration,
        /// Who saved.
        worker: String,
        /// With which fencing token.
        fencing: FencingToken,
        /// The higher fencing token seen before.
        after: FencingToken,
    },
    /// A worker reported `Gained` with no checkpoint although one had been saved.
    GainedWithoutCheckpoint {
        /// The unit.
        unit: String,
        /// When the event was seen.
        at: Duration,
        /// The new owner.
        worker: String,
        /// Its fencing token.
        fencing: FencingToken,
    },
}

impl Violation {
    /// Whether this is a [`DoubleTrust`](Self::DoubleTrust).
    pub fn is_double_trust(&self) -> bool {
        matches!(self, Self::DoubleTrust { .. })
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DoubleTrust {
                unit,
                since,
                until,
                owners,
            } => {
                let owners: Vec<String> = owners.iter().map(|(w, t)| format!("{w}@{t}")).collect();
                let until = until.map_or_else(|| "now".to_owned(), |u| format!("{u:?}"));
                write!(
                    f,
                    "{unit} trusted by {} from {since:?} to {until}",
                    owners.join(" and ")
                )
            }
            Self::CheckpointBackwards {
                unit,
                at,
                worker,
                fencing,
                after,
            } => write!(
                f,
                "{unit}: save by {worker} with fencing {fencing} accepted at {at:?} after fencing {after}"
            ),
            Self::GainedWithoutCheckpoint {
                unit,
                at,
                worker,
                fencing,
            } => write!(
                f,
                "{unit}: {worker} gained it with fencing {fencing} at {at:?} without its saved checkpoint"
            ),
        }
    }
}

/// What the fleet did, summed over its workers. Durations are simulated time.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Metrics {
    /// Time during which at least one unit had two or more trusting owners.
    pub double_trust_time: Duration,
    /// The same, summed over units ("128 units for 7.4 s" is 947 s).
    pub double_trust_unit_time: Duration,
    /// Distinct units that were ever doubly trusted.
    pub doubly_trusted_units: usize,
    /// Unit-time during which a unit had no running owner (held by a running worker whose
    /// session is within its deadline), summed over units.
    pub unowned_unit_time: Duration,
    /// Units gained (moves).
    pub moves: u64,
    /// Units lost with their worker's session ([`LossReason::DeadlinePassed`] or
    /// [`LossReason::BackendFailing`](lease_core::LossReason::BackendFailing)).
    ///
    /// [`LossReason::DeadlinePassed`]: lease_core::LossReason::DeadlinePassed
    pub units_lost_with_session: u64,
    /// Times a worker lost its session while it held units (one per worker per tick).
    pub session_losses: u64,
    /// Checkpoint saves the store accepted.
    pub saves_accepted: u64,
    /// Checkpoint saves the store refused (fenced out).
    pub saves_refused: u64,
    /// Checkpoint loads made to fail.
    pub loads_failed: u64,
}

impl Metrics {
    /// What happened between `earlier` and `self` (counts and times; `doubly_trusted_units` is
    /// kept from `self`).
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            double_trust_time: self.double_trust_time - earlier.double_trust_time,
            double_trust_unit_time: self.double_trust_unit_time - earlier.double_trust_unit_time,
            doubly_trusted_units: self.doubly_trusted_units,
            unowned_unit_time: self.unowned_unit_time - earlier.unowned_unit_time,
            moves: self.moves - earlier.moves,
            units_lost_with_session: self.units_lost_with_session - earlier.units_lost_with_session,
            session_losses: self.session_losses - earlier.session_losses,
            saves_accepted: self.saves_accepted - earlier.saves_accepted,
            saves_refused: self.saves_refused - earlier.saves_refused,
            loads_failed: self.loads_failed - earlier.loads_failed,
        }
    }
}

/// Trusting owners of a unit: (worker index, fencing token).
type Owners = Vec<(usize, FencingToken)>;

/// Who holds what, who covers what, and the double-trust episodes under way.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    /// Units of the fleet, each with how many covering workers hold it.
    cover: BTreeMap<String, u32>,
    pub(crate) unowned: usize,
    /// Holders of each unit (workers by index), from their events.
    holders: BTreeMap<String, Vec<usize>>,
    /// Units with two or more holders.
    contested: BTreeSet<String>,
    /// Units with two or more trusting owners now: the episode's index in `violations`, and the
    /// owners.
    active: BTreeMap<String, (usize, Owners)>,
    ever: BTreeSet<String>,
    pub(crate) violations: Vec<Violation>,
    pub(crate) metrics: Metrics,
}

impl Tracker {
    pub(crate) fn new(units: &[String]) -> Self {
        Self {
            cover: units.iter().map(|u| (u.clone(), 0)).collect(),
            unowned: units.len(),
            ..Self::default()
        }
    }

    /// Worker `who` now holds `unit`; `covering` says whether it counts as a running owner.
    pub(crate) fn hold(&mut self, who: usize, unit: &str, covering: bool) {
        let holders = self.holders.entry(unit.to_owned()).or_default();
        if !holders.contains(&who) {
            holders.push(who);
            if holders.len() > 1 {
                self.contested.insert(unit.to_owned());
            }
        }
        if covering {
            self.cover_unit(unit, true);
        }
    }

    /// Worker `who` no longer holds `unit`.
    pub(crate) fn release(&mut self, who: usize, unit: &str, covering: bool) {
        if let Some(holders) = self.holders.get_mut(unit) {
            holders.retain(|h| *h != who);
            if holders.len() < 2 {
                self.contested.remove(unit);
            }
            if holders.is_empty() {
                self.holders.remove(unit);
            }
        }
        if covering {
            self.cover_unit(unit, false);
        }
    }

    /// A holder of `unit` started (`true`) or stopped covering it.
    pub(crate) fn cover_unit(&mut self, unit: &str, on: bool) {
        let Some(count) = self.cover.get_mut(unit) else {
            return;
        };
        match (on, *count) {
            (true, 0) => self.unowned -= 1,
            (false, 1) => self.unowned += 1,
            _ => {}
        }
        *count = if on {
            *count + 1
        } else {
            count.saturating_sub(1)
        };
    }

    /// Adds `dt` of the current state to the metrics.
    pub(crate) fn elapse(&mut self, dt: Duration) {
        let unowned = u32::try_from(self.unowned).unwrap_or(u32::MAX);
        self.metrics.unowned_unit_time += dt * unowned;
        if !self.active.is_empty() {
            let active = u32::try_from(self.active.len()).unwrap_or(u32::MAX);
            self.metrics.double_trust_time += dt;
            self.metrics.double_trust_unit_time += dt * active;
        }
    }

    /// Checks every contested unit at `now` (`mono` on the monotonic clock): `handles[i]` is
    /// worker `i`'s id and handle, `None` for a crashed or stopped worker.
    pub(crate) fn check(
        &mut self,
        now: Duration,
        mono: Instant,
        handles: &[Option<(&str, &WorkerHandle)>],
    ) {
        // A worker whose session deadline passed trusts nothing: most contested units are
        // settled by this, without asking for each unit.
        let trusting: Vec<Option<&WorkerHandle>> = handles
            .iter()
            .map(|h| {
                h.map(|(_, h)| h)
                    .filter(|h| h.deadline().is_some_and(|d| mono < d))
            })
            .collect();
        let mut seen: Vec<(String, Owners)> = Vec::new();
        for unit in &self.contested {
            let candidates = self.holders[unit]
                .iter()
                .filter(|h| trusting.get(**h).copied().flatten().is_some());
            if candidates.clone().count() < 2 {
                continue;
            }
            let owners: Owners = candidates
                .filter_map(|h| Some((*h, trusting[*h]?.owns(unit)?)))
                .collect();
            if owners.len() > 1 {
                seen.push((unit.clone(), owners));
            }
        }
        let ended: Vec<String> = self
            .active
            .keys()
            .filter(|u| !seen.iter().any(|(s, _)| s == *u))
            .cloned()
            .collect();
        for unit in ended {
            self.close(&unit, now);
        }
        for (unit, owners) in seen {
            self.open(unit, owners, now, handles);
        }
    }

    fn close(&mut self, unit: &str, now: Duration) {
        if let Some((index, _)) = self.active.remove(unit)
            && let Some(Violation::DoubleTrust { until, .. }) = self.violations.get_mut(index)
        {
            *until = Some(now);
        }
    }

    fn open(
        &mut self,
        unit: String,
        owners: Owners,
        now: Duration,
        handles: &[Option<(&str, &WorkerHandle)>],
    ) {
        if self.active.get(&unit).is_some_and(|(_, o)| *o == owners) {
            return;
        }
        self.close(&unit, now);
        if self.ever.insert(unit.clone()) {
            self.metrics.doubly_trusted_units += 1;
        }
        let named = owners
            .iter()
            .filter_map(|(h, f)| Some((handles.get(*h).copied().flatten()?.0.to_owned(), *f)))
            .collect();
        self.active
            .insert(unit.clone(), (self.violations.len(), owners));
        self.violations.push(Violation::DoubleTrust {
            unit,
            since: now,
            until: None,
            owners: named,
        });
    }
}

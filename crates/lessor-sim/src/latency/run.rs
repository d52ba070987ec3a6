//! The executor: poll what is ready, else advance the clock; check after every step.

use std::task::{Context, Poll, Waker};
use std::time::Duration;

use lease_core::{Clock, FencingToken};

use super::{
    Disruption, LatencySim, Metrics, Status, Violation, WorkerCost, lock_ledger, lock_link,
};
use lease_core::LossReason;
use lessor_partition::{Checkpoint, FleetEvent, UnitEnd, WorkerHandle};

impl LatencySim {
    /// Runs one step: polls one ready future of a running worker (or of a foreign holder), or,
    /// when none is ready, advances the clock to the next sleep end, pause end, trust deadline
    /// or scheduled fault. Then checks the property. Returns `false` if nothing can happen.
    pub fn step(&mut self) -> bool {
        if !self.poll_one() {
            let Some(next) = self.next_wakeup() else {
                return false;
            };
            self.advance_to(next);
        }
        self.check();
        true
    }

    /// Runs for `duration` of simulated time.
    pub fn run_for(&mut self, duration: Duration) {
        let end = self.now() + duration;
        loop {
            if self.poll_one() {
                self.check();
                continue;
            }
            match self.next_wakeup() {
                Some(next) if next <= end => self.advance_to(next),
                _ => {
                    self.advance_to(end);
                    self.check();
                    return;
                }
            }
            self.check();
        }
    }

    /// Runs until `done` holds (checked after every step), for at most `limit`. Returns how long
    /// it took.
    pub fn run_until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut(&Self) -> bool,
    ) -> Option<Duration> {
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

    /// Runs until every unit has a running owner, for at most `limit`.
    pub fn run_until_all_owned(&mut self, limit: Duration) -> Option<Duration> {
        self.run_until(limit, Self::all_owned)
    }

    /// Whether every unit is held by a running worker whose session is within its deadline.
    pub fn all_owned(&self) -> bool {
        self.tracker.unowned == 0
    }

    /// How many units have no running owner now.
    pub fn unowned(&self) -> usize {
        self.tracker.unowned
    }

    /// Every violation so far: double trust episodes, then checkpoint violations.
    pub fn violations(&self) -> Vec<Violation> {
        let mut all = self.tracker.violations.clone();
        all.extend(lock_ledger(&self.ledger).violations.iter().cloned());
        all
    }

    /// The fleet's metrics so far.
    pub fn metrics(&self) -> Metrics {
        let mut metrics = self.tracker.metrics.clone();
        let ledger = lock_ledger(&self.ledger);
        metrics.saves_accepted = ledger.saves_accepted;
        metrics.saves_refused = ledger.saves_refused;
        metrics.loads_failed = ledger.loads_failed;
        metrics
    }

    /// Each fault applied so far, with how long the fleet took to own every unit again.
    pub fn disruptions(&self) -> &[Disruption] {
        &self.disruptions
    }

    /// Faults that could not be applied (a worker that could not be built) and breaches of the
    /// checker's premise (a worker trusting a unit it never reported gaining), in words.
    pub fn errors(&self) -> &[String] {
        &self.errors
    }

    /// Each worker's counters, summed over its processes.
    pub fn costs(&self) -> Vec<WorkerCost> {
        self.workers
            .iter()
            .map(|slot| {
                let mut cost = slot.past.clone();
                cost.worker = slot.id.clone();
                if let Some(handle) = &slot.handle {
                    cost.add(&handle.stats());
                }
                cost
            })
            .collect()
    }

    /// The fleet's counters: the sum of [`costs`](Self::costs).
    pub fn fleet_cost(&self) -> WorkerCost {
        let mut total = WorkerCost {
            worker: "fleet".to_owned(),
            ..WorkerCost::default()
        };
        for cost in self.costs() {
            total.add(&cost.stats);
        }
        total
    }

    /// Requests sent over worker `worker`'s link (checkpoint requests included), and how many
    /// of them were throttled.
    pub fn link_requests(&self, worker: usize) -> (u64, u64) {
        self.workers.get(worker).map_or((0, 0), |slot| {
            let link = lock_link(&slot.link);
            (link.requests, link.throttled)
        })
    }

    /// Polls one ready future; `false` if none is ready.
    fn poll_one(&mut self) -> bool {
        let n = self.workers.len();
        for k in 0..n {
            let i = (self.cursor + k) % n;
            let slot = &mut self.workers[i];
            if slot.status != Status::Running {
                continue;
            }
            if let Some(run) = slot.run.as_mut().filter(|t| t.is_ready()) {
                self.cursor = i + 1;
                let outcome = run.poll();
                self.observe(i);
                if let Poll::Ready(outcome) = outcome {
                    self.finished(i, outcome.ok());
                }
                return true;
            }
            if let Some(app) = slot.app.as_mut().filter(|t| t.is_ready()) {
                self.cursor = i + 1;
                if app.poll().is_ready() {
                    slot.app = None;
                }
                self.observe(i);
                return true;
            }
        }
        let ready = self.foreign.iter().position(super::task::Task::is_ready);
        if let Some(j) = ready {
            if self.foreign[j].poll().is_ready() {
                self.foreign.swap_remove(j);
            }
            return true;
        }
        false
    }

    /// Takes in worker `i`'s events and its session state after it ran.
    fn observe(&mut self, i: usize) {
        let Some(events) = self.workers[i].events.as_mut() else {
            return;
        };
        let mut queued = Vec::new();
        let mut cx = Context::from_waker(Waker::noop());
        while let Poll::Ready(Some(event)) = events.0.as_mut().poll_next(&mut cx) {
            queued.push(event);
        }
        let mut lost_session = false;
        for event in queued {
            match event {
                FleetEvent::Gained {
                    unit,
                    fencing_token,
                    checkpoint,
                } => self.gained(
                    i,
                    unit,
                    fencing_token,
                    matches!(checkpoint, Checkpoint::Saved(_)),
                ),
                FleetEvent::Lost {
                    unit,
                    fencing_token: fencing,
                    reason,
                } => {
                    if lost_with_session(&reason) {
                        self.tracker.metrics.units_lost_with_session += 1;
                        lost_session = true;
                    }
                    let slot = &mut self.workers[i];
                    if slot.held.get(&unit) == Some(&fencing) {
                        slot.held.remove(&unit);
                        self.tracker.release(i, &unit, slot.covering);
                    }
                }
                // `FleetEvent` is `#[non_exhaustive]`; the checker knows only these two.
                _ => {}
            }
        }
        if lost_session {
            self.tracker.metrics.session_losses += 1;
        }
        self.refresh_cover(i);
    }

    fn gained(&mut self, i: usize, unit: String, fencing: FencingToken, checkpoint: bool) {
        self.tracker.metrics.moves += 1;
        let slot = &mut self.workers[i];
        if slot.spec.checkpoints.is_some() {
            lock_ledger(&self.ledger).gained(&slot.id, &unit, fencing, checkpoint);
        }
        if slot.held.insert(unit.clone(), fencing).is_none() {
            self.tracker.hold(i, &unit, slot.covering);
        }
    }

    /// Whether worker `i` counts as a running owner of what it holds now, and the change made.
    pub(super) fn refresh_cover(&mut self, i: usize) {
        let now = self.clock.monotonic();
        let slot = &mut self.workers[i];
        let covering = slot.status == Status::Running
            && slot
                .handle
                .as_ref()
                .and_then(WorkerHandle::deadline)
                .is_some_and(|deadline| now < deadline);
        if covering != slot.covering {
            slot.covering = covering;
            for unit in slot.held.keys() {
                self.tracker.cover_unit(unit, covering);
            }
        }
    }

    /// Worker `i`'s process returned (a clean stop): it no longer counts; start its replacement.
    fn finished(&mut self, i: usize, stats: Option<lessor_partition::WorkerStats>) {
        self.take_down(i, stats);
        if let Some(spec) = self.workers[i].replace_with.take() {
            self.workers[i].spec = spec;
            if let Err(error) = self.start(i) {
                self.errors
                    .push(format!("cannot restart worker {i}: {error}"));
            }
        }
    }

    /// Ends worker `i`'s process (already returned, or crashed): it no longer counts.
    pub(super) fn take_down(&mut self, i: usize, stats: Option<lessor_partition::WorkerStats>) {
        let slot = &mut self.workers[i];
        let stats = stats.or_else(|| slot.handle.as_ref().map(WorkerHandle::stats));
        if let Some(stats) = stats {
            slot.past.add(&stats);
        }
        for unit in std::mem::take(&mut slot.held).into_keys() {
            self.tracker.release(i, &unit, slot.covering);
        }
        slot.covering = false;
        slot.status = Status::Down;
        for disruption in &mut self.disruptions[self.recovered..] {
            if disruption.waiting_for == Some(i) {
                disruption.waiting_for = None;
            }
        }
        slot.handle = None;
        slot.events = None;
        slot.run = None;
        slot.app = None;
        lock_ledger(&self.ledger).forget_pending(&slot.id);
    }

    /// Verifies the checker's premise, once per simulated second: a worker trusts only units
    /// it reported gaining and has not reported losing. A breach is an error of the simulator.
    fn audit(&mut self) {
        for slot in &self.workers {
            let Some(handle) = &slot.handle else {
                continue;
            };
            for unit in handle.owned_units().into_keys() {
                if !slot.held.contains_key(&unit) && self.errors.len() < 100 {
                    self.errors.push(format!(
                        "{} trusts {unit} without a Gained event the simulator saw",
                        slot.id
                    ));
                }
            }
        }
    }

    /// The next instant anything happens on its own: a sleep ends, a pause ends, a scheduled
    /// fault is due, or a live process's session deadline passes.
    fn next_wakeup(&self) -> Option<Duration> {
        let now = self.now();
        let mono = self.clock.monotonic();
        let sleep = self
            .clock
            .next_sleep_deadline()
            .map(|d| now + d.saturating_duration_since(mono));
        let pause = self.workers.iter().filter_map(|s| match s.status {
            Status::Paused { until } => Some(until),
            _ => None,
        });
        let deadline = self
            .workers
            .iter()
            .filter_map(|s| s.handle.as_ref()?.deadline())
            .filter(|d| *d > mono)
            .map(|d| now + d.saturating_duration_since(mono));
        let fault = self.schedule.keys().next().map(|(at, _)| *at);
        sleep
            .into_iter()
            .chain(pause)
            .chain(deadline)
            .chain(fault)
            .min()
    }

    /// Advances the clock to `at`, accounting the time, then applies what is due.
    fn advance_to(&mut self, at: Duration) {
        let now = self.now();
        if at > now {
            self.tracker.elapse(at - now);
            self.clock.advance(at - now);
        }
        while let Some(entry) = self.schedule.first_entry() {
            if entry.key().0 > at {
                break;
            }
            let fault = entry.remove();
            self.apply(fault);
        }
        for i in 0..self.workers.len() {
            if let Status::Paused { until } = self.workers[i].status
                && until <= at
            {
                self.workers[i].status = Status::Running;
            }
            self.refresh_cover(i);
        }
    }

    /// Checks the property at this instant, and notes recoveries.
    fn check(&mut self) {
        let now = self.now();
        if now >= self.next_audit {
            self.audit();
            self.next_audit = now + Duration::from_secs(1);
        }
        let handles: Vec<Option<(&str, &WorkerHandle)>> = self
            .workers
            .iter()
            .map(|s| s.handle.as_ref().map(|h| (s.id.as_str(), h)))
            .collect();
        self.tracker.check(now, self.clock.monotonic(), &handles);
        if self.tracker.unowned == 0 {
            for disruption in &mut self.disruptions[self.recovered..] {
                if disruption.all_owned_after.is_none() && disruption.waiting_for.is_none() {
                    disruption.all_owned_after = Some(now - disruption.at);
                }
            }
            while self
                .disruptions
                .get(self.recovered)
                .is_some_and(|d| d.all_owned_after.is_some())
            {
                self.recovered += 1;
            }
        }
    }
}

/// Whether a unit went because its worker's session could no longer be trusted (renewals that did
/// not answer in time or failed until the deadline). A session refused by the store reports the
/// store's `NotOwned` reason, which a unit's own takeover or expiry also reports: not counted.
fn lost_with_session(reason: &UnitEnd) -> bool {
    matches!(
        reason,
        UnitEnd::Lost(LossReason::DeadlinePassed | LossReason::BackendFailing(_))
    )
}

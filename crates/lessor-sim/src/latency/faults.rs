//! Faults, now or on a schedule; holders that are not workers; checkpoint failures.

use std::time::Duration;

use lease_core::{AcquireOptions, Clock, FencingToken, LeaseBackend, LeaseKey, LeaseToken};

use super::task::Task;
use super::{
    Disruption, FLEET, Fault, Latency, LatencySim, Status, WorkerSpec, lock_ledger, lock_link,
};

impl LatencySim {
    /// Applies `fault` now, and records it as a [`Disruption`] (a latency change or the end of a
    /// pause is not one).
    pub fn apply(&mut self, fault: Fault) {
        let worker = fault.worker();
        let Some(slot) = self.workers.get_mut(worker) else {
            self.errors.push(format!("{fault}: no such worker"));
            return;
        };
        let now = self.clock.elapsed();
        let text = fault.to_string();
        let disrupts = !matches!(fault, Fault::SetLatency { .. } | Fault::Resume { .. });
        let down = slot.status == Status::Down;
        let waits = !down && matches!(fault, Fault::Stop { .. } | Fault::Replace { .. });
        match fault {
            Fault::Pause { duration, .. } => {
                slot.status = match slot.status {
                    Status::Running => Status::Paused {
                        until: now + duration,
                    },
                    Status::Paused { until } => Status::Paused {
                        until: until.max(now + duration),
                    },
                    Status::Down => Status::Down,
                };
                self.refresh_cover(worker);
            }
            Fault::Resume { .. } => {
                if let Status::Paused { .. } = slot.status {
                    slot.status = Status::Running;
                }
                self.refresh_cover(worker);
            }
            Fault::Crash { .. } if !down => self.take_down(worker, None),
            Fault::Restart { spec, .. } => {
                if !down {
                    self.take_down(worker, None);
                }
                self.restart_slot(worker, spec);
            }
            Fault::Stop { .. } => {
                if let Some(handle) = &slot.handle {
                    handle.stop();
                }
            }
            Fault::Start { spec, .. } if down => self.restart_slot(worker, spec),
            Fault::Replace { spec, .. } if down => self.restart_slot(worker, Some(spec)),
            Fault::Replace { spec, .. } => {
                slot.replace_with = Some(spec);
                if let Some(handle) = &slot.handle {
                    handle.stop();
                }
            }
            Fault::SetLatency { latency, .. } => lock_link(&slot.link).latency = latency,
            Fault::Crash { .. } | Fault::Start { .. } => {}
        }
        if disrupts {
            self.disruptions.push(Disruption {
                fault: text,
                at: now,
                all_owned_after: None,
                waiting_for: waits.then_some(worker),
            });
        }
    }

    fn restart_slot(&mut self, worker: usize, spec: Option<WorkerSpec>) {
        if let Some(spec) = spec {
            self.workers[worker].spec = spec;
        }
        if let Err(error) = self.start(worker) {
            self.errors
                .push(format!("cannot start worker {worker}: {error}"));
        }
    }

    /// Applies `fault` at simulated time `at` (at once if `at` has passed).
    pub fn schedule(&mut self, at: Duration, fault: Fault) {
        self.scheduled += 1;
        self.schedule.insert((at, self.scheduled), fault);
    }

    /// Pauses worker `worker` for `duration` now (see [`Fault::Pause`]).
    pub fn pause(&mut self, worker: usize, duration: Duration) {
        self.apply(Fault::Pause { worker, duration });
    }

    /// Ends worker `worker`'s pause now (see [`Fault::Resume`]).
    pub fn resume(&mut self, worker: usize) {
        self.apply(Fault::Resume { worker });
    }

    /// Crashes worker `worker` now (see [`Fault::Crash`]).
    pub fn crash(&mut self, worker: usize) {
        self.apply(Fault::Crash { worker });
    }

    /// Restarts worker `worker` now under the same id and configuration (see [`Fault::Restart`]).
    pub fn restart(&mut self, worker: usize) {
        self.apply(Fault::Restart { worker, spec: None });
    }

    /// Asks worker `worker` to shut down cleanly now (see [`Fault::Stop`]).
    pub fn stop(&mut self, worker: usize) {
        self.apply(Fault::Stop { worker });
    }

    /// Starts a crashed or stopped worker again now (see [`Fault::Start`]).
    pub fn start_again(&mut self, worker: usize) {
        self.apply(Fault::Start { worker, spec: None });
    }

    /// Sets worker `worker`'s request latency from now on.
    pub fn set_latency(&mut self, worker: usize, latency: Latency) {
        self.apply(Fault::SetLatency { worker, latency });
    }

    /// Makes worker `worker` leave cleanly at `from`, come back `period` later, leave again
    /// `period` after that, and so on until `until`.
    pub fn schedule_flapping(
        &mut self,
        worker: usize,
        from: Duration,
        period: Duration,
        until: Duration,
    ) {
        let (mut at, mut leave) = (from, true);
        while at < until && !period.is_zero() {
            let fault = if leave {
                Fault::Stop { worker }
            } else {
                Fault::Start { worker, spec: None }
            };
            self.schedule(at, fault);
            at += period;
            leave = !leave;
        }
    }

    /// A rolling configuration change: worker `i` is replaced ([`Fault::Replace`]) at
    /// `from + i * gap` with `spec(i, its current spec)`.
    pub fn schedule_rolling(
        &mut self,
        from: Duration,
        gap: Duration,
        spec: impl Fn(usize, &WorkerSpec) -> WorkerSpec,
    ) {
        for worker in 0..self.workers.len() {
            let spec = spec(worker, &self.workers[worker].spec);
            let at = from + gap * u32::try_from(worker).unwrap_or(u32::MAX);
            self.schedule(at, Fault::Replace { worker, spec });
        }
    }

    /// Makes `unit` held by a holder that follows no fleet protocol (its token is not a fleet
    /// token) and renews its lease of `lease` every `renew_every`, forever: acquired directly on
    /// the shared store, now. Returns whether the unit was free to take.
    pub fn hold_foreign(&mut self, unit: &str, lease: Duration, renew_every: Duration) -> bool {
        let units = format!("fleet/{FLEET}/units");
        let Ok(key) = LeaseKey::with_sort_key(units.as_str(), unit) else {
            return false;
        };
        let Ok(token) = LeaseToken::new(format!("foreign-holder-{}", self.foreign.len())) else {
            return false;
        };
        let options = AcquireOptions::default()
            .with_owner("foreign holder")
            .with_token(token);
        let store = self.store.clone();
        let Ok(mut held) = pollster::block_on(store.try_acquire(&key, lease, &options)) else {
            return false;
        };
        let clock = self.clock.clone();
        self.foreign.push(Task::new(async move {
            loop {
                clock.sleep(renew_every).await;
                match store.renew(&held, lease).await {
                    Ok(renewed) => held = renewed,
                    Err(_) => return,
                }
            }
        }));
        true
    }

    /// Makes the next `times` checkpoint loads of `unit` fail with a transient error, after
    /// their latency, without reaching the store.
    pub fn fail_checkpoint_loads(&mut self, unit: &str, times: u32) {
        lock_ledger(&self.ledger).fail_loads(unit, times);
    }

    /// Checkpoint saves worker `worker`'s process has sent that have not reached the store yet,
    /// as `(unit, fencing)`.
    pub fn pending_saves(&self, worker: usize) -> Vec<(String, FencingToken)> {
        self.workers
            .get(worker)
            .map(|slot| lock_ledger(&self.ledger).pending_saves(&slot.id))
            .unwrap_or_default()
    }
}

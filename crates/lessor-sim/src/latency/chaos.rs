//! The seeded chaos run the tests assert on and the benchmark reports: 16 workers, 256 units,
//! 2 to 40 ms per request, checkpoints, pauses, crashes, restarts under the same id, a flapping
//! worker and a rolling configuration change.

use std::time::Duration;

use super::{
    CheckpointKind, Disruption, Fault, Latency, LatencySim, Violation, WorkerSpec, recovery_bound,
};
use crate::Rng;

/// What a [`chaos`] run measured.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ChaosReport {
    /// The seed.
    pub seed: u64,
    /// Faults applied (pauses, crashes, restarts, flaps, configuration changes).
    pub faults: usize,
    /// Time during which some unit had two trusting owners.
    pub double_trust: Duration,
    /// Checkpoint saves the store accepted.
    pub saves_accepted: u64,
    /// Checkpoint saves the store refused (stale owners).
    pub saves_refused: u64,
    /// The slowest time from a fault to every unit owned again.
    pub slowest_recovery: Option<Duration>,
    /// The bound [`recovery_bound`] gives for this fleet.
    pub bound: Duration,
    /// Faults after which the units were not all owned again within the bound.
    pub slow: Vec<String>,
    /// Safety violations: double trust, checkpoints going backwards.
    pub violations: Vec<Violation>,
    /// Simulator errors (its checker's premise failing): must be empty.
    pub errors: Vec<String>,
    /// Units gained, over the whole run.
    pub moves: u64,
}

/// Runs 600 simulated seconds of chaos with `seed` (see the module docs).
pub fn chaos(seed: u64) -> ChaosReport {
    chaos_with(seed, WorkerSpec::new())
}

/// [`chaos`] with every worker built from `base` (plus the run's checkpoints and saves): for
/// instance [`WorkerSpec::with_assigner`], so that the assigner is paused, crashed, restarted and
/// rolled like any worker.
pub fn chaos_with(seed: u64, base: WorkerSpec) -> ChaosReport {
    let spec = base
        .with_checkpoints(CheckpointKind::Store)
        .with_saves_every(Duration::from_secs(2));
    let latency = Latency::uniform(Duration::from_millis(2), Duration::from_millis(40));
    let mut sim = LatencySim::new(256, seed).with_latency(latency.clone());
    for _ in 0..16 {
        // The default spec is valid, so this cannot fail; a failure shows in `errors`.
        let _ = sim.add_worker(spec.clone());
    }
    let s = Duration::from_secs;
    sim.schedule_flapping(15, s(50), s(30), s(560));
    sim.schedule_rolling(s(300), s(15), |_, spec| spec.clone().with_session(s(20)));
    inject(&mut sim, seed);
    sim.run_for(s(600).saturating_sub(sim.now()));
    report(
        &sim,
        seed,
        recovery_bound(s(20), s(5), 32, 256, latency.worst(), 3),
    )
}

/// A pause (preferably with a save on its way), a crash with a later start, or a restart, every
/// 30 to 50 s, on a random worker.
fn inject(sim: &mut LatencySim, seed: u64) {
    let ms = Duration::from_millis;
    let mut rng = Rng::new(seed);
    let mut at = Duration::from_secs(40);
    while at < Duration::from_secs(560) {
        sim.run_for(at.saturating_sub(sim.now()));
        let worker = usize::try_from(rng.below(15)).unwrap_or(0);
        match rng.below(4) {
            0 | 1 => {
                sim.run_until(Duration::from_secs(3), |s| {
                    !s.pending_saves(worker).is_empty()
                });
                sim.pause(worker, ms(100 + rng.below(24_900)));
            }
            2 => {
                let back = sim.now() + ms(1000 + rng.below(20_000));
                sim.schedule(back, Fault::Start { worker, spec: None });
                sim.crash(worker);
            }
            _ => sim.restart(worker),
        }
        at += ms(30_000 + rng.below(20_000));
    }
}

fn report(sim: &LatencySim, seed: u64, bound: Duration) -> ChaosReport {
    let faults: Vec<Duration> = sim.disruptions().iter().map(|d| d.at).collect();
    // Each recovery, from the latest fault before it (faults that overlap extend each other).
    let recovery = |d: &Disruption| {
        let recovered = d.at + d.all_owned_after?;
        let latest = faults.iter().filter(|at| **at <= recovered).max().copied();
        Some(recovered - latest.unwrap_or(d.at))
    };
    let slow = sim
        .disruptions()
        .iter()
        .filter(|d| recovery(d).is_none_or(|took| took > bound))
        .map(|d| {
            format!(
                "{} at {:?}: all owned after {:?}",
                d.fault, d.at, d.all_owned_after
            )
        })
        .collect();
    let m = sim.metrics();
    ChaosReport {
        seed,
        faults: faults.len(),
        double_trust: m.double_trust_time,
        saves_accepted: m.saves_accepted,
        saves_refused: m.saves_refused,
        slowest_recovery: sim.disruptions().iter().filter_map(recovery).max(),
        bound,
        slow,
        violations: sim.violations(),
        errors: sim.errors().to_vec(),
        moves: m.moves,
    }
}

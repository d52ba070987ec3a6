//! Issue 37, the fleet: a dead worker's units change owner once (item 12), and a fleet whose
//! store was wiped owns every unit again within a session duration and a few intervals,
//! whatever fencing counters the units had reached (item 10). Deterministic simulator, manual
//! clock.

use std::time::Duration;

use lessor_sim::{FleetModel, SimConfig, Simulation};

const INTERVAL: Duration = Duration::from_millis(2500);
const SESSION: Duration = Duration::from_secs(10);

fn assert_safe(sim: &Simulation) {
    assert!(
        sim.violations().is_empty(),
        "{:?}",
        &sim.violations()[..sim.violations().len().min(5)]
    );
    assert_eq!(sim.errors(), 0);
}

/// (gains, losses) of worker `index` so far.
fn moves(sim: &Simulation, index: usize) -> (u64, u64) {
    sim.worker_stats(index).map_or((0, 0), |s| (s.gains, s.losses))
}

/// W = 8, half of them killed at once: every unit of the dead is gained once, by the member
/// the plan deals it to, and the assigner hands nothing on. Before, the assigner took every dead
/// member's unit itself and then handed most of them on (two moves, two restarts of each
/// unit's work).
#[test]
fn a_dead_workers_units_change_owner_once() {
    let units = 2048;
    let mut sim = Simulation::new(SimConfig::new(units, 5));
    for _ in 0..8 {
        sim.join();
    }
    assert!(sim.run_until_balanced(INTERVAL * 40).is_some());
    sim.run_for(INTERVAL * 4);
    assert!(sim.is_balanced());
    let assigner = sim.assigner().expect("an assigner is elected");
    let victims: Vec<usize> = sim
        .running()
        .into_iter()
        .filter(|&i| i != assigner)
        .take(4)
        .collect();
    let dead_units: usize = victims.iter().map(|&i| sim.owned_by(i)).sum();
    let survivors: Vec<usize> = sim
        .running()
        .into_iter()
        .filter(|i| !victims.contains(i))
        .collect();
    let before: Vec<(u64, u64)> = survivors.iter().map(|&i| moves(&sim, i)).collect();
    for &victim in &victims {
        sim.crash(victim);
    }
    let owned_after = sim
        .run_until_all_owned(SESSION * 6)
        .expect("the dead workers' units are owned again");
    let balanced_after = sim
        .run_until_balanced(SESSION * 6)
        .map(|t| t + owned_after)
        .expect("the survivors balance");
    sim.run_for(INTERVAL * 4);
    let mut gained = 0;
    let mut lost = 0;
    let mut assigner_gained = 0;
    let mut assigner_lost = 0;
    for (&i, &(gains, losses)) in survivors.iter().zip(&before) {
        let (g, l) = moves(&sim, i);
        gained += g - gains;
        lost += l - losses;
        if i == assigner {
            (assigner_gained, assigner_lost) = (g - gains, l - losses);
        }
    }
    eprintln!(
        "W=8 L={units}, 4 killed ({dead_units} units): all owned after {owned_after:?}, balanced \
         after {balanced_after:?}; survivors gained {gained} units and handed {lost} on (the \
         assigner gained {assigner_gained}, handed {assigner_lost} on)"
    );
    assert_eq!(lost, 0, "units handed on after the takeover");
    assert_eq!(gained, dead_units as u64, "every dead member's unit gained once");
    assert!(owned_after <= SESSION + INTERVAL * 3, "owned again after {owned_after:?}");
    assert_safe(&sim);
}

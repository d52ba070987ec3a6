//! Issue 24: takeover at any unit count (expired units are taken without the move bound), a
//! flapping worker, and store loss, in the deterministic simulator.

use std::time::Duration;

use lessor_sim::{FleetModel, SimConfig, Simulation};

const INTERVAL: Duration = Duration::from_millis(2500);
const SESSION: Duration = Duration::from_secs(10);

fn long() -> bool {
    std::env::var_os("LEASE_LONG").is_some()
}

fn fleet(units: usize, workers: usize, seed: u64) -> Simulation {
    let mut sim = Simulation::new(SimConfig::new(units, seed));
    for _ in 0..workers {
        sim.join();
    }
    sim
}

fn assert_safe(sim: &Simulation) {
    assert!(
        sim.violations().is_empty(),
        "{:?}",
        &sim.violations()[..sim.violations().len().min(5)]
    );
    assert_eq!(sim.errors(), 0);
}

/// W = 2, L = 16,384: the survivor takes the dead worker's 8,192 units in one tick once it
/// judges the session dead; the move bound (256) no longer spreads them over 32 ticks.
#[test]
fn a_dead_workers_units_are_all_taken_within_the_session_plus_two_intervals_at_any_count() {
    let units = 16_384;
    let mut sim = fleet(units, 2, 1);
    let cold = sim
        .run_until_all_owned(INTERVAL * 40)
        .expect("a cold start owns every unit");
    sim.run_for(INTERVAL * 3);
    assert!(sim.all_owned());
    sim.crash(1);
    let took = sim
        .run_until_all_owned(SESSION * 10)
        .expect("the dead worker's units are owned again");
    eprintln!("L={units} W=2: cold start owned everything in {cold:?}, takeover {took:?}");
    assert!(took <= SESSION + INTERVAL * 2, "took {took:?}");
    assert_eq!(sim.owned_by(0), units);
    assert_safe(&sim);
}

/// One crash (and a new process in its place) every 20 s, 2,048 units per worker: the fleet is
/// fully owned in every tick but those inside a crash's detection window (the session plus two
/// intervals after it, when the dead worker's units cannot yet be judged free), and within that
/// window the units are taken at once. Before, with takes bounded by 256 per tick, the fleet was
/// fully owned in 7 of 160 ticks.
#[test]
fn with_a_crash_every_twenty_seconds_the_fleet_is_owned_outside_detection_windows() {
    let (workers, per_worker, ticks) = if long() {
        (8, 2048, 160)
    } else {
        (4, 2048, 64)
    };
    let units = workers * per_worker;
    let mut sim = fleet(units, workers, 7);
    assert!(sim.run_until_balanced(INTERVAL * 40).is_some());
    let mut owned = 0;
    let mut outside_window = 0;
    let mut owned_outside_window = 0;
    let mut last_crash: Option<Duration> = None;
    for tick in 0..ticks {
        if tick % 8 == 0 {
            let victim = sim.running()[0];
            sim.crash(victim);
            sim.join();
            last_crash = Some(sim.now());
        }
        sim.run_for(INTERVAL);
        let all = sim.all_owned();
        owned += usize::from(all);
        let detecting = last_crash.is_some_and(|at| sim.now() - at <= SESSION + INTERVAL * 2);
        if !detecting {
            outside_window += 1;
            owned_outside_window += usize::from(all);
        }
    }
    eprintln!(
        "W={workers} L={units}, a crash every 20 s: fully owned in {owned} of {ticks} ticks; \
         outside the detection windows in {owned_outside_window} of {outside_window}"
    );
    assert_eq!(owned_outside_window, outside_window);
    assert_safe(&sim);
}

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
        (2, 2048, 64)
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

/// The same worker id crash-looping: up 8 s, down 4 s, 10 s sessions, for three minutes. Its
/// units are taken over when its session is judged dead, as any crashed worker's are: no unit
/// stays unowned longer than a session plus two intervals (and the tick in which it is taken).
/// Before, a restarted incarnation's new session was a live member that the plan dealt its old
/// units back to, so they stayed unowned 146-187 s of the three minutes.
#[test]
fn a_flapping_workers_units_are_taken_over_like_any_dead_workers() {
    let step = Duration::from_millis(250);
    for seed in [3, 4] {
        let mut sim = fleet(64, 4, seed);
        assert!(sim.run_until_balanced(INTERVAL * 20).is_some());
        let flapper = 3;
        let start = sim.now();
        let mut unowned_since: Option<Duration> = None;
        let mut unowned_total = Duration::ZERO;
        let mut longest = Duration::ZERO;
        let mut crashes = 0;
        let mut up = true;
        let mut phase_end = start + Duration::from_secs(8);
        while sim.now() - start < Duration::from_secs(180) {
            if sim.now() >= phase_end {
                if up {
                    sim.crash(flapper);
                    crashes += 1;
                    phase_end = sim.now() + Duration::from_secs(4);
                } else {
                    sim.restart(flapper);
                    phase_end = sim.now() + Duration::from_secs(8);
                }
                up = !up;
            }
            sim.run_for(step);
            if sim.all_owned() {
                if let Some(since) = unowned_since.take() {
                    longest = longest.max(sim.now() - since);
                }
            } else {
                unowned_since.get_or_insert(sim.now() - step);
                unowned_total += step;
            }
        }
        if let Some(since) = unowned_since {
            longest = longest.max(sim.now() - since);
        }
        eprintln!(
            "seed {seed}: {crashes} crashes in 180 s; some unit unowned for {unowned_total:?} \
             in all, {longest:?} at the longest"
        );
        assert!(
            longest <= SESSION + INTERVAL * 3,
            "seed {seed}: unowned for {longest:?} at a stretch, {unowned_total:?} in all"
        );
        assert_safe(&sim);
    }
}

/// The store loses everything mid-run (a memory store wiped, as a table deleted and re-created
/// or an emulator restarted): every unit whose checkpoint vanished is reported to the
/// application (its `Gained` carries [`Checkpoint::Lost`](lessor_partition::Checkpoint::Lost)),
/// none is reported as never saved, no unit is trusted twice, and the fleet owns everything
/// again. Before, the new owners read nothing for every vanished checkpoint, exactly as for a
/// unit never saved.
#[test]
fn a_wiped_store_reports_every_vanished_checkpoint() {
    use lessor_partition::{Checkpoint, FleetEvent};
    use std::collections::BTreeSet;
    for (seed, resave, pause) in [(21, false, false), (22, true, false), (23, false, true)] {
        let units = 64;
        let mut sim = Simulation::new(SimConfig::new(units, seed).with_checkpoints());
        for _ in 0..4 {
            sim.join();
        }
        assert!(sim.run_until_balanced(INTERVAL * 20).is_some());
        // Moves first, so the units' fencing tokens are past the ones a re-created store starts
        // its counters at.
        for _ in 0..3 {
            let victim = sim.running()[0];
            sim.shutdown(victim);
            sim.join();
            assert!(sim.run_until_balanced(INTERVAL * 20).is_some());
        }
        let data = |unit: &str, fencing: lease_core::FencingToken| {
            format!("{unit}@{fencing}").into_bytes()
        };
        // The application saves progress every interval for a while.
        for _ in 0..3 {
            assert_eq!(sim.save_checkpoints(&data), units);
            sim.run_for(INTERVAL);
        }
        let _ = sim.take_events();
        let workers = sim.running();
        let stats_before: u64 = workers.iter().map(|&i| sim_stats(&sim, i).0).sum();
        assert_eq!(stats_before, 0);
        if pause {
            // A worker frozen across the loss still trusts its units until its deadline.
            let frozen = sim.running()[0];
            sim.pause(frozen, SESSION);
        }
        sim.wipe_store();
        // Old owners still trust their units until their next renewal fails: with `resave`
        // they save again from memory into the empty store.
        let resaved = if resave {
            sim.save_checkpoints(&data)
        } else {
            0
        };
        let mut reported: BTreeSet<String> = BTreeSet::new();
        let mut restored: BTreeSet<String> = BTreeSet::new();
        let mut silent: BTreeSet<String> = BTreeSet::new();
        // Every worker finds its session gone within an interval and drops its units.
        sim.run_for(INTERVAL * 2);
        let took = sim
            .run_until(INTERVAL * 40, &mut |s: &Simulation| s.all_owned())
            .map(|t| t + INTERVAL * 2);
        for (_, event) in sim.take_events() {
            if let FleetEvent::Gained {
                unit, checkpoint, ..
            } = event
            {
                match checkpoint {
                    Checkpoint::Saved(_) => restored.insert(unit),
                    Checkpoint::Lost => reported.insert(unit),
                    _ => silent.insert(unit),
                };
            }
        }
        let losses: u64 = workers.iter().map(|&i| sim_stats(&sim, i).0).sum();
        eprintln!(
            "seed {seed}, re-saves from memory {resaved}, a pause {pause}: owned again after {took:?}; {} \
             checkpoints reported lost, {} read back (re-saved), {} read as never saved; {losses} \
             workers saw the loss",
            reported.len(),
            restored.len(),
            silent.len()
        );
        assert!(took.is_some(), "not owned again: {:?}", sim.unowned_units());
        assert!(
            silent.is_empty(),
            "vanished checkpoints read as never saved: {silent:?}"
        );
        assert_eq!(reported.len() + restored.len(), units);
        assert!(losses >= 1);
        assert_safe(&sim);
    }
}

/// (store losses seen, checkpoints reported lost) of worker `index`.
fn sim_stats(sim: &Simulation, index: usize) -> (u64, u64) {
    sim.worker_stats(index)
        .map_or((0, 0), |s| (s.store_losses, s.checkpoints_lost))
}

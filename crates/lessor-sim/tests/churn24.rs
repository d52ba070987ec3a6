//! Churn without full listings (issue 24): with an assigner alive, a crash plus a replacement
//! costs the fleet `O(W + units moved)` records beyond the assigner's own units listing, where
//! every worker used to list all `L` units about twice per change, and then the sessions once.
//!
//! `LEASE_LONG=1` adds the cells W in {8, 128} x L in {1,024, 16,384} (minutes in a debug
//! build); `cargo test -p lessor-sim --test churn24 -- --nocapture` prints the figures.

use lessor_sim::scale::{ScaleCell, run_cell};

/// Records the fleet reads per crash plus replacement, beyond its steady state: the churn
/// cell's fleet-wide records a tick less the steady cell's, times the 8 ticks between changes.
fn records_per_change(workers: usize, units: usize, ticks: u32) -> (f64, u32, usize) {
    let cell = ScaleCell::new(workers, units)
        .with_assigner()
        .with_ticks(ticks);
    let steady = run_cell(&cell);
    let churn = run_cell(&cell.clone().with_churn());
    let per_change = (churn.fleet_records_per_tick - steady.fleet_records_per_tick) * 8.0;
    (
        per_change,
        churn.ticks_not_owned,
        steady.violations + churn.violations,
    )
}

#[test]
fn a_crash_and_a_join_cost_units_moved_not_a_listing_per_worker() {
    let mut cells = vec![(8, 1024), (64, 256)];
    if std::env::var("LEASE_LONG").is_ok_and(|v| v == "1") {
        cells.extend([(128, 1024), (8, 16_384), (128, 16_384)]);
    }
    for (workers, units) in cells {
        let (per_change, not_owned, violations) = records_per_change(workers, units, 16);
        println!(
            "W={workers} L={units}: {per_change:.0} records per crash + replacement \
             ({:.1} L), {not_owned} of 16 ticks not fully owned",
            per_change / units as f64
        );
        assert_eq!(violations, 0);
        // The assigner lists the units when each change reaches it (twice: the crash, the
        // join); every other worker reads the sessions the assigner names (the suspect, the
        // joiner), its take list and the units it takes. Every worker listing the sessions
        // once per change would be about 2 W^2 more; every worker listing all units twice per
        // change about 2 W L.
        assert!(
            per_change <= 2.0 * units as f64 + 16.0 * workers as f64,
            "{per_change:.0} records per change"
        );
    }
}

/// The real-store takeover (`lessor-partition/tests/dynamo_assigner.rs`: 8 workers, 2 s
/// sessions, 0.5 s interval, one killed) in the latency simulator, every request 5 to 15 ms:
/// every unit is owned again within a session duration plus two intervals. A follower judges a
/// death only from its own reads of the suspect's session, which start when the assigner names
/// it; the assigner, which lists the sessions every tick, takes the dead member's units itself.
#[test]
fn a_killed_followers_units_are_owned_again_within_a_session_and_two_intervals() {
    use lessor_sim::latency::{Latency, LatencySim, WorkerSpec};
    use std::time::Duration;
    let (session, interval) = (Duration::from_secs(2), Duration::from_millis(500));
    let spec = || {
        WorkerSpec::new()
            .with_assigner()
            .with_session(session)
            .with_interval(interval)
    };
    let mut worst = Duration::ZERO;
    for seed in [3, 4] {
        let mut sim = LatencySim::new(512, seed).with_latency(Latency::uniform(
            Duration::from_millis(5),
            Duration::from_millis(15),
        ));
        for _ in 0..8 {
            sim.add_worker(spec()).expect("a valid worker spec");
        }
        let settled = sim.run_until(Duration::from_secs(60), |s| {
            s.all_owned() && s.assigner().is_some()
        });
        assert!(settled.is_some(), "the fleet settles");
        sim.run_for(session * 2);
        let assigner = sim.assigner().expect("an assigner");
        sim.crash((assigner + 1) % 8);
        let took = sim.run_until_all_owned(Duration::from_secs(30));
        assert!(sim.violations().is_empty(), "{:?}", sim.violations());
        let took = took.expect("every unit owned again");
        println!("seed {seed}: every unit owned again {took:?} after the kill");
        worst = worst.max(took);
    }
    let bound = session + interval * 2;
    assert!(worst <= bound, "took {worst:?}, bound {bound:?}");
}

//! Churn without full listings (issue 24): with an assigner alive, a crash plus a replacement
//! costs the fleet `O(units moved)` records beyond the assigner's own units listing, where every
//! worker used to list all `L` units about twice per change.
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
    let mut cells = vec![(8, 1024)];
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
        // join); every other worker reads its take list and the units it takes, and lists the
        // sessions once per change. Every worker listing all units twice per change would be
        // about 2 W L.
        assert!(
            per_change <= 2.0 * units as f64 + (workers * workers) as f64 * 2.0,
            "{per_change:.0} records per change"
        );
    }
}

//! The fleet under chaos in the latency simulator: every request takes 2 to 40 ms, workers
//! interleave request by request, and the property (no unit trusted by two workers, no
//! checkpoint backwards) is checked after every request. Seeded runs of
//! [`lessor_sim::latency::chaos`].
//!
//! Writes a markdown section to `$LEASE_BENCH_OUT/41-lessor-chaos.md` when that variable is set,
//! and prints it. Without `--bench` (as `cargo test --all-targets` runs it) or with
//! `LEASE_BENCH_QUICK=1`, one seed.

#[path = "common/mod.rs"]
mod section;

use std::fmt::Write as _;
use std::time::Instant;

use lessor_sim::latency::chaos;

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench")
        || std::env::var("LEASE_BENCH_QUICK").is_ok_and(|v| v == "1");
    let seeds: Vec<u64> = if quick { vec![7] } else { (1..=6).collect() };
    let started = Instant::now();
    let mut out = String::from(
        "## lessor-partition: chaos under latency\n\n\
         16 workers, 256 units, 2-40 ms per request (half before it lands), checkpoints saved \
         every 2 s; over 600 simulated seconds: pauses of 0.1-25 s (preferably with a save in \
         flight), crashes and later starts, restarts under the same id, a worker leaving and \
         rejoining every 30 s, a rolling change from 10 s to 20 s sessions. Checked after every \
         request. Recovery: from the latest fault to every unit owned again.\n\n\
         | seed | faults | double trust | violations | saves accepted | stale saves refused | \
         moves | slowest recovery | bound |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut failed = false;
    for seed in seeds {
        let r = chaos(seed);
        failed |= !r.violations.is_empty() || !r.errors.is_empty() || !r.slow.is_empty();
        let _ = writeln!(
            out,
            "| {seed} | {} | {:.1} s | {} | {} | {} | {} | {} | {:.0} s |",
            r.faults,
            r.double_trust.as_secs_f64(),
            r.violations.len(),
            r.saves_accepted,
            r.saves_refused,
            r.moves,
            r.slowest_recovery.map_or_else(
                || "never".to_owned(),
                |d| format!("{:.1} s", d.as_secs_f64())
            ),
            r.bound.as_secs_f64(),
        );
    }
    let _ = writeln!(
        out,
        "\nGenerated in {:.1} s of wall time.\n",
        started.elapsed().as_secs_f64()
    );
    section::publish("41-lessor-chaos.md", &out);
    if failed {
        eprintln!("chaos found a violation, a simulator error or a slow recovery");
        std::process::exit(1);
    }
}

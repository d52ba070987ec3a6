//! Fleet figures from the deterministic simulator: this crate's protocol beside KCL 2.x.
//!
//! Writes a markdown section to `$LEASE_BENCH_OUT/40-lessor-partition.md` when that variable is
//! set, and prints it. `LEASE_BENCH_QUICK=1` runs fewer seeds and shorter windows.

#[path = "../common/mod.rs"]
mod section;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use lessor_sim::{FleetModel, KclConfig, KclSimulation, SimConfig, Simulation};

mod cost;

const UNITS: [usize; 3] = [64, 1024, 8192];
const MINUTE: f64 = 60.0;

fn ours(units: usize, workers: usize, seed: u64) -> Simulation {
    let mut sim = Simulation::new(SimConfig::new(units, seed));
    for _ in 0..workers {
        sim.join();
    }
    sim
}

fn kcl(units: usize, workers: usize, seed: u64) -> KclSimulation {
    let mut sim = KclSimulation::new(KclConfig::new(units, seed));
    for _ in 0..workers {
        sim.join();
    }
    sim.preassign();
    sim
}

/// Balanced ours, then settled for a few intervals.
fn balanced_ours(units: usize, workers: usize, seed: u64) -> Option<Simulation> {
    let mut sim = ours(units, workers, seed);
    sim.run_until_balanced(Duration::from_secs(600))?;
    sim.run_for(sim.interval() * 4);
    Some(sim)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn fmt_time(d: Option<Duration>, limit: Duration) -> String {
    match d {
        Some(d) if d.as_secs() >= 600 => format!("{:.1} min", secs(d) / MINUTE),
        Some(d) => format!("{:.1} s", secs(d)),
        None => format!("> {:.0} min", secs(limit) / MINUTE),
    }
}

struct Stat {
    values: Vec<f64>,
}

impl Stat {
    fn new() -> Self {
        Self { values: Vec::new() }
    }
    fn push(&mut self, v: f64) {
        self.values.push(v);
    }
    fn mean(&self) -> f64 {
        self.values.iter().sum::<f64>() / self.values.len().max(1) as f64
    }
    fn max(&self) -> f64 {
        self.values.iter().copied().fold(0.0, f64::max)
    }
}

fn main() {
    // `cargo test --all-targets` runs this without `--bench`: a quick smoke test then.
    let quick = !std::env::args().any(|a| a == "--bench")
        || std::env::var("LEASE_BENCH_QUICK").is_ok_and(|v| v == "1");
    let seeds: u64 = if quick { 2 } else { 5 };
    let started = Instant::now();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## lessor-partition: fleet protocol vs KCL 2.x (simulated)\n"
    );
    let _ = writeln!(
        out,
        "Deterministic simulator (`lessor_sim`): real `Worker`s on one `MemoryBackend` \
         with a `ManualClock`, and a model of KCL 2.x as ANCHORS.md describes it. Ours: the \
         assigner on (the default), 10 s session lease, 2.5 s interval, at most 256 moves per tick, no skew bound (expiry by \
         observation only). KCL: 10 s failover, renewals every 3.3 s, taker scan every 20 s, \
         1 steal per scan. A listing or a scan counts as one request; records read are counted \
         separately. {} seeds per timing figure{}.\n",
        seeds,
        if quick { " (quick run)" } else { "" }
    );

    cost::section(&mut out, quick);

    // 2. A join, a crash, a clean shutdown.
    let _ = writeln!(out, "### Joining, crashing, leaving (W = 8)\n");
    let _ = writeln!(
        out,
        "| L | event | ours: time to balanced / all owned | ours: intervals | ours: units moved (min) | KCL: time | KCL: units moved |"
    );
    let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|---:|");
    let kcl_limit = Duration::from_secs(if quick { 3 * 3600 } else { 12 * 3600 });
    for &units in &UNITS {
        let workers = 8;
        for event in ["join", "crash", "shutdown"] {
            let (mut t_ours, mut moves_ours, mut t_kcl, mut moves_kcl) =
                (Stat::new(), Stat::new(), Stat::new(), Stat::new());
            let mut kcl_unfinished = false;
            let minimum = match event {
                "join" => units / (workers + 1),
                _ => units / workers,
            };
            let kcl_seeds = if units >= 8192 && event == "join" {
                1
            } else {
                seeds
            };
            for seed in 0..seeds {
                let Some(mut sim) = balanced_ours(units, workers, seed) else {
                    continue;
                };
                sim.run_for(Duration::from_millis(seed * 613));
                let before = sim.counters();
                let took = match event {
                    "join" => {
                        sim.join();
                        sim.run_until_balanced(Duration::from_secs(600))
                    }
                    "crash" => {
                        sim.crash(3);
                        sim.run_until_all_owned(Duration::from_secs(600))
                    }
                    _ => {
                        sim.shutdown(3);
                        sim.run_until_all_owned(Duration::from_secs(600))
                    }
                };
                assert!(
                    sim.violations().is_empty(),
                    "safety violation: {:?}",
                    sim.violations()
                );
                if let Some(took) = took {
                    t_ours.push(secs(took));
                }
                moves_ours.push(sim.counters().since(&before).moves as f64);
            }
            for seed in 0..kcl_seeds {
                let mut k = kcl(units, workers, seed);
                k.run_for(Duration::from_secs(60) + Duration::from_millis(seed * 613));
                let before = k.counters();
                let took = match event {
                    "join" => {
                        k.join();
                        k.run_until_balanced(kcl_limit)
                    }
                    "crash" => {
                        k.crash(3);
                        k.run_until_all_owned(kcl_limit)
                    }
                    _ => {
                        k.shutdown(3);
                        k.run_until_all_owned(kcl_limit)
                    }
                };
                match took {
                    Some(took) => t_kcl.push(secs(took)),
                    None => kcl_unfinished = true,
                }
                moves_kcl.push(k.counters().since(&before).moves as f64);
            }
            let ours_time = format!(
                "{} (max {})",
                fmt_time(Some(Duration::from_secs_f64(t_ours.mean())), kcl_limit),
                fmt_time(Some(Duration::from_secs_f64(t_ours.max())), kcl_limit)
            );
            let kcl_time = if kcl_unfinished {
                fmt_time(None, kcl_limit)
            } else {
                format!(
                    "{} (max {})",
                    fmt_time(Some(Duration::from_secs_f64(t_kcl.mean())), kcl_limit),
                    fmt_time(Some(Duration::from_secs_f64(t_kcl.max())), kcl_limit)
                )
            };
            let _ = writeln!(
                out,
                "| {units} | {event} | {ours_time} | {:.1} | {:.0} ({minimum}) | {kcl_time} | {:.0} |",
                t_ours.mean() / 2.5,
                moves_ours.mean(),
                moves_kcl.mean(),
            );
        }
    }
    let _ = writeln!(
        out,
        "\n*join*: a ninth worker joins a balanced fleet of 8; time until every worker holds \
         floor or ceil of L/9. *crash*: a worker stops without a word; time until every unit \
         is owned again (ours: bounded by the 10 s session plus two intervals). *shutdown*: a \
         worker stops cleanly (ours releases everything; KCL 2.x hands nothing over). Moves \
         count every change of owner after the event, including KCL's steals.\n"
    );

    // 3. Cold start.
    let _ = writeln!(
        out,
        "### Cold start: W workers start together on an empty table\n"
    );
    let _ = writeln!(
        out,
        "| L | W | ours: time to balanced | ours: moves | KCL: time to balanced | KCL: moves |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|");
    for &(units, workers) in &[(64usize, 8usize), (1024, 8), (1024, 32)] {
        let mut sim = ours(units, workers, 7);
        let took = sim.run_until_balanced(Duration::from_secs(600));
        let moves = sim.counters().moves;
        let mut k = KclSimulation::new(KclConfig::new(units, 7));
        for _ in 0..workers {
            k.join();
        }
        let k_took = k.run_until_balanced(kcl_limit);
        let _ = writeln!(
            out,
            "| {units} | {workers} | {} | {moves} | {} | {} |",
            fmt_time(took, Duration::from_secs(600)),
            fmt_time(k_took, kcl_limit),
            k.counters().moves
        );
    }
    let _ = writeln!(
        out,
        "\nGenerated in {:.1} s of wall time.\n",
        started.elapsed().as_secs_f64()
    );

    section::publish("40-lessor-partition.md", &out);
}

//! The scale table: requests, records and bytes a fleet reads per worker and fleet-wide per
//! tick, W in {2, 8, 32, 128, 1,000} x L in {64, 1,024, 16,384, 100,000}, steady and under churn
//! (a crash and a replacement every 8 ticks), without and with an assigner, priced as DynamoDB on
//! demand.
//!
//! Writes `$LEASE_BENCH_OUT/41-lessor-scale.md` when that variable is set, and prints it.
//! `LEASE_BENCH_QUICK=1` (and the smoke run of `cargo test --all-targets`) runs the small cells
//! only; in a full run every cell with an assigner runs. `LEASE_SCALE_MAX_WORK=N` skips cells
//! whose W x L exceeds N (default: none in a full run), `LEASE_SCALE_MAX_WORK_WITHOUT=N` cells
//! without an assigner whose W x L exceeds N (default 1,000,000: every worker lists every session
//! record every tick, and under churn all L units twice per change, so the bigger ones take
//! minutes each), `LEASE_SCALE_MAX_UNITS=N` cells with more than N units (default 100,000).
//! The W = 1,000 x L = 100,000 cells hold about 6 GB.

#[path = "common/mod.rs"]
mod section;

use std::fmt::Write as _;
use std::time::Instant;

use lessor_sim::scale::{
    ChurnCell, PRICE_DATE, READ_PRICE_PER_MILLION, ScaleCell, ScaleRow, WRITE_PRICE_PER_MILLION,
    run_cell, run_churn, run_kill,
};

const WORKERS: [usize; 5] = [2, 8, 32, 128, 1000];
const UNITS: [usize; 4] = [64, 1024, 16_384, 100_000];

/// The size of a KCL lease or worker-metrics item in the model.
const KCL_ITEM_BYTES: f64 = 300.0;

/// The KCL 3.x model's DynamoDB on-demand cost a month, reads and writes, for `workers` workers
/// and `units` leases (see the section's text for the assumptions).
fn kcl3_month(workers: usize, units: usize) -> f64 {
    let (w, l) = (workers as f64, units as f64);
    let writes_per_second = l / 3.3 + w / 30.0;
    let read_units = |items: f64| (items * KCL_ITEM_BYTES / 4096.0).ceil().max(1.0);
    let reads_per_second = (read_units(l) + read_units(w)) / 10.0 + w * read_units(l / w) / 10.0;
    let month = lessor_sim::scale::MONTH_SECONDS;
    (writes_per_second * WRITE_PRICE_PER_MILLION + reads_per_second * READ_PRICE_PER_MILLION)
        * month
        / 1e6
}

fn row(out: &mut String, r: &ScaleRow, mode: &str, took: f64) {
    let c = &r.cell;
    let _ = writeln!(
        out,
        "| {} | {} | {} | {} | {:.2} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} | {} / {} | ${:.0} | ${:.0} | {} | {:.1} s |",
        c.workers,
        c.units,
        if c.churn { "churn" } else { "steady" },
        mode,
        r.requests_per_worker_tick,
        r.records_per_worker_tick,
        r.bytes_per_worker_tick,
        r.fleet_requests_per_tick,
        r.fleet_records_per_tick,
        r.fleet_bytes_per_tick,
        r.ticks_not_owned,
        c.ticks,
        r.read_cost_month,
        r.write_cost_month,
        r.violations,
        took,
    );
}

/// Records per crash plus replacement: the churn cell's fleet-wide records a tick less the
/// steady cell's, times the 8 ticks between changes; with an assigner, and beside every worker
/// planning where that cell ran. Cells the table skipped are run here (with an assigner).
fn churn_section(
    out: &mut String,
    rows: &mut std::collections::BTreeMap<(usize, usize, bool, bool), f64>,
    quick: bool,
) {
    let cells: &[(usize, usize)] = if quick {
        &[(8, 1024)]
    } else {
        &[(8, 1024), (8, 16_384), (128, 1024), (128, 16_384)]
    };
    let _ = writeln!(
        out,
        "\n### Churn: records per crash + replacement\n\n\
         Fleet-wide records read per change beyond the steady state: (churn cell - steady \
         cell) records a tick x 8 ticks. With an assigner, a follower that must plan reads its \
         take list (one fenced value) and the records of the units listed in it; the assigner \
         lists the units once per change it plans for, and takes a dead member's units itself.\n"
    );
    let _ = writeln!(
        out,
        "| W | L | assigner: records per change | in units of L | every worker plans: records per change |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|");
    for &(workers, units) in cells {
        for churn in [false, true] {
            rows.entry((workers, units, churn, true))
                .or_insert_with(|| {
                    let mut cell = ScaleCell::new(workers, units).with_assigner();
                    if churn {
                        cell = cell.with_churn();
                    }
                    let started = Instant::now();
                    let r = run_cell(&cell);
                    eprintln!(
                        "churn section W={workers} L={units} churn={churn}: {:.1} s",
                        started.elapsed().as_secs_f64()
                    );
                    assert_eq!(r.violations, 0, "units trusted twice in {cell:?}");
                    r.fleet_records_per_tick
                });
        }
        let per_change = |assigner: bool| {
            let steady = rows.get(&(workers, units, false, assigner))?;
            let churn = rows.get(&(workers, units, true, assigner))?;
            Some((churn - steady) * 8.0)
        };
        let with = per_change(true).unwrap_or(f64::NAN);
        let without = per_change(false).map_or_else(|| "not run".to_owned(), |r| format!("{r:.0}"));
        let _ = writeln!(
            out,
            "| {workers} | {units} | {with:.0} | {:.2} | {without} |",
            with / units as f64
        );
    }
}

/// Session duration and interval pairs of the takeover tables.
const TIMINGS: [(u64, u64); 3] = [(10_000, 2_500), (2_000, 500), (1_000, 250)];

/// `d` as `10 s`, `2.5 s` or `500 ms`.
fn short(d: std::time::Duration) -> String {
    match (d.as_secs(), d.subsec_millis()) {
        (0, ms) => format!("{ms} ms"),
        (s, 0) => format!("{s} s"),
        _ => format!("{} s", d.as_secs_f64()),
    }
}

/// The takeover tables: a fleet under steady churn (W = 8, L = 16,384: 2,048 units a worker, a
/// crash and a replacement every 20 s of simulated time) at three session durations, and one
/// kill at W = 2, L = 16,384.
fn takeover_section(out: &mut String, quick: bool) {
    use std::time::Duration;
    let (workers, units, crashes) = if quick { (4, 2048, 2) } else { (8, 16_384, 10) };
    let _ = writeln!(
        out,
        "\n### Takeover under churn\n\n\
         W = {workers}, L = {units} ({} units a worker), with an assigner: every 20 s of \
         simulated time a random running worker crashes and a new one joins, {crashes} times. A \
         tick is *fully owned* when at its end every unit has a running worker that trusts it. \
         The longest stretch not fully owned runs from a crash to the first worker tick after \
         which every unit is owned again (ownership is checked after every worker tick while \
         some unit is unowned). No protocol can re-own a crashed worker's units before its \
         session is judged dead, a session duration `d` after its last renewal (see \
         docs/correctness.md), so at most `1 - (d + I) / 20 s` of the ticks can be fully \
         owned.\n",
        units / workers
    );
    let _ = writeln!(
        out,
        "| d / I | ticks fully owned | % | at most 1 - (d + I) / 20 s | longest stretch not fully owned | bound d + 2I | units trusted twice | simulated in |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for (session, interval) in TIMINGS {
        let (session, interval) = (
            Duration::from_millis(session),
            Duration::from_millis(interval),
        );
        let cell = ChurnCell::new(workers, units, session, interval).with_crashes(crashes);
        let started = Instant::now();
        let r = run_churn(&cell);
        let took = started.elapsed().as_secs_f64();
        eprintln!("takeover under churn d={session:?}: {took:.1} s");
        assert_eq!(r.violations, 0, "units trusted twice in {cell:?}");
        let ceiling = 1.0 - (session + interval).as_secs_f64() / cell.period.as_secs_f64();
        let _ = writeln!(
            out,
            "| {} / {} | {} / {} | {:.1} % | {:.1} % | {} | {:.2} s | {} | {took:.1} s |",
            short(session),
            short(interval),
            r.ticks_owned,
            r.ticks,
            r.owned_fraction() * 100.0,
            ceiling * 100.0,
            r.longest_not_owned.map_or_else(
                || "not closed".to_owned(),
                |d| format!("{:.2} s", d.as_secs_f64())
            ),
            cell.bound().as_secs_f64(),
            r.violations,
        );
    }
    let units = if quick { 2048 } else { 16_384 };
    let _ = writeln!(
        out,
        "\n**One kill**, W = 2, L = {units}, with an assigner: once the fleet is balanced and has \
         run a session duration more, one worker is killed; the time until every unit is owned \
         again (checked after every worker tick).\n"
    );
    let _ = writeln!(
        out,
        "| d / I | killed | every unit owned again after | bound d + 2I | units trusted twice |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|");
    for (session, interval) in TIMINGS {
        let (session, interval) = (
            Duration::from_millis(session),
            Duration::from_millis(interval),
        );
        for victim_is_assigner in [false, true] {
            let (took, violations) = run_kill(2, units, session, interval, victim_is_assigner);
            assert_eq!(violations, 0, "units trusted twice after a kill");
            let _ = writeln!(
                out,
                "| {} / {} | {} | {} | {:.2} s | {violations} |",
                short(session),
                short(interval),
                if victim_is_assigner {
                    "the assigner"
                } else {
                    "the other worker"
                },
                took.map_or_else(
                    || "not within 60 s".to_owned(),
                    |d| format!("{:.2} s", d.as_secs_f64())
                ),
                (session + interval * 2).as_secs_f64(),
            );
        }
    }
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench")
        || std::env::var("LEASE_BENCH_QUICK").is_ok_and(|v| v == "1");
    let limit = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let max_work = limit(
        "LEASE_SCALE_MAX_WORK",
        if quick { 2048 } else { usize::MAX },
    );
    let max_units = limit("LEASE_SCALE_MAX_UNITS", 100_000);
    // Without an assigner every worker lists every session record every tick, and under churn
    // every unit twice per change: the big cells would take minutes each, and the
    // W = 1,000 x L = 64 cell already shows the W^2.
    let max_work_without = limit(
        "LEASE_SCALE_MAX_WORK_WITHOUT",
        if quick { 256 } else { 1_000_000 },
    )
    .min(max_work);
    let started = Instant::now();
    let mut out = String::new();
    let _ = writeln!(out, "## lessor-partition at scale (simulated)\n");
    let _ = writeln!(
        out,
        "Deterministic simulator (`lessor_sim::scale`): real `Worker`s on one `MemoryBackend` \
         with a `ManualClock`, 10 s sessions, 2.5 s interval. Each cell runs until every unit is \
         owned, then measures 32 ticks, with a move bound of one share (L/W) a tick or 256 if more (it \
         throttles moving a live worker's units only: free units and a dead worker's are taken at \
         once); *churn*: a random running worker crashes and a new one \
         joins every 8 ticks. Records and bytes are those the reads return, sized as lease-dynamo's \
         items. Cost: DynamoDB on demand, us-east-1, ${READ_PRICE_PER_MILLION} per million read \
         request units (strongly consistent: one per 4 KB a request returns) and \
         ${WRITE_PRICE_PER_MILLION} per million write request units (one per 1 KB written), \
         prices as of {PRICE_DATE} (after the November 2024 price cut), a 30-day month. \
         {}Cells without an assigner with W x L above {max_work_without} were not run \
         (`LEASE_SCALE_MAX_WORK_WITHOUT`: every worker planning lists all L units twice per \
         change, so those take minutes each){}.\n",
        if max_work == usize::MAX && max_units >= 100_000 {
            "Every cell with an assigner ran. ".to_owned()
        } else {
            format!(
                "Cells with W x L above {max_work} or L above {max_units} were not run \
                 (`LEASE_SCALE_MAX_WORK`, `LEASE_SCALE_MAX_UNITS`). "
            )
        },
        if quick { " (quick run)" } else { "" }
    );
    let _ = writeln!(
        out,
        "| W | L | scenario | mode | req/worker/tick | records/worker/tick | bytes/worker/tick | fleet req/tick | fleet records/tick | fleet bytes/tick | ticks not fully owned | reads $/month | writes $/month | units trusted twice | simulated in |"
    );
    let _ = writeln!(
        out,
        "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut skipped = Vec::new();
    let mut ours = Vec::new();
    let mut rows = std::collections::BTreeMap::new();
    for &workers in &WORKERS {
        for &units in &UNITS {
            if workers * units > max_work || units > max_units {
                skipped.push(format!("{workers} x {units}"));
                continue;
            }
            for (churn, assigner) in [(false, false), (false, true), (true, false), (true, true)] {
                // W = 1,000 without an assigner: the steady cell shows the W^2; its churn cell
                // would take minutes more to say the same.
                if !assigner && churn && workers >= 1000 {
                    continue;
                }
                if !assigner && workers * units > max_work_without {
                    if !churn {
                        skipped.push(format!("{workers} x {units} without an assigner"));
                    }
                    continue;
                }
                let mut cell = ScaleCell::new(workers, units);
                if churn {
                    cell = cell.with_churn();
                }
                if assigner {
                    cell = cell.with_assigner();
                }
                let cell_started = Instant::now();
                let r = run_cell(&cell);
                let took = cell_started.elapsed().as_secs_f64();
                eprintln!("W={workers} L={units} churn={churn} assigner={assigner}: {took:.1} s");
                assert_eq!(r.violations, 0, "units trusted twice in {cell:?}");
                let mode = if assigner {
                    "assigner"
                } else {
                    "every worker plans"
                };
                row(&mut out, &r, mode, took);
                rows.insert((workers, units, churn, assigner), r.fleet_records_per_tick);
                if assigner && !churn {
                    ours.push((workers, units, r.read_cost_month + r.write_cost_month));
                }
            }
        }
    }
    if !skipped.is_empty() {
        let _ = writeln!(
            out,
            "\nNot run (W x L above the limit): {}.",
            skipped.join(", ")
        );
    }
    churn_section(&mut out, &mut rows, quick);
    takeover_section(&mut out, quick);
    let _ = writeln!(
        out,
        "\n### Beside KCL 3.x, as a model (steady state, a month)\n\n\
         KCL 3.x is not simulated here. The model: every lease renewed every 3.3 s (a 10 s \
         failover time), each worker writing its metrics every 30 s, the leader scanning the L \
         leases and W metrics items every 10 s, each worker querying its own L/W leases by \
         owner every 10 s; items of {KCL_ITEM_BYTES} bytes, strongly consistent reads, the same \
         prices.\n"
    );
    let _ = writeln!(
        out,
        "| W | L | ours with an assigner $/month (simulated) | KCL 3.x $/month (model) |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|");
    for (workers, units, cost) in ours {
        let _ = writeln!(
            out,
            "| {workers} | {units} | ${cost:.0} | ${:.0} |",
            kcl3_month(workers, units)
        );
    }
    let _ = writeln!(out, "\nTook {:.1} s.", started.elapsed().as_secs_f64());
    section::publish("41-lessor-scale.md", &out);
}

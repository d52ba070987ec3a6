//! The fleet benchmark on a real store, as the DynamoDB, PostgreSQL and Redis benchmarks all run
//! it: a fleet with its assigner, what it costs on the wire against the simulator's figures for
//! the same fleet, and how soon a killed worker's units are owned again against the bound
//! `d + 2I` (session duration plus two intervals).
//!
//! Eight workers, 1,024 units, 2 s sessions, 0.5 s interval. Every request and every record its
//! reads return is counted on the way to the store (`CountedBackend`). After a cold start and a
//! settle, a steady window of 16 intervals is measured; then three workers are killed one after
//! the other (the task dropped mid-flight, no release), each timed from the kill until every
//! unit is trusted again. A run without `--bench` (the smoke test) uses 2 workers and 32 units,
//! settles for one session, measures 4 intervals and kills one.

#[path = "../../tests/support/fleet.rs"]
mod fleet;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleet::all_owned;
use lease_core::LeaseBackend;
use lease_core::conformance::CountedBackend;
use lessor_partition::WorkerHandle;

const SESSION: Duration = Duration::from_secs(2);
const INTERVAL: Duration = Duration::from_millis(500);
const WINDOW: u32 = 16;
/// The simulator's steady state for 8 workers x 1,024 units at these timings, with an
/// assigner (`lessor_sim::scale`; `crates/lessor-sim/tests/assigner.rs` checks it still is):
/// requests and records read per worker per tick. The same on every store: the protocol decides
/// what a worker sends, the store only how long it takes.
const SIM_REQUESTS: f64 = 2.16;
const SIM_RECORDS: f64 = 18.0;

/// The store a benchmark measures: its name in the section (`DynamoDB Local`, `PostgreSQL`,
/// `Redis`), and how to open a fresh counted table (or key prefix) on it, or why it cannot (the
/// section then says the benchmark was skipped).
pub(crate) struct Store<F> {
    pub(crate) name: &'static str,
    pub(crate) open: Result<F, String>,
}

/// Runs the benchmark on `store`, prints its section and writes it to
/// `$LEASE_BENCH_OUT/<section>` when that variable is set.
pub(crate) fn main<F, Opened>(section: &str, store: Store<F>)
where
    F: FnOnce() -> Opened,
    Opened: Future<Output = Arc<CountedBackend>>,
{
    let smoke_test = !std::env::args().any(|a| a == "--bench");
    let text = match store.open {
        Ok(open) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let (workers, units, kills) = if smoke_test { (2, 32, 1) } else { (8, 1024, 3) };
            let fleet = (workers, units, kills);
            rt.block_on(async { run(store.name, open().await, fleet, smoke_test).await })
        }
        Err(why) => {
            eprintln!("SKIPPED: {section} bench: {why}");
            format!(
                "## lessor-partition on {}\n\nSkipped: {why} (run `cargo xtask bench`).\n",
                store.name
            )
        }
    };
    println!("{text}");
    if let Ok(dir) = std::env::var("LEASE_BENCH_OUT") {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(std::path::Path::new(&dir).join(section), text).unwrap();
    }
}

async fn wait_until(limit: Duration, done: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "not done within {limit:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    start.elapsed()
}

/// The worker holding the assigner lease, if any.
async fn assigner_of(store: &dyn LeaseBackend) -> Option<String> {
    let key = lease_core::LeaseKey::with_sort_key("fleet/bench/assigner", "lease").ok()?;
    let record = store.inspect(&key).await.ok()??;
    record.holder()?.owner().map(str::to_owned)
}

async fn run(
    store_name: &str,
    counting: Arc<CountedBackend>,
    (workers, units, kills): (usize, usize, usize),
    smoke_test: bool,
) -> String {
    // The smoke test (`cargo test` runs every bench so) checks the paths, not the figures: a
    // shorter settle and window, and no pause after its one kill.
    let (settle, window) = if smoke_test {
        (SESSION, 4)
    } else {
        (SESSION * 2, WINDOW)
    };
    let store: Arc<dyn LeaseBackend> = counting.clone();
    let fleet::Fleet {
        mut handles,
        mut tasks,
    } = fleet::start("bench", &store, (workers, units), (SESSION, INTERVAL));
    let cold = wait_until(Duration::from_secs(120), || all_owned(&handles, units)).await;
    tokio::time::sleep(settle).await;

    let before = counting.counts();
    let ticks =
        |h: &BTreeMap<usize, WorkerHandle>| h.values().map(|w| w.stats().ticks).sum::<u64>();
    let ticks_before = ticks(&handles);
    tokio::time::sleep(INTERVAL * window).await;
    let after = counting.counts();
    let worker_ticks = (ticks(&handles) - ticks_before).max(1) as f64;
    let requests = (after.requests - before.requests) as f64 / worker_ticks;
    let records = (after.records - before.records) as f64 / worker_ticks;

    let bound = SESSION + INTERVAL * 2;
    let mut takeovers = Vec::new();
    for victim in 0..kills {
        let role = if assigner_of(&*store).await.as_deref() == Some(&format!("w{victim}")) {
            "the assigner"
        } else {
            "a follower"
        };
        tasks.remove(&victim).unwrap().abort();
        handles.remove(&victim);
        let took = wait_until(Duration::from_secs(60), || all_owned(&handles, units)).await;
        takeovers.push((role, took));
        if victim + 1 < kills {
            tokio::time::sleep(SESSION).await;
        }
    }
    for handle in handles.values() {
        handle.stop();
    }
    for (_, task) in tasks {
        let _ = task.await;
    }

    let mut out = String::new();
    let _ = writeln!(
        out,
        "## lessor-partition on {store_name}: a fleet with its assigner\n\n{workers} workers, \
         {units} units, 2 s sessions, 0.5 s interval, the assigner on (the default), on the \
         {store_name} above. Requests and records counted on the way to the store; the \
         simulator's figures are `lessor_sim::scale`'s for the same fleet. Takeover: a worker's \
         task dropped mid-flight (no release), timed until every unit is trusted again, {kills} \
         kills one after the other; the bound is a session duration plus two intervals.\n"
    );
    let _ = writeln!(out, "| what | on {store_name} | reference | ratio |");
    let _ = writeln!(out, "|---|---:|---:|---:|");
    let _ = writeln!(
        out,
        "| cold start: every unit owned | {:.2} s | – | – |",
        cold.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "| steady: requests per worker per tick | {requests:.2} | {SIM_REQUESTS} (simulator) | \
         {:.2}x |",
        requests / SIM_REQUESTS
    );
    let _ = writeln!(
        out,
        "| steady: records read per worker per tick | {records:.1} | {SIM_RECORDS} (simulator) | \
         {:.2}x |",
        records / SIM_RECORDS
    );
    for (n, (role, took)) in takeovers.iter().enumerate() {
        let _ = writeln!(
            out,
            "| kill {} ({role}): every unit owned again | {:.2} s | {:.1} s (`d + 2I`) | {:.2}x |",
            n + 1,
            took.as_secs_f64(),
            bound.as_secs_f64(),
            took.as_secs_f64() / bound.as_secs_f64()
        );
    }
    out
}

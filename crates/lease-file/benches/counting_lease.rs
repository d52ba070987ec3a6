//! Counting leases (`lease_core::CountingLease`) against a plain lease on the same backend:
//! acquire + release of a slot when slots are free, partly held and all held, on the memory
//! backend and on the file store (kernel mode, in a temporary directory). Both are taken as users
//! take them, through async guards with a zero wait (one attempt), on a current-thread tokio
//! runtime that runs their keepers.
//!
//! Variants are interleaved: each round runs one batch of every variant, and a ratio is the
//! median of the per-round ratios to the plain lease's batch of that round, so both share the
//! round's noise. Target: a counting acquire + release with a free slot at most 1.1x a plain
//! lease's. Requests per acquire (`try_acquire` calls on the backend) are counted apart, on a
//! counting wrapper, since the starting slot is random.
//!
//! Writes `$LEASE_BENCH_OUT/25-counting-lease.md` when that variable is set, prints the section
//! always; `LEASE_BENCH_QUICK=1` (and `cargo test --all-targets`, which runs this without
//! `--bench`) runs a few rounds, as a smoke test.
#![allow(clippy::unwrap_used, missing_docs)]

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_core::conformance::CountedBackend;
use lease_core::{CountingLease, LeaseBackend, LeaseGuard, LeaseKey, MemoryBackend, WaitOptions};
use lease_file::DirectoryStore;

const LIMIT: u32 = 4;
const D: Duration = Duration::from_secs(30);

/// One backend's figures.
struct Figures {
    backend: &'static str,
    plain_us: f64,
    /// (what, median ratio to the plain lease, requests per acquire).
    rows: Vec<(&'static str, f64, f64)>,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Seconds per operation of `batch` calls of `op`.
fn per_op(batch: u32, mut op: impl FnMut()) -> f64 {
    let started = Instant::now();
    for _ in 0..batch {
        op();
    }
    started.elapsed().as_secs_f64() / f64::from(batch)
}

fn measure(
    backend: &'static str,
    store: Arc<dyn LeaseBackend>,
    (rounds, batch, counted_n): (u32, u32, u32),
) -> Figures {
    // Guards are how a slot is taken: async ones, whose keeper is a task on this runtime.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let once = || WaitOptions::new(Duration::ZERO);
    let plain_key = LeaseKey::new(format!("plain-{backend}")).unwrap();
    let free =
        CountingLease::new(LeaseKey::new(format!("free-{backend}")).unwrap(), LIMIT).unwrap();
    let half =
        CountingLease::new(LeaseKey::new(format!("half-{backend}")).unwrap(), LIMIT).unwrap();
    let full =
        CountingLease::new(LeaseKey::new(format!("full-{backend}")).unwrap(), LIMIT).unwrap();
    let take = |counting: &CountingLease, store: &Arc<dyn LeaseBackend>| {
        rt.block_on(counting.lease(store.clone(), D).with_wait(once()).acquire())
    };
    // Other holders: half of `half`'s slots, all of `full`'s.
    let mut others = Vec::new();
    for _ in 0..LIMIT / 2 {
        others.push(take(&half, &store).unwrap());
    }
    for _ in 0..LIMIT {
        others.push(take(&full, &store).unwrap());
    }
    let plain = || {
        rt.block_on(async {
            let guard = LeaseGuard::builder(store.clone(), &plain_key, D)
                .with_wait(once())
                .acquire()
                .await
                .unwrap();
            guard.release().await.unwrap();
        });
    };
    let slot = |counting: &CountingLease, store: &Arc<dyn LeaseBackend>| {
        let guard = take(counting, store).unwrap();
        rt.block_on(guard.release()).unwrap();
    };
    let refused = |store: &Arc<dyn LeaseBackend>| {
        assert!(take(&full, store).unwrap_err().is_held());
    };
    let (mut plain_s, mut ratios) = (Vec::new(), vec![Vec::new(); 3]);
    for _ in 0..rounds {
        let base = per_op(batch, plain);
        plain_s.push(base);
        ratios[0].push(per_op(batch, || slot(&free, &store)) / base);
        ratios[1].push(per_op(batch, || slot(&half, &store)) / base);
        ratios[2].push(per_op(batch, || refused(&store)) / base);
    }
    // Counts the `try_acquire` calls it forwards.
    let counted = Arc::new(CountedBackend::new(store.clone()));
    let through: Arc<dyn LeaseBackend> = counted.clone();
    let requests = |op: &dyn Fn()| {
        let before = counted.counts().acquires;
        for _ in 0..counted_n {
            op();
        }
        (counted.counts().acquires - before) as f64 / f64::from(counted_n)
    };
    let free_requests = requests(&|| slot(&free, &through));
    let half_requests = requests(&|| slot(&half, &through));
    let full_requests = requests(&|| refused(&through));
    for guard in others {
        rt.block_on(guard.release()).unwrap();
    }
    let mut ratios = ratios.into_iter().map(median);
    let mut next = || ratios.next().unwrap_or(f64::NAN);
    Figures {
        backend,
        plain_us: median(plain_s) * 1e6,
        rows: vec![
            (
                "slot acquire + release, all 4 slots free",
                next(),
                free_requests,
            ),
            ("slot acquire + release, 2 of 4 held", next(), half_requests),
            ("attempt on 4 of 4 held (`Held`)", next(), full_requests),
        ],
    }
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench")
        || std::env::var("LEASE_BENCH_QUICK").as_deref() == Ok("1");
    let (rounds, memory_batch, file_batch, counted) = if quick {
        (5, 200, 20, 200)
    } else {
        (41, 5000, 200, 2000)
    };
    let dir = tempfile::tempdir().unwrap();
    let figures = [
        measure(
            "memory",
            Arc::new(MemoryBackend::new()),
            (rounds, memory_batch, counted),
        ),
        measure(
            "file",
            Arc::new(DirectoryStore::open(dir.path()).unwrap()),
            (rounds, file_batch, counted),
        ),
    ];
    let mut md = String::from("## Counting leases: a slot against a plain lease\n\n");
    let _ = writeln!(
        md,
        "`CountingLease` with N = {LIMIT} against a plain lease's guard (acquire + release of one key on \
         the same backend, the floor), interleaved over {rounds} rounds (batches of {memory_batch} \
         on memory, {file_batch} on files, kernel mode, in a temporary directory); the ratio is \
         the median of per-round ratios. Target: at most 1.1x with a free slot. Requests are \
         `try_acquire` calls per acquire, averaged over {counted} (the first slot tried is chosen once per thread, at random).\n"
    );
    md.push_str("| backend | operation | ratio to plain acquire + release | requests per acquire |\n|---|---|---:|---:|\n");
    for f in &figures {
        let _ = writeln!(
            md,
            "| {} | plain acquire + release (floor) | 1.00x ({:.1} µs) | 1 |",
            f.backend, f.plain_us
        );
        for (what, ratio, requests) in &f.rows {
            let _ = writeln!(
                md,
                "| {} | {what} | {ratio:.2}x | {requests:.2} |",
                f.backend
            );
        }
    }
    println!("{md}");
    if let Ok(out) = std::env::var("LEASE_BENCH_OUT") {
        std::fs::write(std::path::Path::new(&out).join("25-counting-lease.md"), md).unwrap();
    }
}

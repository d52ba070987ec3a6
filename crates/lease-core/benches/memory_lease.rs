//! The memory backend's operations against their floor: one mutex-guarded `HashMap` update.
//!
//! Writes a markdown section to `$LEASE_BENCH_OUT/10-lease-core.md` when that variable is set.

#![allow(missing_docs, clippy::unwrap_used)]

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, MemoryBackend};

fn median_and_p99(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let median = samples[samples.len() / 2];
    let p99 = samples[(samples.len() * 99 / 100).min(samples.len() - 1)];
    (median, p99)
}

fn measure(iterations: usize, mut op: impl FnMut(usize)) -> (Duration, Duration) {
    for i in 0..iterations / 10 {
        op(i);
    }
    let samples = (0..iterations)
        .map(|i| {
            let start = Instant::now();
            op(i);
            start.elapsed()
        })
        .collect();
    median_and_p99(samples)
}

fn main() {
    // `cargo test --all-targets` runs this without `--bench`: a quick smoke test then.
    let quick = !std::env::args().any(|a| a == "--bench")
        || std::env::var_os("LEASE_BENCH_QUICK").is_some();
    let iterations = if quick { 20_000 } else { 200_000 };
    let keys: Vec<LeaseKey> = (0..1024)
        .map(|i| LeaseKey::new(format!("bench-{i}")).unwrap())
        .collect();
    let d = Duration::from_secs(30);

    let floor_map: Mutex<HashMap<LeaseKey, u64>> = Mutex::new(HashMap::new());
    let floor = measure(iterations, |i| {
        let mut map = floor_map.lock().unwrap();
        *map.entry(keys[i % keys.len()].clone()).or_insert(0) += 1;
        black_box(&map);
    });

    let store = MemoryBackend::new();
    let once = AcquireOptions::default();
    let acquire_release = measure(iterations, |i| {
        let key = &keys[i % keys.len()];
        let lease = pollster::block_on(store.try_acquire(key, d, &once)).unwrap();
        pollster::block_on(store.release(lease.key(), lease.token(), lease.fencing_token()))
            .unwrap();
    });
    let held: Vec<_> = keys
        .iter()
        .map(|k| pollster::block_on(store.try_acquire(k, d, &once)).unwrap())
        .collect();
    let renew = measure(iterations, |i| {
        black_box(pollster::block_on(store.renew(&held[i % held.len()], d)).unwrap());
    });
    let contended = measure(iterations, |i| {
        let err =
            pollster::block_on(store.try_acquire(&keys[i % keys.len()], d, &once)).unwrap_err();
        black_box(err);
    });

    let ratio = |x: Duration| x.as_secs_f64() / floor.0.as_secs_f64().max(1e-12);
    let row = |name: &str, ops: u32, (m, p): (Duration, Duration)| {
        format!(
            "| {name} | {ops} | {m:?} | {p:?} | {:.1}x |\n",
            ratio(m) / f64::from(ops)
        )
    };
    let mut section = String::from("## lease-core: memory backend\n\n");
    section.push_str(&format!(
        "Floor: one `Mutex<HashMap>` entry update, median {:?}, p99 {:?} ({iterations} iterations).\n\n",
        floor.0, floor.1
    ));
    section.push_str(
        "| operation | floor ops | median | p99 | median per floor op |\n|---|---|---|---|---|\n",
    );
    section.push_str(&row("acquire + release", 2, acquire_release));
    section.push_str(&row("renew", 1, renew));
    section.push_str(&row("contended acquire (held error)", 1, contended));
    section.push_str("\nEach memory operation is one mutex acquisition and no I/O; the ratio is the price of validation, token generation and the lease/holder bookkeeping.\n");
    println!("{section}");
    if let Some(dir) = std::env::var_os("LEASE_BENCH_OUT") {
        std::fs::write(std::path::Path::new(&dir).join("10-lease-core.md"), section).unwrap();
    }
}

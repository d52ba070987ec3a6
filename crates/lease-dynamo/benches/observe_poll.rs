//! How soon an election's observer learns of a change on DynamoDB, where it can only poll:
//! against its poll interval, on DynamoDB Local.
//!
//! An `Observer` (poll interval 100 ms, one strongly consistent `GetItem` per poll) runs as a
//! task; the bench acquires the key with a value through another client at a random phase of
//! the poll, then releases it, and times each from just before the call to the observer's
//! report. A poll at a random phase waits half an interval on average, so the report gives the
//! medians as a fraction of the interval, with the 99th percentiles.
//!
//! Writes `$LEASE_BENCH_OUT/31-lease-dynamo-observe.md` when that variable is set, and prints
//! the same section. `LEASE_BENCH_QUICK=1` (and a run without `--bench`, the smoke test) runs a
//! few rounds. Without `LEASE_DYNAMO_ENDPOINT` it says it was skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use lease_core::{AcquireOptions, Election, LeaderChange, LeaseBackend, LeaseKey};
use support::Wiring;

const POLL: Duration = Duration::from_millis(100);
const SECTION: &str = "31-lease-dynamo-observe.md";

fn main() {
    let smoke_test = !std::env::args().any(|a| a == "--bench");
    let quick = smoke_test || std::env::var("LEASE_BENCH_QUICK").is_ok_and(|v| v == "1");
    let rounds = if quick { 4 } else { 50 };
    let section = match std::env::var(support::ENDPOINT_ENV) {
        Ok(endpoint) if !endpoint.is_empty() => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(run(&endpoint, rounds))
        }
        _ => {
            eprintln!(
                "SKIPPED: observe_poll bench: {} not set",
                support::ENDPOINT_ENV
            );
            format!(
                "## lease-dynamo: how soon an observer learns of a change\n\nSkipped: `{}` was not \
                 set (run `cargo xtask bench`).\n",
                support::ENDPOINT_ENV
            )
        }
    };
    println!("{section}");
    if let Ok(dir) = std::env::var("LEASE_BENCH_OUT") {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(std::path::Path::new(&dir).join(SECTION), section).unwrap();
    }
}

async fn run(endpoint: &str, rounds: usize) -> String {
    let (leases, client) = support::leases(endpoint, &Wiring::default(), |b| b).await;
    let holder = lease_dynamo::DynamoLeases::new(client, leases.table().to_owned()).unwrap();
    let observed: Arc<dyn LeaseBackend> = Arc::new(leases);
    let key = LeaseKey::new("leader").unwrap();
    let election = Election::new(observed, &key, Duration::from_secs(30)).with_poll_interval(POLL);
    let mut observer = election.observe();
    assert_eq!(
        observer.next().await.unwrap().unwrap(),
        LeaderChange::Vacant
    );
    let (send, mut reports) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(change)) = observer.next().await {
            if send.send((Instant::now(), change)).is_err() {
                break;
            }
        }
    });
    let options = AcquireOptions::default().with_value("10.0.0.7:5432");
    let (mut elected, mut vacant) = (Vec::new(), Vec::new());
    let mut phase = 0u64;
    for _ in 0..rounds {
        // A phase of the poll that walks across the interval, round by round.
        phase = (phase + 37) % 100;
        tokio::time::sleep(POLL * u32::try_from(phase).unwrap() / 100).await;
        let start = Instant::now();
        let lease = holder
            .try_acquire(&key, Duration::from_secs(30), &options)
            .await
            .unwrap();
        let (at, change) = reports.recv().await.unwrap();
        assert!(matches!(change, LeaderChange::Elected(_)), "{change:?}");
        elected.push(at.saturating_duration_since(start));
        tokio::time::sleep(POLL * u32::try_from(100 - phase).unwrap() / 100).await;
        let start = Instant::now();
        support::release(&holder, &lease).await.unwrap();
        let (at, change) = reports.recv().await.unwrap();
        assert_eq!(change, LeaderChange::Vacant);
        vacant.push(at.saturating_duration_since(start));
    }
    section(rounds, &elected, &vacant)
}

fn quantile(values: &[Duration], q: f64) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn section(rounds: usize, elected: &[Duration], vacant: &[Duration]) -> String {
    let mut md = String::from("## lease-dynamo: how soon an observer learns of a change\n\n");
    let _ = writeln!(
        md,
        "An election's `Observer` on DynamoDB Local polls (one strongly consistent `GetItem` \
         per interval of {} ms); {rounds} rounds, each a `try_acquire` by another client at a \
         phase of the poll that walks across the interval, then a `release`, timed from just \
         before the call to the observer's report. A poll at a random phase waits half an \
         interval on average.\n",
        POLL.as_millis()
    );
    md.push_str("| | median | 99th percentile | median / poll interval |\n|---|---|---|---|\n");
    for (name, values) in [
        ("new leader reported", elected),
        ("vacancy reported", vacant),
    ] {
        let median = quantile(values, 0.5);
        let _ = writeln!(
            md,
            "| {name} | {:.1} ms | {:.1} ms | {:.2} |",
            median.as_secs_f64() * 1e3,
            quantile(values, 0.99).as_secs_f64() * 1e3,
            median.as_secs_f64() / POLL.as_secs_f64()
        );
    }
    md
}

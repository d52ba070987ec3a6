//! Eight workers and 256 units on DynamoDB Local: balance, takeover after a crash, handover on a
//! clean stop, and fencing tokens that grow with every change of owner.
//!
//! Needs `LEASE_DYNAMO_ENDPOINT` (as `cargo xtask itest` sets, with dummy AWS credentials);
//! without it the test prints `SKIPPED:` to stderr and passes, unless `LEASE_REQUIRE_DYNAMO=1`.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use support::endpoint;

use futures::StreamExt;
use lease_core::LeaseBackend;
use lease_dynamo::DynamoLeases;
use lessor_partition::{FleetEvent, Worker, WorkerHandle};

const WORKERS: usize = 8;
const UNITS: usize = 256;
const SESSION: Duration = Duration::from_secs(4);
const INTERVAL: Duration = Duration::from_secs(1);

fn counts(handles: &BTreeMap<usize, WorkerHandle>) -> (Vec<usize>, usize) {
    let snapshots: Vec<_> = handles.values().map(WorkerHandle::snapshot).collect();
    let counts = snapshots.iter().map(|s| s.units.len()).collect();
    let mut all: Vec<&String> = snapshots.iter().flat_map(|s| s.units.keys()).collect();
    all.sort();
    all.dedup();
    (counts, all.len())
}

fn balanced(handles: &BTreeMap<usize, WorkerHandle>) -> bool {
    let (counts, distinct) = counts(handles);
    let (lo, hi) = (UNITS / counts.len(), UNITS.div_ceil(counts.len()));
    distinct == UNITS
        && counts.iter().sum::<usize>() == UNITS
        && counts.iter().all(|c| (lo..=hi).contains(c))
}

async fn wait(what: &str, limit: Duration, done: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

#[test]
fn eight_workers_share_256_units_on_dynamodb_local() {
    let Some(endpoint) = endpoint("eight_workers_share_256_units_on_dynamodb_local") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = lease_dynamo::client_for_endpoint(&endpoint).await;
        let stamp = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let leases = DynamoLeases::new(client, format!("lessor-fleet-{stamp}")).expect("leases");
        leases
            .ensure_table()
            .await
            .expect("table on DynamoDB Local");
        let store: Arc<dyn LeaseBackend> = Arc::new(leases);
        let log: Arc<Mutex<Vec<(usize, FleetEvent)>>> = Arc::default();

        let mut handles = BTreeMap::new();
        let mut tasks = BTreeMap::new();
        for index in 0..WORKERS {
            let log = log.clone();
            let worker = Worker::builder("itest", format!("worker-{index}"))
                .with_store(store.clone())
                .with_units((0..UNITS).map(|u| format!("unit-{u:03}")))
                .with_session_duration(SESSION)
                .with_interval(INTERVAL)
                .build()
                .expect("worker");
            let mut events = worker.handle().events();
            tokio::spawn(async move {
                while let Some(e) = events.next().await {
                    log.lock().expect("log").push((index, e));
                }
            });
            handles.insert(index, worker.handle());
            tasks.insert(index, tokio::spawn(worker.run()));
        }
        let took = wait("8 workers to balance", Duration::from_secs(120), || {
            balanced(&handles)
        })
        .await;
        println!("balanced 8 x 32 after {took:?}");

        // A crash: the task is dropped mid-flight, with no release.
        tasks.remove(&3).expect("task 3").abort();
        handles.remove(&3);
        let took = wait("takeover after a crash", Duration::from_secs(60), || {
            balanced(&handles)
        })
        .await;
        println!("crash: reassigned and balanced after {took:?}");
        assert!(
            took < SESSION + INTERVAL * 3 + Duration::from_secs(3),
            "took {took:?}"
        );

        // A clean stop hands over at once.
        handles.remove(&5).expect("handle 5").stop();
        let stats = tasks
            .remove(&5)
            .expect("task 5")
            .await
            .expect("join")
            .expect("clean stop");
        let took = wait(
            "handover after a clean stop",
            Duration::from_secs(60),
            || balanced(&handles),
        )
        .await;
        println!("clean stop: handed over after {took:?}");
        assert!(
            took < INTERVAL * 3 + Duration::from_secs(2),
            "took {took:?}"
        );
        println!(
            "worker-5: {} ticks, {} requests ({:.2} per tick), {} listings, {} records read",
            stats.ticks,
            stats.requests,
            stats.requests as f64 / stats.ticks.max(1) as f64,
            stats.lists,
            stats.records_read
        );

        for handle in handles.values() {
            handle.stop();
        }
        for (index, task) in tasks {
            task.await
                .expect("join")
                .unwrap_or_else(|e| panic!("worker-{index}: {e}"));
        }

        let mut last: BTreeMap<String, u64> = BTreeMap::new();
        let mut gains = 0;
        for (who, event) in log.lock().expect("log").iter() {
            if let FleetEvent::Gained {
                unit,
                fencing_token: fencing,
                ..
            } = event
            {
                gains += 1;
                if let Some(before) = last.get(unit) {
                    assert!(
                        fencing.get() > *before,
                        "worker-{who} gained {unit} at {fencing} after {before}"
                    );
                }
                last.insert(unit.clone(), fencing.get());
            }
        }
        assert_eq!(last.len(), UNITS);
        println!("{gains} gains in all");
    });
}

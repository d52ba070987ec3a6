//! Workers sharing units on a real store: balance, takeover after a crash, handover on a clean
//! stop, and fencing tokens that grow with every change of owner. What the DynamoDB, PostgreSQL
//! and Redis fleet tests all run, each on its own store and timings.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lease_core::LeaseBackend;
use lessor_partition::{FleetEvent, Worker, WorkerHandle};

/// The fleet and its timings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) workers: usize,
    pub(crate) units: usize,
    pub(crate) session: Duration,
    pub(crate) interval: Duration,
    /// How long the cold start may take to balance (the first acquisitions of every unit).
    pub(crate) balance_within: Duration,
}

fn counts(handles: &BTreeMap<usize, WorkerHandle>) -> (Vec<usize>, usize) {
    let snapshots: Vec<_> = handles.values().map(WorkerHandle::snapshot).collect();
    let counts = snapshots.iter().map(|s| s.units.len()).collect();
    let mut all: Vec<&String> = snapshots.iter().flat_map(|s| s.units.keys()).collect();
    all.sort();
    all.dedup();
    (counts, all.len())
}

fn balanced(handles: &BTreeMap<usize, WorkerHandle>, units: usize) -> bool {
    let (counts, distinct) = counts(handles);
    let (lo, hi) = (units / counts.len(), units.div_ceil(counts.len()));
    distinct == units
        && counts.iter().sum::<usize>() == units
        && counts.iter().all(|c| (lo..=hi).contains(c))
}

/// What each worker trusts it owns and what it sees of the fleet, for a failure's message.
fn describe(handles: &BTreeMap<usize, WorkerHandle>) -> String {
    let mut owners: BTreeMap<&String, Vec<usize>> = BTreeMap::new();
    let snapshots: Vec<_> = handles.iter().map(|(i, h)| (*i, h.snapshot())).collect();
    let mut out = String::new();
    for (index, s) in &snapshots {
        for unit in s.units.keys() {
            owners.entry(unit).or_default().push(*index);
        }
        out += &format!(
            "\n  worker-{index}: {} units, session {:?}, target {:?}, {} members, stats {:?}",
            s.units.len(),
            s.session,
            s.target,
            s.members.len(),
            handles[index].stats()
        );
    }
    let shared: Vec<_> = owners.iter().filter(|(_, w)| w.len() > 1).collect();
    out += &format!("\n  {} units owned, shared: {shared:?}", owners.len());
    out
}

async fn wait(
    what: &str,
    limit: Duration,
    handles: &BTreeMap<usize, WorkerHandle>,
    done: impl Fn() -> bool,
) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}:{}",
            describe(handles)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

/// [`share_units`] on a runtime of its own (two worker threads), on the store `open` opens.
pub(crate) fn share_units_on(open: impl Future<Output = Arc<dyn LeaseBackend>>, plan: Plan) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async { share_units(open.await, plan).await });
}

/// Starts `plan.workers` workers of fleet `itest` on `store`, waits until they balance, crashes
/// worker 3 (its task dropped mid-flight, no release) and waits for the takeover, stops worker 5
/// cleanly and waits for the handover, stops the rest; then checks that every unit's fencing
/// token grew with every gain. Panics on any failure; prints the times.
async fn share_units(store: Arc<dyn LeaseBackend>, plan: Plan) {
    let Plan {
        workers,
        units,
        session,
        interval,
        balance_within,
    } = plan;
    let log: Arc<Mutex<Vec<(usize, FleetEvent)>>> = Arc::default();
    let mut handles = BTreeMap::new();
    let mut tasks = BTreeMap::new();
    for index in 0..workers {
        let log = log.clone();
        let worker = Worker::builder("itest", format!("worker-{index}"))
            .with_store(store.clone())
            .with_units((0..units).map(|u| format!("unit-{u:03}")))
            .with_session_duration(session)
            .with_interval(interval)
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
    let took = wait("the workers to balance", balance_within, &handles, || {
        balanced(&handles, units)
    })
    .await;
    println!("balanced {workers} workers over {units} units after {took:?}");

    // A crash: the task is dropped mid-flight, with no release.
    let victim = 3;
    tasks.remove(&victim).expect("the victim's task").abort();
    handles.remove(&victim);
    let took = wait(
        "takeover after a crash",
        Duration::from_secs(60),
        &handles,
        || balanced(&handles, units),
    )
    .await;
    println!("crash: reassigned and balanced after {took:?}");
    assert!(
        took < session + interval * 3 + Duration::from_secs(3),
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
        &handles,
        || balanced(&handles, units),
    )
    .await;
    println!("clean stop: handed over after {took:?}");
    assert!(
        took < interval * 3 + Duration::from_secs(2),
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
    fencing_grows_with_every_gain(&log.lock().expect("log"), units);
}

/// Every `Gained` of a unit carries a higher fencing token than the gain before it, and every
/// unit was gained.
fn fencing_grows_with_every_gain(log: &[(usize, FleetEvent)], units: usize) {
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    let mut gains = 0;
    for (who, event) in log {
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
    assert_eq!(last.len(), units);
    println!("{gains} gains in all");
}

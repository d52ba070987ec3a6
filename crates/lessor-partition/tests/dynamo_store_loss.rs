//! A fleet with checkpoints on DynamoDB Local whose table is deleted and re-created mid-run, or
//! whose server is restarted (with `LEASE_LONG=1`): every unit whose checkpoint vanished is
//! reported to the application (its `Gained` carries `Checkpoint::Lost`), none reads as never
//! saved, and the fleet owns every unit again.
//!
//! Needs `LEASE_DYNAMO_ENDPOINT` (as `cargo xtask itest` sets, with dummy AWS credentials);
//! without it the test prints `SKIPPED:` to stderr and passes, unless `LEASE_REQUIRE_DYNAMO=1`.
// The DynamoDB client's TLS stack (aws-lc-sys) needs the target's C compiler and system headers,
// which a check of macOS or FreeBSD from Linux lacks: these suites build and run on Linux.
#![cfg(target_os = "linux")]

mod support;

#[path = "support/local_dynamo.rs"]
mod local;

use std::collections::BTreeSet;
use std::future::Future;
use std::io::Write as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use support::endpoint;

use futures::StreamExt;
use lease_core::LeaseBackend;
use lease_dynamo::DynamoLeases;
use lessor_partition::{Checkpoint, FleetEvent, Worker, WorkerHandle};

const WORKERS: usize = 4;
const UNITS: usize = 32;
const SESSION: Duration = Duration::from_secs(4);
const INTERVAL: Duration = Duration::from_secs(1);

fn owned(handles: &[WorkerHandle]) -> BTreeSet<String> {
    handles
        .iter()
        .flat_map(|h| h.owned_units().into_keys())
        .collect()
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
fn a_table_deleted_and_recreated_reports_every_vanished_checkpoint() {
    let Some(endpoint) =
        endpoint("a_table_deleted_and_recreated_reports_every_vanished_checkpoint")
    else {
        return;
    };
    let at = endpoint.clone();
    runtime().block_on(run_through_a_loss(&endpoint, move |leases| {
        Box::pin(async move {
            lease_dynamo::client_for_endpoint(&at)
                .await
                .delete_table()
                .table_name(leases.table())
                .send()
                .await
                .expect("delete the table");
        })
    }));
}

/// DynamoDB Local SIGKILLed and started again in memory: the table and every item are gone at
/// once, and an operator re-creates the table. Runs its own server from the jar that
/// `cargo xtask dynamo` caches (or `LEASE_DYNAMO_JAR_DIR`), as `lease-cli/tests/dynamo_restart.rs`
/// does; skips without it or `java` (or without `LEASE_DYNAMO_ENDPOINT`), unless
/// `LEASE_REQUIRE_DYNAMO=1`.
#[test]
fn a_restarted_dynamodb_local_reports_every_vanished_checkpoint() {
    // A run with DynamoDB (and its dummy credentials), which starts its own server; about 20 s,
    // so with LEASE_LONG=1 only (the deleted table above takes the same path).
    if endpoint("a_restarted_dynamodb_local_reports_every_vanished_checkpoint").is_none() {
        return;
    }
    if std::env::var_os("LEASE_LONG").is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: a_restarted_dynamodb_local_reports_every_vanished_checkpoint (set LEASE_LONG=1)"
        );
        return;
    }
    let Some(jar_dir) = local::jar_dir() else {
        return;
    };
    let log = std::env::temp_dir().join(format!("lessor-loss-dynamo-{}.log", std::process::id()));
    let server = Arc::new(Mutex::new(local::LocalDynamo::start(jar_dir, log.clone())));
    let endpoint = server.lock().expect("server").endpoint();
    let runtime = runtime();
    runtime.block_on(local::wait_until_answers(&endpoint));
    let restart = server.clone();
    let answers = endpoint.clone();
    runtime.block_on(run_through_a_loss(&endpoint, move |_leases| {
        Box::pin(async move {
            restart.lock().expect("server").restart();
            local::wait_until_answers(&answers).await;
        })
    }));
    drop(server);
    let _ = std::fs::remove_file(log);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Four workers with checkpoints on a fresh table, every unit's checkpoint saved; then `loss`
/// takes the store's data, the table is re-created, and every vanished checkpoint must be
/// reported.
async fn run_through_a_loss(
    endpoint: &str,
    loss: impl FnOnce(DynamoLeases) -> Pin<Box<dyn Future<Output = ()> + Send>>,
) {
    let client = lease_dynamo::client_for_endpoint(endpoint).await;
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let table = format!("lessor-loss-{stamp}");
    // No recreation grace: every worker here knew the old table, so each one that finds the
    // store epoch gone takes nothing for a session, which is what keeps an owner from the old
    // table the only one trusting its units (docs/correctness.md).
    let leases = DynamoLeases::builder(client.clone(), table.clone())
        .build()
        .expect("leases");
    leases
        .ensure_table()
        .await
        .expect("table on DynamoDB Local");
    let store: Arc<dyn LeaseBackend> = Arc::new(leases.clone());
    let log: Arc<Mutex<Vec<FleetEvent>>> = Arc::default();
    let mut handles = Vec::new();
    let mut tasks = Vec::new();
    for index in 0..WORKERS {
        let worker = Worker::builder("loss", format!("worker-{index}"))
            .with_store(store.clone())
            .with_units((0..UNITS).map(|u| format!("unit-{u:02}")))
            .with_session_duration(SESSION)
            .with_interval(INTERVAL)
            .with_checkpoints()
            .build()
            .expect("worker");
        let mut events = worker.handle().events();
        let log = log.clone();
        tokio::spawn(async move {
            while let Some(e) = events.next().await {
                log.lock().expect("log").push(e);
            }
        });
        handles.push(worker.handle());
        tasks.push(tokio::spawn(worker.run()));
    }
    wait("every unit owned", Duration::from_secs(60), || {
        owned(&handles).len() == UNITS
    })
    .await;
    let mut saved = 0;
    for handle in &handles {
        for (unit, fencing) in handle.owned_units() {
            let data = format!("{unit}@{fencing}");
            if handle.save_checkpoint(&unit, data.as_bytes()).await.is_ok() {
                saved += 1;
            }
        }
    }
    assert_eq!(saved, UNITS);
    log.lock().expect("log").clear();

    loss(leases.clone()).await;
    leases.ensure_table().await.expect("re-create the table");
    let recreated = Instant::now();
    // Every worker finds its session gone and drops its units; then the fleet re-forms.
    wait("every unit dropped", Duration::from_secs(30), || {
        owned(&handles).len() < UNITS
    })
    .await;
    // Owned again, each by a gain after the loss: a worker that has not yet found its own
    // session gone may still show units it is about to drop, and the events reach the log a
    // moment after the worker publishes what it owns.
    let gained_after_loss = || {
        let log = log.lock().expect("log");
        let gained: BTreeSet<&String> = log
            .iter()
            .filter_map(|event| match event {
                FleetEvent::Gained { unit, .. } => Some(unit),
                _ => None,
            })
            .collect();
        gained.len()
    };
    let took = wait("every unit owned again", Duration::from_secs(90), || {
        owned(&handles).len() == UNITS && gained_after_loss() == UNITS
    })
    .await;
    println!(
        "table re-created: every unit owned again {:?} after",
        recreated.elapsed()
    );
    let _ = took;

    let (mut reported, mut restored, mut silent) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for event in log.lock().expect("log").iter() {
        if let FleetEvent::Gained {
            unit, checkpoint, ..
        } = event
        {
            match checkpoint {
                Checkpoint::Saved(_) => restored.insert(unit.clone()),
                Checkpoint::Lost => reported.insert(unit.clone()),
                _ => silent.insert(unit.clone()),
            };
        }
    }
    let losses: u64 = handles.iter().map(|h| h.stats().store_losses).sum();
    println!(
        "{} checkpoints reported lost, {} read back, {} read as never saved; {losses} \
         workers saw the loss",
        reported.len(),
        restored.len(),
        silent.len()
    );
    assert!(silent.is_empty(), "read as never saved: {silent:?}");
    assert_eq!(
        reported.union(&restored).count(),
        UNITS,
        "every unit gained again"
    );
    assert!(losses >= 1);

    for handle in &handles {
        handle.stop();
    }
    for task in tasks {
        let _ = task.await;
    }
    let _ = client.delete_table().table_name(&table).send().await;
}

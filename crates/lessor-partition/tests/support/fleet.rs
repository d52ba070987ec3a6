//! A fleet of workers running as tasks on one DynamoDB Local table, every request counted: what
//! the DynamoDB fleet test and the DynamoDB fleet benchmark both start.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use lease_core::conformance::CountedBackend;
use lease_core::{LeaseBackend, LeaseError};
use lease_dynamo::DynamoLeases;
use lessor_partition::{Worker, WorkerHandle, WorkerStats};

/// The workers by index: their handles, and the tasks that run them.
pub(crate) struct Fleet {
    pub(crate) handles: BTreeMap<usize, WorkerHandle>,
    pub(crate) tasks: BTreeMap<usize, tokio::task::JoinHandle<Result<WorkerStats, LeaseError>>>,
}

/// A fresh table named after `prefix` on DynamoDB Local, behind a store that counts every
/// request and every record its reads return.
pub(crate) async fn counted_table(endpoint: &str, prefix: &str) -> Arc<CountedBackend> {
    let client = lease_dynamo::client_for_endpoint(endpoint).await;
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let leases = DynamoLeases::new(client, format!("{prefix}-{stamp}")).expect("leases");
    leases
        .ensure_table()
        .await
        .expect("table on DynamoDB Local");
    Arc::new(CountedBackend::new(Arc::new(leases)))
}

/// Starts `workers` workers `w0`.. of fleet `name` over `units` units, with the default assigner.
pub(crate) fn start(
    name: &str,
    store: &Arc<dyn LeaseBackend>,
    (workers, units): (usize, usize),
    (session, interval): (Duration, Duration),
) -> Fleet {
    let mut fleet = Fleet {
        handles: BTreeMap::new(),
        tasks: BTreeMap::new(),
    };
    for index in 0..workers {
        let worker = Worker::builder(name, format!("w{index}"))
            .with_store(store.clone())
            .with_units((0..units).map(|u| format!("unit-{u:04}")))
            .with_session_duration(session)
            .with_interval(interval)
            .build()
            .expect("worker");
        fleet.handles.insert(index, worker.handle());
        fleet.tasks.insert(index, tokio::spawn(worker.run()));
    }
    fleet
}

/// Whether the workers trust every one of `units` units between them.
pub(crate) fn all_owned(handles: &BTreeMap<usize, WorkerHandle>, units: usize) -> bool {
    let owned: BTreeSet<String> = handles
        .values()
        .flat_map(|h| h.owned_units().into_keys())
        .collect();
    owned.len() == units
}

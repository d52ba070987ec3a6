//! A fleet of workers running as tasks on one store: what the DynamoDB assigner test and the
//! fleet benchmarks (DynamoDB, PostgreSQL) start.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use lease_core::{LeaseBackend, LeaseError};
use lessor_partition::{Worker, WorkerHandle, WorkerStats};

/// The workers by index: their handles, and the tasks that run them.
pub(crate) struct Fleet {
    pub(crate) handles: BTreeMap<usize, WorkerHandle>,
    pub(crate) tasks: BTreeMap<usize, tokio::task::JoinHandle<Result<WorkerStats, LeaseError>>>,
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

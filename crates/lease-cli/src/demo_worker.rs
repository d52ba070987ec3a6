//! `lease demo-worker`: one lessor-partition worker of `lease demo`, reporting what it owns.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencedValues, FencingToken, Lease, LeaseBackend, LeaseError,
    LeaseKey, LeaseListing, LeaseRecord, LeaseToken,
};
use lessor_partition::Worker;
use serde_json::json;

use crate::backend::Backend;
use crate::cli::DemoWorkerArgs;
use crate::demo::unit_name;
use crate::exit::Failure;

/// Runs the worker until its stdin closes, printing one JSON line per interval:
/// `{"worker":"worker-1","units":{"u00":3,"u01":1},"session":3,"members":4}` (unit to fencing
/// token).
pub(crate) async fn run(args: DemoWorkerArgs) -> Result<u8, Failure> {
    let backend = Backend::open(&args.backend).await?;
    if backend.leases.as_listing().is_none() {
        return Err(Failure::unavailable(format!(
            "the {} cannot list partitions, which the fleet needs",
            backend.description
        )));
    }
    let worker = Worker::builder(args.fleet.clone(), args.id.clone())
        .store(Listed(backend.leases.clone()))
        .units((0..args.units).map(|unit| unit_name(unit, args.units)))
        .session_duration(args.ttl)
        .interval(args.interval)
        // One host, one wall clock: judge a killed worker's session dead as soon as it expires.
        .clock_skew_bound(Duration::from_millis(50))
        .build()
        .map_err(|e| Failure::usage(format!("cannot configure demo worker {}: {e}", args.id)))?;
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());

    // The parent holds our stdin; when it closes (the parent is done, or died), stop cleanly.
    let on_eof = handle.clone();
    std::thread::Builder::new()
        .name("stdin-watch".to_owned())
        .spawn(move || {
            let mut buf = [0u8; 256];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
            on_eof.stop();
        })
        .map_err(|e| Failure::internal(format!("cannot watch stdin: {e}")))?;

    let mut tick = tokio::time::interval(args.interval);
    tokio::pin!(running);
    let stats = loop {
        tokio::select! {
            finished = &mut running => break finished,
            _ = tick.tick() => {
                let snapshot = handle.snapshot();
                let line = json!({
                    "worker": snapshot.worker_id,
                    "units": snapshot
                        .units
                        .iter()
                        .map(|(unit, fencing)| (unit.clone(), json!(fencing.get())))
                        .collect::<serde_json::Map<_, _>>(),
                    "session": snapshot.session.map(|f| f.get()),
                    "members": snapshot.members.len(),
                });
                let mut stdout = std::io::stdout().lock();
                if writeln!(stdout, "{line}").and_then(|()| stdout.flush()).is_err() {
                    // Nobody is listening any more.
                    handle.stop();
                }
            }
        }
    };
    match stats {
        Ok(Ok(stats)) => {
            tracing::info!(worker = %args.id, ?stats, "demo worker stopped");
            Ok(0)
        }
        Ok(Err(error)) => Err(Failure::unavailable(format!(
            "demo worker {} failed: {error}",
            args.id
        ))),
        Err(error) => Err(Failure::internal(format!(
            "demo worker {} panicked: {error}",
            args.id
        ))),
    }
}

/// The store as the fleet takes it, one value that is both a backend and a listing: forwards
/// every call to the one `Arc<dyn LeaseBackend>`, and listing to its
/// [`as_listing`](LeaseBackend::as_listing) probe (checked before the worker starts).
#[derive(Debug)]
struct Listed(Arc<dyn LeaseBackend>);

impl LeaseBackend for Listed {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn clock(&self) -> &dyn Clock {
        self.0.clock()
    }
    fn as_listing(&self) -> Option<&dyn LeaseListing> {
        Some(self)
    }
    fn as_fenced_values(&self) -> Option<&dyn FencedValues> {
        self.0.as_fenced_values()
    }
    fn try_acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        options: &'a AcquireOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        self.0.try_acquire(key, duration, options)
    }
    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        self.0.renew(lease, duration)
    }
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.0.release(key, token, fencing)
    }
    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        self.0.inspect(key)
    }
    fn delete<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: Option<&'a LeaseToken>,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.0.delete(key, holder, fencing)
    }
    fn changed<'a>(&'a self, key: &'a LeaseKey) -> Option<BoxFuture<'a, ()>> {
        self.0.changed(key)
    }
}

impl LeaseListing for Listed {
    fn list_partition<'a>(
        &'a self,
        partition: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseRecord>, LeaseError>> {
        match self.0.as_listing() {
            Some(listing) => listing.list_partition(partition),
            None => Box::pin(async { Err(LeaseError::unsupported(self.0.name(), "list")) }),
        }
    }
}

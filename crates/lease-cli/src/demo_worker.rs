//! `lease demo-worker`: one lessor-partition worker of `lease demo`, reporting what it owns.

use std::io::{Read, Write};
use std::time::Duration;

use lessor_partition::Worker;
use serde_json::json;

use crate::cli::DemoWorkerArgs;
use crate::exit::Failure;

/// Runs the worker until its stdin closes, printing one JSON line per interval:
/// `{"worker":"worker-1","units":{"u00":3,"u01":1},"session":3,"members":4}` (unit to fencing
/// token).
pub(crate) async fn run(args: DemoWorkerArgs) -> Result<u8, Failure> {
    let backend = crate::stores::open_holding(&args.backend, args.ttl)
        .await
        .map_err(|failure| told(&args.id, failure))?;
    let worker = build(&args, &backend).map_err(|failure| told(&args.id, failure))?;
    // One listing before anything else: a store the fleet cannot use (a DynamoDB table that does
    // not exist, say) fails here with its cause and the fix, which the parent shows, instead of
    // every tick failing quietly.
    preflight(&backend, &args.fleet)
        .await
        .map_err(|failure| told(&args.id, failure))?;
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
            "demo worker {} failed: {}",
            args.id,
            crate::exit::report(&error)
        ))),
        Err(error) => Err(Failure::internal(format!(
            "demo worker {} panicked: {error}",
            args.id
        ))),
    }
}

/// The demo's worker `args.id` on `backend`.
fn build(args: &DemoWorkerArgs, backend: &crate::backend::Backend) -> Result<Worker, Failure> {
    Worker::builder(args.fleet.clone(), args.id.clone())
        .with_store(backend.leases.clone())
        .with_units((0..args.units).map(|unit| unit_name(unit, args.units)))
        .with_session_duration(args.ttl)
        .with_interval(args.interval)
        // One host, one wall clock: judge a killed worker's session dead as soon as it expires.
        .with_clock_skew_bound(Duration::from_millis(50))
        .build()
        .map_err(|e| {
            if e.is_unsupported() {
                Failure::unavailable(format!(
                    "the {} cannot list partitions, which the fleet needs: {e}",
                    backend.description
                ))
            } else {
                Failure::usage(format!("cannot configure demo worker {}: {e}", args.id))
            }
        })
}

/// Tells the parent why this worker cannot run (one JSON line, `{"worker":..,"error":..}`), so
/// `lease demo` shows the first worker error instead of giving up without a cause.
fn told(id: &str, failure: Failure) -> Failure {
    let line = json!({ "worker": id, "error": failure.message });
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
    failure
}

/// Lists the fleet's sessions once: the store answers, and the fleet can use it.
async fn preflight(backend: &crate::backend::Backend, fleet: &str) -> Result<(), Failure> {
    let Some(listing) = backend.leases.as_listing() else {
        return Err(Failure::unavailable(format!(
            "the {} cannot list partitions, which the fleet needs",
            backend.description
        )));
    };
    listing
        .list_partition(&format!("fleet/{fleet}/sessions"))
        .await
        .map(drop)
        .map_err(|error| {
            crate::stores::failure(
                &format!("the demo fleet cannot use the {}", backend.description),
                &error,
            )
        })
}

/// The unit named `u07`, as the workers call it.
pub(crate) fn unit_name(index: u32, units: u32) -> String {
    let width = units.saturating_sub(1).to_string().len();
    format!("u{index:0width$}")
}

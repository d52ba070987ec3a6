//! `DynamoLeases` as the DynamoDB modes build it.

use std::sync::Arc;
use std::time::Duration;

use lease_dynamo::{DynamoLeases, RetryPolicy};

use crate::actor::Actor;
use crate::cli::DynamoArgs;

/// The region when the environment names none: DynamoDB Local accepts any.
const DEFAULT_REGION: &str = "us-east-1";

/// A manager on `args`' table with this actor's steppable clock, the declared skew and the
/// attempt timeout; the table is created if missing (retried until it works or the actor
/// stops).
///
/// # Errors
/// No table given, an invalid configuration, or a stop before the table was ready.
pub(crate) async fn leases(args: &DynamoArgs, actor: &Actor) -> Result<Arc<DynamoLeases>, String> {
    let table = args.table.as_deref().ok_or("--table is required")?;
    let region = std::env::var("AWS_REGION").ok();
    let region = region.as_deref().unwrap_or(DEFAULT_REGION);
    let client = lease_dynamo::sdk_client(args.endpoint.as_deref(), Some(region)).await;
    let retry = RetryPolicy::default()
        .with_attempt_timeout(Some(Duration::from_millis(args.attempt_timeout_ms)));
    let leases = DynamoLeases::builder(client, table)
        .with_clock(actor.clock.clone())
        .with_max_clock_skew(Duration::from_millis(args.skew_ms))
        .with_retry_policy(retry)
        .build()
        .map_err(|e| format!("cannot configure DynamoLeases: {e}"))?;
    loop {
        match leases.ensure_table().await {
            Ok(()) => return Ok(Arc::new(leases)),
            Err(error) => eprintln!("{}: ensure_table: {error}", actor.history.proc_id()),
        }
        if !actor.pause(Duration::from_millis(500)).await {
            return Err("stopped before the table was ready".to_owned());
        }
    }
}

/// The namespaced history key of lease `pk` (no sort key): `dynamo:<table>/<pk>/<sk>`, with the
/// sort key the store writes for it.
pub(crate) fn lease_key(leases: &DynamoLeases, pk: &str) -> String {
    format!("dynamo:{}/{pk}/{}", leases.table(), leases.lock_sort_key())
}

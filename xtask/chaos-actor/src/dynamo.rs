//! `DynamoLeases` as the DynamoDB modes build it.

use std::sync::Arc;
use std::time::Duration;

use lease_dynamo::{DynamoLeases, RetryPolicy};

use crate::actor::Actor;
use crate::cli::TableArgs;

/// The sort key lease-dynamo writes for a key without one (its default).
const LOCK_SORT_KEY: &str = "LOCK";

/// A manager on `args`' table with this actor's steppable clock, the declared skew and the
/// attempt timeout; the table is created if missing (retried until it works or the actor
/// stops).
///
/// # Errors
/// No table given, an invalid configuration, or a stop before the table was ready.
pub(crate) async fn leases(args: &TableArgs, actor: &Actor) -> Result<Arc<DynamoLeases>, String> {
    let table = args.table.as_deref().ok_or("--table is required")?;
    let endpoint = args.endpoint.as_deref().ok_or("--endpoint is required")?;
    // The region from the environment, else us-east-1: DynamoDB Local accepts any.
    let client = lease_dynamo::client_for_endpoint(endpoint).await;
    let retry =
        RetryPolicy::default().with_attempt_timeout(Duration::from_millis(args.attempt_timeout_ms));
    let leases = DynamoLeases::builder(client, table)
        .with_clock(actor.clock.clone())
        .with_max_clock_skew(Duration::from_millis(args.skew_ms))
        .with_retry_policy(retry)
        .build()
        .map_err(|e| format!("cannot configure DynamoLeases: {e}"))?;
    actor
        .until_ready("ensure_table", || leases.ensure_table())
        .await?;
    Ok(Arc::new(leases))
}

/// The namespaced history key of lease `pk` (no sort key) in `table`: `dynamo:<table>/<pk>/<sk>`, with the
/// sort key the store writes for it.
pub(crate) fn lease_key(table: &str, pk: &str) -> String {
    format!("dynamo:{table}/{pk}/{LOCK_SORT_KEY}")
}

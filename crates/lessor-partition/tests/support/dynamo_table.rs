//! A fresh DynamoDB Local table behind a counting store: what the DynamoDB fleet tests and the
//! DynamoDB fleet benchmark run on.

use std::sync::Arc;
use std::time::SystemTime;

use lease_core::conformance::CountedBackend;
use lease_dynamo::DynamoLeases;

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

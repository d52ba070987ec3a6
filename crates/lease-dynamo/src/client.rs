//! Building an SDK client.

use aws_config::{BehaviorVersion, Region};
use aws_sdk_dynamodb::Client;

/// The environment variable naming a DynamoDB endpoint to use instead of AWS (the tests and
/// `cargo xtask itest` read it; [`sdk_client_from_env`] does too).
pub const ENDPOINT_ENV: &str = "LEASE_DYNAMO_ENDPOINT";

/// A DynamoDB client from the default AWS configuration chain
/// (`aws_config::defaults(BehaviorVersion::latest())`), with an optional endpoint override (for
/// DynamoDB Local: `http://127.0.0.1:8000`) and region.
///
/// ```no_run
/// # async fn demo() {
/// let client = lease_dynamo::sdk_client(Some("http://127.0.0.1:8000"), Some("us-east-1")).await;
/// # }
/// ```
pub async fn sdk_client(endpoint_url: Option<&str>, region: Option<&str>) -> Client {
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(endpoint) = endpoint_url {
        loader = loader.endpoint_url(endpoint);
    }
    if let Some(region) = region {
        loader = loader.region(Region::new(region.to_owned()));
    }
    Client::new(&loader.load().await)
}

/// [`sdk_client`] with the endpoint from [`ENDPOINT_ENV`], if set.
pub async fn sdk_client_from_env() -> Client {
    let endpoint = std::env::var(ENDPOINT_ENV).ok().filter(|e| !e.is_empty());
    sdk_client(endpoint.as_deref(), None).await
}

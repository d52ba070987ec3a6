//! An SDK client for an endpoint other than AWS's: DynamoDB Local and its kin.

use aws_config::environment::EnvironmentVariableRegionProvider;
use aws_config::meta::region::RegionProviderChain;
use aws_config::profile::ProfileFileRegionProvider;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_dynamodb::Client;

/// The region a client for an endpoint of its own gets when none is configured: DynamoDB Local
/// accepts any, but the SDK will not sign a request without one.
const FALLBACK_REGION: &str = "us-east-1";

/// A DynamoDB client that sends to `endpoint_url` instead of AWS's regional endpoint, such as
/// DynamoDB Local at `http://127.0.0.1:8000`. Credentials come from the default AWS chain (any
/// will do for DynamoDB Local, e.g. `AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local`), and
/// the region from `AWS_REGION` or the AWS profile, or `us-east-1` when neither names one (no
/// instance metadata lookup: an endpoint of its own has no region to discover).
///
/// For DynamoDB itself, build the client as for any AWS service:
/// `aws_sdk_dynamodb::Client::new(&aws_config::load_defaults(BehaviorVersion::latest()).await)`.
///
/// ```no_run
/// use lease_dynamo::DynamoLeases;
///
/// # async fn demo() -> Result<(), lease_core::LeaseError> {
/// let client = lease_dynamo::client_for_endpoint("http://127.0.0.1:8000").await;
/// let leases = DynamoLeases::new(client, "leases")?;
/// leases.ensure_table().await?;
/// # Ok(()) }
/// ```
pub async fn client_for_endpoint(endpoint_url: &str) -> Client {
    let region = RegionProviderChain::first_try(EnvironmentVariableRegionProvider::new())
        .or_else(ProfileFileRegionProvider::new())
        .or_else(Region::from_static(FALLBACK_REGION));
    let config = aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint_url)
        .region(region)
        .load()
        .await;
    Client::new(&config)
}

//! Shared by every DynamoDB test file (and the benchmark): finding DynamoDB Local, building
//! clients with request counting and fault injection, and making a fresh table per test.
//!
//! Endpoint: `LEASE_DYNAMO_ENDPOINT` (`cargo xtask test` and `itest` set it, starting DynamoDB
//! Local in Docker or from its jar); without it the test prints `SKIPPED: <test>: ...` to stderr
//! and returns, or fails when `LEASE_REQUIRE_DYNAMO=1`.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{BehaviorVersion, Builder, Region};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::{Response as HttpResponse, StatusCode};
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;
use lease_dynamo::DynamoLeases;

/// The environment variable naming the endpoint.
pub const ENDPOINT_ENV: &str = "LEASE_DYNAMO_ENDPOINT";
/// Set to `1` to fail instead of skipping when no DynamoDB can be had.
pub const REQUIRE_ENV: &str = "LEASE_REQUIRE_DYNAMO";

/// The endpoint to test against, or `None` after printing why the test is skipped.
///
/// # Panics
/// When none can be had and `LEASE_REQUIRE_DYNAMO=1`.
pub fn endpoint(test: &str) -> Option<String> {
    if let Ok(endpoint) = std::env::var(ENDPOINT_ENV)
        && !endpoint.is_empty()
    {
        return Some(endpoint);
    }
    let why = format!("{test}: set {ENDPOINT_ENV} or run cargo xtask itest");
    if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") {
        panic!("DynamoDB Local required ({REQUIRE_ENV}=1) but unavailable: {why}");
    }
    // Written to the process's stderr directly: libtest captures `eprintln!` of passing tests,
    // and a skip must be visible.
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
    None
}

/// Counts the requests sent (every attempt), by DynamoDB operation.
#[derive(Debug, Default)]
pub struct RequestCounter {
    count: AtomicUsize,
    operations: Mutex<Vec<String>>,
}

impl RequestCounter {
    /// Requests sent so far.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// The operations sent so far (`UpdateItem`, ...), and forgets them.
    pub fn take(&self) -> Vec<String> {
        self.count.store(0, Ordering::SeqCst);
        std::mem::take(&mut *self.operations.lock().unwrap())
    }
}

fn operation_of(request: &HttpRequest) -> String {
    request
        .headers()
        .get("x-amz-target")
        .and_then(|t| t.rsplit('.').next())
        .unwrap_or("?")
        .to_owned()
}

#[derive(Debug)]
struct CountingInterceptor(Arc<RequestCounter>);

impl Intercept for CountingInterceptor {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = operation_of(context.request());
        self.0.operations.lock().unwrap().push(op);
        self.0.count.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Faults to inject into the next write requests (`UpdateItem`, `DeleteItem`), at the transport.
#[derive(Default)]
pub struct Faults {
    /// Runs after the next lost reply's request was applied, before the failure is returned.
    meanwhile: std::sync::Mutex<Option<lease_core::BoxFuture<'static, ()>>>,
    /// Runs before the write request it names (0: the next) is sent.
    before_write: std::sync::Mutex<Option<(u32, lease_core::BoxFuture<'static, ()>)>>,
    lose_replies: AtomicU32,
    throttles: AtomicU32,
    server_errors: AtomicU32,
    lost: AtomicU32,
    throttled: AtomicU32,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("lose_replies", &self.lose_replies)
            .field("lost", &self.lost)
            .finish_non_exhaustive()
    }
}

impl lease_core::conformance::ReplyFaults for Faults {
    fn lose_next_reply(&self, meanwhile: Option<lease_core::BoxFuture<'static, ()>>) {
        *self.meanwhile.lock().unwrap() = meanwhile;
        self.lose_replies(1);
    }

    fn lost_replies(&self) -> u32 {
        self.lost()
    }
}

fn take(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

impl Faults {
    /// The next `n` write requests reach the server, which applies them; their replies
    /// are replaced by a connection reset.
    pub fn lose_replies(&self, n: u32) {
        self.lose_replies.store(n, Ordering::SeqCst);
    }

    /// The next `n` write requests are answered `ThrottlingException` without reaching
    /// the server.
    pub fn throttle(&self, n: u32) {
        self.throttles.store(n, Ordering::SeqCst);
    }

    /// The next `n` write requests are answered `InternalServerError` (HTTP 500) without
    /// reaching the server.
    pub fn server_error(&self, n: u32) {
        self.server_errors.store(n, Ordering::SeqCst);
    }

    /// Runs `meanwhile` before the write request after the next `skip` ones is sent: something
    /// another process does between two requests of one call.
    pub fn before_write(&self, skip: u32, meanwhile: lease_core::BoxFuture<'static, ()>) {
        *self.before_write.lock().unwrap() = Some((skip, meanwhile));
    }

    /// The `before_write` future, if the write about to be sent is the one it names.
    fn due_before_write(&self) -> Option<lease_core::BoxFuture<'static, ()>> {
        let mut slot = self.before_write.lock().unwrap();
        match slot.as_mut() {
            Some((0, _)) => slot.take().map(|(_, meanwhile)| meanwhile),
            Some((skip, _)) => {
                *skip -= 1;
                None
            }
            None => None,
        }
    }

    /// Replies lost so far.
    pub fn lost(&self) -> u32 {
        self.lost.load(Ordering::SeqCst)
    }

    /// Throttling and 5xx responses injected so far.
    pub fn throttled(&self) -> u32 {
        self.throttled.load(Ordering::SeqCst)
    }
}

fn error_response(status: u16, code: &str) -> HttpResponse {
    let body = format!(
        r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{code}","message":"injected by the test"}}"#
    );
    let mut response = HttpResponse::new(
        StatusCode::try_from(status).expect("valid status"),
        SdkBody::from(body),
    );
    response
        .headers_mut()
        .insert("content-type", "application/x-amz-json-1.0");
    response
}

#[derive(Debug)]
struct FaultyConnector {
    inner: SharedHttpConnector,
    faults: Arc<Faults>,
}

impl HttpConnector for FaultyConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let faults = self.faults.clone();
        let is_write = matches!(operation_of(&request).as_str(), "UpdateItem" | "DeleteItem");
        if is_write && take(&faults.throttles) {
            faults.throttled.fetch_add(1, Ordering::SeqCst);
            return HttpConnectorFuture::ready(Ok(error_response(400, "ThrottlingException")));
        }
        if is_write && take(&faults.server_errors) {
            faults.throttled.fetch_add(1, Ordering::SeqCst);
            return HttpConnectorFuture::ready(Ok(error_response(500, "InternalServerError")));
        }
        if is_write && let Some(meanwhile) = faults.due_before_write() {
            let inner = self.inner.clone();
            return HttpConnectorFuture::new(async move {
                meanwhile.await;
                inner.call(request).await
            });
        }
        let reply = self.inner.call(request);
        HttpConnectorFuture::new(async move {
            let response = reply.await?;
            if is_write && take(&faults.lose_replies) {
                faults.lost.fetch_add(1, Ordering::SeqCst);
                let meanwhile = faults.meanwhile.lock().unwrap().take();
                if let Some(meanwhile) = meanwhile {
                    meanwhile.await;
                }
                return Err(ConnectorError::io(
                    "injected: connection reset after the server applied the request".into(),
                ));
            }
            Ok(response)
        })
    }
}

#[derive(Debug)]
struct FaultyClient {
    inner: SharedHttpClient,
    faults: Arc<Faults>,
}

impl HttpClient for FaultyClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(FaultyConnector {
            inner: self.inner.http_connector(settings, components),
            faults: self.faults.clone(),
        })
    }
}

/// What to wire into a test client.
#[derive(Clone, Debug, Default)]
pub struct Wiring {
    /// Count every request sent.
    pub counter: Option<Arc<RequestCounter>>,
    /// Inject faults at the transport.
    pub faults: Option<Arc<Faults>>,
}

/// A client for `endpoint` with static credentials, region us-east-1, and `wiring`.
pub fn client(endpoint: &str, wiring: &Wiring) -> Client {
    let credentials =
        aws_credential_types::Credentials::new("local", "local", None, None, "lease-dynamo-tests");
    let mut config: Builder = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(credentials);
    if let Some(counter) = &wiring.counter {
        config = config.interceptor(CountingInterceptor(counter.clone()));
    }
    if let Some(faults) = &wiring.faults {
        config = config.http_client(FaultyClient {
            inner: aws_smithy_http_client::Builder::new().build_http(),
            faults: faults.clone(),
        });
    }
    Client::from_conf(config.build())
}

/// The item at `(pk, sk)` read back with a strongly consistent `GetItem` on `key_attributes`
/// (partition and sort key attribute names), or `None` when there is none.
pub async fn raw_item(
    client: &Client,
    table: &str,
    key_attributes: (&str, &str),
    key: (&str, &str),
) -> Option<std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>> {
    use aws_sdk_dynamodb::types::AttributeValue;
    client
        .get_item()
        .table_name(table)
        .key(key_attributes.0, AttributeValue::S(key.0.into()))
        .key(key_attributes.1, AttributeValue::S(key.1.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item()
        .cloned()
}

/// Runs `test` with DynamoDB Local's endpoint on a fresh runtime, or skips it visibly (see
/// [`endpoint`]).
pub fn run<F: std::future::Future<Output = ()>>(name: &str, test: impl FnOnce(String) -> F) {
    if let Some(endpoint) = endpoint(name) {
        runtime().block_on(test(endpoint));
    }
}

/// A unique table name for one test.
pub fn table_name(prefix: &str) -> String {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}-{}", &nonce[..16])
}

/// Creates a fresh table with the default layout (TTL on) and returns its name.
pub async fn fresh_table(client: &Client, prefix: &str) -> String {
    let table = table_name(prefix);
    DynamoLeases::new(client.clone(), table.clone())
        .expect("valid table name")
        .ensure_table()
        .await
        .expect("create table on DynamoDB Local");
    table
}

/// A current-thread runtime with I/O and time: the conformance cases poll with `yield_now`,
/// which on this runtime drives the I/O driver between polls.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A manager on a fresh table, built from a client with `wiring`; `configure` adjusts the
/// builder. Requests made to create the table are forgotten by the counter.
pub async fn leases(
    endpoint: &str,
    wiring: &Wiring,
    configure: impl FnOnce(lease_dynamo::DynamoLeasesBuilder) -> lease_dynamo::DynamoLeasesBuilder,
) -> (DynamoLeases, Client) {
    let client = client(endpoint, wiring);
    let table = fresh_table(&client, "t").await;
    let leases = configure(DynamoLeases::builder(client.clone(), table))
        .build()
        .expect("valid configuration");
    if let Some(counter) = &wiring.counter {
        counter.take();
    }
    (leases, client)
}

/// The Go package's `Manager` calls, each spelled with this crate's API as its docs map them
/// (`go_package` module): `Acquire(pk, d)` and `AcquireKey` are one
/// [`try_acquire`](lease_core::LeaseBackend::try_acquire), `Refresh` is
/// [`renew`](lease_core::LeaseBackend::renew), `Release` is
/// [`release`](lease_core::LeaseBackend::release) of the lease's tenure. The Go-parity tests
/// call these, so they test the behaviour through what a user of this crate calls.
#[derive(Clone, Debug)]
pub struct GoCalls(pub DynamoLeases);

impl GoCalls {
    /// Go's `Acquire(ctx, pk, d)`.
    pub async fn acquire(
        &self,
        pk: &str,
        d: std::time::Duration,
    ) -> Result<lease_core::Lease, lease_core::LeaseError> {
        self.acquire_key(&lease_core::LeaseKey::new(pk)?, d).await
    }

    /// Go's `AcquireKey(ctx, key, d)`.
    pub async fn acquire_key(
        &self,
        key: &lease_core::LeaseKey,
        d: std::time::Duration,
    ) -> Result<lease_core::Lease, lease_core::LeaseError> {
        use lease_core::LeaseBackend as _;
        self.0
            .try_acquire(key, d, &lease_core::AcquireOptions::default())
            .await
    }

    /// Go's `Refresh(ctx, lease, d)`.
    pub async fn refresh(
        &self,
        lease: &lease_core::Lease,
        d: std::time::Duration,
    ) -> Result<lease_core::Lease, lease_core::LeaseError> {
        use lease_core::LeaseBackend as _;
        self.0.renew(lease, d).await
    }

    /// Go's `Release(ctx, lease)`.
    pub async fn release(&self, lease: &lease_core::Lease) -> Result<(), lease_core::LeaseError> {
        use lease_core::LeaseBackend as _;
        self.0
            .release(lease.key(), lease.token(), lease.fencing_token())
            .await
    }

    /// The manager underneath.
    pub fn leases(&self) -> &DynamoLeases {
        &self.0
    }
}

/// Releases `lease`'s tenure: the raw contract call a guard's `release` makes.
pub async fn release(
    store: &dyn lease_core::LeaseBackend,
    lease: &lease_core::Lease,
) -> Result<(), lease_core::LeaseError> {
    store
        .release(lease.key(), lease.token(), lease.fencing_token())
        .await
}

/// Waits for `key` as a guard does (`wait`), for `duration`: the guard, or why not.
pub async fn guard(
    leases: &DynamoLeases,
    key: &lease_core::LeaseKey,
    duration: std::time::Duration,
    wait: lease_core::WaitOptions,
) -> Result<lease_core::LeaseGuard, lease_core::LeaseError> {
    lease_core::LeaseGuard::builder(Arc::new(leases.clone()), key, duration)
        .with_wait(wait)
        .acquire()
        .await
}

/// Whether `lease` is still trusted by its holder on `clock` (its deadline has not passed).
pub fn trusted(lease: &lease_core::Lease, clock: &dyn lease_core::Clock) -> bool {
    clock.monotonic() < lease.deadline()
}

/// The fencing token a release names `record`'s tenure with: its own, or, for a record with no
/// counter (a Go item), raw 0, which is how lease-core's `release` still spells "none" (it
/// takes a `FencingToken`, where `delete` takes an `Option`).
pub fn tenure_fencing(record: &lease_core::LeaseRecord) -> lease_core::FencingToken {
    record
        .fencing_token()
        .unwrap_or(lease_core::backend::fencing_token(0))
}

//! DynamoDB lease operations against the raw SDK call carrying the same request, on DynamoDB
//! Local, in one run: median and p99 of acquire, renew, release and contended acquire, and the
//! requests each sends.
//!
//! DynamoDB Local (a JVM on SQLite) is slow until it has served thousands of requests, so the
//! bench first runs warm-up batches of the measured rounds until every median is within 5 % of
//! the previous batch's, two batches in a row, and reports the batches. Ours and raw run back to back in every round,
//! alternating which goes first, so drift falls on both alike.
//!
//! Writes `$LEASE_BENCH_OUT/30-lease-dynamo.md` when that variable is set, and prints the same
//! section. `LEASE_BENCH_QUICK=1` runs fewer and smaller batches, and so does a run without
//! `--bench` (`cargo test --benches` runs it so, as a smoke test). Without
//! `LEASE_DYNAMO_ENDPOINT` it says it was skipped (and writes a section saying so).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::update_item::UpdateItemInput;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef;
use aws_smithy_types::config_bag::ConfigBag;
use lease_core::AcquireOptions;
use lease_core::{LeaseBackend, LeaseKey};
use lease_dynamo::DynamoLeases;
use support::{RequestCounter, Wiring};

const D: Duration = Duration::from_secs(60);
const OPS: [&str; 4] = ["acquire", "renew", "release", "contended acquire"];

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` (or `--all-targets`) runs this
    // binary without it, as a smoke test, which must stay short.
    let smoke_test = !std::env::args().any(|a| a == "--bench");
    let quick = smoke_test || std::env::var("LEASE_BENCH_QUICK").is_ok_and(|v| v == "1");
    let plan = Plan::new(quick);
    let section = match std::env::var(support::ENDPOINT_ENV) {
        Ok(endpoint) if !endpoint.is_empty() => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(run(&endpoint, &plan))
        }
        _ => {
            let text = format!(
                "## lease-dynamo: DynamoDB Local\n\nSkipped: `{}` was not set (run `cargo xtask bench`).\n",
                support::ENDPOINT_ENV
            );
            eprintln!(
                "SKIPPED: dynamo_lease bench: {} not set",
                support::ENDPOINT_ENV
            );
            text
        }
    };
    println!("{section}");
    if let Ok(dir) = std::env::var("LEASE_BENCH_OUT") {
        let path = std::path::Path::new(&dir).join("30-lease-dynamo.md");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&path, section).unwrap();
    }
}

#[derive(Default)]
struct Samples {
    ours: HashMap<&'static str, Vec<Duration>>,
    raw: HashMap<&'static str, Vec<Duration>>,
    requests: HashMap<&'static str, usize>,
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// The condition of an acquire (`FENCE_USABLE AND TOKEN_USABLE AND KEY_FREE` in
/// `src/expr.rs`), verbatim.
const ACQUIRE_CONDITION: &str = concat!(
    "(attribute_not_exists(#fence) OR (attribute_type(#fence, :number) AND #fence >= :zero AND #fence < :fence_limit))",
    " AND ",
    "(attribute_not_exists(#token) OR attribute_type(#token, :string))",
    " AND ",
    "(attribute_not_exists(#token) OR #expires <= :cutoff_s OR (#expires_ms <= :cutoff_ms AND #expires <= :cutoff_s_up))",
);
const ACQUIRE_UPDATE: &str = "SET #token = :token, #expires = :expires, #expires_ms = :expires_ms, \
     #acquired = :now, #fence = if_not_exists(#fence, :seed) + :one, #request = :request, \
     #ttl = :ttl REMOVE #owner, #value";
/// `TENURE AND #expires_ms > :now_ms` in `src/tenure.rs`.
const RENEW_CONDITION: &str = "#token = :token AND #fence = :fence AND #expires_ms > :now_ms";
const RENEW_UPDATE: &str = "SET #expires = :expires, #expires_ms = :expires_ms, #ttl = :ttl";
/// `TENURE` in `src/expr.rs`.
const RELEASE_CONDITION: &str = "#token = :token AND #fence = :fence";
const RELEASE_UPDATE: &str = "SET #expires = :zero, #request = :request, #ttl = :ttl \
     REMOVE #token, #owner, #value, #acquired, #expires_ms";
/// The default TTL buffer.
const TTL_BUFFER_S: u64 = 3600;

/// The raw SDK calls: the same update and condition expressions, attribute names and values
/// (the builder's defaults) that this crate sends, checked by [`Shapes`] on the first round.
struct Raw<'a> {
    client: &'a Client,
    table: &'a str,
}

type UpdateResult = Result<
    aws_sdk_dynamodb::operation::update_item::UpdateItemOutput,
    aws_sdk_dynamodb::error::SdkError<aws_sdk_dynamodb::operation::update_item::UpdateItemError>,
>;

impl Raw<'_> {
    fn update(
        &self,
        pk: &str,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(self.table)
            .key("pk", s(pk))
            .key("sk", s("LOCK"))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }

    /// The reply, and the seed of a counter the write creates.
    async fn acquire(&self, pk: &str, token: &str, request: &str) -> (UpdateResult, u64) {
        let now = now_ms();
        let expires = now + 60_000;
        let reply = self
            .update(pk)
            .update_expression(ACQUIRE_UPDATE)
            .condition_expression(ACQUIRE_CONDITION)
            .expression_attribute_names("#token", "lease_token")
            .expression_attribute_names("#expires", "lease_expires_at")
            .expression_attribute_names("#expires_ms", "lease_expires_at_ms")
            .expression_attribute_names("#acquired", "lease_acquired_at")
            .expression_attribute_names("#fence", "lease_fence")
            .expression_attribute_names("#owner", "lease_owner")
            .expression_attribute_names("#value", "lease_value")
            .expression_attribute_names("#request", "lease_request")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":number", s("N"))
            .expression_attribute_values(":string", s("S"))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":fence_limit", n(i64::MAX as u64))
            .expression_attribute_values(":token", s(token))
            .expression_attribute_values(":expires", n(expires.div_ceil(1000)))
            .expression_attribute_values(":expires_ms", n(expires))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":cutoff_ms", n(now))
            .expression_attribute_values(":cutoff_s", n(now / 1000))
            .expression_attribute_values(":cutoff_s_up", n(now.div_ceil(1000)))
            .expression_attribute_values(":seed", n(now * 1000))
            .expression_attribute_values(":request", s(request))
            .expression_attribute_values(":ttl", n(expires.div_ceil(1000) + TTL_BUFFER_S))
            .return_values(ReturnValue::UpdatedOld)
            .send()
            .await;
        (reply, now * 1000)
    }

    async fn renew(&self, pk: &str, token: &str, fence: &str) -> UpdateResult {
        let now = now_ms();
        let expires = now + 60_000;
        self.update(pk)
            .update_expression(RENEW_UPDATE)
            .condition_expression(RENEW_CONDITION)
            .expression_attribute_names("#token", "lease_token")
            .expression_attribute_names("#expires", "lease_expires_at")
            .expression_attribute_names("#expires_ms", "lease_expires_at_ms")
            .expression_attribute_names("#fence", "lease_fence")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":token", s(token))
            .expression_attribute_values(":fence", AttributeValue::N(fence.to_owned()))
            .expression_attribute_values(":expires", n(expires.div_ceil(1000)))
            .expression_attribute_values(":expires_ms", n(expires))
            .expression_attribute_values(":now_ms", n(now))
            .expression_attribute_values(":ttl", n(expires.div_ceil(1000) + TTL_BUFFER_S))
            .send()
            .await
    }

    async fn release(&self, pk: &str, token: &str, fence: &str, request: &str) -> UpdateResult {
        let now = now_ms();
        self.update(pk)
            .update_expression(RELEASE_UPDATE)
            .condition_expression(RELEASE_CONDITION)
            .expression_attribute_names("#token", "lease_token")
            .expression_attribute_names("#expires", "lease_expires_at")
            .expression_attribute_names("#expires_ms", "lease_expires_at_ms")
            .expression_attribute_names("#acquired", "lease_acquired_at")
            .expression_attribute_names("#fence", "lease_fence")
            .expression_attribute_names("#owner", "lease_owner")
            .expression_attribute_names("#value", "lease_value")
            .expression_attribute_names("#request", "lease_request")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":token", s(token))
            .expression_attribute_values(":fence", AttributeValue::N(fence.to_owned()))
            .expression_attribute_values(":request", s(request))
            .expression_attribute_values(":ttl", n(now.div_ceil(1000) + TTL_BUFFER_S))
            .send()
            .await
    }
}

/// What identifies an `UpdateItem` request apart from its keys and the values that change per
/// call: expressions, attribute names, value placeholders with their types, return options.
#[derive(Debug, PartialEq)]
struct Shape {
    update: Option<String>,
    condition: Option<String>,
    names: BTreeMap<String, String>,
    values: BTreeMap<String, &'static str>,
    return_values: Option<ReturnValue>,
    on_failure: Option<ReturnValuesOnConditionCheckFailure>,
}

/// Records the shape of every `UpdateItem` sent while `on`.
#[derive(Debug, Default)]
struct Shapes {
    on: AtomicBool,
    seen: Mutex<Vec<Shape>>,
}

#[derive(Debug)]
struct ShapeInterceptor(Arc<Shapes>);

impl Intercept for ShapeInterceptor {
    fn name(&self) -> &'static str {
        "Shapes"
    }

    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if !self.0.on.load(Ordering::SeqCst) {
            return Ok(());
        }
        let Some(input) = context.input().downcast_ref::<UpdateItemInput>() else {
            return Ok(());
        };
        let kind = |v: &AttributeValue| match v {
            AttributeValue::S(_) => "S",
            AttributeValue::N(_) => "N",
            _ => "other",
        };
        let shape = Shape {
            update: input.update_expression().map(str::to_owned),
            condition: input.condition_expression().map(str::to_owned),
            names: input
                .expression_attribute_names()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            values: input
                .expression_attribute_values()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), kind(v)))
                .collect(),
            return_values: input.return_values().cloned(),
            on_failure: input.return_values_on_condition_check_failure().cloned(),
        };
        self.0.seen.lock().unwrap().push(shape);
        Ok(())
    }
}

async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, Duration) {
    let start = Instant::now();
    let out = f.await;
    (out, start.elapsed())
}

/// The 32 hex digits of a token or request id, as `RandomTokens` and this crate make them.
fn hex(v: u128) -> String {
    format!("{v:032x}")
}

/// The fencing counter an acquire wrote, from its `UPDATED_OLD` reply: the old one plus 1, or
/// `seed` plus 1 where there was none.
fn fence_of(
    reply: &aws_sdk_dynamodb::operation::update_item::UpdateItemOutput,
    seed: u64,
) -> String {
    match reply.attributes().and_then(|a| a.get("lease_fence")) {
        Some(AttributeValue::N(v)) => (v.parse::<u64>().unwrap() + 1).to_string(),
        None => (seed + 1).to_string(),
        other => panic!("raw acquire: a reply with a counter that is not one: {other:?}"),
    }
}

/// How long to warm up and how much to measure.
struct Plan {
    quick: bool,
    /// Rounds per warm-up batch.
    batch: usize,
    min_batches: usize,
    max_batches: usize,
    /// Warm-up stops when every median moved by at most this fraction from the previous batch's,
    tolerance: f64,
    /// in this many batches in a row (one agreement can be luck when batch medians swing).
    streak: usize,
    /// Rounds measured after the warm-up.
    rounds: usize,
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                quick,
                batch: 25,
                min_batches: 2,
                max_batches: 4,
                tolerance: 0.05,
                streak: 1,
                rounds: 30,
            }
        } else {
            Self {
                quick,
                batch: 200,
                min_batches: 3,
                max_batches: 25,
                tolerance: 0.05,
                streak: 2,
                rounds: 1000,
            }
        }
    }
}

/// One round: each operation once through this crate and once as the raw call, in [`OPS`] order.
struct Round {
    ours: [Duration; 4],
    raw: [Duration; 4],
    /// Requests this crate sent, per operation.
    requests: [usize; 4],
    /// Requests sent in the round, both sides.
    sent: usize,
}

struct Bench<'a> {
    leases: &'a DynamoLeases,
    raw: Raw<'a>,
    counter: &'a RequestCounter,
    shapes: &'a Shapes,
    /// Rounds run so far (each uses fresh keys).
    next: usize,
}

impl Bench<'_> {
    async fn ours(&self, i: usize) -> ([Duration; 4], [usize; 4]) {
        let (leases, counter) = (self.leases, self.counter);
        let key = LeaseKey::new(format!("ours-{i}")).unwrap();
        let (lease, t_acq) = timed(leases.try_acquire(&key, D, &AcquireOptions::default())).await;
        let lease = lease.unwrap();
        let req_acq = counter.take().len();
        let (held, t_cont) = timed(leases.try_acquire(&key, D, &AcquireOptions::default())).await;
        assert!(held.unwrap_err().is_held());
        let req_cont = counter.take().len();
        let (renewed, t_renew) = timed(leases.renew(&lease, D)).await;
        let renewed = renewed.unwrap();
        let req_renew = counter.take().len();
        let (released, t_rel) = timed(support::release(leases, &renewed)).await;
        released.unwrap();
        let req_rel = counter.take().len();
        (
            [t_acq, t_renew, t_rel, t_cont],
            [req_acq, req_renew, req_rel, req_cont],
        )
    }

    /// The four raw calls, and the requests they sent.
    async fn raw(&self, i: usize) -> ([Duration; 4], usize) {
        let raw = &self.raw;
        let pk = format!("raw-{i}");
        let n = 4 * i as u128;
        let (token, other, request, release_request) = (hex(n), hex(n + 1), hex(n + 2), hex(n + 3));
        let ((acquired, seed), t_acq) = timed(raw.acquire(&pk, &token, &request)).await;
        let fence = fence_of(&acquired.unwrap(), seed);
        let ((refused, _), t_cont) = timed(raw.acquire(&pk, &other, &request)).await;
        let refused = refused.unwrap_err().into_service_error();
        assert!(refused.is_conditional_check_failed_exception(), "{refused}");
        let (renewed, t_renew) = timed(raw.renew(&pk, &token, &fence)).await;
        renewed.unwrap();
        let (released, t_rel) = timed(raw.release(&pk, &token, &fence, &release_request)).await;
        released.unwrap();
        ([t_acq, t_renew, t_rel, t_cont], self.counter.take().len())
    }

    /// Ours and raw back to back, alternating which goes first, so that any drift of DynamoDB
    /// Local, and any effect of the order, falls on both alike.
    async fn round(&mut self) -> Round {
        let i = self.next;
        self.next += 1;
        // The first round checks that the raw calls send what this crate sends.
        self.shapes.on.store(i == 0, Ordering::SeqCst);
        self.counter.take();
        let ((ours, requests), (raw, raw_sent)) = if i.is_multiple_of(2) {
            let ours = self.ours(i).await;
            (ours, self.raw(i).await)
        } else {
            let raw = self.raw(i).await;
            (self.ours(i).await, raw)
        };
        assert_eq!(raw_sent, 4, "one request per raw call");
        let sent = requests.iter().sum::<usize>() + raw_sent;
        if i == 0 {
            let seen = std::mem::take(&mut *self.shapes.seen.lock().unwrap());
            assert_eq!(seen.len(), 8, "one UpdateItem per operation, ours and raw");
            let (ours, raws) = seen.split_at(4);
            for (op, (o, r)) in ["acquire", "contended acquire", "renew", "release"]
                .iter()
                .zip(ours.iter().zip(raws))
            {
                assert_eq!(
                    o, r,
                    "{op}: the raw call must send the request this crate sends"
                );
            }
        }
        Round {
            ours,
            raw,
            requests,
            sent,
        }
    }
}

/// Medians of one warm-up batch: `[ours, raw]`, each in [`OPS`] order.
type Medians = [[Duration; 4]; 2];

/// The warm-up: batches until the medians settle.
struct WarmUp {
    batches: Vec<Medians>,
    requests: usize,
    converged: bool,
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    quantile(&v, 0.5)
}

/// The largest relative change of any median from `prev` to `next`.
fn largest_change(prev: &Medians, next: &Medians) -> f64 {
    prev.iter()
        .flatten()
        .zip(next.iter().flatten())
        .map(|(p, n)| (n.as_secs_f64() - p.as_secs_f64()).abs() / p.as_secs_f64())
        .fold(0.0, f64::max)
}

/// Runs batches of the same rounds as the measurement until every median (four operations,
/// ours and raw) is within the tolerance of the previous batch's, `streak` batches in a row,
/// between the minimum and the maximum number of batches. DynamoDB Local (a JVM on SQLite) needs thousands of requests
/// before its latency settles.
async fn warm_up(bench: &mut Bench<'_>, plan: &Plan) -> WarmUp {
    let mut warm = WarmUp {
        batches: Vec::new(),
        requests: 0,
        converged: false,
    };
    let mut streak = 0;
    while warm.batches.len() < plan.max_batches {
        let mut ours: [Vec<Duration>; 4] = Default::default();
        let mut raw: [Vec<Duration>; 4] = Default::default();
        for _ in 0..plan.batch {
            let round = bench.round().await;
            warm.requests += round.sent;
            for op in 0..4 {
                ours[op].push(round.ours[op]);
                raw[op].push(round.raw[op]);
            }
        }
        let medians = [ours.map(median), raw.map(median)];
        let settled = warm
            .batches
            .last()
            .is_some_and(|prev| largest_change(prev, &medians) <= plan.tolerance);
        streak = if settled { streak + 1 } else { 0 };
        warm.batches.push(medians);
        if streak >= plan.streak && warm.batches.len() >= plan.min_batches {
            warm.converged = true;
            break;
        }
    }
    warm
}

async fn run(endpoint: &str, plan: &Plan) -> String {
    let counter = Arc::new(RequestCounter::default());
    let wiring = Wiring {
        counter: Some(counter.clone()),
        faults: None,
    };
    let client = support::client(endpoint, &wiring);
    let shapes = Arc::new(Shapes::default());
    let client = Client::from_conf(
        client
            .config()
            .to_builder()
            .interceptor(ShapeInterceptor(shapes.clone()))
            .build(),
    );
    let table = support::fresh_table(&client, "bench").await;
    let leases = DynamoLeases::new(client.clone(), table.clone()).unwrap();
    // The raw calls go through a client configured as the manager configures its own copy:
    // same endpoint and interceptors, the SDK's retries off, `RetryPolicy`'s 2 s per attempt.
    let raw_client = Client::from_conf(
        client
            .config()
            .to_builder()
            .retry_config(aws_smithy_types::retry::RetryConfig::disabled())
            .timeout_config(
                aws_smithy_types::timeout::TimeoutConfig::builder()
                    .operation_attempt_timeout(Duration::from_secs(2))
                    .build(),
            )
            .build(),
    );
    let mut bench = Bench {
        leases: &leases,
        raw: Raw {
            client: &raw_client,
            table: &table,
        },
        counter: &counter,
        shapes: &shapes,
        next: 0,
    };
    let load_before = load_average();
    let started = Instant::now();
    let warm = warm_up(&mut bench, plan).await;
    let warm_time = started.elapsed();
    let mut samples = Samples::default();
    for _ in 0..plan.rounds {
        let round = bench.round().await;
        for (i, op) in OPS.into_iter().enumerate() {
            samples.ours.entry(op).or_default().push(round.ours[i]);
            samples.raw.entry(op).or_default().push(round.raw[i]);
            *samples.requests.entry(op).or_default() += round.requests[i];
        }
    }
    let load = [load_before, load_average()];
    let mut out = report(&mut samples, plan, &warm, warm_time, load);
    out.push_str(&counting(&leases, &counter, plan.rounds).await);
    out
}

/// A counting lease's slot (N = 4, all free) against a plain lease, each taken by a guard with
/// one attempt and released, back to back in each of `rounds` rounds, alternating which goes
/// first; requests counted.
async fn counting(leases: &DynamoLeases, counter: &RequestCounter, rounds: usize) -> String {
    use lease_core::{CountingLease, LeaseGuard, LeaseKey, WaitOptions};
    let store: Arc<dyn LeaseBackend> = Arc::new(leases.clone());
    let once = || WaitOptions::new(Duration::ZERO);
    let d = Duration::from_secs(30);
    let plain_key = LeaseKey::new("bench-counting-plain").unwrap();
    let slots = CountingLease::new(LeaseKey::new("bench-counting").unwrap(), 4).unwrap();
    let (mut plain, mut slot, mut requests) = (Vec::new(), Vec::new(), 0usize);
    for round in 0..rounds.max(1) {
        for first in [round % 2 == 0, round % 2 == 1] {
            let started = Instant::now();
            if first {
                let guard = LeaseGuard::builder(store.clone(), &plain_key, d)
                    .with_wait(once())
                    .acquire()
                    .await
                    .unwrap();
                guard.release().await.unwrap();
                plain.push(started.elapsed());
            } else {
                let before = counter.count();
                let guard = slots
                    .lease(store.clone(), d)
                    .with_wait(once())
                    .acquire()
                    .await
                    .unwrap();
                guard.release().await.unwrap();
                slot.push(started.elapsed());
                requests += counter.count() - before;
            }
        }
    }
    plain.sort();
    slot.sort();
    let (p, c) = (quantile(&plain, 0.5), quantile(&slot, 0.5));
    format!(
        "\n### Counting leases on DynamoDB Local\n\n`CountingLease` (N = 4, all slots free) \
         acquire + release against a plain lease's, {} rounds back to back: median {} ms \
         against {} ms, **{:.2}x** (target at most 1.1x), {:.2} requests per acquire + release \
         (one `UpdateItem` each).\n",
        plain.len(),
        ms(c),
        ms(p),
        c.as_secs_f64() / p.as_secs_f64(),
        requests as f64 / slot.len() as f64,
    )
}

/// The one-minute load average (Linux), to show whether other work shared the machine.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Milliseconds with three decimals.
fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn report(
    samples: &mut Samples,
    plan: &Plan,
    warm: &WarmUp,
    warm_time: Duration,
    load: [Option<f64>; 2],
) -> String {
    let mut out = String::new();
    writeln!(out, "## lease-dynamo: DynamoDB Local\n").unwrap();
    if cfg!(debug_assertions) {
        writeln!(
            out,
            "Debug build: these figures say nothing about this crate's cost.\n"
        )
        .unwrap();
    }
    if plan.quick {
        writeln!(
            out,
            "Quick run (`LEASE_BENCH_QUICK=1`, or without `--bench`): too short to settle.\n"
        )
        .unwrap();
    }
    let outcome = if warm.converged {
        format!("settled after {} batches", warm.batches.len())
    } else {
        format!(
            "had **not** settled after the maximum of {} batches",
            warm.batches.len()
        )
    };
    writeln!(
        out,
        "Warm-up: batches of {} rounds (a round is each operation below through this crate and \
         as the raw SDK call), until every median, four operations ours and raw, was within \
         {:.0} % of the previous batch's{} (at least {}, at most {} batches). It \
         {outcome}: {} requests in {:.1} s. Medians per batch in ms, ours / raw:\n",
        plan.batch,
        plan.tolerance * 100.0,
        if plan.streak == 1 {
            String::new()
        } else {
            format!(" in {} batches in a row", plan.streak)
        },
        plan.min_batches,
        plan.max_batches,
        warm.requests,
        warm_time.as_secs_f64(),
    )
    .unwrap();
    writeln!(out, "| batch | {} | largest change |", OPS.join(" | ")).unwrap();
    writeln!(out, "|---|---|---|---|---|---|").unwrap();
    for (b, medians) in warm.batches.iter().enumerate() {
        let cells: Vec<String> = (0..4)
            .map(|op| format!("{} / {}", ms(medians[0][op]), ms(medians[1][op])))
            .collect();
        let change = match b {
            0 => "–".to_owned(),
            _ => format!(
                "{:.1} %",
                largest_change(&warm.batches[b - 1], medians) * 100.0
            ),
        };
        writeln!(out, "| {} | {} | {change} |", b + 1, cells.join(" | ")).unwrap();
    }
    writeln!(
        out,
        "\nThen {} rounds measured, ours and raw back to back in each round, alternating which \
         goes first; the raw SDK call sends the same update, condition, names and values through \
         the same client to the same endpoint (checked on the first round). Times in ms:\n",
        plan.rounds
    )
    .unwrap();
    writeln!(
        out,
        "| operation | requests/op | median | p99 | raw median | raw p99 | median ratio | p99 ratio |"
    )
    .unwrap();
    writeln!(out, "|---|---|---|---|---|---|---|---|").unwrap();
    for op in OPS {
        let ours = samples.ours.get_mut(op).unwrap();
        ours.sort();
        let raw = samples.raw.get_mut(op).unwrap();
        raw.sort();
        let (m, p) = (quantile(ours, 0.5), quantile(ours, 0.99));
        let (rm, rp) = (quantile(raw, 0.5), quantile(raw, 0.99));
        let requests = samples.requests[op] as f64 / plan.rounds as f64;
        writeln!(
            out,
            "| {op} | {requests:.2} | {} | {} | {} | {} | {:.2}x | {:.2}x |",
            ms(m),
            ms(p),
            ms(rm),
            ms(rp),
            m.as_secs_f64() / rm.as_secs_f64(),
            p.as_secs_f64() / rp.as_secs_f64(),
        )
        .unwrap();
    }
    if let [Some(before), Some(after)] = load {
        let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
        writeln!(
            out,
            "\n{cpus} CPUs, shared with DynamoDB Local; load average {before:.2} before the \
             warm-up, {after:.2} at the end."
        )
        .unwrap();
    }
    writeln!(
        out,
        "\nEach operation is one `UpdateItem` (requests counted by an SDK interceptor); a \
         contended acquire learns the holder from `ALL_OLD` in the same reply. The ratio is the \
         price of validation, token generation, span bookkeeping and decoding, over a loopback \
         round trip to DynamoDB Local (a JVM), which dominates."
    )
    .unwrap();
    out
}

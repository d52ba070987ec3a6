//! DynamoDB lease operations against the raw SDK call with the same condition, on DynamoDB
//! Local, in one run: median and p99 of acquire, renew, release and contended acquire, and the
//! requests each sends.
//!
//! Writes `$LEASE_BENCH_OUT/30-lease-dynamo.md` when that variable is set, and prints the same
//! section. `LEASE_BENCH_QUICK=1` runs fewer iterations. Without `LEASE_DYNAMO_ENDPOINT` it says
//! it was skipped (and writes a section saying so).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use lease_core::{LeaseBackend, LeaseKey};
use lease_dynamo::DynamoLeases;
use support::{RequestCounter, Wiring};

const D: Duration = Duration::from_secs(60);
const OPS: [&str; 4] = ["acquire", "renew", "release", "contended acquire"];

fn main() {
    let quick = std::env::var("LEASE_BENCH_QUICK").is_ok_and(|v| v == "1");
    let iterations = if quick { 30 } else { 400 };
    let section = match std::env::var(lease_dynamo::ENDPOINT_ENV) {
        Ok(endpoint) if !endpoint.is_empty() => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(run(&endpoint, iterations))
        }
        _ => {
            let text = format!(
                "## lease-dynamo: DynamoDB Local\n\nSkipped: `{}` was not set (run `cargo xtask bench`).\n",
                lease_dynamo::ENDPOINT_ENV
            );
            eprintln!(
                "SKIPPED: dynamo_lease bench: {} not set",
                lease_dynamo::ENDPOINT_ENV
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

/// The raw SDK calls with the same expressions and conditions this crate sends.
struct Raw<'a> {
    client: &'a Client,
    table: &'a str,
}

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

    async fn acquire(&self, pk: &str, token: &str) -> bool {
        let now = now_ms();
        self.update(pk)
            .update_expression(
                "SET #token = :token, #expires = :expires, #acquired = :now, \
                 #fence = if_not_exists(#fence, :seed) + :one, #ttl = :ttl REMOVE #owner",
            )
            .condition_expression("attribute_not_exists(#token) OR #expires <= :cutoff")
            .expression_attribute_names("#token", "lease_token")
            .expression_attribute_names("#expires", "lease_expires_at")
            .expression_attribute_names("#acquired", "lease_acquired_at")
            .expression_attribute_names("#fence", "lease_fence")
            .expression_attribute_names("#owner", "lease_owner")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":token", s(token))
            .expression_attribute_values(":expires", n(now + 60_000))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":cutoff", n(now))
            .expression_attribute_values(":seed", n(now * 1000))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":ttl", n(now / 1000 + 3660))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .is_ok()
    }

    async fn renew(&self, pk: &str, token: &str) -> bool {
        let now = now_ms();
        self.update(pk)
            .update_expression("SET #expires = :expires, #ttl = :ttl")
            .condition_expression("#token = :token AND #expires > :now")
            .expression_attribute_names("#token", "lease_token")
            .expression_attribute_names("#expires", "lease_expires_at")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":token", s(token))
            .expression_attribute_values(":expires", n(now + 60_000))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":ttl", n(now / 1000 + 3660))
            .send()
            .await
            .is_ok()
    }

    async fn release(&self, pk: &str, token: &str) -> bool {
        let now = now_ms();
        self.update(pk)
            .update_expression("REMOVE #token, #expires, #owner, #acquired SET #ttl = :ttl")
            .condition_expression("#token = :token")
            .expression_attribute_names("#token", "lease_token")
            .expression_attribute_names("#expires", "lease_expires_at")
            .expression_attribute_names("#owner", "lease_owner")
            .expression_attribute_names("#acquired", "lease_acquired_at")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":token", s(token))
            .expression_attribute_values(":ttl", n(now / 1000 + 3600))
            .send()
            .await
            .is_ok()
    }
}

async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, Duration) {
    let start = Instant::now();
    let out = f.await;
    (out, start.elapsed())
}

async fn run(endpoint: &str, iterations: usize) -> String {
    let counter = Arc::new(RequestCounter::default());
    let wiring = Wiring {
        counter: Some(counter.clone()),
        faults: None,
    };
    let client = support::client(endpoint, &wiring);
    let table = support::fresh_table(&client, "bench").await;
    let leases = DynamoLeases::new(client, table.clone()).unwrap();
    // The raw calls go through the manager's own client: same endpoint, same configuration.
    let raw = Raw {
        client: leases.client(),
        table: &table,
    };
    let mut samples = Samples::default();
    let warmup = iterations / 10 + 5;
    for i in 0..warmup + iterations {
        let record = i >= warmup;
        let key = LeaseKey::new(format!("ours-{i}")).unwrap();
        let pk_raw = format!("raw-{i}");
        let token = format!("raw-token-{i:08}");

        counter.take();
        let (lease, t) = timed(leases.acquire_key(&key, D)).await;
        let lease = lease.unwrap();
        let req_acquire = counter.take().len();
        let (held, t_cont) = timed(leases.acquire_key(&key, D)).await;
        assert!(held.unwrap_err().is_held());
        let req_cont = counter.take().len();
        let (renewed, t_renew) = timed(leases.renew(&lease, D)).await;
        let renewed = renewed.unwrap();
        let req_renew = counter.take().len();
        let (released, t_rel) = timed(leases.release(&renewed)).await;
        released.unwrap();
        let req_rel = counter.take().len();

        let (ok, r_acq) = timed(raw.acquire(&pk_raw, &token)).await;
        assert!(ok);
        let (ok, r_cont) = timed(raw.acquire(&pk_raw, "someone-else")).await;
        assert!(!ok);
        let (ok, r_renew) = timed(raw.renew(&pk_raw, &token)).await;
        assert!(ok);
        let (ok, r_rel) = timed(raw.release(&pk_raw, &token)).await;
        assert!(ok);
        counter.take();

        if record {
            for (op, ours, raw_t, requests) in [
                ("acquire", t, r_acq, req_acquire),
                ("renew", t_renew, r_renew, req_renew),
                ("release", t_rel, r_rel, req_rel),
                ("contended acquire", t_cont, r_cont, req_cont),
            ] {
                samples.ours.entry(op).or_default().push(ours);
                samples.raw.entry(op).or_default().push(raw_t);
                *samples.requests.entry(op).or_default() += requests;
            }
        }
    }
    report(&mut samples, iterations)
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn report(samples: &mut Samples, iterations: usize) -> String {
    let mut out = String::new();
    writeln!(out, "## lease-dynamo: DynamoDB Local\n").unwrap();
    writeln!(
        out,
        "{iterations} iterations per operation after warm-up, interleaved with the raw SDK call \
         sending the same update and condition through the same client to the same endpoint.\n"
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
        let requests = samples.requests[op] as f64 / iterations as f64;
        writeln!(
            out,
            "| {op} | {requests:.2} | {m:.2?} | {p:.2?} | {rm:.2?} | {rp:.2?} | {:.2}x | {:.2}x |",
            m.as_secs_f64() / rm.as_secs_f64(),
            p.as_secs_f64() / rp.as_secs_f64(),
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

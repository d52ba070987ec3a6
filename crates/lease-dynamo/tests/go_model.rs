//! Property test on DynamoDB Local: clients of this crate and clients speaking the Go `lease`
//! package's requests (verbatim, as in `go_interop.rs`) contend for the same keys in random
//! interleavings, with time passing between operations. At every step at most one client
//! trusts each key, and the fencing tokens this crate issues for a key only grow.
//!
//! A client of this crate trusts its lease until its monotonic deadline; a Go client until its
//! `ExpiresAt` second, which is what the Go package tells its caller.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use lease_core::{Clock, Lease, LeaseKey, ManualClock};
use lease_dynamo::DynamoLeases;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const D: Duration = Duration::from_secs(2);
/// Clients 0 and 1 use this crate; 2 and 3 speak Go's requests.
const CLIENTS: usize = 4;
const KEYS: usize = 2;

#[derive(Clone, Debug)]
enum Op {
    Acquire(usize, usize),
    Renew(usize, usize),
    Release(usize, usize),
    /// Let this many milliseconds pass.
    Wait(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..CLIENTS, 0..KEYS).prop_map(|(c, k)| Op::Acquire(c, k)),
        2 => (0..CLIENTS, 0..KEYS).prop_map(|(c, k)| Op::Renew(c, k)),
        1 => (0..CLIENTS, 0..KEYS).prop_map(|(c, k)| Op::Release(c, k)),
        3 => (0u64..1500).prop_map(Op::Wait),
    ]
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn unix_s(at: SystemTime) -> i64 {
    i64::try_from(at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()).unwrap()
}

fn failed_condition<T, E: std::fmt::Debug>(result: Result<T, E>) -> bool {
    match result {
        Ok(_) => false,
        Err(e) if format!("{e:?}").contains("ConditionalCheckFailedException") => true,
        Err(e) => panic!("request failed: {e:?}"),
    }
}

/// What one client holds on one key.
enum Held {
    Ours(Lease),
    /// A Go lease: its token and `ExpiresAt` (whole seconds).
    Go(String, i64),
}

struct World {
    leases: support::GoCalls,
    client: Client,
    clock: Arc<ManualClock>,
    keys: Vec<String>,
    held: HashMap<(usize, usize), Held>,
    last_fencing: HashMap<usize, u64>,
    tokens: u64,
}

impl World {
    fn go_key(&self, key: usize) -> HashMap<String, AttributeValue> {
        HashMap::from([
            ("pk".to_owned(), s(&self.keys[key])),
            ("sk".to_owned(), s("LOCK")),
        ])
    }

    fn trusts(&self, held: &Held) -> bool {
        match held {
            Held::Ours(lease) => support::trusted(lease, self.clock.as_ref()),
            Held::Go(_, expires) => unix_s(self.clock.now()) < *expires,
        }
    }

    async fn step(&mut self, op: &Op) -> Result<(), String> {
        // A request takes time: no two operations at the same microsecond.
        self.clock.advance(Duration::from_millis(1));
        match *op {
            Op::Wait(ms) => self.clock.advance(Duration::from_millis(ms)),
            Op::Acquire(c, k) if c < 2 => {
                let key = LeaseKey::new(self.keys[k].as_str()).unwrap();
                if let Ok(lease) = self.leases.acquire_key(&key, D).await {
                    let fencing = lease.fencing_token().get();
                    if let Some(last) = self.last_fencing.insert(k, fencing)
                        && fencing <= last
                    {
                        return Err(format!("fencing token {fencing} after {last} on key {k}"));
                    }
                    self.held.insert((c, k), Held::Ours(lease));
                }
            }
            Op::Acquire(c, k) => {
                self.tokens += 1;
                let token = format!("go-{c}-{}", self.tokens);
                let now = self.clock.now();
                let expires = unix_s(now + D);
                let mut item = self.go_key(k);
                item.insert("lease_token".into(), s(&token));
                item.insert("lease_expires_at".into(), n(expires));
                item.insert("ttl".into(), n(expires + 3600));
                let result = self
                    .client
                    .put_item()
                    .table_name(self.leases.leases().table())
                    .set_item(Some(item))
                    .condition_expression("attribute_not_exists(#pk) OR #lease_expires_at <= :now")
                    .expression_attribute_names("#pk", "pk")
                    .expression_attribute_names("#lease_expires_at", "lease_expires_at")
                    .expression_attribute_values(":now", n(unix_s(now)))
                    .send()
                    .await;
                if !failed_condition(result) {
                    self.held.insert((c, k), Held::Go(token, expires));
                }
            }
            Op::Renew(c, k) => match self.held.remove(&(c, k)) {
                Some(Held::Ours(lease)) => {
                    if let Ok(renewed) = self.leases.refresh(&lease, D).await {
                        self.held.insert((c, k), Held::Ours(renewed));
                    }
                }
                Some(Held::Go(token, old)) => {
                    let now = self.clock.now();
                    let expires = unix_s(now + D);
                    let result = self
                        .client
                        .update_item()
                        .table_name(self.leases.leases().table())
                        .set_key(Some(self.go_key(k)))
                        .update_expression("SET #lease_expires_at = :exp, #ttl = :ttl")
                        .condition_expression("#lease_token = :token AND #lease_expires_at > :now")
                        .expression_attribute_names("#lease_token", "lease_token")
                        .expression_attribute_names("#lease_expires_at", "lease_expires_at")
                        .expression_attribute_names("#ttl", "ttl")
                        .expression_attribute_values(":token", s(&token))
                        .expression_attribute_values(":now", n(unix_s(now)))
                        .expression_attribute_values(":exp", n(expires))
                        .expression_attribute_values(":ttl", n(expires + 3600))
                        .send()
                        .await;
                    let expires = if failed_condition(result) {
                        old
                    } else {
                        expires
                    };
                    self.held.insert((c, k), Held::Go(token, expires));
                }
                None => {}
            },
            Op::Release(c, k) => match self.held.remove(&(c, k)) {
                Some(Held::Ours(lease)) => {
                    let _ = self.leases.release(&lease).await;
                }
                Some(Held::Go(token, _)) => {
                    let result = self
                        .client
                        .delete_item()
                        .table_name(self.leases.leases().table())
                        .set_key(Some(self.go_key(k)))
                        .condition_expression("#lease_token = :token")
                        .expression_attribute_names("#lease_token", "lease_token")
                        .expression_attribute_values(":token", s(&token))
                        .send()
                        .await;
                    let _ = failed_condition(result);
                }
                None => {}
            },
        }
        for k in 0..KEYS {
            let trusting: Vec<usize> = (0..CLIENTS)
                .filter(|c| self.held.get(&(*c, k)).is_some_and(|h| self.trusts(h)))
                .collect();
            if trusting.len() > 1 {
                return Err(format!(
                    "clients {trusting:?} all trust key {k} after {op:?}"
                ));
            }
        }
        Ok(())
    }
}

#[test]
fn go_and_rust_clients_never_both_hold_a_key() {
    let Some(endpoint) = support::endpoint("go_and_rust_clients_never_both_hold_a_key") else {
        return;
    };
    let rt = support::runtime();
    let client = support::client(&endpoint, &support::Wiring::default());
    let table = rt.block_on(support::fresh_table(&client, "gomodel"));
    let mut runner = TestRunner::new(Config {
        cases: 96,
        failure_persistence: None,
        ..Config::default()
    });
    let cases = AtomicUsize::new(0);
    let steps = AtomicUsize::new(0);
    let result = runner.run(&proptest::collection::vec(op(), 1..40), |ops| {
        let case = cases.fetch_add(1, Ordering::Relaxed);
        steps.fetch_add(ops.len(), Ordering::Relaxed);
        let clock = Arc::new(ManualClock::new());
        // Not on a whole second, so Go's rounding matters.
        clock.advance(Duration::from_millis(437));
        let leases = DynamoLeases::builder(client.clone(), table.clone())
            .with_clock(clock.clone())
            .build()
            .unwrap();
        let mut world = World {
            leases: support::GoCalls(leases),
            client: client.clone(),
            clock,
            keys: (0..KEYS).map(|k| format!("case{case}-k{k}")).collect(),
            held: HashMap::new(),
            last_fencing: HashMap::new(),
            tokens: 0,
        };
        rt.block_on(async {
            for op in &ops {
                world.step(op).await.map_err(TestCaseError::fail)?;
            }
            Ok(())
        })
    });
    println!(
        "go_and_rust_clients_never_both_hold_a_key: {} cases, {} operations",
        cases.into_inner(),
        steps.into_inner()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

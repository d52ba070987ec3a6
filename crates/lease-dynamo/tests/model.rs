//! Property test on DynamoDB Local: `DynamoLeases` answers as lease-core's model does, and no two
//! clients ever trust a lease on one key at the same instant. Each operation is a network call,
//! so the case counts are modest: 128 cases without a skew allowance and 64 with one, each up to
//! 40 operations by 3 clients on 2 keys.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::ManualClock;
use lease_core::conformance::Subject;
use lease_core::conformance::counting_model::{check_counting_against_model, counting_ops};
use lease_core::conformance::model::{check_against_model, ops};
use lease_dynamo::DynamoLeases;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const DURATION: Duration = Duration::from_millis(300);

fn check(name: &str, cases: u32, skew: Duration) {
    let Some(endpoint) = support::endpoint(name) else {
        return;
    };
    let rt = support::runtime();
    let client = support::client(&endpoint, &support::Wiring::default());
    let table = rt.block_on(support::fresh_table(&client, "model"));
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let steps = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&ops(3, 2, DURATION, 40), |ops| {
        steps.fetch_add(ops.len(), std::sync::atomic::Ordering::Relaxed);
        let clock = Arc::new(ManualClock::new());
        let leases = DynamoLeases::builder(client.clone(), table.clone())
            .with_clock(clock.clone())
            .with_max_clock_skew(skew)
            .build()
            .unwrap();
        // A fresh subject per case: fresh keys, fresh clock.
        let subject = Subject::new(Arc::new(leases), clock).with_takeover_delay(skew);
        rt.block_on(check_against_model(&subject, DURATION, &ops))
            .map_err(TestCaseError::fail)
    });
    println!(
        "{name}: {cases} cases, {} operations checked against the model",
        steps.into_inner()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn dynamo_matches_the_model() {
    check("dynamo_matches_the_model", 128, Duration::ZERO);
}

#[test]
fn dynamo_matches_the_model_with_skew_allowance() {
    check(
        "dynamo_matches_the_model_with_skew_allowance",
        64,
        Duration::from_millis(100),
    );
}

/// Counting leases on DynamoDB Local against lease-core's counting model, with lost replies on
/// a fifth of the acquisitions (the fault layer applies the write and drops its reply) and
/// holders pausing past their expiry: never more holders than the largest N, never two holders
/// of one slot, fencing per slot strictly increasing. 48 cases of up to 30 operations by 4
/// clients with limits 1..=3 (`LEASE_LONG=1`: 256 cases).
#[test]
fn dynamo_counting_leases_match_the_model_with_lost_replies() {
    let name = "dynamo_counting_leases_match_the_model_with_lost_replies";
    let Some(endpoint) = support::endpoint(name) else {
        return;
    };
    let cases = if std::env::var_os("LEASE_LONG").is_some() {
        256
    } else {
        48
    };
    let rt = support::runtime();
    let faults = Arc::new(support::Faults::default());
    let wiring = support::Wiring {
        counter: None,
        faults: Some(faults.clone()),
    };
    let client = support::client(&endpoint, &wiring);
    let table = rt.block_on(support::fresh_table(&client, "counting"));
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&counting_ops(4, 3, DURATION, 30), |ops| {
        let clock = Arc::new(ManualClock::new());
        let leases = DynamoLeases::builder(client.clone(), table.clone())
            .with_clock(clock.clone())
            .build()
            .unwrap();
        let subject = Subject::new(Arc::new(leases), clock).with_reply_faults(faults.clone());
        rt.block_on(check_counting_against_model(&subject, DURATION, &ops))
            .map_err(TestCaseError::fail)
    });
    println!(
        "{name}: {cases} cases, {} replies lost on purpose",
        lease_core::conformance::ReplyFaults::lost_replies(faults.as_ref())
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

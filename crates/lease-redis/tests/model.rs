//! Property test on a real server: `RedisLeases` answers as lease-core's model does, and no two
//! clients ever trust a lease on one key at the same instant. Each operation is a round trip,
//! so the case counts are modest: 96 cases without a skew allowance and 48 with one, each up to
//! 40 operations by 3 clients on 2 keys; and counting leases with a fifth of the replies lost for
//! real (`LEASE_LONG=1`: four times as many cases).
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::ManualClock;
use lease_core::conformance::Subject;
use lease_core::conformance::counting_model::{check_counting_against_model, counting_ops};
use lease_core::conformance::model::{check_against_model, ops};
use lease_redis::RedisLeases;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const DURATION: Duration = Duration::from_millis(300);

fn scaled(cases: u32) -> u32 {
    if std::env::var_os("LEASE_LONG").is_some() {
        cases * 4
    } else {
        cases
    }
}

fn check(name: &str, cases: u32, skew: Duration) {
    let Some(server) = support::server(name) else {
        return;
    };
    let rt = support::runtime();
    let mut runner = TestRunner::new(Config {
        cases: scaled(cases),
        failure_persistence: None,
        ..Config::default()
    });
    let steps = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&ops(3, 2, DURATION, 40), |ops| {
        steps.fetch_add(ops.len(), std::sync::atomic::Ordering::Relaxed);
        let clock = Arc::new(ManualClock::new());
        let leases = RedisLeases::builder_for_url(&server.url, support::prefix("model"))
            .unwrap()
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
        "{name}: {} cases, {} operations checked against the model",
        scaled(cases),
        steps.into_inner()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn redis_matches_the_model() {
    check("redis_matches_the_model", 96, Duration::ZERO);
}

#[test]
fn redis_matches_the_model_with_skew_allowance() {
    check(
        "redis_matches_the_model_with_skew_allowance",
        48,
        Duration::from_millis(100),
    );
}

/// Counting leases against lease-core's counting model, with lost replies on a fifth of the
/// acquisitions (the proxy lets the script run and drops the connection before the reply) and
/// holders pausing past their expiry: never more holders than the largest N, never two holders
/// of one slot, fencing per slot strictly increasing.
#[test]
fn redis_counting_leases_match_the_model_with_lost_replies() {
    let name = "redis_counting_leases_match_the_model_with_lost_replies";
    let Some(server) = support::server(name) else {
        return;
    };
    let rt = support::runtime();
    let proxy = rt.block_on(support::Proxy::start(&server.url));
    let url = support::via(&server.url, proxy.port());
    let mut runner = TestRunner::new(Config {
        cases: scaled(32),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&counting_ops(4, 3, DURATION, 30), |ops| {
        let clock = Arc::new(ManualClock::new());
        let leases = RedisLeases::builder_for_url(&url, support::prefix("counting"))
            .unwrap()
            .with_clock(clock.clone())
            .build()
            .unwrap();
        let subject = Subject::new(Arc::new(leases), clock).with_reply_faults(proxy.faults.clone());
        rt.block_on(check_counting_against_model(&subject, DURATION, &ops))
            .map_err(TestCaseError::fail)
    });
    println!(
        "{name}: {} cases, {} replies lost on purpose",
        scaled(32),
        proxy.faults.lost()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

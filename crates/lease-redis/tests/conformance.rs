//! `RedisLeases` passes the whole lease-core conformance suite on a real Redis server, twice:
//! with no clock-skew allowance, and with 250 ms (contenders wait `expires_at + 250 ms`), fenced
//! values included, and with replies lost for real where a case asks for it (a loopback proxy
//! lets the script run, then drops the connection before the reply).
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::ManualClock;
use lease_core::conformance::{Case, Subject};

fn run(name: &str, case: Case, skew: Duration) {
    support::run(name, |url| async move {
        let clock = Arc::new(ManualClock::new());
        let (leases, proxy, _prefix) = support::leases(&url, "conf", |b| {
            b.with_clock(clock.clone()).with_max_clock_skew(skew)
        })
        .await;
        let subject = Subject::new(Arc::new(leases), clock)
            .with_takeover_delay(skew)
            .with_reply_faults(proxy.faults.clone());
        case(&subject).await;
    });
}

fn harness(name: &str, case: Case) {
    run(name, case, Duration::ZERO);
}

lease_core::conformance_tests!(harness);

mod skewed {
    fn harness(name: &str, case: lease_core::conformance::Case) {
        super::run(name, case, std::time::Duration::from_millis(250));
    }

    lease_core::conformance_tests!(harness);
}

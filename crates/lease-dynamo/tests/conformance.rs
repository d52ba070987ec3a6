//! `DynamoLeases` passes the whole lease-core conformance suite on DynamoDB Local, twice: with
//! no clock-skew allowance, and with 250 ms (contenders wait `expires_at + 250 ms`), fenced
//! values included, and with replies lost on purpose where a case asks for it.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::ManualClock;
use lease_core::conformance::{Case, Subject};
use lease_dynamo::DynamoLeases;

fn run(name: &str, case: Case, skew: Duration) {
    let Some(endpoint) = support::endpoint(name) else {
        return;
    };
    support::runtime().block_on(async {
        let faults = Arc::new(support::Faults::default());
        let wiring = support::Wiring {
            counter: None,
            faults: Some(faults.clone()),
        };
        let client = support::client(&endpoint, &wiring);
        let table = support::fresh_table(&client, "conf").await;
        let clock = Arc::new(ManualClock::new());
        let leases = Arc::new(
            DynamoLeases::builder(client, table)
                .with_clock(clock.clone())
                .with_max_clock_skew(skew)
                .build()
                .unwrap(),
        );
        let subject = Subject::new(leases.clone(), clock)
            .with_takeover_delay(skew)
            .with_reply_faults(faults);
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

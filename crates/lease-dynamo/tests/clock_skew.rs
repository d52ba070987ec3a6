//! Two hosts whose wall clocks differ by 2 s share a table (injected clocks). With no skew
//! allowance (the default, and what `lease run` always used before `--max-clock-skew`), the host
//! whose clock runs ahead takes a 10 s lease over while its holder still trusts it: a double
//! grant. A 2 s allowance closes it, and the takeover still comes once the lease has really
//! ended. `lease run --max-clock-skew 2s` sets this allowance (see lease-cli's `stores.rs`).
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::{AcquireOptions, Clock, LeaseBackend, LeaseKey, ManualClock};
use lease_dynamo::DynamoLeases;
use support::Wiring;

const D: Duration = Duration::from_secs(10);
const SKEW: Duration = Duration::from_secs(2);

/// A holder and a contender whose clock reads `SKEW` ahead, on one table, with `allowance`.
async fn hosts(
    endpoint: &str,
    allowance: Duration,
) -> (
    DynamoLeases,
    Arc<ManualClock>,
    DynamoLeases,
    Arc<ManualClock>,
) {
    let holder_clock = Arc::new(ManualClock::new());
    let (holder, client) = support::leases(endpoint, &Wiring::default(), |b| {
        b.with_clock(holder_clock.clone())
            .with_max_clock_skew(allowance)
    })
    .await;
    let ahead = Arc::new(ManualClock::starting_at(holder_clock.now() + SKEW));
    let contender = DynamoLeases::builder(client, holder.table())
        .with_clock(ahead.clone())
        .with_max_clock_skew(allowance)
        .build()
        .unwrap();
    (holder, holder_clock, contender, ahead)
}

/// The contender tries the key when `at` of real time has passed since the acquisition;
/// returns whether it got it and whether the holder still trusted its lease then.
async fn try_at(endpoint: &str, allowance: Duration, at: Duration) -> (bool, bool) {
    let (holder, holder_clock, contender, ahead) = hosts(endpoint, allowance).await;
    let key = LeaseKey::new("report").unwrap();
    let lease = holder
        .try_acquire(&key, D, &AcquireOptions::default())
        .await
        .unwrap();
    holder_clock.advance(at);
    ahead.advance(at);
    let taken = contender
        .try_acquire(&key, D, &AcquireOptions::default())
        .await
        .is_ok();
    (taken, support::trusted(&lease, holder_clock.as_ref()))
}

#[test]
fn a_skew_allowance_closes_the_two_second_skew_double_grant() {
    support::run(
        "a_skew_allowance_closes_the_two_second_skew_double_grant",
        |endpoint| async move {
            // 8.5 s after the acquisition the holder trusts its 10 s lease (deadline 9 s); the
            // contender's clock reads 10.5 s past it.
            let at = Duration::from_millis(8500);
            let (taken, trusted) = try_at(&endpoint, Duration::ZERO, at).await;
            assert!(
                taken && trusted,
                "without an allowance the skewed contender takes a trusted lease (the hole)"
            );
            let (taken, trusted) = try_at(&endpoint, SKEW, at).await;
            assert!(trusted);
            assert!(
                !taken,
                "a 2 s allowance refuses the takeover while the holder trusts"
            );
            // Once the lease has really ended (plus the allowance), it is taken.
            let (taken, trusted) = try_at(&endpoint, SKEW, D + Duration::from_millis(10)).await;
            assert!(taken && !trusted);
        },
    );
}

//! Property test: the memory backend answers as the model does, and no two clients ever trust a
//! lease on one key at the same instant.
#![cfg(feature = "conformance")]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use lease_core::conformance::Subject;
use lease_core::conformance::counting_model::{check_counting_against_model, counting_ops};
use lease_core::conformance::model::{check_against_model, ops};
use lease_core::{ManualClock, MemoryBackend};
use proptest::prelude::*;

const DURATION: Duration = Duration::from_millis(300);

fn subject(takeover_delay: Duration) -> Subject {
    let clock = Arc::new(ManualClock::new());
    let backend = MemoryBackend::builder().with_clock(clock.clone()).build();
    Subject::new(Arc::new(backend), clock).with_takeover_delay(takeover_delay)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn memory_backend_matches_the_model(ops in ops(3, 2, DURATION, 60)) {
        let result = pollster::block_on(check_against_model(&subject(Duration::ZERO), DURATION, &ops));
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

/// A backend that lets contenders in before the model's skew allowance is caught: the checker is
/// not vacuous.
#[test]
fn checker_catches_a_backend_that_breaks_the_skew_allowance() {
    let ops = vec![
        lease_core::conformance::model::Op::Acquire { client: 0, key: 0 },
        lease_core::conformance::model::Op::Advance { millis: 301 },
        lease_core::conformance::model::Op::Acquire { client: 1, key: 0 },
    ];
    // The memory backend has no allowance; the model is told it has 100 ms, so it expects Held.
    let result = pollster::block_on(check_against_model(
        &subject(Duration::from_millis(100)),
        DURATION,
        &ops,
    ));
    assert!(result.is_err_and(|e| e.contains("model says Held")));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Counting leases: never more holders than the largest N, never two of one slot, fencing per
    /// slot strictly increasing, as N changes and holders pause.
    #[test]
    fn memory_counting_leases_match_the_model(ops in counting_ops(5, 4, DURATION, 60)) {
        let result = pollster::block_on(check_counting_against_model(&subject(Duration::ZERO), DURATION, &ops));
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

/// A backend that breaks the contract: it takes a held lease over by releasing its holder first.
#[derive(Debug)]
struct Usurper(MemoryBackend);

impl lease_core::LeaseBackend for Usurper {
    fn name(&self) -> &'static str {
        "usurper"
    }
    fn clock(&self) -> &dyn lease_core::Clock {
        self.0.clock()
    }
    fn try_acquire<'a>(
        &'a self,
        key: &'a lease_core::LeaseKey,
        duration: Duration,
        options: &'a lease_core::AcquireOptions,
    ) -> lease_core::BoxFuture<'a, Result<lease_core::Lease, lease_core::LeaseError>> {
        Box::pin(async move {
            let held = match self.0.try_acquire(key, duration, options).await {
                Err(held) if held.is_held() => held,
                result => return result,
            };
            let holder = held.holder().unwrap();
            let (token, fencing) = (holder.token().unwrap(), holder.fencing_token().unwrap());
            self.0.release(key, token, fencing).await.unwrap();
            self.0.try_acquire(key, duration, options).await
        })
    }
    fn renew<'a>(
        &'a self,
        lease: &'a lease_core::Lease,
        duration: Duration,
    ) -> lease_core::BoxFuture<'a, Result<lease_core::Lease, lease_core::LeaseError>> {
        self.0.renew(lease, duration)
    }
    fn release<'a>(
        &'a self,
        key: &'a lease_core::LeaseKey,
        token: &'a lease_core::LeaseToken,
        fencing: lease_core::FencingToken,
    ) -> lease_core::BoxFuture<'a, Result<(), lease_core::LeaseError>> {
        self.0.release(key, token, fencing)
    }
    fn inspect<'a>(
        &'a self,
        key: &'a lease_core::LeaseKey,
    ) -> lease_core::BoxFuture<'a, Result<Option<lease_core::LeaseRecord>, lease_core::LeaseError>>
    {
        self.0.inspect(key)
    }
}

/// The counting model catches a backend that lets a third holder into a counting lease of two:
/// the checker is not vacuous.
#[test]
fn counting_checker_catches_a_slot_given_twice() {
    use lease_core::conformance::counting_model::CountingOp;
    let clock = Arc::new(ManualClock::new());
    let backend = Usurper(MemoryBackend::builder().with_clock(clock.clone()).build());
    let subject = Subject::new(Arc::new(backend), clock);
    let acquire = |client| CountingOp::Acquire {
        client,
        limit: 2,
        lose_reply: false,
    };
    let ops = [acquire(0), acquire(1), acquire(2)];
    let result = pollster::block_on(check_counting_against_model(&subject, DURATION, &ops));
    let error = result.unwrap_err();
    // Caught when a held slot is granted (step 1, if the first slot tried is held), or at the
    // latest when a third holder gets in (step 2).
    let caught = error.contains("which the model holds taken") || error.contains("model says Held");
    assert!(caught, "{error}");
}

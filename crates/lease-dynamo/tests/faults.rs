//! Fault injection at the transport: replies lost after the server applied a write, throttling
//! and 5xx answers. Shows retries with reconciliation, and that the SDK's own retries are off.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::{
    AcquireOptions, FencedValues, LeaseBackend, LeaseKey, ManualClock, NotOwnedReason,
    RandomTokens, TokenSource,
};
use lease_dynamo::{DynamoLeases, RetryPolicy};
use support::{Faults, RequestCounter, Wiring};

const D: Duration = Duration::from_secs(10);

struct Rig {
    leases: DynamoLeases,
    counter: Arc<RequestCounter>,
    faults: Arc<Faults>,
    clock: Arc<ManualClock>,
}

async fn rig(endpoint: &str, retry: RetryPolicy) -> Rig {
    let counter = Arc::new(RequestCounter::default());
    let faults = Arc::new(Faults::default());
    let clock = Arc::new(ManualClock::new());
    let wiring = Wiring {
        counter: Some(counter.clone()),
        faults: Some(faults.clone()),
    };
    let (leases, _) = support::leases(endpoint, &wiring, |b| {
        b.with_clock(clock.clone()).with_retry_policy(
            retry.with_backoff(Duration::from_millis(1), Duration::from_millis(20)),
        )
    })
    .await;
    Rig {
        leases,
        counter,
        faults,
        clock,
    }
}

#[test]
fn lost_acquire_reply_is_reconciled_from_all_old() {
    support::run(
        "lost_acquire_reply_is_reconciled_from_all_old",
        |endpoint| async move {
            let r = rig(&endpoint, RetryPolicy::default()).await;
            let first = r
                .leases
                .try_acquire(&LeaseKey::new("k").unwrap(), D, &AcquireOptions::default())
                .await
                .unwrap();
            support::release(&r.leases, &first).await.unwrap();
            r.counter.take();

            r.faults.lose_replies(1);
            let lease = r
                .leases
                .try_acquire(&LeaseKey::new("k").unwrap(), D, &AcquireOptions::default())
                .await
                .unwrap();
            assert_eq!(r.faults.lost(), 1, "the first reply was lost");
            assert_eq!(r.counter.count(), 2, "one retry, whose condition failed");
            assert_eq!(
                lease.fencing_token().get(),
                first.fencing_token().get() + 1,
                "the retry did not acquire a second time"
            );
            let record = LeaseBackend::inspect(&r.leases, &LeaseKey::new("k").unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(record.holder().and_then(|h| h.token()), Some(lease.token()));
            assert_eq!(record.fencing_token(), Some(lease.fencing_token()));
            // We really hold it: renew and release work, others are turned away.
            assert!(
                r.leases
                    .try_acquire(&LeaseKey::new("k").unwrap(), D, &AcquireOptions::default())
                    .await
                    .unwrap_err()
                    .is_held()
            );
            let lease = r.leases.renew(&lease, D).await.unwrap();
            support::release(&r.leases, &lease).await.unwrap();
        },
    );
}

#[test]
fn lost_takeover_reply_is_reconciled() {
    support::run("lost_takeover_reply_is_reconciled", |endpoint| async move {
        let r = rig(&endpoint, RetryPolicy::default()).await;
        let old = r
            .leases
            .try_acquire(&LeaseKey::new("k").unwrap(), D, &AcquireOptions::default())
            .await
            .unwrap();
        r.clock.advance(D + Duration::from_millis(1));
        r.faults.lose_replies(1);
        let new = r
            .leases
            .try_acquire(&LeaseKey::new("k").unwrap(), D, &AcquireOptions::default())
            .await
            .unwrap();
        assert_eq!(r.faults.lost(), 1);
        assert_eq!(new.fencing_token().get(), old.fencing_token().get() + 1);
        let err = r.leases.renew(&old, D).await.unwrap_err();
        assert!(err.is_not_owned(), "{err}");
        r.leases.renew(&new, D).await.unwrap();
    });
}

#[test]
fn lost_renew_reply_keeps_the_lease() {
    support::run("lost_renew_reply_keeps_the_lease", |endpoint| async move {
        let r = rig(&endpoint, RetryPolicy::default()).await;
        let lease = r
            .leases
            .try_acquire(&LeaseKey::new("k").unwrap(), D, &AcquireOptions::default())
            .await
            .unwrap();
        r.clock.advance(D / 2);
        r.counter.take();
        r.faults.lose_replies(1);
        let renewed = r.leases.renew(&lease, D).await.unwrap();
        assert_eq!(r.faults.lost(), 1);
        assert_eq!(r.counter.count(), 2);
        assert!(renewed.expires_at() > lease.expires_at());
        let record = LeaseBackend::inspect(&r.leases, lease.key())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            record.holder().and_then(|h| h.expires_at()),
            Some(renewed.expires_at())
        );
        // Past the first expiry, still ours.
        r.clock.advance(D / 2 + Duration::from_millis(5));
        assert!(
            r.leases
                .try_acquire(&LeaseKey::new("k").unwrap(), D, &AcquireOptions::default())
                .await
                .unwrap_err()
                .is_held()
        );
    });
}

#[test]
fn lost_release_reply_is_reconciled() {
    support::run("lost_release_reply_is_reconciled", |endpoint| async move {
        let r = rig(&endpoint, RetryPolicy::default()).await;
        // Go-style release, which knows the fencing token.
        let lease = r
            .leases
            .try_acquire(&LeaseKey::new("a").unwrap(), D, &AcquireOptions::default())
            .await
            .unwrap();
        r.counter.take();
        r.faults.lose_replies(1);
        support::release(&r.leases, &lease).await.unwrap();
        assert_eq!((r.faults.lost(), r.counter.take().len()), (1, 2));
        let record = LeaseBackend::inspect(&r.leases, lease.key())
            .await
            .unwrap()
            .unwrap();
        assert!(record.holder().is_none());
        assert_eq!(
            record.fencing_token(),
            Some(lease.fencing_token()),
            "fencing kept"
        );

        // The trait's release(key, token, fencing).
        let lease = r
            .leases
            .try_acquire(&LeaseKey::new("b").unwrap(), D, &AcquireOptions::default())
            .await
            .unwrap();
        r.faults.lose_replies(1);
        LeaseBackend::release(&r.leases, lease.key(), lease.token(), lease.fencing_token())
            .await
            .unwrap();
        assert_eq!(r.faults.lost(), 2);

        // Without a lost reply a second release is still refused: reconciliation needs doubt.
        let err = support::release(&r.leases, &lease).await.unwrap_err();
        assert!(err.is_not_owned(), "{err}");
    });
}

/// Issue 11, point 3: on main before the fix, a release whose reply was lost counted "no
/// holder" as its own success, so releasing a token that never held the key returned `Ok`.
#[test]
fn a_lost_reply_never_makes_a_strangers_release_succeed() {
    support::run(
        "a_lost_reply_never_makes_a_strangers_release_succeed",
        |endpoint| async move {
            let r = rig(&endpoint, RetryPolicy::default()).await;
            let key = LeaseKey::new("free").unwrap();
            let lease = r
                .leases
                .try_acquire(&key, D, &AcquireOptions::default())
                .await
                .unwrap();
            support::release(&r.leases, &lease).await.unwrap();
            let stranger = RandomTokens.next_token();
            for fencing in [lease.fencing_token(), lease_core::backend::fencing_token(0)] {
                r.faults.lose_replies(1);
                let lost = r.faults.lost();
                let err = LeaseBackend::release(&r.leases, &key, &stranger, fencing)
                    .await
                    .unwrap_err();
                assert!(err.is_not_owned(), "{err}");
                assert_eq!(r.faults.lost(), lost + 1, "the reply was lost");
            }
            // The released lease released again, its reply lost: still nothing to release.
            r.faults.lose_replies(1);
            let err = support::release(&r.leases, &lease).await.unwrap_err();
            assert!(err.is_not_owned(), "{err}");
        },
    );
}

/// Issue 11, point 2: on main before the fix, a second call with the holder's token "recognised"
/// the live lease as its own and both callers got `Ok` with the same fencing token.
#[test]
fn a_second_call_with_the_holders_token_is_held() {
    support::run(
        "a_second_call_with_the_holders_token_is_held",
        |endpoint| async move {
            let r = rig(&endpoint, RetryPolicy::default().with_max_attempts(1)).await;
            let token = RandomTokens.next_token();
            let options = AcquireOptions::default().with_token(token.clone());
            let key = LeaseKey::new("k").unwrap();
            // One caller's reply is lost; it cannot know it holds the lease...
            r.faults.lose_replies(1);
            let err = r.leases.try_acquire(&key, D, &options).await.unwrap_err();
            assert!(
                err.is_transient(),
                "a lost reply is a transient failure: {err}"
            );
            // ...and a second call under the same token is a second contender: `Held`, naming
            // the holder's token, so a caller that chose the token can recognise it itself.
            let err = r.leases.try_acquire(&key, D, &options).await.unwrap_err();
            assert!(err.is_held(), "{err}");
            let holder = err.holder().unwrap();
            assert_eq!(holder.token(), Some(&token));
            assert!(holder.fencing_token().is_some());

            // Two managers sharing one token generator, as the Go option invites.
            let key = LeaseKey::new("shared-generator").unwrap();
            let first = r.leases.try_acquire(&key, D, &options).await.unwrap();
            let second = r.leases.try_acquire(&key, D, &options).await;
            assert!(
                second.as_ref().is_err_and(lease_core::LeaseError::is_held),
                "{second:?}"
            );
            r.leases.renew(&first, D).await.unwrap();
        },
    );
}

#[test]
fn throttling_and_5xx_are_retried_with_backoff() {
    support::run(
        "throttling_and_5xx_are_retried_with_backoff",
        |endpoint| async move {
            let r = rig(&endpoint, RetryPolicy::default()).await;
            let first = r
                .leases
                .try_acquire(&LeaseKey::new("k").unwrap(), D, &AcquireOptions::default())
                .await
                .unwrap();
            support::release(&r.leases, &first).await.unwrap();
            r.counter.take();

            r.faults.throttle(2);
            let lease = r
                .leases
                .try_acquire(&LeaseKey::new("k").unwrap(), D, &AcquireOptions::default())
                .await
                .unwrap();
            assert_eq!(r.faults.throttled(), 2);
            assert_eq!(
                r.counter.take().len(),
                3,
                "two throttled attempts, then success"
            );
            assert_eq!(lease.fencing_token().get(), first.fencing_token().get() + 1);

            r.faults.server_error(1);
            r.faults.throttle(1);
            let lease = r.leases.renew(&lease, D).await.unwrap();
            assert_eq!(r.counter.take().len(), 3);
            r.faults.server_error(1);
            support::release(&r.leases, &lease).await.unwrap();
            assert_eq!(r.counter.take().len(), 2);
        },
    );
}

#[test]
fn sdk_retries_are_off_and_persistent_throttling_is_transient() {
    support::run(
        "sdk_retries_are_off_and_persistent_throttling_is_transient",
        |endpoint| async move {
            // One attempt: the SDK's standard retry strategy would have retried throttling.
            let r = rig(&endpoint, RetryPolicy::default().with_max_attempts(1)).await;
            r.faults.throttle(1);
            let err = r
                .leases
                .try_acquire(&LeaseKey::new("k").unwrap(), D, &AcquireOptions::default())
                .await
                .unwrap_err();
            assert!(err.is_transient(), "{err}");
            assert!(report(&err).contains("ThrottlingException"), "{err}");
            assert_eq!(r.counter.take().len(), 1, "exactly one request on the wire");
            assert!(
                LeaseBackend::inspect(&r.leases, &LeaseKey::new("k").unwrap())
                    .await
                    .unwrap()
                    .is_none(),
                "nothing written"
            );

            let r = rig(&endpoint, RetryPolicy::default().with_max_attempts(3)).await;
            r.faults.throttle(10);
            let err = r
                .leases
                .try_acquire(&LeaseKey::new("k").unwrap(), D, &AcquireOptions::default())
                .await
                .unwrap_err();
            assert!(err.is_transient(), "{err}");
            assert_eq!(r.counter.take().len(), 3, "gave up after max attempts");
        },
    );
}

#[test]
fn renew_retries_stop_at_the_lease_deadline() {
    support::run(
        "renew_retries_stop_at_the_lease_deadline",
        |endpoint| async move {
            let r = rig(&endpoint, RetryPolicy::default().with_max_attempts(10)).await;
            let lease = r
                .leases
                .try_acquire(&LeaseKey::new("k").unwrap(), D, &AcquireOptions::default())
                .await
                .unwrap();
            // Past the holder's deadline (duration minus margin) but before the store's expiry.
            r.clock.advance(D - Duration::from_millis(500));
            assert!(!support::trusted(&lease, r.clock.as_ref()));
            r.counter.take();
            r.faults.throttle(5);
            let err = r.leases.renew(&lease, D).await.unwrap_err();
            assert!(err.is_transient(), "{err}");
            assert_eq!(
                r.counter.take().len(),
                1,
                "no retry past the lease's deadline"
            );
        },
    );
}

#[test]
fn missing_table_is_a_permanent_error_naming_it() {
    support::run(
        "missing_table_is_a_permanent_error_naming_it",
        |endpoint| async move {
            let counter = Arc::new(RequestCounter::default());
            let client = support::client(
                &endpoint,
                &Wiring {
                    counter: Some(counter.clone()),
                    faults: None,
                },
            );
            let leases = DynamoLeases::new(client, "no-such-table-here").unwrap();
            let err = leases
                .try_acquire(&LeaseKey::new("k").unwrap(), D, &AcquireOptions::default())
                .await
                .unwrap_err();
            assert!(!err.is_transient(), "{err}");
            let text = report(&err);
            assert!(text.contains("no-such-table-here"), "{text}");
            assert!(text.contains("ResourceNotFoundException"), "{text}");
            assert_eq!(counter.count(), 1, "a permanent error is not retried");
        },
    );
}

#[test]
fn lost_put_fenced_reply_is_reconciled() {
    support::run(
        "lost_put_fenced_reply_is_reconciled",
        |endpoint| async move {
            let t = lease_core::backend::fencing_token;
            let r = rig(&endpoint, RetryPolicy::default()).await;
            let name = LeaseKey::with_sort_key("checkpoints", "shard-1").unwrap();
            r.leases.put_fenced(&name, t(4), b"offset=1").await.unwrap();
            r.counter.take();

            // The server applies the put, the reply is lost; the same request is sent again and
            // passes its condition (the fence equals its token): idempotent.
            r.faults.lose_replies(1);
            r.leases
                .put_fenced(&name, t(5), b"offset=42")
                .await
                .unwrap();
            assert_eq!(r.faults.lost(), 1, "the first reply was lost");
            assert_eq!(r.counter.take(), ["UpdateItem"; 2], "one retry");
            let err = r.leases.put_fenced(&name, t(4), b"late").await.unwrap_err();
            assert_eq!(err.not_owned_reason(), Some(NotOwnedReason::Fenced));
            assert_eq!(
                r.counter.take().len(),
                1,
                "a refusal is an answer, not retried"
            );

            // The same for fence_and_read: the retry reads what the lost attempt fenced.
            r.faults.lose_replies(1);
            let seen = r.leases.fence_and_read(&name, t(6)).await.unwrap();
            assert_eq!(seen.as_deref(), Some(&b"offset=42"[..]));
            assert_eq!(r.faults.lost(), 2);
            assert_eq!(r.counter.take().len(), 2);

            // Throttled, then stored.
            r.faults.throttle(1);
            r.leases
                .put_fenced(&name, t(6), b"offset=43")
                .await
                .unwrap();
            assert_eq!(r.counter.take().len(), 2);

            // Without retries the caller sees a transient error and may repeat the same call.
            let r = rig(&endpoint, RetryPolicy::default().with_max_attempts(1)).await;
            r.faults.lose_replies(1);
            let err = r.leases.put_fenced(&name, t(7), b"v7").await.unwrap_err();
            assert!(
                err.is_transient(),
                "a lost reply is a transient failure: {err}"
            );
            r.leases.put_fenced(&name, t(7), b"v7").await.unwrap();
            // A newer owner fenced the name between the lost reply and the repeat: refused.
            r.faults.lose_replies(1);
            let err = r.leases.put_fenced(&name, t(8), b"v8").await.unwrap_err();
            assert!(err.is_transient(), "{err}");
            assert_eq!(
                r.leases
                    .fence_and_read(&name, t(9))
                    .await
                    .unwrap()
                    .as_deref(),
                Some(&b"v8"[..]),
                "the lost put landed"
            );
            let err = r.leases.put_fenced(&name, t(8), b"v8").await.unwrap_err();
            assert_eq!(err.not_owned_reason(), Some(NotOwnedReason::Fenced));
        },
    );
}

/// Found by the fleet's DynamoDB process test: a put whose first attempt landed, reply lost,
/// then a newer owner fenced the name before the retry, was reported refused although its value
/// was stored. The outcome is unknown, and the error says so.
#[test]
fn a_lost_put_overtaken_by_a_newer_fence_is_never_reported_refused() {
    use lease_core::conformance::ReplyFaults as _;
    support::run(
        "a_lost_put_overtaken_by_a_newer_fence_is_never_reported_refused",
        |endpoint| async move {
            let t = lease_core::backend::fencing_token;
            let r = rig(&endpoint, RetryPolicy::default()).await;
            let name = LeaseKey::with_sort_key("checkpoints", "shard-9").unwrap();
            let newer = r.leases.clone();
            let fence_name = name.clone();
            r.faults.lose_next_reply(Some(Box::pin(async move {
                newer.fence_and_read(&fence_name, t(6)).await.unwrap();
            })));
            let err = r
                .leases
                .put_fenced(&name, t(5), b"offset=5")
                .await
                .unwrap_err();
            assert_eq!(r.faults.lost(), 1, "the first reply was lost");
            assert_eq!(err.not_owned_reason(), None, "never a refusal: {err}");
            assert!(report(&err).contains("outcome unknown"), "{err}");
            assert!(!err.is_transient(), "retrying cannot tell: {err}");
            // It had landed: the newer owner's read shows it.
            let seen = r.leases.fence_and_read(&name, t(7)).await.unwrap();
            assert_eq!(seen.as_deref(), Some(&b"offset=5"[..]));
            // Without doubt a refusal is still a refusal.
            let err = r.leases.put_fenced(&name, t(5), b"late").await.unwrap_err();
            assert_eq!(err.not_owned_reason(), Some(NotOwnedReason::Fenced));
        },
    );
}

#[test]
fn delete_retries_transient_failures_and_never_claims_a_lost_one() {
    support::run(
        "delete_retries_transient_failures_and_never_claims_a_lost_one",
        |endpoint| async move {
            let r = rig(&endpoint, RetryPolicy::default()).await;
            let key = LeaseKey::new("gone").unwrap();
            let lease = r
                .leases
                .try_acquire(
                    &LeaseKey::new("gone").unwrap(),
                    D,
                    &AcquireOptions::default(),
                )
                .await
                .unwrap();
            r.counter.take();

            // Throttled and 5xx answers never reached the table: the retry deletes, and says so.
            r.faults.throttle(1);
            r.faults.server_error(1);
            LeaseBackend::delete(
                &r.leases,
                &key,
                Some(lease.token()),
                Some(lease.fencing_token()),
            )
            .await
            .unwrap();
            assert_eq!(r.counter.take(), ["DeleteItem"; 3]);
            assert!(
                LeaseBackend::inspect(&r.leases, &key)
                    .await
                    .unwrap()
                    .is_none()
            );

            // Applied, reply lost: the retry finds the item gone and cannot prove it was ours.
            let lease = r
                .leases
                .try_acquire(
                    &LeaseKey::new("gone").unwrap(),
                    D,
                    &AcquireOptions::default(),
                )
                .await
                .unwrap();
            r.counter.take();
            r.faults.lose_replies(1);
            let err = LeaseBackend::delete(
                &r.leases,
                &key,
                Some(lease.token()),
                Some(lease.fencing_token()),
            )
            .await
            .unwrap_err();
            assert_eq!(
                err.not_owned_reason(),
                Some(NotOwnedReason::Missing),
                "{err}"
            );
            assert_eq!(r.faults.lost(), 1);
            assert_eq!(r.counter.take(), ["DeleteItem"; 2]);
            assert!(
                LeaseBackend::inspect(&r.leases, &key)
                    .await
                    .unwrap()
                    .is_none(),
                "the first attempt deleted it"
            );

            // With retries off, a lost reply is a transient failure: the outcome is unknown.
            let once = rig(&endpoint, RetryPolicy::default().with_max_attempts(1)).await;
            let lease = once
                .leases
                .try_acquire(
                    &LeaseKey::new("gone").unwrap(),
                    D,
                    &AcquireOptions::default(),
                )
                .await
                .unwrap();
            once.faults.lose_replies(1);
            let err = LeaseBackend::delete(
                &once.leases,
                &key,
                Some(lease.token()),
                Some(lease.fencing_token()),
            )
            .await
            .unwrap_err();
            assert!(err.is_transient(), "{err}");
        },
    );
}

/// The error and its sources, joined by `: ` as a report shows them.
fn report(error: &lease_core::LeaseError) -> String {
    let mut text = error.to_string();
    let mut next = std::error::Error::source(error);
    while let Some(source) = next {
        text.push_str(": ");
        text.push_str(&source.to_string());
        next = source.source();
    }
    text
}

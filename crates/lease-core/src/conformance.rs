//! The conformance suite every backend passes, and a model checker for property tests.
//!
//! **Not API-stable**: this module changes with the contract. Enable it with the `conformance`
//! feature in `[dev-dependencies]` only.
//!
//! A backend's test file builds a [`Subject`] (the backend under test, reading time from a
//! [`ManualClock`] the suite advances) in a *harness* function, and lets
//! [`conformance_tests!`](crate::conformance_tests) write one `#[test]` per case:
//!
//! ```
//! use lease_core::conformance::{Case, Subject};
//! use lease_core::{ManualClock, MemoryBackend};
//! use std::sync::Arc;
//!
//! fn harness(_name: &str, case: Case) {
//!     let clock = Arc::new(ManualClock::new());
//!     let backend = MemoryBackend::builder().with_clock(clock.clone()).build();
//!     let subject = Subject::new(Arc::new(backend), clock);
//!     pollster::block_on(case(&subject));
//! }
//!
//! // In a test file: `lease_core::conformance_tests!(harness);`
//! // Here, run one case by hand, by its name in `CASES`:
//! let (name, case) = lease_core::conformance::CASES[0];
//! harness(name, case);
//! ```
//!
//! Cases panic (with a message naming the broken rule) when the backend breaks the contract.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use crate::{
    AcquireOptions, BoxFuture, Clock, FencingToken, Holder, Lease, LeaseBackend, LeaseBackendExt,
    LeaseError, LeaseGuard, LeaseKey, LeaseToken, LossReason, ManualClock, NotOwnedReason,
    WaitOptions,
};

/// One conformance case: a function of the subject returning the future that runs it.
pub type Case = for<'a> fn(&'a Subject) -> BoxFuture<'a, ()>;

/// The one list of conformance cases. It hands the list to `$callback`, which is how both
/// [`CASES`] and [`conformance_tests!`](crate::conformance_tests) are written from it: a case added
/// here is in both, and nowhere else needs to change.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_case_list {
    ([$($callback:tt)*] $($prefix:tt)*) => {
        $($callback)*!($($prefix)*
            exclusive_acquire,
            held_error_names_holder,
            renew_and_release_by_owner_only,
            renew_after_takeover_is_not_owned,
            expiry_then_takeover,
            fencing_strictly_increasing,
            concurrent_contenders_one_winner,
            validation_rejects_bad_input,
            inspect_reports_the_record,
            wait_takes_over_after_expiry,
            guard_renews_and_reports_loss,
            listing_sees_every_sort_key,
            fenced_values_refuse_stale_writers,
            same_token_is_a_second_contender,
            release_tells_the_truth,
            delete_removes_the_named_record,
            delete_refuses_any_other_state,
            delete_tells_the_truth,
            published_value_reaches_readers,
            observer_reports_each_tenure_once,
            counting_lease_admits_at_most_n,
            counting_lease_slots_expire_and_fence,
            counting_lease_limit_changes_never_share_a_slot,
            counting_lease_waits_for_a_slot,
            counting_lease_survives_lost_replies,
        );
    };
}

macro_rules! cases_const {
    ($($case:ident),* $(,)?) => {
        /// Every case, by name, in the order [`conformance_tests!`](crate::conformance_tests)
        /// runs them.
        pub const CASES: &[(&str, Case)] = &[$((stringify!($case), $case)),*];
    };
}

crate::__conformance_case_list!([cases_const]);

/// Writes one `#[test]` per conformance case, each calling `harness(name, case)`.
///
/// The harness builds a fresh [`Subject`] (or skips, printing why, when its store is not
/// reachable) and drives `case(&subject)` to completion on whatever executor the backend needs.
#[macro_export]
macro_rules! conformance_tests {
    ($harness:path) => {
        $crate::__conformance_case_list!([$crate::conformance_tests] @cases $harness;);
    };
    (@cases $harness:path; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $harness(stringify!($case), $crate::conformance::$case);
            }
        )*
    };
}

/// Loses replies on purpose, for backends whose requests cross a network: the store applies a
/// request and the backend never hears back, so it must retry and reconcile.
pub trait ReplyFaults: Send + Sync + std::fmt::Debug {
    /// The next write request reaches the store and is applied; then `meanwhile` runs to
    /// completion (another client acting between the lost reply and the retry), and then the
    /// backend sees a transport failure instead of the reply.
    fn lose_next_reply(&self, meanwhile: Option<BoxFuture<'static, ()>>);

    /// How many replies have been lost so far.
    fn lost_replies(&self) -> u32;
}

/// The backend under test and the manual clock it reads.
#[derive(Debug, Clone)]
pub struct Subject {
    backend: Arc<dyn LeaseBackend>,
    faults: Option<Arc<dyn ReplyFaults>>,
    clock: Arc<ManualClock>,
    namespace: String,
    takeover_delay: Duration,
}

static KEY_SEQ: AtomicU64 = AtomicU64::new(0);

impl Subject {
    /// `backend` must read wall and monotonic time from `clock`.
    pub fn new(backend: Arc<dyn LeaseBackend>, clock: Arc<ManualClock>) -> Self {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        Self {
            backend,
            faults: None,
            clock,
            namespace: format!("conf-{}", &nonce[..12]),
            takeover_delay: Duration::ZERO,
        }
    }

    /// How long after `expires_at` the backend lets contenders take over (its clock-skew
    /// allowance). Default zero.
    pub fn with_takeover_delay(mut self, delay: Duration) -> Self {
        self.takeover_delay = delay;
        self
    }

    /// A way to lose the backend's replies, for backends whose requests cross a network. The
    /// cases that need it also run their fault-free part without it.
    pub fn with_reply_faults(mut self, faults: Arc<dyn ReplyFaults>) -> Self {
        self.faults = Some(faults);
        self
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn LeaseBackend> {
        &self.backend
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<ManualClock> {
        &self.clock
    }

    /// A key unique to this subject and call, so cases can share one store.
    pub fn key(&self, name: &str) -> LeaseKey {
        let seq = KEY_SEQ.fetch_add(1, Ordering::Relaxed);
        LeaseKey::new(format!("{}-{name}-{seq}", self.namespace)).expect("valid test key")
    }

    /// Advances the clock past the expiry of a lease of `duration` and the takeover delay.
    pub fn expire(&self, duration: Duration) {
        self.clock
            .advance(duration + self.takeover_delay + Duration::from_millis(1));
    }
}

const D: Duration = Duration::from_secs(10);

/// One attempt, as the contract's `try_acquire` makes it.
async fn attempt(s: &Subject, key: &LeaseKey) -> Result<Lease, LeaseError> {
    s.backend
        .try_acquire(key, D, &AcquireOptions::default())
        .await
}

fn must<T>(result: Result<T, LeaseError>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(error) => panic!("{what}: unexpected error: {error}"),
    }
}

fn forged(lease: &Lease) -> Lease {
    crate::backend::new_lease(
        lease.key().clone(),
        LeaseToken::new("forged-token-0000").expect("valid token"),
        lease.fencing_token(),
        lease.duration(),
        lease.expires_at(),
        lease.deadline(),
    )
}

fn near(a: SystemTime, b: SystemTime, within: Duration) -> bool {
    let diff = a
        .duration_since(b)
        .unwrap_or_else(|earlier| earlier.duration());
    diff <= within
}

/// A held key cannot be acquired again, not even by the same client.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn exclusive_acquire(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let key = s.key("exclusive");
        let first = must(attempt(s, &key).await, "first acquire");
        assert_eq!(first.key(), &key);
        assert!(
            trusted(&first, s.clock.as_ref()),
            "a fresh lease is trusted"
        );
        let second = attempt(s, &key).await;
        assert!(
            second.as_ref().is_err_and(LeaseError::is_held),
            "second acquire of a held key must fail as held, got {second:?}"
        );
        s.clock.advance(D / 2);
        let third = attempt(s, &key).await;
        assert!(
            third.is_err_and(|e| e.is_held()),
            "still held halfway through"
        );
        let other = must(attempt(s, &s.key("exclusive-other")).await, "other key");
        assert_ne!(
            other.token(),
            first.token(),
            "every acquisition gets its own token"
        );
    })
}

/// The held error says who holds the lease and until when.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn held_error_names_holder(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let key = s.key("holder");
        let options = AcquireOptions::default().with_owner("conformance-owner-alice");
        let lease = must(s.backend.try_acquire(&key, D, &options).await, "acquire");
        let err = attempt(s, &key).await.expect_err("held");
        assert!(err.is_held(), "{err}");
        let holder = err.holder().expect("held error names the holder");
        assert_eq!(
            holder.owner(),
            Some("conformance-owner-alice"),
            "owner label"
        );
        let expires = holder.expires_at().expect("held error tells the expiry");
        assert!(
            near(expires, lease.expires_at(), Duration::from_secs(1)),
            "holder expiry {expires:?} vs lease {:?}",
            lease.expires_at()
        );
        if let Some(fencing) = holder.fencing_token() {
            assert_eq!(fencing, lease.fencing_token(), "holder's fencing token");
        }
        assert!(
            !err.to_string().contains(lease.token().as_str()),
            "the error message must not show the token"
        );
    })
}

/// Only the owner renews and releases; a released key is free at once.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn renew_and_release_by_owner_only(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let key = s.key("owner-only");
        let lease = must(attempt(s, &key).await, "acquire");
        let forgery = forged(&lease);
        let err = s
            .backend
            .renew(&forgery, D)
            .await
            .expect_err("forged renew");
        assert!(err.is_not_owned(), "forged renew must be not-owned: {err}");
        let err = s
            .backend
            .release(&key, forgery.token(), forgery.fencing_token())
            .await
            .expect_err("forged release");
        assert!(
            err.is_not_owned(),
            "forged release must be not-owned: {err}"
        );

        s.clock.advance(D / 2);
        let renewed = must(s.backend.renew(&lease, D).await, "owner renew");
        assert_eq!(
            renewed.fencing_token(),
            lease.fencing_token(),
            "renew keeps the fencing token"
        );
        assert_eq!(renewed.token(), lease.token());
        assert!(
            renewed.expires_at() > lease.expires_at(),
            "renew extends expiry"
        );
        assert!(
            renewed.deadline() > lease.deadline(),
            "renew extends the deadline"
        );
        // Past the first expiry, the renewed lease still holds.
        s.clock.advance(D / 2 + Duration::from_millis(10));
        assert!(
            attempt(s, &key).await.is_err_and(|e| e.is_held()),
            "renewal held"
        );

        must(s.backend.release_lease(&renewed).await, "owner release");
        let err = s
            .backend
            .release_lease(&renewed)
            .await
            .expect_err("double release");
        assert!(err.is_not_owned(), "a second release is not-owned: {err}");
        let err = s
            .backend
            .renew(&renewed, D)
            .await
            .expect_err("renew after release");
        assert!(
            err.is_not_owned(),
            "renew after release is not-owned: {err}"
        );
        let next = must(attempt(s, &key).await, "acquire right after release");
        assert!(next.fencing_token() > lease.fencing_token());
    })
}

/// After another owner takes an expired lease, the old holder can neither renew nor release.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn renew_after_takeover_is_not_owned(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let key = s.key("takeover");
        let old = must(attempt(s, &key).await, "acquire");
        s.expire(D);
        let err = s
            .backend
            .renew(&old, D)
            .await
            .expect_err("renew after expiry");
        assert!(err.is_not_owned(), "renew after expiry is not-owned: {err}");
        let new = must(attempt(s, &key).await, "takeover");
        let err = s
            .backend
            .renew(&old, D)
            .await
            .expect_err("renew after takeover");
        assert_eq!(
            err.not_owned_reason(),
            Some(NotOwnedReason::TakenOver),
            "renew after takeover: {err}"
        );
        let err = s
            .backend
            .release_lease(&old)
            .await
            .expect_err("release after takeover");
        assert!(err.is_not_owned(), "{err}");
        let record = must(s.backend.inspect(&key).await, "inspect").expect("record");
        let holder = record.holder().expect("new holder still there");
        assert_eq!(
            holder.token(),
            Some(new.token()),
            "old holder's release touched nothing"
        );
    })
}

/// A lease is held until it expires, then anyone may take it over with a greater fencing token.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn expiry_then_takeover(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let key = s.key("expiry");
        let first = must(attempt(s, &key).await, "acquire");
        s.clock.advance(D - Duration::from_millis(5));
        assert!(
            attempt(s, &key).await.is_err_and(|e| e.is_held()),
            "held before expiry"
        );
        assert!(
            !trusted(&first, s.clock.as_ref()),
            "holder stops trusting before expiry"
        );
        s.expire(Duration::from_millis(5));
        let second = must(attempt(s, &key).await, "takeover after expiry");
        assert!(
            second.fencing_token() > first.fencing_token(),
            "takeover fences"
        );
        assert_ne!(second.token(), first.token());
    })
}

/// Fencing tokens grow across acquire, release, expiry and takeover.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn fencing_strictly_increasing(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let key = s.key("fencing");
        let mut seen = Vec::new();
        for round in 0..3 {
            let lease = must(attempt(s, &key).await, "acquire");
            seen.push(lease.fencing_token());
            let renewed = must(s.backend.renew(&lease, D).await, "renew");
            assert_eq!(renewed.fencing_token(), lease.fencing_token());
            if round % 2 == 0 {
                must(s.backend.release_lease(&renewed).await, "release");
            } else {
                s.expire(D);
            }
        }
        let record = must(s.backend.inspect(&key).await, "inspect");
        if let Some(record) = record {
            assert!(record.fencing() >= *seen.last().expect("three rounds"));
        }
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "fencing tokens must strictly increase: {seen:?}"
        );
    })
}

/// Many concurrent contenders for one free key: exactly one wins, the rest see it held.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn concurrent_contenders_one_winner(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        for round in 0..3 {
            let key = s.key("race");
            let options = AcquireOptions::default();
            let attempts: Vec<_> = (0..16)
                .map(|_| s.backend.try_acquire(&key, D, &options))
                .collect();
            let results = crate::executor::join_all(attempts).await;
            let winners = results.iter().filter(|r| r.is_ok()).count();
            let held = results
                .iter()
                .filter(|r| r.as_ref().is_err_and(LeaseError::is_held))
                .count();
            assert_eq!(
                winners, 1,
                "round {round}: exactly one winner, got {results:?}"
            );
            assert_eq!(
                held, 15,
                "round {round}: the others see it held: {results:?}"
            );
        }
    })
}

/// Bad durations and tokens fail as invalid input and write nothing.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn validation_rejects_bad_input(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let key = s.key("validation");
        for bad in [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_secs(400 * 24 * 3600),
        ] {
            let err = s
                .backend
                .try_acquire(&key, bad, &AcquireOptions::default())
                .await
                .expect_err("bad duration");
            assert!(err.is_invalid_input(), "duration {bad:?}: {err}");
        }
        assert!(
            must(s.backend.inspect(&key).await, "inspect").is_none_or(|r| r.holder().is_none()),
            "an invalid acquire writes nothing"
        );
        let lease = must(attempt(s, &key).await, "acquire");
        let err = s
            .backend
            .renew(&lease, Duration::ZERO)
            .await
            .expect_err("zero renew");
        assert!(err.is_invalid_input(), "{err}");
        assert!(
            attempt(s, &key).await.is_err_and(|e| e.is_held()),
            "an invalid renew leaves the lease held"
        );
        assert!(LeaseKey::new("").is_err_and(|e| e.is_invalid_input()));
    })
}

/// Inspect shows the holder and the fencing token, and changes nothing.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn inspect_reports_the_record(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let key = s.key("inspect");
        assert!(must(s.backend.inspect(&key).await, "inspect unknown").is_none());
        let lease = must(attempt(s, &key).await, "acquire");
        let record = must(s.backend.inspect(&key).await, "inspect").expect("record");
        assert_eq!(record.key(), &key);
        assert_eq!(record.fencing(), lease.fencing_token());
        let holder = record.holder().expect("holder");
        assert_eq!(holder.token(), Some(lease.token()));
        assert!(record.is_held_at(s.clock.now()));
        assert!(
            attempt(s, &key).await.is_err_and(|e| e.is_held()),
            "inspect took nothing"
        );
        must(s.backend.release_lease(&lease).await, "release");
        let after = must(s.backend.inspect(&key).await, "inspect after release");
        if let Some(after) = after {
            assert!(after.holder().is_none(), "released record has no holder");
            assert_eq!(
                after.fencing(),
                lease.fencing_token(),
                "fencing kept across release"
            );
        }
    })
}

/// Waiting for a held lease succeeds right after it expires, and times out while it does not.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn wait_takes_over_after_expiry(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let key = s.key("wait");
        let first = must(attempt(s, &key).await, "acquire");
        s.clock.set_auto_advance(true);
        let short = WaitOptions::new(D / 4)
            .with_backoff(Duration::from_millis(10), Duration::from_millis(500));
        let err = s
            .backend
            .acquire_with(&key, D, &short)
            .await
            .expect_err("times out");
        assert!(err.is_timeout(), "{err}");
        assert!(err.holder().is_some(), "timeout names the last holder");
        let long = WaitOptions::new(D * 3)
            .with_backoff(Duration::from_millis(10), Duration::from_secs(60));
        let before = s.clock.elapsed();
        let second = must(
            s.backend.acquire_with(&key, D, &long).await,
            "wait then take over",
        );
        s.clock.set_auto_advance(false);
        let waited = s.clock.elapsed() - before;
        assert!(second.fencing_token() > first.fencing_token());
        assert!(
            waited <= D + s.takeover_delay + Duration::from_secs(1),
            "takeover promptly after expiry, waited {waited:?}"
        );
        // The bare verb waits too, with no timeout: it outlasts any finite wait and takes over.
        s.clock.set_auto_advance(true);
        let third = must(s.backend.acquire(&key, D).await, "acquire waits by default");
        s.clock.set_auto_advance(false);
        assert!(third.fencing_token() > second.fencing_token());
    })
}

/// A guard renews ahead of expiry and reports a takeover as a loss.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn guard_renews_and_reports_loss(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let key = s.key("guard");
        let lease = must(attempt(s, &key).await, "acquire");
        let (guard, task) = LeaseGuard::keep_for_test(s.backend.clone(), lease.clone());
        let script = async {
            // Two renewals carry the lease well past its first expiry.
            for _ in 0..2 {
                let before = guard.lease().expires_at();
                wait_for_sleepers(s).await;
                s.clock.advance(D / 3 + Duration::from_millis(1));
                wait_until(|| guard.lease().expires_at() > before).await;
            }
            assert!(s.clock.elapsed() > Duration::ZERO);
            assert!(guard.check().is_ok(), "renewed lease is trusted");
            assert!(attempt(s, &key).await.is_err_and(|e| e.is_held()));
            // An operator breaks the lease and somebody else takes it.
            must(
                s.backend
                    .release(&key, lease.token(), lease.fencing_token())
                    .await,
                "forced release",
            );
            let thief = must(attempt(s, &key).await, "thief");
            wait_for_sleepers(s).await;
            s.clock.advance(D / 3 + Duration::from_millis(1));
            let reason = guard.lost().await;
            assert!(
                matches!(reason, LossReason::NotOwned(_)),
                "loss must be reported as not-owned, got {reason:?}"
            );
            assert!(guard.check().is_err(), "a lost guard is not trusted");
            assert!(thief.fencing_token() > guard.fencing_token());
            must(s.backend.release_lease(&thief).await, "thief release");
        };
        let task: BoxFuture<'_, ()> = Box::pin(task);
        let script: BoxFuture<'_, ()> = Box::pin(script);
        // The keeper task ends once the loss is seen; the script then finishes.
        crate::executor::join_all(vec![task, script]).await;
    })
}

/// Listing a partition returns every record under it, sorted, released ones included.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn listing_sees_every_sort_key(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let listing = s
            .backend
            .as_listing()
            .expect("every backend of this project lists: LeaseBackend::as_listing returned None");
        let partition = s.key("listing").partition().to_owned();
        assert!(must(listing.list_partition(&partition).await, "list empty").is_empty());
        let mut leases = Vec::new();
        for sort in ["c", "a", "b"] {
            let key = LeaseKey::with_sort_key(partition.clone(), sort).expect("valid key");
            leases.push(must(attempt(s, &key).await, "acquire"));
        }
        let other = LeaseKey::with_sort_key(format!("{partition}x"), "a").expect("valid key");
        must(attempt(s, &other).await, "acquire other partition");
        must(s.backend.release_lease(&leases[0]).await, "release c");
        let records = must(listing.list_partition(&partition).await, "list");
        let sorts: Vec<_> = records
            .iter()
            .map(|r| r.key().sort().unwrap_or(""))
            .collect();
        assert_eq!(sorts, ["a", "b", "c"], "sorted, own partition only");
        assert!(
            records[2].holder().is_none(),
            "released record listed without holder"
        );
        assert_eq!(records[2].fencing(), leases[0].fencing_token());
        assert_eq!(
            records[0].holder().and_then(|h| h.token()),
            Some(leases[1].token())
        );
    })
}

/// Fenced values: the newest token reads and writes, older ones are refused, values round-trip.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn fenced_values_refuse_stale_writers(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let fenced = s.backend.as_fenced_values().expect(
            "every backend of this project keeps fenced values: as_fenced_values returned None",
        );
        let name = s.key("fenced");
        let t = FencingToken::new;
        assert_eq!(
            must(fenced.fence_and_read(&name, t(5)).await, "read empty"),
            None
        );
        let big = vec![0xa5u8; 60 * 1024];
        must(fenced.put_fenced(&name, t(5), &big).await, "put 60 KiB");
        assert_eq!(
            must(fenced.fence_and_read(&name, t(5)).await, "read back").as_deref(),
            Some(&big[..])
        );
        must(
            fenced.put_fenced(&name, t(6), b"six").await,
            "newer token writes",
        );
        let stale = fenced.put_fenced(&name, t(5), b"five again").await;
        assert_eq!(
            stale.expect_err("stale write").not_owned_reason(),
            Some(NotOwnedReason::Fenced),
            "an older token is refused"
        );
        let seen = must(fenced.fence_and_read(&name, t(9)).await, "fence at 9");
        assert_eq!(
            seen.as_deref(),
            Some(&b"six"[..]),
            "the refused write changed nothing"
        );
        let err = fenced
            .put_fenced(&name, t(8), b"eight")
            .await
            .expect_err("fenced out");
        assert!(err.is_not_owned(), "{err}");
        let err = fenced
            .fence_and_read(&name, t(8))
            .await
            .expect_err("fenced read");
        assert!(err.is_not_owned(), "{err}");
        must(fenced.put_fenced(&name, t(9), b"").await, "empty value");
        assert_eq!(
            must(fenced.fence_and_read(&name, t(9)).await, "read").as_deref(),
            Some(&b""[..])
        );
        let too_big = vec![0u8; crate::MAX_FENCED_VALUE_BYTES + 1];
        let err = fenced
            .put_fenced(&name, t(10), &too_big)
            .await
            .expect_err("too big");
        assert!(err.is_invalid_input(), "{err}");
        assert_eq!(
            must(fenced.fence_and_read(&name, t(10)).await, "unchanged").as_deref(),
            Some(&b""[..])
        );
        let other = s.key("fenced-other");
        must(
            fenced.put_fenced(&other, t(1), b"independent").await,
            "names are independent",
        );
    })
}

/// How long [`wait_until`] waits, in real time: what the conditions wait on is the backend's
/// own round trips (a renewal against PostgreSQL or DynamoDB Local), which on a loaded host take
/// far longer than a count of yields measures.
const WAIT_UNTIL_LIMIT: Duration = Duration::from_secs(30);

/// Yields to the executor until `ready()` holds, for at most [`WAIT_UNTIL_LIMIT`] of real time
/// (bounded, so a broken backend fails the case). The bound was 200,000 yields, which a
/// PostgreSQL renewal outlasted in CI beside a CPU-bound suite ("condition not reached").
async fn wait_until(mut ready: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while started.elapsed() < WAIT_UNTIL_LIMIT {
        if ready() {
            return;
        }
        yield_now().await;
    }
    panic!("condition not reached within {WAIT_UNTIL_LIMIT:?}");
}

async fn wait_for_sleepers(s: &Subject) {
    let clock = s.clock.clone();
    wait_until(move || clock.pending_sleeps() > 0).await;
}

async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await;
}

/// Whether the holder of `lease` may still act on it by `clock` (before its deadline).
pub(crate) fn trusted(lease: &Lease, clock: &dyn Clock) -> bool {
    clock.monotonic() < lease.deadline()
}

mod counted;
mod counting;
pub mod counting_model;
pub mod model;
#[cfg(feature = "metrics")]
pub mod recording;

pub use counted::{CountedBackend, RequestCounts};
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub use counting::{
    counting_lease_admits_at_most_n, counting_lease_limit_changes_never_share_a_slot,
    counting_lease_slots_expire_and_fence, counting_lease_survives_lost_replies,
    counting_lease_waits_for_a_slot,
};

/// A token names one tenure: a second caller with the same token is a second contender, and a
/// later tenure under the same token is not the earlier one.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn same_token_is_a_second_contender(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let key = s.key("same-token");
        let shared = LeaseToken::new(format!("{}-shared-token", s.namespace)).expect("valid token");
        let options = AcquireOptions::default().with_token(shared.clone());
        let first = must(s.backend.try_acquire(&key, D, &options).await, "first");
        let second = s.backend.try_acquire(&key, D, &options).await;
        assert!(
            second.as_ref().is_err_and(LeaseError::is_held),
            "a second caller with the holder's token must be told `Held`, got {second:?}"
        );
        s.clock.advance(D / 2);
        let first = must(
            s.backend.renew(&first, D).await,
            "the first holder still renews",
        );

        s.expire(D);
        let later = must(
            s.backend.try_acquire(&key, D, &options).await,
            "a new tenure under the same token once the first expired",
        );
        assert!(later.fencing_token() > first.fencing_token());
        let err = s
            .backend
            .renew(&first, D)
            .await
            .expect_err("the old tenure renews the new one");
        assert!(err.is_not_owned(), "{err}");
        let err = s
            .backend
            .release_lease(&first)
            .await
            .expect_err("the old tenure releases the new one");
        assert!(err.is_not_owned(), "{err}");
        let record = must(s.backend.inspect(&key).await, "inspect").expect("record");
        assert_eq!(
            record
                .holder()
                .and_then(Holder::fencing_token)
                .unwrap_or(record.fencing()),
            later.fencing_token(),
            "the new tenure is untouched"
        );
        must(s.backend.renew(&later, D).await, "the new tenure renews");
        must(s.backend.release_lease(&later).await, "release");
    })
}

/// Release succeeds only for the tenure it names, and says so truthfully when a reply is lost.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn release_tells_the_truth(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let key = s.key("release-truth");
        let a = must(attempt(s, &key).await, "a");
        let stranger = LeaseToken::new("never-held-this-key").expect("valid token");
        let err = s
            .backend
            .release(&key, &stranger, a.fencing_token())
            .await
            .expect_err("a stranger's release");
        assert!(err.is_not_owned(), "{err}");
        let wrong_fencing = FencingToken::new(a.fencing_token().get() + 1);
        let err = s
            .backend
            .release(&key, a.token(), wrong_fencing)
            .await
            .expect_err("the holder's token with another fencing token");
        assert!(err.is_not_owned(), "{err}");
        let a = must(s.backend.renew(&a, D).await, "a is untouched");

        must(s.backend.release_lease(&a).await, "a releases");
        let err = s.backend.release_lease(&a).await.expect_err("again");
        assert_eq!(
            err.not_owned_reason(),
            Some(NotOwnedReason::Missing),
            "{err}"
        );
        let c = must(attempt(s, &key).await, "c");
        let err = s.backend.release_lease(&a).await.expect_err("a after c");
        assert!(err.is_not_owned(), "{err}");
        let c = must(s.backend.renew(&c, D).await, "c is untouched");

        let Some(faults) = s.faults.clone() else {
            must(s.backend.release_lease(&c).await, "c releases");
            return;
        };
        release_with_lost_replies(s, &*faults, &key, c, &stranger).await;
    })
}

/// The lost-reply half of [`release_tells_the_truth`]: `c` holds `key`.
async fn release_with_lost_replies(
    s: &Subject,
    faults: &dyn ReplyFaults,
    key: &LeaseKey,
    c: Lease,
    stranger: &LeaseToken,
) {
    let key = key.clone();
    // A release applied whose reply was lost: the retry proves it landed.
    let lost = faults.lost_replies();
    faults.lose_next_reply(None);
    must(
        s.backend.release_lease(&c).await,
        "c's release with its reply lost",
    );
    assert_eq!(faults.lost_replies(), lost + 1, "the reply was lost");
    let record = must(s.backend.inspect(&key).await, "inspect").expect("record");
    assert!(record.holder().is_none(), "c's release landed");

    // Releasing nothing, with the reply lost, is still not a success.
    faults.lose_next_reply(None);
    let err = s
        .backend
        .release_lease(&c)
        .await
        .expect_err("a second release of c with its reply lost");
    assert!(err.is_not_owned(), "{err}");

    // The release lands, its reply is lost, and somebody acquires before the retry.
    let d = must(attempt(s, &key).await, "d");
    let (result, e) = lost_reply_while_another_acquires(
        s,
        faults,
        &key,
        || s.backend.release_lease(&d),
        "e acquires the key d released",
    )
    .await;
    assert!(
        result.as_ref().is_err_and(LeaseError::is_not_owned),
        "d's retry finds e's tenure and must not report success, got {result:?}"
    );
    // A stranger's release with the reply lost leaves e alone.
    faults.lose_next_reply(None);
    let err = s
        .backend
        .release(&key, stranger, e.fencing_token())
        .await
        .expect_err("stranger");
    assert!(err.is_not_owned(), "{err}");
    let e = must(s.backend.renew(&e, D).await, "e is untouched");
    must(s.backend.release_lease(&e).await, "e releases");
}

/// Runs `op` with its reply lost, while another client acquires `key` between the lost reply
/// and the retry; returns `op`'s result and that client's lease (`who` names it).
async fn lost_reply_while_another_acquires<T, F>(
    s: &Subject,
    faults: &dyn ReplyFaults,
    key: &LeaseKey,
    op: impl FnOnce() -> F,
    who: &str,
) -> (T, Lease)
where
    F: std::future::Future<Output = T>,
{
    let slot = Arc::new(std::sync::Mutex::new(None));
    let meanwhile = {
        let (backend, key, slot) = (s.backend.clone(), key.clone(), slot.clone());
        Box::pin(async move {
            let won = backend
                .try_acquire(&key, D, &AcquireOptions::default())
                .await;
            *slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(won);
        })
    };
    faults.lose_next_reply(Some(meanwhile));
    let result = op().await;
    let won = slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
        .expect("the other client ran between the lost reply and the retry");
    (result, must(won, who))
}

/// Whether the backend offers [`LeaseBackend::delete`], asked of a key it never saw. A backend
/// that keeps the default answers [`LeaseError::Unsupported`], and the delete cases then return
/// at once, checking nothing (and saying nothing): there is no delete to hold to the contract.
/// One that offers it must refuse, as not-owned with reason `Missing`: there is no record in the
/// state named.
async fn offers_delete(s: &Subject) -> bool {
    let key = s.key("delete-probe");
    let probe = LeaseToken::new("delete-probe-token").expect("valid token");
    let result = s
        .backend
        .delete(&key, Some(&probe), Some(FencingToken::new(1)))
        .await;
    if result.as_ref().is_err_and(LeaseError::is_unsupported) {
        return false;
    }
    for (named, result) in [
        ("a holder", result),
        (
            "a free record",
            s.backend
                .delete(&key, None, Some(FencingToken::new(1)))
                .await,
        ),
    ] {
        let err = result.expect_err("a delete of a key the store never saw must be refused");
        assert_eq!(
            err.not_owned_reason(),
            Some(NotOwnedReason::Missing),
            "a delete naming {named} of a key never seen: {err}"
        );
    }
    assert!(
        must(
            s.backend.inspect(&key).await,
            "inspect after refused deletes"
        )
        .is_none(),
        "a refused delete creates nothing"
    );
    true
}

/// Delete refused: not-owned, with nothing deleted.
fn refused(result: Result<(), LeaseError>, what: &str) -> LeaseError {
    match result {
        Ok(()) => panic!("{what}: the delete must be refused, but it succeeded"),
        Err(err) if err.is_not_owned() => err,
        Err(err) => panic!("{what}: the delete must be refused as not-owned, got {err}"),
    }
}

/// Delete removes a record in exactly the state named, held (expired or not) or free: the key is
/// then absent from inspect and listing, and acquiring it starts afresh.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn delete_removes_the_named_record(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        if !offers_delete(s).await {
            return;
        }
        let partition = s.key("delete").partition().to_owned();
        let key = |sort: &str| LeaseKey::with_sort_key(partition.clone(), sort).expect("key");
        let (held, free, expired, kept) = (key("held"), key("free"), key("expired"), key("kept"));

        let lease = must(attempt(s, &held).await, "acquire");
        must(
            s.backend
                .delete(&held, Some(lease.token()), Some(lease.fencing_token()))
                .await,
            "the holder deletes its held record",
        );
        assert!(
            must(s.backend.inspect(&held).await, "inspect").is_none(),
            "a deleted record is absent"
        );
        let err = refused(
            s.backend
                .delete(&held, Some(lease.token()), Some(lease.fencing_token()))
                .await,
            "a second delete",
        );
        assert_eq!(
            err.not_owned_reason(),
            Some(NotOwnedReason::Missing),
            "{err}"
        );
        let err = refused(
            s.backend.renew(&lease, D).await.map(drop),
            "renew after delete",
        );
        assert!(err.is_not_owned(), "{err}");

        let gone = must(attempt(s, &free).await, "acquire");
        must(s.backend.release_lease(&gone).await, "release");
        let record = must(s.backend.inspect(&free).await, "inspect").expect("released record");
        must(
            s.backend
                .delete(
                    record.key(),
                    record.holder().and_then(Holder::token),
                    record.fencing_token(),
                )
                .await,
            "delete a free record as inspect shows it",
        );
        assert!(must(s.backend.inspect(&free).await, "inspect").is_none());

        // An expired holder that never released still holds the record, and is named so.
        let late = must(attempt(s, &expired).await, "acquire");
        must(attempt(s, &kept).await, "acquire");
        s.expire(D);
        refused(
            s.backend
                .delete(&expired, None, Some(late.fencing_token()))
                .await,
            "an expired holder named as free",
        );
        must(
            s.backend
                .delete(&expired, Some(late.token()), Some(late.fencing_token()))
                .await,
            "delete the record of an expired holder",
        );

        if let Some(listing) = s.backend.as_listing() {
            let listed = must(listing.list_partition(&partition).await, "list");
            let keys: Vec<&LeaseKey> = listed.iter().map(|r| r.key()).collect();
            assert_eq!(keys, [&kept], "listing omits deleted records");
        }
        deleted_key_is_acquired_afresh(s, &held).await;
    })
}

/// A deleted key is acquired afresh, like one the store never saw.
async fn deleted_key_is_acquired_afresh(s: &Subject, held: &LeaseKey) {
    let again = must(attempt(s, held).await, "acquire after delete");
    assert!(trusted(&again, s.clock.as_ref()));
    assert!(
        attempt(s, held).await.is_err_and(|e| e.is_held()),
        "the new record is held like any other"
    );
    let record = must(s.backend.inspect(held).await, "inspect").expect("new record");
    assert_eq!(
        record.holder().and_then(Holder::token),
        Some(again.token()),
        "the new holder"
    );
    assert_eq!(record.fencing(), again.fencing_token());
    let again = must(s.backend.renew(&again, D).await, "the new tenure renews");
    must(s.backend.release_lease(&again).await, "and releases");
}

/// Delete is a compare-and-delete: a record in any state but the one named (another token,
/// another fencing token, held where free was named or free where held was named) is refused as
/// not-owned and left exactly as it was.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn delete_refuses_any_other_state(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        if !offers_delete(s).await {
            return;
        }
        let key = s.key("delete-refused");
        let a = must(attempt(s, &key).await, "a");
        let f = a.fencing_token();
        let stranger = LeaseToken::new("never-held-this-key").expect("valid token");
        let other_fencing = FencingToken::new(f.get() + 1);
        for (what, holder, fencing) in [
            ("a stranger's token", Some(&stranger), f),
            (
                "the holder's token, another fencing token",
                Some(a.token()),
                other_fencing,
            ),
            (
                "the holder's token, no fencing token",
                Some(a.token()),
                FencingToken::NONE,
            ),
            ("free, while held", None, f),
        ] {
            let fencing = (fencing != FencingToken::NONE).then_some(fencing);
            let err = refused(s.backend.delete(&key, holder, fencing).await, what);
            assert_eq!(
                err.not_owned_reason(),
                Some(NotOwnedReason::TakenOver),
                "{what}: {err}"
            );
        }
        let a = must(s.backend.renew(&a, D).await, "a is untouched");
        let record = must(s.backend.inspect(&key).await, "inspect").expect("record");
        assert_eq!(record.holder().and_then(Holder::token), Some(a.token()));

        must(s.backend.release_lease(&a).await, "a releases");
        let err = refused(
            s.backend.delete(&key, Some(a.token()), Some(f)).await,
            "held, while free",
        );
        assert_eq!(
            err.not_owned_reason(),
            Some(NotOwnedReason::Missing),
            "{err}"
        );
        refused(
            s.backend.delete(&key, None, Some(other_fencing)).await,
            "free at another fencing token",
        );

        // The record the caller read changes under it: a tenure comes, and goes.
        let b = must(attempt(s, &key).await, "b");
        refused(
            s.backend.delete(&key, None, Some(f)).await,
            "free at f, now held by b",
        );
        must(s.backend.release_lease(&b).await, "b releases");
        let err = refused(
            s.backend.delete(&key, None, Some(f)).await,
            "free at f, now free at b's fencing token",
        );
        assert_eq!(
            err.not_owned_reason(),
            Some(NotOwnedReason::TakenOver),
            "{err}"
        );
        let record = must(s.backend.inspect(&key).await, "inspect").expect("record intact");
        assert!(record.holder().is_none());
        assert_eq!(record.fencing(), b.fencing_token(), "record intact");
        must(
            s.backend.delete(&key, None, Some(b.fencing_token())).await,
            "the state as it stands is deleted",
        );
    })
}

/// A delete whose reply is lost reports success only when the backend can tell its own attempt
/// deleted the record; otherwise not-owned (the record is gone either way), and never a record
/// created since. Only for backends whose requests cross a network
/// ([`Subject::with_reply_faults`]), and that offer delete.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn delete_tells_the_truth(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let Some(faults) = s.faults.clone() else {
            return;
        };
        if !offers_delete(s).await {
            return;
        }
        let key = s.key("delete-truth");
        // The delete lands and its reply is lost: the retry finds the record gone.
        let a = must(attempt(s, &key).await, "a");
        let lost = faults.lost_replies();
        faults.lose_next_reply(None);
        let result = s
            .backend
            .delete(&key, Some(a.token()), Some(a.fencing_token()))
            .await;
        assert_eq!(faults.lost_replies(), lost + 1, "the reply was lost");
        assert!(
            result.is_ok()
                || result.as_ref().err().and_then(LeaseError::not_owned_reason)
                    == Some(NotOwnedReason::Missing),
            "a's delete landed: success, or not-owned because the record is missing, got {result:?}"
        );
        assert!(must(s.backend.inspect(&key).await, "inspect").is_none());

        // Deleting nothing, with the reply lost, is still not a success.
        faults.lose_next_reply(None);
        let err = refused(
            s.backend
                .delete(&key, Some(a.token()), Some(a.fencing_token()))
                .await,
            "a second delete of a's record with its reply lost",
        );
        assert_eq!(
            err.not_owned_reason(),
            Some(NotOwnedReason::Missing),
            "{err}"
        );

        // The delete lands, its reply is lost, and somebody acquires the key afresh before the
        // retry: the new record must survive, whatever the retry reports.
        let b = must(attempt(s, &key).await, "b");
        let (result, c) = lost_reply_while_another_acquires(
            s,
            &*faults,
            &key,
            || {
                s.backend
                    .delete(&key, Some(b.token()), Some(b.fencing_token()))
            },
            "c acquires the key b's delete removed",
        )
        .await;
        assert!(
            result.is_ok() || result.as_ref().is_err_and(LeaseError::is_not_owned),
            "b's delete landed; its retry may say so or refuse, nothing else: {result:?}"
        );
        let c = must(s.backend.renew(&c, D).await, "c's new record is untouched");

        // A stranger's delete with its reply lost leaves c alone.
        let stranger = LeaseToken::new("never-held-this-key").expect("valid token");
        faults.lose_next_reply(None);
        refused(
            s.backend
                .delete(&key, Some(&stranger), Some(c.fencing_token()))
                .await,
            "a stranger's delete with its reply lost",
        );
        let c = must(s.backend.renew(&c, D).await, "c is untouched");
        must(s.backend.release_lease(&c).await, "c releases");
    })
}

/// A value published with an acquisition is in the record for the whole tenure (renewals keep
/// it), shown to contenders, and gone with the tenure; an oversized one writes nothing.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn published_value_reaches_readers(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let key = s.key("value");
        let too_long =
            AcquireOptions::default().with_value("v".repeat(crate::MAX_LEASE_VALUE_BYTES + 1));
        let refused = s.backend.try_acquire(&key, D, &too_long).await;
        assert!(
            refused.as_ref().is_err_and(LeaseError::is_invalid_input),
            "an oversized value is invalid input, got {refused:?}"
        );
        assert!(
            must(s.backend.inspect(&key).await, "inspect after refusal")
                .is_none_or(|r| r.holder().is_none()),
            "a refused acquire writes nothing"
        );
        let longest = "a".repeat(crate::MAX_LEASE_VALUE_BYTES);
        let options = AcquireOptions::default().with_value(longest.clone());
        let lease = must(
            s.backend.try_acquire(&key, D, &options).await,
            "acquire with a value",
        );
        let value_of = |record: Option<crate::LeaseRecord>| {
            record.and_then(|r| r.holder().and_then(|h| h.value().map(str::to_owned)))
        };
        assert_eq!(
            value_of(must(s.backend.inspect(&key).await, "inspect")).as_deref(),
            Some(longest.as_str()),
            "inspect shows the published value"
        );
        let held = attempt(s, &key).await.expect_err("held");
        assert_eq!(
            held.holder().and_then(Holder::value),
            Some(longest.as_str()),
            "the held error shows the value"
        );
        let lease = must(s.backend.renew(&lease, D).await, "renew");
        assert_eq!(
            value_of(must(s.backend.inspect(&key).await, "inspect after renew")).as_deref(),
            Some(longest.as_str()),
            "a renewal keeps the value"
        );
        must(s.backend.release_lease(&lease).await, "release");
        let plain = must(attempt(s, &key).await, "acquire without a value");
        assert_eq!(
            value_of(must(s.backend.inspect(&key).await, "inspect plain")),
            None,
            "the next tenure does not inherit the value"
        );
        s.expire(D);
        let next = AcquireOptions::default().with_value("10.0.0.8:8080");
        let taken = must(
            s.backend.try_acquire(&key, D, &next).await,
            "take over with a value",
        );
        assert!(taken.fencing_token() > plain.fencing_token());
        assert_eq!(
            value_of(must(s.backend.inspect(&key).await, "inspect taken")).as_deref(),
            Some("10.0.0.8:8080"),
            "a takeover publishes its own value"
        );
    })
}

/// An election's observer reports the current state, then each new leader once (value and
/// fencing token as the leader's lease has them) and each vacancy (release, expiry) once.
#[doc(hidden)] // run through conformance_tests! and CASES, by name
pub fn observer_reports_each_tenure_once(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        use crate::{Election, LeaderChange};
        let key = s.key("observe");
        let election = Election::new(s.backend.clone(), &key, D);
        let mut observer = election.observe();
        let first = must(observer.next_change().await, "first report");
        assert_eq!(first, LeaderChange::Vacant, "no leader yet");
        let mut last = FencingToken::NONE;
        for round in 0..3 {
            let value = format!("leader-{round}");
            let options = AcquireOptions::default().with_value(value.clone());
            let lease = must(s.backend.try_acquire(&key, D, &options).await, "campaign");
            let lease = must(s.backend.renew(&lease, D).await, "renew");
            let LeaderChange::Elected(leader) = must(observer.next_change().await, "new leader")
            else {
                panic!("round {round}: expected the new leader");
            };
            assert_eq!(
                leader.fencing_token(),
                Some(lease.fencing_token()),
                "the leader's token"
            );
            assert!(
                lease.fencing_token() > last,
                "tokens grow from leader to leader"
            );
            last = lease.fencing_token();
            assert_eq!(leader.value(), Some(value.as_str()), "the leader's value");
            assert_eq!(
                must(election.leader().await, "leader()").and_then(|l| l.fencing_token()),
                Some(lease.fencing_token())
            );
            if round % 2 == 0 {
                must(s.backend.release_lease(&lease).await, "resign");
            } else {
                s.expire(D);
            }
            assert_eq!(
                must(observer.next_change().await, "vacancy"),
                LeaderChange::Vacant,
                "round {round}: the leader left"
            );
            assert_eq!(must(election.leader().await, "leader() after"), None);
        }
    })
}

//! One table shared with the Go `lease` package (TableTheory `pkg/lease`, v1.3): never two
//! holders, neither side blocked after the other releases or expires.
//!
//! `Go` below sends the Go package's three requests exactly as its source writes them (item
//! layout, `ExpiresAt` in whole Unix seconds from `time.Time.Unix()`, and the three condition
//! expressions verbatim). Every test here failed on main before the seconds/milliseconds fix:
//! main wrote and compared milliseconds in `lease_expires_at`.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, TransactWriteItem};
use lease_core::{Clock, LeaseBackend, LeaseKey, LeaseListing, ManualClock};

use support::Wiring;

/// The Go package's conditions, verbatim.
const GO_ACQUIRE: &str = "attribute_not_exists(#pk) OR #lease_expires_at <= :now";
const GO_REFRESH: &str = "#lease_token = :token AND #lease_expires_at > :now";
const GO_RELEASE: &str = "#lease_token = :token";

const D: Duration = Duration::from_secs(10);

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn unix_ms(at: SystemTime) -> i64 {
    i64::try_from(
        at.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Go's `time.Time.Unix()`: whole seconds, rounded down.
fn unix_s(at: SystemTime) -> i64 {
    unix_ms(at).div_euclid(1000)
}

/// The Go manager with default options, speaking to the same table.
struct Go {
    client: Client,
    table: String,
}

impl Go {
    fn key(pk: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s("LOCK"))])
    }

    /// `Manager.Acquire(ctx, pk, duration)` at wall time `now`.
    async fn acquire(&self, pk: &str, token: &str, now: SystemTime, d: Duration) -> bool {
        let expires = unix_s(now + d);
        let mut item = Self::key(pk);
        item.insert("lease_token".into(), s(token));
        item.insert("lease_expires_at".into(), n(expires));
        item.insert("ttl".into(), n(expires + 3600));
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(GO_ACQUIRE)
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#lease_expires_at", "lease_expires_at")
            .expression_attribute_values(":now", n(unix_s(now)))
            .send()
            .await;
        conditional(result)
    }

    /// `Manager.Refresh(ctx, lease, duration)`.
    async fn refresh(&self, pk: &str, token: &str, now: SystemTime, d: Duration) -> bool {
        let expires = unix_s(now + d);
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(pk)))
            .update_expression("SET #lease_expires_at = :exp, #ttl = :ttl")
            .condition_expression(GO_REFRESH)
            .expression_attribute_names("#lease_token", "lease_token")
            .expression_attribute_names("#lease_expires_at", "lease_expires_at")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":token", s(token))
            .expression_attribute_values(":now", n(unix_s(now)))
            .expression_attribute_values(":exp", n(expires))
            .expression_attribute_values(":ttl", n(expires + 3600))
            .send()
            .await;
        conditional(result)
    }

    /// `Manager.Release(ctx, lease)` (Go swallows a failed condition; this reports it).
    async fn release(&self, pk: &str, token: &str) -> bool {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(pk)))
            .condition_expression(GO_RELEASE)
            .expression_attribute_names("#lease_token", "lease_token")
            .expression_attribute_values(":token", s(token))
            .send()
            .await;
        conditional(result)
    }

    /// Evaluates one of Go's conditions against the item, changing nothing (a transaction with a
    /// single `ConditionCheck`).
    async fn holds(&self, pk: &str, condition: &str, token: &str, now: SystemTime) -> bool {
        let mut check = ConditionCheck::builder()
            .table_name(&self.table)
            .set_key(Some(Self::key(pk)))
            .condition_expression(condition);
        for (placeholder, name) in [
            ("#pk", "pk"),
            ("#lease_token", "lease_token"),
            ("#lease_expires_at", "lease_expires_at"),
        ] {
            if condition.contains(placeholder) {
                check = check.expression_attribute_names(placeholder, name);
            }
        }
        if condition.contains(":token") {
            check = check.expression_attribute_values(":token", s(token));
        }
        if condition.contains(":now") {
            check = check.expression_attribute_values(":now", n(unix_s(now)));
        }
        let item = TransactWriteItem::builder()
            .condition_check(check.build().unwrap())
            .build();
        let result = self
            .client
            .transact_write_items()
            .transact_items(item)
            .send()
            .await;
        match result {
            Ok(_) => true,
            Err(e) if format!("{e:?}").contains("ConditionalCheckFailed") => false,
            Err(e) => panic!("condition check failed to run: {e:?}"),
        }
    }
}

fn conditional<T, E: std::fmt::Debug>(result: Result<T, E>) -> bool {
    match result {
        Ok(_) => true,
        Err(e) if format!("{e:?}").contains("ConditionalCheckFailedException") => false,
        Err(e) => panic!("request failed: {e:?}"),
    }
}

/// Moves `clock`'s wall time to `at` (forward by advancing, so sleeps wake; backward by a
/// wall step).
fn set_wall(clock: &ManualClock, at: SystemTime) {
    match at.duration_since(clock.now()) {
        Ok(ahead) => clock.advance(ahead),
        Err(_) => clock.set_wall(at),
    }
}

struct Rig {
    leases: support::GoCalls,
    go: Go,
    clock: Arc<ManualClock>,
}

async fn rig(endpoint: &str) -> Rig {
    let clock = Arc::new(ManualClock::new());
    // Not on a second boundary, so rounding shows.
    clock.advance(Duration::from_millis(300));
    let (leases, client) = support::leases(endpoint, &Wiring::default(), |b| {
        b.with_clock(clock.clone())
    })
    .await;
    let go = Go {
        client,
        table: leases.table().to_owned(),
    };
    Rig {
        leases: support::GoCalls(leases),
        go,
        clock,
    }
}

#[test]
fn a_live_go_lease_is_held_and_shown_with_its_expiry() {
    support::run(
        "a_live_go_lease_is_held_and_shown_with_its_expiry",
        |endpoint| async move {
            let r = rig(&endpoint).await;
            let now = r.clock.now();
            assert!(r.go.acquire("job", "go-token-1", now, D).await);
            let err = r.leases.acquire("job", D).await.unwrap_err();
            assert!(err.is_held(), "{err}");
            let holder = err.holder().unwrap();
            assert_eq!(holder.token().unwrap().as_str(), "go-token-1");
            let go_expiry = SystemTime::UNIX_EPOCH
                + Duration::from_secs(u64::try_from(unix_s(now + D)).unwrap());
            // Go rounds its expiry down to the second, and its caller may hold the lease to the
            // end of that second: it is shown (and kept) until then (issue 23).
            let go_end = go_expiry + Duration::from_secs(1);
            assert_eq!(
                holder.expires_at(),
                Some(go_end),
                "the end of Go's whole second"
            );
            assert_eq!(holder.fencing_token(), None, "Go issues no fencing token");

            let key = LeaseKey::new("job").unwrap();
            let record = LeaseBackend::inspect(r.leases.leases(), &key)
                .await
                .unwrap()
                .unwrap();
            assert!(
                record.is_held_at(r.clock.now()),
                "status shows it held, not 1970"
            );
            assert_eq!(record.fencing_token(), None);
            let listed = r.leases.leases().list_partition("job").await.unwrap();
            assert_eq!(listed.len(), 1, "Go's items are listed");

            // Go's own rule frees it at its whole second; this crate is one second stricter
            // (issue 23: main took it at Go's second, while Go's caller could still hold it).
            for held_at in [
                go_expiry - Duration::from_millis(1),
                go_expiry,
                go_end - Duration::from_millis(1),
            ] {
                set_wall(&r.clock, held_at);
                let err = r.leases.acquire("job", D).await.unwrap_err();
                assert!(err.is_held(), "{held_at:?}: {err}");
            }
            set_wall(&r.clock, go_end);
            let lease = r.leases.acquire("job", D).await.unwrap();
            assert!(lease.fencing_token().get() > 0, "seeded from the clock");
            // Go's holder can no longer refresh or release.
            assert!(!r.go.refresh("job", "go-token-1", go_expiry, D).await);
            assert!(!r.go.release("job", "go-token-1").await);
            r.leases.refresh(&lease, D).await.unwrap();
        },
    );
}

#[test]
fn go_takes_over_after_a_release_or_an_expiry_and_never_earlier() {
    support::run(
        "go_takes_over_after_a_release_or_an_expiry_and_never_earlier",
        |endpoint| async move {
            let r = rig(&endpoint).await;
            // Released by Rust: Go acquires at once.
            let lease = r.leases.acquire("a", D).await.unwrap();
            assert!(
                !r.go.acquire("a", "go-a", r.clock.now(), D).await,
                "held by Rust"
            );
            r.leases.release(&lease).await.unwrap();
            assert!(
                r.go.acquire("a", "go-a", r.clock.now(), D).await,
                "free after release"
            );
            assert!(r.go.release("a", "go-a").await);

            // Expired: never before the Rust lease's true expiry, by Go's own rule.
            let lease = r.leases.acquire("b", D).await.unwrap();
            let expiry = lease.expires_at();
            for early in [
                Duration::from_millis(1),
                Duration::from_millis(299),
                Duration::from_millis(999),
            ] {
                assert!(
                    !r.go.acquire("b", "go-b", expiry - early, D).await,
                    "Go took a Rust lease {early:?} before it expired"
                );
            }
            let ceiling = SystemTime::UNIX_EPOCH
                + Duration::from_secs(u64::try_from(unix_ms(expiry)).unwrap().div_ceil(1000));
            assert!(
                r.go.acquire("b", "go-b", ceiling, D).await,
                "free at the next whole second"
            );
            // Go's PutItem replaced the item: the Rust holder is out, and a Rust contender waits.
            assert!(
                r.leases
                    .refresh(&lease, D)
                    .await
                    .unwrap_err()
                    .is_not_owned()
            );
            set_wall(&r.clock, ceiling);
            assert!(r.leases.acquire("b", D).await.unwrap_err().is_held());
            assert!(r.go.refresh("b", "go-b", ceiling, D).await);
            assert!(r.go.release("b", "go-b").await);
            let again = r.leases.acquire("b", D).await.unwrap();
            assert!(
                again.fencing_token() > lease.fencing_token(),
                "reseeded above"
            );
        },
    );
}

/// Asserts what Go's acquire (by a stranger), refresh and release (by the holder) conditions say
/// of item `k` at wall time `at`.
async fn check(go: &Go, token: &str, at: SystemTime, expect: (&str, bool, bool, bool)) {
    let (name, acquire, refresh, release) = expect;
    assert_eq!(
        go.holds("k", GO_ACQUIRE, "x", at).await,
        acquire,
        "{name}: acquire"
    );
    assert_eq!(
        go.holds("k", GO_REFRESH, token, at).await,
        refresh,
        "{name}: refresh"
    );
    assert_eq!(
        go.holds("k", GO_RELEASE, token, at).await,
        release,
        "{name}: release"
    );
}

/// Go's three conditions, sent verbatim, against items this crate wrote in every state.
#[test]
fn go_conditions_judge_items_this_crate_wrote() {
    support::run(
        "go_conditions_judge_items_this_crate_wrote",
        |endpoint| async move {
            let r = rig(&endpoint).await;
            let lease = r.leases.acquire("k", D).await.unwrap();
            let token = lease.token().as_str().to_owned();
            let now = r.clock.now();
            check(&r.go, &token, now, ("held", false, true, true)).await;
            r.clock.advance(D / 2);
            let lease = r.leases.refresh(&lease, D).await.unwrap();
            check(&r.go, &token, r.clock.now(), ("renewed", false, true, true)).await;
            check(
                &r.go,
                &token,
                lease.expires_at() - Duration::from_millis(1),
                ("renewed, last ms", false, true, true),
            )
            .await;
            check(
                &r.go,
                &token,
                lease.expires_at() + Duration::from_secs(1),
                ("expired", true, false, true),
            )
            .await;
            r.leases.release(&lease).await.unwrap();
            check(
                &r.go,
                &token,
                r.clock.now(),
                ("released", true, false, false),
            )
            .await;
        },
    );
}

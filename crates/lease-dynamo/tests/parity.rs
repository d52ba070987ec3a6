//! Parity with the Go `lease` package: defaults, attribute names, the lock sort key, the TTL
//! attribute, injected clock and token generator, input validation; plus the fencing seed.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use lease_core::{
    AcquireOptions, Clock, LeaseBackend, LeaseKey, LeaseToken, ManualClock, TokenSource,
};
use lease_dynamo::{AttributeNames, DynamoLeases};
use support::{RequestCounter, Wiring};

const D: Duration = Duration::from_secs(30);

async fn raw_item(
    client: &Client,
    table: &str,
    key: (&str, &str),
    values: (&str, &str),
) -> HashMap<String, AttributeValue> {
    support::raw_item(client, table, key, values)
        .await
        .expect("item exists")
}

fn num(item: &HashMap<String, AttributeValue>, name: &str) -> u64 {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing in {item:?}"))
}

fn text<'a>(item: &'a HashMap<String, AttributeValue>, name: &str) -> Option<&'a str> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

fn millis(at: SystemTime) -> u64 {
    u64::try_from(
        at.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Numbered tokens, like a Go `WithTokenGenerator` in tests.
#[derive(Default)]
struct Numbered(AtomicU32);

impl TokenSource for Numbered {
    fn next_token(&self) -> LeaseToken {
        LeaseToken::new(format!("tok-{}", self.0.fetch_add(1, Ordering::SeqCst))).unwrap()
    }
}

#[test]
fn defaults_match_the_go_package() {
    // No server needed: the builder alone.
    let client = support::client("http://127.0.0.1:9", &Wiring::default());
    let leases = DynamoLeases::new(client, "leases").unwrap();
    let names = AttributeNames::default();
    assert_eq!(
        (names.partition_key.as_str(), names.sort_key.as_str()),
        ("pk", "sk")
    );
    assert_eq!(
        (
            names.token.as_str(),
            names.expires_at.as_str(),
            names.ttl.as_str()
        ),
        ("lease_token", "lease_expires_at", "ttl")
    );
    // The settings show in `Debug` (there are no getters that echo the builder).
    let shown = format!("{leases:?}");
    for setting in [
        format!("names: {names:?}"),
        "lock_sort_key: \"LOCK\"".to_owned(),
        "ttl: Some(3600s)".to_owned(),
        "validate: true".to_owned(),
        "max_clock_skew: 0ns".to_owned(),
    ] {
        assert!(shown.contains(&setting), "{setting} in {shown}");
    }
    assert_eq!(LeaseBackend::name(&leases), "dynamodb");
}

#[test]
fn item_layout_ttl_clock_and_token_generator() {
    support::run(
        "item_layout_ttl_clock_and_token_generator",
        |endpoint| async move {
            let clock = Arc::new(ManualClock::new());
            let (leases, client) = support::leases(&endpoint, &Wiring::default(), |b| {
                b.with_clock(clock.clone())
                    .with_token_source(Arc::new(Numbered::default()))
            })
            .await;
            let go = support::GoCalls(leases.clone());
            let now = clock.now();
            let lease = go.acquire("job", D).await.unwrap();
            assert_eq!(
                lease.token().as_str(),
                "tok-0",
                "the token generator is used"
            );
            assert_eq!(
                lease.expires_at(),
                now + D,
                "expiry from the injected clock"
            );

            let item = raw_item(&client, leases.table(), ("pk", "sk"), ("job", "LOCK")).await;
            assert_eq!(text(&item, "lease_token"), Some("tok-0"));
            assert_eq!(
                num(&item, "lease_expires_at"),
                (millis(now) + 30_000).div_ceil(1000),
                "Unix seconds, rounded up, where the Go package reads them"
            );
            assert_eq!(
                num(&item, "lease_expires_at_ms"),
                millis(now) + 30_000,
                "the precise expiry in an attribute of this crate's own"
            );
            assert_eq!(num(&item, "lease_acquired_at"), millis(now));
            assert_eq!(
                num(&item, "ttl"),
                (millis(now) + 30_000) / 1000 + 3600,
                "ttl = expiry (epoch seconds) + 1 h buffer"
            );
            let seed = u64::try_from(
                now.duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_micros(),
            )
            .unwrap();
            assert_eq!(
                num(&item, "lease_fence"),
                seed + 1,
                "counter seeded from the clock"
            );
            assert_eq!(lease.fencing_token().get(), seed + 1);
            assert!(text(&item, "lease_owner").is_none());

            // Renew moves expiry and ttl.
            clock.advance(Duration::from_secs(10));
            let lease = go.refresh(&lease, D).await.unwrap();
            let item = raw_item(&client, leases.table(), ("pk", "sk"), ("job", "LOCK")).await;
            assert_eq!(
                num(&item, "lease_expires_at"),
                (millis(now) + 40_000).div_ceil(1000)
            );
            assert_eq!(num(&item, "lease_expires_at_ms"), millis(now) + 40_000);
            assert_eq!(num(&item, "ttl"), (millis(now) + 40_000) / 1000 + 3600);

            // Release keeps the item and the counter; ttl = release time + buffer. The expiry
            // becomes 0, so the Go package's acquire condition sees the key free.
            go.release(&lease).await.unwrap();
            let item = raw_item(&client, leases.table(), ("pk", "sk"), ("job", "LOCK")).await;
            assert!(!item.contains_key("lease_token") && !item.contains_key("lease_expires_at_ms"));
            assert_eq!(num(&item, "lease_expires_at"), 0);
            assert_eq!(num(&item, "lease_fence"), seed + 1);
            assert_eq!(num(&item, "ttl"), (millis(now) + 10_000) / 1000 + 3600);

            // acquire_key with an explicit sort key, and an owner.
            let key = LeaseKey::with_sort_key("tenant-1", "export").unwrap();
            let options = AcquireOptions::default().with_owner("worker 7");
            leases.try_acquire(&key, D, &options).await.unwrap();
            let item = raw_item(
                &client,
                leases.table(),
                ("pk", "sk"),
                ("tenant-1", "export"),
            )
            .await;
            assert_eq!(text(&item, "lease_owner"), Some("worker 7"));
            let lease = go
                .acquire_key(&LeaseKey::with_sort_key("tenant-1", "import").unwrap(), D)
                .await
                .unwrap();
            assert_eq!(lease.token().as_str(), "tok-2");
        },
    );
}

#[test]
fn custom_names_sort_key_and_no_ttl() {
    support::run("custom_names_sort_key_and_no_ttl", |endpoint| async move {
        let client = support::client(&endpoint, &Wiring::default());
        // Go's WithKeyAttributeNames and WithLeaseAttributeNames, and two of this crate's.
        let mut names = AttributeNames::default();
        names.partition_key = "PK".into();
        names.sort_key = "SK".into();
        names.token = "owner_token".into();
        names.expires_at = "expires".into();
        names.ttl = "expire_at".into();
        names.fencing = "fence".into();
        names.owner = "who".into();
        let table = support::table_name("names");
        let leases = DynamoLeases::builder(client.clone(), table.clone())
            .with_attribute_names(names)
            .with_lock_sort_key("MUTEX")
            .without_ttl()
            .build()
            .unwrap();
        leases.ensure_table().await.unwrap();
        let go = support::GoCalls(leases.clone());
        let options = AcquireOptions::default().with_owner("me");
        let lease = leases
            .try_acquire(&LeaseKey::new("job").unwrap(), D, &options)
            .await
            .unwrap();
        let item = raw_item(&client, &table, ("PK", "SK"), ("job", "MUTEX")).await;
        assert_eq!(text(&item, "owner_token"), Some(lease.token().as_str()));
        assert_eq!(
            num(&item, "expires"),
            millis(lease.expires_at()).div_ceil(1000)
        );
        assert_eq!(
            num(&item, "lease_expires_at_ms"),
            millis(lease.expires_at())
        );
        assert_eq!(num(&item, "fence"), lease.fencing_token().get());
        assert_eq!(text(&item, "who"), Some("me"));
        assert!(
            !item.contains_key("expire_at") && !item.contains_key("ttl"),
            "TTL off"
        );
        let err = go.acquire("job", D).await.unwrap_err();
        assert_eq!(err.holder().and_then(|h| h.owner()), Some("me"));
    });
}

#[test]
fn invalid_input_is_rejected_before_sending() {
    support::run(
        "invalid_input_is_rejected_before_sending",
        |endpoint| async move {
            let counter = Arc::new(RequestCounter::default());
            let wiring = Wiring {
                counter: Some(counter.clone()),
                faults: None,
            };
            let (leases, client) = support::leases(&endpoint, &wiring, |b| b).await;
            let go = support::GoCalls(leases.clone());
            let invalid = |r: Result<_, lease_core::LeaseError>| {
                let err = r.expect_err("rejected");
                assert!(err.is_invalid_input(), "{err}");
                err.to_string()
            };
            let msg = invalid(go.acquire("", D).await);
            assert!(msg.contains("partition key"), "{msg}");
            invalid(go.acquire(&"x".repeat(2049), D).await);
            invalid(go.acquire("k", Duration::ZERO).await);
            let msg = invalid(go.acquire("k", Duration::from_secs(31 * 24 * 3600)).await);
            assert!(msg.contains("duration"), "{msg}");
            let long_owner = AcquireOptions::default().with_owner("o".repeat(2000));
            let msg = invalid(
                leases
                    .try_acquire(&LeaseKey::new("k").unwrap(), D, &long_owner)
                    .await,
            );
            assert!(msg.contains("owner"), "{msg}");
            assert_eq!(counter.count(), 0, "nothing was sent");

            let bad_table = DynamoLeases::new(client.clone(), "a b");
            assert!(bad_table.unwrap_err().to_string().contains("table name"));
            let mut clashing = AttributeNames::default();
            clashing.token = "pk".into();
            let clash = DynamoLeases::builder(client.clone(), "leases")
                .with_attribute_names(clashing)
                .build();
            assert!(clash.unwrap_err().to_string().contains("both named `pk`"));
            let mut unnamed = AttributeNames::default();
            unnamed.fencing = String::new();
            let empty = DynamoLeases::builder(client.clone(), "leases")
                .with_attribute_names(unnamed)
                .build();
            assert!(empty.unwrap_err().is_invalid_input());
            let sort = DynamoLeases::builder(client, "leases")
                .with_lock_sort_key("")
                .build();
            assert!(sort.unwrap_err().to_string().contains("lock sort key"));

            // With validation off, bounds are left to DynamoDB (a 31-day lease is accepted).
            let (lax, _) = support::leases(&endpoint, &Wiring::default(), |b| {
                b.without_input_validation()
            })
            .await;
            let lax = support::GoCalls(lax);
            lax.acquire("k", Duration::from_secs(31 * 24 * 3600))
                .await
                .unwrap();
        },
    );
}

#[test]
fn held_error_reports_the_holder_from_the_failed_write() {
    support::run(
        "held_error_reports_the_holder_from_the_failed_write",
        |endpoint| async move {
            let counter = Arc::new(RequestCounter::default());
            let wiring = Wiring {
                counter: Some(counter.clone()),
                faults: None,
            };
            let (leases, _) = support::leases(&endpoint, &wiring, |b| b).await;
            let go = support::GoCalls(leases.clone());
            let key = LeaseKey::new("k").unwrap();
            let options = AcquireOptions::default().with_owner("host-a pid 7");
            let lease = leases.try_acquire(&key, D, &options).await.unwrap();
            counter.take();
            let err = go.acquire("k", D).await.unwrap_err();
            assert!(err.is_held());
            assert_eq!(counter.count(), 1, "no extra read");
            let holder = err.holder().unwrap();
            assert_eq!(holder.owner(), Some("host-a pid 7"));
            assert_eq!(holder.fencing_token(), Some(lease.fencing_token()));
            assert_eq!(holder.expires_at(), Some(lease.expires_at()));
            assert_eq!(holder.token(), Some(lease.token()));
            assert!(!err.to_string().contains(lease.token().as_str()), "{err}");
        },
    );
}

#[test]
fn fencing_keeps_growing_after_the_item_is_deleted() {
    support::run(
        "fencing_keeps_growing_after_the_item_is_deleted",
        |endpoint| async move {
            let clock = Arc::new(ManualClock::new());
            let (leases, client) = support::leases(&endpoint, &Wiring::default(), |b| {
                b.with_clock(clock.clone())
            })
            .await;
            let go = support::GoCalls(leases.clone());
            let mut last = 0;
            for _ in 0..3 {
                let lease = go.acquire("k", D).await.unwrap();
                assert!(lease.fencing_token().get() > last);
                last = lease.fencing_token().get();
                go.release(&lease).await.unwrap();
                clock.advance(Duration::from_micros(1));
            }
            // What TTL does, no earlier than the buffer after the release.
            clock.advance(Duration::from_secs(3600)); // the default TTL buffer
            client
                .delete_item()
                .table_name(leases.table())
                .key("pk", AttributeValue::S("k".into()))
                .key("sk", AttributeValue::S("LOCK".into()))
                .send()
                .await
                .unwrap();
            let lease = go.acquire("k", D).await.unwrap();
            assert!(
                lease.fencing_token().get() > last,
                "re-seeded counter {} must exceed {last}",
                lease.fencing_token()
            );
        },
    );
}

#[test]
fn skew_allowance_delays_takeover() {
    support::run("skew_allowance_delays_takeover", |endpoint| async move {
        let clock = Arc::new(ManualClock::new());
        let skew = Duration::from_secs(2);
        let (leases, _) = support::leases(&endpoint, &Wiring::default(), |b| {
            b.with_clock(clock.clone()).with_max_clock_skew(skew)
        })
        .await;
        let go = support::GoCalls(leases.clone());
        let first = go.acquire("k", D).await.unwrap();
        clock.advance(D);
        assert!(go.acquire("k", D).await.unwrap_err().is_held(), "at expiry");
        assert!(
            go.refresh(&first, D).await.unwrap_err().is_not_owned(),
            "the holder cannot renew an expired lease"
        );
        clock.advance(skew - Duration::from_millis(1));
        assert!(
            go.acquire("k", D).await.unwrap_err().is_held(),
            "within the skew"
        );
        clock.advance(Duration::from_millis(1));
        let second = go.acquire("k", D).await.unwrap();
        assert!(second.fencing_token() > first.fencing_token());
    });
}

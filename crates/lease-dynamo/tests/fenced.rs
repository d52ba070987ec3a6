//! `FencedValues` beside leases: a name equal to a lease key shares its item without touching
//! the lease's attributes (TTL included), attribute names are configurable and validated.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use lease_core::AcquireOptions;
use lease_core::{FencedValues, LeaseBackend, LeaseKey, LeaseListing, ManualClock};
use lease_dynamo::{AttributeNames, DynamoLeases};
use support::Wiring;

const D: Duration = Duration::from_secs(10);

async fn raw_item(
    client: &aws_sdk_dynamodb::Client,
    leases: &DynamoLeases,
    pk: &str,
    sk: &str,
) -> std::collections::HashMap<String, AttributeValue> {
    support::raw_item(client, leases.table(), ("pk", "sk"), (pk, sk))
        .await
        .unwrap_or_default()
}

#[test]
fn fenced_value_and_lease_coexist_on_one_item() {
    let Some(endpoint) = support::endpoint("fenced_value_and_lease_coexist_on_one_item") else {
        return;
    };
    support::runtime().block_on(async {
        let clock = Arc::new(ManualClock::new());
        let (leases, client) = support::leases(&endpoint, &Wiring::default(), |b| {
            b.with_clock(clock.clone())
        })
        .await;
        let t = lease_core::backend::fencing_token;
        let key = LeaseKey::new("shared").unwrap();

        let lease = leases
            .try_acquire(
                &LeaseKey::new("shared").unwrap(),
                D,
                &AcquireOptions::default(),
            )
            .await
            .unwrap();
        let before = raw_item(&client, &leases, "shared", "LOCK").await;
        assert!(before.contains_key("ttl"));

        // Fenced writes on the lease's own key: the lease attributes are untouched.
        let fence = t(lease.fencing_token().get());
        assert_eq!(leases.fence_and_read(&key, fence).await.unwrap(), None);
        leases.put_fenced(&key, fence, b"progress").await.unwrap();
        let after = raw_item(&client, &leases, "shared", "LOCK").await;
        for attr in [
            "lease_token",
            "lease_expires_at",
            "lease_acquired_at",
            "lease_fence",
            "ttl",
        ] {
            assert_eq!(after.get(attr), before.get(attr), "{attr} untouched");
        }
        assert_eq!(
            after.get("fenced_value"),
            Some(&AttributeValue::B(b"progress".as_slice().into()))
        );
        assert_eq!(
            after.get("value_fence"),
            Some(&AttributeValue::N(fence.get().to_string()))
        );

        // Lease operations do not touch the fenced attributes.
        let lease = leases.renew(&lease, D).await.unwrap();
        support::release(&leases, &lease).await.unwrap();
        clock.advance(D);
        let next = leases
            .try_acquire(
                &LeaseKey::new("shared").unwrap(),
                D,
                &AcquireOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(next.fencing_token().get(), lease.fencing_token().get() + 1);
        let record = LeaseBackend::inspect(&leases, &key).await.unwrap().unwrap();
        assert_eq!(record.fencing_token(), Some(next.fencing_token()));
        let seen = leases
            .fence_and_read(&key, next.fencing_token())
            .await
            .unwrap();
        assert_eq!(seen.as_deref(), Some(&b"progress"[..]));
        let err = leases.put_fenced(&key, fence, b"stale").await.unwrap_err();
        assert!(err.is_not_owned(), "{err}");

        // A fenced-only item (a separate partition, as documented) is not a lease and never
        // gets a TTL.
        let name = LeaseKey::with_sort_key("checkpoints", "shared").unwrap();
        leases.put_fenced(&name, t(1), b"cp").await.unwrap();
        leases.fence_and_read(&name, t(2)).await.unwrap();
        let item = raw_item(&client, &leases, "checkpoints", "shared").await;
        assert!(!item.contains_key("ttl"), "checkpoints must not expire");
        assert!(
            LeaseBackend::inspect(&leases, &name)
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            leases
                .list_partition("checkpoints")
                .await
                .unwrap()
                .is_empty()
        );
        // And a lease can still be taken on that key, keeping the value.
        let l = leases
            .try_acquire(&name, D, &AcquireOptions::default())
            .await
            .unwrap();
        support::release(&leases, &l).await.unwrap();
        assert_eq!(
            leases.fence_and_read(&name, t(2)).await.unwrap().as_deref(),
            Some(&b"cp"[..])
        );
    });
}

/// Deleting a lease whose item holds a fenced value too removes the lease and keeps the value
/// and its fence, without a TTL: a stale writer is still refused afterwards.
#[test]
fn delete_keeps_a_fenced_value_that_shares_the_item() {
    let Some(endpoint) = support::endpoint("delete_keeps_a_fenced_value_that_shares_the_item")
    else {
        return;
    };
    support::runtime().block_on(async {
        let counter = Arc::new(support::RequestCounter::default());
        let wiring = Wiring {
            counter: Some(counter.clone()),
            faults: None,
        };
        let (leases, client) = support::leases(&endpoint, &wiring, |b| b).await;
        let key = LeaseKey::with_sort_key("units", "retired").unwrap();
        let lease = leases
            .try_acquire(&key, D, &AcquireOptions::default())
            .await
            .unwrap();
        let fence = lease.fencing_token();
        leases.put_fenced(&key, fence, b"final").await.unwrap();
        counter.take();

        let err = LeaseBackend::delete(&leases, &key, None, Some(fence))
            .await
            .unwrap_err();
        assert!(err.is_not_owned(), "{err}");
        assert_eq!(
            counter.take(),
            ["DeleteItem"],
            "a refused delete is one request"
        );

        LeaseBackend::delete(&leases, &key, Some(lease.token()), Some(fence))
            .await
            .unwrap();
        assert_eq!(
            counter.take(),
            ["DeleteItem", "UpdateItem"],
            "the DeleteItem is refused for the value's sake, then the lease attributes go"
        );
        let item = raw_item(&client, &leases, "units", "retired").await;
        let mut attributes: Vec<_> = item.keys().map(String::as_str).collect();
        attributes.sort_unstable();
        assert_eq!(
            attributes,
            ["fenced_value", "pk", "sk", "value_fence"],
            "only the value is left, with no TTL"
        );
        assert!(
            LeaseBackend::inspect(&leases, &key)
                .await
                .unwrap()
                .is_none()
        );
        assert!(leases.list_partition("units").await.unwrap().is_empty());
        let stale = lease_core::backend::fencing_token(fence.get() - 1);
        let err = leases.put_fenced(&key, stale, b"late").await.unwrap_err();
        assert!(err.is_not_owned(), "the fence outlives the lease: {err}");
        assert_eq!(
            leases.fence_and_read(&key, fence).await.unwrap().as_deref(),
            Some(&b"final"[..])
        );

        // A second delete finds no lease, and leaves the value alone.
        let err = LeaseBackend::delete(&leases, &key, Some(lease.token()), Some(fence))
            .await
            .unwrap_err();
        assert_eq!(
            err.not_owned_reason(),
            Some(lease_core::NotOwnedReason::Missing),
            "{err}"
        );
        let item = raw_item(&client, &leases, "units", "retired").await;
        assert!(item.contains_key("fenced_value"));
    });
}

#[test]
fn fenced_attribute_names_are_configurable() {
    let Some(endpoint) = support::endpoint("fenced_attribute_names_are_configurable") else {
        return;
    };
    support::runtime().block_on(async {
        let mut names = AttributeNames::default();
        names.fenced_value = "cp_value".into();
        names.value_fence = "cp_fence".into();
        let (leases, client) = support::leases(&endpoint, &Wiring::default(), |b| {
            b.with_attribute_names(names)
        })
        .await;
        let name = LeaseKey::with_sort_key("checkpoints", "a").unwrap();
        leases
            .put_fenced(&name, lease_core::backend::fencing_token(3), b"x")
            .await
            .unwrap();
        let item = raw_item(&client, &leases, "checkpoints", "a").await;
        assert!(item.contains_key("cp_value") && item.contains_key("cp_fence"));
        assert!(!item.contains_key("fenced_value") && !item.contains_key("value_fence"));
    });
}

#[test]
fn fenced_attribute_names_are_validated() {
    let client = support::client("http://127.0.0.1:9", &Wiring::default());
    let build = |value: &str, fence: &str| {
        let mut names = AttributeNames::default();
        names.fenced_value = value.into();
        names.value_fence = fence.into();
        DynamoLeases::builder(client.clone(), "leases")
            .with_attribute_names(names)
            .build()
    };
    for (value, fence) in [
        ("", "value_fence"),
        ("fenced_value", ""),
        ("lease_fence", "value_fence"),
        ("fenced_value", "ttl"),
        ("pk", "value_fence"),
        ("same", "same"),
    ] {
        let err = build(value, fence).unwrap_err();
        assert!(err.is_invalid_input(), "{value}/{fence}: {err}");
    }
    build("cp", "cp_fence").unwrap();
    let names = AttributeNames::default();
    assert_eq!(
        (names.fenced_value.as_str(), names.value_fence.as_str()),
        ("fenced_value", "value_fence")
    );
}

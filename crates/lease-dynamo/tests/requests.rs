//! Every operation is exactly one request, counted by an SDK interceptor on the wire (a delete of
//! a lease that shares its item with a fenced value is two: `tests/fenced.rs`).
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::AcquireOptions;
use lease_core::{FencedValues, LeaseBackend, LeaseKey, LeaseListing, ManualClock};
use support::{RequestCounter, Wiring};

const D: Duration = Duration::from_secs(10);

#[test]
fn one_request_per_operation() {
    let Some(endpoint) = support::endpoint("one_request_per_operation") else {
        return;
    };
    support::runtime().block_on(async {
        let counter = Arc::new(RequestCounter::default());
        let clock = Arc::new(ManualClock::new());
        let wiring = Wiring {
            counter: Some(counter.clone()),
            faults: None,
        };
        let (leases, _) =
            support::leases(&endpoint, &wiring, |b| b.with_clock(clock.clone())).await;

        let expect = |what: &str, ops: &[&str]| {
            let sent = counter.take();
            assert_eq!(sent, ops, "{what}");
            println!("{what}: {} request(s) {sent:?}", sent.len());
        };

        let lease = leases
            .try_acquire(
                &LeaseKey::new("job").unwrap(),
                D,
                &AcquireOptions::default(),
            )
            .await
            .unwrap();
        expect("acquire (new item)", &["UpdateItem"]);

        let err = leases
            .try_acquire(
                &LeaseKey::new("job").unwrap(),
                D,
                &AcquireOptions::default(),
            )
            .await
            .unwrap_err();
        assert!(err.is_held());
        assert!(err.holder().and_then(|h| h.expires_at()).is_some());
        expect("contended acquire, holder reported", &["UpdateItem"]);

        let lease = leases.renew(&lease, D).await.unwrap();
        expect("renew", &["UpdateItem"]);

        support::release(&leases, &lease).await.unwrap();
        expect("release", &["UpdateItem"]);

        let again = leases
            .try_acquire(
                &LeaseKey::new("job").unwrap(),
                D,
                &AcquireOptions::default(),
            )
            .await
            .unwrap();
        expect("acquire (released item)", &["UpdateItem"]);

        clock.advance(D + Duration::from_millis(1));
        let taken = leases
            .try_acquire(
                &LeaseKey::new("job").unwrap(),
                D,
                &AcquireOptions::default(),
            )
            .await
            .unwrap();
        assert!(taken.fencing_token() > again.fencing_token());
        expect("takeover of an expired lease", &["UpdateItem"]);

        let err = leases.renew(&again, D).await.unwrap_err();
        assert!(err.is_not_owned());
        expect("renew after takeover", &["UpdateItem"]);

        let err = support::release(&leases, &again).await.unwrap_err();
        assert!(err.is_not_owned());
        expect("release after takeover", &["UpdateItem"]);

        let key = LeaseKey::new("job").unwrap();
        let record = LeaseBackend::inspect(&leases, &key).await.unwrap().unwrap();
        assert_eq!(record.fencing_token(), Some(taken.fencing_token()));
        expect("inspect", &["GetItem"]);

        let records = leases.list_partition("job").await.unwrap();
        assert_eq!(records.len(), 1);
        expect("list a partition", &["Query"]);

        let err = LeaseBackend::delete(&leases, &key, None, Some(taken.fencing_token()))
            .await
            .unwrap_err();
        assert!(err.is_not_owned(), "{err}");
        expect("delete refused (held, named free)", &["DeleteItem"]);

        LeaseBackend::delete(
            &leases,
            &key,
            Some(taken.token()),
            Some(taken.fencing_token()),
        )
        .await
        .unwrap();
        expect("delete", &["DeleteItem"]);

        let err = LeaseBackend::delete(
            &leases,
            &key,
            Some(taken.token()),
            Some(taken.fencing_token()),
        )
        .await
        .unwrap_err();
        assert!(err.is_not_owned(), "{err}");
        expect("delete of a deleted record", &["DeleteItem"]);

        let name = LeaseKey::with_sort_key("checkpoints", "job").unwrap();
        let t = lease_core::backend::fencing_token;
        assert_eq!(leases.fence_and_read(&name, t(2)).await.unwrap(), None);
        expect("fence_and_read (new item)", &["UpdateItem"]);

        leases.put_fenced(&name, t(2), b"offset=1").await.unwrap();
        expect("put_fenced", &["UpdateItem"]);

        let big = vec![7u8; 64 * 1024];
        leases.put_fenced(&name, t(2), &big).await.unwrap();
        expect("put_fenced (64 KiB)", &["UpdateItem"]);

        let seen = leases.fence_and_read(&name, t(3)).await.unwrap();
        assert_eq!(seen.as_deref(), Some(&big[..]));
        expect("fence_and_read (raises the fence)", &["UpdateItem"]);

        let err = leases.put_fenced(&name, t(2), b"stale").await.unwrap_err();
        assert!(err.is_not_owned(), "{err}");
        expect("put_fenced by a fenced-out token", &["UpdateItem"]);

        let err = leases.fence_and_read(&name, t(1)).await.unwrap_err();
        assert!(err.is_not_owned(), "{err}");
        expect("fence_and_read by a fenced-out token", &["UpdateItem"]);

        let err = leases
            .put_fenced(&name, t(4), &vec![0u8; 64 * 1024 + 1])
            .await
            .unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
        expect("put_fenced over 64 KiB", &[]);
    });
}

#[test]
fn listing_follows_query_pages() {
    let Some(endpoint) = support::endpoint("listing_follows_query_pages") else {
        return;
    };
    support::runtime().block_on(async {
        let counter = Arc::new(RequestCounter::default());
        let wiring = Wiring {
            counter: Some(counter.clone()),
            faults: None,
        };
        let (leases, _) = support::leases(&endpoint, &wiring, |b| b.with_list_page_size(2)).await;
        for sort in ["e", "d", "b", "c", "a"] {
            let key = LeaseKey::with_sort_key("paged", sort).unwrap();
            leases
                .try_acquire(&key, D, &AcquireOptions::default())
                .await
                .unwrap();
        }
        leases
            .try_acquire(
                &LeaseKey::new("paged-not").unwrap(),
                D,
                &AcquireOptions::default(),
            )
            .await
            .unwrap();
        counter.take();
        let records = leases.list_partition("paged").await.unwrap();
        let sorts: Vec<_> = records.iter().map(|r| r.key().sort().unwrap()).collect();
        assert_eq!(sorts, ["a", "b", "c", "d", "e"]);
        let pages = counter.take();
        assert_eq!(pages, ["Query"; 3], "5 items, 2 per page");
    });
}

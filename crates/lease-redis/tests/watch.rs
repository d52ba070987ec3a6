//! Observation pushed, not polled: with a manual clock nobody advances, a waiter's backoff and
//! an observer's poll never end, so the only thing that can wake them is the message a release
//! or an acquisition publishes in its own script. A wake-up survives the pub/sub connection
//! being cut (it reconnects, and wakes every watch, since a message may have been missed).
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::{AcquireOptions, LeaseBackend, LeaseGuard, LeaseKey, ManualClock};
use lease_redis::RedisLeases;

const D: Duration = Duration::from_secs(10);
const WOKEN_WITHIN: Duration = Duration::from_secs(5);

#[test]
fn a_release_wakes_a_waiter_through_pub_sub() {
    support::run(
        "a_release_wakes_a_waiter_through_pub_sub",
        |url| async move {
            let clock = Arc::new(ManualClock::new());
            let (holder, _proxy, prefix) =
                support::leases(&url, "publish", |b| b.with_clock(clock.clone())).await;
            let waiter_store = Arc::new(
                RedisLeases::builder_for_url(&url, &prefix)
                    .unwrap()
                    .with_clock(clock.clone())
                    .build()
                    .unwrap(),
            );
            let key = LeaseKey::new("handoff").unwrap();
            let lease = holder
                .try_acquire(&key, D, &AcquireOptions::default())
                .await
                .unwrap();
            let waiter = tokio::spawn({
                let (store, key) = (waiter_store.clone(), key.clone());
                async move { LeaseGuard::builder(store, &key, D).acquire().await }
            });
            // Let the waiter find the key held and start waiting.
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(!waiter.is_finished(), "the key is held");
            holder
                .release(lease.key(), lease.token(), lease.fencing_token())
                .await
                .unwrap();
            let guard = tokio::time::timeout(WOKEN_WITHIN, waiter)
                .await
                .expect("the PUBLISH of the release woke the waiter (its clock never moved)")
                .unwrap()
                .unwrap();
            assert!(guard.fencing_token() > lease.fencing_token());
            guard.release().await.unwrap();
        },
    );
}

#[test]
fn a_watch_wakes_on_every_change_of_its_key_only() {
    support::run(
        "a_watch_wakes_on_every_change_of_its_key_only",
        |url| async move {
            let clock = Arc::new(ManualClock::new());
            let (leases, proxy, _prefix) =
                support::leases(&url, "watch", |b| b.with_clock(clock.clone())).await;
            let key = LeaseKey::with_sort_key("watched", "a").unwrap();
            let other = LeaseKey::with_sort_key("watched", "b").unwrap();
            let mut watch = leases.watch_record(&key).expect("pub/sub watches");
            // The first wake-up is the subscription's (a change may have been missed before it).
            tokio::time::timeout(WOKEN_WITHIN, watch.next_change())
                .await
                .expect("subscribed");
            let once = AcquireOptions::default();
            let lease = leases.try_acquire(&other, D, &once).await.unwrap();
            assert!(
                tokio::time::timeout(Duration::from_millis(300), watch.next_change())
                    .await
                    .is_err(),
                "another key's change does not wake it"
            );
            release(&leases, &lease).await;
            let lease = leases.try_acquire(&key, D, &once).await.unwrap();
            tokio::time::timeout(WOKEN_WITHIN, watch.next_change())
                .await
                .expect("the acquisition woke it");
            release(&leases, &lease).await;
            tokio::time::timeout(WOKEN_WITHIN, watch.next_change())
                .await
                .expect("the release woke it");

            // The subscriber's connection cut (this manager's alone: the server is shared): it
            // reconnects, and wakes the watch on the way.
            proxy.cut_all();
            tokio::time::timeout(WOKEN_WITHIN, watch.next_change())
                .await
                .expect("a lost subscription wakes its watches");
            tokio::time::sleep(Duration::from_millis(200)).await;
            let lease = leases.try_acquire(&key, D, &once).await.unwrap();
            tokio::time::timeout(WOKEN_WITHIN, watch.next_change())
                .await
                .expect("subscribed again: the acquisition woke it");
            release(&leases, &lease).await;
        },
    );
}

async fn release(leases: &RedisLeases, lease: &lease_core::Lease) {
    leases
        .release(lease.key(), lease.token(), lease.fencing_token())
        .await
        .unwrap();
}

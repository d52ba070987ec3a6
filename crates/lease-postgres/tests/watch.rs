//! Observation pushed, not polled: with a manual clock nobody advances, a waiter's backoff and
//! an observer's poll never end, so the only thing that can wake them is the `NOTIFY` a release
//! or an acquisition sends in its own statement. Without a listener configuration the manager
//! offers no watch (callers poll).
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::{AcquireOptions, LeaseBackend, LeaseGuard, LeaseKey, ManualClock};
use lease_postgres::PgLeases;

const D: Duration = Duration::from_secs(10);
const WOKEN_WITHIN: Duration = Duration::from_secs(5);

#[test]
fn a_release_wakes_a_waiter_through_notify() {
    support::run(
        "a_release_wakes_a_waiter_through_notify",
        |url| async move {
            let clock = Arc::new(ManualClock::new());
            let (holder, _proxy, table) =
                support::leases(&url, "notify", |b| b.with_clock(clock.clone())).await;
            let waiter_store = Arc::new(
                PgLeases::builder(support::pool(support::config(&url, None)), &table)
                    .with_clock(clock.clone())
                    .with_listener_config(support::config(&url, None))
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
                .expect("the NOTIFY of the release woke the waiter (its clock never moved)")
                .unwrap()
                .unwrap();
            assert!(guard.fencing_token() > lease.fencing_token());
            guard.release().await.unwrap();
            support::drop_table(&url, &table).await;
        },
    );
}

#[test]
fn a_watch_wakes_on_every_change_of_its_key_only() {
    support::run(
        "a_watch_wakes_on_every_change_of_its_key_only",
        |url| async move {
            let clock = Arc::new(ManualClock::new());
            let (leases, _proxy, table) =
                support::leases(&url, "watch", |b| b.with_clock(clock.clone())).await;
            let key = LeaseKey::with_sort_key("watched", "a").unwrap();
            let other = LeaseKey::with_sort_key("watched", "b").unwrap();
            let mut watch = leases.watch_record(&key).expect("a listener is configured");
            // The first wake-up may be the listener's connect (a change may have been missed).
            let _ = tokio::time::timeout(Duration::from_millis(500), watch.next_change()).await;
            let once = AcquireOptions::default();
            let lease = leases.try_acquire(&other, D, &once).await.unwrap();
            assert!(
                tokio::time::timeout(Duration::from_millis(300), watch.next_change())
                    .await
                    .is_err(),
                "another key's change does not wake it"
            );
            leases.release_lease_of(&lease).await;
            let lease = leases.try_acquire(&key, D, &once).await.unwrap();
            tokio::time::timeout(WOKEN_WITHIN, watch.next_change())
                .await
                .expect("the acquisition woke it");
            leases.release_lease_of(&lease).await;
            tokio::time::timeout(WOKEN_WITHIN, watch.next_change())
                .await
                .expect("the release woke it");

            let polled = PgLeases::new(support::pool(support::config(&url, None)), &table).unwrap();
            assert!(
                polled.watch_record(&key).is_none(),
                "no listener configured: callers poll"
            );
            support::drop_table(&url, &table).await;
        },
    );
}

trait ReleaseOf {
    async fn release_lease_of(&self, lease: &lease_core::Lease);
}

impl ReleaseOf for PgLeases {
    async fn release_lease_of(&self, lease: &lease_core::Lease) {
        self.release(lease.key(), lease.token(), lease.fencing_token())
            .await
            .unwrap();
    }
}

//! What each operation costs on the wire, counted by the proxy in front of a real server: one
//! round trip (one `Sync`) and one statement for acquire (granted or refused, with or without the
//! incarnation check), renew, release, delete, inspect, listing and each fenced-value call; a
//! lost reply costs one more of each and nothing else. Every statement is unnamed (no prepared
//! statement a transaction-mode pooler could lose).
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::{AcquireOptions, FencedValues, LeaseBackend, LeaseKey, ManualClock};

const D: Duration = Duration::from_secs(10);

async fn counted<T>(
    proxy: &support::Proxy,
    op: impl std::future::Future<Output = T>,
) -> (T, u32, u32) {
    let (rt0, st0) = (proxy.round_trips(), proxy.statements());
    let out = op.await;
    (out, proxy.round_trips() - rt0, proxy.statements() - st0)
}

#[test]
fn every_operation_is_one_round_trip() {
    support::run("every_operation_is_one_round_trip", |url| async move {
        for grace in [Duration::ZERO, Duration::from_secs(30)] {
            let clock = Arc::new(ManualClock::new());
            let (leases, proxy, table) = support::leases(&url, "rt", |b| {
                b.with_clock(clock.clone()).with_recreation_grace(grace)
            })
            .await;
            let key = LeaseKey::with_sort_key("cost", "a").unwrap();
            let once = AcquireOptions::default();
            if !grace.is_zero() {
                // A new table waits out the grace first (one refused statement).
                let (r, rt, st) = counted(&proxy, leases.try_acquire(&key, D, &once)).await;
                assert!(
                    r.unwrap_err().is_held(),
                    "a new incarnation grants nothing yet"
                );
                assert_eq!((rt, st), (1, 1), "a refused acquire in a new incarnation");
                clock.advance(grace + Duration::from_secs(1));
            }
            let (lease, rt, st) = counted(&proxy, leases.try_acquire(&key, D, &once)).await;
            let lease = lease.unwrap();
            assert_eq!((rt, st), (1, 1), "acquire (grace {grace:?})");
            let (r, rt, st) = counted(&proxy, leases.try_acquire(&key, D, &once)).await;
            assert!(r.unwrap_err().is_held());
            assert_eq!(
                (rt, st),
                (1, 1),
                "a refused acquire names the holder in the same trip"
            );
            let (lease, rt, st) = counted(&proxy, leases.renew(&lease, D)).await;
            let lease = lease.unwrap();
            assert_eq!((rt, st), (1, 1), "renew");
            let (r, rt, st) = counted(&proxy, leases.inspect(&key)).await;
            assert!(r.unwrap().is_some());
            assert_eq!((rt, st), (1, 1), "inspect");
            let listing = leases.as_listing().unwrap();
            let (r, rt, st) = counted(&proxy, listing.list_partition("cost")).await;
            assert_eq!(r.unwrap().len(), 1);
            assert_eq!((rt, st), (1, 1), "list_partition");
            let name = LeaseKey::with_sort_key("checkpoints", "a").unwrap();
            let f = lease.fencing_token();
            let (r, rt, st) = counted(&proxy, leases.fence_and_read(&name, f)).await;
            assert_eq!(r.unwrap(), None);
            assert_eq!((rt, st), (1, 1), "fence_and_read");
            let (r, rt, st) = counted(&proxy, leases.put_fenced(&name, f, b"42")).await;
            r.unwrap();
            assert_eq!((rt, st), (1, 1), "put_fenced");
            let (r, rt, st) = counted(&proxy, leases.release(lease.key(), lease.token(), f)).await;
            r.unwrap();
            assert_eq!((rt, st), (1, 1), "release");
            let (r, rt, st) = counted(&proxy, leases.delete(&key, None, Some(f))).await;
            r.unwrap();
            assert_eq!((rt, st), (1, 1), "delete");

            let texts = proxy.take_statements();
            assert!(
                texts.iter().all(|t| t.starts_with("/* lease_postgres ")),
                "unnamed statements only (transaction-mode poolers): {texts:?}"
            );

            // A lost reply: one more round trip, and the call still succeeds.
            proxy.faults.lose_replies(1);
            let (r, rt, st) = counted(&proxy, leases.try_acquire(&key, D, &once)).await;
            let again = r.unwrap();
            assert_eq!(proxy.faults.lost(), 1);
            assert_eq!((rt, st), (2, 2), "an acquire whose first reply was lost");
            leases
                .release(again.key(), again.token(), again.fencing_token())
                .await
                .unwrap();
            support::drop_table(&url, &table).await;
        }
    });
}

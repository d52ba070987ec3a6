//! What each operation costs on the wire, counted by the proxy in front of a real server: one
//! command (one round trip) for acquire (granted or refused, with or without the incarnation
//! check), renew, release, delete, inspect, listing and each fenced-value call, once the scripts
//! are loaded; a script's first use on a server costs `NOSCRIPT` and `SCRIPT LOAD` besides; a
//! lost reply costs the script once more, on a fresh connection (whose handshake is counted
//! apart).
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::{AcquireOptions, FencedValues, LeaseBackend, LeaseKey, ManualClock};

const D: Duration = Duration::from_secs(10);

async fn counted<T>(
    proxy: &support::Proxy,
    op: impl std::future::Future<Output = T>,
) -> (T, Vec<String>) {
    proxy.take_commands();
    let out = op.await;
    (out, proxy.take_commands())
}

fn one(commands: &[String], expected: &str, what: &str) {
    assert_eq!(
        commands,
        [expected.to_owned()],
        "{what}: one command, one round trip"
    );
}

#[test]
fn every_operation_is_one_round_trip() {
    support::run("every_operation_is_one_round_trip", |url| async move {
        for grace in [Duration::ZERO, Duration::from_secs(30)] {
            let clock = Arc::new(ManualClock::new());
            let (leases, proxy, _prefix) = support::leases(&url, "rt", |b| {
                b.with_clock(clock.clone()).with_recreation_grace(grace)
            })
            .await;
            let key = LeaseKey::with_sort_key("cost", "a").unwrap();
            let once = AcquireOptions::default();
            // The first call opens a connection (with a grace, it reads INFO) and loads the
            // script if the server lacks it.
            let (r, first) = counted(&proxy, leases.try_acquire(&key, D, &once)).await;
            println!("grace {grace:?}: the first acquire sent {first:?}");
            assert!(
                first.iter().filter(|c| c.starts_with("EVALSHA")).count() <= 2
                    && first.iter().filter(|c| *c == "SCRIPT").count() <= 1,
                "a first use loads the script at most once: {first:?}"
            );
            assert_eq!(
                first.iter().any(|c| c == "INFO"),
                !grace.is_zero(),
                "INFO once per connection, with a grace only: {first:?}"
            );
            if !grace.is_zero() {
                assert!(
                    r.unwrap_err().is_held(),
                    "a new incarnation grants nothing yet"
                );
                let (r, c) = counted(&proxy, leases.try_acquire(&key, D, &once)).await;
                assert!(r.unwrap_err().is_held());
                one(&c, "EVALSHA acquire", "a refused acquire in the grace");
                clock.advance(grace + Duration::from_secs(1));
            } else {
                let lease = r.unwrap();
                leases
                    .release(lease.key(), lease.token(), lease.fencing_token())
                    .await
                    .unwrap();
            }
            // Warm every script on this server, so what follows counts steady-state costs.
            let warm = LeaseKey::with_sort_key("warm", "a").unwrap();
            let w = leases.try_acquire(&warm, D, &once).await.unwrap();
            let w = leases.renew(&w, D).await.unwrap();
            leases
                .fence_and_read(&warm, w.fencing_token())
                .await
                .unwrap();
            leases
                .put_fenced(&warm, w.fencing_token(), b"1")
                .await
                .unwrap();
            leases
                .as_listing()
                .unwrap()
                .list_partition("warm")
                .await
                .unwrap();
            leases
                .release(w.key(), w.token(), w.fencing_token())
                .await
                .unwrap();
            leases
                .delete(&warm, None, Some(w.fencing_token()))
                .await
                .unwrap();

            let (lease, c) = counted(&proxy, leases.try_acquire(&key, D, &once)).await;
            let lease = lease.unwrap();
            one(&c, "EVALSHA acquire", &format!("acquire (grace {grace:?})"));
            let (r, c) = counted(&proxy, leases.try_acquire(&key, D, &once)).await;
            assert!(r.unwrap_err().is_held());
            one(
                &c,
                "EVALSHA acquire",
                "a refused acquire names the holder in the same trip",
            );
            let (lease, c) = counted(&proxy, leases.renew(&lease, D)).await;
            let lease = lease.unwrap();
            one(&c, "EVALSHA renew", "renew");
            let (r, c) = counted(&proxy, leases.inspect(&key)).await;
            assert!(r.unwrap().is_some());
            one(&c, "HMGET", "inspect");
            let listing = leases.as_listing().unwrap();
            let (r, c) = counted(&proxy, listing.list_partition("cost")).await;
            assert_eq!(r.unwrap().len(), 1);
            one(&c, "EVALSHA list", "list_partition");
            let name = LeaseKey::with_sort_key("checkpoints", "a").unwrap();
            let f = lease.fencing_token();
            let (r, c) = counted(&proxy, leases.fence_and_read(&name, f)).await;
            assert_eq!(r.unwrap(), None);
            one(&c, "EVALSHA fence_and_read", "fence_and_read");
            let (r, c) = counted(&proxy, leases.put_fenced(&name, f, b"42")).await;
            r.unwrap();
            one(&c, "EVALSHA put_fenced", "put_fenced");
            let (r, c) = counted(&proxy, leases.release(lease.key(), lease.token(), f)).await;
            r.unwrap();
            one(&c, "EVALSHA release", "release");
            let (r, c) = counted(&proxy, leases.delete(&key, None, Some(f))).await;
            r.unwrap();
            one(&c, "EVALSHA delete", "delete");

            // A lost reply: the script once more on a fresh connection, and the call succeeds.
            proxy.faults.lose_replies(1);
            let (r, c) = counted(&proxy, leases.try_acquire(&key, D, &once)).await;
            let again = r.unwrap();
            assert_eq!(proxy.faults.lost(), 1);
            println!("grace {grace:?}: an acquire whose first reply was lost sent {c:?}");
            assert_eq!(
                c.iter().filter(|c| *c == "EVALSHA acquire").count(),
                2,
                "an acquire whose first reply was lost: {c:?}"
            );
            leases
                .release(again.key(), again.token(), again.fencing_token())
                .await
                .unwrap();
        }
    });
}

//! Redis Cluster: three private primaries with the slots split between them. Every key of a
//! prefix lands in its hash slot's node, every operation and a wake-up run there, and when the
//! slot moves to another node (its keys `MIGRATE`d, `CLUSTER SETSLOT ... NODE` everywhere) the
//! next call, refused with `MOVED`, is retried on the new owner and finds the holder. Skipped,
//! saying why, without `redis-server` (unless `LEASE_REQUIRE_REDIS=1`).
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::{AcquireOptions, FencedValues, LeaseBackend, LeaseGuard, LeaseKey, ManualClock};
use lease_redis::{RedisLeases, RetryPolicy};
use lease_testservers::{RedisServer, Reply};

const D: Duration = Duration::from_secs(10);

fn text(reply: &Reply) -> String {
    reply.text().to_owned()
}

#[test]
fn a_prefix_lives_on_its_slots_node_and_follows_the_slot_when_it_moves() {
    let test = "a_prefix_lives_on_its_slots_node_and_follows_the_slot_when_it_moves";
    let nodes = match RedisServer::cluster(3) {
        Ok(nodes) => nodes,
        Err(e) => return support::skip(test, &format!("no private cluster: {e}")),
    };
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let prefix = support::prefix("cluster");
    let tag = format!("{{{prefix}}}");
    let slot = match nodes[0].command(&["CLUSTER", "KEYSLOT", &tag]).unwrap() {
        Reply::Int(slot) => slot.to_string(),
        other => panic!("CLUSTER KEYSLOT answered {other:?}"),
    };
    support::runtime().block_on(async {
        let clock = Arc::new(ManualClock::new());
        let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
        let leases = Arc::new(
            RedisLeases::builder_for_cluster(&seeds, &prefix)
                .unwrap()
                .with_clock(clock.clone())
                .with_retry_policy(
                    RetryPolicy::default()
                        .with_backoff(Duration::from_millis(10), Duration::from_millis(50)),
                )
                .build()
                .unwrap(),
        );
        let key = LeaseKey::with_sort_key("jobs", "a").unwrap();
        let once = AcquireOptions::default();
        let lease = leases.try_acquire(&key, D, &once).await.unwrap();
        let lease = leases.renew(&lease, D).await.unwrap();
        assert!(leases.inspect(&key).await.unwrap().is_some());
        let listed = leases.as_listing().unwrap().list_partition("jobs").await.unwrap();
        assert_eq!(listed.len(), 1);
        leases.put_fenced(&key, lease.fencing_token(), b"7").await.unwrap();
        assert_eq!(
            leases.fence_and_read(&key, lease.fencing_token()).await.unwrap(),
            Some(b"7".to_vec())
        );

        // Which node owns the slot: the one whose keys in it are ours.
        let owner = nodes
            .iter()
            .position(|n| {
                matches!(n.command(&["CLUSTER", "COUNTKEYSINSLOT", &slot]), Ok(Reply::Int(c)) if c > 0)
            })
            .expect("the prefix's keys are on one node");
        let target = (owner + 1) % nodes.len();

        // A waiter woken through the owner's pub/sub.
        let waiter = tokio::spawn({
            let (leases, key) = (leases.clone(), key.clone());
            async move { LeaseGuard::builder(leases, &key, D).acquire().await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        leases
            .release(lease.key(), lease.token(), lease.fencing_token())
            .await
            .unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken by the release")
            .unwrap()
            .unwrap();

        // Move the slot: its keys to the target, then every node told the new owner.
        tokio::task::block_in_place(|| {
            let (from, to) = (&nodes[owner], &nodes[target]);
            let to_id = text(&to.command(&["CLUSTER", "MYID"]).unwrap());
            let from_id = text(&from.command(&["CLUSTER", "MYID"]).unwrap());
            to.command(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]).unwrap();
            from.command(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]).unwrap();
            let Reply::Array(keys) = from
                .command(&["CLUSTER", "GETKEYSINSLOT", &slot, "1000"])
                .unwrap()
            else {
                panic!("no keys listed")
            };
            let port = to.port().to_string();
            let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            let names: Vec<String> = keys.iter().map(text).collect();
            migrate.extend(names.iter().map(String::as_str));
            from.command(&migrate).unwrap();
            for node in &nodes {
                node.command(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]).unwrap();
            }
        });
        // The manager's idle connections still reach the old owner: `MOVED`, then the new one.
        let err = leases.try_acquire(&key, D, &once).await.unwrap_err();
        assert!(err.is_held(), "the holder moved with its slot: {err}");
        assert!(
            matches!(nodes[target].command(&["CLUSTER", "COUNTKEYSINSLOT", &slot]), Ok(Reply::Int(c)) if c > 0)
        );
        guard.release().await.unwrap();
        let next = leases.try_acquire(&key, D, &once).await.unwrap();
        assert!(next.fencing_token() > lease.fencing_token());
    });
}

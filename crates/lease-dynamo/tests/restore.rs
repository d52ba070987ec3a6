//! A table restored under a holder (issue 37, item 3): the table is deleted, created again under
//! the same name, and items scanned a few tenures earlier are put back, as a point-in-time or
//! backup restore does. With a recreation grace at least the holder's lease, no contender is
//! granted the key before the holder's lease could have ended, and no fencing token repeats or
//! goes backwards across the restore. Runs on DynamoDB Local; each trial takes about two graces
//! (5 trials, 20 with `LEASE_LONG=1`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
use lease_dynamo::DynamoLeases;
use support::Wiring;

/// The holder's lease, and the grace the contender waits out (at least the lease).
const LEASE: Duration = Duration::from_millis(1500);
const GRACE: Duration = Duration::from_millis(1500);

/// Trials: 5, or 20 with `LEASE_LONG=1`.
fn trials() -> usize {
    if std::env::var("LEASE_LONG").is_ok_and(|v| v == "1") {
        20
    } else {
        5
    }
}

type Item = HashMap<String, AttributeValue>;

async fn scan(client: &Client, table: &str) -> Vec<Item> {
    client
        .scan()
        .table_name(table)
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .items()
        .to_vec()
}

/// Deletes `table`, creates it again under the same name and puts `items` back: a restore.
async fn restore(client: &Client, table: &str, items: &[Item]) {
    client
        .delete_table()
        .table_name(table)
        .send()
        .await
        .unwrap();
    DynamoLeases::new(client.clone(), table)
        .unwrap()
        .ensure_table()
        .await
        .unwrap();
    for item in items {
        client
            .put_item()
            .table_name(table)
            .set_item(Some(item.clone()))
            .send()
            .await
            .unwrap();
    }
}

fn manager(client: &Client, table: &str) -> DynamoLeases {
    DynamoLeases::builder(client.clone(), table)
        .with_recreation_grace(GRACE)
        .build()
        .unwrap()
}

/// Holder and contender are separate managers (two processes' worth of state). The holder
/// takes a few tenures, the table is snapshotted, it takes a few more and holds; the table is
/// restored from the snapshot; the contender tries until it gets the key.
#[test]
fn a_restored_table_never_yields_two_holders_nor_repeats_a_token() {
    support::run(
        "a_restored_table_never_yields_two_holders_nor_repeats_a_token",
        |endpoint| async move {
            let client = support::client(&endpoint, &Wiring::default());
            let mut overlaps = 0;
            let mut repeated = 0;
            let mut overlap_ms = Vec::new();
            let trials = trials();
            for trial in 0..trials {
                let table = support::fresh_table(&client, "restore").await;
                // Past the grace of the first creation: the table is old when the run starts.
                tokio::time::sleep(GRACE + Duration::from_millis(100)).await;
                let holder = manager(&client, &table);
                let contender = manager(&client, &table);
                let key = LeaseKey::new("job").unwrap();
                let options = AcquireOptions::default();
                let mut issued = Vec::new();
                let mut snapshot = Vec::new();
                for tenure in 0..5 {
                    let lease = holder.try_acquire(&key, LEASE, &options).await.unwrap();
                    issued.push(lease.fencing_token().get());
                    support::release(&holder, &lease).await.unwrap();
                    if tenure == 1 {
                        snapshot = scan(&client, &table).await;
                    }
                }
                let held = holder.try_acquire(&key, LEASE, &options).await.unwrap();
                issued.push(held.fencing_token().get());
                restore(&client, &table, &snapshot).await;
                let granted = loop {
                    match contender.try_acquire(&key, LEASE, &options).await {
                        Ok(lease) => break lease,
                        Err(e) if e.is_held() => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Err(e) => panic!("trial {trial}: {e}"),
                    }
                };
                let at = Instant::now();
                if at < held.deadline() {
                    overlaps += 1;
                    overlap_ms.push((held.deadline() - at).as_millis());
                }
                let token = granted.fencing_token().get();
                if issued.iter().any(|&old| token <= old) {
                    repeated += 1;
                }
                // Within the restored table, tokens keep growing.
                support::release(&contender, &granted).await.unwrap();
                let next = contender.try_acquire(&key, LEASE, &options).await.unwrap();
                assert!(next.fencing_token().get() > token, "trial {trial}");
                support::release(&contender, &next).await.unwrap();
                client
                    .delete_table()
                    .table_name(&table)
                    .send()
                    .await
                    .unwrap();
            }
            eprintln!(
                "restore: two holders in {overlaps}/{trials} trials (overlaps {overlap_ms:?} ms), \
                 a repeated or lower token in {repeated}/{trials}"
            );
            assert_eq!(overlaps, 0, "a contender held beside the holder");
            assert_eq!(repeated, 0, "a token repeated or went backwards");
        },
    );
}

/// Between an acquisition in a restored table and the raise of its fencing counter, the item
/// changes again (a second restore puts the old item back): the raise's condition fails, and the
/// acquisition reports the key held (or freed) by somebody else, which a waiting acquire tries
/// again, never a corrupt item. Found by the chaos run: `lease run` exited 65 ("refusing the
/// record") once in 30 minutes of table restores.
#[test]
fn an_item_changed_under_the_counter_raise_is_held_not_corrupt() {
    support::run(
        "an_item_changed_under_the_counter_raise_is_held_not_corrupt",
        |endpoint| async move {
            let client = support::client(&endpoint, &Wiring::default());
            let table = support::fresh_table(&client, "raise").await;
            tokio::time::sleep(GRACE + Duration::from_millis(100)).await;
            let key = LeaseKey::new("job").unwrap();
            let options = AcquireOptions::default();
            let holder = manager(&client, &table);
            let lease = holder.try_acquire(&key, LEASE, &options).await.unwrap();
            support::release(&holder, &lease).await.unwrap();
            let snapshot = scan(&client, &table).await;
            restore(&client, &table, &snapshot).await;
            // Past the restored table's grace: the next acquisition lands, reads the table,
            // and raises the restored counter (the second write of the call).
            tokio::time::sleep(GRACE + Duration::from_millis(100)).await;
            let faults = std::sync::Arc::new(support::Faults::default());
            let wiring = Wiring {
                faults: Some(faults.clone()),
                ..Wiring::default()
            };
            let acquirer = manager(&support::client(&endpoint, &wiring), &table);
            let (again, name, items) = (client.clone(), table.clone(), snapshot.clone());
            faults.before_write(
                1,
                Box::pin(async move {
                    for item in items {
                        again
                            .put_item()
                            .table_name(&name)
                            .set_item(Some(item))
                            .send()
                            .await
                            .unwrap();
                    }
                }),
            );
            let error = acquirer
                .try_acquire(&key, LEASE, &options)
                .await
                .expect_err("the item changed under the raise");
            assert!(
                error.is_held(),
                "an item changed under the raise is a key somebody else has, not {error}"
            );
            // And the key is not lost to it: the next attempt raises the counter and holds.
            let lease = acquirer.try_acquire(&key, LEASE, &options).await.unwrap();
            assert!(lease.fencing_token().get() > snapshot_token(&snapshot));
        },
    );
}

/// The fencing counter of the one item in `snapshot`.
fn snapshot_token(snapshot: &[Item]) -> u64 {
    snapshot
        .iter()
        .find_map(|item| item.get("lease_fence"))
        .and_then(|value| value.as_n().ok())
        .and_then(|n| n.parse::<u64>().ok())
        .expect("a fencing counter in the snapshot")
}

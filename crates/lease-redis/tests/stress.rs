//! Many tasks contend for four keys on a real server with real time (300 ms leases), through
//! the fault proxy (RESP) losing a reply now and then and cutting every connection twice; a checker then
//! reads every tenure: per key, each holder got its lease only after the one before stopped
//! trusting its own (released, or its deadline passed), and tokens strictly increase. A
//! read-then-write acquire, or one judging expiry by a client's clock, fails it.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};

const D: Duration = Duration::from_millis(300);
const TASKS: usize = 12;
const KEYS: usize = 4;
const RUN: Duration = Duration::from_millis(2500);

#[derive(Debug, Clone)]
struct Tenure {
    key: usize,
    fencing: u64,
    /// When the acquisition's reply arrived: the grant happened before.
    received: Instant,
    /// When the holder stopped trusting the lease: its last deadline, or when it sent its release.
    trusted_until: Instant,
}

fn jitter(seed: &mut u64, below: u64) -> u64 {
    // xorshift: a cheap per-task random stream.
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed % below
}

#[test]
fn no_two_holders_under_contention_and_faults() {
    support::run(
        "no_two_holders_under_contention_and_faults",
        |url| async move {
            let (leases, proxy, _prefix) = support::leases(&url, "stress", |b| b).await;
            let keys: Vec<LeaseKey> = (0..KEYS)
                .map(|k| LeaseKey::with_sort_key("stress", format!("k{k}")).unwrap())
                .collect();
            let tenures = Arc::new(Mutex::new(Vec::<Tenure>::new()));
            let end = Instant::now() + RUN;
            let mut tasks = Vec::new();
            for task in 0..TASKS {
                let (leases, keys, tenures, proxy) =
                    (leases.clone(), keys.clone(), tenures.clone(), proxy.clone());
                tasks.push(tokio::spawn(async move {
                    let mut seed = 0x9e37_79b9_7f4a_7c15 ^ (task as u64 + 1);
                    let once = AcquireOptions::default();
                    while Instant::now() < end {
                        let k = usize::try_from(jitter(&mut seed, KEYS as u64)).unwrap();
                        if jitter(&mut seed, 50) == 0 {
                            proxy.faults.lose_replies(1);
                        }
                        let Ok(lease) = leases.try_acquire(&keys[k], D, &once).await else {
                            tokio::time::sleep(Duration::from_millis(jitter(&mut seed, 20))).await;
                            continue;
                        };
                        let received = Instant::now();
                        let mut trusted_until = lease.deadline();
                        let mut held = lease;
                        for _ in 0..jitter(&mut seed, 3) {
                            tokio::time::sleep(Duration::from_millis(jitter(&mut seed, 60))).await;
                            match leases.renew(&held, D).await {
                                Ok(renewed) => {
                                    trusted_until = trusted_until.max(renewed.deadline());
                                    held = renewed;
                                }
                                Err(_) => break,
                            }
                        }
                        if jitter(&mut seed, 4) > 0 {
                            // A holder stops trusting its lease when it sends the release,
                            // whatever the answer: a release whose reply was lost and that
                            // landed before a successor's acquisition is honestly reported as
                            // not owned.
                            trusted_until = trusted_until.min(Instant::now());
                            let _ = leases
                                .release(held.key(), held.token(), held.fencing_token())
                                .await;
                        }
                        tenures.lock().unwrap().push(Tenure {
                            key: k,
                            fencing: held.fencing_token().get(),
                            received,
                            trusted_until,
                        });
                    }
                }));
            }
            tokio::time::sleep(RUN / 3).await;
            proxy.cut_all();
            tokio::time::sleep(RUN / 3).await;
            proxy.cut_all();
            for task in tasks {
                task.await.unwrap();
            }
            let tenures = tenures.lock().unwrap().clone();
            let mut checked = 0;
            for k in 0..KEYS {
                let mut of_key: Vec<&Tenure> = tenures.iter().filter(|t| t.key == k).collect();
                of_key.sort_by_key(|t| t.fencing);
                for pair in of_key.windows(2) {
                    let (a, b) = (pair[0], pair[1]);
                    assert!(a.fencing < b.fencing, "a repeated token: {a:?} {b:?}");
                    assert!(
                        b.received >= a.trusted_until,
                        "two holders of k{k}: {b:?} was granted while {a:?} still trusted its lease"
                    );
                    checked += 1;
                }
            }
            println!(
                "{} tenures on {KEYS} keys by {TASKS} tasks, {checked} handovers checked, {} replies lost",
                tenures.len(),
                proxy.faults.lost()
            );
            assert!(tenures.len() > 20, "the run exercised contention");
        },
    );
}

/// The production path, with no test clock: the server's `TIME` judges expiry and the grace.
/// A fresh prefix with a 600 ms grace refuses grants until the grace (by the server's clock) has
/// passed; a 300 ms lease is then taken over only after it expired by the server's clock; tokens
/// are seeded from the server's clock in µs.
#[test]
fn the_servers_clock_judges_expiry_and_the_grace() {
    support::run(
        "the_servers_clock_judges_expiry_and_the_grace",
        |url| async move {
            let grace = Duration::from_millis(600);
            let (leases, _proxy, _prefix) =
                support::leases(&url, "time", |b| b.with_recreation_grace(grace)).await;
            let key = LeaseKey::new("timed").unwrap();
            let once = AcquireOptions::default();
            let started = Instant::now();
            let refused = leases.try_acquire(&key, D, &once).await.unwrap_err();
            assert!(
                refused.is_held(),
                "a new prefix waits out the grace: {refused}"
            );
            let lease = loop {
                match leases.try_acquire(&key, D, &once).await {
                    Ok(lease) => break lease,
                    Err(e) if e.is_held() => tokio::time::sleep(Duration::from_millis(20)).await,
                    Err(e) => panic!("{e}"),
                }
            };
            assert!(
                started.elapsed() >= grace,
                "granted only after the grace: {:?}",
                started.elapsed()
            );
            let now_us = u64::try_from(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_micros(),
            )
            .unwrap();
            let token = lease.fencing_token().get();
            assert!(
                token.abs_diff(now_us) < 60_000_000,
                "the token is the server's time in µs: {token} vs {now_us}"
            );
            let granted = Instant::now();
            let next = loop {
                match leases.try_acquire(&key, D, &once).await {
                    Ok(next) => break next,
                    Err(e) if e.is_held() => tokio::time::sleep(Duration::from_millis(20)).await,
                    Err(e) => panic!("{e}"),
                }
            };
            assert!(
                granted.elapsed() >= D - Duration::from_millis(50),
                "taken over only after expiry"
            );
            assert!(next.fencing_token() > lease.fencing_token());
            assert!(leases.renew(&lease, D).await.unwrap_err().is_not_owned());
        },
    );
}

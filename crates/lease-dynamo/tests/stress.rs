//! Stress on DynamoDB Local: 32 concurrent contenders on 8 keys for thousands of acquisitions.
//! Every holder records when it trusted its lease (from the reply until its deadline or its
//! release, on the shared monotonic clock) and the fencing token; the checker proves that on
//! each key the fencing tokens strictly increase in time order and no two trusted intervals
//! overlap.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lease_core::AcquireOptions;
use lease_core::{LeaseBackend, LeaseKey};
use lease_dynamo::DynamoLeases;

const CONTENDERS: usize = 32;
const KEYS: usize = 8;
const DURATION: Duration = Duration::from_millis(400);

#[derive(Debug, Clone, Copy)]
struct Held {
    fencing: u64,
    from: Instant,
    until: Instant,
}

#[derive(Default)]
struct Tally {
    attempts: AtomicUsize,
    held_errors: AtomicUsize,
    transient: AtomicUsize,
    renewals: AtomicUsize,
    abandoned: AtomicUsize,
}

fn target() -> usize {
    std::env::var("LEASE_STRESS_ACQUISITIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

async fn contender(
    id: usize,
    leases: DynamoLeases,
    keys: Arc<Vec<LeaseKey>>,
    log: Arc<Mutex<HashMap<usize, Vec<Held>>>>,
    acquired: Arc<AtomicUsize>,
    tally: Arc<Tally>,
    goal: usize,
) {
    let mut round = id;
    while acquired.load(Ordering::Relaxed) < goal {
        round += 1;
        let k = (round * 7 + id) % KEYS;
        tally.attempts.fetch_add(1, Ordering::Relaxed);
        let lease = match leases
            .try_acquire(&keys[k], DURATION, &AcquireOptions::default())
            .await
        {
            Ok(lease) => lease,
            Err(e) if e.is_held() => {
                tally.held_errors.fetch_add(1, Ordering::Relaxed);
                // Contenders poll a held key every few milliseconds, jittered.
                let jitter = u64::from(uuid::Uuid::new_v4().as_u128() as u8 % 8);
                tokio::time::sleep(Duration::from_millis(4 + jitter)).await;
                continue;
            }
            Err(e) if e.is_transient() => {
                tally.transient.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(e) => panic!("contender {id}: {e}"),
        };
        let from = Instant::now();
        acquired.fetch_add(1, Ordering::Relaxed);
        let mut until = lease.deadline();
        let mut current = lease;
        // Work a little under the lease; sometimes renew, sometimes crash (abandon it).
        tokio::time::sleep(Duration::from_micros(200)).await;
        if round.is_multiple_of(5)
            && let Ok(renewed) = leases.renew(&current, DURATION).await
        {
            tally.renewals.fetch_add(1, Ordering::Relaxed);
            until = renewed.deadline();
            current = renewed;
        }
        if round.is_multiple_of(97) {
            tally.abandoned.fetch_add(1, Ordering::Relaxed);
        } else {
            until = until.min(Instant::now());
            // A failed release (the lease ran out meanwhile) is fine: `until` is still right.
            let _ = support::release(&leases, &current).await;
        }
        if from < until {
            log.lock().unwrap().entry(k).or_default().push(Held {
                fencing: current.fencing_token().get(),
                from,
                until,
            });
        }
    }
}

/// Per key: fencing tokens unique, and in fencing order each holder stopped trusting its lease
/// before the next one started. Returns the number of intervals checked.
fn check(log: &HashMap<usize, Vec<Held>>) -> Result<usize, String> {
    let mut intervals = 0;
    for (key, held) in log {
        let mut held = held.clone();
        held.sort_by_key(|h| h.fencing);
        intervals += held.len();
        for pair in held.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if a.fencing == b.fencing {
                return Err(format!(
                    "key {key}: fencing token {} issued twice",
                    a.fencing
                ));
            }
            if a.until > b.from {
                return Err(format!(
                    "key {key}: holder with fencing {} trusted its lease {:?} after holder {} started",
                    a.fencing,
                    a.until - b.from,
                    b.fencing
                ));
            }
        }
    }
    Ok(intervals)
}

#[test]
fn checker_catches_overlap_and_reordered_fencing() {
    let t = Instant::now();
    let ms = Duration::from_millis;
    let held = |fencing, from, until| Held {
        fencing,
        from: t + ms(from),
        until: t + ms(until),
    };
    let ok = HashMap::from([(0, vec![held(2, 10, 20), held(1, 0, 10)])]);
    assert_eq!(check(&ok), Ok(2));
    let overlap = HashMap::from([(0, vec![held(1, 0, 11), held(2, 10, 20)])]);
    assert!(check(&overlap).is_err());
    let reordered = HashMap::from([(0, vec![held(2, 0, 5), held(1, 10, 20)])]);
    assert!(
        check(&reordered).is_err(),
        "a later holder with a lower token"
    );
    let twice = HashMap::from([(0, vec![held(1, 0, 5), held(1, 10, 20)])]);
    assert!(check(&twice).is_err());
}

#[test]
fn contenders_never_overlap_and_fencing_orders_holders() {
    stress(
        "contenders_never_overlap_and_fencing_orders_holders",
        target(),
        false,
    );
}

/// The same with faults: every few milliseconds a write's reply is lost after the server applied
/// it, or a write is throttled. Reconciliation must keep every holder's view right.
#[test]
fn contenders_never_overlap_with_lost_replies_and_throttling() {
    stress(
        "contenders_never_overlap_with_lost_replies_and_throttling",
        target() / 3,
        true,
    );
}

fn stress(name: &str, goal: usize, inject: bool) {
    let Some(endpoint) = support::endpoint(name) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let faults = Arc::new(support::Faults::default());
    let (log, tally, acquired) = rt.block_on(async {
        let wiring = support::Wiring {
            counter: None,
            faults: inject.then(|| faults.clone()),
        };
        let client = support::client(&endpoint, &wiring);
        if inject {
            let faults = faults.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    faults.lose_replies(1);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    faults.throttle(1);
                }
            });
        }
        let table = support::fresh_table(&client, "stress").await;
        let leases = DynamoLeases::new(client, table).unwrap();
        let keys: Arc<Vec<LeaseKey>> = Arc::new(
            (0..KEYS)
                .map(|k| LeaseKey::new(format!("stress-{k}")).unwrap())
                .collect(),
        );
        let log = Arc::new(Mutex::new(HashMap::new()));
        let acquired = Arc::new(AtomicUsize::new(0));
        let tally = Arc::new(Tally::default());
        let tasks: Vec<_> = (0..CONTENDERS)
            .map(|id| {
                tokio::spawn(contender(
                    id,
                    leases.clone(),
                    keys.clone(),
                    log.clone(),
                    acquired.clone(),
                    tally.clone(),
                    goal,
                ))
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        (log, tally, acquired)
    });
    let elapsed = started.elapsed();
    let log = log.lock().unwrap();
    let intervals = check(&log).unwrap_or_else(|e| panic!("{e}"));
    let acquired = acquired.load(Ordering::Relaxed);
    println!(
        "{name}: {} lost replies, {} throttled",
        faults.lost(),
        faults.throttled()
    );
    println!(
        "stress: {CONTENDERS} contenders, {KEYS} keys, {acquired} acquisitions ({intervals} trusted \
         intervals checked), {} attempts, {} held, {} transient, {} renewals, {} abandoned, in \
         {elapsed:.1?} ({:.0} acquisitions/s)",
        tally.attempts.load(Ordering::Relaxed),
        tally.held_errors.load(Ordering::Relaxed),
        tally.transient.load(Ordering::Relaxed),
        tally.renewals.load(Ordering::Relaxed),
        tally.abandoned.load(Ordering::Relaxed),
        acquired as f64 / elapsed.as_secs_f64(),
    );
    assert!(acquired >= goal);
    assert!(
        intervals * 10 >= acquired * 9,
        "most holders trusted their lease"
    );
}

//! PostgreSQL lease operations against the raw tokio-postgres client sending the very same
//! statement (the floor), on the same server, in one run: median and p90 of acquire, renew and
//! release, as ratios; and a handoff to a waiter woken by `NOTIFY` (release sent to the waiter
//! holding the lease) against a bare `LISTEN`/`NOTIFY` round trip (`pg_notify` sent to the
//! listener's receipt).
//!
//! The raw statements are not copied from the source: the bench captures the text this crate
//! sends (through the tests' proxy) and the raw client sends that text with the same parameters,
//! so the two can never drift apart. Ours and raw run back to back in every round, alternating
//! which goes first.
//!
//! Writes `$LEASE_BENCH_OUT/35-lease-postgres.md` when that variable is set, and prints the same
//! section. `LEASE_BENCH_QUICK=1` (and a run without `--bench`, as `cargo test --benches` makes)
//! runs few rounds. Without `LEASE_POSTGRES_URL` it says it was skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_core::{AcquireOptions, LeaseBackend, LeaseGuard, LeaseKey, WaitOptions};
use lease_postgres::PgLeases;
use tokio_postgres::types::{ToSql, Type};

const D: Duration = Duration::from_secs(60);
const SECTION: &str = "35-lease-postgres.md";

fn main() {
    let smoke_test = !std::env::args().any(|a| a == "--bench");
    let quick = smoke_test || std::env::var("LEASE_BENCH_QUICK").is_ok_and(|v| v == "1");
    let section = match std::env::var(support::URL_ENV) {
        Ok(url) if !url.is_empty() => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(run(&url, quick))
        }
        _ => {
            eprintln!("SKIPPED: pg_lease bench: {} not set", support::URL_ENV);
            format!(
                "## lease-postgres: PostgreSQL\n\nSkipped: `{}` was not set (run `cargo xtask bench`).\n",
                support::URL_ENV
            )
        }
    };
    println!("{section}");
    if let Ok(dir) = std::env::var("LEASE_BENCH_OUT") {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(std::path::Path::new(&dir).join(SECTION), section).unwrap();
    }
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let last = samples.len().saturating_sub(1);
    // Nearest rank.
    let at = ((last as f64) * p).round() as usize;
    samples[at.min(last)]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The statement texts this crate sends, captured at the proxy: acquire, renew, release.
async fn captured(url: &str, table: &str) -> (String, String, String) {
    let proxy = support::Proxy::start(url).await;
    let leases = PgLeases::new(
        support::pool(support::config(url, Some(proxy.port()))),
        table,
    )
    .unwrap();
    let key = LeaseKey::new("capture").unwrap();
    let lease = leases
        .try_acquire(&key, D, &AcquireOptions::default())
        .await
        .unwrap();
    let lease = leases.renew(&lease, D).await.unwrap();
    leases
        .release(lease.key(), lease.token(), lease.fencing_token())
        .await
        .unwrap();
    let texts = proxy.take_statements();
    let [acquire, renew, release]: [String; 3] = texts.try_into().expect("three statements");
    (acquire, renew, release)
}

async fn run(url: &str, quick: bool) -> String {
    let rounds = if quick { 30 } else { 2000 };
    let handoffs = if quick { 8 } else { 200 };
    let table = support::fresh_table(url, "bench").await;
    let (acquire_sql, renew_sql, release_sql) = captured(url, &table).await;
    let leases = PgLeases::builder(support::pool(support::config(url, None)), &table)
        .with_listener_config(support::config(url, None))
        .build()
        .unwrap();
    let raw = support::connect(url).await;

    let ours_key = LeaseKey::with_sort_key("bench", "ours").unwrap();
    let (mut ours, mut floor) = (vec![Vec::new(); 3], vec![Vec::new(); 3]);
    let once = AcquireOptions::default();
    let d_us = i64::try_from(D.as_micros()).unwrap();
    let (zero, no_time): (i64, Option<std::time::SystemTime>) = (0, None);
    let no_text: Option<&str> = None;
    let token = "raw-floor-token-0001";
    for round in 0..rounds {
        let ours_first = round % 2 == 0;
        for side in [ours_first, !ours_first] {
            if side {
                let t = Instant::now();
                let lease = leases.try_acquire(&ours_key, D, &once).await.unwrap();
                ours[0].push(t.elapsed());
                let t = Instant::now();
                let lease = leases.renew(&lease, D).await.unwrap();
                ours[1].push(t.elapsed());
                let t = Instant::now();
                leases
                    .release(lease.key(), lease.token(), lease.fencing_token())
                    .await
                    .unwrap();
                ours[2].push(t.elapsed());
            } else {
                let (p, s) = ("bench", "raw");
                let request = uuid::Uuid::new_v4();
                let params: [(&(dyn ToSql + Sync), Type); 9] = [
                    (&p, Type::TEXT),
                    (&s, Type::TEXT),
                    (&token, Type::TEXT),
                    (&no_text, Type::TEXT),
                    (&no_text, Type::TEXT),
                    (&d_us, Type::INT8),
                    (&no_time, Type::TIMESTAMPTZ),
                    (&zero, Type::INT8),
                    (&request, Type::UUID),
                ];
                let t = Instant::now();
                let rows = raw.query_typed(&acquire_sql, &params).await.unwrap();
                floor[0].push(t.elapsed());
                let fencing: i64 = rows[0].get("won_fencing");
                let params: [(&(dyn ToSql + Sync), Type); 7] = [
                    (&p, Type::TEXT),
                    (&s, Type::TEXT),
                    (&token, Type::TEXT),
                    (&fencing, Type::INT8),
                    (&d_us, Type::INT8),
                    (&no_time, Type::TIMESTAMPTZ),
                    (&request, Type::UUID),
                ];
                let t = Instant::now();
                let rows = raw.query_typed(&renew_sql, &params).await.unwrap();
                floor[1].push(t.elapsed());
                assert!(
                    rows[0]
                        .get::<_, Option<std::time::SystemTime>>("new_expires_at")
                        .is_some()
                );
                let params: [(&(dyn ToSql + Sync), Type); 5] = [
                    (&p, Type::TEXT),
                    (&s, Type::TEXT),
                    (&token, Type::TEXT),
                    (&fencing, Type::INT8),
                    (&request, Type::UUID),
                ];
                let t = Instant::now();
                let rows = raw.query_typed(&release_sql, &params).await.unwrap();
                floor[2].push(t.elapsed());
                assert_eq!(rows[0].get::<_, i64>("done"), 1);
            }
        }
    }

    let mut out = String::new();
    let mode = if quick { "quick run, " } else { "" };
    writeln!(out, "## lease-postgres: PostgreSQL\n").unwrap();
    writeln!(
        out,
        "{mode}{rounds} rounds on one server over loopback, this crate (deadpool pool, retries, \
         reconciliation, tracing) against the raw tokio-postgres client sending the same \
         statement text with the same parameters on one connection (the floor). One round trip \
         each.\n"
    )
    .unwrap();
    writeln!(
        out,
        "| operation | ours p50 (µs) | raw p50 (µs) | ratio p50 | ours p90 (µs) | raw p90 (µs) |"
    )
    .unwrap();
    writeln!(out, "|---|---:|---:|---:|---:|---:|").unwrap();
    for (i, op) in ["acquire", "renew", "release"].iter().enumerate() {
        let (o50, r50) = (
            percentile(&mut ours[i], 0.5),
            percentile(&mut floor[i], 0.5),
        );
        let (o90, r90) = (
            percentile(&mut ours[i], 0.9),
            percentile(&mut floor[i], 0.9),
        );
        writeln!(
            out,
            "| {op} | {:.0} | {:.0} | {:.2}x | {:.0} | {:.0} |",
            us(o50),
            us(r50),
            us(o50) / us(r50),
            us(o90),
            us(r90)
        )
        .unwrap();
    }

    let (mut handoff, mut bare) = (Vec::new(), Vec::new());
    let store = Arc::new(leases.clone());
    let key = LeaseKey::new("bench-handoff").unwrap();
    for _ in 0..handoffs {
        handoff.push(one_handoff(&leases, &store, &key).await);
        bare.push(one_notify(url).await);
    }
    writeln!(
        out,
        "\nHandoff to a waiter through `NOTIFY` ({handoffs} handoffs): from the holder's release \
         call to the waiter's guard in hand (the release's round trip, the notification, the \
         waiter's acquire round trip); the waiter's backoff is 10 s, so only the notification can \
         wake it. Bare: `SELECT pg_notify(...)` sent to the notification received on a \
         listening connection.\n"
    )
    .unwrap();
    writeln!(out, "| | p50 (µs) | p90 (µs) |\n|---|---:|---:|").unwrap();
    for (name, samples) in [
        ("handoff to a waiter", &mut handoff),
        ("bare LISTEN/NOTIFY", &mut bare),
    ] {
        writeln!(
            out,
            "| {name} | {:.0} | {:.0} |",
            us(percentile(samples, 0.5)),
            us(percentile(samples, 0.9))
        )
        .unwrap();
    }
    support::drop_table(url, &table).await;
    out
}

/// One handoff: a waiter sleeps in a 10 s backoff on a held key; the holder releases.
async fn one_handoff(leases: &PgLeases, store: &Arc<PgLeases>, key: &LeaseKey) -> Duration {
    let lease = leases
        .try_acquire(key, D, &AcquireOptions::default())
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let waiter = tokio::spawn({
        let (store, key) = (store.clone(), key.clone());
        async move {
            let guard = LeaseGuard::builder(store, &key, D)
                .with_wait(
                    WaitOptions::new(Duration::from_secs(30))
                        .with_backoff(Duration::from_secs(10), Duration::from_secs(10)),
                )
                .acquire()
                .await
                .unwrap();
            let _ = tx.send(Instant::now());
            guard.release().await.unwrap();
        }
    });
    // The waiter's first attempt finds the key held; then it waits.
    tokio::time::sleep(Duration::from_millis(30)).await;
    let t = Instant::now();
    leases
        .release(lease.key(), lease.token(), lease.fencing_token())
        .await
        .unwrap();
    let got = rx.await.unwrap();
    waiter.await.unwrap();
    got.duration_since(t)
}

/// One bare notification round trip on fresh connections of its own.
async fn one_notify(url: &str) -> Duration {
    let (listener, mut connection) = support::config(url, None)
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let tokio_postgres::AsyncMessage::Notification(_) = message {
                let _ = tx.send(Instant::now());
            }
        }
    });
    listener.batch_execute("LISTEN bench_bare").await.unwrap();
    let sender = support::connect(url).await;
    let t = Instant::now();
    sender
        .query_typed("SELECT pg_notify('bench_bare', 'x')", &[])
        .await
        .unwrap();
    let got = rx.recv().await.unwrap();
    got.duration_since(t)
}

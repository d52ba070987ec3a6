//! Redis lease operations against the raw redis-rs client sending the very same script (the
//! floor), on the same server, in one run: median and p90 of acquire, renew and release, as
//! ratios; a handoff to a waiter woken by pub/sub (release sent to the waiter holding the lease)
//! against a bare `PUBLISH` round trip (sent to the subscriber's receipt); and, beside them, the
//! `SET key val NX PX ttl` lock crates.io users would otherwise pick (`rslock`, whose one-server
//! manager is the Redis docs' single-instance pattern: `SET NX PX`, a compare-and-delete
//! script), which hands out no fencing token.
//!
//! The raw commands are not copied from the source: the bench captures what this crate sends
//! (`MONITOR` on a connection of its own, while it acquires, renews and releases once) and the
//! raw client sends those very commands (`EVALSHA`, the same keys and arguments; only the
//! fencing token of renew and release is the one the raw acquire was granted), so the two can
//! never drift apart. Every side is warmed up first; ours and raw run back to back in every
//! round, alternating which goes first.
//!
//! Writes `$LEASE_BENCH_OUT/36-lease-redis.md` when that variable is set, and prints the same
//! section. `LEASE_BENCH_QUICK=1` (and a run without `--bench`, as `cargo test --benches` makes)
//! runs few rounds. Without `LEASE_REDIS_URL` it says it was skipped, unless
//! `LEASE_REQUIRE_REDIS=1`, which makes it fail.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use lease_core::{AcquireOptions, LeaseBackend, LeaseGuard, LeaseKey, WaitOptions};
use lease_redis::RedisLeases;
use redis::Value;
use redis::aio::MultiplexedConnection;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};

const D: Duration = Duration::from_secs(60);
const SECTION: &str = "36-lease-redis.md";
const URL_ENV: &str = "LEASE_REDIS_URL";

fn main() {
    let smoke_test = !std::env::args().any(|a| a == "--bench");
    let quick = smoke_test || std::env::var("LEASE_BENCH_QUICK").is_ok_and(|v| v == "1");
    let section = match std::env::var(URL_ENV) {
        Ok(url) if !url.is_empty() => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(run(&url, quick))
        }
        _ => {
            assert!(
                !std::env::var("LEASE_REQUIRE_REDIS").is_ok_and(|v| v == "1"),
                "Redis required (LEASE_REQUIRE_REDIS=1) but {URL_ENV} is not set"
            );
            eprintln!("SKIPPED: redis_lease bench: {URL_ENV} not set");
            format!(
                "## lease-redis: Redis\n\nSkipped: `{URL_ENV}` was not set (run `cargo xtask bench`).\n"
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

/// `host:port` of a `redis://host:port[/db]` URL, for the `MONITOR` socket (the bench's server
/// is a plain loopback one).
fn address(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// The arguments of one `MONITOR` line: `+<time> [<db> <client>] "ARG" "ARG" ...`, each
/// quoted as `sdscatrepr` writes it (`\"`, `\\`, `\n`, `\r`, `\t`, `\a`, `\b`, `\xHH`).
fn monitor_args(line: &str) -> Vec<Vec<u8>> {
    let Some((_, quoted)) = line.split_once("] ") else {
        return Vec::new();
    };
    let mut args = Vec::new();
    let mut bytes = quoted.bytes();
    while let Some(b) = bytes.next() {
        if b != b'"' {
            continue;
        }
        let mut arg = Vec::new();
        while let Some(b) = bytes.next() {
            match b {
                b'"' => break,
                b'\\' => match bytes.next() {
                    Some(b'n') => arg.push(b'\n'),
                    Some(b'r') => arg.push(b'\r'),
                    Some(b't') => arg.push(b'\t'),
                    Some(b'a') => arg.push(7),
                    Some(b'b') => arg.push(8),
                    Some(b'x') => {
                        let hex = [bytes.next().unwrap(), bytes.next().unwrap()];
                        let hex = std::str::from_utf8(&hex).unwrap();
                        arg.push(u8::from_str_radix(hex, 16).unwrap());
                    }
                    Some(other) => arg.push(other),
                    None => break,
                },
                other => arg.push(other),
            }
        }
        args.push(arg);
    }
    args
}

/// The commands this crate sends for an acquire, a renew and a release of a fresh key, as
/// `MONITOR` saw them: each an `EVALSHA` of the operation's script (its `ARGV[1]` names it)
/// whose keys are under `prefix`, this run's own: `MONITOR` shows every client of the server,
/// and under `cargo xtask test` other suites renew their own leases on it meanwhile (CI once
/// captured another client's renew, which this run's fencing token then could not renew).
async fn captured(url: &str, leases: &RedisLeases, prefix: &str) -> [Vec<Vec<u8>>; 3] {
    let stream = tokio::net::TcpStream::connect(address(url)).await.unwrap();
    let (read, mut write) = stream.into_split();
    let mut lines = tokio::io::BufReader::new(read).lines();
    write.write_all(b"MONITOR\r\n").await.unwrap();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("+OK"));

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

    let mut found: [Vec<Vec<u8>>; 3] = Default::default();
    let names: [&[u8]; 3] = [b"acquire", b"renew", b"release"];
    let deadline = Duration::from_secs(10);
    while found.iter().any(Vec::is_empty) {
        let line = tokio::time::timeout(deadline, lines.next_line())
            .await
            .expect("MONITOR showed the three scripts")
            .unwrap()
            .expect("MONITOR connection open");
        let args = monitor_args(&line);
        // EVALSHA sha numkeys KEYS... ARGV...: ARGV[1] is the operation's name.
        if !args
            .first()
            .is_some_and(|a| a.eq_ignore_ascii_case(b"EVALSHA"))
        {
            continue;
        }
        let keys: usize = std::str::from_utf8(&args[2]).unwrap().parse().unwrap();
        let ours = args[3..3 + keys].iter().all(|key| {
            key.windows(prefix.len())
                .any(|part| part == prefix.as_bytes())
        });
        if !ours {
            continue;
        }
        if let Some(i) = names
            .iter()
            .position(|n| args.get(3 + keys) == Some(&n.to_vec()))
        {
            found[i] = args;
        }
    }
    found
}

/// Sends one captured command; with `fencing`, its `ARGV[3]` (renew's and release's fencing
/// token) replaced.
async fn send(
    raw: &mut MultiplexedConnection,
    captured: &[Vec<u8>],
    fencing: Option<&[u8]>,
) -> Value {
    let keys: usize = std::str::from_utf8(&captured[2]).unwrap().parse().unwrap();
    let mut cmd = redis::cmd("EVALSHA");
    for (i, arg) in captured.iter().enumerate().skip(1) {
        match fencing {
            Some(fencing) if i == 3 + keys + 2 => cmd.arg(fencing),
            _ => cmd.arg(arg.as_slice()),
        };
    }
    cmd.query_async(raw).await.unwrap()
}

fn status(value: &Value) -> Vec<u8> {
    match value {
        Value::Array(items) => match items.first() {
            Some(Value::BulkString(s)) => s.clone(),
            Some(Value::SimpleString(s)) => s.clone().into_bytes(),
            other => panic!("no status in {other:?}"),
        },
        other => panic!("not an array: {other:?}"),
    }
}

/// One raw round: the captured acquire, renew and release, each timed.
async fn raw_round(raw: &mut MultiplexedConnection, commands: &[Vec<Vec<u8>>; 3]) -> [Duration; 3] {
    let t = Instant::now();
    let granted = send(raw, &commands[0], None).await;
    let acquire = t.elapsed();
    assert_eq!(status(&granted), b"granted");
    // Reply: status, now, grants_from, fencing, ...
    let Value::Array(items) = &granted else {
        unreachable!()
    };
    let Value::BulkString(fencing) = &items[3] else {
        panic!("no fencing token in {granted:?}")
    };
    let t = Instant::now();
    let renewed = send(raw, &commands[1], Some(fencing)).await;
    let renew = t.elapsed();
    assert_eq!(status(&renewed), b"renewed");
    let t = Instant::now();
    let released = send(raw, &commands[2], Some(fencing)).await;
    let release = t.elapsed();
    assert_eq!(status(&released), b"released");
    [acquire, renew, release]
}

/// One round through this crate, each operation timed.
async fn ours_round(leases: &RedisLeases, key: &LeaseKey) -> [Duration; 3] {
    let t = Instant::now();
    let lease = leases
        .try_acquire(key, D, &AcquireOptions::default())
        .await
        .unwrap();
    let acquire = t.elapsed();
    let t = Instant::now();
    let lease = leases.renew(&lease, D).await.unwrap();
    let renew = t.elapsed();
    let t = Instant::now();
    leases
        .release(lease.key(), lease.token(), lease.fencing_token())
        .await
        .unwrap();
    [acquire, renew, t.elapsed()]
}

/// One round through rslock: lock (`SET NX PX`), extend, unlock (compare-and-delete).
async fn rslock_round(locks: &rslock::LockManager, resource: &[u8]) -> [Duration; 3] {
    let t = Instant::now();
    let lock = locks.lock(resource, D).await.unwrap();
    let acquire = t.elapsed();
    let t = Instant::now();
    let lock = locks.extend(&lock, D).await.unwrap();
    let renew = t.elapsed();
    let t = Instant::now();
    locks.unlock(&lock).await;
    [acquire, renew, t.elapsed()]
}

fn table_row(out: &mut String, op: &str, ours: &mut [Duration], floor: &mut [Duration]) {
    let (o50, r50) = (percentile(ours, 0.5), percentile(floor, 0.5));
    let (o90, r90) = (percentile(ours, 0.9), percentile(floor, 0.9));
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

async fn run(url: &str, quick: bool) -> String {
    let (warmup, rounds) = if quick { (20, 60) } else { (500, 3000) };
    let handoffs = if quick { 8 } else { 200 };
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let prefix = format!("bench_{stamp}_{}", std::process::id());
    let leases = RedisLeases::builder_for_url(url, prefix.as_str())
        .unwrap()
        .build()
        .unwrap();
    let commands = captured(url, &leases, &prefix).await;
    let client = redis::Client::open(url).unwrap();
    let mut raw = client.get_multiplexed_async_connection().await.unwrap();
    let locks = rslock::LockManager::new(vec![url]);
    let ours_key = LeaseKey::with_sort_key("bench", "ours").unwrap();
    let rslock_key = format!("{prefix}:rslock").into_bytes();

    // Warm-up: connections opened, scripts loaded, caches and the allocator warm; not measured.
    for _ in 0..warmup {
        ours_round(&leases, &ours_key).await;
        raw_round(&mut raw, &commands).await;
        rslock_round(&locks, &rslock_key).await;
    }
    let (mut ours, mut floor, mut plain) = (
        vec![Vec::new(); 3],
        vec![Vec::new(); 3],
        vec![Vec::new(); 3],
    );
    for round in 0..rounds {
        // Rotates which side goes first.
        for side in 0..3 {
            let times = match (round + side) % 3 {
                0 => &mut ours,
                1 => &mut floor,
                _ => &mut plain,
            };
            let measured = match (round + side) % 3 {
                0 => ours_round(&leases, &ours_key).await,
                1 => raw_round(&mut raw, &commands).await,
                _ => rslock_round(&locks, &rslock_key).await,
            };
            for (i, d) in measured.into_iter().enumerate() {
                times[i].push(d);
            }
        }
    }

    let mut out = String::new();
    let mode = if quick { "quick run, " } else { "" };
    writeln!(out, "## lease-redis: Redis\n").unwrap();
    writeln!(
        out,
        "{mode}{rounds} rounds after {warmup} of warm-up, on one server over loopback. This \
         crate (a connection per call from its idle set, retries, reconciliation, tracing) \
         against the floor: the raw redis-rs client sending the very `EVALSHA` this crate sends \
         (captured with `MONITOR`: same script, keys and arguments) on one multiplexed \
         connection. One round trip each.\n"
    )
    .unwrap();
    writeln!(
        out,
        "| operation | ours p50 (µs) | raw p50 (µs) | ratio p50 | ours p90 (µs) | raw p90 (µs) |"
    )
    .unwrap();
    writeln!(out, "|---|---:|---:|---:|---:|---:|").unwrap();
    for (i, op) in ["acquire", "renew", "release"].iter().enumerate() {
        table_row(&mut out, op, &mut ours[i], &mut floor[i]);
    }

    writeln!(
        out,
        "\nBeside it, same server, same rounds: `rslock` 0.10 (a maintained `SET NX PX` lock on \
         this redis-rs; with one server its Redlock is the Redis docs' single-instance pattern: \
         `SET key val NX PX ttl` to lock, a compare-and-`SET PX` script to extend, a \
         compare-and-delete script to unlock). It gives no fencing token: a holder paused past its TTL cannot be \
         told from the next one, and a restart without persistence forgets the lock.\n"
    )
    .unwrap();
    writeln!(
        out,
        "| operation | ours p50 (µs) | rslock p50 (µs) | ratio p50 | ours p90 (µs) | rslock p90 (µs) |"
    )
    .unwrap();
    writeln!(out, "|---|---:|---:|---:|---:|---:|").unwrap();
    for (i, op) in ["acquire (lock)", "renew (extend)", "release (unlock)"]
        .iter()
        .enumerate()
    {
        table_row(&mut out, op, &mut ours[i], &mut plain[i]);
    }
    writeln!(
        out,
        "| fencing token | yes (never repeats, survives restarts) | none | | | |"
    )
    .unwrap();

    let (mut handoff, mut bare) = (Vec::new(), Vec::new());
    let store = Arc::new(leases.clone());
    let key = LeaseKey::new("bench-handoff").unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    let channel = format!("{prefix}:bare");
    pubsub.subscribe(&channel).await.unwrap();
    let mut messages = pubsub.on_message();
    // Warm-up: the manager's subscription open, one of each.
    for round in 0..handoffs + 2 {
        let h = one_handoff(&leases, &store, &key).await;
        let t = Instant::now();
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg("x")
            .query_async(&mut raw)
            .await
            .unwrap();
        messages.next().await.unwrap();
        let b = t.elapsed();
        if round >= 2 {
            handoff.push(h);
            bare.push(b);
        }
    }
    writeln!(
        out,
        "\nHandoff to a waiter through pub/sub ({handoffs} handoffs after 2 of warm-up): from the \
         holder's release call to the waiter's guard in hand (the release's round trip, the \
         message, the waiter's acquire round trip); the waiter's backoff is 10 s, so only the \
         message can wake it. Bare: `PUBLISH` sent (raw client) to the message received on a \
         subscribed connection.\n"
    )
    .unwrap();
    writeln!(out, "| | p50 (µs) | p90 (µs) |\n|---|---:|---:|").unwrap();
    for (name, samples) in [
        ("handoff to a waiter", &mut handoff),
        ("bare PUBLISH to message", &mut bare),
    ] {
        writeln!(
            out,
            "| {name} | {:.0} | {:.0} |",
            us(percentile(samples, 0.5)),
            us(percentile(samples, 0.9))
        )
        .unwrap();
    }
    out
}

/// One handoff: a waiter sleeps in a 10 s backoff on a held key; the holder releases.
async fn one_handoff(leases: &RedisLeases, store: &Arc<RedisLeases>, key: &LeaseKey) -> Duration {
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

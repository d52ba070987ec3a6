//! Leader observation on files, between processes: two holder processes hand leadership back
//! and forth 1,000 times (10,000 with `LEASE_LONG=1`), logging the fencing token of every
//! tenure; an observer in this process records every change its `Observer` reports. It must
//! report every tenure, in order, none twice, each with the value its holder published.
//!
//! The observer promises every tenure that lasts longer than one wake-up and one read. On a
//! loaded machine a thread may wait for a CPU for tens of milliseconds, so each holder keeps its
//! tenure for 2 ms and then until the observer has reported it; a tenure not reported within
//! 1 s fails the test. The observer polls only every 10 s: only a kernel wake-up reports a
//! tenure in time.
// Linux only: the kernel wake-ups are inotify's (macOS, FreeBSD and Windows observers poll).
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

#[path = "reexec/mod.rs"]
mod reexec;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lease_core::{
    AcquireOptions, Election, LeaderChange, LeaseBackend, LeaseGuard, LeaseKey, WaitOptions,
};
use lease_file::DirectoryStore;
use pollster::block_on;

const ENV: &str = "LEASE_FILE_OBSERVE_HOLDER";
const KEY: &str = "leader";
const HOLD: Duration = Duration::from_millis(2);
/// Far longer than the longest tenure: only a kernel wake-up reports a tenure in time.
const SLOW_POLL: Duration = Duration::from_secs(10);
/// The longest a holder waits for the observer to report its tenure.
const ACK_LIMIT: Duration = Duration::from_secs(1);

/// The holder processes: this test binary run again; does nothing here.
#[test]
fn holder_process() {
    let Some(args) = reexec::args_if_asked(ENV, "holder") else {
        return;
    };
    reexec::exit_with("holder", hold(&args));
}

/// `holder <dir> <rounds> <name> <seen>`: `rounds` times, acquire (waiting) with the value
/// `<name>-<round>`, hold for [`HOLD`] and until the file `<seen>` names a fencing token at
/// least this tenure's (failing after [`ACK_LIMIT`]), print `tenure <fencing> <value> <µs until
/// seen>`, release, and (but for the last round) wait until another holder has taken a turn.
fn hold(args: &[String]) -> Result<(), String> {
    let dir = Path::new(&args[1]);
    let rounds: u32 = args[2].parse().map_err(|e| format!("rounds: {e}"))?;
    let name = &args[3];
    let seen_file = Path::new(&args[4]);
    let store = Arc::new(DirectoryStore::open(dir).map_err(|e| e.to_string())?);
    let key = LeaseKey::new(KEY).map_err(|e| e.to_string())?;
    let duration = Duration::from_secs(10);
    for round in 0..rounds {
        let value = format!("{name}-{round}");
        let lease = LeaseGuard::builder(store.clone(), &key, duration)
            .with_wait(WaitOptions::new(Duration::from_secs(30)))
            .with_options(AcquireOptions::default().with_value(value.clone()))
            .acquire_blocking()
            .map_err(|e| e.to_string())?;
        let fencing = lease.fencing_token();
        let acquired = Instant::now();
        std::thread::sleep(HOLD);
        let seen_after = loop {
            let seen = std::fs::read_to_string(seen_file).unwrap_or_default();
            if seen.trim().parse::<u64>().is_ok_and(|s| s >= fencing.get()) {
                break acquired.elapsed();
            }
            if acquired.elapsed() > ACK_LIMIT {
                return Err(format!(
                    "tenure {} not reported within {ACK_LIMIT:?}",
                    lease.fencing_token()
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        let seen_us = seen_after.as_micros();
        println!("tenure {} {value} {seen_us}", lease.fencing_token());
        lease.release().map_err(|e| e.to_string())?;
        if round + 1 == rounds {
            break;
        }
        // Hand over: wait until the other holder's tenure starts.
        let mut watch = store.watch_record(&key);
        let started = Instant::now();
        loop {
            let record = block_on(store.inspect(&key)).map_err(|e| e.to_string())?;
            if record.is_some_and(|r| r.fencing_token() > Some(fencing)) {
                break;
            }
            if started.elapsed() > Duration::from_secs(30) {
                return Err("the other holder never took a turn".into());
            }
            match watch.as_mut() {
                Some(watch) => {
                    let tick = store.clock().sleep(Duration::from_millis(50));
                    block_on(futures_first(watch.next_change(), tick));
                }
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }
    Ok(())
}

/// Completes when either future does.
async fn futures_first(a: lease_core::BoxFuture<'_, ()>, b: lease_core::BoxFuture<'static, ()>) {
    let mut a = Some(a);
    let mut b = Some(b);
    std::future::poll_fn(move |cx| {
        let ready = a.as_mut().is_some_and(|f| f.as_mut().poll(cx).is_ready())
            || b.as_mut().is_some_and(|f| f.as_mut().poll(cx).is_ready());
        if ready {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}

#[test]
fn an_observer_sees_every_handover_between_processes_once() {
    if cfg!(feature = "portable-paths") {
        // lease-file's platforms page: the observer polls slowly and counts on inotify, which
        // the portable paths lack.
        eprintln!("SKIPPED: needs inotify, which --features portable-paths turns off");
        return;
    }
    let handovers: u32 = if std::env::var("LEASE_LONG").as_deref() == Ok("1") {
        10_000
    } else {
        1_000
    };
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn LeaseBackend> = Arc::new(DirectoryStore::open(dir.path()).unwrap());
    let key = LeaseKey::new(KEY).unwrap();
    let election =
        Election::new(store, &key, Duration::from_secs(10)).with_poll_interval(SLOW_POLL);
    let seen_dir = tempfile::tempdir().unwrap();
    let seen_file = seen_dir.path().join("seen");
    let (send, changes) = mpsc::channel();
    let mut observer = futures::executor::block_on_stream(election.observe());
    // Report the first (vacant) state before any holder starts.
    send.send((Instant::now(), observer.next().unwrap().unwrap()))
        .unwrap();
    {
        let seen_file = seen_file.clone();
        std::thread::spawn(move || {
            while let Some(Ok(change)) = observer.next() {
                if let LeaderChange::Elected(leader) = &change {
                    // Written whole by one rename: a holder never reads half of it.
                    let next = seen_file.with_extension("next");
                    let fencing = leader.fencing_token().map_or(0, |f| f.get());
                    std::fs::write(&next, fencing.to_string()).unwrap();
                    std::fs::rename(&next, &seen_file).unwrap();
                }
                if send.send((Instant::now(), change)).is_err() {
                    break;
                }
            }
        });
    }

    let started = Instant::now();
    let dir_arg = dir.path().to_str().unwrap().to_owned();
    let rounds = (handovers / 2).to_string();
    let seen_arg = seen_file.to_str().unwrap().to_owned();
    let holders: Vec<_> = ["a", "b"]
        .iter()
        .map(|name| {
            let mut child = reexec::command(
                "holder_process",
                ENV,
                &[dir_arg.as_str(), rounds.as_str(), name, seen_arg.as_str()],
            )
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
            let stdout = child.stdout.take().unwrap();
            let log = std::thread::spawn(move || {
                BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                    .filter_map(|line| {
                        // libtest may have begun the line with the test's name.
                        let rest = &line[line.find("tenure ")? + "tenure ".len()..];
                        let mut fields = rest.split(' ');
                        let fencing = fields.next()?.parse::<u64>().ok()?;
                        let value = fields.next()?.to_owned();
                        let seen_us = fields.next()?.parse::<u64>().ok()?;
                        Some((fencing, value, seen_us))
                    })
                    .collect::<Vec<_>>()
            });
            (child, log)
        })
        .collect();
    let mut logged = BTreeMap::new();
    let mut latencies = Vec::new();
    for (mut child, log) in holders {
        let status = child.wait().unwrap();
        assert!(status.success(), "a holder failed: {status}");
        for (fencing, value, seen_us) in log.join().unwrap() {
            latencies.push(seen_us);
            assert!(
                logged.insert(fencing, value).is_none(),
                "two holders logged fencing token {fencing}"
            );
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(logged.len(), handovers as usize, "every round logged");

    // Collect until the observer reports the final vacancy after the last tenure.
    let last = *logged.keys().next_back().unwrap();
    let mut reported: Vec<(u64, Option<String>)> = Vec::new();
    let mut vacancies = 0;
    let mut previous_vacant = false;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok((_, change)) = changes.recv_timeout(left) else {
            break;
        };
        match change {
            LeaderChange::Elected(leader) => {
                previous_vacant = false;
                reported.push((
                    leader.fencing_token().map_or(0, |f| f.get()),
                    leader.value().map(str::to_owned),
                ));
            }
            LeaderChange::Vacant => {
                assert!(!previous_vacant, "a vacancy reported twice in a row");
                previous_vacant = true;
                vacancies += 1;
                if reported.last().is_some_and(|(f, _)| *f == last) {
                    break;
                }
            }
            other => panic!("unexpected report {other:?}"),
        }
    }
    let tokens: Vec<u64> = reported.iter().map(|(f, _)| *f).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "reports out of order or repeated"
    );
    let missed: Vec<&u64> = logged
        .keys()
        .filter(|f| tokens.binary_search(f).is_err())
        .collect();
    assert!(
        missed.is_empty(),
        "{} of {handovers} tenures never reported (first few: {:?})",
        missed.len(),
        &missed[..missed.len().min(10)]
    );
    assert_eq!(
        reported.len(),
        logged.len(),
        "a tenure nobody logged was reported"
    );
    for (fencing, value) in &reported {
        assert_eq!(
            value.as_deref(),
            logged.get(fencing).map(String::as_str),
            "tenure {fencing} reported with another value"
        );
    }
    latencies.sort_unstable();
    let at = |q: usize| latencies[(latencies.len() - 1) * q / 100];
    eprintln!(
        "{handovers} handovers in {elapsed:?}: {} tenures and {vacancies} vacancies reported; \
         reported within {} us (median), {} us (99th percentile), {} us (most) of the acquisition",
        reported.len(),
        at(50),
        at(99),
        latencies[latencies.len() - 1],
    );
}

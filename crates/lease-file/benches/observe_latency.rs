//! How soon an election's observer learns of a change on the file store, against the raw
//! floor of a kernel wake-up measured in the same run.
//!
//! * Floor: a thread blocked reading an inotify descriptor that watches a directory; another
//!   thread renames a file in it. Latency: from just before the `rename` to the reader's
//!   return.
//! * Observer: a thread blocked on the `Observer` stream (its poll interval 10 s, so only the
//!   kernel's wake-up can report in time); another thread acquires the key with a value
//!   through a second `DirectoryStore`, then releases it. Latency: from just before the
//!   `try_acquire` (the `release`) to the observer's report of the new leader (the vacancy):
//!   the acquiring call's own work before its rename, the wake-up, and the observer's read.
//!
//! Each round measures the floor, the election and the vacancy in turn, so the three share
//! the moment's noise; the report gives medians and 99th percentiles and the ratio of the
//! medians to the floor. Target: a few milliseconds at most.
//!
//! Writes `$LEASE_BENCH_OUT/21-lease-file-observe.md` when that variable is set, prints the
//! section always; `LEASE_BENCH_QUICK=1` (and `cargo test --all-targets`, which runs this
//! without `--bench`) runs a few rounds, as a smoke test.
// Unix only: it times inotify and `flock` wake-ups, which Windows has not. Elsewhere the bench is an empty program.
#![cfg_attr(not(unix), no_main)]
#![cfg(unix)]
#![allow(clippy::unwrap_used, missing_docs)]

#[cfg(target_os = "linux")]
#[path = "../tests/raw/mod.rs"]
mod raw;

#[cfg(target_os = "linux")]
fn main() {
    linux::main();
}

/// Elsewhere observers poll (no inotify): there is no kernel wake-up to measure against.
#[cfg(not(target_os = "linux"))]
fn main() {
    println!("observe_latency: observers are woken by inotify on Linux only; elsewhere they poll");
}

/// The measurement, on inotify.
#[cfg(target_os = "linux")]
mod linux {
    use super::raw;

    use raw::Raw as _;
    use std::fmt::Write as _;
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use lease_core::{AcquireOptions, Election, LeaderChange, LeaseBackend, LeaseKey};
    use lease_file::DirectoryStore;
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    use pollster::block_on;

    pub(super) fn main() {
        let args: Vec<String> = std::env::args().collect();
        let quick = !args.iter().any(|a| a == "--bench")
            || std::env::var("LEASE_BENCH_QUICK").as_deref() == Ok("1");
        let rounds = if quick { 30 } else { 1000 };
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let (floor, elected, vacant) = measure(dir.path(), rounds);
        let md = section(rounds, &floor, &elected, &vacant);
        println!("{md}");
        if let Ok(out) = std::env::var("LEASE_BENCH_OUT") {
            std::fs::write(Path::new(&out).join("21-lease-file-observe.md"), md).unwrap();
        }
    }

    /// Per round: the raw inotify wake-up, the observer's report of a new leader, and of a
    /// vacancy, in microseconds.
    fn measure(dir: &Path, rounds: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        // The floor's watched directory and its reader.
        let raw_dir = dir.join("raw");
        std::fs::create_dir(&raw_dir).unwrap();
        std::fs::write(raw_dir.join("a"), b"x").unwrap();
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC).unwrap();
        inotify
            .add_watch(&raw_dir, AddWatchFlags::IN_MOVED_TO)
            .unwrap();
        let (woke_send, woke) = mpsc::channel();
        std::thread::spawn(move || {
            while inotify.read_events().is_ok() {
                if woke_send.send(Instant::now()).is_err() {
                    break;
                }
            }
        });

        // The election: an observer on one store, a holder on another.
        let store_dir = dir.join("store");
        let observed: Arc<dyn LeaseBackend> = Arc::new(DirectoryStore::open(&store_dir).unwrap());
        let holder = DirectoryStore::open(&store_dir).unwrap();
        let key = LeaseKey::new("leader").unwrap();
        let election = Election::new(observed, &key, Duration::from_secs(30))
            .with_poll_interval(Duration::from_secs(10));
        let mut observer = futures::executor::block_on_stream(election.observe());
        assert_eq!(observer.next().unwrap().unwrap(), LeaderChange::Vacant);
        let (report_send, reports) = mpsc::channel();
        std::thread::spawn(move || {
            while let Some(Ok(change)) = observer.next() {
                if report_send.send((Instant::now(), change)).is_err() {
                    break;
                }
            }
        });

        let settle = || std::thread::sleep(Duration::from_millis(2));
        let micros =
            |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64() * 1e6;
        let options = AcquireOptions::default().with_value("10.0.0.7:5432");
        let (mut floor, mut elected, mut vacant) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let (from, to) = if round % 2 == 0 {
                ("a", "b")
            } else {
                ("b", "a")
            };
            settle();
            let start = Instant::now();
            std::fs::rename(raw_dir.join(from), raw_dir.join(to)).unwrap();
            let woken = woke.recv_timeout(Duration::from_secs(5)).unwrap();
            floor.push(micros(start, woken));

            settle();
            let start = Instant::now();
            let lease =
                block_on(holder.try_acquire(&key, Duration::from_secs(30), &options)).unwrap();
            let (at, change) = reports.recv_timeout(Duration::from_secs(5)).unwrap();
            assert!(matches!(change, LeaderChange::Elected(_)), "{change:?}");
            elected.push(micros(start, at));

            settle();
            let start = Instant::now();
            block_on(holder.release_lease(&lease)).unwrap();
            let (at, change) = reports.recv_timeout(Duration::from_secs(5)).unwrap();
            assert_eq!(change, LeaderChange::Vacant);
            vacant.push(micros(start, at));
        }
        (floor, elected, vacant)
    }

    fn quantile(values: &[f64], q: f64) -> f64 {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let at = ((sorted.len() - 1) as f64 * q).round() as usize;
        sorted[at]
    }

    fn section(rounds: usize, floor: &[f64], elected: &[f64], vacant: &[f64]) -> String {
        let floor_median = quantile(floor, 0.5);
        let mut md = String::from("## File store: how soon an observer learns of a change\n\n");
        let _ = writeln!(
            md,
            "An election's `Observer` on the file store is woken by the kernel (inotify on the key's \
         lock directory) and then reads the record; its poll interval was 10 s, so every report \
         below came from a wake-up. {rounds} rounds, each measuring the floor (a thread blocked \
         in an inotify read, woken by a `rename` in the watched directory), then the time from \
         just before a `try_acquire` (a `release`) by another `DirectoryStore` to the observer's \
         report of the new leader (of the vacancy). Target: a few milliseconds.\n"
        );
        md.push_str("| | median | 99th percentile | median / floor |\n|---|---|---|---|\n");
        for (name, values) in [
            ("floor: raw inotify wake-up", floor),
            ("new leader reported", elected),
            ("vacancy reported", vacant),
        ] {
            let median = quantile(values, 0.5);
            let _ = writeln!(
                md,
                "| {name} | {median:.0} µs | {:.0} µs | {:.1}x |",
                quantile(values, 0.99),
                median / floor_median.max(f64::MIN_POSITIVE)
            );
        }
        md
    }
}

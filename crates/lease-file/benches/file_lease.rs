//! File lease costs as ratios to the raw floor measured in the same run.
//!
//! * uncontended acquire + release vs `open(O_CREAT|O_EXCL)` + `write` + `close` + `unlink`
//!   (the classic lock file) and vs `flock` + unlock on an open descriptor;
//! * takeover after SIGKILL of the holder vs a process blocked in `flock` on the same file;
//! * heartbeat CPU per held lease vs the CPU of one `O_EXCL` floor cycle;
//! * syscalls per operation, counted with `strace -f -c` when it is installed.
//!
//! Writes `$LEASE_BENCH_OUT/20-lease-file.md` when that variable is set, prints the section
//! always; `LEASE_BENCH_QUICK=1` runs fewer iterations.
#![allow(clippy::unwrap_used, missing_docs)]

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use lease_core::{LeaseBackendExt, LeaseKey};
use lease_file::{DirectoryStore, FileLock, FileLockOptions, LeaseFileRecord};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const PROBE: &str = env!("CARGO_BIN_EXE_lease-file-probe");

/// CPU time of this process, all threads (also exited ones), in nanoseconds.
fn cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map(|t| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(t.tv_nsec()).unwrap_or(0)
        })
        .unwrap_or(0)
}

struct Timed {
    wall_ns: f64,
    cpu_ns: f64,
}

fn time(n: u32, mut f: impl FnMut()) -> Timed {
    for _ in 0..n / 10 {
        f();
    }
    let (cpu0, start) = (cpu_ns(), Instant::now());
    for _ in 0..n {
        f();
    }
    let wall = start.elapsed().as_nanos() as f64 / f64::from(n);
    let cpu = (cpu_ns().saturating_sub(cpu0)) as f64 / f64::from(n);
    Timed {
        wall_ns: wall,
        cpu_ns: cpu,
    }
}

struct Probe {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Probe {
    fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(PROBE)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    fn expect(&self, prefix: &str) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("probe gave no `{prefix}`: {e}"));
            if line.starts_with(prefix) {
                return line;
            }
        }
    }

    fn kill9(&self) {
        kill(
            Pid::from_raw(i32::try_from(self.child.id()).unwrap()),
            Signal::SIGKILL,
        )
        .unwrap();
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Median time from SIGKILL of a holder to a waiter's acquisition, in microseconds.
fn takeover_us(trials: usize, holder: &[&str], waiter: &[&str]) -> f64 {
    let mut samples = Vec::new();
    for _ in 0..trials {
        let h = Probe::spawn(holder);
        h.expect("acquired");
        let w = Probe::spawn(waiter);
        w.expect("waiting");
        std::thread::sleep(Duration::from_millis(20));
        let killed = unix_ns();
        h.kill9();
        let line = w.expect("acquired");
        let at: u128 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
        samples.push(at.saturating_sub(killed) as f64 / 1000.0);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Syscalls per cycle of a probe command, by `strace -f -c` at two cycle counts.
fn syscalls_per_cycle(command: &str, target: &Path) -> Option<f64> {
    let count = |n: u32| -> Option<u64> {
        let out = target.with_extension(format!("strace{n}"));
        let status = Command::new("strace")
            .args(["-f", "-c", "-o"])
            .arg(&out)
            .arg(PROBE)
            .arg(command)
            .arg(target)
            .arg(n.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()?;
        if !status.success() {
            return None;
        }
        let text = std::fs::read_to_string(&out).ok()?;
        let total = text.lines().find(|l| l.trim_end().ends_with("total"))?;
        // `% time  seconds  usecs/call  calls  errors  total`
        total.split_whitespace().nth(3)?.parse().ok()
    };
    let (zero, many) = (count(0)?, count(200)?);
    Some(many.saturating_sub(zero) as f64 / 200.0)
}

fn main() {
    // `cargo test --all-targets` runs this without `--bench`: a quick smoke test then.
    let quick = !std::env::args().any(|a| a == "--bench")
        || std::env::var("LEASE_BENCH_QUICK").as_deref() == Ok("1");
    let n: u32 = if quick { 200 } else { 5000 };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // The floors.
    let excl_path = d.join("floor.excl");
    let body = LeaseFileRecord::parse(br#"{"version":1,"pid":1,"generation":1}"#)
        .unwrap()
        .to_bytes();
    let excl = time(n, || {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&excl_path)
            .unwrap();
        f.write_all(&body).unwrap();
        drop(f);
        std::fs::remove_file(&excl_path).unwrap();
    });
    let flock_file = std::fs::File::create(d.join("floor.flock")).unwrap();
    let flock = time(n, || {
        flock_file.lock().unwrap();
        flock_file.unlock().unwrap();
    });

    // Uncontended acquire + release.
    let lock = FileLock::new(d.join("bench.lease")).unwrap();
    let lock_cycle = time(n, || {
        lock.try_acquire().unwrap();
        lock.release().unwrap();
    });
    let hb_lock = FileLock::with_options(
        d.join("bench-hb.lease"),
        FileLockOptions::default().with_mode(lease_file::ModePreference::HeartbeatOnly),
    )
    .unwrap();
    let hb_cycle = time(n, || {
        hb_lock.try_acquire().unwrap();
        hb_lock.release().unwrap();
    });
    let store = DirectoryStore::open(d.join("store")).unwrap();
    let key = LeaseKey::new("bench").unwrap();
    let store_cycle = time(n, || {
        let lease = lease_core::block_on(store.acquire(&key, Duration::from_secs(30))).unwrap();
        lease_core::block_on(store.release_lease(&lease)).unwrap();
    });

    // Takeover after SIGKILL.
    let trials = if quick { 3 } else { 15 };
    let lease_path = d.join("takeover.lease");
    let lp = lease_path.to_str().unwrap();
    let takeover = takeover_us(
        trials,
        &["hold", lp, "3000", "250"],
        &["wait", lp, "3000", "250", "100", "20000"],
    );
    let raw_path = d.join("takeover.flock");
    let rp = raw_path.to_str().unwrap();
    let raw_takeover = takeover_us(trials, &["rawhold", rp], &["rawwait", rp]);

    // Heartbeat CPU per held lease: many leases heartbeating fast, CPU of the whole process.
    let leases = if quick { 5 } else { 40 };
    let hold_for = Duration::from_millis(if quick { 300 } else { 3000 });
    let interval = Duration::from_millis(10);
    let held: Vec<FileLock> = (0..leases)
        .map(|i| {
            let l = FileLock::with_options(
                d.join(format!("hb-{i}.lease")),
                FileLockOptions::default()
                    .with_heartbeat_interval(interval)
                    .with_stale_threshold(Duration::from_millis(500)),
            )
            .unwrap();
            l.try_acquire().unwrap();
            l
        })
        .collect();
    let beats_before: u64 = (0..leases)
        .map(|i| heartbeat_of(&d.join(format!("hb-{i}.lease"))))
        .sum();
    let cpu0 = cpu_ns();
    std::thread::sleep(hold_for);
    let cpu = cpu_ns().saturating_sub(cpu0);
    let beats: u64 = (0..leases)
        .map(|i| heartbeat_of(&d.join(format!("hb-{i}.lease"))))
        .sum::<u64>()
        - beats_before;
    drop(held);
    let per_beat_ns = cpu as f64 / beats.max(1) as f64;
    // At the default 250 ms interval, a held lease beats 4 times a second.
    let default_share = per_beat_ns * 4.0 / 1e9 * 100.0;

    let syscalls = if quick {
        None
    } else {
        syscalls_per_cycle("cycles", &d.join("sys.lease"))
            .zip(syscalls_per_cycle("store-cycles", &d.join("sys-store")))
    };

    let fs = nix::sys::statfs::statfs(d)
        .map(|s| {
            let kind = s.filesystem_type();
            match kind {
                nix::sys::statfs::TMPFS_MAGIC => "tmpfs".to_owned(),
                nix::sys::statfs::EXT4_SUPER_MAGIC => "ext4".to_owned(),
                nix::sys::statfs::OVERLAYFS_SUPER_MAGIC => "overlayfs".to_owned(),
                nix::sys::statfs::XFS_SUPER_MAGIC => "xfs".to_owned(),
                nix::sys::statfs::BTRFS_SUPER_MAGIC => "btrfs".to_owned(),
                other => format!("{other:?}"),
            }
        })
        .unwrap_or_else(|_| "unknown".into());
    let mut md = String::new();
    let _ = writeln!(md, "## lease-file: cross-process file leases\n");
    let _ = writeln!(
        md,
        "File system `{fs}` (temporary directory), kernel-lock mode, no fsync; {} iterations per row{}.\n",
        n,
        if quick { " (quick)" } else { "" }
    );
    let _ = writeln!(
        md,
        "| operation | wall per op | CPU per op | vs O_EXCL floor | vs flock floor |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|");
    let row = |md: &mut String, name: &str, t: &Timed| {
        let _ = writeln!(
            md,
            "| {name} | {:.1} µs | {:.1} µs | {:.2}x | {:.1}x |",
            t.wall_ns / 1e3,
            t.cpu_ns / 1e3,
            t.wall_ns / excl.wall_ns,
            t.wall_ns / flock.wall_ns
        );
    };
    row(
        &mut md,
        "floor: open(O_EXCL) + write + close + unlink",
        &excl,
    );
    row(&mut md, "floor: flock + unlock on an open fd", &flock);
    row(
        &mut md,
        "`FileLock` try_acquire + release (uncontended)",
        &lock_cycle,
    );
    row(&mut md, "`FileLock` heartbeat-only mode, same", &hb_cycle);
    row(
        &mut md,
        "`DirectoryStore` acquire + release (uncontended)",
        &store_cycle,
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| takeover after SIGKILL of the holder (median of {trials}) | time | vs floor |"
    );
    let _ = writeln!(md, "|---|---:|---:|");
    let _ = writeln!(
        md,
        "| floor: waiter blocked in flock | {raw_takeover:.0} µs | 1.0x |"
    );
    let _ = writeln!(
        md,
        "| `FileLock::acquire_timeout` (retry every 100 µs, stale threshold 3 s) | {takeover:.0} µs | {:.1}x |",
        takeover / raw_takeover
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "Heartbeat CPU: {leases} held leases beating every {interval:?} for {hold_for:?}: {beats} heartbeats, \
         {:.1} µs CPU per heartbeat ({:.1}x the CPU of one O_EXCL floor cycle); at the default 250 ms \
         interval a held lease costs {default_share:.4}% of one core.\n",
        per_beat_ns / 1e3,
        per_beat_ns / excl.cpu_ns.max(1.0)
    );
    match syscalls {
        Some((lock_calls, store_calls)) => {
            let _ = writeln!(
                md,
                "Syscalls per acquire + release (strace -f -c): `FileLock` {lock_calls:.0} (its heartbeat thread \
                 starts once per lock and parks between tenures), `DirectoryStore` {store_calls:.0}; the O_EXCL \
                 floor is 4 and the flock floor 2. Most of the gap to the floor is the two record replacements \
                 (temporary file + rename) that acquisition and release each need to keep the fencing generation.\n"
            );
        }
        None => {
            let _ = writeln!(
                md,
                "Syscalls per operation: not counted (quick run or no strace); see the `FileLock` docs.\n"
            );
        }
    }
    print!("{md}");
    if let Ok(out) = std::env::var("LEASE_BENCH_OUT") {
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(Path::new(&out).join("20-lease-file.md"), md).unwrap();
    }
}

fn heartbeat_of(path: &Path) -> u64 {
    std::fs::read(path)
        .ok()
        .and_then(|b| LeaseFileRecord::parse(&b).ok())
        .map_or(0, |r| r.heartbeat)
}

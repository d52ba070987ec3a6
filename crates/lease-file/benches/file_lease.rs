//! File lease costs as ratios to raw floors measured in the same run, on ext4 and on tmpfs.
//!
//! 1. Uncontended acquire + release, kernel mode and heartbeat-only mode, both faces
//!    ([`FileLock`], [`DirectoryStore`]), against a bare `open(O_CREAT|O_EXCL)` + `close` +
//!    `unlink` in the same directory (the floor). Every variant runs one batch per round, rounds
//!    repeat until each variant's median has settled (the warm-up), then the measured rounds
//!    give the medians; a ratio is the median of the per-round ratios, so variants measured in
//!    the same second share that second's noise. Target: kernel mode at most 2.5x the floor.
//! 2. Takeover after SIGKILL of the holder, default options: time from the SIGKILL to the
//!    waiter's acquisition for `FileLock::acquire_with`, for `DirectoryStore` through
//!    lease-core's `acquire_with`, and for the `lease run` command line tool, against a
//!    process blocked in `flock` on a plain file whose holder is SIGKILLed (the floor). Target:
//!    at most 2x the floor.
//! 3. A held lease's heartbeat cost: CPU time of the holder process over wall time while it
//!    holds, at the default 250 ms heartbeat. Target: at most 0.05 % of one core.
//! 4. Syscalls per operation (acquire, release, heartbeat, refused attempt) of both faces, from
//!    `strace -f` traces with a marker between operations, and acquire + release per cycle
//!    by `strace -f -c` as a cross-check.
//!
//! The processes are this very binary started again as a helper (`__lease_bench_helper ...`),
//! and the `lease` binary of crates/lease-cli (built by a full run with
//! `cargo build -p lease-cli --profile bench`, release optimizations with the dependencies the
//! bench run already built; a quick run uses it only if it is already next to this binary).
//!
//! Writes `$LEASE_BENCH_OUT/20-lease-file.md` when that variable is set, prints the section
//! always; `LEASE_BENCH_QUICK=1` (and `cargo test --all-targets`, which runs this without
//! `--bench`) runs a few iterations of everything, as a smoke test.
// Unix only: its floor is the raw Unix system calls (`renameat`, `flock`, `clock_gettime`), and it kills and stops real processes. Elsewhere the bench is an empty program.
#![cfg_attr(not(unix), no_main)]
#![cfg(unix)]
#![allow(clippy::unwrap_used, missing_docs)]

#[path = "../tests/raw/mod.rs"]
mod raw;

use raw::Raw as _;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
use lease_file::{DirectoryStore, FileLock, ModePreference};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// First argument that makes this binary a helper process.
const HELPER: &str = "__lease_bench_helper";
/// Path prefix of the marker `stat` calls that split a syscall trace into operations.
const MARK: &str = "/.lease-bench-mark/";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(HELPER) {
        std::process::exit(helper::run(&args[2..]));
    }
    // `cargo test --all-targets` runs this without `--bench`: a quick smoke test then.
    let quick = !args.iter().any(|a| a == "--bench")
        || std::env::var("LEASE_BENCH_QUICK").as_deref() == Ok("1");
    let cfg = Config::new(quick);
    let load_before = load_average();
    let started = Instant::now();
    let filesystems = filesystems();
    let cli = lease_cli(quick);

    let uncontended: Vec<_> = filesystems
        .iter()
        .map(|fs| uncontended(&cfg, fs.dir.path()))
        .collect();
    let takeover = takeover(&cfg, &filesystems, cli.as_deref().map_err(String::as_str));
    let heartbeat = heartbeat_cpu(&cfg, &filesystems);
    let syscalls = syscalls(&cfg, filesystems[0].dir.path());

    let md = report(&Report {
        cfg: &cfg,
        load_before,
        load_after: load_average(),
        took: started.elapsed(),
        filesystems: &filesystems,
        cli: cli.as_ref().map_err(String::as_str),
        uncontended: &uncontended,
        takeover: &takeover,
        heartbeat: &heartbeat,
        syscalls: &syscalls,
    });
    print!("{md}");
    if let Ok(out) = std::env::var("LEASE_BENCH_OUT") {
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(Path::new(&out).join("20-lease-file.md"), md).unwrap();
    }
}

/// How much of everything to run.
struct Config {
    quick: bool,
    /// Operations per timed batch.
    batch: u32,
    /// Warm-up rounds: at least, at most.
    warm_min: usize,
    warm_max: usize,
    /// Measured rounds.
    rounds: usize,
    /// Takeover trials per waiter and file system.
    trials: usize,
    /// Settling time before, and length of, the heartbeat CPU window.
    settle: Duration,
    window: Duration,
    /// Operations per syscall count.
    ops: u32,
}

impl Config {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                quick,
                batch: 20,
                warm_min: 2,
                warm_max: 3,
                rounds: 3,
                trials: 1,
                settle: Duration::from_millis(100),
                window: Duration::from_millis(300),
                ops: 5,
            }
        } else {
            Self {
                quick,
                batch: 100,
                warm_min: 10,
                warm_max: 300,
                rounds: 41,
                trials: 15,
                settle: Duration::from_secs(1),
                window: Duration::from_secs(10),
                ops: 200,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Small tools.

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn clock_ns(id: nix::time::ClockId) -> u64 {
    nix::time::clock_gettime(id)
        .map(|t| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(t.tv_nsec()).unwrap_or(0)
        })
        .unwrap_or(0)
}

/// CPU time of this process, all threads (exited ones too), in nanoseconds.
fn cpu_ns() -> u64 {
    clock_ns(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
}

fn median(values: &[f64]) -> f64 {
    quantile(values, 0.5)
}

fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo as f64)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(not(target_os = "linux"))]
fn fs_kind(path: &Path) -> String {
    nix::sys::statfs::statfs(path)
        .map(|s| s.filesystem_type_name().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(target_os = "linux")]
fn fs_kind(path: &Path) -> String {
    use nix::sys::statfs::{
        BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, OVERLAYFS_SUPER_MAGIC, TMPFS_MAGIC, XFS_SUPER_MAGIC,
        statfs,
    };
    statfs(path)
        .map(|s| match s.filesystem_type() {
            TMPFS_MAGIC => "tmpfs".to_owned(),
            EXT4_SUPER_MAGIC => "ext4".to_owned(),
            OVERLAYFS_SUPER_MAGIC => "overlayfs".to_owned(),
            XFS_SUPER_MAGIC => "xfs".to_owned(),
            BTRFS_SUPER_MAGIC => "btrfs".to_owned(),
            other => format!("{other:?}"),
        })
        .unwrap_or_else(|_| "unknown".into())
}

/// A file system to measure on: a fresh temporary directory in it.
struct Fs {
    kind: String,
    dir: tempfile::TempDir,
}

/// The crate's target directory (ext4 here) and `/dev/shm` (tmpfs), when present.
fn filesystems() -> Vec<Fs> {
    let mut found = Vec::new();
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(target).unwrap();
    for base in [target, Path::new("/dev/shm")] {
        if base.is_dir()
            && let Ok(dir) = tempfile::Builder::new()
                .prefix("lease-file-bench-")
                .tempdir_in(base)
        {
            found.push(Fs {
                kind: format!("{} ({})", fs_kind(dir.path()), base.display()),
                dir,
            });
        }
    }
    found
}

/// The `lease` binary: built (a full run) or found next to this binary (any run).
fn lease_cli(quick: bool) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // target/<profile>/deps/file_lease-<hash>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("no target directory")?;
    if !quick {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_owned());
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        // The bench profile (release optimizations, written to target/release): a bench run has
        // already built every dependency with it, so only lease-cli itself is compiled here; a
        // `--release` build would compile the AWS SDK again.
        let status = Command::new(cargo)
            .args(["build", "--quiet", "-p", "lease-cli", "--profile", "bench"])
            .current_dir(&workspace)
            .status()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if !status.success() {
            return Err(format!(
                "cargo build -p lease-cli --profile bench: {status}"
            ));
        }
        let built = profile_dir.parent().ok_or("no target directory")?;
        let lease = built.join("release/lease");
        return if lease.is_file() {
            Ok(lease)
        } else {
            Err(format!("{} not built", lease.display()))
        };
    }
    let lease = profile_dir.join("lease");
    if lease.is_file() {
        Ok(lease)
    } else {
        Err(format!(
            "{} not built (quick run; `cargo build -p lease-cli` first)",
            lease.display()
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Uncontended acquire + release.

fn variant<'a>(name: &'static str, op: Box<dyn FnMut() + 'a>) -> Variant<'a> {
    Variant {
        name,
        op,
        wall: Vec::new(),
        cpu: Vec::new(),
    }
}

struct Variant<'a> {
    name: &'static str,
    op: Box<dyn FnMut() + 'a>,
    /// Wall and CPU nanoseconds per operation, one per round.
    wall: Vec<f64>,
    cpu: Vec<f64>,
}

impl Variant<'_> {
    fn batch(&mut self, n: u32) {
        let (cpu0, start) = (cpu_ns(), Instant::now());
        for _ in 0..n {
            (self.op)();
        }
        self.wall
            .push(start.elapsed().as_nanos() as f64 / f64::from(n));
        self.cpu
            .push(cpu_ns().saturating_sub(cpu0) as f64 / f64::from(n));
    }

    /// Whether the median of the last five batches is within 5 % of the five before.
    fn settled(&self) -> bool {
        let n = self.wall.len();
        n >= 10 && {
            let (a, b) = (
                median(&self.wall[n - 5..]),
                median(&self.wall[n - 10..n - 5]),
            );
            (a - b).abs() <= 0.05 * b
        }
    }
}

/// One row of the uncontended table.
struct Row {
    name: &'static str,
    wall: f64,
    cpu: f64,
    /// Median and quartiles of the per-round ratio to the floor.
    ratio: (f64, f64, f64),
}

struct Uncontended {
    rows: Vec<Row>,
    warm_rounds: usize,
    settled: bool,
}

fn uncontended(cfg: &Config, d: &Path) -> Uncontended {
    let excl_path = d.join("floor.excl");
    let lock = FileLock::new(d.join("lock-kernel")).unwrap();
    let hb_lock = FileLock::builder(d.join("lock-heartbeat-only"))
        .with_mode(ModePreference::HeartbeatOnly)
        .build()
        .unwrap();
    let store = DirectoryStore::open(d).unwrap();
    let hb_store = DirectoryStore::builder(d)
        .with_mode(ModePreference::HeartbeatOnly)
        .build()
        .unwrap();
    let (key, hb_key) = (
        LeaseKey::new("store-kernel").unwrap(),
        LeaseKey::new("store-heartbeat-only").unwrap(),
    );
    let ttl = Duration::from_secs(30);
    let store_cycle = |store: &DirectoryStore, key: &LeaseKey| {
        let lease =
            pollster::block_on(store.try_acquire(key, ttl, &AcquireOptions::default())).unwrap();
        pollster::block_on(store.release_lease(&lease)).unwrap();
    };
    let mut variants = vec![
        variant(
            "floor: `open(O_CREAT|O_EXCL)` + `close` + `unlink`",
            Box::new(|| {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&excl_path)
                    .unwrap();
                drop(f);
                std::fs::remove_file(&excl_path).unwrap();
            }),
        ),
        variant(
            "`FileLock` try_acquire + release, kernel mode",
            Box::new(|| {
                lock.try_acquire().unwrap().release().unwrap();
            }),
        ),
        variant(
            "`DirectoryStore` acquire + release, kernel mode",
            Box::new(|| store_cycle(&store, &key)),
        ),
        variant(
            "`FileLock`, heartbeat-only mode",
            Box::new(|| {
                hb_lock.try_acquire().unwrap().release().unwrap();
            }),
        ),
        variant(
            "`DirectoryStore`, heartbeat-only mode",
            Box::new(|| store_cycle(&hb_store, &hb_key)),
        ),
    ];
    let count = variants.len();
    let mut round = 0;
    let run_round = |variants: &mut Vec<Variant<'_>>, round: usize| {
        // Rotate the order so that no variant always runs right after another.
        for i in 0..count {
            variants[(i + round) % count].batch(cfg.batch);
        }
    };
    // Warm-up: until every variant's median settles.
    let settled = loop {
        run_round(&mut variants, round);
        round += 1;
        let settled = variants.iter().all(Variant::settled);
        if (round >= cfg.warm_min && settled) || round >= cfg.warm_max {
            break settled;
        }
    };
    let warm_rounds = round;
    for v in &mut variants {
        v.wall.clear();
        v.cpu.clear();
    }
    for _ in 0..cfg.rounds {
        run_round(&mut variants, round);
        round += 1;
    }
    let floor = variants[0].wall.clone();
    let rows = variants
        .iter()
        .map(|v| {
            let ratios: Vec<f64> = v.wall.iter().zip(&floor).map(|(a, b)| a / b).collect();
            Row {
                name: v.name,
                wall: median(&v.wall),
                cpu: median(&v.cpu),
                ratio: (
                    median(&ratios),
                    quantile(&ratios, 0.25),
                    quantile(&ratios, 0.75),
                ),
            }
        })
        .collect();
    Uncontended {
        rows,
        warm_rounds,
        settled,
    }
}

// ---------------------------------------------------------------------------------------------
// Processes.

/// A helper or `lease` process, its output lines (stdout and stderr) each with the wall time
/// they arrived at.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    fn helper(args: &[&str]) -> Self {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command.arg(HELPER).args(args);
        Self::spawn(command)
    }

    fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        for reader in [
            Box::new(out) as Box<dyn std::io::Read + Send>,
            Box::new(err) as Box<dyn std::io::Read + Send>,
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(reader).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    /// The first line containing `needle`.
    fn expect(&self, needle: &str) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("no line with `{needle}` came: {e}"));
            if line.contains(needle) {
                return line;
            }
        }
    }

    fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).unwrap())
    }

    /// Closes stdin (a helper then releases and exits) and waits for the process.
    fn finish(mut self) {
        self.stdin = None;
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Takeover after SIGKILL.

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Waiter {
    Floor,
    /// Diagnostic: the floor's `flock` made by a helper thread that hands the file to the main
    /// thread, as any wait with a timeout must (a blocked `flock` cannot time out): what that
    /// second wakeup costs.
    FloorHandedOver,
    Lock,
    Store,
    Cli,
    /// Diagnostic: `lease run` holding, a process blocked in `flock` on the lock directory
    /// waiting. Its gap to the floor is what the holder's side costs: the guard must kill the
    /// command, which inherited the kernel lock, before the kernel lets it go.
    CliHolderOnly,
}

impl Waiter {
    fn label(self) -> &'static str {
        match self {
            Self::Floor => "floor: a process blocked in `flock` on a plain file",
            Self::FloorHandedOver => {
                "(diagnostic) the same `flock` in a helper thread, handed to the main thread"
            }
            Self::Lock => "`FileLock::acquire_with`",
            Self::Store => "`DirectoryStore` + lease-core `acquire_with`",
            Self::Cli => "`lease run --file` (lease-cli, optimized build)",
            Self::CliHolderOnly => {
                "(diagnostic) `lease run` holder, waiter blocked in `flock` on its lock directory"
            }
        }
    }
}

/// Median microseconds from SIGKILL to acquisition, per file system and waiter.
type Takeover = Vec<BTreeMap<Waiter, Vec<f64>>>;

fn takeover(cfg: &Config, filesystems: &[Fs], cli: Result<&Path, &str>) -> Takeover {
    let mut waiters = vec![
        Waiter::Floor,
        Waiter::FloorHandedOver,
        Waiter::Lock,
        Waiter::Store,
    ];
    if cli.is_ok() {
        waiters.extend([Waiter::Cli, Waiter::CliHolderOnly]);
    }
    let mut results: Takeover = filesystems.iter().map(|_| BTreeMap::new()).collect();
    for trial in 0..cfg.trials {
        for (fs, result) in filesystems.iter().zip(&mut results) {
            for i in 0..waiters.len() {
                let waiter = waiters[(i + trial) % waiters.len()];
                let us = takeover_once(cfg, waiter, fs.dir.path(), cli.ok());
                result.entry(waiter).or_default().push(us);
            }
        }
    }
    results
}

/// One trial: start a holder and a waiter, SIGKILL the holder, time the waiter's acquisition.
fn takeover_once(cfg: &Config, waiter: Waiter, d: &Path, cli: Option<&Path>) -> f64 {
    let settle = Duration::from_millis(if cfg.quick { 50 } else { 150 });
    let plain = d.join("takeover.flock");
    let lock = d.join("takeover.lock");
    let store = d.join("takeover-store");
    let cli_dir = d.join("takeover-cli");
    let (p, l, s) = (
        plain.to_str().unwrap(),
        lock.to_str().unwrap(),
        store.to_str().unwrap(),
    );
    let lease_run = |args: &[&str]| {
        let mut command = Command::new(cli.unwrap());
        command
            .args(["run", "--file"])
            .arg(&cli_dir)
            .args(["--key", "takeover", "--wait", "1m", "--"])
            .arg(std::env::current_exe().unwrap())
            .arg(HELPER)
            .args(args)
            .env("LEASE_LOG", "info");
        Proc::spawn(command)
    };
    let (holder, w) = match waiter {
        Waiter::Floor => {
            let h = Proc::helper(&["raw-hold", p]);
            h.expect("acquired");
            let w = Proc::helper(&["raw-wait", p]);
            (h, w)
        }
        Waiter::FloorHandedOver => {
            let h = Proc::helper(&["raw-hold", p]);
            h.expect("acquired");
            let w = Proc::helper(&["raw-wait-thread", p]);
            (h, w)
        }
        Waiter::Lock => {
            let h = Proc::helper(&["hold-lock", l, "kernel"]);
            h.expect("acquired");
            (h, Proc::helper(&["wait-lock", l]))
        }
        Waiter::Store => {
            let h = Proc::helper(&["hold-store", s, "kernel", "0"]);
            h.expect("acquired");
            (h, Proc::helper(&["wait-store", s]))
        }
        Waiter::Cli => {
            // The command inherits the lease's kernel lock: wait until it runs.
            let h = lease_run(&["sleeper"]);
            h.expect("running");
            (h, lease_run(&["exit"]))
        }
        Waiter::CliHolderOnly => {
            let h = lease_run(&["sleeper"]);
            h.expect("running");
            // The store names key `takeover`'s lock directory `takeover.lease`.
            let lock_dir = cli_dir.join("takeover.lease");
            (
                h,
                Proc::helper(&["raw-wait-dir", lock_dir.to_str().unwrap()]),
            )
        }
    };
    w.expect("waiting");
    std::thread::sleep(settle);
    let killed = unix_ns();
    kill(holder.pid(), Signal::SIGKILL).unwrap();
    let at = if waiter == Waiter::Cli {
        // `LEASE_LOG=info`: `2026-11-23T05:41:47.123456Z  INFO lease acquired ...`, stamped
        // by `lease` itself when the acquisition returned.
        let line = w.expect("lease acquired");
        let of_day = time_of_day_ns(&line).unwrap_or_else(|| panic!("no time in {line:?}"));
        let day = 86_400 * 1_000_000_000u128;
        killed - killed % day + of_day + if of_day < killed % day { day } else { 0 }
    } else {
        let line = w.expect("acquired");
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    drop(holder);
    w.finish();
    at.saturating_sub(killed) as f64 / 1000.0
}

/// Nanoseconds since midnight UTC of a `YYYY-MM-DDTHH:MM:SS.fffZ` timestamp at a line's start.
fn time_of_day_ns(line: &str) -> Option<u128> {
    let stamp = line.split_whitespace().next()?;
    let time = stamp.split_once('T')?.1.trim_end_matches('Z');
    let mut parts = time.split(':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    let (whole, frac) = s.split_once('.').unwrap_or((s, "0"));
    let mut frac_ns: String = frac.chars().take(9).collect();
    while frac_ns.len() < 9 {
        frac_ns.push('0');
    }
    let secs = h.parse::<u128>().ok()? * 3600
        + m.parse::<u128>().ok()? * 60
        + whole.parse::<u128>().ok()?;
    Some(secs * 1_000_000_000 + frac_ns.parse::<u128>().ok()?)
}

// ---------------------------------------------------------------------------------------------
// 3. Heartbeat CPU of a held lease.

struct Cpu {
    holder: String,
    fs: String,
    share_pct: f64,
    beats_per_s: f64,
    cpu_per_beat_us: f64,
}

/// The renewal counter in a lock directory's state entry name (`held.<gen>.<seq>....`).
fn renewals(lock_dir: &Path) -> u64 {
    std::fs::read_dir(lock_dir)
        .into_iter()
        .flatten()
        .flatten()
        .find_map(|e| {
            let name = e.file_name().into_string().ok()?;
            if let Some(n) = name.strip_prefix("tick.") {
                return n.parse().ok();
            }
            name.strip_prefix("held.")?.split('.').nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

fn heartbeat_cpu(cfg: &Config, filesystems: &[Fs]) -> Vec<Cpu> {
    // (label, file system, helper arguments, lock directory)
    let mut holders: Vec<(String, String, Vec<String>, Option<PathBuf>)> = vec![
        (
            "baseline: an idle helper process holding nothing".into(),
            "-".into(),
            vec!["idle".into()],
            None,
        ),
        (
            "floor: a thread waking every 250 ms, doing nothing".into(),
            "-".into(),
            vec!["ticker".into()],
            None,
        ),
    ];
    for fs in filesystems {
        let d = fs.dir.path();
        let lock = d.join("cpu.lock");
        let hb = d.join("cpu-hb.lock");
        let store = d.join("cpu-store");
        // The store names key `held`'s lock directory `held.lease`.
        DirectoryStore::open(&store).unwrap();
        let store_key = store.join("held.lease");
        let arg = |p: &Path| p.to_str().unwrap().to_owned();
        for (label, args, dir) in [
            (
                "floor: a thread waking every 250 ms to rename one file",
                vec!["ticker".into(), arg(&d.join("ticker"))],
                d.join("ticker"),
            ),
            (
                "`FileLock`, kernel mode, default options (heartbeat every 250 ms)",
                vec!["hold-lock".into(), arg(&lock), "kernel".into()],
                lock.clone(),
            ),
            (
                "`FileLock`, heartbeat-only mode, default options",
                vec!["hold-lock".into(), arg(&hb), "heartbeat-only".into()],
                hb.clone(),
            ),
            (
                "`DirectoryStore` + a blocking `LeaseGuard` renewing every 250 ms (30 s lease)",
                vec![
                    "hold-store".into(),
                    arg(&store),
                    "kernel".into(),
                    "250".into(),
                ],
                store_key,
            ),
        ] {
            holders.push((label.into(), fs.kind.clone(), args, Some(dir)));
        }
    }
    // One holder at a time: holders beating together share warm caches, and the first to wake
    // would pay for the others.
    holders
        .into_iter()
        .map(|(label, fs, args, dir)| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut p = Proc::helper(&args);
            p.expect("acquired");
            std::thread::sleep(cfg.settle);
            let mut sample = || {
                p.say("cpu");
                let line = p.expect("cpu ");
                let mut fields = line.split_whitespace().skip(1);
                let cpu: u64 = fields.next().unwrap().parse().unwrap();
                let mono: u64 = fields.next().unwrap().parse().unwrap();
                (cpu, mono, dir.as_deref().map_or(0, renewals))
            };
            let before = sample();
            std::thread::sleep(cfg.window);
            let after = sample();
            p.finish();
            let cpu = after.0.saturating_sub(before.0) as f64;
            let wall = after.1.saturating_sub(before.1) as f64;
            let beats = after.2.saturating_sub(before.2) as f64;
            Cpu {
                holder: label,
                fs,
                share_pct: cpu / wall * 100.0,
                beats_per_s: beats / (wall / 1e9),
                cpu_per_beat_us: if beats > 0.0 {
                    cpu / beats / 1e3
                } else {
                    f64::NAN
                },
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// 4. Syscalls per operation.

/// Syscalls per operation of one face and mode: operation -> (total, by syscall name).
type Counts = BTreeMap<String, (f64, BTreeMap<String, f64>)>;

struct Syscalls {
    /// (face and mode, counts) from marked `strace -f` traces.
    traced: Vec<(String, Counts)>,
    /// (face, acquire + release per cycle by `strace -f -c`).
    counted: Vec<(String, f64)>,
    missing: Option<String>,
}

fn syscalls(cfg: &Config, d: &Path) -> Syscalls {
    let mut result = Syscalls {
        traced: Vec::new(),
        counted: Vec::new(),
        missing: None,
    };
    if Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        result.missing = Some("strace is not installed".into());
        return result;
    }
    let exe = std::env::current_exe().unwrap();
    let n = cfg.ops.to_string();
    for (face, mode) in [
        ("lock", "kernel"),
        ("store", "kernel"),
        ("lock", "heartbeat-only"),
        ("store", "heartbeat-only"),
    ] {
        let work = d.join(format!("sys-{face}-{mode}"));
        let trace = d.join(format!("sys-{face}-{mode}.trace"));
        let out = Command::new("strace")
            .args(["-f", "-qq", "-o"])
            .arg(&trace)
            .arg(&exe)
            .args([HELPER, "syscalls", face, mode])
            .arg(&work)
            .arg(&n)
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "strace of the {face} {mode} helper failed"
        );
        let beats: f64 = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("beats ")?.trim().parse().ok())
            .unwrap_or(0.0);
        let text = std::fs::read_to_string(&trace).unwrap();
        let face_name = if face == "lock" {
            "`FileLock`"
        } else {
            "`DirectoryStore`"
        };
        result.traced.push((
            format!("{face_name}, {mode}"),
            per_operation(&text, f64::from(cfg.ops), beats),
        ));
    }
    for face in ["lock", "store"] {
        let count = |n: u32| -> Option<u64> {
            let out = d.join(format!("sys-{face}-{n}.count"));
            let status = Command::new("strace")
                .args(["-f", "-c", "-o"])
                .arg(&out)
                .arg(&exe)
                .args([HELPER, "cycles", face])
                .arg(d.join(format!("cycles-{face}-{n}")))
                .arg(n.to_string())
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
        if let (Some(zero), Some(many)) = (count(0), count(cfg.ops)) {
            let face_name = if face == "lock" {
                "`FileLock`"
            } else {
                "`DirectoryStore`"
            };
            result.counted.push((
                face_name.into(),
                many.saturating_sub(zero) as f64 / f64::from(cfg.ops),
            ));
        }
    }
    result
}

/// Splits a `strace -f` trace at the marker calls and counts the syscalls of each operation.
/// The heartbeat window counts the other threads only (the marking thread sleeps), per beat.
fn per_operation(text: &str, ops: f64, beats: f64) -> Counts {
    let mut phase: Option<(String, String)> = None; // (operation, marking thread)
    let mut counts: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for line in text.lines() {
        let Some((tid, call)) = line.split_once(' ') else {
            continue;
        };
        let call = call.trim_start();
        if call.starts_with("<...") || call.starts_with("+++") || call.starts_with("---") {
            continue;
        }
        let Some((name, _)) = call.split_once('(') else {
            continue;
        };
        if let Some(at) = call.find(MARK) {
            let op: String = call[at + MARK.len()..]
                .chars()
                .take_while(|c| *c != '"')
                .collect();
            phase = (op != "idle").then(|| (op, tid.to_owned()));
            continue;
        }
        let Some((op, marker)) = &phase else {
            continue;
        };
        if op == "heartbeat-window" && tid == marker {
            continue;
        }
        *counts
            .entry(op.clone())
            .or_default()
            .entry(name.to_owned())
            .or_default() += 1.0;
    }
    counts
        .into_iter()
        .map(|(op, by_name)| {
            let (op, per) = if op == "heartbeat-window" {
                ("heartbeat".to_owned(), beats.max(1.0))
            } else {
                (op, ops)
            };
            let by_name: BTreeMap<String, f64> =
                by_name.into_iter().map(|(k, v)| (k, v / per)).collect();
            (op, (by_name.values().sum(), by_name))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The report.

struct Report<'a> {
    cfg: &'a Config,
    load_before: String,
    load_after: String,
    took: Duration,
    filesystems: &'a [Fs],
    cli: Result<&'a PathBuf, &'a str>,
    uncontended: &'a [Uncontended],
    takeover: &'a Takeover,
    heartbeat: &'a [Cpu],
    syscalls: &'a Syscalls,
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "**missed**" }
}

fn report(r: &Report<'_>) -> String {
    let cfg = r.cfg;
    let mut md = String::new();
    let _ = writeln!(md, "## lease-file: cross-process file leases\n");
    let _ = writeln!(
        md,
        "{} run: load average `{}` at the start, `{}` at the end ({} cores, {:.0} s). Ratios are \
         to a floor measured in the same run.{}\n",
        if cfg.quick {
            "Quick (smoke test)"
        } else {
            "Full"
        },
        r.load_before,
        r.load_after,
        std::thread::available_parallelism().map_or(0, usize::from),
        r.took.as_secs_f64(),
        if cfg.quick {
            " Quick figures are not measurements."
        } else {
            ""
        }
    );

    // 1.
    let _ = writeln!(
        md,
        "### Uncontended acquire + release\n\nMedian per operation (wall; CPU of the whole \
         process) over {} rounds of {} operations, after warm-up rounds until every median \
         settled within 5 %; ratio = median of the per-round ratios to the floor [quartiles]. \
         No fsync. Target: kernel mode at most 2.5x the floor.\n",
        cfg.rounds, cfg.batch
    );
    let mut head = "| operation |".to_owned();
    let mut rule = "|---|".to_owned();
    for (fs, u) in r.filesystems.iter().zip(r.uncontended) {
        let _ = write!(
            head,
            " {} (warm-up {} rounds{}) | vs floor |",
            fs.kind,
            u.warm_rounds,
            if u.settled { "" } else { ", not settled" }
        );
        rule.push_str("---:|---:|");
    }
    let _ = writeln!(md, "{head}\n{rule}");
    for i in 0..r.uncontended.first().map_or(0, |u| u.rows.len()) {
        let _ = write!(md, "| {} |", r.uncontended[0].rows[i].name);
        for u in r.uncontended {
            let row = &u.rows[i];
            let _ = write!(
                md,
                " {:.1} µs (CPU {:.1}) | {:.2}x [{:.2}-{:.2}] |",
                row.wall / 1e3,
                row.cpu / 1e3,
                row.ratio.0,
                row.ratio.1,
                row.ratio.2
            );
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(md);
    for (fs, u) in r.filesystems.iter().zip(r.uncontended) {
        let _ = writeln!(
            md,
            "- {}: kernel-mode target (2.5x) for `FileLock` {} ({:.2}x), for `DirectoryStore` {} \
             ({:.2}x).",
            fs.kind,
            verdict(u.rows[1].ratio.0 <= 2.5),
            u.rows[1].ratio.0,
            verdict(u.rows[2].ratio.0 <= 2.5),
            u.rows[2].ratio.0
        );
    }
    let _ = writeln!(md);

    // 2.
    let _ = writeln!(
        md,
        "### Takeover after SIGKILL of the holder\n\nTime from the SIGKILL to the waiter's \
         acquisition (stamped by the waiter), median of {} trials per waiter, waiters \
         interleaved; default options (`FileLock`: retry delay 20 ms, stale threshold 3 s; \
         `acquire_with`: backoff 25 ms to 1 s, 30 s lease; `lease run`: its defaults, \
         the holder's command inheriting the kernel lock). Target: at most 2x the floor.\n",
        cfg.trials
    );
    if let Err(why) = r.cli {
        let _ = writeln!(md, "`lease run` not measured: {why}.\n");
    }
    let mut head = "| waiter |".to_owned();
    let mut rule = "|---|".to_owned();
    for fs in r.filesystems {
        let _ = write!(head, " {} | vs floor |", fs.kind);
        rule.push_str("---:|---:|");
    }
    let _ = writeln!(md, "{head}\n{rule}");
    let waiters: Vec<Waiter> = r
        .takeover
        .first()
        .map(|m| m.keys().copied().collect())
        .unwrap_or_default();
    for waiter in &waiters {
        let _ = write!(md, "| {} |", waiter.label());
        for per_fs in r.takeover {
            let us = median(&per_fs[waiter]);
            let floor = median(&per_fs[&Waiter::Floor]);
            let _ = write!(
                md,
                " {us:.0} µs [{:.0}-{:.0}] | {:.1}x |",
                quantile(&per_fs[waiter], 0.25),
                quantile(&per_fs[waiter], 0.75),
                us / floor
            );
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(md);
    for (fs, per_fs) in r.filesystems.iter().zip(r.takeover) {
        let floor = median(&per_fs[&Waiter::Floor]);
        let verdicts: Vec<String> = waiters
            .iter()
            .filter(|w| {
                !matches!(
                    w,
                    Waiter::Floor | Waiter::FloorHandedOver | Waiter::CliHolderOnly
                )
            })
            .map(|w| {
                let ratio = median(&per_fs[w]) / floor;
                format!("{} {} ({ratio:.1}x)", w.label(), verdict(ratio <= 2.0))
            })
            .collect();
        let _ = writeln!(md, "- {}: target (2x): {}.", fs.kind, verdicts.join("; "));
    }
    let _ = writeln!(md);

    // 3.
    let _ = writeln!(
        md,
        "### Heartbeat cost of a held lease\n\nCPU time of the holder process (all threads) \
         over wall time, over {:?} after {:?} of holding; one holder at a time. Target: \
         `FileLock` in kernel mode at most 0.05 % of one core.\n",
        cfg.window, cfg.settle
    );
    let _ = writeln!(
        md,
        "| holder | file system | renewals/s | CPU per renewal | share of one core | vs rename floor |\n|---|---|---:|---:|---:|---:|"
    );
    let rename_floor = |fs: &str| {
        r.heartbeat
            .iter()
            .find(|c| c.fs == fs && c.holder.contains("to rename one file"))
            .map(|c| c.share_pct)
    };
    for c in r.heartbeat {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} | {} | {:.4} % | {} |",
            c.holder,
            c.fs,
            c.beats_per_s,
            if c.cpu_per_beat_us.is_nan() {
                "-".to_owned()
            } else {
                format!("{:.0} µs", c.cpu_per_beat_us)
            },
            c.share_pct,
            rename_floor(&c.fs).map_or("-".to_owned(), |f| format!("{:.2}x", c.share_pct / f))
        );
    }
    let target: Vec<String> = r
        .heartbeat
        .iter()
        .filter(|c| c.holder.starts_with("`FileLock`, kernel"))
        .map(|c| {
            format!(
                "{} {} ({:.4} %)",
                c.fs,
                verdict(c.share_pct <= 0.05),
                c.share_pct
            )
        })
        .collect();
    let _ = writeln!(md, "\n- target (0.05 %): {}.\n", target.join("; "));

    // 4.
    let s = r.syscalls;
    let _ = writeln!(md, "### Syscalls per operation\n");
    if let Some(why) = &s.missing {
        let _ = writeln!(md, "Not counted: {why}.\n");
        return md;
    }
    let _ = writeln!(
        md,
        "From `strace -f` traces of a helper process ({} operations each, after one warm-up \
         cycle; {}), split at marker calls; a heartbeat is `FileLock`'s thread (interval 2 ms, \
         counted per renewal) or one `DirectoryStore::renew`; refused = an attempt on a lease \
         another holder holds. The floor is `openat(O_CREAT|O_EXCL)`, `close`, `unlink`: 3.\n",
        cfg.ops, r.filesystems[0].kind
    );
    let ops = ["acquire", "release", "heartbeat", "refused"];
    let _ = writeln!(
        md,
        "| face, mode | {} |\n|---|{}",
        ops.join(" | "),
        "---:|".repeat(ops.len())
    );
    for (label, counts) in &s.traced {
        let cells: Vec<String> = ops
            .iter()
            .map(|op| {
                counts
                    .get(*op)
                    .map_or("-".into(), |(t, _)| format!("{t:.1}"))
            })
            .collect();
        let _ = writeln!(md, "| {label} | {} |", cells.join(" | "));
    }
    let _ = writeln!(md);
    for (label, counts) in &s.traced {
        for op in ops {
            if let Some((total, by_name)) = counts.get(op) {
                let calls: Vec<String> = by_name
                    .iter()
                    .filter(|(_, n)| **n >= 0.05)
                    .map(|(name, n)| {
                        if (*n - 1.0).abs() < 0.05 {
                            name.clone()
                        } else {
                            format!("{name} x{n:.1}")
                        }
                    })
                    .collect();
                let _ = writeln!(md, "- {label}, {op} ({total:.1}): {}", calls.join(", "));
            }
        }
    }
    if !s.counted.is_empty() {
        let counted: Vec<String> = s
            .counted
            .iter()
            .map(|(face, n)| format!("{face} {n:.1}"))
            .collect();
        let _ = writeln!(
            md,
            "\nCross-check, acquire + release per cycle by `strace -f -c` (difference of {} \
             cycles and none, kernel mode): {}.",
            cfg.ops,
            counted.join(", ")
        );
    }
    let _ = writeln!(md);
    md
}

// ---------------------------------------------------------------------------------------------
// The helper processes.

mod helper {
    use std::io::{BufRead, Write};
    use std::sync::Arc;
    use std::time::Duration;

    use lease_core::{AcquireOptions, LeaseBackend, LeaseGuard, LeaseKey, WaitOptions};
    use lease_file::{DirectoryStore, FileLock, ModePreference};

    use crate::raw::Raw as _;

    use super::{MARK, cpu_ns, unix_ns};

    fn say(line: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    fn mode(name: &str) -> ModePreference {
        if name == "heartbeat-only" {
            ModePreference::HeartbeatOnly
        } else {
            ModePreference::Auto
        }
    }

    /// Answers `cpu` with `cpu <process CPU ns> <monotonic ns>` until stdin closes.
    fn serve() {
        for line in std::io::stdin().lock().lines() {
            match line.as_deref() {
                Ok("cpu") => say(&format!(
                    "cpu {} {}",
                    cpu_ns(),
                    super::clock_ns(nix::time::ClockId::CLOCK_MONOTONIC)
                )),
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }

    fn mark(op: &str) {
        let _ = std::fs::symlink_metadata(format!("{MARK}{op}"));
    }

    const TTL: Duration = Duration::from_secs(30);

    pub(super) fn run(args: &[String]) -> i32 {
        let arg = |i: usize| args.get(i).map_or("", String::as_str);
        let key = LeaseKey::new("held").unwrap();
        match arg(0) {
            "idle" => {
                say("acquired nothing");
                serve();
            }
            // The floors of a heartbeat: a thread woken every 250 ms by a timed condition
            // variable wait, as `FileLock`'s is, doing nothing or renaming one file
            // (`tick.<n>` to `tick.<n+1>`) in the directory given.
            "ticker" => {
                let dir = args.get(1).map(std::path::PathBuf::from);
                if let Some(dir) = &dir {
                    std::fs::create_dir_all(dir).unwrap();
                    std::fs::write(dir.join("tick.0"), b"").unwrap();
                }
                // Renamed relative to the directory's descriptor, as the lease state is.
                let dir = dir.map(|d| std::fs::File::open(d).unwrap());
                std::thread::spawn(move || {
                    let pair = (std::sync::Mutex::new(()), std::sync::Condvar::new());
                    let mut guard = pair.0.lock().unwrap();
                    for n in 0u64.. {
                        guard = pair
                            .1
                            .wait_timeout(guard, Duration::from_millis(250))
                            .unwrap()
                            .0;
                        if let Some(dir) = &dir {
                            let _ = nix::fcntl::renameat(
                                dir,
                                format!("tick.{n}").as_str(),
                                dir,
                                format!("tick.{}", n + 1).as_str(),
                            );
                        }
                    }
                });
                say("acquired nothing");
                serve();
            }
            "raw-hold" | "raw-wait" => {
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(arg(1))
                    .unwrap();
                if arg(0) == "raw-wait" {
                    say("waiting");
                }
                file.lock().unwrap();
                say(&format!("acquired {}", unix_ns()));
                serve();
            }
            "raw-wait-thread" => {
                let path = arg(1).to_owned();
                let (tx, rx) = std::sync::mpsc::channel();
                say("waiting");
                std::thread::spawn(move || {
                    let file = std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(path)
                        .unwrap();
                    file.lock().unwrap();
                    let _ = tx.send(file);
                });
                let _file = rx.recv_timeout(Duration::from_secs(60)).unwrap();
                say(&format!("acquired {}", unix_ns()));
            }
            "raw-wait-dir" => {
                let dir = std::fs::File::open(arg(1)).unwrap();
                say("waiting");
                dir.lock().unwrap();
                say(&format!("acquired {}", unix_ns()));
            }
            "hold-lock" => {
                let lock = FileLock::builder(arg(1))
                    .with_mode(mode(arg(2)))
                    .build()
                    .unwrap();
                let guard = lock
                    .acquire_with(&WaitOptions::new(Duration::from_secs(60)))
                    .unwrap();
                say(&format!("acquired {}", unix_ns()));
                serve();
                guard.release().unwrap();
            }
            "wait-lock" => {
                let lock = FileLock::new(arg(1)).unwrap();
                assert!(lock.try_acquire().unwrap_err().is_held());
                say("waiting");
                let guard = lock
                    .acquire_with(&WaitOptions::new(Duration::from_secs(60)))
                    .unwrap();
                say(&format!("acquired {}", unix_ns()));
                guard.release().unwrap();
            }
            "hold-store" => {
                let store = Arc::new(
                    DirectoryStore::builder(arg(1))
                        .with_mode(mode(arg(2)))
                        .build()
                        .unwrap(),
                );
                let wait = WaitOptions::new(Duration::from_secs(60));
                let every: u64 = arg(3).parse().unwrap();
                if every > 0 {
                    // Kept by a blocking guard: its keeper thread renews every `every` ms.
                    let backend: Arc<dyn LeaseBackend> = store.clone();
                    let guard = LeaseGuard::builder(backend, &key, TTL)
                        .with_wait(wait)
                        .with_renew_every(Duration::from_millis(every))
                        .acquire_blocking()
                        .unwrap();
                    say(&format!("acquired {}", unix_ns()));
                    serve();
                    guard.release().unwrap();
                } else {
                    let lease = pollster::block_on(store.acquire_with(&key, TTL, &wait)).unwrap();
                    say(&format!("acquired {}", unix_ns()));
                    serve();
                    pollster::block_on(store.release_lease(&lease)).unwrap();
                }
            }
            "wait-store" => {
                let store = DirectoryStore::open(arg(1)).unwrap();
                assert!(
                    pollster::block_on(store.try_acquire(&key, TTL, &AcquireOptions::default()))
                        .unwrap_err()
                        .is_held()
                );
                say("waiting");
                let wait = WaitOptions::new(Duration::from_secs(60));
                let lease = pollster::block_on(store.acquire_with(&key, TTL, &wait)).unwrap();
                say(&format!("acquired {}", unix_ns()));
                pollster::block_on(store.release_lease(&lease)).unwrap();
            }
            // Commands run by `lease run`.
            "sleeper" => {
                say("running");
                std::thread::sleep(Duration::from_secs(3600));
            }
            "exit" => {}
            "cycles" => {
                let n: u32 = arg(3).parse().unwrap();
                cycles(arg(1), arg(2), n);
            }
            "syscalls" => {
                let n: u32 = arg(4).parse().unwrap();
                std::fs::create_dir_all(arg(3)).unwrap();
                let dir = std::path::Path::new(arg(3));
                if arg(1) == "lock" {
                    lock_syscalls(dir, mode(arg(2)), n);
                } else {
                    store_syscalls(dir, mode(arg(2)), n);
                }
            }
            other => {
                eprintln!("unknown helper command {other:?}");
                return 2;
            }
        }
        0
    }

    /// `n` uncontended acquire + release cycles (one before, so that `n = 0` has the setup).
    fn cycles(face: &str, dir: &str, n: u32) {
        std::fs::create_dir_all(dir).unwrap();
        if face == "lock" {
            let lock = FileLock::new(std::path::Path::new(dir).join("a")).unwrap();
            for _ in 0..=n {
                lock.try_acquire().unwrap().release().unwrap();
            }
        } else {
            let store = DirectoryStore::open(dir).unwrap();
            let key = LeaseKey::new("a").unwrap();
            for _ in 0..=n {
                let lease =
                    pollster::block_on(store.try_acquire(&key, TTL, &AcquireOptions::default()))
                        .unwrap();
                pollster::block_on(store.release_lease(&lease)).unwrap();
            }
        }
    }

    fn floor(dir: &std::path::Path, n: u32) {
        let path = dir.join("floor.excl");
        for _ in 0..n {
            mark("floor");
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .unwrap();
            drop(f);
            std::fs::remove_file(&path).unwrap();
        }
        mark("idle");
    }

    fn lock_syscalls(dir: &std::path::Path, mode: ModePreference, n: u32) {
        let options = |path| FileLock::builder(path).with_mode(mode);
        let a = options(dir.join("a")).build().unwrap();
        let b = options(dir.join("a")).build().unwrap();
        a.try_acquire().unwrap().release().unwrap();
        // Let the heartbeat thread finish starting before anything is counted.
        std::thread::sleep(Duration::from_millis(20));
        floor(dir, n);
        for _ in 0..n {
            mark("acquire");
            let guard = a.try_acquire().unwrap();
            mark("release");
            guard.release().unwrap();
        }
        mark("idle");
        let guard = a.try_acquire().unwrap();
        for _ in 0..n {
            mark("refused");
            assert!(b.try_acquire().unwrap_err().is_held());
        }
        mark("idle");
        guard.release().unwrap();
        // Heartbeats: a lock beating every 2 ms, counted by its renewal counter.
        let c = options(dir.join("c"))
            .with_heartbeat_interval(Duration::from_millis(2))
            .with_stale_threshold(Duration::from_secs(3))
            .build()
            .unwrap();
        let guard = c.try_acquire().unwrap();
        std::thread::sleep(Duration::from_millis(10));
        let before = super::renewals(&dir.join("c"));
        mark("heartbeat-window");
        std::thread::sleep(Duration::from_millis(2) * n.max(1));
        mark("idle");
        let after = super::renewals(&dir.join("c"));
        guard.release().unwrap();
        say(&format!("beats {}", after.saturating_sub(before)));
    }

    fn store_syscalls(dir: &std::path::Path, mode: ModePreference, n: u32) {
        let store = DirectoryStore::builder(dir)
            .with_mode(mode)
            .build()
            .unwrap();
        let key = LeaseKey::new("a").unwrap();
        let lease =
            pollster::block_on(store.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap();
        pollster::block_on(store.release_lease(&lease)).unwrap();
        floor(dir, n);
        for _ in 0..n {
            mark("acquire");
            let lease =
                pollster::block_on(store.try_acquire(&key, TTL, &AcquireOptions::default()))
                    .unwrap();
            mark("release");
            pollster::block_on(store.release_lease(&lease)).unwrap();
        }
        mark("idle");
        let mut lease =
            pollster::block_on(store.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap();
        for _ in 0..n {
            mark("heartbeat");
            lease = pollster::block_on(store.renew(&lease, TTL)).unwrap();
        }
        for _ in 0..n {
            mark("refused");
            assert!(
                pollster::block_on(store.try_acquire(&key, TTL, &AcquireOptions::default()))
                    .unwrap_err()
                    .is_held()
            );
        }
        mark("idle");
        pollster::block_on(store.release_lease(&lease)).unwrap();
    }
}

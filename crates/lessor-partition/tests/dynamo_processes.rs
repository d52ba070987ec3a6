//! Eight worker processes share 256 units on DynamoDB Local through the application API: each
//! unit is worked on by a real async task that keeps a counter as its checkpoint. One process is
//! SIGKILLed, one is SIGSTOPped past its session and resumed, one is killed and restarted at once
//! under the same id. Coverage returns within the crate's takeover bound each time, and no
//! checkpoint ever goes backwards: checked from a log of every save, then against the store.
//!
//! The test binary re-runs itself as the worker processes (`child_worker` with
//! [`CHILD_ENV`] set); without that variable `child_worker` does nothing. Needs
//! `LEASE_DYNAMO_ENDPOINT` (as `cargo xtask test` and `cargo xtask itest` set, with dummy AWS
//! credentials); without it the test prints `SKIPPED:` to stderr and passes, unless
//! `LEASE_REQUIRE_DYNAMO=1`.
//!
//! # The save log
//!
//! Every unit task appends one line per step to `<dir>/saves`, one `write` per line on a file
//! opened with `O_APPEND`:
//!
//! ```text
//! <sent unix ms> <answered unix ms> <worker id> <pid> <unit> <fencing> <counter> <kind>
//! ```
//!
//! `read` (the checkpoint the task was handed, at its start), `try` (before a save is sent),
//! `save` and `final` (accepted), `refused` (the store fenced it), `gone` (not sent: the task no
//! longer owned the unit), `error` (failed otherwise), `lost:<reason>` (`UnitTask::lost` said the
//! ownership ended, not as a handover: the task stopped).
//!
//! A save that was not accepted may still have landed: its reply was lost, or (seen with
//! SIGSTOP) the process was paused past the attempt's timeout and the retry of the same write
//! found the unit fenced by then, so the call reports a refusal although its first attempt landed
//! before the fence. The checker accepts such a value where it is the newest in order, and counts
//! the refusals that landed.
//!
//! Since the times are taken before sending and after the answer, on one machine's clock, an
//! accepted save whose *sending* follows a newer owner's proof of its fence is a fencing failure,
//! whatever the scheduling of the processes (a SIGSTOP between a save and its log line only
//! delays the line).
//!
//! A child also checks that [`WorkerHandle::units`](lessor_partition::WorkerHandle::units)
//! ends once the worker has stopped: the application's loop on it is how its process exits.
// The DynamoDB client's TLS stack (aws-lc-sys) needs the target's C compiler and system headers,
// which a check of macOS or FreeBSD from Linux lacks: these suites build and run on Linux.
#![cfg(target_os = "linux")]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};
use support::endpoint;

use futures::StreamExt;
use lease_core::FencedValues;
use lease_dynamo::DynamoLeases;
use lessor_partition::{Checkpoint, UnitEnd, UnitTask, Worker};

const CHILD_ENV: &str = "LESSOR_DYNAMO_CHILD";
const FLEET: &str = "procs";
const WORKERS: [&str; 8] = ["w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7"];
const UNITS: usize = 256;
const SESSION: Duration = Duration::from_secs(4);
const INTERVAL: Duration = Duration::from_secs(1);
const HANDOFF: Duration = Duration::from_secs(1);
/// The part of each session a worker does not trust; renewals must answer within half of it.
/// Larger than the default (a tenth, 400 ms) because DynamoDB Local on a two-core machine shared
/// with other builds answers in several hundred milliseconds for seconds at a time, and every
/// session lapse then costs a round of moves that the takeover figures would include.
const MARGIN: Duration = Duration::from_secs(1);
/// How often each unit task saves its counter: 256 saves per second for the fleet. At 200 ms
/// (1 280 a second) the eight debug-build clients and DynamoDB Local saturated a loaded two-core
/// machine: it served about 270 saves a second with a median reply of 230 ms, above half the
/// default safety margin (200 ms), so no session could be trusted and the fleet never settled,
/// as the crate docs say of slow stores.
const SAVE_EVERY: Duration = Duration::from_millis(1000);
/// How often each process writes the units it owns to its status file.
const STATUS_EVERY: Duration = Duration::from_millis(250);
/// How long after `Worker::run` returns a child waits for `WorkerHandle::units` to end.
const UNITS_END: Duration = Duration::from_secs(5);
/// A child that outlives this (its parent hung or lost its guard) exits on its own.
const CHILD_LIFETIME: Duration = Duration::from_secs(240);

fn millis_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn unit_names() -> impl Iterator<Item = String> {
    (0..UNITS).map(|u| format!("unit-{u:03}"))
}

fn tokio_runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn dynamo_leases(endpoint: &str, table: &str) -> Arc<DynamoLeases> {
    let client = lease_dynamo::client_for_endpoint(endpoint).await;
    Arc::new(DynamoLeases::new(client, table).expect("leases"))
}

// ---------------------------------------------------------------------------------------------
// The worker process.

/// The worker process: runs until `<dir>/stop-<id>` appears, writing its units to
/// `<dir>/status-<id>` every [`STATUS_EVERY`] and its unit tasks' saves to `<dir>/saves`.
#[test]
fn child_worker() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let [dir, endpoint, table, id]: [&str; 4] = spec
        .splitn(4, ',')
        .collect::<Vec<_>>()
        .try_into()
        .expect("dir,endpoint,table,id");
    tokio_runtime(2).block_on(run_child(
        PathBuf::from(dir),
        endpoint.to_owned(),
        table.to_owned(),
        id.to_owned(),
    ));
}

async fn run_child(dir: PathBuf, endpoint: String, table: String, id: String) {
    let born = Instant::now();
    let parent = std::os::unix::process::parent_id();
    let leases = dynamo_leases(&endpoint, &table).await;
    let worker = Worker::builder(FLEET, id.clone())
        .with_store(leases)
        .with_units(unit_names())
        .with_session_duration(SESSION)
        .with_interval(INTERVAL)
        .with_handoff_timeout(HANDOFF)
        .with_safety_margin(MARGIN)
        .with_checkpoints()
        .build()
        .expect("worker");
    let handle = worker.handle();
    let log = Arc::new(SaveLog::open(&dir, &id));
    let alive = Arc::new(AtomicUsize::new(0));

    // One task per unit gained, until the worker stops; then wait for them all, so that every
    // final save is in the log before the process exits. Asking for the stream before the
    // worker runs means no unit is ever gained without a task.
    let mut stream = handle.units();
    let units = tokio::spawn({
        let alive = alive.clone();
        async move {
            let mut tasks = tokio::task::JoinSet::new();
            while let Some(task) = stream.next().await {
                alive.fetch_add(1, Ordering::SeqCst);
                let (log, alive) = (log.clone(), alive.clone());
                tasks.spawn(async move {
                    work_on(task, log).await;
                    alive.fetch_sub(1, Ordering::SeqCst);
                });
                while let Some(done) = tasks.try_join_next() {
                    done.expect("unit task");
                }
            }
            while let Some(done) = tasks.join_next().await {
                done.expect("unit task");
            }
        }
    });
    let run = tokio::spawn(worker.run());

    let stop = dir.join(format!("stop-{id}"));
    let status = dir.join(format!("status-{id}"));
    while !stop.exists() {
        let owned: Vec<String> = handle.snapshot().units.into_keys().collect();
        write_atomically(&dir, &status, &owned.join(" "));
        if std::os::unix::process::parent_id() != parent || born.elapsed() > CHILD_LIFETIME {
            let _ = writeln!(std::io::stderr(), "{id}: parent gone or lifetime over");
            std::process::exit(3);
        }
        tokio::time::sleep(STATUS_EVERY).await;
    }
    handle.stop();
    run.await.expect("join run").expect("clean stop");
    // The worker has released every unit, so every task has finished, and `units` must say the
    // worker stopped: an application loop on it that still waits would never end.
    match tokio::time::timeout(UNITS_END, units).await {
        Ok(joined) => joined.expect("join unit tasks"),
        Err(_) => {
            let what = format!(
                "{id} (pid {}): units() still pending {UNITS_END:?} after run() returned, \
                 with {} unit tasks alive",
                std::process::id(),
                alive.load(Ordering::SeqCst)
            );
            let _ = writeln!(std::io::stderr(), "{what}");
            std::fs::write(dir.join(format!("hung-{id}")), what).expect("hung file");
            std::process::exit(4);
        }
    }
    write_atomically(&dir, &status, "");
}

fn write_atomically(dir: &Path, path: &Path, text: &str) {
    let tmp = dir.join(format!(".{}.tmp", std::process::id()));
    std::fs::write(&tmp, text).expect("status");
    std::fs::rename(&tmp, path).expect("status rename");
}

/// The shared save log, as one process writes it.
struct SaveLog {
    file: File,
    worker: String,
    pid: u32,
}

impl SaveLog {
    fn open(dir: &Path, worker: &str) -> Self {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("saves"))
            .expect("save log");
        Self {
            file,
            worker: worker.to_owned(),
            pid: std::process::id(),
        }
    }

    fn line(&self, sent: u64, unit: &str, fencing: u64, counter: u64, kind: &str) {
        let line = format!(
            "{sent} {} {} {} {unit} {fencing} {counter} {kind}\n",
            millis_now(),
            self.worker,
            self.pid
        );
        // One write(2) on an O_APPEND file: lines of concurrent processes never interleave.
        let written = (&self.file).write(line.as_bytes()).expect("save log write");
        assert_eq!(written, line.len(), "short write to the save log");
    }
}

/// What became of one save.
enum Saved {
    Accepted,
    /// Refused, or not sent because the task no longer owns the unit: the ownership is over.
    Over,
    /// Failed otherwise (it may have landed): try the same counter again.
    Failed,
}

/// The application's work on one unit: count up from the checkpoint, saving every
/// [`SAVE_EVERY`]; a final save when asked to hand the unit over; stop at once on any other loss.
async fn work_on(task: UnitTask, log: Arc<SaveLog>) {
    let fencing = task.fencing_token().get();
    let mut counter: u64 = match task.checkpoint() {
        Checkpoint::Saved(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| text.parse().ok())
            .expect("a checkpoint this test wrote"),
        _ => 0,
    };
    let now = millis_now();
    log.line(now, task.unit(), fencing, counter, "read");
    loop {
        let reason = tokio::select! {
            reason = task.lost() => Some(reason),
            () = tokio::time::sleep(SAVE_EVERY) => None,
        };
        match reason {
            None => match save(&task, &log, counter + 1, "save").await {
                Saved::Accepted => counter += 1,
                Saved::Over => return,
                Saved::Failed => {}
            },
            Some(UnitEnd::HandedOver | UnitEnd::Shutdown) => {
                save(&task, &log, counter + 1, "final").await;
                return;
            }
            Some(reason) => {
                let kind = format!("lost:{reason:?}").replace(char::is_whitespace, "_");
                log.line(millis_now(), task.unit(), fencing, counter, &kind);
                return;
            }
        }
    }
}

async fn save(task: &UnitTask, log: &SaveLog, counter: u64, kind: &str) -> Saved {
    let (unit, fencing) = (task.unit(), task.fencing_token().get());
    let sent = millis_now();
    if task.check().is_err() {
        log.line(sent, unit, fencing, counter, "gone");
        return Saved::Over;
    }
    log.line(sent, unit, fencing, counter, "try");
    match task.save_checkpoint(counter.to_string().as_bytes()).await {
        Ok(()) => {
            log.line(sent, unit, fencing, counter, kind);
            Saved::Accepted
        }
        Err(error) if error.is_not_owned() => {
            log.line(sent, unit, fencing, counter, "refused");
            Saved::Over
        }
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "{unit}@{fencing}: save failed: {error}");
            log.line(sent, unit, fencing, counter, "error");
            Saved::Failed
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The parent: processes, faults, coverage.

/// The worker processes; every one still running is killed when this is dropped (on a panic
/// too), so no test leaves processes behind.
struct Fleet {
    dir: PathBuf,
    spec: String,
    children: BTreeMap<String, Child>,
}

impl Fleet {
    fn new(dir: &Path, endpoint: &str, table: &str) -> Self {
        Self {
            dir: dir.to_owned(),
            spec: format!("{},{endpoint},{table}", dir.display()),
            children: BTreeMap::new(),
        }
    }

    fn spawn(&mut self, id: &str) {
        let child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "child_worker", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, format!("{},{id}", self.spec))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child");
        assert!(self.children.insert(id.to_owned(), child).is_none());
    }

    /// SIGKILL: no goodbye. Its status file goes too, since it no longer says anything. Returns
    /// the pid it had.
    fn kill(&mut self, id: &str) -> u32 {
        let mut child = self.children.remove(id).expect("a running child");
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        let _ = std::fs::remove_file(self.dir.join(format!("status-{id}")));
        child.id()
    }

    fn signal(&self, id: &str, signal: &str) {
        let pid = self.children[id].id().to_string();
        let sent = Command::new("kill")
            .args([format!("-{signal}"), pid])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{signal} {id}");
    }

    /// Asks every child to stop through its stop file; SIGKILLs whichever has not exited within
    /// `limit`. Returns the children that did not exit cleanly.
    fn stop_all(&mut self, limit: Duration) -> Vec<String> {
        for id in self.children.keys() {
            std::fs::write(self.dir.join(format!("stop-{id}")), "").expect("stop file");
        }
        let deadline = Instant::now() + limit;
        let mut failed = Vec::new();
        for (id, mut child) in std::mem::take(&mut self.children) {
            let exit = loop {
                if let Some(exit) = child.try_wait().expect("try_wait") {
                    break Some(exit);
                }
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            if !exit.is_some_and(|e| e.success()) {
                let why = std::fs::read_to_string(self.dir.join(format!("hung-{id}")))
                    .unwrap_or_else(|_| "see its stderr above".to_owned());
                failed.push(format!("{id} exited with {exit:?}: {why}"));
            }
        }
        failed
    }

    fn status(&self, id: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.join(format!("status-{id}")))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    /// How many distinct units the status files of `ids` show.
    fn covered(&self, ids: &[&str]) -> usize {
        ids.iter()
            .flat_map(|id| self.status(id))
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// Units per status file, and how many distinct units they show together.
    fn describe(&self) -> String {
        let ids: Vec<&str> = WORKERS.to_vec();
        let counts: Vec<String> = ids
            .iter()
            .map(|id| format!("{id}={}", self.status(id).len()))
            .collect();
        format!("{} ({} distinct)", counts.join(" "), self.covered(&ids))
    }

    /// Every unit shown exactly once, each of `ids` at its share.
    fn balanced(&self, ids: &[&str]) -> bool {
        let counts: Vec<usize> = ids.iter().map(|id| self.status(id).len()).collect();
        let (lo, hi) = (UNITS / ids.len(), UNITS.div_ceil(ids.len()));
        self.covered(ids) == UNITS
            && counts.iter().sum::<usize>() == UNITS
            && counts.iter().all(|c| (lo..=hi).contains(c))
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for child in self.children.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn wait(fleet: &Fleet, what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}; status files: {} (save log kept in \
             {})",
            fleet.describe(),
            fleet.dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    start.elapsed()
}

/// The crate's bound for a crashed worker's units (crate docs, "Timing"): owned again within
/// `d + 2I` of the crash, plus the time to take them. Here with slack for DynamoDB Local on a
/// loaded two-core machine and for the status files' own period: twice that, plus 5 s.
fn takeover_bound() -> Duration {
    slack(SESSION + INTERVAL * 2)
}

/// When a worker restarts under its id, every unit is owned *at once* only after the rejoin's
/// moves too (a moved unit is unowned from its release to its take): the crash bound plus the
/// three ticks in which a joining worker reaches its share (crate docs, "Timing"), with the same
/// slack. The dead process's own units are held to [`takeover_bound`].
fn rejoin_bound() -> Duration {
    slack(SESSION + INTERVAL * 5)
}

fn slack(bound: Duration) -> Duration {
    bound * 2 + Duration::from_secs(5)
}

fn others<'a>(ids: &[&'a str], without: &[&str]) -> Vec<&'a str> {
    ids.iter()
        .copied()
        .filter(|id| !without.contains(id))
        .collect()
}

/// One fault and how long the fleet took to own every unit again.
struct Takeover {
    fault: &'static str,
    /// The process hit.
    pid: u32,
    /// When the fault was injected (unix ms).
    at_ms: u64,
    /// Until every unit was owned at once again, from the status files.
    took: Duration,
    /// What `took` is held to.
    bound: Duration,
}

/// What the faults left for the checks after the run.
struct Faults {
    takeovers: Vec<Takeover>,
    /// When the paused worker was resumed (unix ms).
    resumed_ms: u64,
    /// When the restarted worker's first process was killed (unix ms), and its new pid.
    restarted: (u64, u32),
}

/// Kill, pause, restart, in turn; prints the figures as they are measured.
fn inject_faults(fleet: &mut Fleet) -> Faults {
    let bound = takeover_bound();
    let limit = rejoin_bound() + Duration::from_secs(30);
    let mut takeovers = Vec::new();

    // 1. A crash.
    let alive = others(&WORKERS, &["w3"]);
    let pid = fleet.kill("w3");
    let at_ms = millis_now();
    let took = wait(fleet, "coverage after SIGKILL", limit, || {
        fleet.covered(&alive) == UNITS
    });
    let settled = wait(fleet, "balance after SIGKILL", limit, || {
        fleet.balanced(&alive)
    });
    println!(
        "SIGKILL w3 at {at_ms}: all {UNITS} units owned again after {took:.1?} (bound \
         {bound:?}), balanced after {:.1?}",
        took + settled
    );
    takeovers.push(Takeover {
        fault: "SIGKILL w3",
        pid,
        at_ms,
        took,
        bound,
    });

    // 2. A pause past the session: the others cover its units while it is stopped (its status
    // file is stale meanwhile, so it does not count), then it resumes and must find itself fenced.
    let working = others(&alive, &["w5"]);
    fleet.signal("w5", "STOP");
    let (pid, at_ms) = (fleet.children["w5"].id(), millis_now());
    let stopped = Instant::now();
    let took = wait(fleet, "coverage during SIGSTOP", limit, || {
        fleet.covered(&working) == UNITS
    });
    std::thread::sleep((SESSION + Duration::from_secs(3)).saturating_sub(stopped.elapsed()));
    let paused_for = stopped.elapsed();
    // Read before the signal: the process can log nothing until it has it.
    let resumed_ms = millis_now();
    fleet.signal("w5", "CONT");
    let rejoined = wait(fleet, "balance after SIGCONT", limit, || {
        fleet.balanced(&alive)
    });
    println!(
        "SIGSTOP w5 at {at_ms} for {paused_for:.1?}: all units owned by the others after \
         {took:.1?} (bound {bound:?}); after SIGCONT balanced again in {rejoined:.1?}"
    );
    takeovers.push(Takeover {
        fault: "SIGSTOP w5",
        pid,
        at_ms,
        took,
        bound,
    });

    // 3. A crash and a restart under the same id at once: the new process must wait for its old
    // session to expire in the store before it joins.
    let pid = fleet.kill("w1");
    let at_ms = millis_now();
    fleet.spawn("w1");
    let took = wait(fleet, "coverage after restart", limit, || {
        fleet.covered(&alive) == UNITS
    });
    let settled = wait(fleet, "balance after restart", limit, || {
        fleet.balanced(&alive)
    });
    println!(
        "SIGKILL w1 at {at_ms}, restarted at once: all units owned again after {took:.1?} \
         (bound {:?}), balanced with w1 back after {:.1?}",
        rejoin_bound(),
        took + settled
    );
    takeovers.push(Takeover {
        fault: "SIGKILL + restart w1",
        pid,
        at_ms,
        took,
        bound: rejoin_bound(),
    });
    Faults {
        takeovers,
        resumed_ms,
        restarted: (at_ms, fleet.children["w1"].id()),
    }
}

/// The units process `pid` owned when it was hit at `at_ms` (ownerships it began before then and
/// had not handed over, nor seen taken), how long after `at_ms` the last of them was first read
/// by a newer owner, and those never read by one: the takeover as the save log tells it.
fn retaken(entries: &[Entry], pid: u32, at_ms: u64) -> (usize, Duration, Vec<String>) {
    let mut by_unit: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for entry in entries {
        by_unit.entry(&entry.unit).or_default().push(entry);
    }
    let (mut held, mut latest, mut never) = (0, 0, Vec::new());
    for (unit, log) in by_unit {
        let Some(fencing) = log
            .iter()
            .filter(|e| e.pid == pid && e.kind == Kind::Read && e.sent < at_ms)
            .map(|e| e.fencing)
            .max()
        else {
            continue;
        };
        let ended_before = log.iter().any(|e| {
            e.sent < at_ms
                && ((e.pid == pid && e.fencing == fencing && e.kind == Kind::Final)
                    || (e.kind == Kind::Read && e.fencing > fencing))
        });
        if ended_before {
            continue;
        }
        held += 1;
        let next = log
            .iter()
            .filter(|e| e.kind == Kind::Read && e.fencing > fencing)
            .map(|e| e.sent)
            .min();
        match next {
            Some(read) => latest = latest.max(read.saturating_sub(at_ms)),
            None => never.push(unit.to_owned()),
        }
    }
    (held, Duration::from_millis(latest), never)
}

/// Median and 90th percentile of the reply times of the saves sent in `[from, to)` (unix ms): how
/// fast the store answered meanwhile (sessions need replies within half the safety margin). Not
/// the greatest: a save in flight when its process was stopped waits out the pause.
fn save_replies(entries: &[Entry], from: u64, to: u64) -> (u64, u64) {
    let mut replies: Vec<u64> = entries
        .iter()
        .filter(|e| e.accepted() && (from..to).contains(&e.sent))
        .map(|e| e.answered - e.sent)
        .collect();
    replies.sort_unstable();
    let at = |fraction: usize| replies.get(replies.len() * fraction / 10).copied();
    (at(5).unwrap_or(0), at(9).unwrap_or(0))
}

/// The store's final checkpoints, read with a fence above every owner's: only once no worker
/// runs, since the read raises the fence.
fn stored_checkpoints(
    runtime: &tokio::runtime::Runtime,
    leases: Arc<DynamoLeases>,
) -> BTreeMap<String, Option<u64>> {
    runtime.block_on(async {
        let mut stored = BTreeMap::new();
        for unit in unit_names() {
            let name = lease_core::LeaseKey::with_sort_key(
                format!("fleet/{FLEET}/checkpoints"),
                unit.as_str(),
            )
            .expect("checkpoint name");
            let value = leases
                .fence_and_read(&name, lease_core::backend::fencing_token(1 << 62))
                .await
                .expect("final read");
            let counter = value.map(|bytes| {
                String::from_utf8(bytes)
                    .expect("utf-8")
                    .parse()
                    .expect("a counter")
            });
            stored.insert(unit, counter);
        }
        stored
    })
}

/// Prints what the save log says about each fault; returns what went wrong.
fn judge_faults(entries: &[Entry], faults: &Faults) -> Vec<String> {
    let mut failures = Vec::new();
    let (killed_ms, new_pid) = faults.restarted;
    let crash_bound = takeover_bound();
    for Takeover {
        fault,
        pid,
        at_ms,
        took,
        bound,
    } in &faults.takeovers
    {
        let window_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        let (median, p90) = save_replies(entries, *at_ms, at_ms + window_ms);
        let (held, retaken, never) = retaken(entries, *pid, *at_ms);
        println!(
            "{fault}: the {held} units it held all had new owners after {retaken:.1?} (save \
             log), every unit owned again after {took:.1?} (status files; includes the moves \
             that follow); saves meanwhile answered in {median} ms (median), {p90} ms (90th \
             percentile)"
        );
        if took >= bound || retaken >= crash_bound || !never.is_empty() {
            failures.push(format!(
                "{fault}: its units had new owners after {retaken:.1?} (bound {crash_bound:?}; \
                 never: {never:?}), all units were owned again after {took:.1?} (bound \
                 {bound:?}); saves meanwhile answered in {median} ms median, {p90} ms 90th \
                 percentile"
            ));
        }
    }
    let paused = paused_outcomes(entries, "w5", faults.resumed_ms);
    println!(
        "w5 after SIGCONT, under the fencing tokens it held before: saves in flight across the \
         pause {} accepted (landed before the fence) and {} refused; saves sent after it {} \
         accepted and {} refused; {} not sent (no longer owned); {} tasks told by lost() and \
         stopped",
        paused.in_flight_accepted,
        paused.in_flight_refused,
        paused.later_accepted,
        paused.later_refused,
        paused.not_sent,
        paused.told_lost
    );
    // The restarted process can take nothing before its predecessor's session expired, which the
    // store grants at the earliest a session after its last renewal (at most an interval before
    // the kill, give or take the renewal's own time).
    let first_gain = entries
        .iter()
        .filter(|e| e.pid == new_pid && e.kind == Kind::Read)
        .map(|e| e.sent)
        .min();
    match first_gain {
        Some(gained) => {
            let waited = Duration::from_millis(gained.saturating_sub(killed_ms));
            println!("restarted w1 gained its first unit {waited:.1?} after the kill");
            if waited < SESSION - INTERVAL * 2 {
                failures.push(format!(
                    "restarted w1 gained a unit {waited:?} after the kill, before its old session \
                     ({SESSION:?}) could have expired"
                ));
            }
        }
        None => failures.push("restarted w1 never gained a unit".to_owned()),
    }

    failures
}

fn print_report(report: &Report, stored: usize) {
    println!(
        "checked {} accepted saves ({} final) of {} ownerships over {} units, and the {stored} \
         checkpoints in the store; {} saves refused by the store, {} not sent (ownership over), \
         {} failed",
        report.accepted,
        report.finals,
        report.ownerships,
        report.units,
        report.refused,
        report.gone,
        report.failed
    );
    println!(
        "saves in doubt that a later reader shows landed: {} reported refused, {} never answered \
         or failed",
        report.refused_but_landed.len(),
        report.in_doubt_landed
    );
    for landed in report.refused_but_landed.iter().take(5) {
        println!("  refused but landed: {landed}");
    }
}

#[test]
fn eight_processes_checkpoint_through_kill_pause_and_restart_on_dynamodb_local() {
    let Some(endpoint) =
        endpoint("eight_processes_checkpoint_through_kill_pause_and_restart_on_dynamodb_local")
    else {
        return;
    };
    let runtime = tokio_runtime(1);
    let table = format!("lessor-procs-{}", millis_now());
    let leases = runtime.block_on(async {
        let leases = dynamo_leases(&endpoint, &table).await;
        leases
            .ensure_table()
            .await
            .expect("table on DynamoDB Local");
        leases
    });
    // Kept unless the test passes: the save log and status files are for whoever investigates.
    let dir = tempfile::Builder::new()
        .prefix("lessor-processes-")
        .disable_cleanup(true)
        .tempdir()
        .expect("tempdir");
    let mut fleet = Fleet::new(dir.path(), &endpoint, &table);
    let started = Instant::now();
    for id in WORKERS {
        fleet.spawn(id);
    }
    let took = wait(
        &fleet,
        "8 processes to balance",
        Duration::from_secs(90),
        || fleet.balanced(&WORKERS),
    );
    println!(
        "8 processes balanced ({} units each) after {took:.1?}",
        UNITS / WORKERS.len()
    );

    let faults = inject_faults(&mut fleet);
    let mut failures = fleet.stop_all(Duration::from_secs(30));
    println!(
        "all processes stopped {:.1?} after the start",
        started.elapsed()
    );

    let stored = stored_checkpoints(&runtime, leases);
    let text = std::fs::read_to_string(dir.path().join("saves")).expect("save log");
    let entries: Vec<Entry> = text.lines().map(Entry::parse).collect();
    failures.extend(judge_faults(&entries, &faults));
    let report = check(&entries, &stored);
    print_report(&report, stored.len());
    failures.extend(report.violations.iter().take(20).cloned());
    if report.units != UNITS {
        failures.push(format!(
            "only {} of {UNITS} units were worked on",
            report.units
        ));
    }
    assert!(
        failures.is_empty(),
        "{} violations of the checkpoint order; failures (save log kept in {}):\n{}",
        report.violations.len(),
        dir.path().display(),
        failures.join("\n")
    );
    let _ = std::fs::remove_dir_all(dir.path());
}

// ---------------------------------------------------------------------------------------------
// The checker: a pure function of the save log and the store's final checkpoints.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Read,
    Try,
    Save,
    Final,
    Refused,
    Gone,
    Error,
    Lost,
}

#[derive(Clone, Debug)]
struct Entry {
    sent: u64,
    answered: u64,
    worker: String,
    pid: u32,
    unit: String,
    fencing: u64,
    counter: u64,
    kind: Kind,
}

impl Entry {
    fn parse(line: &str) -> Self {
        let fields: Vec<&str> = line.split(' ').collect();
        let &[sent, answered, worker, pid, unit, fencing, counter, kind] = fields.as_slice() else {
            panic!("malformed save log line {line:?}");
        };
        let number = |text: &str| -> u64 {
            text.parse()
                .unwrap_or_else(|_| panic!("bad number in {line:?}"))
        };
        Self {
            sent: number(sent),
            answered: number(answered),
            worker: worker.to_owned(),
            pid: u32::try_from(number(pid)).expect("pid"),
            unit: unit.to_owned(),
            fencing: number(fencing),
            counter: number(counter),
            kind: match kind {
                "read" => Kind::Read,
                "try" => Kind::Try,
                "save" => Kind::Save,
                "final" => Kind::Final,
                "refused" => Kind::Refused,
                "gone" => Kind::Gone,
                "error" => Kind::Error,
                lost if lost.starts_with("lost:") => Kind::Lost,
                other => panic!("unknown kind {other:?} in {line:?}"),
            },
        }
    }

    fn accepted(&self) -> bool {
        matches!(self.kind, Kind::Save | Kind::Final)
    }

    fn describe(&self) -> String {
        format!(
            "{}..{} {} (pid {}) {} fencing {} counter {} {:?}",
            self.sent,
            self.answered,
            self.worker,
            self.pid,
            self.unit,
            self.fencing,
            self.counter,
            self.kind
        )
    }
}

#[derive(Debug, Default)]
struct Report {
    units: usize,
    ownerships: usize,
    accepted: usize,
    finals: usize,
    refused: usize,
    gone: usize,
    failed: usize,
    /// Saves reported refused whose value a later reader (or the store at the end) shows.
    refused_but_landed: Vec<String>,
    /// Saves never answered, or failed, whose value a later reader shows.
    in_doubt_landed: usize,
    violations: Vec<String>,
}

/// Checks that no checkpoint goes backwards, per unit:
///
/// 1. **Fencing in real time**: no save under fencing `g` is accepted if it was *sent* after a
///    proof that the fence had reached `f > g` (a newer owner's `read`, which it logs after its
///    gain fenced the unit, or the answer to one of its accepted saves).
/// 2. **Each owner counts up from what it read**: the `read` of an ownership and its accepted
///    saves, in the order sent, strictly increase.
/// 3. **Each owner reads its predecessors' last save**: an ownership's `read` equals the greatest
///    accepted `(fencing, counter)` below its fencing (0 if none), or a counter whose save was
///    sent and never answered (a `try` without an outcome, or an `error`: it may have landed).
/// 4. **The store ends with the last save**: the same rule, for the value read from the store
///    after every worker stopped (`stored`).
fn check(entries: &[Entry], stored: &BTreeMap<String, Option<u64>>) -> Report {
    let mut report = Report::default();
    let mut by_unit: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for entry in entries {
        by_unit.entry(&entry.unit).or_default().push(entry);
        match entry.kind {
            Kind::Read => report.ownerships += 1,
            Kind::Save => report.accepted += 1,
            Kind::Final => {
                report.accepted += 1;
                report.finals += 1;
            }
            Kind::Refused => report.refused += 1,
            Kind::Gone => report.gone += 1,
            Kind::Error => report.failed += 1,
            Kind::Try | Kind::Lost => {}
        }
    }
    report.units = by_unit.len();
    for (unit, mut log) in by_unit {
        log.sort_by_key(|e| (e.sent, e.answered));
        check_unit(unit, &log, stored.get(unit).copied(), &mut report);
    }
    for (unit, value) in stored {
        if !entries.iter().any(|e| &e.unit == unit) && value.is_some() {
            report.violations.push(format!(
                "{unit}: the store holds {value:?}, the log no save"
            ));
        }
    }
    report
}

fn check_unit(unit: &str, log: &[&Entry], stored: Option<Option<u64>>, report: &mut Report) {
    let out = &mut report.violations;
    // 1. The earliest proof, per fencing, that the fence had reached it.
    let mut fenced_at: BTreeMap<u64, &Entry> = BTreeMap::new();
    for entry in log.iter().filter(|e| e.kind == Kind::Read || e.accepted()) {
        let proof = fenced_at.entry(entry.fencing).or_insert(entry);
        if entry.answered < proof.answered {
            *proof = entry;
        }
    }
    for save in log.iter().filter(|e| e.accepted()) {
        let newer = fenced_at
            .range(save.fencing + 1..)
            .map(|(_, proof)| *proof)
            .filter(|proof| proof.answered < save.sent)
            .min_by_key(|proof| proof.answered);
        if let Some(proof) = newer {
            out.push(format!(
                "{unit}: save accepted after a newer owner fenced: [{}] after [{}]",
                save.describe(),
                proof.describe()
            ));
        }
    }

    // 2. Within an ownership, from its read on, counters strictly increase.
    let mut ownerships: BTreeMap<u64, Vec<&Entry>> = BTreeMap::new();
    for entry in log.iter().filter(|e| e.kind == Kind::Read || e.accepted()) {
        ownerships.entry(entry.fencing).or_default().push(entry);
    }
    for steps in ownerships.values() {
        for pair in steps.windows(2) {
            if pair[1].counter <= pair[0].counter || pair[1].kind == Kind::Read {
                out.push(format!(
                    "{unit}: counter did not go up within one ownership: [{}] then [{}]",
                    pair[0].describe(),
                    pair[1].describe()
                ));
            }
        }
    }

    // 3. and 4. What each new owner read, and what the store ends with, is the last save before.
    let reads = log.iter().filter(|e| e.kind == Kind::Read);
    let seen = reads
        .map(|read| {
            (
                read.fencing,
                Some(read.counter),
                format!("[{}]", read.describe()),
            )
        })
        .chain(stored.map(|value| (u64::MAX, value, "the store's final checkpoint".to_owned())));
    for (fencing, value, who) in seen {
        match judge_value(log, fencing, value) {
            Ok(None) => {}
            Ok(Some(outcome)) if outcome.kind == Kind::Refused => report.refused_but_landed.push(
                format!("{unit}: {who} shows the save of [{}]", outcome.describe()),
            ),
            Ok(Some(_)) => report.in_doubt_landed += 1,
            Err(problem) => report.violations.push(format!("{unit}: {who} {problem}")),
        }
    }
}

/// Whether `value` can be the checkpoint seen by a reader fencing at `fencing`: `Ok(None)` if it
/// is the last accepted save below that fencing, `Ok(Some(outcome))` if it is a later save whose
/// outcome left it in doubt (`outcome` is its `refused` or `error` line, or its `try` if it was
/// never answered), `Err` with the reason if neither.
fn judge_value<'a>(
    log: &[&'a Entry],
    fencing: u64,
    value: Option<u64>,
) -> Result<Option<&'a Entry>, String> {
    let below = || log.iter().copied().filter(move |e| e.fencing < fencing);
    let last = below()
        .filter(|e| e.accepted())
        .max_by_key(|e| (e.fencing, e.counter));
    let expected = last.map(|e| e.counter);
    if value == expected || (value == Some(0) && expected.is_none()) {
        return Ok(None);
    }
    // A save sent and not accepted may still have landed: its reply was lost, or the process was
    // paused past the attempt's timeout and the retry found the unit fenced meanwhile. Ordered
    // after `last`, it is the value.
    let accepted: BTreeSet<(u64, u64)> = below()
        .filter(|e| e.accepted())
        .map(|e| (e.fencing, e.counter))
        .collect();
    let landed = below()
        .filter(|e| e.kind == Kind::Try && Some(e.counter) == value)
        .filter(|e| !accepted.contains(&(e.fencing, e.counter)))
        .find(|e| last.is_none_or(|l| (e.fencing, e.counter) > (l.fencing, l.counter)));
    if let Some(sent) = landed {
        let outcome = below().find(|e| {
            matches!(e.kind, Kind::Refused | Kind::Error)
                && (e.pid, e.fencing, e.counter, e.sent)
                    == (sent.pid, sent.fencing, sent.counter, sent.sent)
        });
        return Ok(Some(outcome.unwrap_or(sent)));
    }
    Err(format!(
        "is {value:?}, but the last accepted save before it is {}",
        last.map_or("none".to_owned(), |e| format!("[{}]", e.describe()))
    ))
}

/// What the paused worker's tasks did after it resumed, under the fencing tokens they held
/// before the pause: saves in flight across the pause (sent before, answered after) and saves
/// sent after it.
#[derive(Debug, Default)]
struct PausedOutcomes {
    in_flight_accepted: usize,
    in_flight_refused: usize,
    later_accepted: usize,
    later_refused: usize,
    not_sent: usize,
    /// Tasks told their ownership had ended (not a handover) once it resumed.
    told_lost: usize,
}

fn paused_outcomes(entries: &[Entry], worker: &str, resumed_ms: u64) -> PausedOutcomes {
    let old: BTreeSet<(&str, u64)> = entries
        .iter()
        .filter(|e| e.worker == worker && e.kind == Kind::Read && e.sent < resumed_ms)
        .map(|e| (e.unit.as_str(), e.fencing))
        .collect();
    let mut outcomes = PausedOutcomes::default();
    for entry in entries.iter().filter(|e| {
        e.worker == worker
            && e.answered >= resumed_ms
            && old.contains(&(e.unit.as_str(), e.fencing))
    }) {
        let in_flight = entry.sent < resumed_ms;
        match (entry.kind, in_flight) {
            (Kind::Save | Kind::Final, true) => outcomes.in_flight_accepted += 1,
            (Kind::Save | Kind::Final, false) => outcomes.later_accepted += 1,
            (Kind::Refused, true) => outcomes.in_flight_refused += 1,
            (Kind::Refused, false) => outcomes.later_refused += 1,
            (Kind::Gone, _) => outcomes.not_sent += 1,
            (Kind::Lost, _) => outcomes.told_lost += 1,
            _ => {}
        }
    }
    outcomes
}

/// The checker itself can fail: a paused old owner's save that lands after the new owner fenced,
/// and a new owner that reads a stale checkpoint, are both reported; a clean history is not.
#[test]
fn the_checker_finds_checkpoints_that_go_backwards() {
    let line = |text: &str| Entry::parse(text);
    let clean = [
        "100 100 a 1 u 5 0 read",
        "200 210 a 1 u 5 1 try",
        "200 210 a 1 u 5 1 save",
        "300 300 a 1 u 5 2 try",
        "500 500 b 2 u 7 1 read",
        "600 600 b 2 u 7 2 try",
        "600 610 b 2 u 7 2 save",
    ];
    let entries: Vec<Entry> = clean.iter().map(|l| line(l)).collect();
    // `a`'s save of 2 was never answered: the new owner may read 1 or 2.
    let stored = BTreeMap::from([("u".to_owned(), Some(2))]);
    assert!(check(&entries, &stored).violations.is_empty());

    // The old owner's save of 2, sent after `b` fenced, accepted: it went backwards.
    let mut late: Vec<Entry> = clean.iter().map(|l| line(l)).collect();
    late.push(line("700 900 a 1 u 5 2 save"));
    let report = check(&late, &stored);
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("after a newer owner fenced")),
        "{:?}",
        report.violations
    );

    // A new owner that read 0 where 1 had been saved.
    let stale: Vec<Entry> = clean
        .iter()
        .map(|l| line(&l.replace("u 7 1 read", "u 7 0 read")))
        .collect();
    assert!(!check(&stale, &stored).violations.is_empty());

    // A save refused on a retry after its first attempt landed (the process was paused past the
    // attempt's timeout): the new owner reads it. Not a violation, but counted.
    let refused: Vec<Entry> = [
        "100 100 a 1 u 5 0 read",
        "200 210 a 1 u 5 1 try",
        "200 210 a 1 u 5 1 save",
        "300 300 a 1 u 5 2 try",
        "500 500 b 2 u 7 2 read",
        "600 600 b 2 u 7 3 try",
        "600 610 b 2 u 7 3 save",
        "300 650 a 1 u 5 2 refused",
    ]
    .iter()
    .map(|l| line(l))
    .collect();
    let stored_3 = BTreeMap::from([("u".to_owned(), Some(3))]);
    let report = check(&refused, &stored_3);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.refused_but_landed.len(), 1);

    // A store that ends below the last accepted save.
    let behind = BTreeMap::from([("u".to_owned(), Some(1))]);
    assert!(!check(&entries, &behind).violations.is_empty());
}

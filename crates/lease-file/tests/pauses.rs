//! Pause injection: real processes (`tests/pauser/mod.rs`, this test binary run again) contend for one lock while
//! one of them pauses at a fault point of `src/faults.rs` for longer than the lease, and a checker
//! reads their shared history for violations of the lease's promises.
//!
//! Every fault point x both modes x three faces (`FileLock`; `DirectoryStore` kept by lease-core's
//! keeper; `DirectoryStore` renewed explicitly): 36 combinations of three processes each, the six
//! of one fault point at a time, about 20 s in all. `LEASE_FILE_PAUSES_KEEP=<dir>` keeps the
//! histories.
//!
//! Counting leases (`CountingLease`): in-process clients on a manual clock, one paused inside
//! its acquire, takeover or renewal while the others act, checked after every step with
//! `conformance::counting_model::check_trusted_slots` (about 0.1 s).
// Unix only: its processes order their histories by one host clock, CLOCK_MONOTONIC, which
// Windows gives no safe reading of across processes (std's `Instant` is per process).
#![cfg(unix)]
#![allow(clippy::unwrap_used)]

mod raw;

use raw::Raw as _;
use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lease_core::{AcquireOptions, Clock, FencedValues, LeaseBackend, LeaseKey};
use lease_file::{DirectoryStore, ModePreference};
use pollster::block_on;

const POINTS: [&str; 6] = [
    "lease-file/before-acquire",
    "lease-file/before-takeover",
    "lease-file/before-renew",
    "lease-file/before-release",
    "lease-file/before-fence",
    "lease-file/before-put",
];

/// Every fault point fires, once per rename of its kind, in both modes: without the `fail`
/// crate's own `failpoints` feature the points compile to nothing and every pause test would
/// pass without pausing anything.
#[test]
fn every_fault_point_fires_before_its_rename() {
    let scenario = fail::FailScenario::setup();
    let hits: Arc<Mutex<HashMap<&str, u32>>> = Arc::default();
    for point in POINTS {
        let hits = hits.clone();
        fail::cfg_callback(point, move || {
            *hits.lock().unwrap().entry(point).or_default() += 1
        })
        .unwrap();
    }
    for mode in [ModePreference::Kernel, ModePreference::HeartbeatOnly] {
        hits.lock().unwrap().clear();
        let dir = tempfile::tempdir().unwrap();
        let store = DirectoryStore::builder(dir.path())
            .with_mode(mode)
            .build()
            .unwrap();
        let key = LeaseKey::new("k").unwrap();
        let first = block_on(store.acquire(&key, Duration::from_millis(10))).unwrap();
        let renewed = block_on(store.renew(&first, Duration::from_millis(10))).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let options = AcquireOptions::default();
        let second = block_on(store.try_acquire(&key, Duration::from_secs(5), &options)).unwrap();
        assert!(second.fencing_token() > renewed.fencing_token());
        block_on(store.release_lease(&second)).unwrap();
        let name = LeaseKey::new("resource").unwrap();
        block_on(store.fence_and_read(&name, second.fencing_token())).unwrap();
        block_on(store.put_fenced(&name, second.fencing_token(), b"v")).unwrap();
        let hits = hits.lock().unwrap().clone();
        for point in POINTS {
            assert_eq!(hits.get(point), Some(&1), "{mode:?}: {point} in {hits:?}");
        }
    }
    scenario.teardown();
}

// ---------------------------------------------------------------------------------------------
// The history checker.
// ---------------------------------------------------------------------------------------------

/// One history line (see `tests/pauser/mod.rs`).
#[derive(Clone, Debug)]
struct Event {
    pid: u32,
    key: String,
    generation: u64,
    kind: String,
    start: u64,
    end: u64,
    value: String,
    line: String,
}

fn parse_history(history: &str) -> Result<Vec<Event>, String> {
    history
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            let bad = || format!("malformed history line: {line:?}");
            if f.len() != 8 {
                return Err(bad());
            }
            Ok(Event {
                pid: f[0].parse().map_err(|_| bad())?,
                key: f[1].to_owned(),
                generation: f[2].parse().map_err(|_| bad())?,
                kind: f[3].to_owned(),
                start: f[4].parse().map_err(|_| bad())?,
                end: f[5].parse().map_err(|_| bad())?,
                value: f[6].to_owned(),
                line: line.to_owned(),
            })
        })
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Violation {
    /// Two acquisitions were given one fencing generation.
    GenerationTwice,
    /// An acquisition that provably came later got a lower generation.
    GenerationOrder,
    /// Two tenures were both trusted at one instant.
    Overlap,
    /// A fenced value went back to an older writer: a read returned a value written with a lower
    /// fence than a write acknowledged before the read began (or a refused write, or nothing),
    /// or an operation was admitted with a lower fence than one acknowledged before it began.
    FencedValueRegressed,
}

/// The fence a value was written with: values are `f<fence>.p<pid>.w<n>`.
fn fence_of(value: &str) -> Option<u64> {
    value.strip_prefix('f')?.split('.').next()?.parse().ok()
}

/// Every violation in `history`, with the lines that show it. Times are `CLOCK_MONOTONIC` of
/// one host, so `tolerance_ns` (the clock-rate allowance between processes) is zero there.
fn check_history(history: &str, tolerance_ns: u64) -> Vec<(Violation, Vec<String>)> {
    let events = match parse_history(history) {
        Ok(events) => events,
        Err(e) => panic!("{e}"),
    };
    let mut found = Vec::new();
    let mut keys: Vec<&str> = events.iter().map(|e| e.key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        let of = |kinds: &[&str]| -> Vec<&Event> {
            events
                .iter()
                .filter(|e| e.key == key && kinds.contains(&e.kind.as_str()))
                .collect()
        };
        // Generations: each issued once, and in the order the acquisitions provably happened
        // (an acquisition's rename lies between its `start` and `end`).
        let acquired = of(&["acquired"]);
        let mut by_generation: HashMap<u64, Vec<&Event>> = HashMap::new();
        for a in &acquired {
            by_generation.entry(a.generation).or_default().push(a);
        }
        let mut twice: Vec<_> = by_generation.values().filter(|v| v.len() > 1).collect();
        twice.sort_by_key(|v| v[0].generation);
        for events in twice {
            found.push((
                Violation::GenerationTwice,
                events.iter().map(|e| e.line.clone()).collect(),
            ));
        }
        for a in &acquired {
            for b in &acquired {
                if a.generation < b.generation && a.start > b.end.saturating_add(tolerance_ns) {
                    found.push((
                        Violation::GenerationOrder,
                        vec![b.line.clone(), a.line.clone()],
                    ));
                }
            }
        }
        // Trusted intervals of distinct tenures never share an instant.
        let mut intervals: Vec<&Event> = of(&["released", "lost"])
            .into_iter()
            .filter(|e| e.start < e.end)
            .collect();
        intervals.sort_by_key(|e| e.start);
        for (i, a) in intervals.iter().enumerate() {
            for b in &intervals[i + 1..] {
                if b.start.saturating_add(tolerance_ns) >= a.end {
                    break; // and so do all later ones
                }
                if (a.pid, a.generation) != (b.pid, b.generation) {
                    found.push((Violation::Overlap, vec![a.line.clone(), b.line.clone()]));
                }
            }
        }
        // Fenced values: nothing acknowledged or read goes below a fence acknowledged earlier.
        let mut fenced: Vec<&Event> = of(&["fenced-put-ok", "fenced-read"]);
        fenced.sort_by_key(|e| e.end);
        // The highest fence acknowledged (by any operation, and by writes) by the end of each.
        let highest = running_max(fenced.iter().copied());
        let writes = running_max(fenced.iter().copied().filter(|e| e.kind == "fenced-put-ok"));
        let before = |table: &[(u64, u64, &'_ Event)], at: u64| -> Option<(u64, String)> {
            let n = table.partition_point(|h| h.0.saturating_add(tolerance_ns) < at);
            n.checked_sub(1)
                .map(|i| (table[i].1, table[i].2.line.clone()))
        };
        let refused: HashMap<&str, &Event> = of(&["fenced-put-refused"])
            .into_iter()
            .map(|e| (e.value.as_str(), e))
            .collect();
        for e in &fenced {
            // Admitted below a fence acknowledged before it began.
            if let Some((fence, line)) = before(&highest, e.start)
                && fence > e.generation
            {
                found.push((Violation::FencedValueRegressed, vec![line, e.line.clone()]));
            }
            if e.kind == "fenced-put-ok" {
                continue;
            }
            // A read: its value's writer may not be older than a write acknowledged before it.
            if let Some(r) = refused.get(e.value.as_str()) {
                found.push((
                    Violation::FencedValueRegressed,
                    vec![r.line.clone(), e.line.clone()],
                ));
            }
            if let Some((fence, line)) = before(&writes, e.start) {
                let read_fence = fence_of(&e.value).unwrap_or(0);
                if read_fence < fence {
                    found.push((Violation::FencedValueRegressed, vec![line, e.line.clone()]));
                }
            }
        }
    }
    found
}

/// For operations sorted by end: each one's end, the highest fence among it and those before it,
/// and the operation that had that fence.
fn running_max<'a>(ops: impl Iterator<Item = &'a Event>) -> Vec<(u64, u64, &'a Event)> {
    let mut best: Option<&Event> = None;
    ops.map(|e| {
        let top = match best {
            Some(b) if b.generation >= e.generation => b,
            _ => e,
        };
        best = Some(top);
        (e.end, top.generation, top)
    })
    .collect()
}

fn kinds(found: &[(Violation, Vec<String>)]) -> Vec<Violation> {
    let mut kinds: Vec<Violation> = found.iter().map(|f| f.0).collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// A clean history: two tenures one after the other, a takeover after a loss, fenced work.
const CLEAN: &str = "\
10 k 1 acquired 100 110 - -
10 k 1 fenced-read 120 125 none -
10 k 1 fenced-put-ok 130 140 f1.p10.w1 -
10 k 1 fenced-read 141 150 f1.p10.w1 -
10 k 1 released 110 200 - -
11 k 2 acquired 190 210 - -
11 k 2 fenced-read 220 230 f1.p10.w1 -
11 k 2 fenced-put-ok 231 240 f2.p11.w1 -
11 k 2 lost 210 300 - deadline
12 k 3 acquired 290 350 - -
10 k 1 fenced-put-refused 330 340 f1.p10.w2 fenced
12 k 3 fenced-read 360 370 f2.p11.w1 -
12 k 3 released 350 400 - -
";

#[test]
fn checker_passes_a_clean_history() {
    assert_eq!(check_history(CLEAN, 0), vec![]);
    // Touching intervals (one ends where the next starts) do not overlap.
    let touching = "1 k 1 released 0 100 - -\n2 k 2 released 100 200 - -\n";
    assert_eq!(check_history(touching, 0), vec![]);
    // An empty interval (a lease that was stale when acquired) overlaps nothing.
    let empty = "1 k 1 lost 150 120 - -\n2 k 2 released 100 200 - -\n";
    assert_eq!(check_history(empty, 0), vec![]);
}

#[test]
fn checker_reports_each_violation() {
    let with = |line: &str| format!("{CLEAN}{line}\n");
    let cases = [
        // Generation 3 issued again (at about the same time: no order to break).
        ("13 k 3 acquired 295 345 - -", Violation::GenerationTwice),
        // Acquired after generation 3 was, yet lower.
        ("13 k 0 acquired 500 510 - -", Violation::GenerationOrder),
        // Trusted while pid 11 held generation 2.
        ("13 k 9 released 215 220 - -", Violation::Overlap),
        // An older writer acknowledged after fence 2 was.
        (
            "10 k 1 fenced-put-ok 380 390 f1.p10.w3 -",
            Violation::FencedValueRegressed,
        ),
        // A read returning the fence-1 value after the fence-2 write was acknowledged.
        (
            "12 k 3 fenced-read 380 390 f1.p10.w1 -",
            Violation::FencedValueRegressed,
        ),
        // A read returning a write that was refused.
        (
            "12 k 3 fenced-read 380 390 f1.p10.w2 -",
            Violation::FencedValueRegressed,
        ),
        // A read returning nothing after a write was acknowledged.
        (
            "12 k 3 fenced-read 380 390 none -",
            Violation::FencedValueRegressed,
        ),
        // An older reader admitted after fence 3 was.
        (
            "11 k 2 fenced-read 380 390 f2.p11.w1 -",
            Violation::FencedValueRegressed,
        ),
    ];
    for (line, violation) in cases {
        let found = check_history(&with(line), 0);
        assert_eq!(kinds(&found), vec![violation], "{line}: {found:?}");
        assert!(
            found
                .iter()
                .any(|(_, lines)| lines.iter().any(|l| l == line)),
            "{line} is named: {found:?}"
        );
    }
    // Keys are checked apart: the same generation under two keys is fine.
    let two_keys = "1 a 1 acquired 0 10 - -\n2 b 1 acquired 0 10 - -\n";
    assert_eq!(check_history(two_keys, 0), vec![]);
    // The tolerance forgives overlaps and reorderings no longer than itself.
    let skewed = "1 k 1 released 0 105 - -\n2 k 2 released 100 200 - -\n";
    assert_eq!(kinds(&check_history(skewed, 0)), vec![Violation::Overlap]);
    assert_eq!(check_history(skewed, 5), vec![]);
}

// ---------------------------------------------------------------------------------------------
// Real processes pausing at every fault point.
// ---------------------------------------------------------------------------------------------

mod pauser;

/// The pauser processes: this test binary run again ([`pauser::command`]); does nothing here.
#[test]
fn pauser_process() {
    pauser::run_if_asked();
}

/// The lease duration and stale threshold: every pause outlasts it almost three times.
const STALE_MS: u64 = 250;
const HEARTBEAT_MS: u64 = 50;
const PAUSE_MS: u64 = 700;
/// How long each process contends (a tenure under way then ends, paused or not).
const RUN_MS: u64 = 2500;
const MODES: [&str; 2] = ["kernel", "heartbeat-only"];
/// `FileLock`; `DirectoryStore` kept by lease-core's keeper; `DirectoryStore` renewed explicitly.
const FACES: [&str; 3] = ["lock", "keeper", "renew"];

/// For these points the others start only after the pausing process's first pause ends, so that
/// the rename it paused before still succeeds (nobody changed the state meanwhile), on a lease
/// whose deadline passed during the pause: that time must not be trusted, and the others may
/// take the lease over the moment they start. (Its later pause is contended: the rename fails.)
const LONE_FIRST_PAUSE: [&str; 2] = ["lease-file/before-acquire", "lease-file/before-renew"];

/// One run at a time: each runs 18 processes on a machine that may have two cores.
static ONE_RUN: Mutex<()> = Mutex::new(());

/// Children killed and reaped when dropped, however the test ends.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// With `LEASE_FILE_PAUSES_KEEP=<dir>`, the histories are copied there at the end (even on
/// failure), one directory per round and combination.
struct Keep<'a>(&'a Path, &'static str);

impl Drop for Keep<'_> {
    fn drop(&mut self) {
        if let Some(to) = std::env::var_os("LEASE_FILE_PAUSES_KEEP") {
            let to = Path::new(&to).join(self.1);
            let _ = std::fs::create_dir_all(to.parent().unwrap_or(Path::new(".")));
            let _ = Command::new("cp").arg("-r").arg(self.0).arg(to).status();
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Combo {
    point: &'static str,
    mode: &'static str,
    face: &'static str,
    /// The pausing process ignores its loss (and pauses at `before-renew`).
    broken: bool,
}

#[derive(Debug)]
struct Outcome {
    combo: Combo,
    runs: u32,
    acquisitions: usize,
    /// How many of the three processes acquired at least once.
    acquirers: usize,
    /// Pauses at the combination's fault point, and at others (the expiry drivers).
    pauses: usize,
    other_pauses: usize,
    lost: usize,
    refused: usize,
    violations: Vec<(Violation, Vec<String>)>,
}

/// `FAILPOINTS` of process `i` of `combo`: process 0 pauses at the point on its first and fourth
/// evaluation; the others only keep acquiring, renewing and releasing, except that for
/// `before-takeover` they also pause once at a renewal, so that there are stale leases to take
/// over.
fn failpoints(combo: &Combo, i: usize) -> Option<String> {
    let point = combo.point;
    let pause = format!("sleep({PAUSE_MS})");
    match i {
        0 if combo.broken => Some(format!("lease-file/before-renew=1*{pause}")),
        0 => Some(format!("{point}=1*{pause}->2*off->1*{pause}")),
        // A paused renewal leaves a lease to go stale on every face (the pauser releases late
        // after a failed check).
        1 if point == "lease-file/before-takeover" => {
            Some(format!("lease-file/before-renew=2*off->1*{pause}"))
        }
        2 if point == "lease-file/before-takeover" => {
            Some(format!("lease-file/before-renew=6*off->1*{pause}"))
        }
        _ => None,
    }
}

fn combo_dir(base: &Path, round: usize, combo: &Combo) -> std::path::PathBuf {
    let point = combo.point.trim_start_matches("lease-file/");
    let broken = if combo.broken { "-broken" } else { "" };
    base.join(format!(
        "r{round}-{point}-{}-{}{broken}",
        combo.mode, combo.face
    ))
}

/// Runs every combination at once, three processes each, and checks each history.
fn run_round(combos: &[Combo], base: &Path, round: usize) -> Vec<Outcome> {
    let mut children = Children(Vec::new());
    let mut spawned = Vec::new();
    for (c, combo) in combos.iter().enumerate() {
        let dir = combo_dir(base, round, combo);
        std::fs::create_dir_all(&dir).unwrap();
        let history = dir.join("history");
        for i in 0..3 {
            let stderr = dir.join(format!("stderr.{i}"));
            let mut args: Vec<String> = vec![combo.face.to_owned(), combo.mode.to_owned()];
            args.push(dir.join("work").display().to_string());
            args.push(history.display().to_string());
            args.extend([RUN_MS, STALE_MS, HEARTBEAT_MS].map(|n| n.to_string()));
            // The pausing process looks the most often: it is the one to reach its point.
            args.push(if i == 0 { "1" } else { "4" }.to_owned());
            if combo.broken && i == 0 {
                // Long enough to outlive its paused renewal and the takeover that follows.
                args.extend([format!("hold={}", 4 * STALE_MS), "broken".to_owned()]);
            }
            if combo.point == "lease-file/before-takeover" && i > 0 {
                // Still holding when the paused renewal lets the deadline pass.
                args.push(format!("hold={}", 3 * STALE_MS));
            }
            if LONE_FIRST_PAUSE.contains(&combo.point) && i > 0 && !combo.broken {
                args.push(format!("start={}", PAUSE_MS + 100));
            }
            let mut command = pauser::command(&args);
            command
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&stderr).unwrap());
            match failpoints(combo, i) {
                Some(f) => command.env("FAILPOINTS", f),
                None => command.env_remove("FAILPOINTS"),
            };
            children.0.push(command.spawn().unwrap());
            spawned.push((c, stderr));
        }
    }
    let deadline = Instant::now() + Duration::from_millis(RUN_MS) + Duration::from_secs(20);
    let mut statuses = vec![None; children.0.len()];
    while statuses.iter().any(Option::is_none) {
        for (status, child) in statuses.iter_mut().zip(&mut children.0) {
            if status.is_none() {
                *status = child.try_wait().unwrap();
            }
        }
        assert!(
            Instant::now() < deadline,
            "pausers still running after 20 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for (status, (c, stderr)) in statuses.iter().zip(&spawned) {
        let status = status.unwrap();
        assert!(
            status.success(),
            "{:?}: a pauser failed ({status}): {}",
            combos[*c],
            std::fs::read_to_string(stderr).unwrap_or_default()
        );
    }
    combos
        .iter()
        .map(|combo| {
            let history =
                std::fs::read_to_string(combo_dir(base, round, combo).join("history")).unwrap();
            let events = parse_history(&history).unwrap();
            let count = |f: &dyn Fn(&Event) -> bool| events.iter().filter(|e| f(e)).count();
            let target = if combo.broken {
                "lease-file/before-renew"
            } else {
                combo.point
            };
            Outcome {
                combo: *combo,
                runs: 1,
                acquisitions: count(&|e| e.kind == "acquired"),
                acquirers: {
                    let mut pids: Vec<u32> = events
                        .iter()
                        .filter(|e| e.kind == "acquired")
                        .map(|e| e.pid)
                        .collect();
                    pids.sort_unstable();
                    pids.dedup();
                    pids.len()
                },
                pauses: count(&|e| e.kind == "pause" && e.value == target),
                other_pauses: count(&|e| e.kind == "pause" && e.value != target),
                lost: count(&|e| e.kind == "check-failed"),
                refused: count(&|e| e.kind.ends_with("-refused")),
                violations: check_history(&history, 0),
            }
        })
        .collect()
}

fn table(outcomes: &[Outcome]) -> String {
    let mut out = String::from(
        "fault point                 mode            face    runs  acquired (procs)  paused (+other)  \
         checks failed  refused  violations\n",
    );
    for o in outcomes {
        out.push_str(&format!(
            "{:<27} {:<15} {:<7} {:>4}  {:>8} ({:>5})  {:>6} (+{:>4})  {:>13}  {:>7}  {:>10}\n",
            o.combo.point,
            o.combo.mode,
            o.combo.face,
            o.runs,
            o.acquisitions,
            o.acquirers,
            o.pauses,
            o.other_pauses,
            o.lost,
            o.refused,
            o.violations.len()
        ));
    }
    out
}

/// Each fault point in turn, in both modes, on every face: one process pauses there for almost
/// three lease durations while two others contend, and the merged history of all three shows no
/// generation issued twice or out of order, no two trusted intervals sharing an instant and no
/// fenced value going back to an older writer.
#[test]
fn pauses_at_every_fault_point_break_nothing() {
    let _one = ONE_RUN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let started = Instant::now();
    let base = tempfile::tempdir().unwrap();
    let _keep = Keep(base.path(), "pauses");
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut round = 0;
    for point in POINTS {
        let mut combos = Vec::new();
        for mode in MODES {
            for face in FACES {
                combos.push(Combo {
                    point,
                    mode,
                    face,
                    broken: false,
                });
            }
        }
        let mut results = run_round(&combos, base.path(), round);
        round += 1;
        // A combination whose pause was never reached tested nothing: run it again.
        for _ in 0..2 {
            let missed: Vec<Combo> = results
                .iter()
                .filter(|o| o.pauses == 0)
                .map(|o| o.combo)
                .collect();
            if missed.is_empty() {
                break;
            }
            for again in run_round(&missed, base.path(), round) {
                let o = results.iter_mut().find(|o| o.combo == again.combo).unwrap();
                o.runs += 1;
                o.acquisitions += again.acquisitions;
                o.acquirers = o.acquirers.max(again.acquirers);
                o.pauses += again.pauses;
                o.other_pauses += again.other_pauses;
                o.lost += again.lost;
                o.refused += again.refused;
                o.violations.extend(again.violations);
            }
            round += 1;
        }
        outcomes.extend(results);
    }
    let report = table(&outcomes);
    println!("{report}in {:?}", started.elapsed());
    for o in &outcomes {
        assert!(
            o.violations.is_empty(),
            "{:?}: {} violations, first: {:#?}\n{report}",
            o.combo,
            o.violations.len(),
            &o.violations[..o.violations.len().min(5)]
        );
        assert!(
            o.pauses > 0,
            "{:?} never reached its pause\n{report}",
            o.combo
        );
        assert!(
            o.acquirers >= 2,
            "{:?}: only {} process(es) ever acquired\n{report}",
            o.combo,
            o.acquirers
        );
    }
}

/// The harness can see a real violation: a holder that ignores its failed checks (and its lost
/// callback) and keeps claiming trust through a paused renewal overlaps the process that took its
/// lease over, on every face and in both modes.
#[test]
fn a_holder_that_ignores_its_loss_is_caught() {
    let _one = ONE_RUN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let base = tempfile::tempdir().unwrap();
    let _keep = Keep(base.path(), "broken");
    let mut combos = Vec::new();
    for mode in MODES {
        for face in FACES {
            combos.push(Combo {
                point: "lease-file/before-renew",
                mode,
                face,
                broken: true,
            });
        }
    }
    let outcomes = run_round(&combos, base.path(), 0);
    println!("{}", table(&outcomes));
    for o in &outcomes {
        let overlaps: Vec<_> = o
            .violations
            .iter()
            .filter(|v| v.0 == Violation::Overlap)
            .collect();
        assert!(
            !overlaps.is_empty(),
            "{:?}: the broken holder was not caught: {:?}",
            o.combo,
            o.violations
        );
        println!("{:?} {:?}: {:?}", o.combo.mode, o.combo.face, overlaps[0]);
    }
}

// ---------------------------------------------------------------------------------------------
// Counting leases: a slot's holder paused inside a request, in-process on a manual clock.
// ---------------------------------------------------------------------------------------------

/// The lease of every counting-lease slot here; pauses move the manual clock by twice this.
const SLOT_LEASE: Duration = Duration::from_secs(10);

/// Clients of one counting lease, each with a store of its own on one directory and one manual
/// clock, and what they were granted: the invariant is checked after every step.
struct Slots {
    clock: Arc<lease_core::ManualClock>,
    stores: Vec<DirectoryStore>,
    counting: lease_core::CountingLease,
    /// What each client believes it holds: (slot, lease).
    held: Mutex<HashMap<usize, (u32, lease_core::Lease)>>,
    /// Every fencing token granted, per slot, in the order granted.
    granted: Mutex<HashMap<u32, Vec<lease_core::FencingToken>>>,
}

impl Slots {
    fn new(dir: &Path, mode: ModePreference, clients: usize, limit: u32) -> Self {
        let clock = Arc::new(lease_core::ManualClock::new());
        let stores = (0..clients)
            .map(|_| {
                DirectoryStore::builder(dir)
                    .with_mode(mode)
                    .with_clock(clock.clone())
                    .build()
                    .unwrap()
            })
            .collect();
        let name = LeaseKey::new("backfill").unwrap();
        Self {
            clock,
            stores,
            counting: lease_core::CountingLease::new(name, limit).unwrap(),
            held: Mutex::default(),
            granted: Mutex::default(),
        }
    }

    /// One attempt of `client` to take a slot, as a counting lease's guard makes it (each slot
    /// in turn, here from slot 0), keeping the raw lease to renew by hand on the manual clock;
    /// records (and checks the fencing of) a grant.
    fn try_acquire(&self, client: usize) -> Result<u32, lease_core::LeaseError> {
        let once = AcquireOptions::default();
        let mut busy = None;
        let mut granted = None;
        for slot in 0..self.counting.limit() {
            let key = self.counting.slot_key(slot).unwrap();
            match block_on(self.stores[client].try_acquire(key, SLOT_LEASE, &once)) {
                Ok(lease) => {
                    granted = Some(lease);
                    break;
                }
                Err(error) if error.is_held() => busy = Some(error),
                Err(error) => return Err(error),
            }
        }
        let Some(lease) = granted else {
            return Err(busy.unwrap());
        };
        let slot = self.counting.slot_of(lease.key()).unwrap();
        let mut granted = self.granted.lock().unwrap();
        let tokens = granted.entry(slot).or_default();
        if let Some(last) = tokens.last() {
            assert!(
                lease.fencing_token() > *last,
                "slot {slot}: fencing token {} granted after {last}",
                lease.fencing_token()
            );
        }
        tokens.push(lease.fencing_token());
        self.held.lock().unwrap().insert(client, (slot, lease));
        Ok(slot)
    }

    /// `client` renews its slot; a refusal ends its belief that it holds it.
    fn renew(&self, client: usize) -> Result<(), lease_core::LeaseError> {
        let (slot, lease) = self.held.lock().unwrap().get(&client).cloned().unwrap();
        match block_on(self.stores[client].renew(&lease, SLOT_LEASE)) {
            Ok(renewed) => {
                assert_eq!(renewed.fencing_token(), lease.fencing_token());
                self.held.lock().unwrap().insert(client, (slot, renewed));
                Ok(())
            }
            Err(error) => {
                self.held.lock().unwrap().remove(&client);
                Err(error)
            }
        }
    }

    /// The promise at this instant: no slot trusted twice, at most N trusted.
    fn check(&self, step: &str) {
        let held = self.held.lock().unwrap();
        let limit = self.counting.limit();
        let result = lease_core::conformance::counting_model::check_trusted_slots(
            self.clock.as_ref(),
            held.values().map(|(slot, lease)| (*slot, limit, lease)),
        );
        if let Err(violation) = result {
            panic!("after {step}: {violation}");
        }
    }

    /// How many clients trust their slot now.
    fn trusting(&self) -> usize {
        let held = self.held.lock().unwrap();
        held.values()
            .filter(|(_, lease)| self.clock.monotonic() < lease.deadline())
            .count()
    }

    /// Runs `call` on a thread of its own that stops at `point` (only there, and only once);
    /// while it is stopped, the clock moves past every lease's end and `meanwhile` runs; then
    /// the call resumes. Panics if the call never reached the point.
    fn paused<T: Send>(
        &self,
        point: &'static str,
        call: impl FnOnce() -> T + Send,
        meanwhile: impl FnOnce(),
    ) -> T {
        let (paused_tx, paused) = std::sync::mpsc::channel::<()>();
        let (go, go_rx) = std::sync::mpsc::channel::<()>();
        let armed = Mutex::new(Some((paused_tx, go_rx)));
        fail::cfg_callback(point, move || {
            if std::thread::current().name() != Some("paused") {
                return;
            }
            let taken = armed.lock().unwrap().take();
            if let Some((paused_tx, go_rx)) = taken {
                paused_tx.send(()).unwrap();
                go_rx.recv().unwrap();
            }
        })
        .unwrap();
        let out = std::thread::scope(|scope| {
            let paused_call = std::thread::Builder::new()
                .name("paused".to_owned())
                .spawn_scoped(scope, call)
                .unwrap();
            let reached = paused.recv_timeout(Duration::from_secs(5)).is_ok();
            if reached {
                self.clock.advance(2 * SLOT_LEASE);
                meanwhile();
                go.send(()).unwrap();
            }
            let out = paused_call.join().unwrap();
            assert!(reached, "the call never reached {point}");
            out
        });
        fail::remove(point);
        out
    }
}

/// A counting lease's promise holds when a slot's holder is paused past its lease's end inside
/// its own acquire, takeover or renewal (at the fault point right before the rename), whether or
/// not another client takes the slot meanwhile: never two trusted holders of one slot, never
/// more than N trusted, fencing per slot strictly increasing; and the paused holder never trusts
/// a slot another has. In both modes, about 0.1 s in all.
#[test]
fn counting_lease_holders_paused_inside_a_request_break_nothing() {
    let scenario = fail::FailScenario::setup();
    for mode in [ModePreference::Kernel, ModePreference::HeartbeatOnly] {
        // Renewal paused while another takes the slot over: the renewal is refused.
        let dir = tempfile::tempdir().unwrap();
        let s = Slots::new(dir.path(), mode, 3, 2);
        let a = s.try_acquire(0).unwrap();
        s.try_acquire(1).unwrap();
        let renewed = s.paused(
            "lease-file/before-renew",
            || s.renew(0),
            || {
                s.renew(1).unwrap_err(); // expired too: the pause outlasted every lease
                s.check("the pause");
                assert_eq!(s.try_acquire(2).unwrap(), a, "{mode:?}: the paused slot");
                s.check("the takeover of the paused slot");
            },
        );
        assert!(renewed.unwrap_err().is_not_owned(), "{mode:?}");
        s.check("the paused renewal");
        assert_eq!(s.trusting(), 1, "{mode:?}");

        // Renewal paused with nobody else about: it may land, but grants no trust past the
        // lease's end, and the slot is free to take at once.
        let dir = tempfile::tempdir().unwrap();
        let s = Slots::new(dir.path(), mode, 2, 1);
        s.try_acquire(0).unwrap();
        let _ = s.paused("lease-file/before-renew", || s.renew(0), || {});
        s.check("the paused renewal");
        assert_eq!(s.trusting(), 0, "{mode:?}: trusted after a paused renewal");
        assert_eq!(s.try_acquire(1).unwrap(), 0);
        s.check("the takeover");
        assert_eq!(s.trusting(), 1, "{mode:?}");
        let _ = s.renew(0);
        s.check("the paused holder's next renewal");

        // Acquisition of a free slot paused while another client takes every slot: the
        // paused rename fails, and the acquisition finds no slot (or one it may take).
        let dir = tempfile::tempdir().unwrap();
        let s = Slots::new(dir.path(), mode, 3, 2);
        s.try_acquire(1).unwrap();
        let got = s.paused(
            "lease-file/before-acquire",
            || s.try_acquire(0),
            || {
                s.try_acquire(2).unwrap();
                s.check("the acquisition during the pause");
                s.renew(2).unwrap();
                s.check("a renewal during the pause");
            },
        );
        s.check("the paused acquisition");
        if let Err(error) = got {
            assert!(error.is_held(), "{mode:?}: {error}");
        }
        assert!(s.trusting() <= 2, "{mode:?}");

        // Acquisition paused past its own lease's end, nobody about: its rename lands on a
        // lease already over, trusted by nobody, which another takes over at once.
        let dir = tempfile::tempdir().unwrap();
        let s = Slots::new(dir.path(), mode, 2, 1);
        let got = s.paused("lease-file/before-acquire", || s.try_acquire(0), || {});
        s.check("the paused acquisition");
        assert_eq!(got.unwrap(), 0);
        assert_eq!(
            s.trusting(),
            0,
            "{mode:?}: trusted a lease granted after its end"
        );
        assert_eq!(s.try_acquire(1).unwrap(), 0, "{mode:?}: taken over");
        s.check("the takeover");
        assert!(s.renew(0).unwrap_err().is_not_owned(), "{mode:?}");

        // Takeover of an expired slot paused while another client takes it over first.
        let dir = tempfile::tempdir().unwrap();
        let s = Slots::new(dir.path(), mode, 3, 1);
        s.try_acquire(1).unwrap();
        s.clock.advance(2 * SLOT_LEASE);
        let got = s.paused(
            "lease-file/before-takeover",
            || s.try_acquire(0),
            || {
                s.try_acquire(2).unwrap();
                s.check("the other takeover");
            },
        );
        s.check("the paused takeover");
        assert!(got.unwrap_err().is_held(), "{mode:?}");
        assert_eq!(s.trusting(), 1, "{mode:?}");
        assert_eq!(s.granted.lock().unwrap()[&0].len(), 2, "{mode:?}");
    }
    scenario.teardown();
}

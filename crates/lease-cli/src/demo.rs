//! `lease demo`: a fleet of worker processes sharing units of work, one killed, partitions moving.
//!
//! The parent starts `--workers` copies of this binary (`lease demo-worker`, hidden), each a
//! lessor-partition worker on the same store. Every worker prints, once per interval, the units
//! it owns as one JSON line on stdout; the parent merges those lines into a view of the whole
//! fleet, prints a row whenever the view changes, SIGKILLs one worker once the fleet is balanced,
//! and reports how long balancing and takeover took. Workers exit when their stdin closes, so
//! they never outlive the parent.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::cli::{DemoArgs, DemoWorkerArgs};
use crate::duration::fmt_duration;
use crate::exit::Failure;
use crate::out::outln;

/// The least time a phase (first balance, takeover) is given before the demo gives up.
const PHASE_FLOOR: Duration = Duration::from_secs(12);

/// The longest a phase may take before the demo gives up: a takeover needs a lease duration (the
/// killed worker's session must be judged dead) plus a few intervals to take and rebalance, so
/// the limit scales with both: two lease durations plus eight intervals, at least
/// [`PHASE_FLOOR`].
fn phase_limit(ttl: Duration, interval: Duration) -> Duration {
    (ttl * 2 + interval * 8).max(PHASE_FLOOR)
}

/// What a worker last said it owns.
#[derive(Debug, Clone, Default)]
struct Report {
    units: BTreeSet<u32>,
    /// The fencing token of each owned unit: a new token is a new ownership.
    fencing: BTreeMap<u32, u64>,
    /// Why the worker stopped, when it could not run (its first error).
    error: Option<String>,
}

/// `lease demo`.
pub(crate) async fn demo(args: DemoArgs) -> Result<u8, Failure> {
    let started = Instant::now();
    let store = DemoStore::create(&args)?;
    let fleet = format!("demo-{}-{}", std::process::id(), unix_millis());
    outln!(
        "lease demo: {} worker processes share {} units on the {} (leases {}, rebalance every {})",
        args.workers,
        args.units,
        store.describe(),
        fmt_duration(args.ttl),
        fmt_duration(args.interval),
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut workers = Vec::new();
    for index in 0..args.workers {
        match spawn_worker(&args, &store, &fleet, index, tx.clone()) {
            Ok(child) => workers.push(Some(child)),
            Err(failure) => {
                shutdown(&mut workers).await;
                store.remove();
                return Err(failure);
            }
        }
    }
    drop(tx);
    let mut view = View::new(args.workers, args.units);
    let outcome = drive(&args, &mut view, &mut workers, &mut rx, started).await;
    shutdown(&mut workers).await;
    store.remove();
    let figures = outcome?;
    outln!();
    outln!("summary");
    outln!(
        "  time to balance    {} ({} workers, {} units each)",
        fmt_ms(figures.balanced),
        args.workers,
        fmt_share(args.units, args.workers)
    );
    outln!(
        "  takeover time      {} (every unit of the killed worker owned again)",
        fmt_ms(figures.takeover)
    );
    outln!(
        "  rebalanced after   {} ({} workers, {} units each)",
        fmt_ms(figures.rebalanced),
        args.workers - 1,
        fmt_share(args.units, args.workers - 1)
    );
    outln!(
        "  moves              {} while converging, {} after the kill ({} units were the killed worker's)",
        figures.moves_converging,
        figures.moves_after_kill,
        figures.victim_units
    );
    outln!("  total              {}", fmt_ms(started.elapsed()));
    Ok(0)
}

/// The figures of one demo run.
#[derive(Debug)]
struct Figures {
    balanced: Duration,
    takeover: Duration,
    rebalanced: Duration,
    moves_converging: usize,
    moves_after_kill: usize,
    victim_units: usize,
}

/// The phases: converge, kill one, watch takeover and rebalance.
async fn drive(
    args: &DemoArgs,
    view: &mut View,
    workers: &mut [Option<Child>],
    rx: &mut mpsc::UnboundedReceiver<(u32, Report)>,
    started: Instant,
) -> Result<Figures, Failure> {
    let mut tick = tokio::time::interval(args.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    view.print_header();

    // Phase 1: converge.
    let phase = phase_limit(args.ttl, args.interval);
    let balanced = watch(view, rx, &mut tick, started, "balance", phase).await?;
    outln!("balanced after {}", fmt_ms(balanced));
    let moves_converging = view.moves;

    // Hold for a few rounds to show the assignment is stable.
    let hold_until = Instant::now() + (args.interval * 4).max(Duration::from_secs(1));
    while Instant::now() < hold_until {
        tokio::select! {
            report = rx.recv() => match report {
                Some((worker, report)) => {
                    worker_failed(worker, &report)?;
                    view.update(worker, report);
                }
                None => return Err(Failure::internal("every worker exited")),
            },
            _ = tick.tick() => view.print_if_changed(started),
        }
    }

    // Phase 2: kill the worker with the most units (the last one on ties).
    let victim = view.busiest();
    let victim_units = view.reports.get(&victim).map_or(0, |r| r.units.len());
    let Some(child) = workers.get_mut(victim as usize).and_then(Option::take) else {
        return Err(Failure::internal("the worker to kill is gone"));
    };
    let pid = child.id().unwrap_or_default();
    let killed_at = Instant::now();
    kill_now(child).await;
    view.kill(victim);
    outln!(
        "{:>7}  SIGKILL {} (pid {pid}), which held {victim_units} units: {}",
        fmt_ms(started.elapsed()),
        worker_name(victim),
        ranges(view.victim_units.iter().copied())
    );
    let moves_before_kill = view.moves;
    let (takeover, rebalanced) =
        watch_takeover(view, rx, &mut tick, started, killed_at, phase).await?;
    outln!(
        "takeover after {}, rebalanced after {}",
        fmt_ms(takeover),
        fmt_ms(rebalanced)
    );
    Ok(Figures {
        balanced,
        takeover,
        rebalanced,
        moves_converging,
        moves_after_kill: view.moves - moves_before_kill,
        victim_units,
    })
}

/// The first error a worker reported: the demo stops with it (it names the store, the cause and,
/// for a missing DynamoDB table, the fix).
fn worker_failed(worker: u32, report: &Report) -> Result<(), Failure> {
    match &report.error {
        Some(error) => Err(Failure::unavailable(format!(
            "{} failed: {error}",
            worker_name(worker)
        ))),
        None => Ok(()),
    }
}

/// Until the view is balanced; returns the time since `started`.
async fn watch(
    view: &mut View,
    rx: &mut mpsc::UnboundedReceiver<(u32, Report)>,
    tick: &mut tokio::time::Interval,
    started: Instant,
    goal: &str,
    phase: Duration,
) -> Result<Duration, Failure> {
    let limit = Instant::now() + phase;
    loop {
        tokio::select! {
            report = rx.recv() => match report {
                Some((worker, report)) => {
                    worker_failed(worker, &report)?;
                    view.update(worker, report);
                }
                None => return Err(Failure::internal("every worker exited")),
            },
            _ = tick.tick() => {
                view.print_if_changed(started);
                if view.is_balanced() {
                    return Ok(started.elapsed());
                }
                if Instant::now() > limit {
                    return Err(Failure::internal(format!(
                        "the fleet did not {goal} within {}; still free: {}",
                        fmt_duration(phase),
                        ranges(view.free())
                    )));
                }
            }
        }
    }
}

/// Until the victim's units are all owned again, then until balanced; both since `killed_at`.
async fn watch_takeover(
    view: &mut View,
    rx: &mut mpsc::UnboundedReceiver<(u32, Report)>,
    tick: &mut tokio::time::Interval,
    started: Instant,
    killed_at: Instant,
    phase: Duration,
) -> Result<(Duration, Duration), Failure> {
    let limit = Instant::now() + phase;
    let mut takeover = None;
    loop {
        tokio::select! {
            report = rx.recv() => match report {
                Some((worker, report)) => {
                    worker_failed(worker, &report)?;
                    view.update(worker, report);
                    if takeover.is_none() && view.victim_units_owned() {
                        takeover = Some(killed_at.elapsed());
                    }
                }
                None => return Err(Failure::internal("every worker exited")),
            },
            _ = tick.tick() => {
                view.print_if_changed(started);
                if let Some(takeover) = takeover
                    && view.is_balanced()
                {
                    return Ok((takeover, killed_at.elapsed()));
                }
                if Instant::now() > limit {
                    return Err(Failure::internal(format!(
                        "the fleet did not take over the killed worker's units and rebalance \
                         within {}; still free: {}",
                        fmt_duration(phase),
                        ranges(view.free())
                    )));
                }
            }
        }
    }
}

/// The fleet as the parent sees it: each live worker's last report.
#[derive(Debug)]
struct View {
    workers: u32,
    units: u32,
    reports: BTreeMap<u32, Report>,
    dead: BTreeSet<u32>,
    /// The latest fencing token seen for each unit.
    fencing: BTreeMap<u32, u64>,
    moves: usize,
    victim_units: BTreeSet<u32>,
    printed: Option<String>,
}

impl View {
    fn new(workers: u32, units: u32) -> Self {
        Self {
            workers,
            units,
            reports: BTreeMap::new(),
            dead: BTreeSet::new(),
            fencing: BTreeMap::new(),
            moves: 0,
            victim_units: BTreeSet::new(),
            printed: None,
        }
    }

    fn update(&mut self, worker: u32, report: Report) {
        if self.dead.contains(&worker) {
            return;
        }
        // A move is a new ownership (a higher fencing token) of a unit that had an owner
        // before; counting by token is immune to reports arriving out of order.
        for (unit, fencing) in &report.fencing {
            match self.fencing.get(unit) {
                None => {
                    self.fencing.insert(*unit, *fencing);
                }
                Some(before) if before < fencing => {
                    self.fencing.insert(*unit, *fencing);
                    self.moves += 1;
                }
                Some(_) => {}
            }
        }
        self.reports.insert(worker, report);
    }

    fn kill(&mut self, worker: u32) {
        self.dead.insert(worker);
        if let Some(report) = self.reports.remove(&worker) {
            self.victim_units = report.units;
        }
    }

    fn live(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.workers).filter(|w| !self.dead.contains(w))
    }

    /// The live worker with the most units; the highest-numbered on ties.
    fn busiest(&self) -> u32 {
        self.live()
            .max_by_key(|w| (self.reports.get(w).map_or(0, |r| r.units.len()), *w))
            .unwrap_or(0)
    }

    fn victim_units_owned(&self) -> bool {
        self.victim_units
            .iter()
            .all(|unit| self.reports.values().any(|r| r.units.contains(unit)))
    }

    /// Every unit owned by exactly one live worker, and every live worker within one of a fair
    /// share.
    fn is_balanced(&self) -> bool {
        let live: Vec<u32> = self.live().collect();
        if live.is_empty() || live.iter().any(|w| !self.reports.contains_key(w)) {
            return false;
        }
        let mut seen = BTreeSet::new();
        for report in self.reports.values() {
            for unit in &report.units {
                if !seen.insert(*unit) {
                    return false;
                }
            }
        }
        let count = u32::try_from(live.len()).unwrap_or(u32::MAX);
        let low = self.units / count;
        let high = low + u32::from(!self.units.is_multiple_of(count));
        seen.len() == self.units as usize
            && self.reports.values().all(|r| {
                let n = u32::try_from(r.units.len()).unwrap_or(u32::MAX);
                (low..=high).contains(&n)
            })
    }

    /// Units no live worker reports.
    fn free(&self) -> Vec<u32> {
        (0..self.units)
            .filter(|unit| !self.reports.values().any(|r| r.units.contains(unit)))
            .collect()
    }

    fn print_header(&self) {
        let mut line = format!("{:>7}", "time");
        for worker in 0..self.workers {
            line.push_str(&format!("  {:<18}", worker_name(worker)));
        }
        line.push_str("  free");
        outln!("{}", line.trim_end());
    }

    fn row(&self) -> String {
        let mut line = String::new();
        let mut owned = BTreeSet::new();
        for worker in 0..self.workers {
            let cell = if self.dead.contains(&worker) {
                "killed".to_owned()
            } else {
                match self.reports.get(&worker) {
                    None => "starting".to_owned(),
                    Some(report) => {
                        owned.extend(report.units.iter().copied());
                        format!(
                            "{:>2} {}",
                            report.units.len(),
                            ranges(report.units.iter().copied())
                        )
                    }
                }
            };
            line.push_str(&format!("  {cell:<18}"));
        }
        let free = (0..self.units).filter(|u| !owned.contains(u)).count();
        line.push_str(&format!("  {free}"));
        line
    }

    fn print_if_changed(&mut self, started: Instant) {
        let row = self.row();
        if self.printed.as_deref() != Some(row.as_str()) {
            outln!("{:>7}{}", fmt_ms(started.elapsed()), row.trim_end());
            self.printed = Some(row);
        }
    }
}

/// `0-3,8,10-12`: a set of unit numbers as ranges.
fn ranges(units: impl IntoIterator<Item = u32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(u32, u32)> = None;
    for unit in units {
        run = match run {
            Some((first, last)) if unit == last + 1 => Some((first, unit)),
            Some(done) => {
                parts.push(fmt_run(done));
                Some((unit, unit))
            }
            None => Some((unit, unit)),
        };
    }
    parts.extend(run.map(fmt_run));
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(",")
    }
}

fn fmt_run((first, last): (u32, u32)) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}-{last}")
    }
}

fn fmt_ms(duration: Duration) -> String {
    format!("{:.2}s", duration.as_secs_f64())
}

fn fmt_share(units: u32, workers: u32) -> String {
    let low = units / workers.max(1);
    if units.is_multiple_of(workers.max(1)) {
        low.to_string()
    } else {
        format!("{low}-{}", low + 1)
    }
}

fn worker_name(index: u32) -> String {
    format!("worker-{}", index + 1)
}

fn parse_unit(name: &str) -> Option<u32> {
    name.strip_prefix('u')?.parse().ok()
}

fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Where the demo's leases live.
#[derive(Debug)]
enum DemoStore {
    Dir(PathBuf),
    #[cfg(feature = "dynamo")]
    Dynamo {
        table: String,
        endpoint: Option<String>,
        region: Option<String>,
    },
}

impl DemoStore {
    fn create(args: &DemoArgs) -> Result<Self, Failure> {
        if args.dynamo.is_some() {
            // Refused without the `dynamo` feature, never run on files instead.
            crate::stores::dynamo_available()?;
        }
        #[cfg(feature = "dynamo")]
        if let Some(table) = &args.dynamo {
            return Ok(Self::Dynamo {
                table: table.clone(),
                endpoint: args.endpoint.clone(),
                region: args.region.clone(),
            });
        }
        use std::os::unix::fs::DirBuilderExt;
        let dir = std::env::temp_dir().join(format!(
            "lease-demo-{}-{}",
            std::process::id(),
            unix_millis()
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| Failure::unavailable(format!("cannot create {}: {e}", dir.display())))?;
        Ok(Self::Dir(dir))
    }

    fn describe(&self) -> String {
        match self {
            Self::Dir(dir) => format!("file store {}", dir.display()),
            #[cfg(feature = "dynamo")]
            Self::Dynamo { table, .. } => format!("DynamoDB table {table}"),
        }
    }

    fn args(&self) -> Vec<String> {
        match self {
            Self::Dir(dir) => vec!["--file".to_owned(), dir.display().to_string()],
            #[cfg(feature = "dynamo")]
            Self::Dynamo {
                table,
                endpoint,
                region,
            } => {
                let mut args = vec!["--dynamo".to_owned(), table.clone()];
                if let Some(endpoint) = endpoint {
                    args.extend(["--endpoint".to_owned(), endpoint.clone()]);
                }
                if let Some(region) = region {
                    args.extend(["--region".to_owned(), region.clone()]);
                }
                args
            }
        }
    }

    fn remove(&self) {
        if let Self::Dir(dir) = self
            && let Err(error) = std::fs::remove_dir_all(dir)
        {
            tracing::warn!(dir = %dir.display(), %error, "could not remove the demo directory");
        }
    }
}

fn spawn_worker(
    args: &DemoArgs,
    store: &DemoStore,
    fleet: &str,
    index: u32,
    reports: mpsc::UnboundedSender<(u32, Report)>,
) -> Result<Child, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::internal(format!("cannot find the lease binary: {e}")))?;
    let mut command = Command::new(exe);
    command
        .arg("demo-worker")
        .args(store.args())
        .args(["--id", &worker_name(index), "--fleet", fleet])
        .args(["--units", &args.units.to_string()])
        .args(["--ttl", &format!("{}ms", args.ttl.as_millis())])
        .args(["--interval", &format!("{}ms", args.interval.as_millis())])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    if std::env::var_os("LEASE_LOG").is_none() {
        // A worker that loses a unit to a takeover is the point of the demo, not a warning.
        command.env("LEASE_LOG", "error");
    }
    let mut child = command
        .spawn()
        .map_err(|e| Failure::internal(format!("cannot start a demo worker: {e}")))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Failure::internal("a demo worker has no stdout"))?;
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            match parse_report(&line) {
                Some(report) => {
                    if reports.send((index, report)).is_err() {
                        break;
                    }
                }
                None => tracing::debug!(worker = index, %line, "unreadable worker report"),
            }
        }
    });
    Ok(child)
}

fn parse_report(line: &str) -> Option<Report> {
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    if let Some(error) = value.get("error").and_then(serde_json::Value::as_str) {
        return Some(Report {
            error: Some(error.to_owned()),
            ..Report::default()
        });
    }
    let fencing: BTreeMap<u32, u64> = value
        .get("units")?
        .as_object()?
        .iter()
        .filter_map(|(unit, fencing)| Some((parse_unit(unit)?, fencing.as_u64()?)))
        .collect();
    Some(Report {
        units: fencing.keys().copied().collect(),
        fencing,
        error: None,
    })
}

async fn kill_now(mut child: Child) {
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok())
        && let Err(error) = kill(Pid::from_raw(pid), Signal::SIGKILL)
    {
        tracing::warn!(pid, %error, "could not kill a demo worker");
    }
    if let Err(error) = child.wait().await {
        tracing::warn!(%error, "could not reap a demo worker");
    }
}

/// Stops every worker: closing stdin asks for a clean exit (releasing its leases); SIGKILL after
/// a second.
async fn shutdown(workers: &mut [Option<Child>]) {
    for child in workers.iter_mut().flatten() {
        drop(child.stdin.take());
    }
    for child in workers.iter_mut().filter_map(Option::take) {
        let mut child = child;
        match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::warn!(%error, "could not reap a demo worker"),
            Err(_) => kill_now(child).await,
        }
    }
}

/// `lease demo-worker`: one worker of the fleet.
pub(crate) async fn worker(args: DemoWorkerArgs) -> Result<u8, Failure> {
    crate::demo_worker::run(args).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo_worker::unit_name;

    fn report(units: &[(u32, u64)]) -> Report {
        Report {
            units: units.iter().map(|(u, _)| *u).collect(),
            fencing: units.iter().copied().collect(),
            error: None,
        }
    }

    #[test]
    fn phase_limits_scale_with_the_lease_and_the_interval() {
        let ms = Duration::from_millis;
        // The defaults keep the old twelve seconds.
        assert_eq!(phase_limit(ms(1500), ms(250)), Duration::from_secs(12));
        // 10 s leases, 2.5 s ticks: a takeover needs the lease plus a few ticks, over 12 s.
        let limit = phase_limit(ms(10_000), ms(2500));
        assert!(limit >= ms(10_000) + ms(2500) * 6, "{limit:?}");
    }

    #[test]
    fn a_worker_error_stops_the_demo_with_its_cause() {
        let told = parse_report(r#"{"worker":"worker-0","error":"table `t` does not exist"}"#)
            .expect("an error report parses");
        let failure = worker_failed(0, &told).expect_err("the demo stops");
        assert_eq!(failure.message, "worker-1 failed: table `t` does not exist");
        assert!(worker_failed(1, &report(&[(1, 2)])).is_ok());
    }

    #[test]
    fn ranges_compress_runs() {
        assert_eq!(ranges([0, 1, 2, 3, 8, 10, 11, 12]), "0-3,8,10-12");
        assert_eq!(ranges([]), "-");
        assert_eq!(ranges([5]), "5");
    }

    #[test]
    fn unit_names_sort_like_their_numbers() {
        assert_eq!(unit_name(7, 32), "u07");
        assert_eq!(unit_name(7, 8), "u7");
        assert_eq!(parse_unit("u07"), Some(7));
        assert!(unit_name(9, 100) < unit_name(10, 100));
    }

    #[test]
    fn balance_needs_every_unit_once_and_fair_shares() {
        let mut view = View::new(2, 4);
        view.update(0, report(&[(0, 1), (1, 1)]));
        assert!(!view.is_balanced(), "worker 1 has not reported");
        view.update(1, report(&[(1, 2), (2, 1), (3, 1)]));
        assert!(!view.is_balanced(), "unit 1 owned twice");
        assert_eq!(view.moves, 1, "unit 1 moved");
        view.update(0, report(&[(0, 1), (1, 1)]));
        assert_eq!(view.moves, 1, "a stale report is not a move");
        view.update(0, report(&[(0, 1)]));
        assert!(!view.is_balanced(), "1 and 3 units are not fair shares");
        view.update(1, report(&[(2, 1), (3, 1)]));
        view.update(0, report(&[(0, 1), (1, 3)]));
        assert!(view.is_balanced());
        assert_eq!(view.moves, 2);
        view.kill(1);
        assert!(!view.victim_units_owned());
        view.update(0, report(&[(0, 1), (1, 3), (2, 2), (3, 2)]));
        assert!(view.victim_units_owned());
        assert!(view.is_balanced());
        assert_eq!(view.moves, 4);
        assert_eq!(view.victim_units, [2, 3].into_iter().collect());
    }

    #[test]
    fn reports_parse_from_json_lines() {
        let parsed = parse_report(r#"{"worker":"w","units":{"u01":4,"u03":7}}"#).expect("parses");
        assert_eq!(parsed.units, [1, 3].into_iter().collect());
        assert_eq!(parsed.fencing.get(&3), Some(&7));
        assert!(parse_report("not json").is_none());
    }
}

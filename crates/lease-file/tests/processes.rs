//! Real processes: SIGKILL a holder and time the takeover; SIGSTOP a holder past the stale
//! threshold, let another take over, SIGCONT it and watch it learn; many processes contending
//! with a checker that proves no overlap. On Windows the stress runs (heartbeat-only); the
//! signal tests are Unix only, and their helpers unused there.
#![allow(clippy::unwrap_used)]
#![cfg_attr(windows, allow(dead_code, unused_imports))]

mod raw;

mod lease_dir;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[cfg(unix)]
use nix::sys::signal::{Signal, kill};
#[cfg(unix)]
use nix::unistd::Pid;

mod probe;

/// The probe processes: this test binary run again ([`probe::command`]); does nothing here.
#[test]
fn probe_process() {
    probe::run_if_asked();
}

struct Probe {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Probe {
    fn spawn_in_mode(mode: &str, args: &[&str]) -> Self {
        let mut child = probe::command(args)
            .env("LEASE_FILE_PROBE_MODE", mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout: ChildStdout = child.stdout.take().unwrap();
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

    fn expect(&self, prefix: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(e) => panic!("no `{prefix}` line within {within:?}: {e}"),
            }
        }
    }

    #[cfg(unix)]
    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).unwrap())
    }

    fn say(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn field(line: &str, i: usize) -> u128 {
    line.split_whitespace().nth(i).unwrap().parse().unwrap()
}

#[cfg(all(target_os = "linux", not(feature = "portable-paths")))]
fn unix_ns() -> u128 {
    use std::time::SystemTime;
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The lock directory's state entry name: `free.<gen>` or
/// `held.<gen>.<seq>.<token>.<kernel>.<scale>.<deadline_ns>.<duration_ns>`.
///
/// Looked at again when a holder's heartbeat renamed it under the listing.
fn state(lock: &Path) -> String {
    lease_dir::state(lock).0
}

/// Whether a held state says its holder holds the kernel lock.
fn holds_kernel_lock(name: &str) -> bool {
    name.starts_with("held.") && name.split('.').nth(4) != Some("n")
}

/// The generation and the deadline a held state names, on `CLOCK_MONOTONIC` like the probe's
/// `acquired <generation> <unix_ns> <monotonic_ns>` lines.
fn held(name: &str) -> (u128, u128) {
    assert!(name.starts_with("held."), "{name}");
    let field = |i| name.split('.').nth(i).unwrap().parse().unwrap();
    (field(1), field(6))
}

// Not with `portable-paths` (lease-file's platforms page): takeover at once (or at the published deadline) needs the shared scale, which the portable paths lack.
#[cfg(all(target_os = "linux", not(feature = "portable-paths")))]
#[test]
fn sigkilled_holder_is_taken_over_at_once() {
    sigkill_takeover("kernel", 3000, 250);
}

// Not with `portable-paths` (lease-file's platforms page): takeover at the published deadline needs the shared scale, which the portable paths lack.
#[cfg(all(target_os = "linux", not(feature = "portable-paths")))]
#[test]
fn sigkilled_holder_is_taken_over_at_its_deadline_heartbeat_only() {
    sigkill_takeover("heartbeat-only", 1000, 100);
}

/// SIGKILLs a holder while another process waits, five times. Kernel mode: the kernel lock the
/// holder held is free at once, so the waiter takes over within a fraction of the stale threshold,
/// before the dead holder's deadline. Heartbeat-only mode: nothing says the holder is dead, so
/// the waiter takes over only once the deadline of the holder's last state has passed, and soon
/// after.
#[cfg(all(target_os = "linux", not(feature = "portable-paths")))]
fn sigkill_takeover(mode: &str, stale_ms: u64, heartbeat_ms: u64) {
    let dir = tempfile::tempdir().unwrap();
    let path_buf = dir.path().join("k.lease");
    let path = path_buf.to_str().unwrap();
    let (stale, heartbeat) = (stale_ms.to_string(), heartbeat_ms.to_string());
    let mut takeovers = Vec::new();
    for _ in 0..5 {
        let mut holder = Probe::spawn_in_mode(mode, &["hold", path, &stale, &heartbeat]);
        let g1 = field(&holder.expect("acquired", Duration::from_secs(10)), 1);
        let waiter =
            Probe::spawn_in_mode(mode, &["wait", path, &stale, &heartbeat, "200", "20000"]);
        waiter.expect("waiting", Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
        // The holder's deadline now (a heartbeat before the kill can only move it later).
        let (_, deadline_before) = held(&state(&path_buf));
        let killed_at = unix_ns();
        kill(holder.pid(), Signal::SIGKILL).unwrap();
        holder.child.wait().unwrap();
        // Heartbeat-only: nobody may take over before the deadline, so this is the dead
        // holder's last state.
        let last = (mode == "heartbeat-only").then(|| state(&path_buf));
        let line = waiter.expect("acquired", Duration::from_secs(10));
        assert!(field(&line, 1) > g1, "takeover fences: {line} vs {g1}");
        let took = field(&line, 2).saturating_sub(killed_at);
        takeovers.push(Duration::from_nanos(u64::try_from(took).unwrap()));
        let taken_at = field(&line, 3);
        match last {
            None => assert!(
                taken_at < deadline_before,
                "kernel mode takes over before the dead holder's deadline: {line}"
            ),
            Some(last) => {
                let (_, deadline) = held(&last);
                assert!(
                    taken_at >= deadline,
                    "taken over {} ns before the deadline of {last}",
                    deadline - taken_at
                );
                assert!(taken_at - deadline < 1_000_000_000, "{last}: {line}");
            }
        }
        drop(holder);
    }
    takeovers.sort();
    eprintln!("takeover after SIGKILL ({mode}): {takeovers:?}");
    if mode == "kernel" {
        // A takeover well under the stale threshold came from the kernel lock.
        assert!(takeovers[2] < Duration::from_millis(1000), "{takeovers:?}");
    } else {
        // The deadline is the last heartbeat before the kill plus the stale threshold.
        let earliest = Duration::from_millis(stale_ms - heartbeat_ms - 100);
        assert!(takeovers[0] >= earliest, "{takeovers:?}");
    }
}

// Unix only: SIGSTOP and SIGCONT.
#[cfg(unix)]
#[test]
fn sigstopped_holder_is_taken_over_and_learns_it_after_sigcont() {
    sigstop_takeover("kernel");
}

// Unix only: SIGSTOP and SIGCONT.
#[cfg(unix)]
#[test]
fn sigstopped_holder_is_taken_over_and_learns_it_after_sigcont_heartbeat_only() {
    sigstop_takeover("heartbeat-only");
}

/// SIGSTOPs a holder: it keeps its kernel lock (kernel mode) but renews nothing, so a waiter
/// takes over once its deadline has passed, not before; the new owner holds no kernel lock while
/// the stopped process keeps it. After SIGCONT the old holder learns the loss from its next
/// heartbeat, with the new owner's generation, lets its kernel lock go, and the new owner's
/// heartbeat picks it up.
#[cfg(unix)]
fn sigstop_takeover(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path_buf = dir.path().join("s.lease");
    let path = path_buf.to_str().unwrap();
    let mut holder = Probe::spawn_in_mode(mode, &["hold", path, "800", "50"]);
    let g1 = field(&holder.expect("acquired", Duration::from_secs(10)), 1);
    kill(holder.pid(), Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let stopped_state = state(&path_buf);
    let (generation, deadline) = held(&stopped_state);
    assert_eq!(generation, g1);
    assert_eq!(holds_kernel_lock(&stopped_state), mode == "kernel");
    let mut taker =
        Probe::spawn_in_mode(mode, &["wait", path, "800", "50", "5000", "20000", "hold"]);
    let line = taker.expect("acquired", Duration::from_secs(10));
    let g2 = field(&line, 1);
    assert!(g2 > g1, "the new owner's fencing token is greater");
    assert!(
        field(&line, 3) >= deadline,
        "taken over before the stopped holder's deadline: {stopped_state} {line}"
    );
    assert!(
        !holds_kernel_lock(&state(&path_buf)),
        "the hung holder still has the kernel lock: {}",
        state(&path_buf)
    );
    kill(holder.pid(), Signal::SIGCONT).unwrap();
    let lost = holder.expect("lost", Duration::from_secs(5));
    assert_eq!(lost, format!("lost taken_over {g2}"));
    holder.say("check");
    let check = holder.expect("check", Duration::from_secs(5));
    assert!(check.starts_with("check lost"), "{check}");
    if mode == "kernel" {
        // The old holder let its kernel lock go; the new owner's heartbeat picks it up.
        let until = Instant::now() + Duration::from_secs(3);
        while !holds_kernel_lock(&state(&path_buf)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            holds_kernel_lock(&state(&path_buf)),
            "the new owner now holds the kernel lock"
        );
    } else {
        std::thread::sleep(Duration::from_millis(200));
        assert!(!holds_kernel_lock(&state(&path_buf)));
    }
    assert_eq!(held(&state(&path_buf)).0, g2);
    taker.say("check");
    assert!(
        taker
            .expect("check", Duration::from_secs(5))
            .starts_with("check ok")
    );
}

/// Parses the shared log and proves no two holders overlapped and generations rose strictly.
/// Returns the number of completed rounds.
fn check_log(log: &Path, crashed: &HashSet<u32>) -> usize {
    let text = std::fs::read_to_string(log).unwrap();
    let mut current: Option<(u64, u32)> = None;
    let mut last_generation = 0u64;
    let mut rounds = 0;
    for (n, line) in text.lines().enumerate() {
        let mut parts = line.split_whitespace();
        let (kind, generation, pid) = (
            parts.next().unwrap(),
            parts.next().unwrap().parse::<u64>().unwrap(),
            parts.next().unwrap().parse::<u32>().unwrap(),
        );
        match kind {
            "enter" => {
                if let Some((g, p)) = current {
                    assert!(
                        crashed.contains(&p),
                        "line {n}: {pid} entered while {p} (generation {g}) was inside"
                    );
                }
                assert!(
                    generation > last_generation,
                    "line {n}: generation {generation} not above {last_generation}"
                );
                last_generation = generation;
                current = Some((generation, pid));
            }
            "exit" => {
                assert_eq!(
                    current,
                    Some((generation, pid)),
                    "line {n}: exit without matching enter"
                );
                current = None;
                rounds += 1;
            }
            other => panic!("line {n}: unknown {other}"),
        }
    }
    rounds
}

// Unix only: kernel mode.
#[cfg(unix)]
#[test]
fn many_processes_never_overlap() {
    stress("kernel", 8, 3, 150, 2000, 3000);
}

#[test]
fn many_processes_never_overlap_heartbeat_only() {
    // Each crash while holding stops everyone until the crashed holder's deadline: a shorter
    // stale threshold keeps the test short. Under Wine, where every file operation is a round
    // trip to wineserver, fewer: 4 processes x 2 batches, 3 crashes while holding (about 10 s).
    if cfg!(windows) {
        stress("heartbeat-only", 4, 2, 60, 400, 1000);
    } else {
        stress("heartbeat-only", 8, 3, 100, 2000, 1000);
    }
}

#[test]
fn the_checker_catches_an_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    std::fs::write(&log, "enter 1 10\nenter 2 11\nexit 2 11\nexit 1 10\n").unwrap();
    let caught = std::panic::catch_unwind(|| check_log(&log, &HashSet::new()));
    assert!(caught.is_err(), "overlap must be caught");
    std::fs::write(&log, "enter 2 10\nexit 2 10\nenter 2 11\nexit 2 11\n").unwrap();
    let caught = std::panic::catch_unwind(|| check_log(&log, &HashSet::new()));
    assert!(caught.is_err(), "a repeated generation must be caught");
    std::fs::write(&log, "enter 1 10\nenter 2 11\nexit 2 11\n").unwrap();
    assert_eq!(
        check_log(&log, &HashSet::from([10])),
        1,
        "a crashed holder is no overlap"
    );
}

fn stress(
    mode: &str,
    processes: usize,
    batches: usize,
    rounds: usize,
    min_rounds: usize,
    stale_ms: u64,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stress.lease");
    let log = dir.path().join("stress.log");
    let (path, log_s) = (
        path.to_str().unwrap().to_owned(),
        log.to_str().unwrap().to_owned(),
    );
    let start = Instant::now();
    let crashed: HashSet<u32> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..processes)
            .map(|slot| {
                let (path, log_s) = (&path, &log_s);
                scope.spawn(move || {
                    let mut crashed = Vec::new();
                    for batch in 0..batches {
                        // Every other batch of some slots crashes while holding, part way through.
                        let crash_at = if (slot + batch) % 3 == 0 {
                            (37 * (slot + 1)) % rounds + 1
                        } else {
                            0
                        };
                        let out = probe::command(&[
                            "stress",
                            path,
                            log_s,
                            &rounds.to_string(),
                            &crash_at.to_string(),
                            &stale_ms.to_string(),
                            "100",
                        ])
                        .env("LEASE_FILE_PROBE_MODE", mode)
                        .output()
                        .unwrap();
                        let pid = out.status.code();
                        if crash_at > 0 {
                            assert_eq!(pid, Some(3), "{}", String::from_utf8_lossy(&out.stderr));
                        } else {
                            assert!(
                                out.status.success(),
                                "{}",
                                String::from_utf8_lossy(&out.stderr)
                            );
                        }
                        if crash_at > 0 {
                            crashed.push(crash_at);
                        }
                    }
                    crashed
                })
            })
            .collect();
        let _: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        // Crashed pids are read back from the log: a pid whose last line is an enter.
        let text = std::fs::read_to_string(&log).unwrap();
        let mut last: std::collections::HashMap<u32, &str> = Default::default();
        for line in text.lines() {
            let mut p = line.split_whitespace();
            let kind = p.next().unwrap();
            let pid = p.nth(1).unwrap().parse().unwrap();
            last.insert(pid, kind);
        }
        last.into_iter()
            .filter(|(_, k)| *k == "enter")
            .map(|(p, _)| p)
            .collect()
    });
    let completed = check_log(&log, &crashed);
    eprintln!(
        "stress ({mode}): {processes} concurrent processes x {batches} batches, {completed} rounds completed, {} crashes while holding, in {:?}",
        crashed.len(),
        start.elapsed()
    );
    assert!(completed >= min_rounds, "{completed}");
    assert!(!crashed.is_empty());
}

// Unix only: SIGSTOP and SIGCONT.
#[cfg(unix)]
#[test]
fn many_contenders_for_one_stale_holder_one_winner() {
    many_contenders("kernel");
}

// Unix only: SIGSTOP and SIGCONT.
#[cfg(unix)]
#[test]
fn many_contenders_for_one_stale_holder_one_winner_heartbeat_only() {
    many_contenders("heartbeat-only");
}

/// Six waiters judge one stopped holder stale at about the same moment: exactly one takes over.
#[cfg(unix)]
fn many_contenders(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path_buf = dir.path().join("m.lease");
    let path = path_buf.to_str().unwrap();
    let holder = Probe::spawn_in_mode(mode, &["hold", path, "600", "50"]);
    let g1 = field(&holder.expect("acquired", Duration::from_secs(10)), 1);
    kill(holder.pid(), Signal::SIGSTOP).unwrap();
    let waiters: Vec<Probe> = (0..6)
        .map(|_| Probe::spawn_in_mode(mode, &["wait", path, "600", "50", "1000", "20000", "hold"]))
        .collect();
    for w in &waiters {
        w.expect("waiting", Duration::from_secs(10));
    }
    // Everyone judges the same record stale at about the same moment; one takes it.
    std::thread::sleep(Duration::from_millis(1500));
    let winners: Vec<String> = waiters
        .iter()
        .filter_map(|w| w.lines.recv_timeout(Duration::from_millis(300)).ok())
        .filter(|l| l.starts_with("acquired"))
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one contender takes over: {winners:?}"
    );
    assert!(field(&winners[0], 1) > g1);
    kill(holder.pid(), Signal::SIGCONT).unwrap();
    assert!(
        holder
            .expect("lost", Duration::from_secs(5))
            .starts_with("lost taken_over")
    );
}

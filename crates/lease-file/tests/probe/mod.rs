//! A small process driven by the crash and stress tests of `lease-file` (`tests/processes.rs`):
//! the test binary runs itself again as the probe ([`command`]), so the published package holds
//! no probe binary. Its arguments:
//!
//! ```text
//! lease-file-probe hold <path> <stale_ms> <heartbeat_ms>
//!     acquire (waiting up to 60 s), print `acquired <generation> <unix_ns> <monotonic_ns>`,
//!     hold until stdin closes
//!     (then release) or the process is killed; a loss prints `lost taken_over <generation>` or
//!     `lost untrusted`.
//! lease-file-probe wait <path> <stale_ms> <heartbeat_ms> <retry_us> <timeout_ms> [hold]
//!     print `waiting`, acquire with a timeout, print
//!     `acquired <generation> <unix_ns> <monotonic_ns>`; release at once, or with `hold` keep
//!     holding as `hold` does.
//! lease-file-probe stress <path> <log> <rounds> <crash_at> <stale_ms> <heartbeat_ms>
//!     `rounds` times: acquire, append `enter <generation> <pid>`, append
//!     `exit <generation> <pid>`, release. At round `crash_at` (if not 0), exit with status 3
//!     right after `enter`, without releasing.
//! lease-file-probe cycles <path> <n>
//!     n uncontended FileLock try_acquire + release cycles (for syscall counting).
//! lease-file-probe store-cycles <dir> <n>
//!     n uncontended DirectoryStore try_acquire + release cycles.
//! lease-file-probe rawhold <path>
//!     the floor: flock a file, print `acquired`, hold until killed or stdin closes.
//! lease-file-probe rawwait <path>
//!     the floor: print `waiting`, block in flock, print `acquired 0 <unix_ns>`.
//! ```
//!
//! `<monotonic_ns>` is `CLOCK_MONOTONIC`, the scale of the deadlines in lock state names, read
//! just after the acquisition. On stdin, `check` makes a holder print `check ok <generation>` or
//! `check lost <why>`.
//!
//! `LEASE_FILE_PROBE_MODE=heartbeat-only` runs the heartbeat-only protocol instead of kernel
//! locks.

#[path = "../reexec/mod.rs"]
mod reexec;

use crate::raw::Raw as _;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use lease_core::{LossReason, NotOwnedReason, WaitOptions};
use lease_file::{FileLock, FileLockBuilder, FileLockGuard, ModePreference};

fn arg<T: std::str::FromStr>(args: &[String], i: usize) -> Result<T, String> {
    args.get(i)
        .ok_or_else(|| format!("missing argument {i}"))?
        .parse()
        .map_err(|_| format!("bad argument {i}"))
}

/// A lock on `path`; its loss callback says how it was lost, and for a takeover the new
/// holder's generation as the path now shows it.
fn builder(path: &Path, stale_ms: u64, heartbeat_ms: u64) -> FileLockBuilder {
    let mode = match std::env::var("LEASE_FILE_PROBE_MODE").as_deref() {
        Ok("heartbeat-only") => ModePreference::HeartbeatOnly,
        _ => ModePreference::Auto,
    };
    let watched = path.to_owned();
    FileLock::builder(path)
        .with_mode(mode)
        .with_stale_threshold(Duration::from_millis(stale_ms))
        .with_heartbeat_interval(Duration::from_millis(heartbeat_ms))
        .on_lost(move |reason| {
            let line = match reason {
                LossReason::NotOwned(NotOwnedReason::TakenOver) => {
                    let now = FileLock::new(&watched).and_then(|l| l.holder());
                    let generation = now.ok().flatten().and_then(|h| h.fencing_token());
                    format!("lost taken_over {}", generation.map_or(0, |g| g.get()))
                }
                _ => "lost untrusted".to_owned(),
            };
            say(&line);
        })
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// This host's `CLOCK_MONOTONIC` (0 on Windows, which has no shared scale).
fn monotonic_ns() -> i128 {
    #[cfg(windows)]
    return 0;
    #[cfg(unix)]
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec())
    })
}

fn acquired(generation: impl std::fmt::Display) {
    let mono = monotonic_ns();
    say(&format!("acquired {generation} {} {mono}", unix_ns()));
}

fn hold_until_stdin_closes(guard: FileLockGuard) {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        match line.as_deref() {
            Ok("check") => say(&match guard.check() {
                Ok(g) => format!("check ok {g}"),
                Err(e) => format!("check lost {e}"),
            }),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let _ = guard.release();
}

fn run(args: &[String]) -> Result<(), String> {
    let command = args.get(1).map(String::as_str).unwrap_or_default();
    let path: String = arg(args, 2)?;
    match command {
        "hold" => hold(args, &path),
        "wait" => wait(args, &path),
        "stress" => stress(args, &path),
        "cycles" => cycles(args, &path),
        "store-cycles" => store_cycles(args, &path),
        "rawhold" | "rawwait" => raw_flock(&path, command),
        other => Err(format!("unknown command {other:?}")),
    }
}

fn hold(args: &[String], path: &str) -> Result<(), String> {
    let lock = builder(path.as_ref(), arg(args, 3)?, arg(args, 4)?)
        .build()
        .map_err(|e| e.to_string())?;
    let guard = lock
        .acquire_with(&WaitOptions::new(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    acquired(guard.fencing_token());
    hold_until_stdin_closes(guard);
    Ok(())
}

fn wait(args: &[String], path: &str) -> Result<(), String> {
    let retry: u64 = arg(args, 5)?;
    let timeout: u64 = arg(args, 6)?;
    let lock = builder(path.as_ref(), arg(args, 3)?, arg(args, 4)?)
        .with_retry_delay(Duration::from_micros(retry))
        .build()
        .map_err(|e| e.to_string())?;
    say("waiting");
    let guard = lock
        .acquire_with(&WaitOptions::new(Duration::from_millis(timeout)))
        .map_err(|e| e.to_string())?;
    acquired(guard.fencing_token());
    if args.get(7).map(String::as_str) == Some("hold") {
        hold_until_stdin_closes(guard);
    } else {
        guard.release().map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn stress(args: &[String], path: &str) -> Result<(), String> {
    let log: String = arg(args, 3)?;
    let rounds: u64 = arg(args, 4)?;
    let crash_at: u64 = arg(args, 5)?;
    let lock = builder(path.as_ref(), arg(args, 6)?, arg(args, 7)?)
        .with_retry_delay(Duration::from_micros(500))
        .build()
        .map_err(|e| e.to_string())?;
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&log)
        .map_err(|e| e.to_string())?;
    let pid = std::process::id();
    for round in 1..=rounds {
        let guard = lock
            .acquire_with(&WaitOptions::new(Duration::from_secs(60)))
            .map_err(|e| e.to_string())?;
        let generation = guard.fencing_token();
        // One write(2) per line on an O_APPEND file: lines never interleave.
        log.write_all(format!("enter {generation} {pid}\n").as_bytes())
            .map_err(|e| e.to_string())?;
        if round == crash_at {
            std::process::exit(3);
        }
        std::thread::yield_now();
        if guard.check().is_err() {
            return Err("lost the lease inside the critical section".into());
        }
        log.write_all(format!("exit {generation} {pid}\n").as_bytes())
            .map_err(|e| e.to_string())?;
        guard.release().map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn cycles(args: &[String], path: &str) -> Result<(), String> {
    let n: u64 = arg(args, 3)?;
    let lock = FileLock::new(path).map_err(|e| e.to_string())?;
    for _ in 0..n {
        let guard = lock.try_acquire().map_err(|e| e.to_string())?;
        guard.release().map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn store_cycles(args: &[String], path: &str) -> Result<(), String> {
    use lease_core::{AcquireOptions, LeaseBackend};
    let n: u64 = arg(args, 3)?;
    let store = lease_file::DirectoryStore::open(path).map_err(|e| e.to_string())?;
    let key = lease_core::LeaseKey::new("bench").map_err(|e| e.to_string())?;
    let once = AcquireOptions::default();
    for _ in 0..n {
        let lease = pollster::block_on(store.try_acquire(&key, Duration::from_secs(30), &once))
            .map_err(|e| e.to_string())?;
        pollster::block_on(store.release_lease(&lease)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn raw_flock(path: &str, command: &str) -> Result<(), String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| e.to_string())?;
    if command == "rawwait" {
        say("waiting");
    }
    file.lock().map_err(|e| e.to_string())?;
    say(&format!("acquired 0 {}", unix_ns()));
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
    }
    Ok(())
}

/// Carries the arguments of a re-run of the test binary as a probe, separated by U+001F.
const ARGS_ENV: &str = "LEASE_FILE_PROBE_ARGS";

/// A command that runs this test binary again as a probe with `args`: only the test
/// `probe_process` runs in it, and it turns into the probe ([`run_if_asked`]).
pub(crate) fn command<S: AsRef<str>>(args: &[S]) -> Command {
    reexec::command("probe_process", ARGS_ENV, args)
}

/// In a process started by [`command`], runs the probe and exits with its status; elsewhere
/// returns at once.
pub(crate) fn run_if_asked() {
    let Some(args) = reexec::args_if_asked(ARGS_ENV, "lease-file-probe") else {
        return;
    };
    // libtest has printed `test probe_process ... ` without a newline: end that line, so that
    // every line the probe says starts a line of its own.
    say("");
    reexec::exit_with("lease-file-probe", run(&args));
}

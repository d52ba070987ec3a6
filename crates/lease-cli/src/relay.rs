//! The holder's deadline, passed from `lease run` to its guard, so the guard can stop the
//! command by the deadline even when `lease` is alive but not running (SIGSTOP, a debugger, a
//! hung thread): a paused `lease` cannot renew, and its lease ends while the command would run on.
//!
//! `lease run` writes the deadline as an absolute `CLOCK_BOOTTIME` time in nanoseconds (one clock
//! for every process on the host) into a file of its own private directory (mode 0700), twice on
//! one line so a torn read is recognised; it rewrites the file at every check, recreating it if
//! something deleted it. The guard reads it at the same interval, keeps the last value it
//! could read, and sets a timer for that deadline so it acts on time, not at its next read.
//!
//! `CLOCK_BOOTTIME`, not `CLOCK_MONOTONIC`: a suspend (or a paused VM) stops the monotonic
//! clock but not the time in which other hosts (a DynamoDB lease's expiry, a file lease judged
//! by observation over NFS) let the lease end. `lease run` converts its `Instant` deadline at
//! each publication by the time left then, so the published deadline is that much real time
//! ahead; after a resume the guard's next read (one poll interval, on its own timer) finds it
//! passed by the time slept and kills the group, even if `lease`'s own monotonic deadline has
//! not moved.
//!
//! On macOS and FreeBSD the clock is `CLOCK_MONOTONIC`, which counts time asleep there (and
//! `CLOCK_BOOTTIME` does not on FreeBSD before 15.0), the one lease-core's `SystemClock` reads
//! there: see [`SUSPEND_CLOCK`].
//!
//! The directory is removed by `lease run` when it ends, by the guard when `lease` dies, and, when
//! both were killed at once, by the next `lease run` (one read of the temporary directory at
//! start: see [`sweep_stale`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::time::{ClockId, clock_gettime};
use nix::unistd::Pid;

/// The clock that counts time suspended, the one lease-core's `SystemClock` adds to std's (one
/// clock for every process on the host).
#[cfg(all(target_os = "linux", not(feature = "portable-paths")))]
const SUSPEND_CLOCK: ClockId = ClockId::CLOCK_BOOTTIME;

/// macOS (clock_gettime(3): it "will continue to increment while the system is asleep") and
/// FreeBSD (clock_gettime(2): "even while the system is suspended", 15.0; its `CLOCK_BOOTTIME`
/// stopped while suspended before 15.0), as lease-core's `SystemClock` reads there; and the
/// portable paths on Linux, which so run the same call.
#[cfg(any(not(target_os = "linux"), feature = "portable-paths"))]
const SUSPEND_CLOCK: ClockId = ClockId::CLOCK_MONOTONIC;

/// The suspend clock now ([`SUSPEND_CLOCK`]: `CLOCK_BOOTTIME` on Linux, `CLOCK_MONOTONIC` on
/// macOS and FreeBSD), in nanoseconds: monotonic, and counting time suspended.
pub(crate) fn boottime_ns() -> u64 {
    clock_gettime(SUSPEND_CLOCK).map_or(0, |t| {
        u64::try_from(t.tv_sec())
            .unwrap_or(0)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::try_from(t.tv_nsec()).unwrap_or(0))
    })
}

/// Now on the clock lease deadlines are measured on ([`lease_core::SystemClock`], which counts
/// time suspended). Not std's `Instant::now`: after a suspend it lags that clock by the time
/// slept, and a deadline compared with it would seem that much further away.
pub(crate) fn mono_now() -> Instant {
    lease_core::Clock::monotonic(&lease_core::SystemClock)
}

/// `at` (a lease deadline, on [`mono_now`]'s clock) as an absolute `CLOCK_BOOTTIME` time in
/// nanoseconds: now on that clock plus the time from now to `at` (std's `Instant` keeps its
/// value private).
pub(crate) fn instant_ns(at: Instant) -> u64 {
    let now_ns = boottime_ns();
    let now = mono_now();
    match at.checked_duration_since(now) {
        Some(ahead) => now_ns.saturating_add(u64::try_from(ahead.as_nanos()).unwrap_or(u64::MAX)),
        None => now_ns
            .saturating_sub(u64::try_from(now.duration_since(at).as_nanos()).unwrap_or(u64::MAX)),
    }
}

/// Whether `dir` is a real directory (not a symlink) of this user that nobody else can write:
/// a directory somebody planted under the same name must not carry the deadline.
fn private_dir(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir).is_ok_and(|m| {
        m.is_dir() && m.uid() == nix::unistd::geteuid().as_raw() && m.mode() & 0o077 == 0
    })
}

/// The prefix of every relay directory's name: `lease-run-<pid>-<nonce>`.
const DIR_PREFIX: &str = "lease-run-";

/// Removes the relay directories under `temp` that `lease run` processes which no longer exist
/// left behind (both `lease` and its guard killed at once). Only real directories (not
/// symlinks) owned by this user whose pid names no process are removed: a live `lease run`
/// keeps its own, and in a sticky temporary directory nobody else can swap ours. A `lease run`
/// in another pid namespace sharing `temp` looks dead: it recreates its directory at its next
/// check, and its guard keeps the last deadline it read meanwhile.
fn sweep_stale(temp: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    let me = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(DIR_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
        else {
            continue;
        };
        let ours = std::fs::symlink_metadata(entry.path())
            .is_ok_and(|m| m.is_dir() && m.uid() == nix::unistd::geteuid().as_raw());
        let gone = pid > 0
            && u32::try_from(pid).is_ok_and(|pid| pid != me)
            && kill(Pid::from_raw(pid), None) == Err(Errno::ESRCH);
        if ours && gone {
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => {
                    tracing::debug!(path = %entry.path().display(), "removed a stale deadline relay")
                }
                Err(error) => {
                    tracing::debug!(%error, path = %entry.path().display(), "cannot remove a stale deadline relay")
                }
            }
        }
    }
}

/// The writing side, owned by `lease run`.
#[derive(Debug)]
pub(crate) struct DeadlineRelay {
    dir: PathBuf,
    file: PathBuf,
    /// The deadline last written, so an unchanged one costs one `lstat`, not a rewrite.
    published: std::sync::Mutex<Option<Instant>>,
}

impl DeadlineRelay {
    /// A fresh private directory under the system's temporary directory (after removing the
    /// stale ones of dead `lease run` processes).
    pub(crate) fn create() -> std::io::Result<Self> {
        use lease_core::TokenSource;
        use std::os::unix::fs::DirBuilderExt;
        let temp = std::env::temp_dir();
        sweep_stale(&temp);
        let nonce = lease_core::RandomTokens.next_token();
        let nonce: String = nonce.as_str().chars().take(12).collect();
        let dir = temp.join(format!("{DIR_PREFIX}{}-{nonce}", std::process::id()));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let file = dir.join("deadline");
        Ok(Self {
            dir,
            file,
            published: std::sync::Mutex::new(None),
        })
    }

    /// The private directory (the parent link's FIFO lives there on the portable paths).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file the guard reads.
    pub(crate) fn path(&self) -> &Path {
        &self.file
    }

    /// Publishes `deadline`; recreates the directory if it was removed. An unchanged deadline
    /// whose file is still there is not written again.
    pub(crate) fn publish(&self, deadline: Instant) {
        use std::os::unix::fs::DirBuilderExt;
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *published == Some(deadline) && std::fs::symlink_metadata(&self.file).is_ok() {
            return;
        }
        let ns = instant_ns(deadline);
        let line = format!("{ns} {ns}\n");
        let write = || {
            let tmp = self.dir.join("deadline.tmp");
            std::fs::write(&tmp, &line)?;
            std::fs::rename(&tmp, &self.file)
        };
        if !private_dir(&self.dir) {
            // Deleted by a cleaner: recreate it; planted by someone else: write nothing (the
            // guard then enforces the last deadline it read).
            let _ = std::fs::DirBuilder::new().mode(0o700).create(&self.dir);
            if !private_dir(&self.dir) {
                tracing::warn!(path = %self.dir.display(), "the deadline relay directory is not ours; not publishing");
                return;
            }
        }
        match write() {
            Ok(()) => *published = Some(deadline),
            Err(error) => {
                tracing::warn!(%error, path = %self.file.display(), "cannot publish the deadline to the guard");
            }
        }
    }
}

impl Drop for DeadlineRelay {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The reading side, in the guard: the last deadline it could read.
#[derive(Debug)]
pub(crate) struct DeadlineWatch {
    file: PathBuf,
    deadline_ns: Option<u64>,
}

impl DeadlineWatch {
    pub(crate) fn new(file: PathBuf) -> Self {
        Self {
            file,
            deadline_ns: None,
        }
    }

    /// Rereads the file; returns how long is left before the deadline (zero once passed), or
    /// `None` while no deadline was ever read.
    pub(crate) fn left(&mut self) -> Option<Duration> {
        let trusted = self.file.parent().is_some_and(private_dir);
        if trusted
            && let Ok(text) = std::fs::read_to_string(&self.file)
            && let Some((a, b)) = text.trim().split_once(' ')
            && a == b
            && let Ok(ns) = a.parse::<u64>()
        {
            self.deadline_ns = Some(ns);
        }
        let deadline = self.deadline_ns?;
        Some(Duration::from_nanos(deadline.saturating_sub(boottime_ns())))
    }

    /// Removes the relay's directory (the guard's last act when `lease` is gone).
    pub(crate) fn clean_up(&self) {
        if let Some(dir) = self.file.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_deadline_is_read_back_and_a_torn_one_ignored() {
        let relay = DeadlineRelay::create().expect("relay");
        let mut watch = DeadlineWatch::new(relay.path().to_owned());
        assert_eq!(watch.left(), None);
        relay.publish(Instant::now() + Duration::from_secs(10));
        let left = watch.left().expect("read");
        assert!(
            left > Duration::from_secs(9) && left <= Duration::from_secs(10),
            "{left:?}"
        );
        std::fs::write(relay.path(), "1 2\n").expect("torn");
        let still = watch.left().expect("kept");
        assert!(
            still > Duration::from_secs(9),
            "a torn line keeps the last value"
        );
        let later = Instant::now() + Duration::from_secs(20);
        relay.publish(later);
        std::fs::remove_dir_all(relay.path().parent().expect("dir")).expect("deleted by a cleaner");
        relay.publish(later);
        assert!(
            relay.path().exists(),
            "an unchanged deadline is written again once deleted"
        );
        assert!(watch.left().expect("recreated") > Duration::from_secs(19));
        // A directory planted under the name (here: one others can write) carries nothing.
        let dir = relay.path().parent().expect("dir").to_owned();
        std::fs::remove_dir_all(&dir).expect("deleted");
        std::fs::create_dir(&dir).expect("planted");
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .expect("chmod");
        std::fs::write(relay.path(), "99999999999999999 99999999999999999\n").expect("plant");
        let kept = watch.left().expect("kept");
        assert!(
            kept < Duration::from_secs(21),
            "the planted deadline was ignored: {kept:?}"
        );
        drop(relay);
        assert!(!dir.exists());
    }
}

//! Critical sections (read record, decide, rename a new record) and the detection of whether
//! kernel locks work.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::statfs::{NFS_SUPER_MAGIC, SMB_SUPER_MAGIC, statfs};

use crate::fsio::{io_error, open_companion};
use crate::{FileLockError, LeaseFileRecord, ident};

/// How a lock keeps its critical sections and its tenure, as detected (or forced) for its
/// directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockMode {
    /// `flock` works here: critical sections take a short kernel lock on `<path>.lock`, and the
    /// holder keeps a kernel lock on `<path>.owner` for its whole tenure, so a crashed holder's
    /// lease is free at once.
    Kernel,
    /// `flock` does not work (or is not trusted) here, such as on NFS or SMB: critical sections
    /// are epochs made by `O_EXCL` creation of `<path>.cs.<n>`, reclaimable once stale; a crashed
    /// holder is detected by its heartbeat going stale (or, on this host, by its pid).
    HeartbeatOnly,
}

impl LockMode {
    /// The name written into records' `protocol` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Kernel => "kernel",
            Self::HeartbeatOnly => "heartbeat-only",
        }
    }
}

impl std::fmt::Display for LockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which mode to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ModePreference {
    /// Kernel locks where they work, heartbeat-only elsewhere (the default).
    #[default]
    Auto,
    /// Kernel locks or an error: never fall back.
    Kernel,
    /// Heartbeat-only even where kernel locks work (for tests, or mixed fleets where some
    /// contenders reach the directory over NFS).
    HeartbeatOnly,
}

const CIFS_MAGIC: u64 = 0xFF53_4D42;
const SMB2_MAGIC: u64 = 0xFE53_4D42;
const FUSE_MAGIC: u64 = 0x6573_5546;
const V9FS_MAGIC: u64 = 0x0102_1997;
const AFS_MAGIC: u64 = 0x5346_414F;

/// Decides the mode for a lock whose critical-section file is `probe`, in `dir`.
pub(crate) fn detect(
    dir: &Path,
    probe: &Path,
    file_mode: u32,
    preference: ModePreference,
) -> Result<(LockMode, String), FileLockError> {
    if preference == ModePreference::HeartbeatOnly {
        return Ok((
            LockMode::HeartbeatOnly,
            "heartbeat-only mode requested".into(),
        ));
    }
    let network = match statfs(if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    }) {
        Ok(fs) => {
            let kind = fs.filesystem_type();
            #[allow(clippy::cast_sign_loss, clippy::unnecessary_cast)]
            let raw = (kind.0 as u64) & 0xffff_ffff;
            if kind == NFS_SUPER_MAGIC {
                Some("nfs")
            } else if kind == SMB_SUPER_MAGIC || raw == CIFS_MAGIC || raw == SMB2_MAGIC {
                Some("smb/cifs")
            } else if raw == FUSE_MAGIC {
                // sshfs, s3fs and friends: the kernel emulates flock for this host only.
                Some("fuse")
            } else if raw == V9FS_MAGIC {
                Some("9p")
            } else if raw == AFS_MAGIC {
                Some("afs")
            } else {
                None
            }
        }
        Err(_) => None,
    };
    let fallback = |reason: String| match preference {
        ModePreference::Kernel => Err(FileLockError::Unsupported {
            path: probe.to_owned(),
            reason: reason.clone(),
        }),
        _ => {
            tracing::warn!(path = %probe.display(), %reason, "kernel locks unusable; heartbeat-only mode");
            Ok((LockMode::HeartbeatOnly, reason))
        }
    };
    if let Some(kind) = network {
        return fallback(format!(
            "{kind} file system: flock is not reliable across hosts there (force \
             ModePreference::Kernel if every contender runs on this host)"
        ));
    }
    let file = open_companion(probe, file_mode)?;
    match file.try_lock() {
        Ok(()) => {
            let _ = file.unlock();
            Ok((LockMode::Kernel, "flock works".into()))
        }
        Err(TryLockError::WouldBlock) => Ok((LockMode::Kernel, "flock works (held)".into())),
        Err(TryLockError::Error(e)) => match e.raw_os_error().map(Errno::from_raw) {
            Some(Errno::ENOLCK | Errno::EOPNOTSUPP | Errno::ENOSYS | Errno::EINVAL) => {
                fallback(format!("flock failed: {e}"))
            }
            _ => Err(io_error("probe flock", probe, e)),
        },
    }
}

/// Exponential backoff for a busy critical section: 20 µs doubling to 2 ms.
pub(crate) struct Backoff(Duration);

impl Backoff {
    pub(crate) fn new() -> Self {
        Self(Duration::from_micros(20))
    }
    pub(crate) fn sleep(&mut self) {
        std::thread::sleep(self.0);
        self.0 = (self.0 * 2).min(Duration::from_millis(2));
    }
}

/// A critical-section lock for one record.
#[derive(Debug)]
pub(crate) enum Cs {
    /// `flock` on a companion file that is never deleted or renamed.
    Kernel {
        path: PathBuf,
        mode: u32,
        file: Mutex<Option<File>>,
    },
    /// `O_EXCL` epochs `<record>.cs.<n>`.
    Files {
        dir: PathBuf,
        prefix: String,
        mode: u32,
        stale: Duration,
        inner: Mutex<Option<(u64, Instant)>>,
    },
}

/// Proof of being inside a critical section; leaving happens on drop.
#[derive(Debug)]
pub(crate) enum CsGuard<'a> {
    Kernel(MutexGuard<'a, Option<File>>),
    Files {
        _guard: MutexGuard<'a, Option<(u64, Instant)>>,
        dir: &'a Path,
        prefix: &'a str,
        mode: u32,
        epoch: u64,
    },
}

impl Cs {
    pub(crate) fn kernel(path: PathBuf, mode: u32) -> Self {
        Self::Kernel {
            path,
            mode,
            file: Mutex::new(None),
        }
    }

    pub(crate) fn files(record: &Path, mode: u32, stale: Duration) -> Self {
        let dir = record.parent().map(Path::to_owned).unwrap_or_default();
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let name = record
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Self::Files {
            dir,
            prefix: format!("{name}.cs."),
            mode,
            stale,
            inner: Mutex::new(None),
        }
    }

    /// Enters the critical section, waiting at most `wait`.
    ///
    /// Kernel mode: `flock(LOCK_EX|LOCK_NB)` (retried with backoff while busy) and one `lstat` to
    /// check that the locked inode is still the one at the path (someone may have replaced the
    /// companion file; then it is reopened). Files mode: a directory read, one `O_EXCL` create,
    /// a second directory read to check no higher epoch exists (a slow process can recreate an
    /// old, cleaned-up epoch number), and cleanup of old epochs.
    pub(crate) fn enter(&self, wait: Duration) -> Result<CsGuard<'_>, FileLockError> {
        let mut backoff = Backoff::new();
        match self {
            Self::Kernel { path, mode, file } => {
                let start = Instant::now();
                let mut slot = file
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                loop {
                    if slot.is_none() {
                        *slot = Some(open_companion(path, *mode)?);
                    }
                    let Some(f) = slot.as_ref() else { continue };
                    match f.try_lock() {
                        Ok(()) => {}
                        Err(TryLockError::WouldBlock) => {
                            if start.elapsed() >= wait {
                                return Err(busy(path, wait));
                            }
                            backoff.sleep();
                            continue;
                        }
                        Err(TryLockError::Error(e)) => {
                            return Err(io_error("flock critical section", path, e));
                        }
                    }
                    let held = f.metadata().map_err(|e| io_error("fstat", path, e))?;
                    match std::fs::symlink_metadata(path) {
                        Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                            return Ok(CsGuard::Kernel(slot));
                        }
                        _ => {
                            tracing::warn!(path = %path.display(), "critical-section file was replaced; reopening");
                            let _ = f.unlock();
                            *slot = None;
                        }
                    }
                }
            }
            Self::Files {
                dir,
                prefix,
                mode,
                stale,
                inner,
            } => {
                let mut guard = inner
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                // The wait is timed from our first look, the instant a stuck epoch is first seen
                // at: so with `wait` equal to the stale threshold, the last look before giving up
                // always finds that epoch stale (timing the wait from before the first scan
                // gave up a few microseconds early, now and then).
                let mut first_look = None;
                loop {
                    let Epochs {
                        max,
                        done,
                        next_done,
                    } = scan_epochs(dir, prefix)?;
                    let looked = Instant::now();
                    let start = *first_look.get_or_insert(looked);
                    let may_take = match max {
                        None => true,
                        Some(_) if done => true,
                        Some(epoch) => {
                            let first = match *guard {
                                Some((seen, at)) if seen == epoch => at,
                                _ => {
                                    *guard = Some((epoch, looked));
                                    looked
                                }
                            };
                            looked.duration_since(first) >= *stale
                                || epoch_writer_gone(dir, prefix, epoch)
                        }
                    };
                    if may_take {
                        let next = next_epoch(dir, prefix, max)?;
                        let path = dir.join(format!("{prefix}{next}"));
                        match create_exclusive(&path, *mode, &epoch_content()) {
                            Ok(()) => {
                                if next_done {
                                    // Planted: nobody finishes an epoch before it exists. Left
                                    // there, it would let others in while we are inside.
                                    let _ = std::fs::remove_file(
                                        dir.join(format!("{prefix}{next}.done")),
                                    );
                                }
                                // A slow process may recreate an epoch number that was already
                                // used and cleaned up: only the highest epoch is real. Then wait
                                // and retry like any busy section (never a `continue` past the
                                // timeout check below).
                                let now_max = scan_epochs(dir, prefix)?.max;
                                if now_max.is_some_and(|m| m > next) {
                                    let _ = std::fs::remove_file(&path);
                                } else {
                                    if let Some(max) = max {
                                        if !done {
                                            tracing::warn!(path = %path.display(), "reclaimed a stale critical section");
                                        }
                                        cleanup_epochs(dir, prefix, max);
                                    }
                                    return Ok(CsGuard::Files {
                                        _guard: guard,
                                        dir,
                                        prefix,
                                        mode: *mode,
                                        epoch: next,
                                    });
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                            Err(e) => return Err(io_error("create critical section", &path, e)),
                        }
                    }
                    if looked.duration_since(start) >= wait {
                        return Err(busy(&dir.join(prefix.as_str()), wait));
                    }
                    backoff.sleep();
                }
            }
        }
    }
}

impl CsGuard<'_> {
    /// Files mode: checks nobody reclaimed this critical section as stale while we were inside
    /// (a paused process), right before the rename. Kernel mode: always true.
    pub(crate) fn still_exclusive(&self) -> bool {
        match self {
            Self::Kernel(_) => true,
            Self::Files {
                dir, prefix, epoch, ..
            } => {
                std::fs::symlink_metadata(dir.join(format!("{prefix}{}", epoch.saturating_add(1))))
                    .is_err()
            }
        }
    }
}

impl Drop for CsGuard<'_> {
    fn drop(&mut self) {
        match self {
            Self::Kernel(slot) => {
                if let Some(f) = slot.as_ref() {
                    let _ = f.unlock();
                }
            }
            Self::Files {
                dir,
                prefix,
                mode,
                epoch,
                ..
            } => {
                let path = dir.join(format!("{prefix}{epoch}.done"));
                if let Err(error) = create_exclusive(&path, *mode, b"") {
                    tracing::warn!(path = %path.display(), %error, "cannot mark critical section done");
                }
            }
        }
    }
}

fn busy(path: &Path, wait: Duration) -> FileLockError {
    FileLockError::Io {
        op: "enter critical section",
        path: path.to_owned(),
        transient: true,
        source: io::Error::new(
            io::ErrorKind::WouldBlock,
            format!("still busy after {wait:?} (a process paused inside it?)"),
        ),
    }
}

/// Creates `path` with `O_EXCL|O_NOFOLLOW`, gives it exactly `mode` (`fchmod`: the umask does
/// not apply) and writes `bytes`. A failure after the create removes the file again.
fn create_exclusive(path: &Path, mode: u32, bytes: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(OFlag::O_NOFOLLOW.bits())
        .open(path)?;
    let written = file
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .and_then(|()| file.write_all(bytes));
    if written.is_err() {
        let _ = std::fs::remove_file(path);
    }
    written
}

fn epoch_content() -> Vec<u8> {
    let me = ident::current();
    let record = serde_json::json!({
        "version": 1, "pid": me.pid, "host": me.host, "pid_ns": me.pid_ns,
        "boot_id": me.boot_id, "start_time": me.start_time, "generation": 0,
    });
    record.to_string().into_bytes()
}

fn epoch_writer_gone(dir: &Path, prefix: &str, epoch: u64) -> bool {
    let path = dir.join(format!("{prefix}{epoch}"));
    match crate::fsio::read_record_file(&path) {
        Ok(Some(bytes)) => LeaseFileRecord::parse(&bytes.bytes)
            .is_ok_and(|record| ident::writer_is_gone(&record, None)),
        _ => false,
    }
}

/// The highest epoch number the protocol uses. Epochs count critical sections from 1, one at a
/// time, so no process reaches it (at a million critical sections a second it takes 290,000
/// years); names above it were planted, and are ignored rather than added to.
pub(crate) const MAX_EPOCH: u64 = i64::MAX as u64;

/// The epoch number in a file name's tail: only the canonical decimal form this crate writes
/// (no sign, no leading zero, no spaces, ASCII digits), from 1 to [`MAX_EPOCH`]. Anything else
/// is not an epoch of ours: it is ignored, and never deleted.
fn parse_epoch(digits: &str) -> Option<u64> {
    if digits.is_empty()
        || digits.len() > 19
        || digits.starts_with('0')
        || !digits.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    digits.parse::<u64>().ok().filter(|n| *n <= MAX_EPOCH)
}

/// The epoch after `max`, or a typed error when a planted file took the range's top.
fn next_epoch(dir: &Path, prefix: &str, max: Option<u64>) -> Result<u64, FileLockError> {
    match max {
        None => Ok(1),
        Some(max) if max < MAX_EPOCH => Ok(max + 1),
        Some(max) => Err(FileLockError::Hostile {
            path: dir.join(format!("{prefix}{max}")),
            reason: format!(
                "critical-section epoch {max} is the last one this protocol can number (no \
                 process counts that far: the file was planted); remove the {prefix}* files \
                 while no process uses the lock"
            ),
        }),
    }
}

/// What a scan of the epoch files found.
struct Epochs {
    /// The highest epoch.
    max: Option<u64>,
    /// `<prefix><max>.done` exists: a done file of any other number says nothing about the
    /// highest epoch.
    done: bool,
    /// A done file for the epoch after the highest exists: planted (or a scan racing the next
    /// epoch's whole life), and removed by whoever creates that epoch.
    next_done: bool,
}

fn scan_epochs(dir: &Path, prefix: &str) -> Result<Epochs, FileLockError> {
    let mut max: Option<u64> = None;
    let mut done = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| io_error("read directory", dir, e))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        let (digits, is_done) = match rest.strip_suffix(".done") {
            Some(d) => (d, true),
            None => (rest, false),
        };
        let Some(n) = parse_epoch(digits) else {
            continue;
        };
        if is_done {
            done.push(n);
        } else {
            max = max.max(Some(n));
        }
    }
    let next = max.map_or(Some(1), |m| m.checked_add(1));
    Ok(Epochs {
        max,
        done: max.is_some_and(|m| done.contains(&m)),
        next_done: next.is_some_and(|n| done.contains(&n)),
    })
}

fn cleanup_epochs(dir: &Path, prefix: &str, below: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        let digits = rest.strip_suffix(".done").unwrap_or(rest);
        if parse_epoch(digits).is_some_and(|n| n < below) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_epochs_in_range_parse() {
        assert_eq!(parse_epoch("1"), Some(1));
        assert_eq!(parse_epoch("42"), Some(42));
        assert_eq!(parse_epoch(&MAX_EPOCH.to_string()), Some(MAX_EPOCH));
        for bad in [
            "",
            "0",
            "007",
            "+7",
            "-1",
            " 1",
            "1 ",
            "0x10",
            "1e3",
            "١",
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999999",
        ] {
            assert_eq!(parse_epoch(bad), None, "{bad:?}");
        }
    }
}

//! Linux: `CLOCK_BOOTTIME`, `statfs` magic numbers, identities read from `/proc`.

use std::os::fd::BorrowedFd;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime};

use nix::sys::stat::{FileStat, Mode};
use nix::sys::statfs::{NFS_SUPER_MAGIC, SMB_SUPER_MAGIC, fstatfs};


/// `CLOCK_BOOTTIME` in nanoseconds: monotonic, and counting time suspended (clock_gettime(2)).
#[cfg_attr(feature = "portable-paths", allow(dead_code))]
pub(crate) fn suspend_clock_ns() -> Option<u64> {
    super::clock_ns(nix::time::ClockId::CLOCK_BOOTTIME)
}

/// `CLOCK_REALTIME_COARSE`, the clock the kernel stamps new inodes with (`current_time`), read
/// before a `mkdirat`: the directory it makes is born no earlier. Resolution: one tick.
#[cfg_attr(feature = "portable-paths", allow(dead_code))]
pub(crate) fn birth_floor() -> Option<SystemTime> {
    let ns = super::clock_ns(nix::time::ClockId::CLOCK_REALTIME_COARSE)?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_nanos(ns))
}

/// The inode of this process's PID namespace (`/proc/self/ns/pid`).
#[cfg_attr(feature = "portable-paths", allow(dead_code))]
pub(crate) fn pid_namespace() -> Option<u64> {
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

/// This process's start time in clock ticks since boot (`/proc/self/stat`).
#[cfg_attr(feature = "portable-paths", allow(dead_code))]
pub(crate) fn start_time() -> Option<u64> {
    start_time_of("self")
}

/// This boot and time namespace, which every process on this host that reads
/// `CLOCK_MONOTONIC` shares.
#[cfg_attr(feature = "portable-paths", allow(dead_code))]
pub(crate) fn host_instance() -> Option<String> {
    let boot = boot_id()?;
    let time_ns = std::fs::read_link("/proc/self/ns/time")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    Some(format!("{boot}/{time_ns}"))
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`).
#[cfg_attr(feature = "portable-paths", allow(dead_code))]
pub(crate) fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Field 22 of `/proc/<pid>/stat`: the process start time in clock ticks since boot.
fn start_time_of(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

const CIFS_MAGIC: u64 = 0xFF53_4D42;
const SMB2_MAGIC: u64 = 0xFE53_4D42;
const FUSE_MAGIC: u64 = 0x6573_5546;
const V9FS_MAGIC: u64 = 0x0102_1997;
const AFS_MAGIC: u64 = 0x5346_414F;

/// The kind of network (or user-space) file system `dir` is on, by `statfs`'s `f_type` magic
/// number; `None` for a local one (or when `statfs` fails).
pub(crate) fn network_file_system(dir: BorrowedFd<'_>) -> Option<&'static str> {
    let kind = fstatfs(dir).ok()?.filesystem_type();
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

/// Permission bits as a [`Mode`] (`mode_t` is 32 bits here).
pub(crate) fn mode(bits: u32) -> Mode {
    Mode::from_bits_truncate(bits & 0o7777)
}

/// A `stat`'s device and inode.
pub(crate) fn dev_ino(stat: &FileStat) -> (u64, u64) {
    (stat.st_dev, stat.st_ino)
}

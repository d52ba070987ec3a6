//! The paths that need no Linux-only call: what macOS and FreeBSD run, and what Linux runs with
//! the `portable-paths` feature (for the test run that holds them to the same promise).

use std::time::{Duration, SystemTime};


/// `CLOCK_MONOTONIC` in nanoseconds: on macOS and FreeBSD it counts time the host spent asleep
/// (clock_gettime(3) on macOS, clock_gettime(2) on FreeBSD 15), as `CLOCK_BOOTTIME` does on
/// Linux. (Linux's own does not: forced there, the suspend check sees no sleep.)
#[cfg_attr(
    all(target_os = "linux", not(feature = "portable-paths")),
    allow(dead_code)
)]
pub(crate) fn suspend_clock_ns() -> Option<u64> {
    super::clock_ns(nix::time::ClockId::CLOCK_MONOTONIC)
}

/// The wall clock read before a `mkdirat`, less a second and floored to the whole second: a
/// directory made after it is born no earlier whatever the file system's timestamp resolution
/// (HFS+ keeps whole seconds, FreeBSD's `vfs.timestamp_precision` may be seconds, APFS and UFS
/// finer) and whether the kernel stamps it from a precise clock or from a tick-coarse one that
/// lags the precise one by up to a tick (vfs_timestamp(9): "accurate within 1/HZ"; Linux's
/// inode clock likewise), which could put a birth just before the second the precise clock
/// had entered. The check's resolution is one to two seconds here (a tick on Linux).
#[cfg_attr(
    all(target_os = "linux", not(feature = "portable-paths")),
    allow(dead_code)
)]
pub(crate) fn birth_floor() -> Option<SystemTime> {
    let ns = super::clock_ns(nix::time::ClockId::CLOCK_REALTIME)?;
    let secs = (ns / 1_000_000_000).checked_sub(1)?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// No `/proc` to read a PID namespace from.
#[cfg_attr(
    all(target_os = "linux", not(feature = "portable-paths")),
    allow(dead_code)
)]
pub(crate) fn pid_namespace() -> Option<u64> {
    None
}

/// No `/proc` to read a boot id from (see [`host_instance`]).
#[cfg_attr(
    all(target_os = "linux", not(feature = "portable-paths")),
    allow(dead_code)
)]
pub(crate) fn boot_id() -> Option<String> {
    None
}

/// No `/proc` to read a process's start time from.
#[cfg_attr(
    all(target_os = "linux", not(feature = "portable-paths")),
    allow(dead_code)
)]
pub(crate) fn start_time() -> Option<u64> {
    None
}

/// No boot identity, so no scale shared with the other processes on this host: contenders time
/// a holder's duration from when they first saw its state (see `engine`), which waits longer
/// after a crash in heartbeat-only mode and never shorter.
#[cfg_attr(
    all(target_os = "linux", not(feature = "portable-paths")),
    allow(dead_code)
)]
pub(crate) fn host_instance() -> Option<String> {
    None
}

/// The kind of network (or user-space) file system named by `statfs`'s `f_fstypename` on macOS
/// and FreeBSD, where `flock` is not to be trusted across hosts; `None` for a local one.
#[cfg(any(not(target_os = "linux"), test))]
pub(crate) fn network_kind_of(type_name: &str) -> Option<&'static str> {
    match type_name {
        // FreeBSD's NFS client is "nfs" ("oldnfs" the old one); macOS's is "nfs".
        "nfs" | "oldnfs" => Some("nfs"),
        "smbfs" | "cifs" => Some("smb/cifs"),
        "afpfs" => Some("afp"),
        "webdav" => Some("webdav"),
        // FreeBSD's fusefs names its mounts "fusefs.<subtype>"; macFUSE "macfuse" (or, before
        // version 4, "osxfuse").
        "macfuse" | "osxfuse" | "fusefs" => Some("fuse"),
        name if name.starts_with("fusefs.") => Some("fuse"),
        "p9fs" | "9p" => Some("9p"),
        "afs" => Some("afs"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_file_systems_are_told_by_name() {
        for (name, kind) in [
            ("nfs", "nfs"),
            ("oldnfs", "nfs"),
            ("smbfs", "smb/cifs"),
            ("afpfs", "afp"),
            ("webdav", "webdav"),
            ("macfuse", "fuse"),
            ("osxfuse", "fuse"),
            ("fusefs.sshfs", "fuse"),
            ("p9fs", "9p"),
        ] {
            assert_eq!(network_kind_of(name), Some(kind), "{name}");
        }
        for local in [
            "apfs", "hfs", "ufs", "zfs", "tmpfs", "msdosfs", "devfs", "fusefsx",
        ] {
            assert_eq!(network_kind_of(local), None, "{local}");
        }
    }

    #[test]
    fn the_birth_floor_is_a_whole_second() {
        let floor = birth_floor().unwrap_or_else(|| panic!("readable"));
        let since = floor
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(since.subsec_nanos(), 0);
    }
}

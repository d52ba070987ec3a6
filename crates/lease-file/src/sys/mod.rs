//! What differs between the systems this crate runs on, one module per system, each choice
//! argued with its source in the [platforms](crate::platforms) page. Nothing outside this module
//! names a clock id, a `statfs` magic number, a `/proc` path or a `mode_t` width.
//!
//! * `linux`: `CLOCK_BOOTTIME`, `CLOCK_REALTIME_COARSE`, `statfs` magic numbers, `/proc`
//!   identities (inotify is the crate's `watch` module, compiled on Linux only).
//! * `bsd` (macOS and FreeBSD): `statfs`'s `f_fstypename`, a 16-bit `mode_t`, macOS's signed
//!   `dev_t`; the rest is `portable`'s.
//! * `windows`: std's clock, no identities, no permission bits; nothing to probe (every lock
//!   there is heartbeat-only).
//! * `portable`: the paths with no Linux-only call (`CLOCK_MONOTONIC`, which counts time asleep
//!   on macOS and FreeBSD; no `/proc`; no coarse clock), which macOS and FreeBSD take and which
//!   the `portable-paths` feature forces on Linux, so that Linux's tests hold them to the same
//!   promise.

#[cfg(any(target_os = "macos", target_os = "freebsd"))]
mod bsd;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(unix)]
mod portable;
#[cfg(windows)]
mod windows;

#[cfg(any(target_os = "macos", target_os = "freebsd"))]
pub(crate) use bsd::{dev_ino, mode, network_file_system};
#[cfg(target_os = "linux")]
pub(crate) use linux::{dev_ino, mode, network_file_system};

#[cfg(all(target_os = "linux", not(feature = "portable-paths")))]
pub(crate) use linux::{
    birth_floor, boot_id, host_instance, pid_namespace, start_time, suspend_clock_ns,
};
#[cfg(all(unix, any(not(target_os = "linux"), feature = "portable-paths")))]
pub(crate) use portable::{
    birth_floor, boot_id, host_instance, pid_namespace, start_time, suspend_clock_ns,
};
#[cfg(windows)]
pub(crate) use windows::{
    birth_floor, boot_id, host_instance, host_name, pid_namespace, start_time, suspend_clock_ns,
};

/// This host's name (`gethostname`), or empty.
#[cfg(unix)]
pub(crate) fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

/// `CLOCK_MONOTONIC` in nanoseconds, the clock a host's shared scale is read on (`None` if
/// unreadable, and always on Windows, which has no shared scale).
pub(crate) fn monotonic_ns() -> Option<u64> {
    #[cfg(unix)]
    {
        clock_ns(nix::time::ClockId::CLOCK_MONOTONIC)
    }
    #[cfg(windows)]
    {
        None
    }
}

/// A `clock_gettime` reading in nanoseconds (`None` if unreadable).
#[cfg(unix)]
fn clock_ns(clock: nix::time::ClockId) -> Option<u64> {
    let t = nix::time::clock_gettime(clock).ok()?;
    u64::try_from(t.tv_sec())
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(u64::try_from(t.tv_nsec()).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock that counts time asleep is readable and never goes back, on every Unix system
    /// and with the portable paths forced (Windows reads none: see `windows`).
    #[cfg(unix)]
    #[test]
    fn the_suspend_clock_reads_and_never_goes_back() {
        let first = suspend_clock_ns().unwrap_or_else(|| panic!("readable"));
        let second = suspend_clock_ns().unwrap_or_else(|| panic!("readable"));
        assert!(first > 0 && second >= first, "{first} then {second}");
    }

    /// A directory made after the birth floor was read is born no earlier than it: the check
    /// that tells a swapped-in older directory apart never refuses the one just made (Unix;
    /// Windows reads no floor, and skips the check).
    #[cfg(unix)]
    #[test]
    fn a_new_directory_is_born_no_earlier_than_the_floor() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for i in 0..50 {
            let floor = birth_floor().unwrap_or_else(|| panic!("readable"));
            let made = dir.path().join(i.to_string());
            std::fs::create_dir(&made).unwrap_or_else(|e| panic!("{e}"));
            let Ok(born) = std::fs::metadata(&made).and_then(|m| m.created()) else {
                // No birth time on this file system: the check is skipped there.
                return;
            };
            assert!(born >= floor, "born {born:?}, floor {floor:?}");
        }
    }

    /// This process's identity is stable, and a process's start time is known exactly where
    /// the system's paths read it.
    #[test]
    fn the_identity_is_stable() {
        assert_eq!(boot_id(), boot_id());
        assert_eq!(start_time(), start_time());
        assert_eq!(host_instance(), host_instance());
        if cfg!(all(target_os = "linux", not(feature = "portable-paths"))) {
            assert!(start_time().is_some() && boot_id().is_some() && pid_namespace().is_some());
            assert!(host_instance().is_some());
        } else if cfg!(windows) {
            assert_eq!((suspend_clock_ns(), birth_floor()), (None, None));
            assert_eq!((pid_namespace(), boot_id(), start_time()), (None, None, None));
        } else {
            assert_eq!((pid_namespace(), boot_id(), start_time()), (None, None, None));
            assert_eq!(host_instance(), None);
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_mode_keeps_its_permission_bits() {
        assert_eq!(mode(0o100_640).bits() & 0o7777, 0o640);
        assert_eq!(mode(0o2775).bits(), 0o2775);
    }
}

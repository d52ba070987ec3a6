//! macOS and FreeBSD: `statfs`'s `f_fstypename`, a 16-bit `mode_t`, 32-bit (macOS) device
//! numbers. The clocks and identities are the portable ones.

use std::os::fd::BorrowedFd;

use nix::sys::stat::{FileStat, Mode};

/// The kind of network (or user-space) file system `dir` is on, by `statfs`'s `f_fstypename`
/// (statfs(2) on both systems); `None` for a local one (or when `statfs` fails).
pub(crate) fn network_file_system(dir: BorrowedFd<'_>) -> Option<&'static str> {
    let stat = nix::sys::statfs::fstatfs(dir).ok()?;
    super::portable::network_kind_of(stat.filesystem_type_name())
}

/// Permission bits as a [`Mode`] (`mode_t` is 16 bits here; the bits kept fit).
pub(crate) fn mode(bits: u32) -> Mode {
    Mode::from_bits_truncate(u16::try_from(bits & 0o7777).unwrap_or(0))
}

/// A `stat`'s device and inode (`dev_t` is a signed 32-bit number on macOS: its bits, widened).
#[allow(clippy::cast_sign_loss, clippy::unnecessary_cast)]
pub(crate) fn dev_ino(stat: &FileStat) -> (u64, u64) {
    (stat.st_dev as u64, stat.st_ino as u64)
}

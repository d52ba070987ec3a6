//! Another local user for the tests that attack from the host: `nobody`, through `setpriv`.
//! Root only; a test that cannot have it prints why and passes without running.
#![allow(dead_code, clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `nobody`'s uid (and `nogroup`'s gid) on Debian.
pub(crate) const NOBODY: u32 = 65534;

/// `setpriv`, when this test runs as root and has it; else `None`, the reason printed.
pub(crate) fn root_only() -> Option<PathBuf> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: the attacker runs as another user, which needs root");
        return None;
    }
    let setpriv = PathBuf::from("/usr/bin/setpriv");
    if !setpriv.exists() {
        eprintln!("SKIPPED: needs /usr/bin/setpriv for the attacker");
        return None;
    }
    Some(setpriv)
}

/// Runs `script` with `sh -c` as `nobody`.
pub(crate) fn as_nobody(setpriv: &Path, script: &str) {
    let status = Command::new(setpriv)
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .status()
        .unwrap();
    assert!(status.success(), "the attacker's `{script}` failed");
}

/// Makes directory `path` owned by `uid` (and the group of that number) with `mode`.
pub(crate) fn mkdir_owned(path: &Path, uid: u32, mode: u32) {
    std::fs::create_dir(path).unwrap();
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

//! The rustdoc JSON that `xtask/tests/surface.rs` turns into `docs/public-api.txt`: which crates,
//! and the one command that documents each. `cargo xtask test` runs these commands in its build
//! step, so that the test step finds the JSON fresh and only compares; the test runs the same
//! commands itself (this file is its module too), so on its own, or after an edit, it documents
//! what changed and never reads a stale list.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The library crates listed, in dependency order (a crate's re-exports of another are
/// resolved through the other's list), with the features documented (`None`: all).
pub(crate) const LISTED: [(&str, Option<&[&str]>); 6] = [
    ("lease-core", None),
    ("lease-file", None),
    ("lease-dynamo", None),
    ("lessor-partition", None),
    ("lease-postgres", None),
    ("lease-redis", None),
];

/// Where the JSON is built: its own target dir under the workspace's (`$CARGO_TARGET_DIR` or
/// `<root>/target`), so that `RUSTC_BOOTSTRAP` never invalidates the main builds.
pub(crate) fn target_dir(root: &Path, cargo_target_dir: Option<OsString>) -> PathBuf {
    cargo_target_dir
        .map_or_else(|| root.join("target"), |dir| root.join(dir))
        .join("public-api")
}

/// `cargo rustdoc` writing `package`'s library as JSON to `<target_dir>/doc/<crate>.json`, with
/// `features` (`None`: all of them). Rustdoc's JSON output is unstable, so the one pinned stable
/// toolchain is asked for it with `RUSTC_BOOTSTRAP=1`. Cargo's own `--output-format json` (not
/// rustdoc flags after `--`) lets cargo see the JSON as up to date and not document an unchanged
/// crate again.
pub(crate) fn rustdoc_json(
    cargo: OsString,
    root: &Path,
    package: &str,
    features: Option<&[&str]>,
    target_dir: &Path,
) -> Command {
    let mut command = Command::new(cargo);
    command
        .current_dir(root)
        .env("RUSTC_BOOTSTRAP", "1")
        .args([
            "rustdoc",
            "--quiet",
            "-Z",
            "unstable-options",
            "--output-format",
            "json",
            "--package",
            package,
            "--lib",
            "--target-dir",
        ])
        .arg(target_dir);
    match features {
        None => {
            command.arg("--all-features");
        }
        Some(features) if !features.is_empty() => {
            command.args(["--features", &features.join(",")]);
        }
        Some(_) => {}
    }
    command
}

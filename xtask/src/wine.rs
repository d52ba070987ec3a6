//! Windows tests run from Linux (issue 34): test binaries for `x86_64-pc-windows-gnu`, linked by
//! the MinGW-w64 GCC, run under Wine in a prefix of this task's own (`target/wine/prefix`), set
//! for each `cargo` command through its environment, never through a global cargo config that
//! would change other users' builds.
//!
//! Nothing is installed here: a missing `wine` or MinGW linker fails with the Debian packages
//! to install (`.ci/run` installs them). Two things make Debian 12's Wine 8.0 run Rust test
//! binaries: the prefix, made once by `wineboot --init` (about 10 s on 2 cores), and a stub
//! `bcryptprimitives.dll` (`xtask/wine/bcryptprimitives.c`) built into it: Rust's std imports
//! `ProcessPrng` from that DLL (since 1.78), which Wine gained only in 9.0, so without it every
//! binary fails to load (`c0000135`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Result, project_root};

/// The rustc target the Windows tests are built for.
pub(crate) const TARGET: &str = "x86_64-pc-windows-gnu";

/// The Debian packages that provide what this module runs, for error messages and `.ci/run`.
pub(crate) const PACKAGES: &str = "wine wine64 gcc-mingw-w64-x86-64";

/// The MinGW-w64 C compiler, which rustc also links `x86_64-pc-windows-gnu` binaries with.
const MINGW_GCC: &str = "x86_64-w64-mingw32-gcc";

/// The Wine prefix (a private `C:` drive and registry) under the workspace's `target/`.
pub(crate) fn prefix() -> PathBuf {
    project_root().join("target/wine/prefix")
}

/// Sets the environment under which `cargo test --target x86_64-pc-windows-gnu` runs its test
/// binaries (doc tests included) with Wine in [`prefix`], its debug channels off.
pub(crate) fn configure(command: &mut Command) -> &mut Command {
    command
        .env("CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER", "wine")
        .env("WINEPREFIX", prefix())
        .env("WINEDEBUG", "-all")
}

/// Checks that `wine` and the MinGW linker are on `PATH`, makes the prefix if it is missing
/// (`wineboot --init`) and builds the `bcryptprimitives.dll` stub into it when it is missing or
/// older than its source.
pub(crate) fn prepare() -> Result {
    for (program, what) in [
        ("wine", "Wine, to run the Windows test binaries"),
        ("wineboot", "Wine's wineboot, to make the Wine prefix"),
        (MINGW_GCC, "the MinGW-w64 C compiler, which links them"),
    ] {
        if !on_path(program) {
            return Err(format!(
                "`{program}` is not on PATH: the Windows tests need {what}; install the Debian \
                 packages {PACKAGES} (apt-get install --no-install-recommends {PACKAGES}), as \
                 .ci/run does"
            )
            .into());
        }
    }
    let prefix = prefix();
    if prefix.join("system.reg").is_file() {
        println!("    Wine prefix: {} (made already)", prefix.display());
    } else {
        std::fs::create_dir_all(&prefix)
            .map_err(|e| format!("cannot create the Wine prefix {}: {e}", prefix.display()))?;
        let started = std::time::Instant::now();
        crate::step::run_command(
            "Wine prefix",
            Command::new("wineboot")
                .arg("--init")
                .env("WINEPREFIX", &prefix)
                .env("WINEDEBUG", "-all"),
        )?;
        println!(
            "    Wine prefix made in {:.1}s: {}",
            started.elapsed().as_secs_f64(),
            prefix.display()
        );
    }
    let source = project_root().join("xtask/wine/bcryptprimitives.c");
    let dll = prefix.join("drive_c/windows/system32/bcryptprimitives.dll");
    if is_newer(&dll, &source) {
        println!("    {} is up to date", dll.display());
        return Ok(());
    }
    crate::step::run_command(
        "bcryptprimitives.dll stub",
        Command::new(MINGW_GCC)
            .args(["-shared", "-O2", "-s", "-o"])
            .arg(&dll)
            .arg(&source)
            .arg("-ladvapi32"),
    )
}

/// Whether `program` is an executable file in one of `PATH`'s folders.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program)).is_ok_and(|m| m.is_file() && is_executable(&m))
        })
    })
}

#[cfg(unix)]
fn is_executable(metadata: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    metadata.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_: &std::fs::Metadata) -> bool {
    true
}

/// Whether `built` exists and was modified no earlier than `source`.
fn is_newer(built: &Path, source: &Path) -> bool {
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    matches!((modified(built), modified(source)), (Some(b), Some(s)) if b >= s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_and_prefix_are_set_per_command() {
        let mut command = Command::new("cargo");
        configure(&mut command);
        let envs: Vec<(String, String)> = command
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v?.to_str()?.to_owned())))
            .collect();
        assert!(envs.contains(&(
            "CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER".to_owned(),
            "wine".to_owned()
        )));
        assert!(envs.contains(&("WINEDEBUG".to_owned(), "-all".to_owned())));
        assert!(
            envs.iter()
                .any(|(k, v)| k == "WINEPREFIX" && v.ends_with("target/wine/prefix")),
            "{envs:?}"
        );
    }

    #[test]
    fn a_program_is_found_on_path_only_if_it_is_there() {
        assert!(on_path("cargo"));
        assert!(!on_path("no-such-program-for-xtask-tests"));
    }
}

//! The other systems, checked from Linux on every change (issue 34): clippy with `-D warnings`
//! for macOS and FreeBSD (every target of lease-core, lease-file and lessor-partition, every
//! feature; every target of lease-cli with the file store, its default) and Windows (every
//! target of lease-core and lessor-partition), so that a Linux-only call cannot slip back in;
//! the tests of lease-file (library and conformance suite) and lease-cli (all of them) with
//! their `portable-paths` features, the macOS and FreeBSD code paths run on Linux; and
//! lease-core and lessor-partition's tests built for Windows and run under Wine (the `wine`
//! module: its prefix, its runner, the Debian packages it needs). The rustup targets are
//! installed when missing (std only: `cargo clippy --target` of pure-Rust crates needs no C
//! cross-compiler; the Windows test binaries are linked by MinGW-w64's GCC).
//!
//! lease-dynamo is checked for Windows too: MinGW-w64's GCC, which links the Windows tests,
//! compiles aws-lc-sys for it.
//!
//! Not here, and why: lease-dynamo on macOS and FreeBSD, lease-postgres and lease-cli's
//! `dynamo`/`postgres` features need a C compiler for the target (aws-lc-sys for the AWS SDK's
//! TLS stack, ring for rustls), which a check from Linux has only for Windows, so
//! lessor-partition's DynamoDB and PostgreSQL suites are Linux-only dev-dependencies and
//! lease-cli is checked without those features; lease-cli on Windows (`lease run` is built on
//! Unix process groups and signals); lease-file on Windows is a `compile_error!` until its
//! port.

use std::process::Command;

use crate::step::{Kind, Steps, cargo};
use crate::{Result, parse_flags};

/// One clippy run for another system: its target and the packages and flags checked there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Check {
    /// The rustc target triple.
    pub(crate) target: &'static str,
    /// What is checked, as cargo arguments (packages and target selection).
    pub(crate) selection: &'static [&'static str],
}

/// The crates whose tests and benches must compile on the BSD-family systems.
const UNIX_SELECTION: &[&str] = &[
    "-p",
    "lease-core",
    "-p",
    "lease-file",
    "-p",
    "lessor-partition",
    "--all-targets",
    "--all-features",
];

/// lease-cli with the file store alone (no `dynamo`, no `postgres`: those need a C compiler for
/// the target), every target.
const CLI_SELECTION: &[&str] = &["-p", "lease-cli", "--all-targets"];

/// Every check, in the order they run.
pub(crate) const CHECKS: [Check; 8] = [
    Check {
        target: "x86_64-apple-darwin",
        selection: UNIX_SELECTION,
    },
    Check {
        target: "aarch64-apple-darwin",
        selection: UNIX_SELECTION,
    },
    Check {
        target: "x86_64-unknown-freebsd",
        selection: UNIX_SELECTION,
    },
    Check {
        target: "x86_64-apple-darwin",
        selection: CLI_SELECTION,
    },
    Check {
        target: "aarch64-apple-darwin",
        selection: CLI_SELECTION,
    },
    Check {
        target: "x86_64-unknown-freebsd",
        selection: CLI_SELECTION,
    },
    // lease-file is a `compile_error!` there until its port (see its `platforms` page).
    Check {
        target: crate::wine::TARGET,
        selection: WINDOWS_SELECTION,
    },
    // aws-lc-sys, under the AWS SDK's TLS stack, compiles with MinGW-w64's GCC (no cmake, no
    // nasm), which the Windows tests need anyway.
    Check {
        target: crate::wine::TARGET,
        selection: &["-p", "lease-dynamo", "--all-targets", "--all-features"],
    },
];

/// What builds on Windows, every target (lessor-partition's file-store suites and README
/// example are Unix-only until lease-file's port): checked by clippy and run under Wine.
const WINDOWS_SELECTION: &[&str] = &[
    "-p",
    "lease-core",
    "-p",
    "lessor-partition",
    "--all-targets",
    "--all-features",
];

/// `cargo test` of [`WINDOWS_SELECTION`] for Windows, doc tests included (`--all-targets`
/// leaves them out), run under Wine ([`crate::wine::configure`]).
const WINDOWS_TESTS: [&str; 8] = [
    "test",
    "--target",
    crate::wine::TARGET,
    "-p",
    "lease-core",
    "-p",
    "lessor-partition",
    "--all-features",
];

/// lease-file's library tests and its conformance suite on the macOS/FreeBSD paths.
const PORTABLE_TESTS: [&str; 8] = [
    "test",
    "-p",
    "lease-file",
    "--features",
    "portable-paths",
    "--lib",
    "--test",
    "conformance",
];

/// lease-cli's tests on the macOS/FreeBSD paths (`src/sys.rs`): every suite that runs without
/// a DynamoDB or PostgreSQL server.
const CLI_PORTABLE_TESTS: [&str; 5] = ["test", "-p", "lease-cli", "--features", "portable-paths"];

/// How many steps [`check`] runs: the rustup targets, one clippy per [`CHECKS`] entry, the two
/// portable-path test runs and their builds, then Wine's prefix, the Windows test build and its
/// run.
pub(crate) const STEPS: usize = CHECKS.len() + 8;

/// `cargo xtask platforms`: these steps of `cargo xtask test` alone.
pub(crate) fn platforms(flags: &[&str]) -> Result {
    parse_flags("platforms", flags, &[])?;
    let mut steps = Steps::new("platforms", STEPS);
    check(&mut steps)?;
    steps.summary();
    Ok(())
}

/// The steps: missing rustup targets installed, clippy for each of [`CHECKS`], the portable
/// paths' tests on Linux.
pub(crate) fn check(steps: &mut Steps) -> Result {
    let wanted: Vec<&str> = CHECKS.iter().map(|check| check.target).collect();
    steps.run_fn_as(Kind::Build, "rustup targets of the other systems", || {
        let listed = Command::new("rustup")
            .args(["target", "list", "--installed"])
            .output()
            .map_err(|e| format!("this step needs rustup, to add the targets {wanted:?}: {e}"))?;
        let missing = missing_targets(&String::from_utf8_lossy(&listed.stdout), &wanted);
        if missing.is_empty() {
            println!("    all installed: {}", wanted.join(" "));
            return Ok(());
        }
        crate::step::run_command(
            "rustup targets of the other systems",
            Command::new("rustup")
                .args(["target", "add"])
                .args(&missing),
        )
    })?;
    for check in CHECKS {
        steps.run_as(
            Kind::Build,
            &format!("clippy -D warnings, {}, {}", check.target, packages(check)),
            &mut cargo(&clippy_args(check)),
        )?;
    }
    // Built first, in a step of its own, so that the test time counts the tests alone.
    for (what, args) in [
        ("lease-file", &PORTABLE_TESTS[..]),
        ("lease-cli", &CLI_PORTABLE_TESTS[..]),
    ] {
        steps.run_as(
            Kind::Build,
            &format!("build {what}'s tests on the macOS/FreeBSD paths"),
            cargo(args).arg("--no-run"),
        )?;
        steps.run_as(
            Kind::Test,
            &format!("{what} on the macOS/FreeBSD paths (--features portable-paths)"),
            &mut cargo(args),
        )?;
    }
    steps.run_fn_as(
        Kind::Other,
        "Wine prefix for the Windows tests (target/wine/prefix)",
        crate::wine::prepare,
    )?;
    let mut build = cargo(&WINDOWS_TESTS);
    build.arg("--no-run");
    steps.run_as(
        Kind::Build,
        "build the Windows tests of lease-core and lessor-partition",
        crate::wine::configure(&mut build),
    )?;
    steps.run_as(
        Kind::Test,
        "lease-core and lessor-partition's tests on Windows, under Wine",
        crate::wine::configure(&mut cargo(&WINDOWS_TESTS)),
    )?;
    Ok(())
}

/// The packages a check selects (`lease-core lease-file lessor-partition`), for its step's name.
fn packages(check: Check) -> String {
    check
        .selection
        .windows(2)
        .filter(|pair| pair[0] == "-p")
        .map(|pair| pair[1])
        .collect::<Vec<_>>()
        .join(" ")
}

/// `cargo clippy --target <target> <selection> -- -D warnings`.
pub(crate) fn clippy_args(check: Check) -> Vec<&'static str> {
    let mut args = vec!["clippy", "--target", check.target];
    args.extend_from_slice(check.selection);
    args.extend_from_slice(&["--", "-D", "warnings"]);
    args
}

/// The targets of `wanted` that `rustup target list --installed` (one per line) does not list.
pub(crate) fn missing_targets<'a>(installed: &str, wanted: &[&'a str]) -> Vec<&'a str> {
    wanted
        .iter()
        .copied()
        .filter(|target| !installed.lines().any(|line| line.trim() == *target))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_targets_not_listed_are_added() {
        let installed =
            "x86_64-unknown-linux-gnu\nx86_64-apple-darwin\n  x86_64-unknown-freebsd \n";
        assert_eq!(
            missing_targets(
                installed,
                &[
                    "x86_64-apple-darwin",
                    "aarch64-apple-darwin",
                    "x86_64-unknown-freebsd"
                ]
            ),
            vec!["aarch64-apple-darwin"]
        );
        assert!(missing_targets(installed, &["x86_64-apple-darwin"]).is_empty());
        // A prefix is not a match.
        assert_eq!(
            missing_targets("x86_64-apple-darwin-extra\n", &["x86_64-apple-darwin"]),
            vec!["x86_64-apple-darwin"]
        );
    }

    #[test]
    fn every_check_denies_warnings_on_its_own_target() {
        for check in CHECKS {
            let args = clippy_args(check);
            assert_eq!(&args[..3], &["clippy", "--target", check.target]);
            assert!(args.ends_with(&["--", "-D", "warnings"]), "{args:?}");
            // lease-cli's `dynamo` and `postgres` need a C compiler for the target.
            assert_eq!(
                args.contains(&"--all-features"),
                !args.contains(&"lease-cli"),
                "{args:?}"
            );
        }
    }

    /// The acceptance of issue 34: lease-core, lease-file and lessor-partition with every
    /// target on both macOS targets and FreeBSD; lease-core and lessor-partition's libraries on
    /// Windows.
    #[test]
    fn the_issue_s_targets_and_crates_are_all_checked() {
        for target in [
            "x86_64-apple-darwin",
            "aarch64-apple-darwin",
            "x86_64-unknown-freebsd",
        ] {
            let check = CHECKS
                .iter()
                .find(|check| check.target == target)
                .unwrap_or_else(|| panic!("{target} is not checked"));
            for krate in ["lease-core", "lease-file", "lessor-partition"] {
                assert!(check.selection.contains(&krate), "{krate} on {target}");
            }
            assert!(check.selection.contains(&"--all-targets"), "{target}");
        }
        let windows = CHECKS
            .iter()
            .find(|check| check.target == "x86_64-pc-windows-gnu")
            .unwrap_or_else(|| panic!("windows is not checked"));
        for krate in ["lease-core", "lessor-partition"] {
            assert!(windows.selection.contains(&krate), "{krate} on windows");
        }
        // Issue 34's Windows item: lease-dynamo builds there too.
        assert!(
            CHECKS
                .iter()
                .any(|check| check.target == "x86_64-pc-windows-gnu"
                    && check.selection.contains(&"lease-dynamo")),
            "lease-dynamo on windows"
        );
        assert!(PORTABLE_TESTS.contains(&"portable-paths"));
    }

    /// Issue 34's Windows item: the crates that build there are tested there (under Wine), with
    /// every feature, not only compiled.
    #[test]
    fn the_windows_crates_tests_run_for_windows() {
        assert_eq!(
            &WINDOWS_TESTS[..3],
            &["test", "--target", "x86_64-pc-windows-gnu"]
        );
        for krate in ["lease-core", "lessor-partition"] {
            assert!(WINDOWS_TESTS.contains(&krate), "{krate}");
            assert!(WINDOWS_SELECTION.contains(&krate), "{krate}");
        }
        assert!(WINDOWS_TESTS.contains(&"--all-features"));
        // Doc tests run too: `--all-targets` would leave them out.
        assert!(!WINDOWS_TESTS.contains(&"--all-targets"));
    }

    /// Issue 34 item 3: lease-cli with the file store on both macOS targets and FreeBSD, and
    /// its tests on their paths.
    #[test]
    fn lease_cli_is_checked_on_macos_and_freebsd() {
        for target in [
            "x86_64-apple-darwin",
            "aarch64-apple-darwin",
            "x86_64-unknown-freebsd",
        ] {
            assert!(
                CHECKS.iter().any(|check| check.target == target
                    && check.selection.contains(&"lease-cli")
                    && check.selection.contains(&"--all-targets")),
                "lease-cli on {target}"
            );
        }
        assert_eq!(packages(CHECKS[3]), "lease-cli");
        assert_eq!(
            packages(CHECKS[0]),
            "lease-core lease-file lessor-partition"
        );
        assert!(CLI_PORTABLE_TESTS.contains(&"lease-cli"));
        assert!(CLI_PORTABLE_TESTS.contains(&"portable-paths"));
    }
}

//! The other systems, checked from Linux on every change (issue 34): clippy with `-D warnings`
//! for macOS and FreeBSD (every target of lease-core, lease-file, lessor-partition,
//! lease-postgres and lease-redis, every feature; every target of lease-cli with the file store,
//! its default, and again with its `postgres` and `redis` stores) and Windows (every target of
//! lease-core, lessor-partition and lease-dynamo), so that a Linux-only call cannot slip back
//! in; the tests of lease-file (library and conformance suite) and lease-cli (all of them) with
//! their `portable-paths` features, the macOS and FreeBSD code paths run on Linux; and
//! lease-core's, lessor-partition's and lease-file's tests built for Windows and run under Wine
//! (the `wine` module: its prefix, its runner, the Debian packages it needs). The rustup targets
//! are installed when missing (std only).
//!
//! The checks that build ring (rustls's crypto, under lease-postgres and lease-redis) for macOS
//! and FreeBSD need a C compiler for the target: Debian's clang, with no target sysroot, which
//! ring's C does not need (its own `RING_CORE_NOSTDLIBINC` switch, clang's freestanding headers,
//! and for Apple targets a stand-in `TargetConditionals.h`: [`C_INCLUDE`]). Nothing built so is
//! linked. For Windows, MinGW-w64's GCC, which links the Windows tests, compiles aws-lc-sys.
//!
//! Not here, and why: lease-dynamo and lease-cli's `dynamo` feature on macOS and FreeBSD
//! (aws-lc-sys, under the AWS SDK's TLS stack, includes the target's libc headers,
//! `<stdlib.h>`, `<sys/types.h>`, `<pthread.h>`, which only a macOS SDK or a FreeBSD sysroot
//! has), so lessor-partition's DynamoDB suites are Linux-only dev-dependencies; lease-cli on
//! Windows (`lease run` is built on Unix process groups and signals); lease-file's suites that
//! rest on Unix (each file says why) and its doc tests, which show kernel mode, on Windows.

use std::path::PathBuf;
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
    /// Whether it builds C for the target (ring), so runs with [`c_compiler_env`].
    pub(crate) builds_c: bool,
}

/// The crates whose tests and benches must compile on the BSD-family systems. lease-postgres,
/// lease-redis and lessor-partition's suites on them build ring's C.
const UNIX_SELECTION: &[&str] = &[
    "-p",
    "lease-core",
    "-p",
    "lease-file",
    "-p",
    "lessor-partition",
    "-p",
    "lease-postgres",
    "-p",
    "lease-redis",
    "--all-targets",
    "--all-features",
];

/// lease-cli with the file store alone, every target: pure Rust, and the only check of the code
/// that refuses `--postgres` and `--redis` when their features are off.
const CLI_SELECTION: &[&str] = &["-p", "lease-cli", "--all-targets"];

/// lease-cli with its PostgreSQL and Redis stores (ring's C), every target. Not `dynamo`:
/// aws-lc-sys (the module's docs).
const CLI_STORES_SELECTION: &[&str] = &[
    "-p",
    "lease-cli",
    "--all-targets",
    "--features",
    "postgres,redis",
];

/// Every check, in the order they run.
pub(crate) const CHECKS: [Check; 11] = [
    Check {
        target: "x86_64-apple-darwin",
        selection: UNIX_SELECTION,
        builds_c: true,
    },
    Check {
        target: "aarch64-apple-darwin",
        selection: UNIX_SELECTION,
        builds_c: true,
    },
    Check {
        target: "x86_64-unknown-freebsd",
        selection: UNIX_SELECTION,
        builds_c: true,
    },
    Check {
        target: "x86_64-apple-darwin",
        selection: CLI_SELECTION,
        builds_c: false,
    },
    Check {
        target: "aarch64-apple-darwin",
        selection: CLI_SELECTION,
        builds_c: false,
    },
    Check {
        target: "x86_64-unknown-freebsd",
        selection: CLI_SELECTION,
        builds_c: false,
    },
    Check {
        target: "x86_64-apple-darwin",
        selection: CLI_STORES_SELECTION,
        builds_c: true,
    },
    Check {
        target: "aarch64-apple-darwin",
        selection: CLI_STORES_SELECTION,
        builds_c: true,
    },
    Check {
        target: "x86_64-unknown-freebsd",
        selection: CLI_STORES_SELECTION,
        builds_c: true,
    },
    Check {
        target: crate::wine::TARGET,
        selection: WINDOWS_SELECTION,
        builds_c: false,
    },
    // aws-lc-sys, under the AWS SDK's TLS stack, compiles with MinGW-w64's GCC (no cmake, no
    // nasm), which the Windows tests need anyway.
    Check {
        target: crate::wine::TARGET,
        selection: &["-p", "lease-dynamo", "--all-targets", "--all-features"],
        builds_c: false,
    },
];

/// What builds on Windows, every target (lessor-partition's file-store suites and README
/// example are Unix-only): checked by clippy and run under Wine.
const WINDOWS_SELECTION: &[&str] = &[
    "-p",
    "lease-core",
    "-p",
    "lessor-partition",
    "-p",
    "lease-file",
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

/// lease-file's tests for Windows, run under Wine: its library's and every suite that does not
/// rest on Unix (the others say why in their first lines: signals, permission bits, symbolic
/// links, inotify, kernel mode), but its model check, which is the same computation on every
/// system (and takes minutes unoptimised under Wine). Not its doc tests: they show kernel mode,
/// which Windows has not.
pub(crate) const WINDOWS_FILE_TESTS: &[&str] = &[
    "test",
    "--target",
    crate::wine::TARGET,
    "-p",
    "lease-file",
    "--features",
    "metrics",
    "--lib",
    "--test",
    "clocks",
    "--test",
    "conformance",
    "--test",
    "exact_paths",
    "--test",
    "face_model",
    "--test",
    "fenced",
    "--test",
    "hostile",
    "--test",
    "kept_dirs",
    "--test",
    "lock",
    "--test",
    "metrics",
    "--test",
    "parity",
    "--test",
    "processes",
    "--test",
    "prune",
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

/// How many steps [`check`] runs: the rustup targets, the C compiler's probe, one clippy per
/// [`CHECKS`] entry, the two portable-path test runs and their builds, then Wine's prefix, and
/// the two Windows test builds and their runs.
pub(crate) const STEPS: usize = CHECKS.len() + 11;

/// The C compiler that the checks which build C give cc-rs, and the Debian package it is in.
pub(crate) const C_COMPILER: &str = "clang";

/// Where the stand-in `TargetConditionals.h` is, from the workspace root: the one header of the
/// macOS SDK that ring's C includes on Apple targets (the file says what it holds and why).
pub(crate) const C_INCLUDE: &str = "xtask/cross-include";

/// cc-rs's flags for ring on a target without its sysroot: no system header directories
/// (`-nostdlibinc`; clang's own, `<stddef.h>`, `<stdint.h>`, the intrinsics, stay), freestanding
/// so that those do not reach for libc's (`-ffreestanding`: `<xmmintrin.h>` includes
/// `<stdlib.h>` otherwise), and ring's own switch for building so (`RING_CORE_NOSTDLIBINC`,
/// which its build script sets itself for wasm32). A C library that wants libc's headers fails
/// here, naming the header, instead of compiling against Linux's.
const C_FLAGS: &str = "-ffreestanding -nostdlibinc -DRING_CORE_NOSTDLIBINC=1";

/// The variables that make cc-rs build C for `target` with [`C_COMPILER`] ([`C_FLAGS`], the
/// stand-in headers of [`C_INCLUDE`] under `root`). Keyed by target, so the host's own C (build
/// scripts) is built as always.
pub(crate) fn c_compiler_env(target: &str, root: &std::path::Path) -> [(String, String); 2] {
    let key = target.replace('-', "_");
    let include: PathBuf = root.join(C_INCLUDE);
    [
        (format!("CC_{key}"), C_COMPILER.to_string()),
        (
            format!("CFLAGS_{key}"),
            format!("{C_FLAGS} -I{}", include.display()),
        ),
    ]
}

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
    steps.run_fn_as(
        Kind::Build,
        "C compiler for the macOS and FreeBSD targets",
        || {
            let version = Command::new(C_COMPILER)
            .arg("--version")
            .output()
            .ok()
            .filter(|output| output.status.success())
            .ok_or_else(|| {
                format!(
                    "the macOS and FreeBSD checks of lease-postgres, lease-redis and lease-cli's \
                     `postgres`/`redis` stores build ring's C for those targets with \
                     `{C_COMPILER}`, which is not on PATH: install Debian's package \
                     `{C_COMPILER}` (apt-get install --no-install-recommends {C_COMPILER})"
                )
            })?;
            let version = String::from_utf8_lossy(&version.stdout);
            println!("    {}", version.lines().next().unwrap_or_default());
            Ok(())
        },
    )?;
    let root = crate::project_root();
    for check in CHECKS {
        let mut command = cargo(&clippy_args(check));
        if check.builds_c {
            command.envs(c_compiler_env(check.target, &root));
        }
        steps.run_as(
            Kind::Build,
            &format!(
                "clippy -D warnings, {}, {}",
                check.target,
                selection_name(check)
            ),
            &mut command,
        )?;
    }
    // Built first, in a step of its own, so that the test time counts the tests alone; run in
    // lanes, two binaries at a time (most of lease-cli's wait on child processes).
    for (what, args) in [
        ("lease-file", &PORTABLE_TESTS[..]),
        ("lease-cli", &CLI_PORTABLE_TESTS[..]),
    ] {
        build_then_run_in_lanes(
            steps,
            &format!("build {what}'s tests on the macOS/FreeBSD paths"),
            &format!("{what} on the macOS/FreeBSD paths (--features portable-paths)"),
            &format!("{what}-portable-paths"),
            &mut cargo(args),
            None,
        )?;
    }
    steps.run_fn_as(
        Kind::Other,
        "Wine prefix for the Windows tests (target/wine/prefix)",
        crate::wine::prepare,
    )?;
    // With `cargo test`, for the doc tests (lanes run test binaries only).
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
    build_then_run_in_lanes(
        steps,
        "build lease-file's Windows tests",
        "lease-file's tests on Windows, under Wine",
        "lease-file-windows",
        crate::wine::configure(&mut cargo(WINDOWS_FILE_TESTS)),
        Some("wine"),
    )?;
    // About 2 GB, before the test build needs the room.
    let target = crate::quick_start::target_dir(&crate::project_root());
    let mut built: Vec<PathBuf> = CHECKS
        .iter()
        .map(|check| target.join(check.target))
        .collect();
    built.sort();
    built.dedup();
    built.push(target.join("wine"));
    crate::step::free_in_ci("the other systems' builds and the Wine prefix", &built);
    Ok(())
}

/// Builds the tests `command` (a `cargo test`) selects in a build step of `build_title`, then
/// runs their binaries in lanes ([`crate::lanes`], two at a time) in a test step of `title`,
/// with `command`'s environment, through `runner` for another system's binaries, their logs in
/// `target/xtask-logs/<logs>`.
fn build_then_run_in_lanes(
    steps: &mut Steps,
    build_title: &str,
    title: &str,
    logs: &str,
    command: &mut Command,
    runner: Option<&str>,
) -> Result {
    let messages = steps.run_capturing_as(
        Kind::Build,
        build_title,
        command
            .arg("--no-run")
            .arg("--message-format=json-render-diagnostics"),
    )?;
    let mut binaries = crate::lanes::from_cargo_messages(&messages)?;
    if let Some(target) = command
        .get_args()
        .skip_while(|arg| *arg != "--target")
        .nth(1)
    {
        let target = target.to_string_lossy();
        for binary in &mut binaries {
            let flag = ["--target".to_owned(), target.clone().into_owned()];
            binary.rerun_args.splice(0..0, flag);
        }
    }
    let logs = crate::project_root().join("target/xtask-logs").join(logs);
    steps.run_fn_as(Kind::Test, title, || {
        crate::lanes::run(binaries, command, &logs, runner)
    })
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

/// A check's packages and, when it names some, its features (`lease-cli, features
/// postgres,redis`), for its step's name: two checks of a package on one target differ there.
fn selection_name(check: Check) -> String {
    let features = check
        .selection
        .windows(2)
        .find(|pair| pair[0] == "--features")
        .map(|pair| format!(", features {}", pair[1]));
    format!("{}{}", packages(check), features.unwrap_or_default())
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
            // lease-cli's `dynamo` builds aws-lc-sys, which needs the target's libc headers.
            assert_eq!(
                args.contains(&"--all-features"),
                !args.contains(&"lease-cli"),
                "{args:?}"
            );
            // Except for Windows, where MinGW-w64's GCC has the headers.
            assert!(
                check.target == crate::wine::TARGET
                    || !args.iter().any(|arg| arg.contains("dynamo")),
                "aws-lc-sys cannot be built without a sysroot: {args:?}"
            );
        }
    }

    /// A check that builds ring (lease-postgres, lease-redis, lease-cli's stores) gets the C
    /// compiler; the pure-Rust ones do not, so that they keep showing they need none.
    #[test]
    fn the_checks_that_build_c_and_only_they_get_the_c_compiler() {
        for check in CHECKS {
            let builds_ring = check
                .selection
                .iter()
                .any(|arg| ["lease-postgres", "lease-redis", "postgres,redis"].contains(arg));
            assert_eq!(check.builds_c, builds_ring, "{check:?}");
        }
        assert!(
            CHECKS
                .iter()
                .any(|check| !check.builds_c && check.target.contains("apple"))
        );
    }

    #[test]
    fn the_c_compiler_is_set_for_its_target_alone_without_system_headers() {
        let root = crate::project_root();
        let [(cc, compiler), (cflags, flags)] = c_compiler_env("aarch64-apple-darwin", &root);
        assert_eq!(cc, "CC_aarch64_apple_darwin");
        assert_eq!(compiler, "clang");
        assert_eq!(cflags, "CFLAGS_aarch64_apple_darwin");
        for flag in [
            "-nostdlibinc",
            "-ffreestanding",
            "-DRING_CORE_NOSTDLIBINC=1",
        ] {
            assert!(flags.split(' ').any(|f| f == flag), "{flag} in {flags}");
        }
        let include = flags
            .split(' ')
            .find_map(|flag| flag.strip_prefix("-I"))
            .unwrap_or_else(|| panic!("no -I in {flags}"));
        assert!(
            std::path::Path::new(include)
                .join("TargetConditionals.h")
                .is_file(),
            "{include}"
        );
    }

    /// The acceptance of issue 34: every published crate but lease-dynamo (aws-lc-sys, see the
    /// module's docs) with every target on both macOS targets and FreeBSD; lease-core,
    /// lessor-partition and lease-dynamo on Windows.
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
            for krate in [
                "lease-core",
                "lease-file",
                "lessor-partition",
                "lease-postgres",
                "lease-redis",
            ] {
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
        // lease-file's port: checked with every target and feature, and its tests run.
        assert!(WINDOWS_SELECTION.contains(&"lease-file"));
        assert_eq!(
            &WINDOWS_FILE_TESTS[..5],
            &[
                "test",
                "--target",
                "x86_64-pc-windows-gnu",
                "-p",
                "lease-file"
            ]
        );
        for suite in ["--lib", "conformance", "kept_dirs", "parity"] {
            assert!(WINDOWS_FILE_TESTS.contains(&suite), "{suite}");
        }
    }

    /// Issue 34 item 3: lease-cli with the file store on both macOS targets and FreeBSD, then
    /// with its PostgreSQL and Redis stores, and its tests on their paths.
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
            assert!(
                CHECKS.iter().any(|check| check.target == target
                    && check.selection.contains(&"lease-cli")
                    && check.selection.contains(&"postgres,redis")
                    && check.selection.contains(&"--all-targets")),
                "lease-cli's stores on {target}"
            );
        }
        assert_eq!(packages(CHECKS[3]), "lease-cli");
        assert_eq!(selection_name(CHECKS[3]), "lease-cli");
        assert_eq!(
            selection_name(CHECKS[6]),
            "lease-cli, features postgres,redis"
        );
        assert_eq!(
            packages(CHECKS[0]),
            "lease-core lease-file lessor-partition lease-postgres lease-redis"
        );
        assert!(CLI_PORTABLE_TESTS.contains(&"lease-cli"));
        assert!(CLI_PORTABLE_TESTS.contains(&"portable-paths"));
    }
}

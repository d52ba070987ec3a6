//! `lease`: run a command under a lease, like `flock(1)` across processes and hosts.
//!
//! ```text
//! lease run --key nightly-report --ttl 30s --wait 1m -- ./report.sh
//! lease status --key nightly-report
//! lease watch --key primary --json
//! lease release --force --key nightly-report --yes-i-know
//! lease prune --file /var/lib/jobs/leases --idle 1d
//! lease demo
//! ```
//!
//! Leases live in a directory of files by default (`$LEASE_DIR`, else `/tmp/lease-$UID`; `--file
//! DIR` picks another), in a DynamoDB table with `--dynamo TABLE` when built with the
//! `dynamo` feature (`cargo install lease-cli --features dynamo`; without it, `--dynamo` fails
//! with exit 64 and says so), or in a PostgreSQL table with `--postgres URL` (or
//! `LEASE_POSTGRES_URL`) when built with the `postgres` feature, or in Redis with `--redis URL`
//! (or `LEASE_REDIS_URL`) when built with the `redis` feature, each refused the same way
//! without it. Exit statuses are listed in
//! the `exit` module: the command's own, 64 bad input, 65 corrupt or foreign record, 69 backend
//! error, 75 held or wait timed out, 76 lost while running, 126/127 command not executable/not
//! found. `--path PATH` instead of `--key KEY` names a lock at an exact path (flock(1)'s and Go
//! `kit/lockfile`'s kind).
//!
//! Messages for people go to stderr prefixed `lease:`; diagnostics go to stderr through `tracing`,
//! errors only by default: set `LEASE_LOG` (e.g. `LEASE_LOG=warn`, `LEASE_LOG=debug`) to see more.

mod backend;
mod cli;
mod demo;
mod demo_worker;
mod duration;
mod exit;
mod guard;
mod hold;
mod out;
mod pg_url;
mod redis_url;
mod relay;
mod run;
mod status;
mod stores;
mod sys;
mod terminal;
mod watch;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use tracing_subscriber::filter::{LevelFilter, Targets};

use crate::cli::{Cli, Command, TableCommand};
use crate::exit::Failure;

fn main() -> ExitCode {
    let cli = match Cli::parse_args(std::env::args_os()) {
        Ok(cli) => cli,
        Err(error) => {
            let code = match error.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                _ => exit::USAGE,
            };
            if let Err(print_error) = error.print() {
                eprintln!("lease: {print_error}");
            }
            return ExitCode::from(code);
        }
    };
    if cli.dynamo_table().is_some()
        && let Err(failure) = stores::dynamo_available()
    {
        eprintln!("lease: {}", for_people(&failure.message));
        return ExitCode::from(failure.code);
    }
    if let Some(url) = cli.postgres_url() {
        // Before anything could print it.
        pg_url::register(url);
        if let Err(failure) = stores::postgres_available() {
            eprintln!("lease: {}", for_people(&failure.message));
            return ExitCode::from(failure.code);
        }
    }
    if let Some(url) = cli.redis_url() {
        // Before anything could print it.
        pg_url::register_secrets(url.secrets());
        if let Err(failure) = stores::redis_available() {
            eprintln!("lease: {}", for_people(&failure.message));
            return ExitCode::from(failure.code);
        }
    }
    init_tracing();
    if let Command::Exec(args) = &cli.command {
        // No runtime: this process becomes the command.
        let failure = guard::exec(args);
        eprintln!("lease: {}", for_people(&failure.message));
        return ExitCode::from(failure.code);
    }
    if let Command::HoldLock(args) = &cli.command {
        // No runtime: it only waits.
        return ExitCode::from(hold::hold_lock(args));
    }
    if matches!(cli.command, Command::Run(_)) {
        // Before any thread starts, so that every thread inherits it (see terminal.rs).
        terminal::block_background_stops();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("lease: cannot start the async runtime: {error}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let result = runtime.block_on(dispatch(cli));
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("lease: {}", for_people(&failure.message));
            ExitCode::from(failure.code)
        }
    }
}

async fn dispatch(cli: Cli) -> Result<u8, Failure> {
    match cli.command {
        Command::Run(args) => run::run(args).await,
        Command::Status(args) => {
            let many = args.all || args.holders.is_some();
            let limit = args.timeout.unwrap_or(if many {
                Duration::from_secs(60)
            } else {
                Duration::from_secs(5)
            });
            within(limit, "read the leases", status::status(args)).await
        }
        Command::Watch(args) => watch::watch(args).await,
        Command::Release(args) => {
            let limit = args.timeout;
            let what = "release the lease (it may or may not be released: see `lease status`)";
            within(limit, what, status::release(args)).await
        }
        Command::Prune(args) => stores::prune(&args),
        Command::Table(TableCommand::Create(args)) => {
            let limit = args.timeout;
            within(limit, "create the table", status::table_create(args)).await
        }
        Command::Demo(args) => demo::demo(args).await,
        Command::DemoWorker(args) => demo::worker(args).await,
        Command::Guard(args) => guard::guard(args).await,
        Command::Exec(_) | Command::HoldLock(_) => Err(Failure::internal(
            "lease exec and lease hold-lock run before the runtime starts",
        )),
    }
}

/// A failure's message for stderr: it may quote the store (a record's reason, a holder's
/// description), so each line is shown through [`out::safe`], and never a password of
/// `--postgres` or `--redis` ([`pg_url::scrub`]).
fn for_people(message: &str) -> String {
    pg_url::scrub(message)
        .split('\n')
        .map(out::safe)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `command`, given up after `limit` (`--timeout`): a store that never answers must not hold an
/// operator's command forever. Exit 69, saying what could not be done.
async fn within(
    limit: Duration,
    what: &str,
    command: impl std::future::Future<Output = Result<u8, Failure>>,
) -> Result<u8, Failure> {
    tokio::time::timeout(limit, command)
        .await
        .unwrap_or_else(|_| {
            tracing::warn!(?limit, what, "the store did not answer in time");
            Err(Failure::unavailable(format!(
                "the store did not answer within {} (--timeout): could not {what}",
                duration::fmt_duration(limit)
            )))
        })
}

/// Diagnostics to stderr, filtered by `LEASE_LOG`: a level (`warn`, `debug`), or
/// `target=level` pairs with an optional default, comma-separated (`lease_file=debug,warn`), as
/// `RUST_LOG`'s common form; `error` when unset or unreadable. `Targets` reads those lists
/// without `env-filter`'s regex engine (span and field filters are not supported).
fn init_tracing() {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let filter = std::env::var("LEASE_LOG")
        .ok()
        .and_then(|directives| directives.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::ERROR));
    let installed = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(|| pg_url::ScrubbedStderr)
                .with_ansi(std::io::stderr().is_terminal())
                .with_target(false)
                .with_filter(filter),
        )
        .try_init();
    if let Err(error) = installed {
        eprintln!("lease: cannot set up logging: {error}");
    }
}

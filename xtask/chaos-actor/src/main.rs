//! `lease-chaos-actor`: the processes `cargo xtask chaos` starts, each running one surface of
//! the lease crates against a real store and writing what it did to its history. A test tool,
//! not part of any published crate.
//!
//! ```text
//! lease-chaos-actor <mode> --proc <ID> --run <RUN_DIR> ...
//!
//! touch        --surface run-file|run-dynamo|run-postgres|run-redis --key <NSKEY> --ticks N --every-ms M
//! filelock     --path P --mode kernel|heartbeat --stale-ms S --heartbeat-ms H --hold-ms X
//!              --claims K [--acquire-timeout-ms MS] [--fork-child | --fork-idle]
//! dynamo-lease --endpoint URL --table T --keys k1,k2 --ttl-ms D [--skew-ms S]
//!              [--attempt-timeout-ms A]
//! pg-lease     --postgres URL --table T --keys k1,k2 --ttl-ms D [--skew-ms S]
//!              [--attempt-timeout-ms A]
//! redis-lease  --redis URL --prefix P --keys k1,k2 --ttl-ms D [--grace-ms G]
//!              [--attempt-timeout-ms A]
//! fleet        --backend file|dynamo|postgres|redis [--dir D] [--steppable-file-clock]
//!              [--endpoint URL | --postgres URL | --redis URL --prefix P [--grace-ms G]]
//!              [--table T [--skew-ms S] [--attempt-timeout-ms A]]
//!              --fleet NAME --worker W --units N --session-ms S --interval-ms I --margin-ms M
//!              --save-every-ms E [--session-skew-ms MS]
//! prune        --dir D --every-ms MS
//! election     [--backend file|dynamo|postgres|redis] (--dir D | --endpoint URL | --postgres URL
//!              --table T | --redis URL --prefix P [--grace-ms G]) --key K
//!              --role campaign|observe [--ttl-ms T] [--hold-ms H]
//! restore      --endpoint URL --table T
//! ```
//!
//! * `touch` is the command `lease run` runs: `acq` with `$LEASE_FENCING_TOKEN` at its first
//!   instant, a `claim` every M ms (being alive is its check), `rel`, exit 0.
//! * `filelock` loops over `FileLock` tenures (kernel or heartbeat-only mode): acquire with a
//!   timeout, K claims spread over X ms each after `check()`, release. With `--fork-idle`,
//!   after each tenure a forked child contends for the same lock with the parent's `FileLock`
//!   (its idle cached descriptors shared across the fork), logging as `<ID>-f<n>`.
//! * `dynamo-lease` loops over `DynamoLeases` tenures kept by a `LeaseGuard` on random keys:
//!   a fenced read of `value-<key>` after acquiring, then claims and fenced writes (one late
//!   write after a loss, for the fence to refuse), release. `pg-lease` does the same on
//!   `PgLeases`, `redis-lease` on `RedisLeases`.
//! * `fleet` runs one lessor-partition `Worker` with checkpoints in the store's fenced values
//!   (`with_checkpoints`): a task per unit gained logs the checkpoint it was handed, then claims
//!   and saves the next one every E ms (one late save with the old token after a loss, for the
//!   fence to refuse).
//! * `prune` removes every free key of a shared store (`DirectoryStore::prune`, idle 0 s) every
//!   MS ms, so that its keys are created again and again (each creation a moment for the
//!   chaos run's attacker); it writes no history (`lease run` children do).
//! * `election` campaigns on a `DirectoryStore` or `DynamoLeases` key with its proc id as the
//!   published value (`Election::campaign`), claims while it leads, resigns; or observes the
//!   election and logs every report as an `observe` line.
//! * `restore` restores the DynamoDB table from one of its own scans when the orchestrator
//!   asks (`<RUN_DIR>/restore/<n>`): table deleted, created again, old items put back.
//!
//! Every mode appends the lines of `docs/chaos.md` to `<RUN_DIR>/history/<ID>.log` (one
//! `write(2)` per line, `O_APPEND`), reads the instant of a claim *before* the check that
//! vouches for it, stops (releasing what it holds) when `<RUN_DIR>/stop` exists, dies with its
//! parent (`PR_SET_PDEATHSIG`), and follows the wall-clock offset in `<RUN_DIR>/clock/<ID>`
//! (logging each change as a `clock` line): the DynamoDB stores read that stepped clock.
#![forbid(unsafe_code)]

mod actor;
mod cli;
mod clock;
mod dynamo;
mod election;
mod filelock;
mod fleet;
mod history;
mod kept_lease;
mod postgres;
mod prune;
mod redis;
mod restore;
mod touch;

use std::process::ExitCode;

use clap::Parser;

use crate::actor::Actor;
use crate::cli::{Cli, Mode};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let common = match &cli.mode {
        Mode::Touch(args) => &args.common,
        Mode::Filelock(args) => &args.common,
        Mode::DynamoLease(args) | Mode::PgLease(args) | Mode::RedisLease(args) => &args.common,
        Mode::Fleet(args) => &args.common,
        Mode::Prune(args) => &args.common,
        Mode::Election(args) => &args.common,
        Mode::Restore(args) => &args.common,
    };
    let actor = match Actor::start(common) {
        Ok(actor) => actor,
        Err(error) => {
            eprintln!("lease-chaos-actor: {error}");
            return ExitCode::from(2);
        }
    };
    let result = match &cli.mode {
        Mode::Touch(args) => touch::run(args, &actor),
        Mode::Filelock(args) => filelock::run(args, &actor),
        Mode::DynamoLease(args) => kept_lease::run_dynamo(args, &actor),
        Mode::PgLease(args) => kept_lease::run_postgres(args, &actor),
        Mode::RedisLease(args) => kept_lease::run_redis(args, &actor),
        Mode::Fleet(args) => fleet::run(args, &actor),
        Mode::Prune(args) => prune::run(args, &actor),
        Mode::Election(args) => election::run(args, &actor),
        Mode::Restore(args) => restore::run(args, &actor),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("lease-chaos-actor {}: {error}", actor.history.proc_id());
            ExitCode::FAILURE
        }
    }
}

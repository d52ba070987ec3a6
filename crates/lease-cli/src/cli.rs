//! The command line, as clap sees it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::duration::{parse_duration, parse_wait};

/// Run a command under a lease, inspect and break leases, and watch a fleet share work.
///
/// Leases live in a directory of files by default (see --file), or in a DynamoDB table with
/// --dynamo. Exit statuses: the command's own for `run`; 64 bad input, 69 backend error,
/// 75 held by another or wait timed out, 76 lease lost while the command ran, 126/127 command
/// not executable/not found.
#[derive(Debug, Parser)]
#[command(
    name = "lease",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Acquire a lease, run COMMAND while keeping it alive, stop COMMAND if the lease is lost.
    ///
    /// The command sees LEASE_KEY and LEASE_FENCING_TOKEN in its environment: pass the fencing
    /// token with every write to the resource the lease protects. It runs in its own process
    /// group (unless --foreground); SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to it.
    ///
    /// The command never outlives its lease. If renewals fail for so long that the lease could
    /// end, the command gets SIGTERM early enough that SIGKILL lands by the holder's deadline
    /// (the lease's expiry minus its safety margin of min(ttl/10, 5s)), before anyone else can
    /// be granted the lease, and lease exits 76. If lease itself dies (kill -9, the OOM
    /// killer), a small guard process kills the command's whole process group at once, and
    /// says so on stderr; if lease stops without dying (SIGSTOP), the guard kills the group by
    /// the holder's deadline. When the command exits, processes it left in its group are stopped
    /// (SIGTERM, SIGKILL after --grace) before the lease is released. With --foreground only
    /// the command itself is tied to lease, not the processes it starts.
    Run(RunArgs),
    /// Show who holds a lease, since and until when, and its fencing token.
    Status(StatusArgs),
    /// Break a lease held by someone else (an operator's tool; needs --force --yes-i-know).
    Release(ReleaseArgs),
    /// Remove idle keys from a file store: every free key whose lock directory has not
    /// changed for --idle. Prints each key removed.
    ///
    /// Safe while other processes use the store: a key is removed only from the exact free
    /// state observed (one rename to a tombstone, then the empty directory removed), so a key
    /// acquired meanwhile is kept, and held keys (expired ones too) are never removed. Fencing
    /// survives: a key acquired again after a prune starts its fencing tokens from the wall
    /// clock in microseconds, above every earlier token as long as the clock has not stepped
    /// back below them (a key whose token is ahead of the clock is kept). Removing a key costs
    /// about 30 syscalls; an idle key kept costs 8 KiB and 2 inodes on ext4. A non-zero --idle
    /// keeps keys in current use out of the prune's way.
    Prune(PruneArgs),
    /// Manage the DynamoDB table.
    #[command(subcommand)]
    Table(TableCommand),
    /// Start a small fleet of worker processes sharing units of work, kill one, and show the
    /// partitions move.
    Demo(DemoArgs),
    /// One worker of `lease demo` (internal).
    #[command(hide = true)]
    DemoWorker(DemoWorkerArgs),
    /// Runs COMMAND in this process group and kills the group if PARENT dies (internal: started
    /// by `lease run`).
    #[command(hide = true)]
    Guard(LinkArgs),
    /// Becomes COMMAND, linked to die with PARENT (internal: `lease run --foreground`).
    #[command(hide = true)]
    Exec(LinkArgs),
}

/// `lease guard` and `lease exec` (started by `lease run`).
#[derive(Debug, Args)]
pub(crate) struct LinkArgs {
    /// The `lease run` process the command must not outlive.
    #[arg(long)]
    pub(crate) parent: i32,
    /// Where `lease run` publishes the holder's deadline (see `relay.rs`); the guard kills the
    /// group by it if `lease` stops renewing without dying.
    #[arg(long)]
    pub(crate) deadline_file: Option<std::path::PathBuf>,
    /// How often the guard checks its parent and the deadline, in milliseconds.
    #[arg(long, default_value_t = 50)]
    pub(crate) poll_ms: u64,
    /// The guard's SIGKILL lands this many milliseconds before the deadline.
    #[arg(long, default_value_t = 0)]
    pub(crate) kill_before_ms: u64,
    /// The command and its arguments.
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

/// Where leases are kept.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct BackendArgs {
    /// Keep leases as files in DIR [default: $LEASE_DIR, else /tmp/lease-$UID].
    #[arg(long, value_name = "DIR", conflicts_with = "dynamo")]
    pub(crate) file: Option<PathBuf>,
    /// Keep leases in the DynamoDB table TABLE (credentials and region from the AWS environment).
    #[arg(long, value_name = "TABLE")]
    pub(crate) dynamo: Option<String>,
    /// DynamoDB endpoint URL, such as http://localhost:8000 for DynamoDB Local.
    #[arg(long, value_name = "URL", requires = "dynamo")]
    pub(crate) endpoint: Option<String>,
    /// AWS region of the table [default: from the AWS environment].
    #[arg(long, value_name = "REGION", requires = "dynamo")]
    pub(crate) region: Option<String>,
}

/// `lease run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) backend: BackendArgs,
    /// The lease to hold: a name, or PARTITION#SORT.
    #[arg(long, value_name = "KEY")]
    pub(crate) key: String,
    /// Lease duration; renewed every third of it while the command runs.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub(crate) ttl: Duration,
    /// How long to wait for a held lease (0: try once; `forever`: no limit).
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_wait)]
    pub(crate) wait: Duration,
    /// How long the command has between SIGTERM and SIGKILL when it must stop. At most
    /// (2/3 ttl - margin)/2 minus the check interval and kill slack (8.15s for a 30s lease)
    /// [default: 10s or half that bound, whichever is less; each second of grace is a second
    /// less of tolerance for a late renewal].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) grace: Option<Duration>,
    /// Keep the command in lease's process group, so it can read from the terminal; signals
    /// then reach only the command itself, not its children.
    #[arg(long)]
    pub(crate) foreground: bool,
    /// The command and its arguments.
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

/// `lease status`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["key", "all"])))]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) backend: BackendArgs,
    /// The lease to show: a name, or PARTITION#SORT.
    #[arg(long, value_name = "KEY")]
    pub(crate) key: Option<String>,
    /// Show every lease in the store (with --partition: every lease under that partition key).
    #[arg(long)]
    pub(crate) all: bool,
    /// With --all: list the leases under this partition key.
    #[arg(long, value_name = "PARTITION", requires = "all")]
    pub(crate) partition: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `lease release`.
#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    #[command(flatten)]
    pub(crate) backend: BackendArgs,
    /// The lease to break: a name, or PARTITION#SORT.
    #[arg(long, value_name = "KEY")]
    pub(crate) key: String,
    /// Release a lease this process does not hold (the only kind of release offered here).
    #[arg(long)]
    pub(crate) force: bool,
    /// Confirm: the holder may still be running and will lose its lease at its next renewal.
    #[arg(long = "yes-i-know")]
    pub(crate) yes_i_know: bool,
}

/// `lease prune`.
#[derive(Debug, Args)]
pub(crate) struct PruneArgs {
    /// The file store to prune [default: $LEASE_DIR, else /tmp/lease-$UID].
    #[arg(long, value_name = "DIR")]
    pub(crate) file: Option<PathBuf>,
    /// Remove free keys unchanged for at least this long (0s: every free key).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) idle: Duration,
}

/// `lease table ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum TableCommand {
    /// Create the DynamoDB table (on-demand billing) and wait until it is active.
    Create(TableCreateArgs),
}

/// `lease table create`.
#[derive(Debug, Args)]
pub(crate) struct TableCreateArgs {
    /// The table to create.
    #[arg(long, value_name = "TABLE")]
    pub(crate) dynamo: String,
    /// DynamoDB endpoint URL, such as http://localhost:8000 for DynamoDB Local.
    #[arg(long, value_name = "URL")]
    pub(crate) endpoint: Option<String>,
    /// AWS region of the table [default: from the AWS environment].
    #[arg(long, value_name = "REGION")]
    pub(crate) region: Option<String>,
}

/// `lease demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// How many worker processes to start.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..=16))]
    pub(crate) workers: u32,
    /// How many units of work they share (default: 8 each for 4 workers, then 10 or 11 each for
    /// the 3 left after the kill).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) units: u32,
    /// Run against this DynamoDB table instead of a temporary directory.
    #[arg(long, value_name = "TABLE")]
    pub(crate) dynamo: Option<String>,
    /// DynamoDB endpoint URL.
    #[arg(long, value_name = "URL", requires = "dynamo")]
    pub(crate) endpoint: Option<String>,
    /// AWS region of the table.
    #[arg(long, value_name = "REGION", requires = "dynamo")]
    pub(crate) region: Option<String>,
    /// Lease duration of the workers' sessions and units.
    #[arg(long, value_name = "DURATION", default_value = "1500ms", value_parser = parse_duration)]
    pub(crate) ttl: Duration,
    /// How often workers rebalance, and how often the table is printed.
    #[arg(long, value_name = "DURATION", default_value = "250ms", value_parser = parse_duration)]
    pub(crate) interval: Duration,
}

/// `lease demo-worker` (started by `lease demo`).
#[derive(Debug, Args)]
pub(crate) struct DemoWorkerArgs {
    #[command(flatten)]
    pub(crate) backend: BackendArgs,
    /// The worker's name.
    #[arg(long)]
    pub(crate) id: String,
    /// The fleet's name: the partition keys of its sessions and units derive from it.
    #[arg(long)]
    pub(crate) fleet: String,
    /// How many units the fleet shares.
    #[arg(long)]
    pub(crate) units: u32,
    /// Lease duration.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) ttl: Duration,
    /// Rebalance interval.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) interval: Duration,
}

impl Cli {
    /// Parses `args`; `Err` carries clap's message and whether it is help/version (status 0).
    pub(crate) fn parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        Self::try_parse_from(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_the_command_after_the_double_dash() {
        let cli = Cli::parse_args([
            "lease", "run", "--key", "k", "--wait", "0", "--", "echo", "-n",
        ])
        .expect("parses");
        let Command::Run(run) = cli.command else {
            panic!("not run");
        };
        assert_eq!(run.command, ["echo", "-n"]);
        assert_eq!(run.wait, Duration::ZERO);
        assert_eq!(run.ttl, Duration::from_secs(30));
    }

    #[test]
    fn rejects_bad_combinations() {
        let bad: &[&[&str]] = &[
            &[
                "lease", "run", "--key", "k", "--file", "/x", "--dynamo", "t", "--", "true",
            ],
            &[
                "lease",
                "run",
                "--key",
                "k",
                "--endpoint",
                "http://x",
                "--",
                "true",
            ],
            &["lease", "run", "--key", "k"],
            &["lease", "run", "--key", "k", "--ttl", "soon", "--", "true"],
            &["lease", "status"],
            &["lease", "status", "--key", "k", "--all"],
        ];
        for args in bad {
            assert!(Cli::parse_args(*args).is_err(), "{args:?}");
        }
    }
}

//! The command line, as clap sees it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgGroup, ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::duration::{parse_duration, parse_wait};
use crate::pg_url::PostgresUrl;
use crate::redis_url::RedisUrl;

/// Run a command under a lease, inspect and break leases, and watch a fleet share work.
///
/// Leases live in a directory of files by default (see --file), in a DynamoDB table with
/// --dynamo, in a PostgreSQL table with --postgres, or in Redis with --redis; --path PATH names
/// a lock at an exact path instead (flock(1)'s and Go kit/lockfile's kind). Exit statuses: the command's own for `run`; 64 bad input, 65 the
/// store's record is corrupt or another protocol's (`status` says why), 69 backend error, 75
/// held by another or wait timed out, 76 lease lost while the command ran, 126/127 command not
/// executable/not found.
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
    /// The command sees LEASE_KEY, LEASE_FENCING_TOKEN and LEASE_SLOT (0, or its slot with
    /// --holders) in its environment: pass the fencing token with every write to the resource
    /// the lease protects. It runs in its own process
    /// group (unless --foreground); SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and
    /// SIGALRM sent to lease are forwarded to it. SIGINT, SIGTERM, SIGHUP and SIGQUIT end the
    /// run within --grace: a stopped command is continued to handle them, and one still running
    /// after the grace is SIGKILLed.
    ///
    /// On a terminal (standard input is one) the command's group gets the terminal's foreground
    /// whenever lease has it (at the start, or after `fg` for a job started with `&`), so it
    /// reads it and gets Ctrl-C as under flock(1); lease takes the terminal back when the
    /// command ends. A command stopped for job control (Ctrl-Z, using the terminal from the
    /// background, or stopping itself with SIGTSTP) never keeps the lease renewed: lease stops
    /// its own job too, so the shell shows the job stopped; `fg` and `bg` continue the command if
    /// the lease can still be trusted, and otherwise kill it where it stands (exit 76). Where no
    /// job-control shell can continue lease, Ctrl-Z is ignored, as the kernel ignores it there.
    /// A command stopped any other way (kill -STOP, or stopping itself with no terminal) keeps
    /// its lease for one --ttl at most: lease then ends the run (SIGTERM, SIGKILL after --grace)
    /// and exits 76.
    ///
    /// The command never outlives its lease. If renewals fail for so long that the lease could
    /// end, the command gets SIGTERM early enough that SIGKILL lands by the holder's deadline
    /// (the lease's expiry minus its safety margin of min(ttl/10, 5s)), before anyone else can
    /// be granted the lease, and lease exits 76. If lease itself dies (kill -9, the OOM
    /// killer), a small guard process kills the command's whole process group at once, and
    /// says so on stderr; if lease stops without dying (SIGSTOP), the guard kills the group by
    /// the holder's deadline. When the command exits, processes it left in its group are stopped
    /// (SIGTERM, SIGKILL after --grace) before the lease is released. With --foreground only
    /// the command itself is tied to lease, not the processes it starts. Once the command has
    /// stopped, releasing the lease takes at most 2s; a store that does not answer by then is
    /// left to let the lease expire on its own. On the file store the command inherits no
    /// descriptor of the lease's kernel lock (it cannot unlock it): a small `lease hold-lock`
    /// process keeps a copy until the command's whole group is gone, even if lease is killed.
    ///
    /// Shared directories and other users: a file store (--file DIR, its lock directories) that
    /// a user other than you and root can change (owned by another user, or group- or
    /// world-writable without the sticky bit) is refused, exit 64, naming its owner and mode;
    /// a sticky directory owned by you or root, such as /tmp, is accepted. --shared-dir accepts
    /// one owned by another user or writable by its group (never world-writable without the
    /// sticky bit): whoever can write it can then deny, release or take over the leases in it
    /// and read their holders' descriptions, but nothing outside the store is ever created,
    /// changed or removed, whatever they do. Created entries follow your umask (exactly the
    /// configured modes with --shared-dir).
    Run(RunArgs),
    /// Show who holds a lease, since and until when, and its fencing token (with --holders N,
    /// the holder of every slot).
    Status(StatusArgs),
    /// Print who holds a lease, then one line for each change of holder (holder, value, since,
    /// fencing token), until interrupted: a leader election's followers' view.
    ///
    /// Each tenure (fencing token) is printed at most once, in order, and "free" never twice in
    /// a row. On the file store the kernel reports every change of the lease's lock directory
    /// (inotify), so every holder that holds the lease for longer than one wake-up and one read
    /// is printed; on DynamoDB the lease is read every --poll-interval (one GetItem each), so
    /// every holder that holds it longer than that is. SIGINT and SIGTERM end it with status 0,
    /// as does a closed standard output (`| head -1`), found at once even while nothing changes.
    /// A store that cannot be reached is said so on stderr within --timeout and 2s.
    Watch(WatchArgs),
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
    /// about 30 syscalls; an idle key kept costs 4 KiB and 2 inodes on ext4. A non-zero --idle
    /// keeps keys in current use out of the prune's way.
    Prune(PruneArgs),
    /// Manage the DynamoDB or PostgreSQL table.
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
    /// Holds the lease's kernel lock until `lease run` is gone and the command's process group
    /// with it; kills the group if `lease run` dies (internal: started by `lease guard`, so that
    /// the command itself holds no descriptor of the lock).
    #[command(hide = true)]
    HoldLock(HoldLockArgs),
}

/// `lease hold-lock` (started by `lease guard`). Its standard input is the parent link: a pipe
/// whose only writer is `lease run` (see `hold.rs`).
#[derive(Debug, Args)]
pub(crate) struct HoldLockArgs {
    /// The command's process group: the lock is held until no live process is left in it.
    #[arg(long)]
    pub(crate) group: i32,
    /// The inherited descriptor sharing the lease's kernel lock (held, never used).
    #[arg(long)]
    pub(crate) lock_fd: i32,
    /// The `lease run` process, named in the message when it dies.
    #[arg(long)]
    pub(crate) parent: i32,
    /// The deadline relay's file (see `relay.rs`), whose directory is removed if `lease run`
    /// dies.
    #[arg(long)]
    pub(crate) deadline_file: Option<std::path::PathBuf>,
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
    /// Make this process group the foreground of the terminal on standard input before starting
    /// the command (see `terminal.rs`).
    #[arg(long)]
    pub(crate) terminal: bool,
    /// An inherited descriptor sharing the lease's kernel lock (file store): the guard hands it
    /// to `lease hold-lock` and closes its own copy, so the command inherits none.
    #[arg(long, requires = "parent_link_fd")]
    pub(crate) lock_fd: Option<i32>,
    /// With `--lock-fd`: an inherited descriptor of the read end of a pipe whose only writer is
    /// `lease run` (the parent link), which becomes `lease hold-lock`'s standard input.
    #[arg(long, requires = "lock_fd")]
    pub(crate) parent_link_fd: Option<i32>,
    /// The command and its arguments.
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

/// The help of `--dynamo` in a `lease` built without the `dynamo` feature, where the flag is
/// parsed (so that `--file` still conflicts with it, and so on) but refused with the feature to
/// build with.
#[cfg(not(feature = "dynamo"))]
const NO_DYNAMO: &str = "Keep leases in the DynamoDB table TABLE: not in this build, which lacks \
     the `dynamo` feature (cargo install lease-cli --features dynamo)";

/// The help of `--postgres` in a `lease` built without the `postgres` feature (as
/// [`NO_DYNAMO`]).
#[cfg(not(feature = "postgres"))]
const NO_POSTGRES: &str = "Keep leases in the PostgreSQL database at URL: not in this build, \
     which lacks the `postgres` feature (cargo install lease-cli --features postgres)";

/// The help of `--redis` in a `lease` built without the `redis` feature (as [`NO_DYNAMO`]).
#[cfg(not(feature = "redis"))]
const NO_REDIS: &str = "Keep leases in the Redis server at URL: not in this build, which lacks \
     the `redis` feature (cargo install lease-cli --features redis)";

/// The environment variable `--redis` is read from when not given (as [`POSTGRES_URL_ENV`]).
pub(crate) const REDIS_URL_ENV: &str = "LEASE_REDIS_URL";

/// The key prefix `--prefix` names by default (lease-redis's examples' own).
pub(crate) const DEFAULT_REDIS_PREFIX: &str = "leases";

/// The environment variable `--postgres` is read from when not given: a URL there, unlike one
/// on the command line, is not visible to other users in the process list.
pub(crate) const POSTGRES_URL_ENV: &str = "LEASE_POSTGRES_URL";

/// The table `--table` names by default.
pub(crate) const DEFAULT_PG_TABLE: &str = "leases";

/// Where leases are kept.
#[derive(Debug, Clone, Default, Args)]
#[command(group(ArgGroup::new("table_store").args(["dynamo", "postgres", "redis"]).multiple(true)))]
pub(crate) struct BackendArgs {
    /// Keep leases as files in DIR [default: $LEASE_DIR, else /tmp/lease-$UID]. DIR is created
    /// if missing, but not its parent: a mistyped path is refused (exit 69), not made a second
    /// store.
    #[arg(long, value_name = "DIR", conflicts_with = "dynamo")]
    pub(crate) file: Option<PathBuf>,
    /// Keep leases in the DynamoDB table TABLE (credentials and region from the AWS environment).
    #[arg(long, value_name = "TABLE")]
    #[cfg_attr(not(feature = "dynamo"), arg(help = NO_DYNAMO))]
    pub(crate) dynamo: Option<String>,
    /// Keep leases in the PostgreSQL database at URL (postgres://USER:PASSWORD@HOST:PORT/DB,
    /// `?sslmode=require` for TLS, or the key=value form), in the table --table. Pass a URL with
    /// a password through the environment variable: the command line is visible to other users.
    /// A URL from the environment gives way to --file, --dynamo, --path or --shared-dir; the
    /// password is never printed.
    #[arg(long, value_name = "URL", env = POSTGRES_URL_ENV, hide_env_values = true, value_parser = PostgresUrl::from_arg)]
    #[cfg_attr(not(feature = "postgres"), arg(help = NO_POSTGRES))]
    pub(crate) postgres: Option<PostgresUrl>,
    /// The PostgreSQL table (or SCHEMA.TABLE) of --postgres [default: leases].
    #[arg(long = "table", value_name = "NAME", requires = "postgres")]
    pub(crate) pg_table: Option<String>,
    /// Keep leases in the Redis server at URL (redis://USER:PASSWORD@HOST:PORT/DB, all but HOST
    /// optional, or rediss://... for TLS), under the key prefix --prefix. Pass a URL with a password through
    /// the environment variable: the command line is visible to other users. A URL from the
    /// environment gives way to --file, --dynamo, --postgres, --path or --shared-dir; the
    /// password is never printed.
    #[arg(long, value_name = "URL", env = REDIS_URL_ENV, hide_env_values = true, value_parser = RedisUrl::from_arg)]
    #[cfg_attr(not(feature = "redis"), arg(help = NO_REDIS))]
    pub(crate) redis: Option<RedisUrl>,
    /// The key prefix of --redis: every key is `{PREFIX}:...` (1 to 64 ASCII letters, digits,
    /// `_-.:/`) [default: leases].
    #[arg(long, value_name = "PREFIX", requires = "redis")]
    pub(crate) prefix: Option<String>,
    /// DynamoDB endpoint URL, such as http://localhost:8000 for DynamoDB Local.
    #[arg(long, value_name = "URL", requires = "dynamo")]
    pub(crate) endpoint: Option<String>,
    /// AWS region of the table [default: from the AWS environment].
    #[arg(long, value_name = "REGION", requires = "dynamo")]
    pub(crate) region: Option<String>,
    /// Accept a file store directory (or lock directory in it) that other users can change:
    /// owned by another user, or group-writable. Without it such a directory is refused (exit
    /// 64). Whoever can write it can then deny, release or take over the leases in it and read
    /// their holders' descriptions; nothing outside the store is ever touched.
    #[arg(long, conflicts_with = "dynamo")]
    pub(crate) shared_dir: bool,
    #[command(flatten)]
    pub(crate) table: TableOptions,
}

/// How a DynamoDB table is laid out and trusted (`--dynamo` only, but for --max-clock-skew and
/// --recreation-grace, which PostgreSQL's table and Redis take too).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct TableOptions {
    /// The most any two hosts' wall clocks using this table may differ (assumption A1 of
    /// docs/correctness.md): a contender takes an expired lease only once its own clock reads
    /// the expiry plus this. Set it to what your clock sync guarantees (e.g. 500ms with NTP in
    /// one region); clocks further apart than this can grant one lease twice [default: 0, as the
    /// Go package]. On PostgreSQL and Redis, where the server's clock alone judges expiry: how
    /// far that clock may step between two statements (a failover to a server whose clock
    /// differs).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "table_store")]
    pub(crate) max_clock_skew: Option<Duration>,
    /// The sort key of leases named without one (--key NAME) [default: LOCK, as the Go package].
    #[arg(long, value_name = "SORT", requires = "dynamo")]
    pub(crate) lock_sort_key: Option<String>,
    /// Rename an item attribute, by its default name: pk, sk, lease_token, lease_expires_at,
    /// lease_expires_at_ms, ttl, lease_fence, lease_owner, lease_acquired_at, lease_request,
    /// fenced_value, value_fence, lease_value. Repeat for several: --attribute-name pk=id
    /// --attribute-name sk=range.
    #[arg(long, value_name = "DEFAULT=NAME", requires = "dynamo")]
    pub(crate) attribute_name: Vec<String>,
    /// After the table is created (or deleted and recreated, restored, or DynamoDB Local
    /// restarted; on PostgreSQL also truncated, or the database restored or failed over to a
    /// replica; on Redis a server restarted, failed over, flushed or evicting the prefix's
    /// keys), grant no lease for this long: a holder in the table it replaced may still run.
    /// Set it to the longest --ttl used on the table; 0 turns the check off [default: this
    /// command's --ttl]. DynamoDB, PostgreSQL and Redis.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "table_store")]
    pub(crate) recreation_grace: Option<Duration>,
}

impl BackendArgs {
    /// Whether the leases are files: no table store is named.
    pub(crate) fn is_file_store(&self) -> bool {
        self.dynamo.is_none() && self.postgres.is_none() && self.redis.is_none()
    }
}

/// `lease run`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("lease").required(true).args(["key", "path"])))]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) backend: BackendArgs,
    /// The lease to hold: a name, or PARTITION#SORT, kept in the store (--file DIR: the lock
    /// DIR/KEY.lease, KEY encoded, so `--key x.lock` is never the file x.lock: use --path for that).
    #[arg(long, value_name = "KEY", allow_hyphen_values = true)]
    pub(crate) key: Option<String>,
    /// Instead of --key: the lock at exactly PATH, as `flock PATH cmd` takes it, shared safely
    /// with Go kit/lockfile PIDLocks and lease-file FileLocks on the same path (a lock
    /// directory; a Go process holding PATH keeps it held). Use it to stand in for flock(1) or
    /// a Go tool's lock file; use --key for leases kept in a store (--file DIR, --dynamo).
    /// LEASE_KEY is then PATH's file name; LEASE_FENCING_TOKEN is as with --key, one sequence
    /// shared with FileLocks on PATH. A stale Go lock file is never taken over: remove it by
    /// hand once its process is gone.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["file", "dynamo"])]
    pub(crate) path: Option<PathBuf>,
    /// Lease duration; renewed every third of it while the command runs.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub(crate) ttl: Duration,
    /// How long to wait for a held lease (0: try once; `forever`: no limit). A deadline for
    /// everything, the store's own retries included: 0 is one attempt, bounded by one attempt
    /// timeout (2s on DynamoDB).
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_wait, allow_hyphen_values = true)]
    pub(crate) wait: Duration,
    /// How long the command has between SIGTERM and SIGKILL when it must stop. At most
    /// (2/3 ttl - margin)/2 minus the check interval and kill slack (8.15s for a 30s lease)
    /// [default: 10s or half that bound, whichever is less; each second of grace is a second
    /// less of tolerance for a late renewal].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    pub(crate) grace: Option<Duration>,
    /// Publish VALUE in the lease record with the acquisition (an address, an id: at most 512
    /// bytes), for `lease watch`, `lease status` and followers to read; the command sees it as
    /// LEASE_VALUE. It stays for the whole tenure.
    #[arg(long, value_name = "VALUE", allow_hyphen_values = true)]
    pub(crate) value: Option<String>,
    /// Let up to N copies of the command run at once under KEY, across every process using
    /// it (a semaphore, as `consul lock -n N`): each copy holds one of N slots, and slot i is a
    /// lease of its own with its own fencing token (slot 0 is the lease KEY itself, slot i the
    /// lease KEY#slot-i). The command sees its slot as LEASE_SLOT; LEASE_FENCING_TOKEN is its
    /// slot's, so fence writes per slot. 1, the default, is the one lease KEY. A try costs one
    /// request per slot tried from a random one (one per process): one when that slot is free, N when all are
    /// held. After N shrinks, copies started with a larger N keep their slots >= N until they
    /// end: at most the largest N in use runs meanwhile. Not with --path.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024), conflicts_with = "path")]
    pub(crate) holders: u32,
    /// Keep the command in lease's process group instead of a group of its own: only the
    /// command itself is tied to lease and gets forwarded signals, not its children, and there
    /// is no deadline backstop. Rarely needed: the command's own group gets the terminal too.
    /// Linux only: refused on macOS and FreeBSD, where nothing would kill the command when lease
    /// dies (Linux's parent-death signal does).
    #[arg(long)]
    pub(crate) foreground: bool,
    /// The command and its arguments.
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

/// `lease status`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["key", "path", "all"])))]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) backend: BackendArgs,
    /// The lease to show: a name, or PARTITION#SORT.
    #[arg(long, value_name = "KEY", allow_hyphen_values = true)]
    pub(crate) key: Option<String>,
    /// Instead of --key: the lock at exactly PATH (as `lease run --path PATH` holds it), or a
    /// Go kit/lockfile PIDLock there.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["file", "dynamo"])]
    pub(crate) path: Option<PathBuf>,
    /// Show every lease in the store (with --partition: every lease under that partition key).
    #[arg(long)]
    pub(crate) all: bool,
    /// With --key: show every slot of KEY as `lease run --holders N` holds them (slots >= N
    /// that holders of a larger N still hold included).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024), requires = "key")]
    pub(crate) holders: Option<u32>,
    /// With --all: list the leases under this partition key.
    #[arg(long, value_name = "PARTITION", requires = "all")]
    pub(crate) partition: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// Give up after DURATION when the store does not answer (exit 69) [default: 5s for one
    /// lease, 1m with --all or --holders, which read one lease per key].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) timeout: Option<Duration>,
}

/// `lease watch`.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    #[command(flatten)]
    pub(crate) backend: BackendArgs,
    /// The lease to watch: a name, or PARTITION#SORT.
    #[arg(long, value_name = "KEY", allow_hyphen_values = true)]
    pub(crate) key: String,
    /// Print one JSON object per line instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// How often to read the lease where the store cannot report changes (DynamoDB), and
    /// where it can, how often to read it anyway.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub(crate) poll_interval: Duration,
    /// After DURATION without a change, read the lease once (waiting at most 2s for the answer)
    /// and say on stderr if the store cannot be reached (and again when it answers); watching
    /// goes on. Opening the store is bounded by it.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
}

/// `lease release`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("lease").required(true).args(["key", "path"])))]
pub(crate) struct ReleaseArgs {
    #[command(flatten)]
    pub(crate) backend: BackendArgs,
    /// The lease to break: a name, or PARTITION#SORT.
    #[arg(long, value_name = "KEY", allow_hyphen_values = true)]
    pub(crate) key: Option<String>,
    /// Instead of --key: the lock at exactly PATH (as `lease run --path PATH` holds it). A Go
    /// kit/lockfile PIDLock there is never broken by lease.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["file", "dynamo"])]
    pub(crate) path: Option<PathBuf>,
    /// Release a lease this process does not hold (the only kind of release offered here).
    #[arg(long)]
    pub(crate) force: bool,
    /// Confirm: the holder may still be running and will lose its lease at its next renewal.
    #[arg(long = "yes-i-know")]
    pub(crate) yes_i_know: bool,
    /// Give up after DURATION when the store does not answer (exit 69; the lease may or may
    /// not have been released: check with `lease status`).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
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
    /// Accept a store other users can change (owned by another user, or group-writable), as
    /// `lease run --shared-dir` does; without it such a store is refused (exit 64).
    #[arg(long)]
    pub(crate) shared_dir: bool,
}

/// `lease table ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum TableCommand {
    /// Create the DynamoDB table (on-demand billing) and wait until it is active, or the
    /// PostgreSQL table (--postgres URL [--table NAME]; nothing changes when it exists).
    Create(TableCreateArgs),
}

/// `lease table create`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("table_store").args(["dynamo", "postgres"]).multiple(true).required(true)))]
pub(crate) struct TableCreateArgs {
    /// The DynamoDB table to create.
    #[arg(long, value_name = "TABLE")]
    #[cfg_attr(not(feature = "dynamo"), arg(help = NO_DYNAMO))]
    pub(crate) dynamo: Option<String>,
    /// Create the table --table in the PostgreSQL database at URL (see `lease run --help`).
    #[arg(long, value_name = "URL", env = POSTGRES_URL_ENV, hide_env_values = true, value_parser = PostgresUrl::from_arg)]
    #[cfg_attr(not(feature = "postgres"), arg(help = NO_POSTGRES))]
    pub(crate) postgres: Option<PostgresUrl>,
    /// The PostgreSQL table (or SCHEMA.TABLE) to create [default: leases].
    #[arg(long = "table", value_name = "NAME", requires = "postgres")]
    pub(crate) pg_table: Option<String>,
    /// DynamoDB endpoint URL, such as http://localhost:8000 for DynamoDB Local.
    #[arg(long, value_name = "URL", requires = "dynamo")]
    pub(crate) endpoint: Option<String>,
    /// AWS region of the table [default: from the AWS environment].
    #[arg(long, value_name = "REGION", requires = "dynamo")]
    pub(crate) region: Option<String>,
    /// Give up after DURATION (exit 69): creating a table and waiting for it to become active.
    /// A DynamoDB endpoint that does not answer a first read within 10s (or DURATION, if
    /// shorter) is reported unreachable at once.
    #[arg(long, value_name = "DURATION", default_value = "3m", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
    #[command(flatten)]
    pub(crate) table: TableOptions,
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
    #[cfg_attr(not(feature = "dynamo"), arg(help = NO_DYNAMO))]
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
    ///
    /// A PostgreSQL or Redis URL from the environment ([`POSTGRES_URL_ENV`],
    /// [`REDIS_URL_ENV`]) gives way to a store named on the command line (`--file`, `--dynamo`,
    /// `--postgres`, `--redis`, `--path`, `--shared-dir`): an exported variable must not turn
    /// `lease run --file DIR` into an error, nor send it to a database. The same URL given as
    /// `--postgres` or `--redis` with another store is refused, as clap refuses `--file` with
    /// `--dynamo`; so are both variables set when the command line names no store (which one
    /// was meant cannot be told).
    pub(crate) fn parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let mut command = Self::command();
        let mut matches = command.try_get_matches_from_mut(args)?;
        let (drop_postgres, drop_redis) = match url_stores(&matches) {
            Ok(drops) => drops,
            Err(message) => {
                let error = clap::Error::raw(clap::error::ErrorKind::ArgumentConflict, message);
                // With the subcommand's usage, as clap's own conflicts.
                let mut names = Vec::new();
                let mut at = matches.subcommand();
                while let Some((name, sub)) = at {
                    names.push(name.to_owned());
                    at = sub.subcommand();
                }
                let mut subcommand = command;
                for name in &names {
                    match subcommand.find_subcommand(name) {
                        Some(found) => subcommand = found.clone(),
                        None => break,
                    }
                }
                return Err(error.format(&mut subcommand));
            }
        };
        let mut cli = Self::from_arg_matches_mut(&mut matches)?;
        if drop_postgres {
            cli.drop_postgres();
        }
        if drop_redis && let Some(backend) = cli.backend_mut() {
            backend.redis = None;
            backend.prefix = None;
        }
        Ok(cli)
    }

    /// Forgets the PostgreSQL URL that came from the environment (see [`Self::parse_args`]).
    fn drop_postgres(&mut self) {
        if let Command::Table(TableCommand::Create(args)) = &mut self.command {
            args.postgres = None;
        } else if let Some(backend) = self.backend_mut() {
            backend.postgres = None;
        }
    }

    /// The store arguments of the subcommands that take them all.
    fn backend_mut(&mut self) -> Option<&mut BackendArgs> {
        match &mut self.command {
            Command::Run(args) => Some(&mut args.backend),
            Command::Status(args) => Some(&mut args.backend),
            Command::Watch(args) => Some(&mut args.backend),
            Command::Release(args) => Some(&mut args.backend),
            Command::DemoWorker(args) => Some(&mut args.backend),
            Command::Table(_)
            | Command::Demo(_)
            | Command::Prune(_)
            | Command::Guard(_)
            | Command::Exec(_)
            | Command::HoldLock(_) => None,
        }
    }

    /// The Redis URL the command names with `--redis` or [`REDIS_URL_ENV`], if any: `main`
    /// refuses it at once in a `lease` built without the `redis` feature.
    pub(crate) fn redis_url(&self) -> Option<&RedisUrl> {
        let backend = match &self.command {
            Command::Run(args) => &args.backend,
            Command::Status(args) => &args.backend,
            Command::Watch(args) => &args.backend,
            Command::Release(args) => &args.backend,
            Command::DemoWorker(args) => &args.backend,
            Command::Table(_)
            | Command::Demo(_)
            | Command::Prune(_)
            | Command::Guard(_)
            | Command::Exec(_)
            | Command::HoldLock(_) => return None,
        };
        backend.redis.as_ref()
    }

    /// The PostgreSQL URL the command names with `--postgres` or [`POSTGRES_URL_ENV`], if any:
    /// `main` refuses it at once in a `lease` built without the `postgres` feature. Every
    /// subcommand is listed, as in [`Self::dynamo_table`].
    pub(crate) fn postgres_url(&self) -> Option<&PostgresUrl> {
        let backend = match &self.command {
            Command::Run(args) => &args.backend,
            Command::Status(args) => &args.backend,
            Command::Watch(args) => &args.backend,
            Command::Release(args) => &args.backend,
            Command::DemoWorker(args) => &args.backend,
            Command::Table(TableCommand::Create(args)) => return args.postgres.as_ref(),
            Command::Demo(_)
            | Command::Prune(_)
            | Command::Guard(_)
            | Command::Exec(_)
            | Command::HoldLock(_) => return None,
        };
        backend.postgres.as_ref()
    }

    /// The DynamoDB table the command names with `--dynamo`, if any: `main` refuses it at once
    /// in a `lease` built without the `dynamo` feature. Every subcommand is listed, so that a
    /// new one has to say whether it can name a table.
    pub(crate) fn dynamo_table(&self) -> Option<&str> {
        let backend = match &self.command {
            Command::Run(args) => &args.backend,
            Command::Status(args) => &args.backend,
            Command::Watch(args) => &args.backend,
            Command::Release(args) => &args.backend,
            Command::DemoWorker(args) => &args.backend,
            Command::Demo(args) => return args.dynamo.as_deref(),
            Command::Table(TableCommand::Create(args)) => return args.dynamo.as_deref(),
            Command::Prune(_) | Command::Guard(_) | Command::Exec(_) | Command::HoldLock(_) => {
                return None;
            }
        };
        backend.dynamo.as_deref()
    }
}

/// The stores a subcommand can name, by clap's id, as its conflicts name them.
const STORES: [(&str, &str); 6] = [
    ("file", "--file <DIR>"),
    ("dynamo", "--dynamo <TABLE>"),
    ("postgres", "--postgres <URL>"),
    ("redis", "--redis <URL>"),
    ("path", "--path <PATH>"),
    ("shared_dir", "--shared-dir"),
];

/// Which of the subcommand's URLs from the environment (`--postgres`, `--redis`) give way to a
/// store on the command line: `(postgres, redis)`. `Err` with the conflict's message for a URL
/// given on the command line with another store, or for both URLs from the environment and no
/// store on the command line.
fn url_stores(matches: &ArgMatches) -> Result<(bool, bool), String> {
    let Some((_, mut sub)) = matches.subcommand() else {
        return Ok((false, false));
    };
    if let Some((_, nested)) = sub.subcommand() {
        sub = nested;
    }
    let present = |id: &str| sub.ids().any(|known| known.as_str() == id);
    let on_command_line =
        |id: &str| present(id) && sub.value_source(id) == Some(ValueSource::CommandLine);
    let from_env = |id: &str| present(id) && sub.value_source(id) == Some(ValueSource::EnvVariable);
    let named: Vec<&str> = STORES
        .iter()
        .filter(|(id, _)| on_command_line(id))
        .map(|(_, flag)| *flag)
        .collect();
    for (id, flag) in [("postgres", "--postgres <URL>"), ("redis", "--redis <URL>")] {
        if on_command_line(id)
            && let Some(other) = named.iter().find(|other| **other != flag)
        {
            return Err(format!(
                "the argument '{flag}' cannot be used with '{other}'"
            ));
        }
    }
    let postgres_yields = from_env("postgres") && !named.is_empty();
    let redis_yields = from_env("redis") && !named.is_empty();
    // A URL from the environment satisfies `--table`'s and `--prefix`'s `requires`; once it
    // gives way to another store, they would be ignored.
    for (yields, id, flag, owner) in [
        (
            postgres_yields,
            "pg_table",
            "--table <NAME>",
            "--postgres <URL>",
        ),
        (redis_yields, "prefix", "--prefix <PREFIX>", "--redis <URL>"),
    ] {
        if yields && on_command_line(id) {
            return Err(format!(
                "the argument '{flag}' is for '{owner}', not '{}'",
                named.join("', '")
            ));
        }
    }
    if from_env("postgres") && from_env("redis") && named.is_empty() {
        return Err(format!(
            "both {POSTGRES_URL_ENV} and {REDIS_URL_ENV} are set: name the store with \
             --postgres or --redis (or unset one)"
        ));
    }
    Ok((postgres_yields, redis_yields))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_the_command_after_the_double_dash() {
        // The file store named: the environment may name a server (two, even, refused).
        let cli = Cli::parse_args([
            "lease", "run", "--file", "/x", "--key", "k", "--wait", "0", "--", "echo", "-n",
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

    /// Every command that can name a DynamoDB table reports it, so that a `lease` without the
    /// `dynamo` feature refuses it before doing anything (and one with it opens the table).
    #[test]
    fn every_dynamo_table_named_is_found() {
        let named: &[&[&str]] = &[
            &["lease", "run", "--dynamo", "t", "--key", "k", "--", "true"],
            &["lease", "status", "--dynamo", "t", "--all"],
            &["lease", "watch", "--dynamo", "t", "--key", "k"],
            &[
                "lease",
                "release",
                "--dynamo",
                "t",
                "--key",
                "k",
                "--force",
                "--yes-i-know",
            ],
            &["lease", "table", "create", "--dynamo", "t"],
            &["lease", "demo", "--dynamo", "t"],
            &[
                "lease",
                "demo-worker",
                "--dynamo",
                "t",
                "--id",
                "w",
                "--fleet",
                "f",
                "--units",
                "1",
                "--ttl",
                "1s",
                "--interval",
                "1s",
            ],
        ];
        for args in named {
            let cli = Cli::parse_args(*args).expect("parses");
            assert_eq!(cli.dynamo_table(), Some("t"), "{args:?}");
        }
        let unnamed: &[&[&str]] = &[
            &["lease", "run", "--file", "/x", "--key", "k", "--", "true"],
            &["lease", "status", "--file", "/x", "--all"],
            &["lease", "prune", "--idle", "1d"],
            &["lease", "demo"],
        ];
        for args in unnamed {
            let cli = Cli::parse_args(*args).expect("parses");
            assert_eq!(cli.dynamo_table(), None, "{args:?}");
        }
    }

    /// Every command that can name a PostgreSQL database reports it, as for DynamoDB; with
    /// another store on the command line `--postgres` is refused; `--table` needs it.
    #[test]
    fn every_postgres_url_named_is_found() {
        let url = "postgres://a:pw@h/db";
        let named: &[&[&str]] = &[
            &[
                "lease",
                "run",
                "--postgres",
                url,
                "--key",
                "k",
                "--",
                "true",
            ],
            &[
                "lease",
                "status",
                "--postgres",
                url,
                "--all",
                "--table",
                "t",
            ],
            &["lease", "watch", "--postgres", url, "--key", "k"],
            &[
                "lease",
                "release",
                "--postgres",
                url,
                "--key",
                "k",
                "--force",
                "--yes-i-know",
            ],
            &[
                "lease",
                "table",
                "create",
                "--postgres",
                url,
                "--table",
                "s.t",
            ],
        ];
        for args in named {
            let cli = Cli::parse_args(*args).expect("parses");
            let found = cli.postgres_url().map(PostgresUrl::secret_text);
            assert_eq!(found, Some(url), "{args:?}");
            assert_eq!(cli.dynamo_table(), None, "{args:?}");
            assert!(!format!("{cli:?}").contains("pw"), "{cli:?}");
        }
        let refused: &[&[&str]] = &[
            &[
                "lease",
                "run",
                "--postgres",
                url,
                "--file",
                "/x",
                "--key",
                "k",
                "--",
                "true",
            ],
            &[
                "lease",
                "run",
                "--postgres",
                url,
                "--dynamo",
                "t",
                "--key",
                "k",
                "--",
                "true",
            ],
            &[
                "lease",
                "run",
                "--postgres",
                url,
                "--path",
                "/x",
                "--",
                "true",
            ],
            &[
                "lease",
                "status",
                "--postgres",
                url,
                "--shared-dir",
                "--all",
            ],
            &[
                "lease",
                "table",
                "create",
                "--postgres",
                url,
                "--dynamo",
                "t",
            ],
            &[
                "lease",
                "run",
                "--postgres",
                url,
                "--endpoint",
                "http://x",
                "--key",
                "k",
                "--",
                "true",
            ],
        ];
        for args in refused {
            let error = Cli::parse_args(*args).expect_err("two stores");
            assert!(!error.to_string().contains("pw"), "{error}");
        }
        // Where the environment names no database (it would satisfy `requires`).
        if std::env::var_os(POSTGRES_URL_ENV).is_none() {
            assert!(Cli::parse_args(["lease", "status", "--all", "--table", "t"]).is_err());
            assert!(Cli::parse_args(["lease", "table", "create"]).is_err());
            let cli = Cli::parse_args(["lease", "status", "--all"]).expect("parses");
            assert!(cli.postgres_url().is_none());
        }
    }

    /// Every command that can name a Redis server reports it, as for PostgreSQL; with another
    /// store on the command line `--redis` is refused; `--prefix` needs it; the password is in
    /// no error and no `Debug` form.
    #[test]
    fn every_redis_url_named_is_found() {
        let url = "rediss://app:pw@cache:6380/2";
        let named: &[&[&str]] = &[
            &["lease", "run", "--redis", url, "--key", "k", "--", "true"],
            &[
                "lease", "status", "--redis", url, "--all", "--prefix", "ops",
            ],
            &["lease", "watch", "--redis", url, "--key", "k"],
            &[
                "lease",
                "release",
                "--redis",
                url,
                "--key",
                "k",
                "--force",
                "--yes-i-know",
            ],
            &[
                "lease",
                "run",
                "--redis",
                url,
                "--max-clock-skew",
                "1s",
                "--recreation-grace",
                "1m",
                "--key",
                "k",
                "--",
                "true",
            ],
        ];
        for args in named {
            let cli = Cli::parse_args(*args).expect("parses");
            let found = cli.redis_url().map(RedisUrl::secret_text);
            assert_eq!(found, Some(url), "{args:?}");
            assert_eq!(cli.dynamo_table(), None, "{args:?}");
            assert!(!format!("{cli:?}").contains("pw"), "{cli:?}");
        }
        let refused: &[&[&str]] = &[
            &[
                "lease", "run", "--redis", url, "--file", "/x", "--key", "k", "--", "true",
            ],
            &[
                "lease", "run", "--redis", url, "--dynamo", "t", "--key", "k", "--", "true",
            ],
            &[
                "lease",
                "run",
                "--redis",
                url,
                "--postgres",
                "postgres://a:pw@h/db",
                "--key",
                "k",
                "--",
                "true",
            ],
            &["lease", "run", "--redis", url, "--path", "/x", "--", "true"],
            &["lease", "status", "--redis", url, "--shared-dir", "--all"],
            &["lease", "status", "--redis", url, "--table", "t", "--all"],
            &["lease", "table", "create", "--redis", url],
        ];
        for args in refused {
            let error = Cli::parse_args(*args).expect_err("two stores");
            assert!(!error.to_string().contains("pw"), "{error}");
        }
        // Where the environment names no server (it would satisfy `requires`).
        if std::env::var_os(REDIS_URL_ENV).is_none() {
            assert!(Cli::parse_args(["lease", "status", "--all", "--prefix", "p"]).is_err());
            let cli = Cli::parse_args(["lease", "status", "--all"]).expect("parses");
            assert!(cli.redis_url().is_none());
        }
    }

    /// Without the `redis` feature, `--redis` (or `LEASE_REDIS_URL`) is refused as bad input
    /// with the feature to build with, never ignored.
    #[test]
    fn without_the_redis_feature_redis_names_the_feature() {
        let refused = crate::stores::redis_available();
        if cfg!(feature = "redis") {
            assert!(refused.is_ok());
            return;
        }
        let failure = refused.expect_err("no redis feature");
        assert_eq!(failure.code, crate::exit::USAGE);
        assert!(
            failure
                .message
                .contains("cargo install lease-cli --features redis"),
            "{failure}"
        );
    }

    /// Without the `dynamo` feature, `--dynamo` is refused as bad input with the feature to
    /// build with, never ignored.
    #[test]
    fn without_the_dynamo_feature_dynamo_names_the_feature() {
        let refused = crate::stores::dynamo_available();
        if cfg!(feature = "dynamo") {
            assert!(refused.is_ok());
            return;
        }
        let failure = refused.expect_err("no dynamo feature");
        assert_eq!(failure.code, crate::exit::USAGE);
        assert!(
            failure
                .message
                .contains("cargo install lease-cli --features dynamo"),
            "{failure}"
        );
    }

    /// Without the `postgres` feature, `--postgres` (or `LEASE_POSTGRES_URL`) is refused as
    /// bad input with the feature to build with, never ignored.
    #[test]
    fn without_the_postgres_feature_postgres_names_the_feature() {
        let refused = crate::stores::postgres_available();
        if cfg!(feature = "postgres") {
            assert!(refused.is_ok());
            return;
        }
        let failure = refused.expect_err("no postgres feature");
        assert_eq!(failure.code, crate::exit::USAGE);
        assert!(
            failure
                .message
                .contains("cargo install lease-cli --features postgres"),
            "{failure}"
        );
    }
}

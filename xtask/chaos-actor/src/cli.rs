//! The command line, as clap sees it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// An actor of `cargo xtask chaos`: runs one surface of the lease crates against a real store
/// and appends what it did to `<RUN>/history/<PROC>.log` (formats: docs/chaos.md).
///
/// A test tool: it stops when `<RUN>/stop` appears or its parent dies, and follows the
/// wall-clock offset in `<RUN>/clock/<PROC>`.
#[derive(Debug, Parser)]
#[command(name = "lease-chaos-actor", max_term_width = 100)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) mode: Mode,
}

/// The modes.
#[derive(Debug, Subcommand)]
pub(crate) enum Mode {
    /// The command `lease run` runs: `acq` at start with $LEASE_FENCING_TOKEN, then a `claim`
    /// every EVERY_MS, TICKS times, then exit 0. Being alive is its check: `lease run` promises
    /// the command never outlives its lease.
    Touch(TouchArgs),
    /// A `FileLock` in a loop: acquire (waiting a while), CLAIMS claims spread over HOLD_MS, each
    /// after `check()`, release; again. Errors (a hostile lock directory) are logged, 50 ms
    /// backoff.
    Filelock(FileLockArgs),
    /// `DynamoLeases` kept by a `LeaseGuard`: pick a key, acquire, for 2 to 4 renewal periods
    /// claim and make fenced writes to `value-<key>` (after one fenced read), release; again.
    DynamoLease(KeptLeaseArgs),
    /// As `dynamo-lease`, on `PgLeases` (`--postgres URL --table T`).
    PgLease(KeptLeaseArgs),
    /// As `dynamo-lease`, on `RedisLeases` (`--redis URL --prefix P`).
    RedisLease(KeptLeaseArgs),
    /// One lessor-partition worker with fenced checkpoints: a task per unit gained reads its
    /// checkpoint, then every SAVE_EVERY_MS claims the unit and saves the next checkpoint.
    Fleet(FleetArgs),
    /// `DirectoryStore::prune` of every free key (idle 0 s) every EVERY_MS, in a store opened
    /// with the shared-directory opt-in, so that keys are created again and again: the
    /// attacker's moments (temporary lock directories) keep coming. Errors are printed, not
    /// fatal.
    Prune(PruneArgs),
    /// A leader election on a `DirectoryStore` or `DynamoLeases` key: `campaign` (the value
    /// published is the proc id) waits until elected, claims every 10 ms for HOLD_MS after `check()`, then
    /// resigns (releases); again. `observe` logs every change its `Observer` reports.
    Election(ElectionArgs),
    /// The table restore (DynamoDB): scan the table every second; when `<RUN>/restore/<n>`
    /// appears (the age wanted, in ms), delete the table, create it again and put back the
    /// items of a scan at least that old, as a backup restore does; write `<n>.done`.
    Restore(RestoreArgs),
}

/// `restore`.
#[derive(Debug, Args)]
pub(crate) struct RestoreArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    #[command(flatten)]
    pub(crate) store: TableArgs,
}

/// `election`.
#[derive(Debug, Args)]
pub(crate) struct ElectionArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    /// The store.
    #[arg(long, value_enum, default_value = "file")]
    pub(crate) backend: Backend,
    /// The `DirectoryStore` directory (file backend).
    #[arg(long, value_name = "D", required_if_eq("backend", "file"))]
    pub(crate) dir: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) store: TableArgs,
    /// The election's key in the store.
    #[arg(long, value_name = "KEY")]
    pub(crate) key: String,
    /// `campaign` or `observe`.
    #[arg(long, value_enum)]
    pub(crate) role: ElectionRole,
    /// The leader's lease, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub(crate) ttl_ms: u64,
    /// How long a leader leads before it resigns, in milliseconds (at most; random from a
    /// fifth of it).
    #[arg(long, value_name = "MS", default_value_t = 100)]
    pub(crate) hold_ms: u64,
}

/// What an `election` actor does.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum ElectionRole {
    /// Campaign, lead, resign, in a loop.
    Campaign,
    /// Report every change of leader.
    Observe,
}

/// `prune`.
#[derive(Debug, Args)]
pub(crate) struct PruneArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    /// The store directory (opened with `with_shared_directory(true)`).
    #[arg(long, value_name = "D")]
    pub(crate) dir: PathBuf,
    /// Milliseconds between prunes.
    #[arg(long, value_name = "MS")]
    pub(crate) every_ms: u64,
}

/// What every mode takes.
#[derive(Debug, Args)]
pub(crate) struct Common {
    /// This process's id in the run (unique: slot and incarnation, like `fl2.17`).
    #[arg(long = "proc", value_name = "ID")]
    pub(crate) proc_id: String,
    /// The run directory (history/, clock/, stop).
    #[arg(long, value_name = "RUN_DIR")]
    pub(crate) run: PathBuf,
}

/// `touch`.
#[derive(Debug, Args)]
pub(crate) struct TouchArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    /// Which `lease run` backend started it.
    #[arg(long, value_enum)]
    pub(crate) surface: RunSurface,
    /// The lease key, namespaced (`file:<dir>/<key>`, `dynamo:<table>/<pk>/<sk>`).
    #[arg(long, value_name = "NSKEY")]
    pub(crate) key: String,
    /// How many claims.
    #[arg(long, value_name = "N")]
    pub(crate) ticks: u32,
    /// Milliseconds between claims.
    #[arg(long, value_name = "M")]
    pub(crate) every_ms: u64,
}

/// The `lease run` surfaces.
#[derive(Clone, Copy, Debug, ValueEnum)]
// The values are the history's surface names (`--surface run-postgres`), which all start so.
#[allow(clippy::enum_variant_names)]
pub(crate) enum RunSurface {
    /// `lease run --file`.
    RunFile,
    /// `lease run --dynamo`.
    RunDynamo,
    /// `lease run --postgres`.
    RunPostgres,
    /// `lease run --redis`.
    RunRedis,
}

/// `filelock`.
#[derive(Debug, Args)]
pub(crate) struct FileLockArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    /// The lock's path.
    #[arg(long, value_name = "P")]
    pub(crate) path: PathBuf,
    /// `kernel` (ModePreference::Kernel: fails where flock does not work) or `heartbeat`
    /// (ModePreference::HeartbeatOnly).
    #[arg(long, value_enum)]
    pub(crate) mode: LockModeArg,
    /// Stale threshold in milliseconds.
    #[arg(long, value_name = "S")]
    pub(crate) stale_ms: u64,
    /// Heartbeat interval in milliseconds.
    #[arg(long, value_name = "H")]
    pub(crate) heartbeat_ms: u64,
    /// How long to hold each tenure, in milliseconds.
    #[arg(long, value_name = "X")]
    pub(crate) hold_ms: u64,
    /// Claims per tenure, spread over the hold.
    #[arg(long, value_name = "K")]
    pub(crate) claims: u32,
    /// How long one acquisition waits before the loop looks at the stop file and tries again,
    /// in milliseconds (a kernel-mode waiter's `flock` thread is kept between tries).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub(crate) acquire_timeout_ms: u64,
    /// Sabotage, to show that the chaos run catches a holder that breaks the rules: claim
    /// without `check()`, trusting the tenure from acquisition to release whatever happened in
    /// between (a pause past the lease, a takeover). Never set in a real run.
    #[arg(long)]
    pub(crate) skip_check: bool,
    /// The forking actor: in every tenure, after the first half of the claims, fork a child
    /// that disposes of its copy of the held guard (drops it, releases it, unwinds with it or
    /// exits with it, in turn) and exits; then make the other half, checking as always. A
    /// child that freed the parent's lease would let a contender's claims overlap these.
    #[arg(long)]
    pub(crate) fork_child: bool,
    /// The idle-fork actor: after each released tenure (the lock's directory descriptor is
    /// then idle in its cache), fork a child that contends for the same path with its copy of
    /// the same `FileLock` while this process goes on to its next tenure. Each child logs as a
    /// process of its own (`<proc>-f<n>`): a descriptor shared across the fork that let both
    /// hold would show as an overlap.
    #[arg(long)]
    pub(crate) fork_idle: bool,
}

/// The `FileLock` modes.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum LockModeArg {
    /// Kernel locks (`flock`) beside the rename protocol.
    Kernel,
    /// Heartbeats only.
    Heartbeat,
}

/// Where the table store is: DynamoDB (`--endpoint`), PostgreSQL (`--postgres`) or Redis
/// (`--redis`).
#[derive(Debug, Args)]
pub(crate) struct TableArgs {
    /// DynamoDB endpoint URL (AWS credentials and region from the environment; region defaults
    /// to us-east-1).
    #[arg(long, value_name = "URL")]
    pub(crate) endpoint: Option<String>,
    /// PostgreSQL URL (`postgres://USER@HOST:PORT/DB`).
    #[arg(long, value_name = "URL")]
    pub(crate) postgres: Option<String>,
    /// The table (created if missing).
    #[arg(long, value_name = "T")]
    pub(crate) table: Option<String>,
    /// Redis URL (`redis://HOST:PORT`).
    #[arg(long, value_name = "URL")]
    pub(crate) redis: Option<String>,
    /// The key prefix on Redis.
    #[arg(long, value_name = "P")]
    pub(crate) prefix: Option<String>,
    /// The recreation grace on Redis, in milliseconds (`with_recreation_grace`): at least the
    /// longest lease taken under the prefix, so that a restarted server grants nothing while a
    /// holder of the incarnation before may still run.
    #[arg(long, value_name = "G", default_value_t = 0)]
    pub(crate) grace_ms: u64,
    /// The declared clock skew allowance, in milliseconds (`with_max_clock_skew`).
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub(crate) skew_ms: u64,
    /// The per-attempt timeout of DynamoDB requests (PostgreSQL statements, Redis scripts), in
    /// milliseconds.
    #[arg(long, value_name = "A", default_value_t = 2000)]
    pub(crate) attempt_timeout_ms: u64,
}

/// `dynamo-lease`, `pg-lease` and `redis-lease`.
#[derive(Debug, Args)]
pub(crate) struct KeptLeaseArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    #[command(flatten)]
    pub(crate) store: TableArgs,
    /// The partition keys to lease, comma-separated.
    #[arg(long, value_name = "K1,K2", value_delimiter = ',', required = true)]
    pub(crate) keys: Vec<String>,
    /// Lease duration in milliseconds.
    #[arg(long, value_name = "D")]
    pub(crate) ttl_ms: u64,
    /// SABOTAGE (`cargo xtask chaos --sabotage`): each tenure is one bare grant (no guard, so
    /// no renewal) held for two lease lengths, claimed every sixth of the lease without a
    /// check. The claims after its expiry overlap the next holder's. Never set in a real run.
    #[arg(long)]
    pub(crate) skip_check: bool,
}

/// `fleet`.
#[derive(Debug, Args)]
pub(crate) struct FleetArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    /// The store.
    #[arg(long, value_enum)]
    pub(crate) backend: Backend,
    /// The `DirectoryStore` directory (file backend).
    #[arg(long, value_name = "D", required_if_eq("backend", "file"))]
    pub(crate) dir: Option<PathBuf>,
    /// With the file backend, the `DirectoryStore` reads this process's steppable clock
    /// instead of the system's. Off by default: an injected clock has no shared monotonic
    /// scale, so the store would time expiry by observation and skip the kernel-lock and
    /// shared-deadline paths that production runs.
    #[arg(long)]
    pub(crate) steppable_file_clock: bool,
    #[command(flatten)]
    pub(crate) store: TableArgs,
    /// The fleet's name.
    #[arg(long, value_name = "NAME")]
    pub(crate) fleet: String,
    /// The worker's id (no '.').
    #[arg(long, value_name = "W")]
    pub(crate) worker: String,
    /// How many units the fleet divides (`u00`, `u01`, ...).
    #[arg(long, value_name = "N")]
    pub(crate) units: usize,
    /// Session duration in milliseconds.
    #[arg(long, value_name = "S")]
    pub(crate) session_ms: u64,
    /// Tick interval in milliseconds.
    #[arg(long, value_name = "I")]
    pub(crate) interval_ms: u64,
    /// Safety margin in milliseconds.
    #[arg(long, value_name = "M")]
    pub(crate) margin_ms: u64,
    /// Milliseconds between a unit task's claims and checkpoint saves.
    #[arg(long, value_name = "E")]
    pub(crate) save_every_ms: u64,
    /// Also judge sessions dead by wall clock plus this skew (`with_clock_skew_bound`); off by
    /// default.
    #[arg(long, value_name = "MS")]
    pub(crate) session_skew_ms: Option<u64>,
}

/// The fleet's store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Backend {
    /// A `lease_file::DirectoryStore`.
    File,
    /// `DynamoLeases`.
    Dynamo,
    /// `PgLeases`.
    Postgres,
    /// `RedisLeases`.
    Redis,
}

//! The concrete stores: the only module that names lease-file, lease-dynamo, lease-postgres
//! and lease-redis.
//!
//! DynamoDB is the `dynamo` feature: without it, lease-dynamo and the AWS SDK are not compiled,
//! the `--dynamo` flags still parse, and a command that names a table fails with
//! [`dynamo_available`]'s message, which says how to get a `lease` that has them. PostgreSQL is
//! the `postgres` feature, offered the same way ([`postgres_available`]); Redis the `redis`
//! feature ([`redis_available`]).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lease_core::LeaseError;
#[cfg(feature = "dynamo")]
use lease_dynamo::AttributeNames;

use crate::backend::{Backend, default_dir, prepare_dir};
#[cfg(any(feature = "dynamo", feature = "postgres", feature = "redis"))]
use crate::cli::TableOptions;
use crate::cli::{BackendArgs, DEFAULT_PG_TABLE, DEFAULT_REDIS_PREFIX};
use crate::exit::Failure;
use crate::pg_url::PostgresUrl;
use crate::redis_url::RedisUrl;

/// `Ok` if this `lease` was built with DynamoDB (the `dynamo` feature), else
/// [`without_dynamo`]. `main` asks before it runs any command that names a table.
pub(crate) fn dynamo_available() -> Result<(), Failure> {
    if cfg!(feature = "dynamo") {
        Ok(())
    } else {
        Err(without_dynamo())
    }
}

/// The failure of a command that names a DynamoDB table in a `lease` built without the
/// `dynamo` feature: bad input (exit 64, as for a flag clap does not know), naming the feature
/// to build with. The DynamoDB paths below fail with it too, so that no command reaches a table
/// by a way that skips `main`'s check.
fn without_dynamo() -> Failure {
    Failure::usage(
        "--dynamo: this lease is built without DynamoDB support (lease-cli's `dynamo` \
         feature); install one with it: `cargo install lease-cli --features dynamo` (from a \
         clone of the repository: `cargo run -p lease-cli --features dynamo -- ...`)",
    )
}

/// `Ok` if this `lease` was built with PostgreSQL (the `postgres` feature), else
/// [`without_postgres`]. `main` asks before it runs any command that names a database.
pub(crate) fn postgres_available() -> Result<(), Failure> {
    if cfg!(feature = "postgres") {
        Ok(())
    } else {
        Err(without_postgres())
    }
}

/// As [`without_dynamo`], for a command that names a PostgreSQL database (`--postgres`, or
/// `LEASE_POSTGRES_URL` in the environment) in a `lease` built without the `postgres` feature.
fn without_postgres() -> Failure {
    Failure::usage(
        "--postgres (or LEASE_POSTGRES_URL): this lease is built without PostgreSQL support \
         (lease-cli's `postgres` feature); install one with it: `cargo install lease-cli \
         --features postgres` (from a clone of the repository: `cargo run -p lease-cli \
         --features postgres -- ...`)",
    )
}

/// `Ok` if this `lease` was built with Redis (the `redis` feature), else [`without_redis`].
/// `main` asks before it runs any command that names a server.
pub(crate) fn redis_available() -> Result<(), Failure> {
    if cfg!(feature = "redis") {
        Ok(())
    } else {
        Err(without_redis())
    }
}

/// As [`without_dynamo`], for a command that names a Redis server (`--redis`, or
/// `LEASE_REDIS_URL` in the environment) in a `lease` built without the `redis` feature.
fn without_redis() -> Failure {
    Failure::usage(
        "--redis (or LEASE_REDIS_URL): this lease is built without Redis support (lease-cli's \
         `redis` feature); install one with it: `cargo install lease-cli --features redis` \
         (from a clone of the repository: `cargo run -p lease-cli --features redis -- ...`)",
    )
}

/// Opens the store `args` names: DynamoDB with `--dynamo`, PostgreSQL with `--postgres`, Redis
/// with `--redis`, else the file store. For a command that acquires leases of `ttl`, the
/// stores' recreation grace defaults to it (commands that only read pass zero).
pub(crate) async fn open_holding(args: &BackendArgs, ttl: Duration) -> Result<Backend, Failure> {
    let grace = args.table.recreation_grace.unwrap_or(ttl);
    if let Some(url) = &args.redis {
        let prefix = args.prefix.as_deref().unwrap_or(DEFAULT_REDIS_PREFIX);
        return redis(url, prefix, &args.table, grace);
    }
    if let Some(url) = &args.postgres {
        let table = args.pg_table.as_deref().unwrap_or(DEFAULT_PG_TABLE);
        return postgres(url, table, &args.table, grace);
    }
    match &args.dynamo {
        #[cfg(not(feature = "dynamo"))]
        Some(_) => Err(without_dynamo()),
        #[cfg(feature = "dynamo")]
        Some(table) => {
            let leases = dynamo(
                table,
                args.endpoint.as_deref(),
                args.region.as_deref(),
                &args.table,
                grace,
            )
            .await?;
            Ok(Backend::new(leases, format!("DynamoDB table {table}")))
        }
        None => {
            let dir = match &args.file {
                Some(dir) => prepare_dir(dir, false)?,
                None => prepare_dir(&default_dir(), true)?,
            };
            open_file(&dir, args.shared_dir)
        }
    }
}

/// The file store in `dir`, accepting a directory other users can change (`--shared-dir`) only
/// when `shared`.
fn file_store(dir: &Path, shared: bool) -> lease_file::DirectoryStoreBuilder {
    let builder = lease_file::DirectoryStore::builder(dir);
    if shared {
        builder.with_shared_directory()
    } else {
        builder
    }
}

/// Opens the store for `--path PATH` when given (the lock at exactly PATH, see
/// [`crate::backend::lease_key`]), else the store `args` names.
pub(crate) async fn open_for(
    args: &BackendArgs,
    path: Option<&Path>,
    ttl: Duration,
) -> Result<Backend, Failure> {
    let Some(path) = path else {
        return open_holding(args, ttl).await;
    };
    // Like flock(1) and Go's PIDLock, a relative path is taken from the current directory; the
    // parent is created if missing (as the Go package does), but not probed with files of ours.
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let store = file_store(&dir, args.shared_dir)
        .with_verbatim_names()
        .build()
        .map_err(|error| {
            Failure::unavailable(format!(
                "cannot use {} for the lock {}: {}",
                dir.display(),
                path.display(),
                crate::exit::report(&error)
            ))
        })?;
    let sharer = store.clone();
    let mut backend = Backend::new(store, format!("lock {}", path.display()));
    backend.kernel_lock = Some(Arc::new(move |key, fencing| {
        sharer.kernel_lock_descriptor(key, fencing)
    }));
    Ok(backend)
}

/// A DynamoDB table read strictly by `lease status` ([`lease_dynamo::DynamoLeases::inspect_strict`]):
/// a malformed item is shown corrupt, with the reason, rather than as a record that reads free.
#[cfg(feature = "dynamo")]
pub(crate) struct StrictInspect(lease_dynamo::DynamoLeases);

/// Without the `dynamo` feature there is no strict reader: no value of this type exists.
#[cfg(not(feature = "dynamo"))]
pub(crate) enum StrictInspect {}

impl StrictInspect {
    /// The record of `key`, or [`LeaseError::Corrupt`] for an item every acquisition refuses.
    #[cfg(feature = "dynamo")]
    pub(crate) async fn inspect(
        &self,
        key: &lease_core::LeaseKey,
    ) -> Result<Option<lease_core::LeaseRecord>, LeaseError> {
        self.0.inspect_strict(key).await
    }

    /// Never called: there is no value to call it on.
    #[cfg(not(feature = "dynamo"))]
    pub(crate) async fn inspect(
        &self,
        _key: &lease_core::LeaseKey,
    ) -> Result<Option<lease_core::LeaseRecord>, LeaseError> {
        match *self {}
    }
}

/// As [`open_for`], plus the strict reader where the store has one (DynamoDB).
pub(crate) async fn open_for_status(
    args: &BackendArgs,
    path: Option<&Path>,
) -> Result<(Backend, Option<StrictInspect>), Failure> {
    match (&args.dynamo, path) {
        // PostgreSQL and Redis read strictly already: a row or hash every acquisition refuses
        // reads corrupt.
        _ if (args.postgres.is_some() || args.redis.is_some()) && path.is_none() => {
            Ok((open_holding(args, Duration::ZERO).await?, None))
        }
        #[cfg(not(feature = "dynamo"))]
        (Some(_), None) => Err(without_dynamo()),
        #[cfg(feature = "dynamo")]
        (Some(table), None) => {
            let leases = dynamo(
                table,
                args.endpoint.as_deref(),
                args.region.as_deref(),
                &args.table,
                Duration::ZERO,
            )
            .await?;
            let strict = StrictInspect(leases.clone());
            Ok((
                Backend::new(leases, format!("DynamoDB table {table}")),
                Some(strict),
            ))
        }
        _ => Ok((open_for(args, path, Duration::ZERO).await?, None)),
    }
}

/// Opens the file store in `dir` (created if missing), accepting a directory other users can
/// change only when `shared`. A directory refused as unsafe is bad input (exit 64); any other
/// failure to open it is the backend's (exit 69). There is no writability probe: the first
/// operation reports a directory it cannot write, and an existing key stays acquirable on a
/// file system out of inodes (its state changes are renames).
pub(crate) fn open_file(dir: &Path, shared: bool) -> Result<Backend, Failure> {
    let store = file_store(dir, shared).build().map_err(|error| {
        let message = format!("cannot open the lease directory {}: {error}", dir.display());
        if error.is_invalid_input() {
            Failure::usage(message)
        } else {
            Failure::unavailable(message)
        }
    })?;
    tracing::debug!(dir = %dir.display(), mode = ?store.mode(), "file store opened");
    let sharer = store.clone();
    let lister = store.clone();
    let mut backend = Backend::new(store, format!("file store {}", dir.display()));
    backend.kernel_lock = Some(Arc::new(move |key, fencing| {
        sharer.kernel_lock_descriptor(key, fencing)
    }));
    backend.all_keys = Some(Arc::new(move || {
        // The store decodes its own listing; sorted for a stable display.
        let mut keys = lister.keys().map_err(|e| e.to_string())?;
        keys.sort();
        Ok(keys)
    }));
    Ok(backend)
}

/// `lease prune`: removes the idle free keys of the file store `args` names and prints each
/// one removed (as `lease status` names keys), then a summary on stderr.
pub(crate) fn prune(args: &crate::cli::PruneArgs) -> Result<u8, Failure> {
    let dir = args.file.clone().unwrap_or_else(default_dir);
    match std::fs::symlink_metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(Failure::usage(format!(
                "{} is not a lease directory",
                dir.display()
            )));
        }
        Err(error) => {
            return Err(Failure::unavailable(format!(
                "cannot prune {}: {error}",
                dir.display()
            )));
        }
    }
    let store = file_store(&dir, args.shared_dir).build().map_err(|error| {
        failure(
            &format!("cannot open the lease directory {}", dir.display()),
            &error,
        )
    })?;
    let report = store
        .prune(args.idle)
        .map_err(|error| failure(&format!("cannot prune {}", dir.display()), &error))?;
    for key in &report.removed {
        // Another user's key names, shown for people.
        crate::out::outln!("{}", crate::out::safe(&key.to_string()));
    }
    eprintln!(
        "lease: removed {} key(s) from {}; kept {} (held {}, changed within {} {}, being \
         acquired {}, token ahead of the clock {}, unreadable {})",
        report.removed.len(),
        dir.display(),
        report.kept(),
        report.held,
        lease_core::backend::fmt_duration(args.idle),
        report.recent,
        report.busy,
        report.ahead_of_clock,
        report.unreadable,
    );
    Ok(0)
}

/// `error` as the CLI's failure, prefixed with `context`, with the CLI's advice where it has
/// some ([`Failure::lease`]).
pub(crate) fn failure(context: &str, error: &LeaseError) -> Failure {
    Failure::lease(context, error, advice)
}

/// What to do about a store's error, where the CLI knows better than the library: a missing
/// table is made with `lease table create`; a DynamoDB key schema that does not match is named
/// with `--attribute-name`. The file store's errors say what to do themselves.
pub(crate) fn advice(error: &LeaseError) -> Option<String> {
    dynamo_advice(error).or_else(|| postgres_advice(error))
}

#[cfg(not(feature = "dynamo"))]
fn dynamo_advice(_error: &LeaseError) -> Option<String> {
    None
}

#[cfg(feature = "dynamo")]
fn dynamo_advice(error: &LeaseError) -> Option<String> {
    use lease_dynamo::{DynamoError, DynamoErrorKind};
    let dynamo = std::error::Error::source(error)?.downcast_ref::<DynamoError>()?;
    match dynamo.kind() {
        DynamoErrorKind::KeySchemaMismatch => Some(
            "name the table's key attributes with --attribute-name pk=NAME --attribute-name \
             sk=NAME (both strings), or use another table"
                .to_owned(),
        ),
        DynamoErrorKind::TableMissing => Some(format!(
            "create it with `lease table create --dynamo {}` (with this command's --endpoint and \
             --region, if any)",
            dynamo.table()
        )),
        _ => None,
    }
}

#[cfg(not(feature = "postgres"))]
fn postgres_advice(_error: &LeaseError) -> Option<String> {
    None
}

/// The library names `lease table create --postgres URL`; the exact command names the table.
#[cfg(feature = "postgres")]
fn postgres_advice(error: &LeaseError) -> Option<String> {
    use lease_postgres::{PgError, PgErrorKind};
    let pg = std::error::Error::source(error)?.downcast_ref::<PgError>()?;
    (pg.kind() == PgErrorKind::MissingTable).then(|| {
        format!(
            "that is `lease table create --table {}` with this command's --postgres URL (or \
             LEASE_POSTGRES_URL)",
            pg.table()
        )
    })
}

/// Creates the DynamoDB table `table` (and enables TTL on it), waiting until it is active.
#[cfg(not(feature = "dynamo"))]
pub(crate) async fn create_table(
    _table: &str,
    _endpoint: Option<&str>,
    _region: Option<&str>,
    _options: &crate::cli::TableOptions,
    _timeout: Duration,
) -> Result<(), Failure> {
    Err(without_dynamo())
}

/// Creates the DynamoDB table `table` (and enables TTL on it), waiting until it is active.
#[cfg(feature = "dynamo")]
pub(crate) async fn create_table(
    table: &str,
    endpoint: Option<&str>,
    region: Option<&str>,
    options: &TableOptions,
    timeout: Duration,
) -> Result<(), Failure> {
    let leases = dynamo(table, endpoint, region, options, Duration::ZERO).await?;
    // The table requests wait 30 s per attempt for a cold control plane, 150 s in all against an
    // endpoint that never answers: one read first says at once whether anything answers.
    let probe = timeout.min(TABLE_PROBE_LIMIT);
    let key = lease_core::LeaseKey::new("lease-table-create-probe")
        .map_err(|e| Failure::internal(format!("the probe's key: {e}")))?;
    let place = endpoint.map_or_else(|| "DynamoDB".to_owned(), |e| format!("DynamoDB at {e}"));
    let read = lease_core::LeaseBackend::inspect(&leases, &key);
    match tokio::time::timeout(probe, read).await {
        Err(_) => {
            return Err(Failure::unavailable(format!(
                "cannot create table {table}: {place} did not answer within {}",
                lease_core::backend::fmt_duration(probe)
            )));
        }
        Ok(Err(error)) if error.is_transient() => {
            return Err(failure(
                &format!("cannot create table {table}: {place} cannot be reached"),
                &error,
            ));
        }
        // An answer: the table is missing, there, or not ours (`ensure_table` says which).
        Ok(_) => {}
    }
    leases
        .ensure_table()
        .await
        .map_err(|e| failure(&format!("cannot create table {table}"), &e))
}

/// How long `lease table create` waits for a first answer from the endpoint.
#[cfg(feature = "dynamo")]
const TABLE_PROBE_LIMIT: Duration = Duration::from_secs(10);

/// The PostgreSQL store: the table `table` in the database at `url`, granting nothing for
/// `grace` after it finds the table or the database replaced (see `--recreation-grace`).
/// Nothing is sent yet: the first operation connects.
#[cfg(feature = "postgres")]
fn postgres(
    url: &PostgresUrl,
    table: &str,
    options: &TableOptions,
    grace: Duration,
) -> Result<Backend, Failure> {
    // The pool and the LISTEN connection that wakes waiters and `lease watch`, from one URL.
    let leases = lease_postgres::PgLeases::builder_for_url(url.secret_text(), table)
        .map_err(|e| failure(&format!("bad --postgres {}", url.redacted()), &e))?
        .with_max_clock_skew(options.max_clock_skew.unwrap_or_default())
        .with_recreation_grace(grace)
        .build()
        .map_err(|e| failure(&format!("bad --table {table:?}"), &e))?;
    Ok(Backend::new(
        leases,
        format!("PostgreSQL table {table} at {}", url.redacted()),
    ))
}

/// Without the `postgres` feature: refused, naming it (see [`without_postgres`]).
#[cfg(not(feature = "postgres"))]
fn postgres(
    _url: &PostgresUrl,
    _table: &str,
    _options: &crate::cli::TableOptions,
    _grace: Duration,
) -> Result<Backend, Failure> {
    Err(without_postgres())
}

/// The Redis store: the keys under `prefix` on the server at `url`, granting nothing for
/// `grace` after it finds the server a new incarnation (restarted without the data, failed
/// over, flushed; see `--recreation-grace`). Nothing is sent yet: the first operation
/// connects.
#[cfg(feature = "redis")]
fn redis(
    url: &RedisUrl,
    prefix: &str,
    options: &TableOptions,
    grace: Duration,
) -> Result<Backend, Failure> {
    let leases = lease_redis::RedisLeases::builder_for_url(url.secret_text(), prefix)
        .map_err(|e| failure(&format!("bad --redis {}", url.redacted()), &e))?
        .with_max_clock_skew(options.max_clock_skew.unwrap_or_default())
        .with_recreation_grace(grace)
        .build()
        .map_err(|e| failure(&format!("bad --prefix {prefix:?}"), &e))?;
    Ok(Backend::new(
        leases,
        format!("Redis prefix {prefix} at {}", url.redacted()),
    ))
}

/// Without the `redis` feature: refused, naming it (see [`without_redis`]).
#[cfg(not(feature = "redis"))]
fn redis(
    _url: &RedisUrl,
    _prefix: &str,
    _options: &crate::cli::TableOptions,
    _grace: Duration,
) -> Result<Backend, Failure> {
    Err(without_redis())
}

/// `lease table create --postgres URL [--table NAME]`: creates the table (nothing changes when
/// it exists). Bounded by `--timeout` in `main`, as every other wait on a store.
#[cfg(feature = "postgres")]
pub(crate) async fn create_pg_table(url: &PostgresUrl, table: &str) -> Result<(), Failure> {
    let pool = lease_postgres::pool_from_url(url.secret_text())
        .map_err(|e| failure(&format!("bad --postgres {}", url.redacted()), &e))?;
    lease_postgres::create_table(&pool, table)
        .await
        .map_err(|e| failure(&format!("cannot create table {table}"), &e))
}

/// Without the `postgres` feature: refused, naming it (see [`without_postgres`]).
#[cfg(not(feature = "postgres"))]
pub(crate) async fn create_pg_table(_url: &PostgresUrl, _table: &str) -> Result<(), Failure> {
    Err(without_postgres())
}

/// The attribute names with `--attribute-name DEFAULT=NAME` applied.
#[cfg(feature = "dynamo")]
fn attribute_names(renames: &[String]) -> Result<AttributeNames, Failure> {
    let mut names = AttributeNames::default();
    for rename in renames {
        let bad = |why: &str| Failure::usage(format!("bad --attribute-name {rename:?}: {why}"));
        let (default, name) = rename
            .split_once('=')
            .ok_or_else(|| bad("write it as DEFAULT=NAME, such as pk=id"))?;
        let field = match default {
            "pk" => &mut names.partition_key,
            "sk" => &mut names.sort_key,
            "lease_token" => &mut names.token,
            "lease_expires_at" => &mut names.expires_at,
            "lease_expires_at_ms" => &mut names.expires_at_ms,
            "ttl" => &mut names.ttl,
            "lease_fence" => &mut names.fencing,
            "lease_owner" => &mut names.owner,
            "lease_acquired_at" => &mut names.acquired_at,
            "lease_request" => &mut names.request,
            "fenced_value" => &mut names.fenced_value,
            "value_fence" => &mut names.value_fence,
            "lease_value" => &mut names.value,
            _ => return Err(bad("no attribute has that default name (see --help)")),
        };
        name.clone_into(field);
    }
    Ok(names)
}

/// The SDK client, configured as for any AWS service (credentials and region from the
/// environment, the AWS profile or instance metadata), with `--endpoint` and `--region` over it.
/// An endpoint without a region (DynamoDB Local, which wants one but ignores which) gets the
/// configured region or `us-east-1`, from lease-dynamo's `client_for_endpoint`: its users need
/// not set one.
#[cfg(feature = "dynamo")]
async fn sdk_client(endpoint: Option<&str>, region: Option<&str>) -> aws_sdk_dynamodb::Client {
    if let (Some(endpoint), None) = (endpoint, region) {
        return lease_dynamo::client_for_endpoint(endpoint).await;
    }
    let mut config = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(region) = region {
        config = config.region(aws_config::Region::new(region.to_owned()));
    }
    if let Some(endpoint) = endpoint {
        config = config.endpoint_url(endpoint);
    }
    aws_sdk_dynamodb::Client::new(&config.load().await)
}

#[cfg(feature = "dynamo")]
async fn dynamo(
    table: &str,
    endpoint: Option<&str>,
    region: Option<&str>,
    options: &TableOptions,
    grace: Duration,
) -> Result<lease_dynamo::DynamoLeases, Failure> {
    let client = sdk_client(endpoint, region).await;
    let mut builder = lease_dynamo::DynamoLeases::builder(client, table)
        .with_attribute_names(attribute_names(&options.attribute_name)?)
        .with_max_clock_skew(options.max_clock_skew.unwrap_or_default())
        .with_recreation_grace(grace);
    if let Some(sort) = &options.lock_sort_key {
        builder = builder.with_lock_sort_key(sort.as_str());
    }
    builder
        .build()
        .map_err(|e| failure(&format!("bad --dynamo table {table:?}"), &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 23: the CLI could not set the skew allowance (always 0: a double grant at 2 s of
    /// skew on a 10 s lease; lease-dynamo's `tests/clock_skew.rs` shows the hole and that the
    /// allowance closes it), the lock sort key or the attribute names.
    #[cfg(feature = "dynamo")]
    #[tokio::test]
    async fn table_flags_configure_the_dynamodb_manager() {
        let cli = crate::cli::Cli::parse_args([
            "lease",
            "run",
            "--dynamo",
            "leases",
            "--endpoint",
            "http://127.0.0.1:9",
            "--max-clock-skew",
            "2s",
            "--lock-sort-key",
            "MUTEX",
            "--attribute-name",
            "pk=id",
            "--attribute-name",
            "lease_token=holder",
            "--key",
            "k",
            "--",
            "true",
        ])
        .expect("parses");
        let crate::cli::Command::Run(run) = cli.command else {
            panic!("not run");
        };
        let args = &run.backend;
        let leases = dynamo(
            "leases",
            args.endpoint.as_deref(),
            None,
            &args.table,
            Duration::from_secs(30),
        )
        .await
        .expect("configured");
        // The manager echoes its settings only in its `Debug` form (it has no getters).
        let settings = format!("{leases:?}");
        for set in [
            "max_clock_skew: 2s",
            r#"lock_sort_key: "MUTEX""#,
            r#"partition_key: "id""#,
            r#"token: "holder""#,
            r#"sort_key: "sk""#,
            "recreation_grace: 30s",
        ] {
            assert!(settings.contains(set), "{set} not in {settings}");
        }

        let bad = attribute_names(&["lease_tokn=x".to_owned()]).expect_err("unknown default");
        assert_eq!(bad.code, crate::exit::USAGE);
        assert!(attribute_names(&["pk".to_owned()]).is_err());
    }

    #[test]
    fn only_a_missing_dynamodb_table_gets_advice() {
        assert_eq!(advice(&LeaseError::invalid("key", "empty")), None);
        let other_backend = LeaseError::backend("file", false, std::io::Error::other("disk full"));
        assert_eq!(advice(&other_backend), None);
    }
}

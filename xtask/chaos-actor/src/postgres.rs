//! `PgLeases` as the PostgreSQL modes build it.

use std::sync::Arc;
use std::time::Duration;

use lease_postgres::{PgLeases, RetryPolicy};

use crate::actor::Actor;
use crate::cli::TableArgs;

/// A manager on `args`' table at `--postgres`, with a `LISTEN` connection to the same URL (as
/// the `lease` command builds it), the declared skew and the attempt timeout; the table is
/// created if missing (retried until it works or the actor stops). It keeps the system clock:
/// the server's clock judges expiry, and a clock given to `with_clock` would move the server's
/// time (the crate's test hook), which no production caller does.
///
/// # Errors
/// No URL or table given, an invalid configuration, or a stop before the table was ready.
pub(crate) async fn leases(args: &TableArgs, actor: &Actor) -> Result<Arc<PgLeases>, String> {
    let table = args.table.as_deref().ok_or("--table is required")?;
    let url = args.postgres.as_deref().ok_or("--postgres is required")?;
    let retry =
        RetryPolicy::default().with_attempt_timeout(Duration::from_millis(args.attempt_timeout_ms));
    let leases = PgLeases::builder_for_url(url, table)
        .and_then(|builder| {
            builder
                .with_max_clock_skew(Duration::from_millis(args.skew_ms))
                .with_retry_policy(retry)
                .build()
        })
        .map_err(|e| format!("cannot configure PgLeases: {e}"))?;
    actor
        .until_ready("create_table", || {
            lease_postgres::create_table(leases.pool(), table)
        })
        .await?;
    Ok(Arc::new(leases))
}

/// The namespaced history key of lease `name` (no sort key): `postgres:<table>/<name>`.
pub(crate) fn lease_key(table: &str, name: &str) -> String {
    format!("postgres:{table}/{name}")
}

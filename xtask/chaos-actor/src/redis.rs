//! `RedisLeases` as the Redis modes build it.

use std::sync::Arc;
use std::time::Duration;

use lease_redis::{RedisLeases, RetryPolicy};

use crate::actor::Actor;
use crate::cli::TableArgs;

/// A manager on `args`' prefix at `--redis`, with the recreation grace (`--grace-ms`), the
/// declared skew and the attempt timeout. It keeps the system clock: the server's clock
/// (`TIME` in the scripts) judges expiry, and a clock given to `with_clock` would replace the
/// server's time (the crate's test hook), which no production caller does. Nothing to create:
/// the scripts write their keys.
///
/// # Errors
/// No URL or prefix given, or an invalid configuration.
pub(crate) fn leases(args: &TableArgs, _actor: &Actor) -> Result<Arc<RedisLeases>, String> {
    let prefix = args.prefix.as_deref().ok_or("--prefix is required")?;
    let url = args.redis.as_deref().ok_or("--redis is required")?;
    let retry =
        RetryPolicy::default().with_attempt_timeout(Duration::from_millis(args.attempt_timeout_ms));
    let leases = RedisLeases::builder_for_url(url, prefix)
        .and_then(|builder| {
            builder
                .with_max_clock_skew(Duration::from_millis(args.skew_ms))
                .with_recreation_grace(Duration::from_millis(args.grace_ms))
                .with_retry_policy(retry)
                .build()
        })
        .map_err(|e| format!("cannot configure RedisLeases: {e}"))?;
    Ok(Arc::new(leases))
}

/// The namespaced history key of lease `name` (no sort key): `redis:<prefix>/<name>`.
pub(crate) fn lease_key(prefix: &str, name: &str) -> String {
    format!("redis:{prefix}/{name}")
}

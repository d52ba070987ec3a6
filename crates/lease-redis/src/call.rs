//! Sending one request: a connection of its own (an idle one, or a new one whose server's
//! identity is read), one round trip, retried on a fresh connection when the transport fails or the server
//! refuses for a reason that passes, never past the caller's deadline.

use std::time::{Duration, Instant};

use redis::{AsyncConnectionConfig, Script, Value};
use tracing::Instrument;

use crate::RedisLeases;
use crate::connections::Live;
use crate::error::{RedisError, RedisErrorKind, from_driver};

/// One request: a script with its keys and arguments, or a plain command.
#[derive(Debug)]
pub(crate) enum Request<'a> {
    /// `EVALSHA` of `script` (loaded again after `NOSCRIPT`). With `incarnation`, the
    /// argument at that index (0-based, `ARGV[i + 1]`) is replaced by the connection's
    /// server identity.
    Script {
        script: &'a Script,
        keys: Vec<String>,
        args: Vec<Vec<u8>>,
        incarnation: Option<usize>,
    },
    /// A plain command (inspect's `HMGET`).
    Command(redis::Cmd),
}

/// Picks the command to send after a request's answer, on the same connection.
pub(crate) type FollowUp<'a> = dyn Fn(&Value) -> Option<redis::Cmd> + Sync + 'a;

/// `run_id/master_replid` from an `INFO` reply: which server process answered (a new one after
/// every restart) and which replication history its data set follows (a new one after every
/// promotion).
pub(crate) fn incarnation_of(info: &str) -> Option<String> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_owned)
    };
    Some(format!("{}/{}", field("run_id")?, field("master_replid")?))
}

impl RedisLeases {
    /// An idle connection, or a new one (and, with a recreation grace, the identity of the
    /// server it reached, from one `INFO`).
    async fn connection(
        &self,
        operation: &'static str,
        budget: Duration,
    ) -> Result<Live, RedisError> {
        let inner = &self.inner;
        let prefix = &inner.keys.prefix;
        if let Some(live) = inner.connections.take() {
            return Ok(live);
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(budget))
            .set_response_timeout(None);
        let client = inner
            .source
            .client()
            .await
            .map_err(|e| connection_failed(operation, prefix, e))?;
        let mut connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| connection_failed(operation, prefix, e))?;
        let incarnation = if inner.recreation_grace.is_zero() {
            String::new()
        } else {
            let info: String = redis::cmd("INFO")
                .query_async(&mut connection)
                .await
                .map_err(|e| from_driver(operation, prefix, e))?;
            incarnation_of(&info).ok_or_else(|| {
                RedisError::new(
                    operation,
                    prefix,
                    RedisErrorKind::Unexpected,
                    "INFO names no run_id and master_replid (is this Redis 5 or later?)",
                )
            })?
        };
        let opened = inner
            .connections
            .opened
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        tracing::debug!(prefix = %prefix, opened, incarnation = %incarnation, "connected to Redis");
        Ok(Live {
            connection,
            incarnation,
        })
    }

    /// Sends `request` until it is answered, fails permanently, runs out of attempts, or time
    /// runs out: no retry starts at or past `until` (by this manager's monotonic clock), and a
    /// retry's attempt timeout is capped by the time left to it. The first attempt always runs,
    /// bounded by the policy's attempt timeout. An earlier attempt may have been applied (its
    /// reply lost): the caller reconciles that with its request id.
    pub(crate) async fn send(
        &self,
        operation: &'static str,
        request: &Request<'_>,
        until: Option<Instant>,
    ) -> Result<Value, RedisError> {
        let (value, _) = self.send_then(operation, request, until, &|_| None).await?;
        Ok(value)
    }

    /// [`send`](Self::send), then, on the same connection (so that it covers the request's
    /// write), the command `then` picks from the answer, if any: `WAIT` after a grant. Its
    /// answer comes second. A failure of either is the attempt's, retried as one.
    pub(crate) async fn send_then(
        &self,
        operation: &'static str,
        request: &Request<'_>,
        until: Option<Instant>,
        then: &FollowUp<'_>,
    ) -> Result<(Value, Option<Value>), RedisError> {
        let inner = &self.inner;
        let policy = &inner.retry;
        let mut backoff = policy.backoff();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut budget = policy.attempt_timeout;
            if let Some(until) = until.filter(|_| attempts > 1) {
                budget = budget.min(until.saturating_duration_since(inner.clock.monotonic()));
            }
            let span = tracing::debug_span!(
                "redis.call",
                operation,
                prefix = %inner.keys.prefix,
                attempt = attempts
            );
            let error = match self
                .attempt(operation, request, budget, then)
                .instrument(span)
                .await
            {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            let mut pause = backoff.next_delay();
            let left = until.map(|until| until.saturating_duration_since(inner.clock.monotonic()));
            if let Some(left) = left {
                pause = pause.min(left);
            }
            if !error.is_transient()
                || attempts >= policy.max_attempts
                || left.is_some_and(|l| l <= pause)
            {
                return Err(error);
            }
            tracing::warn!(
                operation,
                prefix = %inner.keys.prefix,
                attempt = attempts,
                backoff_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                error = %error,
                "Redis call failed in transit or was refused for now; retrying it on a fresh connection"
            );
            lease_core::metrics::retried(crate::BACKEND, operation);
            tokio::time::sleep(pause).await;
        }
    }

    /// One attempt: a connection, then the request, each within what is left of `budget`.
    async fn attempt(
        &self,
        operation: &'static str,
        request: &Request<'_>,
        budget: Duration,
        then: &FollowUp<'_>,
    ) -> Result<(Value, Option<Value>), RedisError> {
        let inner = &self.inner;
        let prefix = &inner.keys.prefix;
        let started = inner.clock.monotonic();
        let live = match tokio::time::timeout(budget, self.connection(operation, budget)).await {
            Ok(Ok(live)) => live,
            Ok(Err(error)) => return Err(error),
            Err(_) => return Err(timed_out(operation, prefix, budget, "connecting")),
        };
        let left =
            budget.saturating_sub(inner.clock.monotonic().saturating_duration_since(started));
        let mut connection = live.connection.clone();
        let identity = live.incarnation.as_bytes();
        let sent = async {
            let value = match request {
                Request::Script {
                    script,
                    keys,
                    args,
                    incarnation,
                } => {
                    let mut invocation = script.prepare_invoke();
                    for key in keys {
                        invocation.key(key);
                    }
                    for (i, arg) in args.iter().enumerate() {
                        if *incarnation == Some(i) {
                            invocation.arg(identity);
                        } else {
                            invocation.arg(arg.as_slice());
                        }
                    }
                    invocation.invoke_async::<Value>(&mut connection).await
                }
                Request::Command(cmd) => cmd.query_async::<Value>(&mut connection).await,
            }?;
            let next = match then(&value) {
                Some(cmd) => Some(cmd.query_async::<Value>(&mut connection).await?),
                None => None,
            };
            Ok((value, next))
        };
        let answer = tokio::time::timeout(left, sent).await;
        match answer {
            Ok(Ok(answer)) => {
                inner.connections.give_back(live);
                Ok(answer)
            }
            Ok(Err(error)) => {
                let error = from_driver(operation, prefix, error);
                // A connection that failed, or reached a server that is no longer the primary
                // (its identity must be read again), is closed.
                if error.poisons_connection() {
                    inner.connections.forget_idle();
                } else {
                    inner.connections.give_back(live);
                }
                Err(error)
            }
            // The call may still run: never send another one over this connection (dropped).
            Err(_) => Err(timed_out(
                operation,
                prefix,
                budget,
                "waiting for the reply",
            )),
        }
    }
}

/// A connection that could not be made: a refusal the driver classifies as anything but
/// transient is still a connection failure here (a wrong address, a Sentinel that knows no
/// primary), so it is retried as one.
fn connection_failed(
    operation: &'static str,
    prefix: &str,
    error: redis::RedisError,
) -> RedisError {
    let classified = from_driver(operation, prefix, error);
    if classified.kind() != RedisErrorKind::Rejected {
        return classified;
    }
    RedisError::new(
        operation,
        prefix,
        RedisErrorKind::Connection,
        "could not connect (is the server up, the URL right, and do the Sentinels name a primary?)",
    )
    .with_source(classified)
}

fn timed_out(operation: &'static str, prefix: &str, budget: Duration, what: &str) -> RedisError {
    RedisError::new(
        operation,
        prefix,
        RedisErrorKind::Timeout,
        format!(
            "no answer within the attempt timeout of {} ({what}); the outcome is unknown",
            lease_core::backend::fmt_duration(budget)
        ),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn incarnation_reads_run_id_and_replication_id() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\n# Replication\r\nrole:master\r\nmaster_replid:def\r\nmaster_replid2:000\r\n";
        assert_eq!(super::incarnation_of(info).as_deref(), Some("abc/def"));
        assert_eq!(super::incarnation_of("run_id:abc\r\n"), None);
    }
}

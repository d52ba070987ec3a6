//! Sending one statement: a connection from the pool, one round trip, retried on a fresh
//! connection when the transport fails, never past the caller's deadline.

use std::time::Instant;

use deadpool_postgres::Object;
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};
use tracing::Instrument;

use crate::PgLeases;
use crate::error::{PgError, PgErrorKind, from_driver};

/// A statement's parameters with their types, as `query_typed` takes them.
pub(crate) type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

/// The rows a statement returned. An earlier attempt of it may have been applied (its reply
/// lost): the caller reconciles that with its request id.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) rows: Vec<Row>,
}

impl PgLeases {
    /// Sends `sql` until it is answered, fails permanently, runs out of attempts, or time runs
    /// out: no retry starts at or past `until` (by this manager's monotonic clock), and a retry's
    /// attempt timeout is capped by the time left to it. The first attempt always runs, bounded
    /// by the policy's attempt timeout.
    pub(crate) async fn send(
        &self,
        operation: &'static str,
        sql: &str,
        params: &Params<'_>,
        until: Option<Instant>,
    ) -> Result<Answer, PgError> {
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
                "postgres.statement",
                operation,
                table = %inner.table.plain,
                attempt = attempts
            );
            let error = match self
                .attempt(operation, sql, params, budget)
                .instrument(span)
                .await
            {
                Ok(rows) => return Ok(Answer { rows }),
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
                table = %inner.table.plain,
                attempt = attempts,
                backoff_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                error = %error,
                "PostgreSQL statement failed in transit; retrying it on a fresh connection"
            );
            lease_core::metrics::retried(crate::BACKEND, operation);
            tokio::time::sleep(pause).await;
        }
    }

    /// One attempt: a connection, then the statement, each within what is left of `budget`.
    async fn attempt(
        &self,
        operation: &'static str,
        sql: &str,
        params: &Params<'_>,
        budget: std::time::Duration,
    ) -> Result<Vec<Row>, PgError> {
        let inner = &self.inner;
        let table = &inner.table.plain;
        let started = inner.clock.monotonic();
        let client = match tokio::time::timeout(budget, inner.pool.get()).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => {
                return Err(PgError::new(
                    operation,
                    table,
                    PgErrorKind::Connection,
                    "no connection from the pool (is the server up, and the URL right?)",
                )
                .with_source(error));
            }
            Err(_) => {
                return Err(timed_out(
                    operation,
                    table,
                    budget,
                    "waiting for a connection",
                ));
            }
        };
        let left =
            budget.saturating_sub(inner.clock.monotonic().saturating_duration_since(started));
        match tokio::time::timeout(left, client.query_typed(sql, params)).await {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(error)) => {
                let error = from_driver(operation, table, error);
                if error.is_transient() {
                    discard(client);
                }
                Err(error)
            }
            Err(_) => {
                // The statement may still run: never hand this connection to another call.
                discard(client);
                Err(timed_out(operation, table, budget, "waiting for the reply"))
            }
        }
    }
}

/// Takes a connection out of the pool for good, so that it is closed.
fn discard(client: Object) {
    drop(Object::take(client));
}

fn timed_out(
    operation: &'static str,
    table: &str,
    budget: std::time::Duration,
    what: &str,
) -> PgError {
    PgError::new(
        operation,
        table,
        PgErrorKind::Timeout,
        format!(
            "no answer within the attempt timeout of {} ({what}); the outcome is unknown",
            lease_core::backend::fmt_duration(budget)
        ),
    )
}

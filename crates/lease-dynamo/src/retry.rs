//! Retrying transient failures: full-jitter exponential backoff, capped by the time the lease
//! can still be trusted.

use std::future::Future;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::http::Response as HttpResponse;
use lease_core::{Backoff, Clock};
use tracing::Instrument;

use crate::error::classify;

/// How this crate retries requests that failed transiently (throttling, 5xx, timeouts, transport
/// errors). A failed *condition* is never retried: it is an answer, not a failure.
///
/// The SDK's own retries are turned off for the client this crate uses, so every attempt is
/// visible here, retried with the *same* request (same token, same timestamps) and reconciled
/// if an earlier attempt landed but its reply was lost.
///
/// ```
/// use lease_dynamo::RetryPolicy;
/// use std::time::Duration;
/// let policy = RetryPolicy::default()
///     .with_max_attempts(3)
///     .with_backoff(Duration::from_millis(10), Duration::from_millis(200))
///     .with_attempt_timeout(Duration::from_secs(1));
/// # let _ = policy;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    pub(crate) max_attempts: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    pub(crate) attempt_timeout: Duration,
}

impl Default for RetryPolicy {
    /// 5 attempts, backoff from 25 ms up to 1 s, 2 s per attempt.
    fn default() -> Self {
        Self {
            max_attempts: 5,
            initial_backoff: Duration::from_millis(25),
            max_backoff: Duration::from_secs(1),
            attempt_timeout: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// Attempts per operation, the first included (at least 1; 1 turns retries off).
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The backoff before the second attempt and the most any backoff may be; each retry draws
    /// uniformly from zero to `initial * 2^(retry - 1)`, capped at `max` (full jitter).
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max.max(initial);
        self
    }

    /// How long one attempt may take before it counts as a timeout (and, if attempts are
    /// left, is retried): the SDK's per-attempt timeout.
    pub fn with_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// The backoff between this policy's attempts: lease-core's own full-jitter [`Backoff`],
    /// whose `n`th delay (from 0) is drawn from zero to `initial * 2^n`, capped at `max`.
    pub(crate) fn backoff(&self) -> Backoff {
        Backoff::new(self.initial_backoff, self.max_backoff)
    }
}

/// The end of a sequence of attempts that did not succeed.
#[derive(Debug)]
pub(crate) struct Failed<E> {
    /// The last attempt's error.
    pub(crate) error: SdkError<E, HttpResponse>,
    /// Whether an earlier attempt may have been applied by the server (its reply was lost).
    pub(crate) uncertain: bool,
    /// Attempts made.
    pub(crate) attempts: u32,
}

/// Sends `attempt()` until it succeeds, fails permanently, fails its condition, runs out of
/// attempts, or time runs out: no retry starts at or past `until` (by `clock`'s monotonic
/// time), a backoff never sleeps past it, and a retry's attempt timeout is capped by the time
/// left to it. The first attempt always runs, bounded by the client's own attempt timeout.
pub(crate) async fn with_retries<T, E, F, Fut>(
    policy: &RetryPolicy,
    clock: &dyn Clock,
    until: Option<Instant>,
    operation: &'static str,
    mut attempt: F,
) -> Result<T, Failed<E>>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
{
    let mut uncertain = false;
    let mut attempts = 0;
    let mut backoff = policy.backoff();
    loop {
        attempts += 1;
        let span = tracing::debug_span!("dynamodb.request", operation, attempt = attempts);
        let left = until.map(|until| until.saturating_duration_since(clock.monotonic()));
        let sent = attempt().instrument(span);
        let outcome = match left {
            Some(left) if attempts > 1 => match tokio::time::timeout(left, sent).await {
                Ok(outcome) => outcome,
                Err(_) => Err(SdkError::timeout_error(OutOfTime(left))),
            },
            _ => sent.await,
        };
        let error = match outcome {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        let class = classify(&error);
        #[cfg(feature = "metrics")]
        if crate::error::is_throttling(&error) {
            lease_core::metrics::throttled(crate::BACKEND, operation);
        }
        let mut pause = backoff.next_delay();
        let left = until.map(|until| until.saturating_duration_since(clock.monotonic()));
        if let Some(left) = left {
            pause = pause.min(left);
        }
        if !class.transient || attempts >= policy.max_attempts || left.is_some_and(|l| l <= pause) {
            return Err(Failed {
                error,
                uncertain,
                attempts,
            });
        }
        tracing::warn!(
            operation,
            attempt = attempts,
            backoff_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
            error = %crate::error::plain(&error),
            "transient DynamoDB failure; retrying the same request"
        );
        uncertain |= !class.unapplied;
        lease_core::metrics::retried(crate::BACKEND, operation);
        tokio::time::sleep(pause).await;
    }
}

/// A retry cut short by the caller's deadline (or the lease's), as a timeout.
#[derive(Debug)]
struct OutOfTime(Duration);

impl std::fmt::Display for OutOfTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no reply within the {} left before the deadline",
            lease_core::backend::fmt_duration(self.0)
        )
    }
}

impl std::error::Error for OutOfTime {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_jittered_and_capped() {
        let policy = RetryPolicy::default()
            .with_backoff(Duration::from_millis(10), Duration::from_millis(50));
        let mut backoff = policy.backoff();
        assert!(
            backoff.next_delay() <= Duration::from_millis(10),
            "first retry"
        );
        for _ in 1..30 {
            let pause = backoff.next_delay();
            assert!(pause <= Duration::from_millis(50), "{pause:?}");
        }
        let draws: Vec<_> = (0..20)
            .map(|_| {
                let mut backoff = policy.backoff();
                (0..4).map(|_| backoff.next_delay()).last()
            })
            .collect();
        assert!(draws.iter().any(|d| *d != draws[0]), "jittered: {draws:?}");
    }
}

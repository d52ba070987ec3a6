//! Retrying transport failures on a fresh connection, reconciled by the call's request id.

use std::time::Duration;

use lease_core::Backoff;

/// How this crate retries a call whose connection failed (lost, reset, timed out) or that the server refused for a reason that passes (loading, read-only after a failover, master down). A
/// refused condition is never retried: it is an answer, not a failure.
///
/// Every retry sends the *same* script with the same request id on a fresh connection, so
/// a retry that finds its own earlier attempt applied reports it as done.
///
/// ```
/// use lease_redis::RetryPolicy;
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
    /// 4 attempts, backoff from 10 ms up to 500 ms, 2 s per attempt (connecting included).
    fn default() -> Self {
        Self {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(500),
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

    /// How long one attempt may take, connecting (and reading the server's identity) included, before it
    /// counts as a timeout (and, if attempts are left, is retried).
    pub fn with_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    pub(crate) fn backoff(&self) -> Backoff {
        Backoff::new(self.initial_backoff, self.max_backoff)
    }
}

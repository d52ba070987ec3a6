//! Per-call options of an acquire.

use std::time::Instant;

use crate::LeaseToken;

/// Per-call options of [`LeaseBackend::try_acquire`](crate::LeaseBackend::try_acquire). `Default` asks for nothing special.
///
/// ```
/// use lease_core::AcquireOptions;
/// let options = AcquireOptions::default().with_owner("report-cron on host-3");
/// assert_eq!(options.owner(), Some("report-cron on host-3"));
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct AcquireOptions {
    owner: Option<String>,
    token: Option<LeaseToken>,
    deadline: Option<Instant>,
    value: Option<String>,
}

/// Checks what an acquire publishes: the value of [`AcquireOptions::with_value`] is at most
/// [`MAX_LEASE_VALUE_BYTES`] bytes. Every backend calls it before it sends anything.
///
/// ```
/// use lease_core::{AcquireOptions, MAX_LEASE_VALUE_BYTES, backend::validate_acquire_options};
/// assert!(validate_acquire_options(&AcquireOptions::default().with_value("host-3:8080")).is_ok());
/// let long = AcquireOptions::default().with_value("x".repeat(MAX_LEASE_VALUE_BYTES + 1));
/// assert!(validate_acquire_options(&long).unwrap_err().is_invalid_input());
/// ```
///
/// # Errors
/// [`LeaseError::InvalidInput`](crate::LeaseError::InvalidInput) naming the field `lease value`.
pub fn validate_acquire_options(options: &AcquireOptions) -> Result<(), crate::LeaseError> {
    match options.value() {
        Some(value) if value.len() > MAX_LEASE_VALUE_BYTES => Err(crate::LeaseError::invalid(
            "lease value",
            format!(
                "is {} bytes; the limit is {MAX_LEASE_VALUE_BYTES}",
                value.len()
            ),
        )),
        _ => Ok(()),
    }
}

/// The longest value [`AcquireOptions::with_value`] may publish, in bytes.
pub const MAX_LEASE_VALUE_BYTES: usize = 512;

impl AcquireOptions {
    /// A human description of the new holder, shown to contenders in [`LeaseError::Held`](crate::LeaseError::Held).
    pub fn with_owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Use this owner token instead of a fresh one from the backend's token source.
    ///
    /// A token names one tenure, not one caller: acquiring a key that is held, even under this
    /// same token, fails with [`LeaseError::Held`](crate::LeaseError::Held). Backends reconcile their *own* retries after a
    /// lost reply inside one call; a second call with the same token is a second contender.
    pub fn with_token(mut self, token: LeaseToken) -> Self {
        self.token = Some(token);
        self
    }

    /// Give up by `deadline` (on the backend clock's
    /// [`monotonic`](crate::Clock::monotonic) time line), retries inside the call included.
    ///
    /// The call always makes its first attempt (bounded by the backend's own per-attempt
    /// timeout, if it has one); it starts no retry at or past the deadline, and a retry's attempt
    /// timeout is capped by the time left. So a call given a deadline that has already passed
    /// makes exactly one attempt, and one given `now + d` returns within `d` plus one attempt
    /// timeout. A [`LeaseGuardBuilder`](crate::LeaseGuardBuilder) that waits sets it
    /// to the end of its wait (or keeps an earlier one set here). Backends without internal
    /// retries may ignore it. The deadline is on the backend's [`Clock::monotonic`](crate::Clock::monotonic)
    /// (not std's `Instant::now`, which [`SystemClock`](crate::SystemClock) runs ahead of after a
    /// suspend).
    ///
    /// ```
    /// use lease_core::{AcquireOptions, Clock, SystemClock};
    /// use std::time::Duration;
    /// let by = SystemClock.monotonic() + Duration::from_secs(3);
    /// assert_eq!(AcquireOptions::default().with_deadline(by).deadline(), Some(by));
    /// ```
    pub fn with_deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Publish `value` in the lease record with this acquisition: an address or an id that
    /// followers read from [`Holder::value`](crate::Holder::value) (through
    /// [`inspect`](crate::LeaseBackend::inspect), [`LeaseError::Held`](crate::LeaseError::Held)
    /// and the election's [`Observer`](crate::Observer)) to route to the holder, and fence with
    /// its fencing token. It is written by the same write that makes the holder (on the file
    /// store: the holder's description, written right after it, see `lease-file`), and stays
    /// for the whole tenure: a renewal never changes it; to publish another value, release and
    /// acquire again (a new fencing token).
    ///
    /// At most [`MAX_LEASE_VALUE_BYTES`] bytes; a longer one fails the acquire with
    /// [`LeaseError::InvalidInput`](crate::LeaseError::InvalidInput) and writes nothing.
    ///
    /// ```
    /// use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, MemoryBackend};
    /// use pollster::block_on;
    /// use std::time::Duration;
    ///
    /// let store = MemoryBackend::new();
    /// let key = LeaseKey::new("primary")?;
    /// let options = AcquireOptions::default().with_value("10.0.0.7:5432");
    /// let lease = block_on(store.try_acquire(&key, Duration::from_secs(10), &options))?;
    /// let record = block_on(store.inspect(&key))?.expect("acquired");
    /// assert_eq!(record.holder().and_then(|h| h.value()), Some("10.0.0.7:5432"));
    /// # Ok::<(), lease_core::LeaseError>(())
    /// ```
    pub fn with_value(mut self, value: impl Into<String>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// The value to publish, if one was set.
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// The deadline, if one was set.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// The owner description.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The caller-chosen token.
    pub fn token(&self) -> Option<&LeaseToken> {
        self.token.as_ref()
    }
}

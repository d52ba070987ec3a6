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
}

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
    /// timeout. [`LeaseBackendExt::acquire_with`](crate::LeaseBackendExt::acquire_with) sets it
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

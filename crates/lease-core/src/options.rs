//! Per-call options of an acquire.

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

    /// The owner description.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The caller-chosen token.
    pub fn token(&self) -> Option<&LeaseToken> {
        self.token.as_ref()
    }
}

//! Leases as a holder sees them, and records as the store keeps them.

use std::fmt;
use std::time::{Duration, Instant, SystemTime};

use crate::{FencingToken, Holder, LeaseError, LeaseKey, LeaseToken};

/// Shortest lease duration accepted.
pub const MIN_LEASE_DURATION: Duration = Duration::from_millis(10);
/// Longest lease duration accepted: a lease is a liveness promise, not a permanent lock.
pub const MAX_LEASE_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

/// Checks a lease duration against [`MIN_LEASE_DURATION`] and [`MAX_LEASE_DURATION`].
///
/// # Errors
/// [`LeaseError::InvalidInput`] naming the field `duration`.
///
/// ```
/// use lease_core::backend::validate_duration;
/// use std::time::Duration;
///
/// assert!(validate_duration(Duration::from_secs(30)).is_ok());
/// assert!(validate_duration(Duration::ZERO).unwrap_err().is_invalid_input());
/// assert!(validate_duration(Duration::from_secs(400 * 24 * 3600)).is_err());
/// ```
pub fn validate_duration(duration: Duration) -> Result<(), LeaseError> {
    if duration.is_zero() {
        return Err(LeaseError::invalid("duration", "must be greater than zero"));
    }
    if duration < MIN_LEASE_DURATION {
        return Err(LeaseError::invalid(
            "duration",
            format!(
                "{} is shorter than the minimum {}",
                crate::human::fmt_duration(duration),
                crate::human::fmt_duration(MIN_LEASE_DURATION)
            ),
        ));
    }
    if duration > MAX_LEASE_DURATION {
        return Err(LeaseError::invalid(
            "duration",
            format!(
                "{} is longer than the maximum {}",
                crate::human::fmt_duration(duration),
                crate::human::fmt_duration(MAX_LEASE_DURATION)
            ),
        ));
    }
    Ok(())
}

/// The part of a lease a holder does not trust: a tenth of it, at most five seconds.
///
/// It covers clock-rate drift between the holder and its contenders and the time between checking
/// the deadline and acting. Backends let users override it.
pub fn default_safety_margin(duration: Duration) -> Duration {
    (duration / 10).min(Duration::from_secs(5))
}

/// The instant until which a holder may trust a lease: when the request was *sent*, plus the
/// duration, minus the safety margin.
///
/// Measuring from the send (not the reply) means the holder never trusts the lease longer than a
/// contender, who measures from the store's write, could be made to wait.
///
/// Never panics: a deadline beyond what [`Instant`] can represent saturates to a century away.
pub fn holder_deadline(sent_at: Instant, duration: Duration, margin: Duration) -> Instant {
    instant_after(sent_at, duration.saturating_sub(margin))
}

/// About a century: the stand-in for "never" where an [`Instant`] must be computed.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `at + after`, saturating at a century from `at` instead of panicking on overflow.
pub(crate) fn instant_after(at: Instant, after: Duration) -> Instant {
    at.checked_add(after.min(FAR_FUTURE))
        .or_else(|| at.checked_add(Duration::from_secs(365 * 24 * 3600)))
        .unwrap_or(at)
}

/// One acquisition of a lease, as its holder sees it.
///
/// Returned by acquire and renew. `expires_at` is the store's view on the wall clock; `deadline`
/// is on the holder's monotonic clock and is what the holder trusts (see [`holder_deadline`](crate::backend::holder_deadline)).
#[derive(Clone, PartialEq, Eq)]
pub struct Lease {
    // Assembled only by `crate::backend::new_lease`.
    pub(crate) key: LeaseKey,
    pub(crate) token: LeaseToken,
    pub(crate) fencing: FencingToken,
    pub(crate) duration: Duration,
    pub(crate) expires_at: SystemTime,
    pub(crate) deadline: Instant,
}

impl Lease {
    /// The key.
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// The owner token of this acquisition.
    pub fn token(&self) -> &LeaseToken {
        &self.token
    }

    /// The fencing token of this acquisition; unchanged by renewals.
    pub fn fencing_token(&self) -> FencingToken {
        self.fencing
    }

    /// The duration asked for by the last acquire or renew.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// When the store considers the lease expired, by the store's wall clock.
    pub fn expires_at(&self) -> SystemTime {
        self.expires_at
    }

    /// The holder-side deadline on the monotonic clock.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.key)
            .field("token", &self.token)
            .field("fencing", &self.fencing)
            .field("duration", &self.duration)
            .field("expires_at", &crate::human::fmt_time(self.expires_at))
            .finish_non_exhaustive()
    }
}

/// What the store holds for a key: the current holder, if any, and the last fencing token issued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    key: LeaseKey,
    holder: Option<Holder>,
    fencing: FencingToken,
}

impl LeaseRecord {
    /// Assembles a record; backends call it through [`crate::backend::new_record`].
    pub(crate) fn new(key: LeaseKey, holder: Option<Holder>, fencing: FencingToken) -> Self {
        Self {
            key,
            holder,
            fencing,
        }
    }

    /// The key.
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// The current holder, or `None` when released. A holder whose lease expired is still
    /// reported: check [`Holder::expires_at`].
    pub fn holder(&self) -> Option<&Holder> {
        self.holder.as_ref()
    }

    /// The raw fencing counter, zero for none: this crate's own checks.
    #[cfg_attr(not(feature = "conformance"), allow(dead_code))]
    pub(crate) fn fencing(&self) -> FencingToken {
        self.fencing
    }

    /// The last fencing token issued for this key; `None` when the record carries no fencing
    /// counter (an item another library wrote, such as the Go `lease` package).
    pub fn fencing_token(&self) -> Option<FencingToken> {
        (self.fencing != FencingToken::NONE).then_some(self.fencing)
    }

    /// Whether a holder's lease is live at wall time `now` (as the store judges it).
    pub fn is_held_at(&self, now: SystemTime) -> bool {
        self.holder
            .as_ref()
            .and_then(Holder::expires_at)
            .is_some_and(|expires| now < expires)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_never_overflows() {
        let sent = Instant::now();
        let far = holder_deadline(sent, Duration::MAX, Duration::ZERO);
        assert!(far > sent + Duration::from_secs(50 * 365 * 24 * 3600));
    }

    #[test]
    fn deadline_is_before_expiry_by_the_margin() {
        let sent = Instant::now();
        let d = Duration::from_secs(30);
        let deadline = holder_deadline(sent, d, default_safety_margin(d));
        assert_eq!(deadline - sent, Duration::from_secs(27));
        let short = Duration::from_millis(10);
        assert!(holder_deadline(sent, short, default_safety_margin(short)) > sent);
    }
}

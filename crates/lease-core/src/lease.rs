//! Leases as a holder sees them, and records as the store keeps them.

use std::fmt;
use std::time::{Duration, Instant, SystemTime};

use crate::{Clock, FencingToken, Holder, LeaseError, LeaseKey, LeaseToken};

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
            format!("{duration:?} is shorter than the minimum {MIN_LEASE_DURATION:?}"),
        ));
    }
    if duration > MAX_LEASE_DURATION {
        return Err(LeaseError::invalid(
            "duration",
            format!("{duration:?} is longer than the maximum {MAX_LEASE_DURATION:?} (30 days)"),
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

    /// Whether the holder may still act under this lease by `clock`.
    pub fn is_trusted(&self, clock: &dyn Clock) -> bool {
        clock.monotonic() < self.deadline
    }

    /// Trusted time left by `clock`.
    pub fn remaining(&self, clock: &dyn Clock) -> Duration {
        self.deadline.saturating_duration_since(clock.monotonic())
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.key)
            .field("token", &self.token)
            .field("fencing", &self.fencing)
            .field("duration", &self.duration)
            .field("expires_at", &fmt_time(self.expires_at))
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

    /// The last fencing token issued for this key.
    pub fn fencing(&self) -> FencingToken {
        self.fencing
    }

    /// Whether a holder's lease is live at wall time `now` (as the store judges it).
    pub fn is_held_at(&self, now: SystemTime) -> bool {
        self.holder
            .as_ref()
            .and_then(Holder::expires_at)
            .is_some_and(|expires| now < expires)
    }
}

/// Formats a wall time as RFC 3339 UTC with milliseconds (`2030-01-01T00:00:00.123Z`), with no
/// date-time dependency. Private: the backends and the CLI format their own messages.
pub(crate) fn fmt_time(at: SystemTime) -> String {
    let Ok(since) = at.duration_since(SystemTime::UNIX_EPOCH) else {
        return "before 1970".to_owned();
    };
    let secs = since.as_secs();
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_leap_days_and_epoch() {
        let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(fmt_time(at(0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(fmt_time(at(951_782_400)), "2000-02-29T00:00:00.000Z");
        assert_eq!(fmt_time(at(1_709_251_199)), "2024-02-29T23:59:59.000Z");
    }

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

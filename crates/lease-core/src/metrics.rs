//! Metrics an operator can alert on, through the [`metrics`](https://docs.rs/metrics) facade.
//!
//! With the feature `metrics` (of this crate, or of any backend crate, which turns this one on),
//! every backend of this project and the [`LeaseGuard`](crate::LeaseGuard)'s keeper report
//! acquisitions, renewals, losses, takeovers, lost replies reconciled and throttling to whatever
//! recorder the application installed (a Prometheus exporter, StatsD, ...). Without the feature
//! there is no `metrics` dependency and the recording functions here are empty: they compile to
//! nothing. Without an installed recorder the facade drops every value.
//!
//! The names are the constants below, and `docs/metrics.md` lists each with its type, unit,
//! labels and when it moves (a test checks that the table and the constants agree). Labels are
//! bounded: the backend's [`name`](crate::LeaseBackend::name), an outcome, a reason, a request
//! name, and a fleet worker's id; never a key (a fleet may have 100,000 units) and never a token.
//!
//! ```
//! use lease_core::metrics;
//!
//! assert_eq!(metrics::ACQUISITIONS, "lease_acquisitions_total");
//! assert!(metrics::ALL.contains(&metrics::RENEWAL_TIME_LEFT));
//! ```
//!
//! A backend implemented outside this project reports through the functions here
//! ([`acquisition`], [`renewal`], [`takeover`], [`reconciled`], [`retried`], [`throttled`]), so
//! its users see the same series as those of the backends here.

use std::time::Instant;

use crate::{Clock, Lease, LeaseError, LossReason};

/// Counter: every answered [`try_acquire`](crate::LeaseBackend::try_acquire), by `backend` and
/// `outcome` (`acquired`, `held`, or the error's kind: [`error_kind`]).
pub const ACQUISITIONS: &str = "lease_acquisitions_total";
/// Counter: acquisitions that took a key whose previous holder's lease had expired without a
/// release, by `backend`.
pub const TAKEOVERS: &str = "lease_takeovers_total";
/// Counter: successful renewals, by `backend`.
pub const RENEWALS: &str = "lease_renewals_total";
/// Counter: failed renewals, by `backend` and `kind` ([`error_kind`]).
pub const RENEWAL_FAILURES: &str = "lease_renewal_failures_total";
/// Histogram, seconds: how long each renewal took to answer (failed ones too), by `backend`.
pub const RENEWAL_DURATION: &str = "lease_renewal_duration_seconds";
/// Histogram, seconds: the trusted time the lease had left before its holder-side deadline
/// when each renewal was sent, by `backend`. Values near zero mean renewals barely make it.
pub const RENEWAL_TIME_LEFT: &str = "lease_renewal_time_left_seconds";
/// Counter: leases a [`LeaseGuard`](crate::LeaseGuard) lost, by `backend` and `reason`
/// ([`loss_reason`]).
pub const LOSSES: &str = "lease_losses_total";
/// Counter: writes whose reply was lost and whose retry found the earlier attempt applied, by
/// `backend` and `operation` (`acquire`, `renew`, `release`, `put_fenced`).
pub const RECONCILED: &str = "lease_lost_replies_reconciled_total";
/// Counter: requests the store turned away for load (DynamoDB throttling), by `backend` and
/// `operation` (the request's name, such as `UpdateItem`).
pub const THROTTLED: &str = "lease_throttled_total";
/// Counter: requests sent again after a transient failure, by `backend` and `operation`.
pub const RETRIES: &str = "lease_retries_total";

/// Every metric name above, in the order `docs/metrics.md` lists them.
pub const ALL: [&str; 10] = [
    ACQUISITIONS,
    TAKEOVERS,
    RENEWALS,
    RENEWAL_FAILURES,
    RENEWAL_DURATION,
    RENEWAL_TIME_LEFT,
    LOSSES,
    RECONCILED,
    THROTTLED,
    RETRIES,
];

/// Label: the backend's [`name`](crate::LeaseBackend::name) (`memory`, `file`, `dynamodb`).
pub const LABEL_BACKEND: &str = "backend";
/// Label: what an acquisition came to.
pub const LABEL_OUTCOME: &str = "outcome";
/// Label: why a lease or a unit was lost.
pub const LABEL_REASON: &str = "reason";
/// Label: the kind of a renewal's error.
pub const LABEL_KIND: &str = "kind";
/// Label: the operation or request that was reconciled, throttled or retried.
pub const LABEL_OPERATION: &str = "operation";

/// The bounded label value naming an error's kind: `held`, `not_owned`, `invalid_input`,
/// `backend_transient`, `backend`, `timeout`, `lost`, `corrupt`, `foreign`, `runtime`,
/// `unsupported`.
///
/// ```
/// use lease_core::{LeaseError, metrics};
///
/// assert_eq!(metrics::error_kind(&LeaseError::invalid("duration", "zero")), "invalid_input");
/// ```
pub fn error_kind(error: &LeaseError) -> &'static str {
    match error {
        LeaseError::Held { .. } => "held",
        LeaseError::NotOwned { .. } => "not_owned",
        LeaseError::InvalidInput { .. } => "invalid_input",
        LeaseError::Backend {
            transient: true, ..
        } => "backend_transient",
        LeaseError::Backend { .. } => "backend",
        LeaseError::Timeout { .. } => "timeout",
        LeaseError::Lost { .. } => "lost",
        LeaseError::Corrupt { .. } => "corrupt",
        LeaseError::Foreign { .. } => "foreign",
        LeaseError::Runtime { .. } => "runtime",
        LeaseError::Unsupported { .. } => "unsupported",
    }
}

/// The bounded label value naming a [`LossReason`]: `expired`, `taken_over`, `missing`,
/// `fenced` (the store refused a renewal, [`NotOwnedReason`](crate::NotOwnedReason)),
/// `backend_failing`, `deadline_passed`, `handed_over`, `shutdown`, `retired`. The last error
/// that [`LossReason::BackendFailing`] carries is never a label.
///
/// ```
/// use lease_core::{LossReason, NotOwnedReason, metrics};
///
/// assert_eq!(metrics::loss_reason(&LossReason::NotOwned(NotOwnedReason::TakenOver)), "taken_over");
/// ```
pub fn loss_reason(reason: &LossReason) -> &'static str {
    use crate::NotOwnedReason;
    match reason {
        LossReason::NotOwned(NotOwnedReason::Expired) => "expired",
        LossReason::NotOwned(NotOwnedReason::TakenOver) => "taken_over",
        LossReason::NotOwned(NotOwnedReason::Missing) => "missing",
        LossReason::NotOwned(NotOwnedReason::Fenced) => "fenced",
        LossReason::BackendFailing { .. } => "backend_failing",
        LossReason::DeadlinePassed => "deadline_passed",
    }
}

/// Records the answer of one [`try_acquire`](crate::LeaseBackend::try_acquire) of `backend`
/// ([`ACQUISITIONS`]). Backends call it once per call they answer.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
#[inline]
pub fn acquisition(backend: &'static str, result: &Result<Lease, LeaseError>) {
    #[cfg(feature = "metrics")]
    {
        let outcome = match result {
            Ok(_) => "acquired",
            Err(error) => error_kind(error),
        };
        ::metrics::counter!(ACQUISITIONS, LABEL_BACKEND => backend, LABEL_OUTCOME => outcome)
            .increment(1);
    }
}

/// Records that an acquisition of `backend` took a key from a holder whose lease had expired
/// unreleased ([`TAKEOVERS`]).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
#[inline]
pub fn takeover(backend: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(TAKEOVERS, LABEL_BACKEND => backend).increment(1);
}

/// `clock`'s monotonic time when the feature `metrics` is on, to pass to [`renewal`]; `None`,
/// and no clock read, when it is off.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
#[inline]
pub fn started(clock: &dyn Clock) -> Option<Instant> {
    #[cfg(feature = "metrics")]
    return Some(clock.monotonic());
    #[cfg(not(feature = "metrics"))]
    None
}

/// Records the answer of one [`renew`](crate::LeaseBackend::renew) of `lease` by `backend`,
/// sent at `sent` ([`started`]) by `clock`'s monotonic time: [`RENEWALS`] or
/// [`RENEWAL_FAILURES`], [`RENEWAL_DURATION`] (until now by `clock`) and [`RENEWAL_TIME_LEFT`]
/// (from `sent` to the lease's deadline). Backends call it once per call they answer.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
#[inline]
pub fn renewal(
    backend: &'static str,
    clock: &dyn Clock,
    lease: &Lease,
    sent: Option<Instant>,
    result: &Result<Lease, LeaseError>,
) {
    #[cfg(feature = "metrics")]
    if let Some(sent) = sent {
        let answered = clock.monotonic();
        ::metrics::histogram!(RENEWAL_DURATION, LABEL_BACKEND => backend)
            .record(answered.saturating_duration_since(sent));
        ::metrics::histogram!(RENEWAL_TIME_LEFT, LABEL_BACKEND => backend)
            .record(lease.deadline().saturating_duration_since(sent));
        match result {
            Ok(_) => ::metrics::counter!(RENEWALS, LABEL_BACKEND => backend).increment(1),
            Err(error) => ::metrics::counter!(
                RENEWAL_FAILURES,
                LABEL_BACKEND => backend,
                LABEL_KIND => error_kind(error)
            )
            .increment(1),
        }
    }
}

/// Records that a holder lost a lease of `backend` ([`LOSSES`]); the keeper calls it once per
/// loss.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
#[inline]
pub fn loss(backend: &'static str, reason: &LossReason) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(LOSSES, LABEL_BACKEND => backend, LABEL_REASON => loss_reason(reason))
        .increment(1);
}

/// Records that a retried `operation` of `backend` found its earlier attempt applied though its
/// reply was lost ([`RECONCILED`]).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
#[inline]
pub fn reconciled(backend: &'static str, operation: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(RECONCILED, LABEL_BACKEND => backend, LABEL_OPERATION => operation)
        .increment(1);
}

/// Records that `backend`'s store turned a request away for load ([`THROTTLED`]).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
#[inline]
pub fn throttled(backend: &'static str, operation: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(THROTTLED, LABEL_BACKEND => backend, LABEL_OPERATION => operation)
        .increment(1);
}

/// Records that `backend` sends a request again after a transient failure ([`RETRIES`]).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
#[inline]
pub fn retried(backend: &'static str, operation: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(RETRIES, LABEL_BACKEND => backend, LABEL_OPERATION => operation)
        .increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_prometheus_shaped() {
        let mut seen = std::collections::BTreeSet::new();
        for name in ALL {
            assert!(seen.insert(name), "{name} twice");
            assert!(name.starts_with("lease_"), "{name}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit()),
                "{name}"
            );
        }
    }
}

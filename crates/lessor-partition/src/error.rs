//! The one error type of this crate.

use lease_core::{FencingToken, LeaseError};

/// Everything that can go wrong in the lessor and the fleet, by meaning.
///
/// ```
/// use lessor_partition::Error;
///
/// let err = lessor_partition::get("no-such-lessor").unwrap_err();
/// assert!(matches!(err, Error::UnknownLessor { .. }));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lease store failed or refused.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The caller passed something that cannot work. Never retried.
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// What was invalid.
        field: &'static str,
        /// Why, in words.
        reason: String,
    },
    /// No lessor is registered under this id.
    #[error("no lessor is registered as {id:?}")]
    UnknownLessor {
        /// The id asked for.
        id: String,
    },
    /// A lessor is already registered under this id.
    #[error("a lessor is already registered as {id:?}")]
    DuplicateLessor {
        /// The id.
        id: String,
    },
    /// The lease's deadline passed before the callback finished; the callback was dropped.
    #[error("the lease deadline passed before the callback finished")]
    DeadlineExceeded,
    /// This worker does not (any longer) own the unit, or cannot trust that it does.
    #[error("this worker does not own unit {unit:?}")]
    NotOwner {
        /// The unit.
        unit: String,
    },
    /// A checkpoint write carried a fencing token older than one the store has seen: a newer
    /// owner exists.
    #[error("checkpoint of unit {unit:?} refused: fencing token {offered} is older than {seen}")]
    Fenced {
        /// The unit.
        unit: String,
        /// The token offered with the write.
        offered: FencingToken,
        /// The highest token the store has seen.
        seen: FencingToken,
    },
}

impl Error {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidInput {
            field,
            reason: reason.into(),
        }
    }

    /// Whether this error says the caller lost ownership ([`Error::NotOwner`] or
    /// [`Error::Fenced`]).
    pub fn is_not_owner(&self) -> bool {
        matches!(self, Self::NotOwner { .. } | Self::Fenced { .. })
    }
}

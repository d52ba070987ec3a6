//! For implementors of a backend, and nobody else: assembling the values only a store may issue,
//! and the checks every backend applies the same way.
//!
//! A caller gets a [`Lease`] and a [`FencingToken`] only from a backend's acquire and renew: no
//! public item outside this module makes one. That is what lets a resource trust the fencing
//! token a holder shows it, and what keeps a lease's deadline the one its store computed. Code
//! that is not a backend (or a test of one) has no reason to import this module.
//!
//! ```
//! use lease_core::backend;
//! use lease_core::{Clock, LeaseKey, LeaseToken, SystemClock};
//! use std::time::{Duration, SystemTime};
//!
//! // What a backend does once its store accepted the write that made `token` the holder.
//! // `sent_at` is read from the backend's clock before the write was sent (never std's
//! // `Instant::now`, which SystemClock runs ahead of after a suspend).
//! let clock = SystemClock;
//! let sent_at = clock.monotonic();
//! let duration = Duration::from_secs(30);
//! let lease = backend::new_lease(
//!     LeaseKey::new("nightly")?,
//!     LeaseToken::new("t-1")?,
//!     backend::fencing_token(42),
//!     duration,
//!     clock.now() + duration,
//!     backend::holder_deadline(sent_at, duration, backend::default_safety_margin(duration)),
//! );
//! assert_eq!(lease.fencing_token().get(), 42);
//! # Ok::<(), lease_core::LeaseError>(())
//! ```
//!
//! Outside this module, neither can be made:
//!
//! ```compile_fail
//! let forged = lease_core::FencingToken::new(u64::MAX);
//! ```
//!
//! ```compile_fail
//! use lease_core::{Lease, LeaseKey, LeaseToken, FencingToken};
//! use std::time::{Duration, Instant, SystemTime};
//! let forged = Lease::new(
//!     LeaseKey::new("k").unwrap(),
//!     LeaseToken::new("t").unwrap(),
//!     lease_core::backend::fencing_token(1),
//!     Duration::from_secs(1),
//!     SystemTime::now(),
//!     Instant::now(),
//! );
//! ```

use std::time::{Duration, Instant, SystemTime};

pub use crate::fenced::validate_fenced_value;
pub use crate::human::{fmt_duration, fmt_time};
pub use crate::lease::{default_safety_margin, holder_deadline, validate_duration};
pub use crate::options::validate_acquire_options;
pub use crate::watch::Changes;

use crate::{FencingToken, Holder, Lease, LeaseKey, LeaseRecord, LeaseToken, NotOwnedReason};

/// Assembles the lease a store granted: `expires_at` on the store's wall clock, `deadline` on the
/// holder's monotonic clock (see [`holder_deadline`]).
pub fn new_lease(
    key: LeaseKey,
    token: LeaseToken,
    fencing: FencingToken,
    duration: Duration,
    expires_at: SystemTime,
    deadline: Instant,
) -> Lease {
    Lease {
        key,
        token,
        fencing,
        duration,
        expires_at,
        deadline,
    }
}

/// The fencing token a store issued or recorded, from its raw value.
pub const fn fencing_token(value: u64) -> FencingToken {
    FencingToken::new(value)
}

/// A token exactly as a store holds it, unchecked: the holder's token in a record that another
/// writer made (the Go `lease` package takes any string its token generator returns, so it may be
/// empty, long, or hold a newline). Backends use it so that such a holder can still be shown
/// (redacted) and its lease broken; tokens this project issues always pass [`LeaseToken::new`].
///
/// ```
/// use lease_core::{LeaseToken, backend};
/// let odd = backend::stored_token("line\nbreak");
/// assert!(LeaseToken::new("line\nbreak").is_err());
/// assert_eq!(odd.as_str(), "line\nbreak");
/// assert_eq!(odd.to_string(), "line\\nbre…");
/// ```
pub fn stored_token(value: impl Into<String>) -> LeaseToken {
    LeaseToken::from_store(value)
}

/// Assembles the record a store holds for `key`.
pub fn new_record(key: LeaseKey, holder: Option<Holder>, fencing: FencingToken) -> LeaseRecord {
    LeaseRecord::new(key, holder, fencing)
}

/// The decision of every fenced write ([`FencedValues`](crate::FencedValues)), whatever the
/// store: a write carrying `offered` passes iff the name's fence (the highest token that touched
/// it, none for a name never touched) is not above it.
///
/// ```
/// use lease_core::{NotOwnedReason, backend::{fenced_write, fencing_token}};
///
/// assert!(fenced_write(fencing_token(3), fencing_token(3)).is_ok());
/// assert_eq!(fenced_write(fencing_token(4), fencing_token(3)), Err(NotOwnedReason::Fenced));
/// ```
///
/// # Errors
/// [`NotOwnedReason::Fenced`] when a newer token has touched the name.
pub fn fenced_write(fence: FencingToken, offered: FencingToken) -> Result<(), NotOwnedReason> {
    if fence > offered {
        Err(NotOwnedReason::Fenced)
    } else {
        Ok(())
    }
}

//! The one error type of the lease contract.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::{FencingToken, LeaseKey, LeaseToken};

// Keys and tokens are validated into this module's `LeaseError`, which is made of them: the
// module that assembles the error owns them, so the dependency points one way.
pub(crate) mod key;
pub(crate) mod token;

/// What is known of the current holder of a lease.
///
/// Backends fill in what they know: the DynamoDB backend learns the holder's expiry and fencing
/// token from the failed conditional write itself; the file backend adds the holder's pid and host
/// as the `owner` description. Every field is optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holder {
    token: Option<LeaseToken>,
    owner: Option<String>,
    acquired_at: Option<SystemTime>,
    expires_at: Option<SystemTime>,
    fencing: Option<FencingToken>,
    pid: Option<u32>,
    host: Option<String>,
    renewed_at: Option<SystemTime>,
    value: Option<String>,
}

impl Holder {
    /// Nothing known yet; add what is known with the `with_*` methods.
    pub fn new() -> Self {
        Self::default()
    }

    /// The holder's owner token (kept for operators' forced release; printed redacted).
    pub fn with_token(mut self, token: LeaseToken) -> Self {
        self.token = Some(token);
        self
    }

    /// A human description of the holder, such as `pid 4242 on build-7` or a worker id.
    pub fn with_owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// When the holder acquired the lease, by the store's wall clock.
    pub fn with_acquired_at(mut self, at: SystemTime) -> Self {
        self.acquired_at = Some(at);
        self
    }

    /// When the lease expires, by the store's wall clock.
    pub fn with_expires_at(mut self, at: SystemTime) -> Self {
        self.expires_at = Some(at);
        self
    }

    /// The holder's fencing token.
    pub fn with_fencing(mut self, fencing: FencingToken) -> Self {
        self.fencing = Some(fencing);
        self
    }

    /// The holder's process: its pid on `host` (the file backend knows it).
    pub fn with_process(mut self, pid: u32, host: impl Into<String>) -> Self {
        self.pid = Some(pid);
        self.host = Some(host.into());
        self
    }

    /// When the holder last renewed (heartbeat), by its wall clock.
    pub fn with_renewed_at(mut self, at: SystemTime) -> Self {
        self.renewed_at = Some(at);
        self
    }

    /// The value the holder published with its acquisition
    /// ([`AcquireOptions::with_value`](crate::AcquireOptions::with_value)).
    pub fn with_value(mut self, value: impl Into<String>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// The value the holder published with its acquisition, if any: what followers route to.
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// The holder's owner token.
    pub fn token(&self) -> Option<&LeaseToken> {
        self.token.as_ref()
    }

    /// The human description of the holder.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// When the holder acquired the lease.
    pub fn acquired_at(&self) -> Option<SystemTime> {
        self.acquired_at
    }

    /// When the lease expires, by the store's wall clock.
    pub fn expires_at(&self) -> Option<SystemTime> {
        self.expires_at
    }

    /// The holder's fencing token.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.fencing
    }

    /// The holder's pid, where the backend knows it.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The holder's host name, where the backend knows it.
    pub fn host(&self) -> Option<&str> {
        self.host.as_deref()
    }

    /// When the holder last renewed, where the backend knows it.
    pub fn renewed_at(&self) -> Option<SystemTime> {
        self.renewed_at
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(owner) = &self.owner {
            parts.push(shorten(owner, MAX_SHOWN_OWNER_CHARS));
        }
        match (self.pid, &self.host) {
            (Some(pid), Some(host)) => parts.push(format!("pid {pid} on {}", shorten(host, 64))),
            (Some(pid), None) => parts.push(format!("pid {pid}")),
            _ => {}
        }
        if let Some(value) = &self.value {
            parts.push(format!(
                "value \"{}\"",
                shorten(value, MAX_SHOWN_OWNER_CHARS)
            ));
        }
        if let Some(token) = &self.token {
            parts.push(format!("token {token}"));
        }
        if let Some(fencing) = self.fencing {
            parts.push(format!("fencing token {fencing}"));
        }
        if let Some(at) = self.expires_at {
            parts.push(format!("expires at {}", crate::human::fmt_time(at)));
        }
        if parts.is_empty() {
            f.write_str("unknown holder")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// How much of an owner description errors and `Display` show; the rest is summarised.
const MAX_SHOWN_OWNER_CHARS: usize = 120;

/// `text` up to `max` characters, control characters escaped, with what was left out counted.
fn shorten(text: &str, max: usize) -> String {
    let (mut shown, rest) = token::printable_prefix(text, max);
    if !rest.is_empty() {
        shown.push_str(&format!("… ({} more bytes)", rest.len()));
    }
    shown
}

/// Why an operation found that the caller does not own the lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotOwnedReason {
    /// The lease expired; nobody has taken it yet, but it can no longer be renewed.
    Expired,
    /// Another owner acquired the lease.
    TakenOver,
    /// There is no current holder: the lease was released or deleted (a DynamoDB table or a lock
    /// directory gone with it), or never held.
    Missing,
    /// A newer fencing token has touched the value ([`FencedValues`](crate::FencedValues)).
    Fenced,
}

impl fmt::Display for NotOwnedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Expired => "the lease expired",
            Self::TakenOver => "another owner took the lease",
            Self::Missing => {
                "no holder is on record: it was released or deleted (perhaps with its table or \
                 lock directory), or never acquired"
            }
            Self::Fenced => "a newer fencing token has written here",
        })
    }
}

/// Why a holder can no longer trust a lease it held: the one loss type of every guard.
///
/// [`LeaseGuard`](crate::LeaseGuard), the file backend's `FileLockGuard` and the fleet's unit
/// tasks all report a loss with it, inside [`LeaseError::Lost`].
///
/// ```
/// use lease_core::{LossReason, NotOwnedReason};
///
/// let taken = LossReason::NotOwned(NotOwnedReason::TakenOver);
/// assert_eq!(taken.to_string(), "another owner took the lease");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum LossReason {
    /// The store says this holder no longer owns the lease: another owner took it, or it expired
    /// or vanished before a renewal landed.
    NotOwned(NotOwnedReason),
    /// Renewals kept failing until the holder-side deadline passed. The store may still name this
    /// holder, but nothing proves the lease is live. Carries the last renewal's error, which is
    /// also this reason's [`source`](std::error::Error::source).
    BackendFailing(Arc<LeaseError>),
    /// The holder-side deadline passed before a renewal completed, with no error seen: the
    /// process was paused or a renewal hung.
    DeadlinePassed,
}

impl PartialEq for LossReason {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::NotOwned(a), Self::NotOwned(b)) => a == b,
            (Self::BackendFailing(a), Self::BackendFailing(b)) => {
                Arc::ptr_eq(a, b) || a.to_string() == b.to_string()
            }
            (Self::DeadlinePassed, Self::DeadlinePassed) => true,
            _ => false,
        }
    }
}

impl Eq for LossReason {}

impl StdError for LossReason {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Self::BackendFailing(last) => Some(last.as_ref()),
            _ => None,
        }
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotOwned(reason) => write!(f, "{reason}"),
            Self::BackendFailing(_) => f.write_str("renewals failed until its deadline passed"),
            Self::DeadlinePassed => f.write_str("its deadline passed before a renewal"),
        }
    }
}

/// Everything that can go wrong with a lease, by meaning.
///
/// Backends map their private errors into these variants, so callers branch on meaning whatever
/// the store: [`is_held`](Self::is_held) and [`is_not_owned`](Self::is_not_owned) are the two
/// common branches (the Go package's `IsLeaseHeld` and `IsLeaseNotOwned`).
///
/// ```
/// use lease_core::{LeaseGuard, LeaseKey, MemoryBackend, WaitOptions};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let store = Arc::new(MemoryBackend::new());
/// let key = LeaseKey::new("nightly-report")?;
/// let d = Duration::from_secs(30);
/// let _mine = LeaseGuard::builder(store.clone(), &key, d).acquire_blocking()?;
/// let err = LeaseGuard::builder(store, &key, d)
///     .with_wait(WaitOptions::new(Duration::ZERO))
///     .acquire_blocking()
///     .unwrap_err();
/// assert!(err.is_held());
/// assert!(err.holder().and_then(|h| h.expires_at()).is_some());
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// Another owner holds the lease and it has not expired.
    #[error("lease {key} is held by another owner ({})", fmt_holder(holder.as_deref()))]
    Held {
        /// The contended key.
        key: LeaseKey,
        /// What is known of the holder.
        holder: Option<Box<Holder>>,
    },
    /// The caller's token does not own the lease (any more).
    #[error("lease {key} is not owned by this token: {reason}")]
    NotOwned {
        /// The key.
        key: LeaseKey,
        /// Why.
        reason: NotOwnedReason,
    },
    /// The caller passed something no backend could accept. Never retried.
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// What was invalid (`"partition key"`, `"duration"`, ...).
        field: &'static str,
        /// Why, in words.
        reason: String,
    },
    /// The backend failed to answer. Transient failures (throttling, timeouts, 5xx, interrupted
    /// I/O) may be retried; the outcome of the failed operation is unknown.
    #[error("{backend} backend failed{}", if *transient { " (transient)" } else { "" })]
    Backend {
        /// The backend's name (`"dynamodb"`, `"file"`, `"memory"`).
        backend: &'static str,
        /// Whether retrying may help.
        transient: bool,
        /// The backend's own error.
        #[source]
        source: Box<dyn StdError + Send + Sync>,
    },
    /// Waiting for the lease ran out of time.
    #[error("timed out after {} waiting for lease {key}{}", crate::human::fmt_duration(*waited), fmt_timeout_holder(holder.as_deref(), last_error.as_deref()))]
    Timeout {
        /// The key.
        key: LeaseKey,
        /// How long the caller waited.
        waited: Duration,
        /// The last holder seen.
        holder: Option<Box<Holder>>,
        /// The last attempt's error: [`Held`](Self::Held) when the lease stayed busy, a transient
        /// [`Backend`](Self::Backend) failure when the store did not answer.
        #[source]
        last_error: Option<Box<LeaseError>>,
    },
    /// The caller held the lease and lost it before the operation could complete.
    #[error("lease {key} lost")]
    Lost {
        /// The key.
        key: LeaseKey,
        /// How it was lost (its source, where it has one, is this error's source).
        #[source]
        reason: LossReason,
    },
    /// The store's record (a lock file, a DynamoDB item) is not what the protocol needs: a
    /// symbolic link, a directory, an oversized or malformed record. Nothing was followed or
    /// changed; an operator must look.
    #[error("refusing the record of {key}: {reason}")]
    Corrupt {
        /// The key.
        key: LeaseKey,
        /// What is wrong with it.
        reason: String,
    },
    /// The store's record belongs to another lock protocol (an older format, another tool). It
    /// is never taken over or deleted: stop the processes that use it, then remove it by hand.
    #[error("refusing the record of {key}: {reason}")]
    Foreign {
        /// The key.
        key: LeaseKey,
        /// What was found and what to do.
        reason: String,
    },
    /// What keeps a lease alive could not run: no async runtime where one is needed, or no
    /// thread could be started. Nothing was acquired or released by the failed call.
    #[error("cannot keep the lease: {reason}")]
    Runtime {
        /// What is missing.
        reason: String,
    },
    /// The backend does not offer this operation: an optional method of the contract (such as
    /// [`LeaseBackend::delete`](crate::LeaseBackend::delete)) that it leaves at its default.
    /// Nothing was sent or written; retrying cannot help.
    #[error("the {backend} backend does not support {operation}")]
    Unsupported {
        /// The backend's name (`"file"`, ...).
        backend: &'static str,
        /// The operation refused (`"delete"`, ...).
        operation: &'static str,
    },
}

fn fmt_holder(holder: Option<&Holder>) -> String {
    holder.map_or_else(|| "holder unknown".to_owned(), ToString::to_string)
}

/// The holder a timeout saw, unless its last error (its `source`) already names it.
fn fmt_timeout_holder(holder: Option<&Holder>, last: Option<&LeaseError>) -> String {
    match (holder, last) {
        (_, Some(error)) if error.is_held() => String::new(),
        (Some(holder), _) => format!(" (held by {holder})"),
        (None, _) => String::new(),
    }
}

impl LeaseError {
    /// An [`InvalidInput`](Self::InvalidInput) error.
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidInput {
            field,
            reason: reason.into(),
        }
    }

    /// A [`Held`](Self::Held) error.
    pub fn held(key: LeaseKey, holder: Option<Holder>) -> Self {
        Self::Held {
            key,
            holder: holder.map(Box::new),
        }
    }

    /// A [`NotOwned`](Self::NotOwned) error.
    pub fn not_owned(key: LeaseKey, reason: NotOwnedReason) -> Self {
        Self::NotOwned { key, reason }
    }

    /// A [`Backend`](Self::Backend) error.
    pub fn backend(
        backend: &'static str,
        transient: bool,
        source: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> Self {
        Self::Backend {
            backend,
            transient,
            source: source.into(),
        }
    }

    /// A [`Lost`](Self::Lost) error.
    pub fn lost(key: LeaseKey, reason: LossReason) -> Self {
        Self::Lost { key, reason }
    }

    /// A [`Corrupt`](Self::Corrupt) error.
    pub fn corrupt(key: LeaseKey, reason: impl Into<String>) -> Self {
        Self::Corrupt {
            key,
            reason: reason.into(),
        }
    }

    /// A [`Foreign`](Self::Foreign) error.
    pub fn foreign(key: LeaseKey, reason: impl Into<String>) -> Self {
        Self::Foreign {
            key,
            reason: reason.into(),
        }
    }

    /// A [`Runtime`](Self::Runtime) error.
    pub fn runtime(reason: impl Into<String>) -> Self {
        Self::Runtime {
            reason: reason.into(),
        }
    }

    /// An [`Unsupported`](Self::Unsupported) error: `backend` does not offer `operation`.
    pub fn unsupported(backend: &'static str, operation: &'static str) -> Self {
        Self::Unsupported { backend, operation }
    }

    /// A [`Timeout`](Self::Timeout) after waiting `waited` for `key`, whose last attempt failed
    /// with `last_error` (the holder is taken from it).
    pub fn timeout(key: LeaseKey, waited: Duration, last_error: LeaseError) -> Self {
        Self::Timeout {
            key,
            waited,
            holder: last_error.holder().cloned().map(Box::new),
            last_error: Some(Box::new(last_error)),
        }
    }

    /// Another owner holds the lease (Go: `IsLeaseHeld`).
    pub fn is_held(&self) -> bool {
        matches!(self, Self::Held { .. })
    }

    /// The caller does not own the lease (Go: `IsLeaseNotOwned`): [`NotOwned`](Self::NotOwned),
    /// or [`Lost`](Self::Lost) after holding it.
    pub fn is_not_owned(&self) -> bool {
        matches!(self, Self::NotOwned { .. } | Self::Lost { .. })
    }

    /// The store's record is corrupt or hostile ([`Corrupt`](Self::Corrupt)).
    pub fn is_corrupt(&self) -> bool {
        matches!(self, Self::Corrupt { .. })
    }

    /// Another protocol's record sits in the lease's place ([`Foreign`](Self::Foreign)).
    pub fn is_foreign(&self) -> bool {
        matches!(self, Self::Foreign { .. })
    }

    /// The input was invalid; retrying cannot help.
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, Self::InvalidInput { .. })
    }

    /// The backend does not offer the operation; retrying cannot help. A caller that can do
    /// without it (leaving a record in place instead of deleting it, say) branches here.
    ///
    /// ```
    /// use lease_core::LeaseError;
    ///
    /// fn delete_or_keep(err: LeaseError) -> Result<(), LeaseError> {
    ///     if err.is_unsupported() {
    ///         return Ok(()); // this store keeps its records: nothing to clean up
    ///     }
    ///     Err(err)
    /// }
    /// assert!(delete_or_keep(LeaseError::unsupported("file", "delete")).is_ok());
    /// ```
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Self::Unsupported { .. })
    }

    /// Waiting timed out.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout { .. })
    }

    /// A backend failure that may succeed if retried.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Backend {
                transient: true,
                ..
            }
        )
    }

    /// The holder named by a [`Held`](Self::Held) or [`Timeout`](Self::Timeout) error.
    pub fn holder(&self) -> Option<&Holder> {
        match self {
            Self::Held { holder, .. } | Self::Timeout { holder, .. } => holder.as_deref(),
            _ => None,
        }
    }

    /// Why a [`NotOwned`](Self::NotOwned) error happened, or the store's reason behind a
    /// [`Lost`](Self::Lost) one.
    pub fn not_owned_reason(&self) -> Option<NotOwnedReason> {
        match self {
            Self::NotOwned { reason, .. }
            | Self::Lost {
                reason: LossReason::NotOwned(reason),
                ..
            } => Some(*reason),
            _ => None,
        }
    }

    /// The key the error is about, where it names one.
    pub fn key(&self) -> Option<&LeaseKey> {
        match self {
            Self::Held { key, .. }
            | Self::NotOwned { key, .. }
            | Self::Timeout { key, .. }
            | Self::Lost { key, .. }
            | Self::Corrupt { key, .. }
            | Self::Foreign { key, .. } => Some(key),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_never_show_a_whole_token() {
        let token = LeaseToken::new("0123456789abcdef0123456789abcdef").unwrap();
        let err = LeaseError::held(
            LeaseKey::new("k").unwrap(),
            Some(
                Holder::new()
                    .with_token(token.clone())
                    .with_owner("pid 7 on h"),
            ),
        );
        let text = format!("{err} {err:?}");
        assert!(!text.contains(token.as_str()), "{text}");
        assert!(text.contains("pid 7 on h"), "{text}");
    }

    #[test]
    fn a_huge_owner_is_shown_short() {
        let owner = "x".repeat(300_000);
        let err = LeaseError::held(
            LeaseKey::new("k").unwrap(),
            Some(Holder::new().with_owner(owner.clone())),
        );
        let text = err.to_string();
        assert!(text.len() < 400, "{} bytes", text.len());
        assert!(text.contains("299880 more bytes"), "{text}");
        let held = err.holder().and_then(Holder::owner).unwrap();
        assert_eq!(held.len(), owner.len(), "the holder keeps the whole owner");
        let odd = Holder::new().with_owner("a\nb").to_string();
        assert_eq!(odd, "a\\nb");
    }

    #[test]
    fn a_held_error_shows_the_published_value_escaped() {
        let holder = Holder::new()
            .with_owner("pid 7 on h")
            .with_value("10.0.0.7:5432\nx");
        let err = LeaseError::held(LeaseKey::new("k").unwrap(), Some(holder));
        assert_eq!(
            err.to_string(),
            "lease k is held by another owner (pid 7 on h, value \"10.0.0.7:5432\\nx\")"
        );
    }

    #[test]
    fn a_timeout_keeps_its_last_error() {
        let key = LeaseKey::new("k").unwrap();
        let cause = LeaseError::backend("dynamodb", true, "connection refused");
        let err = LeaseError::timeout(key.clone(), Duration::from_secs(3), cause);
        assert!(err.is_timeout());
        assert_eq!(err.to_string(), "timed out after 3s waiting for lease k");
        assert!(
            matches!(&err, LeaseError::Timeout { last_error: Some(last), .. } if last.is_transient())
        );
        // The last error is the source, said there and only there.
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(
            source.as_deref(),
            Some("dynamodb backend failed (transient)")
        );
        // A busy lease is said by the last error (the source), which names the holder.
        let held = LeaseError::held(key.clone(), Some(Holder::new().with_owner("alice")));
        let err = LeaseError::timeout(key, Duration::from_secs(3), held);
        assert!(!err.to_string().contains("alice"), "{err}");
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert!(source.is_some_and(|s| s.ends_with("(alice)")), "{err}");
        assert_eq!(err.holder().and_then(Holder::owner), Some("alice"));
    }

    #[test]
    fn helpers_classify() {
        let key = LeaseKey::new("k").unwrap();
        assert!(LeaseError::not_owned(key.clone(), NotOwnedReason::Expired).is_not_owned());
        assert!(LeaseError::held(key.clone(), None).is_held());
        assert!(LeaseError::backend("memory", true, "boom").is_transient());
        assert!(!LeaseError::backend("memory", false, "boom").is_transient());
        assert!(LeaseError::invalid("duration", "zero").is_invalid_input());
        let lost = LeaseError::lost(key.clone(), LossReason::NotOwned(NotOwnedReason::TakenOver));
        assert!(matches!(lost, LeaseError::Lost { .. }) && lost.is_not_owned());
        assert_eq!(lost.not_owned_reason(), Some(NotOwnedReason::TakenOver));
        assert_eq!(lost.key(), Some(&key));
        assert!(LeaseError::corrupt(key.clone(), "a symlink").is_corrupt());
        assert!(LeaseError::foreign(key.clone(), "a Go lock").is_foreign());
        assert!(!LeaseError::runtime("no tokio runtime").is_transient());
        let unsupported = LeaseError::unsupported("file", "delete");
        assert!(unsupported.is_unsupported());
        assert!(!unsupported.is_transient() && !unsupported.is_not_owned());
        assert_eq!(
            unsupported.to_string(),
            "the file backend does not support delete"
        );
    }
}

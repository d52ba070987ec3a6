//! Owner tokens, fencing tokens and token sources.

use std::fmt;
use std::sync::Arc;

use crate::LeaseError;

/// Longest owner token accepted, in bytes.
pub const MAX_TOKEN_BYTES: usize = 256;

/// The secret that proves ownership of one acquisition of a lease.
///
/// Every acquisition gets a fresh token from a [`TokenSource`]; renew and release succeed only when
/// the store still holds the same token. `Debug` and `Display` print only the first eight
/// characters (`0f3a9c1e…`), so tokens never reach logs in full; [`LeaseToken::as_str`] gives the
/// whole value to code that must store it.
///
/// ```
/// use lease_core::LeaseToken;
///
/// let token = LeaseToken::new("0f3a9c1e5d7b4a2f9e8d7c6b5a493827")?;
/// assert_eq!(token.to_string(), "0f3a9c1e…");
/// assert_eq!(token.as_str().len(), 32);
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LeaseToken(Arc<str>);

impl LeaseToken {
    /// Wraps a token string.
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] if it is empty, longer than [`MAX_TOKEN_BYTES`] or holds
    /// control characters.
    pub fn new(value: impl Into<String>) -> Result<Self, LeaseError> {
        let value = value.into();
        if value.is_empty() {
            return Err(LeaseError::invalid("lease token", "must not be empty"));
        }
        if value.len() > MAX_TOKEN_BYTES {
            return Err(LeaseError::invalid(
                "lease token",
                format!("is longer than {MAX_TOKEN_BYTES} bytes"),
            ));
        }
        if value.chars().any(char::is_control) {
            return Err(LeaseError::invalid(
                "lease token",
                "must not contain control characters",
            ));
        }
        Ok(Self(value.into()))
    }

    /// A token exactly as a store holds it, unchecked ([`crate::backend::stored_token`]).
    pub(crate) fn from_store(value: impl Into<String>) -> Self {
        Self(value.into().into())
    }

    /// The whole token. Store it; do not log it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first eight characters followed by `…`, control characters escaped: what logs and
    /// errors show. An empty token shows as `""`.
    pub fn redacted(&self) -> String {
        if self.0.is_empty() {
            return "\"\"".to_owned();
        }
        let (shown, rest) = printable_prefix(&self.0, 8);
        if rest.is_empty() {
            shown
        } else {
            format!("{shown}…")
        }
    }
}

/// The first `max` characters of `text` with control characters escaped, for logs and errors,
/// and the part of `text` left out.
pub(crate) fn printable_prefix(text: &str, max: usize) -> (String, &str) {
    let cut = text
        .char_indices()
        .nth(max)
        .map_or(text.len(), |(at, _)| at);
    let (prefix, rest) = text.split_at(cut);
    let mut shown = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    (shown, rest)
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeaseToken({})", self.redacted())
    }
}

/// A number that grows with every acquisition of a key.
///
/// Every successful acquisition of a key yields a fencing token strictly greater than every
/// earlier one for that key: across release, expiry and takeover, though not across a
/// [`delete`](crate::LeaseBackend::delete) of the key's record. Pass it with every write to the
/// resource the lease protects, and have that resource reject a write whose token is lower than
/// the highest it has seen (see the crate documentation, *Fencing*). This is what keeps a holder
/// that was paused past its lease from corrupting data: no lease library can stop the paused
/// process from acting, but the resource can refuse it.
///
/// Only a backend issues one (through [`crate::backend::fencing_token`]); a caller reads it off
/// the [`Lease`](crate::Lease) and compares raw values with [`get`](Self::get):
///
/// ```
/// use lease_core::{LeaseGuard, LeaseKey, MemoryBackend};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let store = Arc::new(MemoryBackend::new());
/// let key = LeaseKey::new("reports")?;
/// let first = LeaseGuard::builder(store.clone(), &key, Duration::from_secs(5)).acquire_blocking()?;
/// let first_token = first.fencing_token();
/// first.release()?;
/// let later = LeaseGuard::builder(store, &key, Duration::from_secs(5)).acquire_blocking()?;
/// assert!(later.fencing_token() > first_token);
/// assert!(later.fencing_token().get() > first_token.get());
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// No fencing token (a record whose writer issued none, such as an item of the Go `lease`
    /// package): inside this crate only; callers see `Option<FencingToken>::None`.
    pub(crate) const NONE: Self = Self(0);

    /// Wraps a raw value; backends call it through [`crate::backend::fencing_token`].
    pub(crate) const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Makes the owner token for each acquisition.
///
/// The default, [`RandomTokens`], draws 122 random bits (a UUID v4). Replace it to make tokens
/// deterministic in tests or to embed your own identifiers, as the Go package's
/// `WithTokenGenerator` does. Every token a source returns must be unique among all live
/// acquisitions of a key, or two owners could renew each other's lease.
pub trait TokenSource: Send + Sync {
    /// A fresh token.
    fn next_token(&self) -> LeaseToken;
}

/// Random owner tokens: a UUID v4 as 32 lowercase hex digits.
///
/// ```
/// use lease_core::{RandomTokens, TokenSource};
///
/// let a = RandomTokens.next_token();
/// let b = RandomTokens.next_token();
/// assert_ne!(a, b);
/// assert_eq!(a.as_str().len(), 32);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct RandomTokens;

impl TokenSource for RandomTokens {
    fn next_token(&self) -> LeaseToken {
        LeaseToken(uuid::Uuid::new_v4().simple().to_string().into())
    }
}

impl<F> TokenSource for F
where
    F: Fn() -> LeaseToken + Send + Sync,
{
    fn next_token(&self) -> LeaseToken {
        self()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_tokens_are_not_padded_with_an_ellipsis() {
        let t = LeaseToken::new("abc").unwrap();
        assert_eq!(t.redacted(), "abc");
        assert_eq!(format!("{t:?}"), "LeaseToken(abc)");
    }

    #[test]
    fn long_tokens_never_print_in_full() {
        let t = RandomTokens.next_token();
        assert!(!format!("{t} {t:?}").contains(t.as_str()));
    }

    #[test]
    fn closures_are_token_sources() {
        let source = || LeaseToken::new("fixed").unwrap();
        assert_eq!(source.next_token().as_str(), "fixed");
    }

    #[test]
    fn rejects_bad_tokens() {
        assert!(LeaseToken::new("").is_err());
        assert!(LeaseToken::new("a\nb").is_err());
        assert!(LeaseToken::new("x".repeat(MAX_TOKEN_BYTES + 1)).is_err());
    }
}

//! An optional extension of the contract: small values that only the newest fencing token writes.

use std::sync::Arc;

use crate::{BoxFuture, FencingToken, LeaseError, LeaseKey};

/// Largest value [`FencedValues::put_fenced`] accepts, in bytes.
pub const MAX_FENCED_VALUE_BYTES: usize = 64 * 1024;

/// Values guarded by fencing tokens: what a lease holder uses to store progress (a checkpoint, an
/// offset) so that a holder that lost its lease can never overwrite its successor's.
///
/// Each name carries a *fence*, the highest fencing token that has touched it. Both operations are
/// one conditional write on backends with a store (one DynamoDB `UpdateItem`, one record
/// replacement under the file backend's critical section):
///
/// * [`fence_and_read`](Self::fence_and_read) raises the fence to `fencing` and returns the value.
///   A new owner calls it first: from then on every older owner's write is refused.
/// * [`put_fenced`](Self::put_fenced) stores the value iff the fence is not above `fencing`.
///
/// Either fails with [`LeaseError::NotOwned`] ([`NotOwnedReason::Fenced`](crate::NotOwnedReason::Fenced))
/// when a newer token has touched the name. Names live in their own namespace per backend; use keys
/// that do not collide with lease keys (for example a `checkpoints/` partition).
///
/// ```
/// use lease_core::{FencedValues, LeaseGuard, LeaseKey, MemoryBackend};
/// use pollster::block_on;
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let store = Arc::new(MemoryBackend::new());
/// let shard = LeaseKey::new("shard-7")?;
/// let name = LeaseKey::with_sort_key("checkpoints", "shard-7")?;
/// let old = LeaseGuard::builder(store.clone(), &shard, Duration::from_secs(5)).acquire_blocking()?;
/// let old_token = old.fencing_token();
/// block_on(store.put_fenced(&name, old_token, b"offset=10"))?;
/// // The old owner is paused past its lease; the next owner fences the name and reads.
/// old.release()?;
/// let new = LeaseGuard::builder(store.clone(), &shard, Duration::from_secs(5)).acquire_blocking()?;
/// let seen = block_on(store.fence_and_read(&name, new.fencing_token()))?;
/// assert_eq!(seen.as_deref(), Some(&b"offset=10"[..]));
/// // The old owner wakes up and writes: refused.
/// let late = block_on(store.put_fenced(&name, old_token, b"offset=9"));
/// assert!(late.unwrap_err().is_not_owned());
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
pub trait FencedValues: Send + Sync + std::fmt::Debug {
    /// Raises the fence of `name` to `fencing` (if lower) and returns its value.
    fn fence_and_read<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, LeaseError>>;

    /// Stores `value` under `name` iff its fence is not above `fencing`, raising the fence to
    /// `fencing`.
    fn put_fenced<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
        value: &'a [u8],
    ) -> BoxFuture<'a, Result<(), LeaseError>>;
}

impl<F: FencedValues + ?Sized> FencedValues for Arc<F> {
    fn fence_and_read<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, LeaseError>> {
        (**self).fence_and_read(name, fencing)
    }

    fn put_fenced<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
        value: &'a [u8],
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        (**self).put_fenced(name, fencing, value)
    }
}

/// Checks a value against [`MAX_FENCED_VALUE_BYTES`]; for backends.
///
/// # Errors
/// [`LeaseError::InvalidInput`] naming the field `value`.
pub fn validate_fenced_value(value: &[u8]) -> Result<(), LeaseError> {
    if value.len() > MAX_FENCED_VALUE_BYTES {
        return Err(LeaseError::invalid(
            "value",
            format!(
                "is {} bytes; the limit is {MAX_FENCED_VALUE_BYTES}",
                value.len()
            ),
        ));
    }
    Ok(())
}

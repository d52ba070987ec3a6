//! The Go `lease` package's API, for code ported from it: [`Manager`] with `acquire`,
//! `acquire_key`, `refresh` and `release`, and the [`is_lease_held`] / [`is_lease_not_owned`]
//! helpers.
//!
//! These are thin shims over [`DynamoLeases`]'s [`LeaseBackend`] implementation: the same single
//! request per call, the same items, the same errors. New code uses the trait methods on
//! [`DynamoLeases`] directly ([`LeaseBackend::try_acquire`], [`LeaseBackend::renew`],
//! [`LeaseBackendExt::release_lease`]), which take a [`LeaseKey`] and work on every backend.
//!
//! The verbs differ: Go's `Acquire` makes **one** attempt, which is
//! [`LeaseBackend::try_acquire`] in Rust; Rust's [`LeaseBackendExt::acquire`] **waits** until
//! the lease is free, as `lock()` does ([`LeaseBackendExt::acquire_with`] with a timeout).
//!
//! | Go | here |
//! |---|---|
//! | `NewManager(client, table)` | [`Manager::new`] |
//! | `NewManager(client, table, opts...)` | [`Manager::from`] a [`DynamoLeases`] built with [`DynamoLeases::builder`] |
//! | `WithKeyAttributeNames` | [`DynamoLeasesBuilder::with_key_attribute_names`] |
//! | `WithLeaseAttributeNames` | [`DynamoLeasesBuilder::with_lease_attribute_names`] |
//! | `WithLockSortKey` | [`DynamoLeasesBuilder::with_lock_sort_key`] |
//! | `WithIncludeTTL` | [`DynamoLeasesBuilder::with_ttl`] |
//! | `WithTTLBuffer` | [`DynamoLeasesBuilder::with_ttl_buffer`] |
//! | `WithNow` | [`DynamoLeasesBuilder::with_clock`] |
//! | `WithTokenGenerator` | [`DynamoLeasesBuilder::with_token_source`] |
//! | `WithValidateInput` | [`DynamoLeasesBuilder::with_input_validation`] |
//! | `Manager.Acquire` / `AcquireKey` / `Refresh` / `Release` | [`Manager::acquire`] / [`acquire_key`](Manager::acquire_key) / [`refresh`](Manager::refresh) / [`release`](Manager::release) |
//! | the same, on every backend | [`LeaseBackend::try_acquire`] (one attempt) / the same with a [`LeaseKey`] / [`LeaseBackend::renew`] / [`LeaseBackendExt::release_lease`] |
//! | `IsLeaseHeld` / `IsLeaseNotOwned` | [`is_lease_held`] / [`is_lease_not_owned`] |
//!
//! ```no_run
//! use lease_dynamo::go;
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), lease_dynamo::LeaseError> {
//! let client = lease_dynamo::sdk_client(None, None).await;
//! let manager = go::Manager::new(client, "leases")?;
//! match manager.acquire("regenerate-sitemap", Duration::from_secs(30)).await {
//!     Ok(lease) => {
//!         let lease = manager.refresh(&lease, Duration::from_secs(30)).await?;
//!         manager.release(&lease).await?;
//!     }
//!     Err(e) if go::is_lease_held(&e) => println!("busy: {e}"),
//!     Err(e) => return Err(e),
//! }
//! # Ok(()) }
//! ```
//!
//! [`DynamoLeasesBuilder::with_key_attribute_names`]: crate::DynamoLeasesBuilder::with_key_attribute_names
//! [`DynamoLeasesBuilder::with_lease_attribute_names`]: crate::DynamoLeasesBuilder::with_lease_attribute_names
//! [`DynamoLeasesBuilder::with_lock_sort_key`]: crate::DynamoLeasesBuilder::with_lock_sort_key
//! [`DynamoLeasesBuilder::with_ttl`]: crate::DynamoLeasesBuilder::with_ttl
//! [`DynamoLeasesBuilder::with_ttl_buffer`]: crate::DynamoLeasesBuilder::with_ttl_buffer
//! [`DynamoLeasesBuilder::with_clock`]: crate::DynamoLeasesBuilder::with_clock
//! [`DynamoLeasesBuilder::with_token_source`]: crate::DynamoLeasesBuilder::with_token_source
//! [`DynamoLeasesBuilder::with_input_validation`]: crate::DynamoLeasesBuilder::with_input_validation

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use lease_core::{AcquireOptions, Lease, LeaseBackend, LeaseBackendExt, LeaseError, LeaseKey};

use crate::DynamoLeases;

/// The Go package's `Manager`: [`DynamoLeases`] with the Go method names and argument shapes.
///
/// Cheap to clone. [`leases`](Self::leases) gives the [`DynamoLeases`] underneath, for
/// everything the Go package does not have (listing, fenced values, [`LeaseGuard`](lease_core::LeaseGuard)).
#[derive(Clone, Debug)]
pub struct Manager {
    leases: DynamoLeases,
}

impl From<DynamoLeases> for Manager {
    /// Go's `NewManager(client, table, opts...)`: the options are the builder's.
    fn from(leases: DynamoLeases) -> Self {
        Self { leases }
    }
}

impl Manager {
    /// Go's `NewManager(client, table)`, every option at the Go package's default.
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] for an invalid table name.
    pub fn new(client: Client, table: impl Into<String>) -> Result<Self, LeaseError> {
        DynamoLeases::new(client, table).map(Self::from)
    }

    /// The manager underneath.
    pub fn leases(&self) -> &DynamoLeases {
        &self.leases
    }

    /// Acquires the lease named by partition key `pk` alone (stored under the lock sort key),
    /// for `duration`: one conditional `UpdateItem`, one attempt (Go: `Acquire`; Rust:
    /// [`LeaseBackend::try_acquire`]).
    ///
    /// # Errors
    /// [`LeaseError::Held`] (see [`is_lease_held`]) naming the holder, its expiry and fencing
    /// token, learned from the failed write itself; [`LeaseError::InvalidInput`];
    /// [`LeaseError::Backend`].
    pub async fn acquire(&self, pk: &str, duration: Duration) -> Result<Lease, LeaseError> {
        let key = LeaseKey::new(pk)?;
        self.acquire_key(&key, duration).await
    }

    /// Acquires the lease named by `key` (Go: `AcquireKey`). A key without a sort key is stored
    /// under the lock sort key.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_key(
        &self,
        key: &LeaseKey,
        duration: Duration,
    ) -> Result<Lease, LeaseError> {
        self.leases
            .try_acquire(key, duration, &AcquireOptions::default())
            .await
    }

    /// Extends `lease` to `duration` from now: one conditional `UpdateItem` (Go: `Refresh`).
    ///
    /// # Errors
    /// [`LeaseError::NotOwned`] (see [`is_lease_not_owned`]) if the lease expired, was released
    /// or taken over; [`LeaseError::InvalidInput`]; [`LeaseError::Backend`].
    pub async fn refresh(&self, lease: &Lease, duration: Duration) -> Result<Lease, LeaseError> {
        self.leases.renew(lease, duration).await
    }

    /// Releases `lease` (Go: `Release`): one conditional `UpdateItem` that removes the holder and
    /// keeps the item with its fencing counter (the Go package deleted the item, and with it any
    /// counter).
    ///
    /// # Errors
    /// [`LeaseError::NotOwned`] if another tenure holds the lease or nobody does;
    /// [`LeaseError::Backend`].
    pub async fn release(&self, lease: &Lease) -> Result<(), LeaseError> {
        self.leases.release_lease(lease).await
    }
}

/// Go's `IsLeaseHeld`: the lease is held by someone else ([`LeaseError::is_held`]).
pub fn is_lease_held(err: &LeaseError) -> bool {
    err.is_held()
}

/// Go's `IsLeaseNotOwned`: the caller's token no longer owns the lease
/// ([`LeaseError::is_not_owned`]).
pub fn is_lease_not_owned(err: &LeaseError) -> bool {
    err.is_not_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::NotOwnedReason;

    #[test]
    fn the_go_helpers_branch_like_the_go_package() -> Result<(), LeaseError> {
        let key = LeaseKey::new("job")?;
        let held = LeaseError::held(key.clone(), None);
        let taken = LeaseError::not_owned(key.clone(), NotOwnedReason::TakenOver);
        let other = LeaseError::invalid("duration", "zero");
        assert!(is_lease_held(&held) && !is_lease_not_owned(&held));
        assert!(is_lease_not_owned(&taken) && !is_lease_held(&taken));
        assert!(!is_lease_held(&other) && !is_lease_not_owned(&other));
        Ok(())
    }
}

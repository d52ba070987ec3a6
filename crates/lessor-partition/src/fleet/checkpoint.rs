//! Per-unit checkpoints that only the current owner can write: lease-core's
//! [`FencedValues`](lease_core::FencedValues), named after the fleet and the unit.

use std::fmt;
use std::sync::Arc;

use lease_core::{FencedValues, FencingToken, LeaseBackend, LeaseError, LeaseKey, NotOwnedReason};

/// Where a worker's checkpoints live: the lease store's own fenced values, or a separate store.
#[derive(Clone)]
pub(crate) enum CheckpointSource {
    /// The lease store's own ([`LeaseBackend::as_fenced_values`], checked when the worker is
    /// built).
    Store(Arc<dyn LeaseBackend>),
    /// Another store of fenced values.
    Separate(Arc<dyn FencedValues>),
}

/// A fleet's checkpoints: one fenced value per unit, named `fleet/<fleet>/checkpoints` / unit id,
/// apart from the fleet's sessions and units. Loading raises the unit's fence (so every earlier
/// owner's later save is refused); saving is refused below the fence. Each is one request, and
/// the conditional write itself is the backend's.
#[derive(Clone)]
pub(crate) struct Checkpoints {
    source: CheckpointSource,
    partition: String,
    /// The partition of the unit records, for errors that name the unit.
    units_key: String,
}

impl fmt::Debug for Checkpoints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checkpoints")
            .field("partition", &self.partition)
            .finish_non_exhaustive()
    }
}

impl Checkpoints {
    /// The checkpoints of fleet `fleet` in `source`.
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] if the fleet name cannot form a key;
    /// [`LeaseError::Unsupported`] if the lease store keeps no fenced values.
    pub(crate) fn new(
        source: CheckpointSource,
        fleet: &str,
        units_key: String,
    ) -> Result<Self, LeaseError> {
        let partition = format!("fleet/{fleet}/checkpoints");
        LeaseKey::new(partition.clone())?;
        let checkpoints = Self {
            source,
            partition,
            units_key,
        };
        checkpoints.values()?;
        Ok(checkpoints)
    }

    fn values(&self) -> Result<&dyn FencedValues, LeaseError> {
        match &self.source {
            CheckpointSource::Store(store) => store
                .as_fenced_values()
                .ok_or_else(|| LeaseError::unsupported(store.name(), "fenced checkpoints")),
            CheckpointSource::Separate(values) => Ok(&**values),
        }
    }

    fn name(&self, unit: &str) -> Result<LeaseKey, LeaseError> {
        LeaseKey::with_sort_key(self.partition.clone(), unit)
    }

    /// A refusal by the fence, told as the unit's: [`LeaseError::NotOwned`] with
    /// [`NotOwnedReason::Fenced`] and the unit's key, whatever store keeps the checkpoints.
    fn refused(&self, unit: &str, error: LeaseError) -> LeaseError {
        if error.not_owned_reason() != Some(NotOwnedReason::Fenced) {
            return error;
        }
        match LeaseKey::with_sort_key(self.units_key.as_str(), unit) {
            Ok(key) => LeaseError::not_owned(key, NotOwnedReason::Fenced),
            Err(_) => error,
        }
    }

    /// Raises the fence of `unit` to `fencing` and returns its checkpoint. One request.
    pub(crate) async fn load(
        &self,
        unit: &str,
        fencing: FencingToken,
    ) -> Result<Option<Vec<u8>>, LeaseError> {
        let name = self.name(unit)?;
        self.values()?
            .fence_and_read(&name, fencing)
            .await
            .map_err(|e| self.refused(unit, e))
    }

    /// Stores `data` as the checkpoint of `unit` iff `fencing` is not older than the fence. One
    /// request.
    pub(crate) async fn save(
        &self,
        unit: &str,
        fencing: FencingToken,
        data: &[u8],
    ) -> Result<(), LeaseError> {
        let name = self.name(unit)?;
        self.values()?
            .put_fenced(&name, fencing, data)
            .await
            .map_err(|e| self.refused(unit, e))
    }
}

//! Per-unit checkpoints that only the current owner can write.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use lease_core::{BoxFuture, FencingToken};

use crate::Error;

/// Where a fleet keeps each unit's checkpoint, fenced by the unit's fencing token.
///
/// The store keeps, per unit, the highest fencing token it has seen, and must compare and update
/// it atomically with each read or write (a DynamoDB `ConditionExpression: fence <= :token`, a SQL
/// `WHERE fence <= $token`):
///
/// * [`load`](Self::load) raises the unit's fence to `fencing` and returns the checkpoint. The
///   worker calls it when it gains a unit, so from then on every older owner is refused, even one
///   that was paused and does not know it lost the unit.
/// * [`save`](Self::save) stores `data` iff `fencing` is at least the fence.
///
/// Both fail with [`Error::Fenced`] when `fencing` is below the fence.
pub trait CheckpointStore: Send + Sync + fmt::Debug {
    /// Raises the fence of `unit` to `fencing` and returns its checkpoint.
    fn load<'a>(
        &'a self,
        unit: &'a str,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, Error>>;

    /// Stores `data` as the checkpoint of `unit` iff `fencing` is not older than the fence.
    fn save<'a>(
        &'a self,
        unit: &'a str,
        fencing: FencingToken,
        data: &'a [u8],
    ) -> BoxFuture<'a, Result<(), Error>>;
}

/// A unit's fence and checkpoint.
type Fenced = (FencingToken, Option<Vec<u8>>);

/// Checkpoints in memory: the reference [`CheckpointStore`]. Clones share the store.
///
/// ```
/// use lessor_partition::{CheckpointStore, MemoryCheckpoints};
/// use lease_core::FencingToken;
///
/// let store = MemoryCheckpoints::new();
/// lease_core::block_on(store.save("shard-7", lease_core::backend::fencing_token(3), b"offset=10"))?;
/// // A new owner (token 4) loads, which fences out owner 3.
/// let seen = lease_core::block_on(store.load("shard-7", lease_core::backend::fencing_token(4)))?;
/// assert_eq!(seen.as_deref(), Some(&b"offset=10"[..]));
/// assert!(lease_core::block_on(store.save("shard-7", lease_core::backend::fencing_token(3), b"late")).is_err());
/// # Ok::<(), lessor_partition::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryCheckpoints {
    entries: Arc<Mutex<BTreeMap<String, Fenced>>>,
}

impl MemoryCheckpoints {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn fenced(
        &self,
        unit: &str,
        fencing: FencingToken,
        write: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, Error> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = entries
            .entry(unit.to_owned())
            .or_insert((lease_core::backend::fencing_token(0), None));
        if fencing < entry.0 {
            return Err(Error::Fenced {
                unit: unit.to_owned(),
                offered: fencing,
                seen: entry.0,
            });
        }
        entry.0 = fencing;
        if let Some(data) = write {
            entry.1 = Some(data.to_vec());
        }
        Ok(entry.1.clone())
    }
}

impl CheckpointStore for MemoryCheckpoints {
    fn load<'a>(
        &'a self,
        unit: &'a str,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, Error>> {
        Box::pin(std::future::ready(self.fenced(unit, fencing, None)))
    }

    fn save<'a>(
        &'a self,
        unit: &'a str,
        fencing: FencingToken,
        data: &'a [u8],
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(std::future::ready(
            self.fenced(unit, fencing, Some(data)).map(|_| ()),
        ))
    }
}

/// Checkpoints kept in the lease store itself through lease-core's
/// [`FencedValues`](lease_core::FencedValues): durable on files and DynamoDB, shared by every
/// worker of the fleet, and each read or write one conditional write on the store.
///
/// Checkpoints live under the partition key `fleet/<fleet>/checkpoints`, sort key = unit id, apart
/// from the fleet's sessions and units. A write refused because a newer owner has fenced the unit
/// fails with [`Error::NotOwner`].
///
/// ```
/// use lease_core::{FencingToken, MemoryBackend};
/// use lessor_partition::{CheckpointStore, StoreCheckpoints};
/// use std::sync::Arc;
///
/// let store = Arc::new(MemoryBackend::new()); // or a lease_file::DirectoryStore, a DynamoLeases
/// let checkpoints = StoreCheckpoints::new(store, "indexer")?;
/// lease_core::block_on(checkpoints.save("shard-7", lease_core::backend::fencing_token(3), b"offset=10"))?;
/// let seen = lease_core::block_on(checkpoints.load("shard-7", lease_core::backend::fencing_token(4)))?;
/// assert_eq!(seen.as_deref(), Some(&b"offset=10"[..]));
/// let late = lease_core::block_on(checkpoints.save("shard-7", lease_core::backend::fencing_token(3), b"late"));
/// assert!(late.unwrap_err().is_not_owner());
/// # Ok::<(), lessor_partition::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct StoreCheckpoints {
    store: Arc<dyn lease_core::FencedValues>,
    partition: String,
}

impl StoreCheckpoints {
    /// Checkpoints of fleet `fleet` in `store`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the fleet name cannot form a key.
    pub fn new(store: Arc<dyn lease_core::FencedValues>, fleet: &str) -> Result<Self, Error> {
        let partition = format!("fleet/{fleet}/checkpoints");
        lease_core::LeaseKey::new(partition.clone())?;
        Ok(Self { store, partition })
    }

    fn name(&self, unit: &str) -> Result<lease_core::LeaseKey, Error> {
        Ok(lease_core::LeaseKey::with_sort_key(
            self.partition.clone(),
            unit,
        )?)
    }

    fn map(unit: &str, error: lease_core::LeaseError) -> Error {
        if error.not_owned_reason() == Some(lease_core::NotOwnedReason::Fenced) {
            Error::NotOwner {
                unit: unit.to_owned(),
            }
        } else {
            Error::Lease(error)
        }
    }
}

impl CheckpointStore for StoreCheckpoints {
    fn load<'a>(
        &'a self,
        unit: &'a str,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, Error>> {
        Box::pin(async move {
            let name = self.name(unit)?;
            self.store
                .fence_and_read(&name, fencing)
                .await
                .map_err(|e| Self::map(unit, e))
        })
    }

    fn save<'a>(
        &'a self,
        unit: &'a str,
        fencing: FencingToken,
        data: &'a [u8],
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let name = self.name(unit)?;
            self.store
                .put_fenced(&name, fencing, data)
                .await
                .map_err(|e| Self::map(unit, e))
        })
    }
}

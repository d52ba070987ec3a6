//! Per-unit checkpoints that only the current owner can write: lease-core's
//! [`FencedValues`](lease_core::FencedValues), named after the fleet and the unit.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

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
    /// The name of the fleet's store epoch ([`StoreEpoch`]), apart from the unit checkpoints
    /// (a unit id may be any text).
    epoch_name: String,
    /// The store epoch this worker adopted (how many store losses it records), shared by its
    /// clones.
    adopted: Arc<Mutex<Option<u64>>>,
}

/// The fencing at which the store epoch is read and written: always the same, so a check never
/// refuses another (the value is what matters, not the fence).
const EPOCH_FENCING: u64 = 1;

/// Where the loss count sits in a checkpoint fence: `losses << LOSS_SHIFT | unit fencing`. A
/// unit's fencing counter starts again when the store loses its records, so the fence of an
/// ownership taken after a loss the fleet recorded is above every fence from before it, whatever
/// the old counters were. 52 bits leave room for the clock-seeded counters of DynamoDB
/// (microseconds since 1970, under 2^52 until 2112) and for 4,095 recorded losses.
const LOSS_SHIFT: u32 = 52;

/// What checking the store epoch found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum EpochCheck {
    /// The epoch this worker adopted before (or the first it saw).
    Same,
    /// The epoch this worker adopted is gone or was replaced: the store lost its data since.
    /// The epoch now records one more loss.
    Lost,
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
        let epoch_name = format!("fleet/{fleet}/store");
        LeaseKey::new(epoch_name.clone())?;
        let checkpoints = Self {
            source,
            partition,
            units_key,
            epoch_name,
            adopted: Arc::default(),
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

    /// Whether the store epoch adopted so far records a store loss: an empty checkpoint may then
    /// be one that vanished.
    pub(crate) fn after_loss(&self) -> bool {
        self.adopted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|losses| losses > 0)
    }

    /// Reads the fleet's **store epoch** and compares it with the one this worker adopted
    /// before: a fenced value apart from the unit checkpoints (`fleet/<fleet>/store`) holding
    /// how many times workers found the store's data lost. It is written when missing, so it
    /// vanishes with the data when the store loses it (a table deleted and re-created, an
    /// emulator restarted, a store wiped). A worker that adopted it and finds it missing, or
    /// recording fewer losses, knows the store lost its data since, and writes one more loss;
    /// one that finds more losses adopts them. Workers that write it at once write the same
    /// figure, so no check mistakes a race for a loss. One request; two when it writes.
    ///
    /// What it cannot see: a loss that no worker that knew the store before survives to check
    /// (every worker restarted, and a new one re-created the epoch first).
    pub(crate) async fn check_epoch(&self) -> Result<EpochCheck, LeaseError> {
        let name = LeaseKey::new(self.epoch_name.clone())?;
        let values = self.values()?;
        let level = lease_core::backend::fencing_token(EPOCH_FENCING);
        let found = values.fence_and_read(&name, level).await?;
        let current = match found.as_deref() {
            None => None,
            Some(bytes) => Some(
                std::str::from_utf8(bytes)
                    .ok()
                    .and_then(|text| text.parse::<u64>().ok())
                    .ok_or_else(|| {
                        LeaseError::runtime(format!(
                            "the fleet's store epoch {} holds no loss count",
                            self.epoch_name
                        ))
                    })?,
            ),
        };
        let adopted = *self.adopted.lock().unwrap_or_else(PoisonError::into_inner);
        let (check, known) = match (adopted, current) {
            (None, current) => (EpochCheck::Same, current.unwrap_or(0)),
            (Some(before), Some(now)) if now == before => (EpochCheck::Same, before),
            (Some(before), Some(now)) if now > before => (EpochCheck::Lost, now),
            (Some(before), _) => (EpochCheck::Lost, before + 1),
        };
        if current != Some(known) {
            values
                .put_fenced(&name, level, known.to_string().as_bytes())
                .await?;
        }
        *self.adopted.lock().unwrap_or_else(PoisonError::into_inner) = Some(known);
        Ok(check)
    }

    /// The fence this worker gives an ownership of a unit whose lease carries `fencing`: the
    /// fencing token itself until a store loss is recorded, then the loss count adopted now
    /// above it (`losses << 52 | fencing`), so that an owner that took the unit after a
    /// recorded loss fences out every owner from before it, even though the unit's fencing
    /// counter started again. Fixed for the ownership: every save of it uses the fence its
    /// load used. No request.
    ///
    /// # Errors
    /// [`LeaseError::Runtime`] when the token or the loss count does not fit (a token of 2^52
    /// or more with a loss recorded, more than 4,095 losses).
    pub(crate) fn fence_for(&self, fencing: FencingToken) -> Result<FencingToken, LeaseError> {
        let losses = self
            .adopted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .unwrap_or(0);
        if losses == 0 {
            return Ok(fencing);
        }
        let token = fencing.get();
        losses
            .checked_shl(LOSS_SHIFT)
            .filter(|base| base >> LOSS_SHIFT == losses && token >> LOSS_SHIFT == 0)
            .map(|base| lease_core::backend::fencing_token(base | token))
            .ok_or_else(|| {
                LeaseError::runtime(format!(
                    "checkpoint fence out of range: fencing token {token} after {losses} \
                     recorded store losses of {}",
                    self.epoch_name
                ))
            })
    }

    /// Records one more store loss than this worker adopted, after a checkpoint fence above the
    /// fence of an ownership this worker holds: the unit's fencing counter started again since
    /// the fence was raised (the store lost its unit records, or another store keeps the
    /// checkpoints and kept them), and no loss this worker knew of accounts for it. Reads the
    /// epoch first: one that already counts more losses is adopted instead. Two requests.
    pub(crate) async fn record_loss(&self) -> Result<(), LeaseError> {
        let name = LeaseKey::new(self.epoch_name.clone())?;
        let values = self.values()?;
        let level = lease_core::backend::fencing_token(EPOCH_FENCING);
        let found = values.fence_and_read(&name, level).await?;
        let current = found
            .as_deref()
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
            .and_then(|text| text.parse::<u64>().ok())
            .unwrap_or(0);
        let adopted = self
            .adopted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .unwrap_or(0);
        let known = current.max(adopted + 1);
        if known != current || found.is_none() {
            values
                .put_fenced(&name, level, known.to_string().as_bytes())
                .await?;
        }
        *self.adopted.lock().unwrap_or_else(PoisonError::into_inner) = Some(known);
        Ok(())
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

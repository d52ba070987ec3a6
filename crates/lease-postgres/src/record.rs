//! Reading a lease row as the contract reports it.

use std::time::SystemTime;

use lease_core::backend::{fencing_token, new_record, stored_token};
use lease_core::{FencingToken, Holder, LeaseError, LeaseKey, LeaseRecord};
use tokio_postgres::Row;
use uuid::Uuid;

/// The lease row as a statement's `cur` (or `inspect`) returned it: every column `NULL` when
/// the key has no row.
#[derive(Debug, Default)]
pub(crate) struct Current {
    pub(crate) exists: bool,
    pub(crate) holder: Option<String>,
    pub(crate) owner: Option<String>,
    pub(crate) value: Option<String>,
    pub(crate) fencing: Option<FencingToken>,
    pub(crate) acquired_at: Option<SystemTime>,
    pub(crate) renewed_at: Option<SystemTime>,
    pub(crate) expires_at: Option<SystemTime>,
    pub(crate) request_id: Option<Uuid>,
}

impl Current {
    /// Reads the record columns of `row` (see [`RECORD_COLUMNS`](crate::sql::RECORD_COLUMNS)).
    pub(crate) fn read(key: &LeaseKey, row: &Row) -> Result<Self, LeaseError> {
        let corrupt = |e: tokio_postgres::Error| {
            LeaseError::corrupt(
                key.clone(),
                format!("a lease column has an unexpected type: {e}"),
            )
        };
        let fencing: Option<i64> = row.try_get("fencing").map_err(corrupt)?;
        let fencing = match fencing {
            None => None,
            Some(f) => match u64::try_from(f) {
                Ok(f) if f > 0 => Some(fencing_token(f)),
                _ => {
                    return Err(LeaseError::corrupt(
                        key.clone(),
                        format!("its fencing counter is {f}; this crate only writes positive ones"),
                    ));
                }
            },
        };
        Ok(Self {
            exists: fencing.is_some(),
            holder: row.try_get("holder").map_err(corrupt)?,
            owner: row.try_get("owner").map_err(corrupt)?,
            value: row.try_get("value").map_err(corrupt)?,
            fencing,
            acquired_at: row.try_get("acquired_at").map_err(corrupt)?,
            renewed_at: row.try_get("renewed_at").map_err(corrupt)?,
            expires_at: row.try_get("expires_at").map_err(corrupt)?,
            request_id: row.try_get("request_id").map_err(corrupt)?,
        })
    }

    /// What is known of the holder, for [`LeaseError::Held`] and records.
    pub(crate) fn holder_info(&self) -> Option<Holder> {
        let token = self.holder.as_ref()?;
        let mut holder = Holder::new().with_token(stored_token(token.clone()));
        if let Some(owner) = &self.owner {
            holder = holder.with_owner(owner.clone());
        }
        if let Some(value) = &self.value {
            holder = holder.with_value(value.clone());
        }
        if let Some(at) = self.acquired_at {
            holder = holder.with_acquired_at(at);
        }
        if let Some(at) = self.renewed_at {
            holder = holder.with_renewed_at(at);
        }
        if let Some(at) = self.expires_at {
            holder = holder.with_expires_at(at);
        }
        if let Some(fencing) = self.fencing {
            holder = holder.with_fencing(fencing);
        }
        Some(holder)
    }

    /// The record, or `None` when the key has no row.
    pub(crate) fn into_record(self, key: &LeaseKey) -> Option<LeaseRecord> {
        let fencing = self.fencing?;
        Some(new_record(key.clone(), self.holder_info(), fencing))
    }
}

/// The key a row's partition and sort key name.
pub(crate) fn key_of(partition: &str, sort: &str) -> Result<LeaseKey, LeaseError> {
    if sort.is_empty() {
        LeaseKey::new(partition)
    } else {
        LeaseKey::with_sort_key(partition, sort)
    }
}

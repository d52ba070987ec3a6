//! Reading the replies of the scripts: a lease hash as the contract reports it.

use std::time::{Duration, SystemTime};

use lease_core::backend::{new_record, stored_token};
use lease_core::{FencingToken, Holder, LeaseError, LeaseKey, LeaseRecord};
use redis::Value;

/// The text of a reply entry; `None` for a missing field (Lua's `false`, a nil reply).
pub(crate) fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        Value::Okay => Some("OK".to_owned()),
        _ => None,
    }
}

/// The entries of an array reply.
pub(crate) fn entries<'v>(key: &LeaseKey, value: &'v Value) -> Result<&'v [Value], LeaseError> {
    match value {
        Value::Array(items) => Ok(items),
        // Not the value itself: it may hold an owner token, which is never printed in full.
        _ => Err(LeaseError::corrupt(
            key.clone(),
            "a script answered something other than an array: are the keys written by another \
             program?",
        )),
    }
}

/// A number of microseconds since the epoch, as the scripts write them.
pub(crate) fn micros_at(
    key: &LeaseKey,
    field: &str,
    value: Option<String>,
) -> Result<Option<SystemTime>, LeaseError> {
    let Some(value) = value else { return Ok(None) };
    let micros: u64 = value.parse().map_err(|_| {
        LeaseError::corrupt(
            key.clone(),
            format!("its {field} is {value:?}, not microseconds"),
        )
    })?;
    Ok(Some(SystemTime::UNIX_EPOCH + Duration::from_micros(micros)))
}

/// A fencing token as the scripts write it (positive).
pub(crate) fn fencing_of(
    key: &LeaseKey,
    value: Option<String>,
) -> Result<Option<FencingToken>, LeaseError> {
    let Some(value) = value else { return Ok(None) };
    match value.parse::<u64>() {
        Ok(f) if f > 0 => Ok(Some(lease_core::backend::fencing_token(f))),
        _ => Err(LeaseError::corrupt(
            key.clone(),
            format!("its fencing counter is {value:?}; this crate only writes positive integers"),
        )),
    }
}

/// A lease hash as a script's reply (or `HMGET`) returned it: `holder, owner, value, fencing,
/// acquired_at, renewed_at, expires_at, request_id`, each missing when absent.
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
    pub(crate) request_id: Option<String>,
}

/// How many entries a lease hash takes in a reply.
pub(crate) const FIELDS: usize = 8;

impl Current {
    /// Reads the 8 fields at the start of `fields`.
    pub(crate) fn read(key: &LeaseKey, fields: &[Value]) -> Result<Self, LeaseError> {
        if fields.len() < FIELDS {
            return Err(LeaseError::corrupt(
                key.clone(),
                format!(
                    "a reply carries {} lease fields, not {FIELDS}",
                    fields.len()
                ),
            ));
        }
        let f = |i: usize| fields.get(i).and_then(text);
        let fencing = fencing_of(key, f(3))?;
        Ok(Self {
            exists: fencing.is_some(),
            holder: f(0),
            owner: f(1),
            value: f(2),
            fencing,
            acquired_at: micros_at(key, "acquired_at", f(4))?,
            renewed_at: micros_at(key, "renewed_at", f(5))?,
            expires_at: micros_at(key, "expires_at", f(6))?,
            request_id: f(7),
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

    /// The record, or `None` when the key has no lease hash.
    pub(crate) fn into_record(self, key: &LeaseKey) -> Option<LeaseRecord> {
        let fencing = self.fencing?;
        Some(new_record(key.clone(), self.holder_info(), fencing))
    }
}

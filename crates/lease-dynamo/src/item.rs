//! The lease item: encoding keys and numbers, decoding what the store returned.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::types::AttributeValue;
use lease_core::{FencingToken, Holder, LeaseKey, LeaseRecord, LeaseToken};

use crate::AttributeNames;

pub(crate) type Item = HashMap<String, AttributeValue>;

/// Milliseconds since the Unix epoch (0 before it).
pub(crate) fn epoch_millis(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Microseconds since the Unix epoch (0 before it): the fencing seed.
pub(crate) fn epoch_micros(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Whole milliseconds of a duration, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The wall time `ms` milliseconds after the epoch.
pub(crate) fn from_millis(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

/// The TTL value for an item whose lease ends at `expires_ms`: epoch seconds, rounded up, plus
/// the buffer.
pub(crate) fn ttl_seconds(expires_ms: u64, buffer: Duration) -> u64 {
    expires_ms.div_ceil(1000).saturating_add(buffer.as_secs())
}

pub(crate) fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

pub(crate) fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

/// Reads a number attribute; `None` when absent or not a non-negative integer.
pub(crate) fn get_u64(item: &Item, name: &str) -> Option<u64> {
    match item.get(name) {
        Some(AttributeValue::N(v)) => v.parse().ok(),
        _ => None,
    }
}

pub(crate) fn get_str<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Some(v.as_str()),
        _ => None,
    }
}

/// What a lease item says, decoded.
#[derive(Clone, Debug, Default)]
pub(crate) struct Decoded {
    pub(crate) token: Option<LeaseToken>,
    pub(crate) expires_ms: Option<u64>,
    pub(crate) fencing: Option<u64>,
    pub(crate) owner: Option<String>,
    pub(crate) acquired_ms: Option<u64>,
}

impl Decoded {
    pub(crate) fn from_item(names: &AttributeNames, item: &Item) -> Self {
        Self {
            token: get_str(item, names.token()).and_then(|t| LeaseToken::new(t).ok()),
            expires_ms: get_u64(item, names.expires_at()),
            fencing: get_u64(item, names.fencing()),
            owner: get_str(item, names.owner()).map(str::to_owned),
            acquired_ms: get_u64(item, names.acquired_at()),
        }
    }

    /// The holder, if the item has an owner token.
    pub(crate) fn holder(&self) -> Option<Holder> {
        let token = self.token.clone()?;
        let mut holder = Holder::new().with_token(token);
        if let Some(owner) = &self.owner {
            holder = holder.with_owner(owner.clone());
        }
        if let Some(ms) = self.expires_ms {
            holder = holder.with_expires_at(from_millis(ms));
        }
        if let Some(ms) = self.acquired_ms {
            holder = holder.with_acquired_at(from_millis(ms));
        }
        if let Some(f) = self.fencing {
            holder = holder.with_fencing(FencingToken::new(f));
        }
        Some(holder)
    }

    pub(crate) fn record(&self, key: LeaseKey) -> LeaseRecord {
        LeaseRecord::new(
            key,
            self.holder(),
            FencingToken::new(self.fencing.unwrap_or(0)),
        )
    }
}

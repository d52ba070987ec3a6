//! The lease item: encoding keys and numbers, decoding what the store returned.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::types::AttributeValue;
use lease_core::{Holder, LeaseKey, LeaseRecord, LeaseToken};

use crate::AttributeNames;

pub(crate) type Item = HashMap<String, AttributeValue>;

/// The largest fencing counter an item may hold before an acquisition: the next one is at most
/// `i64::MAX`, so fencing tokens fit the signed 64-bit columns resources usually keep them in.
pub(crate) const FENCE_LIMIT: u64 = i64::MAX as u64;

/// The raw fencing value that stands for "no counter" in lease-core's records and releases (an
/// item of the Go package's, or one whose counter is unusable). No acquisition issues it: a new
/// counter is seeded from the clock, an existing one only grows.
pub(crate) const NO_COUNTER: u64 = 0;

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

/// The wall time `ms` milliseconds after the epoch (saturating far in the future).
pub(crate) fn from_millis(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH
        .checked_add(Duration::from_millis(ms))
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// Unix seconds of an expiry in milliseconds, rounded **up**: what the Go package reads, never
/// earlier than the truth.
pub(crate) fn seconds_up(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// The TTL value for an item whose lease ends (or was released) at `ms`: Unix seconds, rounded
/// up, plus the buffer.
pub(crate) fn ttl_seconds(ms: u64, buffer: Duration) -> u64 {
    seconds_up(ms).saturating_add(buffer.as_secs())
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

/// Reads the seconds expiry as the acquire condition compares it: a whole number as it is, a
/// negative number as 0 (long past), a fraction rounded up (never earlier than the truth);
/// `None` when absent, not a number, or beyond `u64`. So a number that no writer leaves gets
/// the verdict acquisitions give it (expired, or held until then), not "corrupt" beside an
/// acquisition that takes it over.
pub(crate) fn get_seconds(item: &Item, name: &str) -> Option<u64> {
    let Some(AttributeValue::N(text)) = item.get(name) else {
        return None;
    };
    if let Ok(whole) = text.parse::<u64>() {
        return Some(whole);
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (unsigned, negative) = match text.strip_prefix('-') {
        Some(rest) => (rest, true),
        None => (text.as_str(), false),
    };
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    if !digits(whole) || !(fraction.is_empty() || digits(fraction)) {
        return None;
    }
    if negative {
        return Some(0);
    }
    let whole: u64 = whole.parse().ok()?;
    let up = u64::from(fraction.bytes().any(|b| b != b'0'));
    whole.checked_add(up)
}

pub(crate) fn get_str<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Some(v.as_str()),
        _ => None,
    }
}

/// An attribute's value as an operator would write it, for error messages: type and value,
/// shortened.
pub(crate) fn show(value: &AttributeValue) -> String {
    let (kind, text) = match value {
        AttributeValue::N(v) => ("N", v.clone()),
        AttributeValue::S(v) => ("S", format!("{v:?}")),
        AttributeValue::Bool(v) => ("BOOL", v.to_string()),
        AttributeValue::Null(_) => ("NULL", "null".to_owned()),
        AttributeValue::B(v) => ("B", format!("{} bytes", v.as_ref().len())),
        other => ("?", format!("{other:?}")),
    };
    let short: String = text.chars().take(64).collect();
    let ellipsis = if short.len() < text.len() { "…" } else { "" };
    format!("{kind} {short}{ellipsis}")
}

/// What is wrong with an item, in a way no writer of this crate or the Go package leaves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Malformed {
    /// The fencing counter is not a whole number from 0 to [`FENCE_LIMIT`].
    Fence(String),
    /// A holder's token with no usable expiry (missing, or not a number).
    Expiry(Option<String>),
    /// A holder's token that is not a string: an item of another writer, which every
    /// acquisition refuses (the condition tests the type).
    Token(String),
}

/// What a lease item says, decoded.
#[derive(Clone, Debug, Default)]
pub(crate) struct Decoded {
    /// The holder's token exactly as stored (it may break the rules of tokens this crate
    /// issues: see [`stored_token`](lease_core::backend::stored_token)).
    pub(crate) token: Option<LeaseToken>,
    /// The expiry in milliseconds: `lease_expires_at_ms` when present, else the end of the Go
    /// package's whole `lease_expires_at` second (one second stricter than Go's own rule).
    pub(crate) expires_ms: Option<u64>,
    /// The fencing counter, when it is a valid one.
    pub(crate) fencing: Option<u64>,
    /// Whether the item has a fencing counter attribute at all (valid or not).
    pub(crate) fence_present: bool,
    pub(crate) owner: Option<String>,
    /// The value the holder published (absent on Go items).
    pub(crate) value: Option<String>,
    pub(crate) acquired_ms: Option<u64>,
    /// The id of the request that last changed the holder.
    pub(crate) request: Option<String>,
    /// What is wrong with the item, if anything.
    pub(crate) malformed: Option<Malformed>,
}

impl Decoded {
    pub(crate) fn from_item(names: &AttributeNames, item: &Item) -> Self {
        let token = match item.get(names.token.as_str()) {
            Some(AttributeValue::S(t)) => Some(lease_core::backend::stored_token(t.as_str())),
            _ => None,
        };
        let seconds = get_seconds(item, names.expires_at.as_str()).map(|s| s.saturating_mul(1000));
        // Go writes whole seconds rounded down: its holder may run to the end of that second.
        let expires_ms = get_u64(item, names.expires_at_ms.as_str())
            .or_else(|| seconds.filter(|s| *s > 0).map(|s| s.saturating_add(1000)))
            .or(seconds);
        let fence = item.get(names.fencing.as_str());
        let fencing = get_u64(item, names.fencing.as_str()).filter(|f| *f <= FENCE_LIMIT);
        let mut malformed = None;
        if let (Some(raw), None) = (fence, fencing) {
            malformed = Some(Malformed::Fence(show(raw)));
        } else if let Some(raw) = item
            .get(names.token.as_str())
            .filter(|raw| !matches!(raw, AttributeValue::S(_)))
        {
            malformed = Some(Malformed::Token(show(raw)));
        } else if token.is_some() && seconds.is_none() {
            // Every writer (Go's and ours) writes the seconds; the acquire condition reads them,
            // so without them the lease never expires, whatever else the item says.
            malformed = Some(Malformed::Expiry(
                item.get(names.expires_at.as_str()).map(show),
            ));
        }
        Self {
            token,
            expires_ms,
            fencing,
            fence_present: fence.is_some(),
            owner: get_str(item, names.owner.as_str()).map(str::to_owned),
            value: get_str(item, names.value.as_str()).map(str::to_owned),
            acquired_ms: get_u64(item, names.acquired_at.as_str()),
            request: get_str(item, names.request.as_str()).map(str::to_owned),
            malformed,
        }
    }

    /// Whether the item is a lease record at all (an item holding only a fenced value is not;
    /// one whose holder token is of the wrong type is, a corrupt one).
    pub(crate) fn is_lease(&self) -> bool {
        self.token.is_some()
            || self.fence_present
            || matches!(self.malformed, Some(Malformed::Token(_)))
    }

    /// What every acquisition refuses this item for, or `None` when it is a usable record: the
    /// one classifier of corrupt items, which acquire, inspect and listing answer by.
    pub(crate) fn corruption(&self) -> Option<Malformed> {
        match &self.malformed {
            Some(malformed) => Some(malformed.clone()),
            None if self.fencing.is_some_and(|f| f >= FENCE_LIMIT) => {
                Some(Malformed::Fence(format!("N {FENCE_LIMIT} (exhausted)")))
            }
            None => None,
        }
    }

    /// The holder, if the item has an owner token.
    pub(crate) fn holder(&self) -> Option<Holder> {
        let token = self.token.clone()?;
        let mut holder = Holder::new().with_token(token);
        if let Some(owner) = &self.owner {
            holder = holder.with_owner(owner.clone());
        }
        if let Some(value) = &self.value {
            holder = holder.with_value(value.clone());
        }
        if let Some(ms) = self.expires_ms {
            holder = holder.with_expires_at(from_millis(ms));
        }
        if let Some(ms) = self.acquired_ms {
            holder = holder.with_acquired_at(from_millis(ms));
        }
        if let Some(f) = self.fencing {
            holder = holder.with_fencing(lease_core::backend::fencing_token(f));
        }
        Some(holder)
    }

    /// The record; an item with no (valid) fencing counter reports no fencing token (raw 0,
    /// which no acquisition issues: the counter is seeded from the clock).
    pub(crate) fn record(&self, key: LeaseKey) -> LeaseRecord {
        lease_core::backend::new_record(
            key,
            self.holder(),
            lease_core::backend::fencing_token(self.fencing.unwrap_or(NO_COUNTER)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(pairs: &[(&str, AttributeValue)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn seconds_round_up_never_earlier() {
        assert_eq!(seconds_up(1_000), 1);
        assert_eq!(seconds_up(1_001), 2);
        assert_eq!(seconds_up(0), 0);
        assert_eq!(seconds_up(u64::MAX), u64::MAX.div_ceil(1000));
    }

    #[test]
    fn expiries_read_as_the_acquire_condition_compares_them() {
        let at = |v: &str| get_seconds(&item(&[("e", AttributeValue::N(v.into()))]), "e");
        assert_eq!(at("17"), Some(17));
        assert_eq!(at("-5"), Some(0));
        assert_eq!(at("-0.5"), Some(0));
        assert_eq!(at("1.5"), Some(2));
        assert_eq!(at("2.000"), Some(2));
        assert_eq!(at("1e3"), None);
        assert_eq!(at("99999999999999999999"), None);
        assert_eq!(get_seconds(&item(&[("e", s("7"))]), "e"), None);
    }

    #[test]
    fn go_items_are_read_in_seconds() {
        let names = AttributeNames::default();
        let go = item(&[
            ("lease_token", s("go-token")),
            ("lease_expires_at", n(1_700_000_000)),
        ]);
        let d = Decoded::from_item(&names, &go);
        // The end of that second: Go's caller may hold it until then (issue 23).
        assert_eq!(d.expires_ms, Some(1_700_000_001_000));
        assert_eq!(d.fencing, None);
        assert_eq!(d.malformed, None);
        assert_eq!(
            d.record(LeaseKey::new("k").unwrap_or_else(|_| unreachable!()))
                .fencing_token(),
            None
        );
    }

    #[test]
    fn malformed_counters_and_expiries_are_named() {
        let names = AttributeNames::default();
        for bad in [
            "-5",
            "1.5",
            "18446744073709551615",
            "12345678901234567890123456789012345678",
        ] {
            let d = Decoded::from_item(
                &names,
                &item(&[("lease_fence", AttributeValue::N(bad.into()))]),
            );
            assert_eq!(
                d.malformed,
                Some(Malformed::Fence(format!("N {bad}"))),
                "{bad}"
            );
        }
        let d = Decoded::from_item(&names, &item(&[("lease_fence", s("7"))]));
        assert_eq!(d.malformed, Some(Malformed::Fence("S \"7\"".into())));
        let d = Decoded::from_item(&names, &item(&[("lease_token", s("t"))]));
        assert_eq!(d.malformed, Some(Malformed::Expiry(None)));
        let d = Decoded::from_item(
            &names,
            &item(&[("lease_token", s("t")), ("lease_expires_at", s("soon"))]),
        );
        assert_eq!(
            d.malformed,
            Some(Malformed::Expiry(Some("S \"soon\"".into())))
        );
        let odd = "x\n".repeat(300);
        let d = Decoded::from_item(
            &names,
            &item(&[("lease_token", s(&odd)), ("lease_expires_at", n(5))]),
        );
        assert_eq!(
            d.token.as_ref().map(LeaseToken::as_str),
            Some(odd.as_str()),
            "any stored token is kept"
        );
    }
}

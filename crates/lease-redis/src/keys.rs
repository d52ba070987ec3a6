//! The names of the keys and the channel one prefix uses, all in one hash slot.

use lease_core::{LeaseError, LeaseKey};

/// Separates a key's partition from its sort key in key names and wake-up payloads: a
/// [`LeaseKey`] holds no control character, so the split is unambiguous.
const SEP: char = '\u{1f}';

/// Longest prefix accepted, in bytes.
const MAX_PREFIX_BYTES: usize = 64;

/// The key names of one prefix. Every name starts with `{prefix}`: Redis Cluster hashes only
/// the text between the braces, so a lease, its partition index, its fenced value and the
/// prefix's incarnation record share one hash slot, and each script touches one slot.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// The prefix as the caller named it.
    pub(crate) prefix: String,
    /// `{prefix}`, the hash tag every name starts with.
    tag: String,
    /// The wake-up channel: `{prefix}:changes`.
    pub(crate) channel: String,
    /// The incarnation record: `{prefix}:meta`.
    pub(crate) meta: String,
}

impl Keys {
    /// Checks `prefix`: 1 to 64 bytes of ASCII letters, digits, `_`, `-`, `.`, `:`, `/`
    /// (no braces, which would change the hash tag).
    pub(crate) fn parse(prefix: &str) -> Result<Self, LeaseError> {
        if prefix.is_empty() || prefix.len() > MAX_PREFIX_BYTES {
            return Err(LeaseError::invalid(
                "key prefix",
                format!(
                    "must be 1 to {MAX_PREFIX_BYTES} bytes, got {}",
                    prefix.len()
                ),
            ));
        }
        if let Some(c) = prefix
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "_-.:/".contains(*c)))
        {
            return Err(LeaseError::invalid(
                "key prefix",
                format!(
                    "holds {c:?}; use ASCII letters, digits, `_`, `-`, `.`, `:` and `/` (the \
                     prefix becomes the hash tag `{{prefix}}` of every key)"
                ),
            ));
        }
        let tag = format!("{{{prefix}}}");
        Ok(Self {
            prefix: prefix.to_owned(),
            channel: format!("{tag}:changes"),
            meta: format!("{tag}:meta"),
            tag,
        })
    }

    /// The payload naming `key` on the wake-up channel (and the suffix of its key names).
    pub(crate) fn payload(key: &LeaseKey) -> String {
        format!("{}{SEP}{}", key.partition(), key.sort().unwrap_or(""))
    }

    /// The lease hash of `key`: `{prefix}:l:<partition>US<sort>`.
    pub(crate) fn lease(&self, key: &LeaseKey) -> String {
        format!("{}:l:{}", self.tag, Self::payload(key))
    }

    /// Where the lease hashes of `partition` start: `{prefix}:l:<partition>US`.
    pub(crate) fn lease_partition(&self, partition: &str) -> String {
        format!("{}:l:{partition}{SEP}", self.tag)
    }

    /// The set of sort keys of `partition` (`""` for a key without one):
    /// `{prefix}:i:<partition>`.
    pub(crate) fn index(&self, partition: &str) -> String {
        format!("{}:i:{partition}", self.tag)
    }

    /// The fenced value `name`: `{prefix}:v:<partition>US<sort>`.
    pub(crate) fn value(&self, name: &LeaseKey) -> String {
        format!("{}:v:{}", self.tag, Self::payload(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_share_the_hash_tag() {
        let keys = Keys::parse("app:leases").unwrap_or_else(|e| panic!("{e}"));
        let key = LeaseKey::with_sort_key("jobs", "a").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(keys.lease(&key), "{app:leases}:l:jobs\u{1f}a");
        assert_eq!(keys.index("jobs"), "{app:leases}:i:jobs");
        assert_eq!(keys.meta, "{app:leases}:meta");
        assert_eq!(keys.channel, "{app:leases}:changes");
        assert!(keys.lease(&key).starts_with(&keys.lease_partition("jobs")));
        assert!(Keys::parse("").is_err());
        assert!(Keys::parse("a}b").is_err());
        assert!(Keys::parse("a b").is_err());
    }
}

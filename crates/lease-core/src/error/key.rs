//! Validated lease keys.

use std::fmt;

use crate::LeaseError;

/// Longest partition key or sort key accepted, in bytes of UTF-8.
///
/// DynamoDB allows 2048 bytes for a partition key and 1024 for a sort key; the file backend turns a
/// key into a file name. 1024 bytes for each part keeps every backend inside its limits.
pub const MAX_KEY_PART_BYTES: usize = 1024;

/// The name of a lease: a partition key plus an optional sort key.
///
/// Both parts are non-empty UTF-8 strings of at most [`MAX_KEY_PART_BYTES`] bytes with no control
/// characters (so a key is always safe to print, log and put in a file name encoding). Backends may
/// reject keys that break a stricter limit of their own, always with
/// [`LeaseError::InvalidInput`].
///
/// ```
/// use lease_core::LeaseKey;
///
/// let key = LeaseKey::new("regenerate-sitemap")?;
/// assert_eq!(key.partition(), "regenerate-sitemap");
/// assert_eq!(key.sort(), None);
///
/// let keyed = LeaseKey::with_sort_key("tenant-42", "nightly-export")?;
/// assert_eq!(keyed.to_string(), "tenant-42#nightly-export");
///
/// assert!(LeaseKey::new("").unwrap_err().is_invalid_input());
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseKey {
    partition: String,
    sort: Option<String>,
}

impl LeaseKey {
    /// A key with only a partition key.
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] if the key is empty, too long or holds control characters.
    pub fn new(partition: impl Into<String>) -> Result<Self, LeaseError> {
        let partition = partition.into();
        validate_part("partition key", &partition)?;
        Ok(Self {
            partition,
            sort: None,
        })
    }

    /// A key with a partition key and a sort key.
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] if either part is empty, too long or holds control characters.
    pub fn with_sort_key(
        partition: impl Into<String>,
        sort: impl Into<String>,
    ) -> Result<Self, LeaseError> {
        let partition = partition.into();
        let sort = sort.into();
        validate_part("partition key", &partition)?;
        validate_part("sort key", &sort)?;
        Ok(Self {
            partition,
            sort: Some(sort),
        })
    }

    /// The partition key.
    pub fn partition(&self) -> &str {
        &self.partition
    }

    /// The sort key, if any.
    pub fn sort(&self) -> Option<&str> {
        self.sort.as_deref()
    }
}

fn validate_part(field: &'static str, value: &str) -> Result<(), LeaseError> {
    if value.is_empty() {
        return Err(LeaseError::invalid(field, "must not be empty"));
    }
    if value.len() > MAX_KEY_PART_BYTES {
        return Err(LeaseError::invalid(
            field,
            format!(
                "is {} bytes long; the limit is {MAX_KEY_PART_BYTES}",
                value.len()
            ),
        ));
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(LeaseError::invalid(
            field,
            format!("must not contain control characters (found {c:?})"),
        ));
    }
    Ok(())
}

impl fmt::Display for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.sort {
            Some(sort) => write!(f, "{}#{}", self.partition, sort),
            None => f.write_str(&self.partition),
        }
    }
}

impl fmt::Debug for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeaseKey({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_empty_long_and_control_characters() {
        assert!(LeaseKey::new("").is_err());
        assert!(LeaseKey::new("a".repeat(MAX_KEY_PART_BYTES + 1)).is_err());
        assert!(LeaseKey::new("a".repeat(MAX_KEY_PART_BYTES)).is_ok());
        assert!(LeaseKey::new("nul\0byte").is_err());
        assert!(LeaseKey::new("new\nline").is_err());
        assert!(LeaseKey::with_sort_key("ok", "").is_err());
        assert!(LeaseKey::with_sort_key("ok", "ü/..").is_ok());
    }

    #[test]
    fn error_names_the_field() {
        let err = LeaseKey::with_sort_key("ok", "").unwrap_err();
        assert!(err.to_string().contains("sort key"), "{err}");
    }
}

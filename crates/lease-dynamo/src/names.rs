//! Attribute names of the lease item, with the Go package's defaults.

use lease_core::LeaseError;

/// The attribute names of a lease item: a plain struct, one field per attribute, whose
/// [`Default`] is the Go `lease` package's names. Rename what your table uses and hand it to
/// [`DynamoLeasesBuilder::with_attribute_names`](crate::DynamoLeasesBuilder::with_attribute_names);
/// [`build`](crate::DynamoLeasesBuilder::build) checks that every name is non-empty, at most
/// 255 bytes, and distinct from the others.
///
/// ```
/// use lease_dynamo::AttributeNames;
///
/// // A table shared with a Go service configured with
/// // WithKeyAttributeNames("id", "range") and WithLeaseAttributeNames("owner_token", ...).
/// let mut names = AttributeNames::default();
/// names.partition_key = "id".into();
/// names.sort_key = "range".into();
/// names.token = "owner_token".into();
/// assert_eq!(names.expires_at, "lease_expires_at"); // the rest keep Go's names
/// ```
///
/// The struct is `#[non_exhaustive]` (a later version may store one more attribute), so it is
/// built from [`Default`] and its fields assigned, as above.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttributeNames {
    /// Partition key (string, `HASH`; Go's `pk`).
    pub partition_key: String,
    /// Sort key (string, `RANGE`; Go's `sk`).
    pub sort_key: String,
    /// The holder's owner token (string; Go's `lease_token`).
    pub token: String,
    /// Expiry in Unix seconds, rounded up (number; Go's `lease_expires_at`, in Go's unit).
    pub expires_at: String,
    /// The same expiry in Unix milliseconds (number; `lease_expires_at_ms`, absent on items
    /// the Go package wrote).
    pub expires_at_ms: String,
    /// DynamoDB TTL: epoch seconds after which the item may be deleted (number; Go's `ttl`).
    pub ttl: String,
    /// The fencing counter (number; `lease_fence`).
    pub fencing: String,
    /// A human description of the holder (string; `lease_owner`).
    pub owner: String,
    /// Acquisition time, Unix milliseconds (number; `lease_acquired_at`).
    pub acquired_at: String,
    /// The id of the acquire or release that last changed the holder (string;
    /// `lease_request`): how a retry recognises its own write.
    pub request: String,
    /// The value a holder published with
    /// [`AcquireOptions::with_value`](lease_core::AcquireOptions::with_value) (string;
    /// `lease_value`; absent on Go items).
    pub value: String,
    /// A [`FencedValues`](lease_core::FencedValues) value (binary; `fenced_value`).
    pub fenced_value: String,
    /// The highest fencing token that wrote or read the fenced value (number; `value_fence`).
    pub value_fence: String,
}

impl Default for AttributeNames {
    /// The Go package's names (`pk`, `sk`, `lease_token`, `lease_expires_at`, `ttl`) and this
    /// crate's additions (`lease_expires_at_ms`, `lease_fence`, `lease_owner`,
    /// `lease_acquired_at`, `lease_request`, `lease_value`, `fenced_value`, `value_fence`).
    fn default() -> Self {
        Self {
            partition_key: "pk".into(),
            sort_key: "sk".into(),
            token: "lease_token".into(),
            expires_at: "lease_expires_at".into(),
            expires_at_ms: "lease_expires_at_ms".into(),
            ttl: "ttl".into(),
            fencing: "lease_fence".into(),
            owner: "lease_owner".into(),
            acquired_at: "lease_acquired_at".into(),
            request: "lease_request".into(),
            value: "lease_value".into(),
            fenced_value: "fenced_value".into(),
            value_fence: "value_fence".into(),
        }
    }
}

/// DynamoDB's limit on attribute names that are part of a key, in bytes.
const MAX_KEY_ATTRIBUTE_NAME_BYTES: usize = 255;

impl AttributeNames {
    /// Every attribute with its field name, for messages.
    fn all(&self) -> [(&'static str, &str); 13] {
        [
            ("partition_key", &self.partition_key),
            ("sort_key", &self.sort_key),
            ("token", &self.token),
            ("expires_at", &self.expires_at),
            ("expires_at_ms", &self.expires_at_ms),
            ("ttl", &self.ttl),
            ("fencing", &self.fencing),
            ("owner", &self.owner),
            ("acquired_at", &self.acquired_at),
            ("request", &self.request),
            ("value", &self.value),
            ("fenced_value", &self.fenced_value),
            ("value_fence", &self.value_fence),
        ]
    }

    /// Checks that every name is non-empty, at most 255 bytes, and distinct from the others.
    pub(crate) fn validate(&self) -> Result<(), LeaseError> {
        let all = self.all();
        for (i, (what, name)) in all.iter().enumerate() {
            if name.is_empty() {
                return Err(LeaseError::invalid(
                    "attribute name",
                    format!("the {what} attribute name is empty"),
                ));
            }
            if name.len() > MAX_KEY_ATTRIBUTE_NAME_BYTES {
                return Err(LeaseError::invalid(
                    "attribute name",
                    format!("the {what} attribute name is longer than 255 bytes"),
                ));
            }
            if let Some((other, _)) = all[..i].iter().find(|(_, n)| n == name) {
                return Err(LeaseError::invalid(
                    "attribute name",
                    format!("the {what} and {other} attributes are both named `{name}`"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_for_emptiness_length_and_clashes() {
        assert!(AttributeNames::default().validate().is_ok());
        let empty = AttributeNames {
            fencing: String::new(),
            ..AttributeNames::default()
        };
        let e = empty.validate().unwrap_err();
        assert!(
            e.to_string().contains("fencing attribute name is empty"),
            "{e}"
        );
        let long = AttributeNames {
            sort_key: "x".repeat(256),
            ..AttributeNames::default()
        };
        assert!(long.validate().is_err());
        let clash = AttributeNames {
            value_fence: "pk".into(),
            ..AttributeNames::default()
        };
        let e = clash.validate().unwrap_err();
        assert!(
            e.to_string().contains("value_fence and partition_key"),
            "{e}"
        );
    }
}

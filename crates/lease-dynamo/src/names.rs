//! Attribute names of the lease item, with the Go package's defaults.

use lease_core::LeaseError;

/// The attribute names of a lease item.
///
/// Defaults match the Go `lease` package: key attributes `pk` and `sk`, lease attributes
/// `lease_token`, `lease_expires_at` (Unix seconds, as Go reads and writes it) and `ttl`; this
/// crate adds `lease_expires_at_ms` (the same expiry in milliseconds), `lease_fence` (the fencing
/// counter), `lease_owner` (a human description of the holder), `lease_acquired_at`,
/// `lease_request` (which request last changed the holder: how a retry recognises its own write),
/// `lease_value` (the value a holder published with its acquisition, absent on Go items), and
/// the two attributes of [`FencedValues`](lease_core::FencedValues): `fenced_value` (the
/// value, binary) and `value_fence` (the highest fencing token that touched it).
///
/// ```
/// use lease_dynamo::AttributeNames;
/// let names = AttributeNames::default().with_token("owner_token");
/// assert_eq!(names.token(), "owner_token");
/// assert_eq!(names.partition_key(), "pk");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttributeNames {
    partition_key: String,
    sort_key: String,
    token: String,
    expires_at: String,
    expires_at_ms: String,
    ttl: String,
    fencing: String,
    owner: String,
    acquired_at: String,
    request: String,
    fenced_value: String,
    value_fence: String,
    value: String,
}

impl Default for AttributeNames {
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
            fenced_value: "fenced_value".into(),
            value_fence: "value_fence".into(),
            value: "lease_value".into(),
        }
    }
}

macro_rules! name_accessors {
    ($($field:ident, $with:ident, $doc:literal;)*) => {
        impl AttributeNames {
            $(
                #[doc = concat!("The ", $doc, " attribute.")]
                pub fn $field(&self) -> &str {
                    &self.$field
                }

                #[doc = concat!("Renames the ", $doc, " attribute.")]
                pub fn $with(mut self, name: impl Into<String>) -> Self {
                    self.$field = name.into();
                    self
                }
            )*

            fn all(&self) -> [(&'static str, &str); 13] {
                [$((stringify!($field), self.$field.as_str())),*]
            }
        }
    };
}

name_accessors! {
    partition_key, with_partition_key, "partition key (string, `HASH`)";
    sort_key, with_sort_key, "sort key (string, `RANGE`)";
    token, with_token, "owner token (string)";
    expires_at, with_expires_at, "expiry (number, Unix seconds rounded up: the Go package's attribute)";
    expires_at_ms, with_expires_at_ms, "precise expiry (number, Unix milliseconds; absent on items the Go package wrote)";
    ttl, with_ttl, "DynamoDB TTL (number, epoch seconds)";
    fencing, with_fencing, "fencing counter (number)";
    owner, with_owner, "owner description (string)";
    acquired_at, with_acquired_at, "acquisition time (number, epoch milliseconds)";
    request, with_request, "last request (string: the id of the acquire or release that last changed the holder)";
    fenced_value, with_fenced_value, "fenced value (binary; see `FencedValues`)";
    value_fence, with_value_fence, "value fence (number: the highest fencing token that wrote or read the fenced value)";
    value, with_value, "published value (string: what the holder published with `AcquireOptions::with_value`; absent on Go items)";
}

/// DynamoDB's limit on attribute names that are part of a key, in bytes.
const MAX_KEY_ATTRIBUTE_NAME_BYTES: usize = 255;

impl AttributeNames {
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

//! Condition and update expressions, and binding only the placeholders an expression uses
//! (DynamoDB refuses a request that defines a placeholder it does not use).

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;

use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use lease_core::LeaseKey;

use crate::item::{FENCE_LIMIT, n, s};
use crate::{AttributeNames, DynamoLeases};

/// A fencing counter that is safe to increment: absent, or a number from 0 below the limit.
/// (DynamoDB conditions cannot test that a number is whole; a fractional counter is caught in
/// the reply and the acquisition undone.)
pub(crate) const FENCE_USABLE: &str = "(attribute_not_exists(#fence) OR (attribute_type(#fence, :number) AND #fence >= :zero AND #fence < :fence_limit))";

/// The key is free for a contender whose clock, minus the skew allowance, reads `cutoff`:
/// nobody holds it, or the holder's expiry has passed. Items the Go package wrote carry only
/// whole seconds (`#expires`), rounded down, and are taken one second after Go's own rule
/// would (`:cutoff_s` is the contender's second minus one); items this crate wrote carry the
/// milliseconds too, and `#expires` is their ceiling, so the seconds rule never frees them
/// early and the milliseconds rule frees them on time.
pub(crate) const KEY_FREE: &str = "(attribute_not_exists(#token) OR #expires <= :cutoff_s OR (#expires_ms <= :cutoff_ms AND #expires <= :cutoff_s_up))";

/// A holder token an acquisition may replace: none, or a string. A token of another type is a
/// corrupt item (see `Decoded::corruption`), refused like an unusable counter, never taken over
/// whatever its expiry says.
pub(crate) const TOKEN_USABLE: &str =
    "(attribute_not_exists(#token) OR attribute_type(#token, :string))";

/// The caller's tenure: its token and its fencing counter.
pub(crate) const TENURE: &str = "#token = :token AND #fence = :fence";

/// A tenure the store gave no usable fencing counter (an item the Go package wrote, or one whose
/// counter is broken): the token alone names it.
pub(crate) const TENURE_UNFENCED: &str = "#token = :token AND (attribute_not_exists(#fence) OR NOT (attribute_type(#fence, :number) AND #fence >= :zero AND #fence <= :fence_limit))";

/// Whether `expression` uses `placeholder` (a whole word: `#expires` is not in `#expires_ms`).
pub(crate) fn mentions(expression: &str, placeholder: &str) -> bool {
    expression.match_indices(placeholder).any(|(at, _)| {
        expression[at + placeholder.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'))
    })
}

/// `#placeholder` to attribute name.
pub(crate) type Placeholders<'a> = Vec<(&'static str, &'a str)>;
/// `:placeholder` to value.
pub(crate) type Values = Vec<(&'static str, AttributeValue)>;

/// The placeholders of the lease attributes, and the constants conditions compare with.
pub(crate) fn common(names: &AttributeNames) -> (Placeholders<'_>, Values) {
    let placeholders = vec![
        ("#token", names.token.as_str()),
        ("#expires", names.expires_at.as_str()),
        ("#expires_ms", names.expires_at_ms.as_str()),
        ("#acquired", names.acquired_at.as_str()),
        ("#fence", names.fencing.as_str()),
        ("#owner", names.owner.as_str()),
        ("#request", names.request.as_str()),
        ("#ttl", names.ttl.as_str()),
        ("#value", names.value.as_str()),
    ];
    let constants = vec![
        (":number", s("N")),
        (":string", s("S")),
        (":zero", n(0)),
        (":one", n(1)),
        (":fence_limit", n(FENCE_LIMIT)),
    ];
    (placeholders, constants)
}

/// Sets `condition` and `update` on `request`, defining exactly the placeholders they use.
pub(crate) fn bind(
    mut request: UpdateItemFluentBuilder,
    condition: &str,
    update: &str,
    names: &[(&'static str, &str)],
    values: Values,
) -> UpdateItemFluentBuilder {
    let used = |p: &str| mentions(condition, p) || mentions(update, p);
    for (placeholder, name) in names {
        if used(placeholder) {
            request = request.expression_attribute_names(*placeholder, *name);
        }
    }
    for (placeholder, value) in values {
        if used(placeholder) {
            request = request.expression_attribute_values(placeholder, value);
        }
    }
    request
        .condition_expression(condition)
        .update_expression(update)
}

impl DynamoLeases {
    /// An `UpdateItem` on `key`'s item with `condition` and `update`, the lease placeholders and
    /// `values` bound where used, and the old item returned (`ALL_OLD`) when the condition fails.
    pub(crate) fn conditional_update(
        &self,
        key: &LeaseKey,
        condition: &str,
        update: &str,
        values: Values,
    ) -> UpdateItemFluentBuilder {
        let inner = &self.inner;
        let (names, mut all) = common(&inner.names);
        all.extend(values);
        let request = inner
            .client
            .update_item()
            .table_name(&inner.table)
            .set_key(Some(self.key_item(key)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        bind(request, condition, update, &names, all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_whole_words() {
        assert!(mentions("#expires <= :x", "#expires"));
        assert!(!mentions("#expires_ms <= :x", "#expires"));
        assert!(mentions("#expires_ms <= :x AND #expires > :y", "#expires"));
        assert!(mentions("SET #a = :v", ":v"));
        assert!(!mentions("SET #a = :value", ":v"));
    }
}

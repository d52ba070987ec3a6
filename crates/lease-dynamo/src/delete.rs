//! Delete: one conditional `DeleteItem` on the state the caller names; a second, conditional
//! `UpdateItem` only when a fenced value shares the item and must outlive the lease.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::delete_item::builders::DeleteItemFluentBuilder;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use aws_smithy_runtime_api::http::Response as HttpResponse;
use lease_core::{FencingToken, LeaseError, LeaseKey, LeaseToken, NotOwnedReason};
use tracing::Instrument;

use crate::DynamoLeases;
use crate::error::backend_error_in;
use crate::expr::{TENURE, TENURE_UNFENCED, Values, common, mentions};
use crate::item::{Decoded, Item, n, s};
use crate::retry::{Failed, with_retries};

/// A free record at the caller's fencing counter.
const FREE_AT: &str = "attribute_not_exists(#token) AND #fence = :fence";

/// A free record whose counter is there but unusable (inspect reports it with no fencing
/// token).
const FREE_UNFENCED: &str = "attribute_not_exists(#token) AND attribute_exists(#fence) AND NOT (attribute_type(#fence, :number) AND #fence >= :zero AND #fence <= :fence_limit)";

/// No fenced value shares the item: deleting it takes nothing but the lease.
const NO_FENCED_VALUE: &str = "attribute_not_exists(#vfence)";

/// Every lease attribute: removing them all leaves an item that is not a lease (and that TTL
/// never deletes), holding only a fenced value.
const REMOVE_LEASE: &str =
    "REMOVE #token, #expires, #expires_ms, #acquired, #fence, #owner, #value, #request, #ttl";

/// The condition naming the state `(holder, fencing)`, as release names a tenure.
fn state_condition(holder: Option<&LeaseToken>, fencing: Option<FencingToken>) -> &'static str {
    match (holder, fencing.is_none()) {
        (Some(_), false) => TENURE,
        (Some(_), true) => TENURE_UNFENCED,
        (None, false) => FREE_AT,
        (None, true) => FREE_UNFENCED,
    }
}

/// What a refused `DeleteItem` leaves to do, decided from the item it found (`ALL_OLD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The item is in the named state but holds a fenced value too: remove the lease
    /// attributes only.
    KeepFencedValue,
    /// Not in the named state: nothing is deleted.
    NotOwned(NotOwnedReason),
}

/// Whether `old` is in the state `(holder, fencing)`, read as the conditions read it.
fn in_state(old: &Decoded, holder: Option<&LeaseToken>, fencing: Option<FencingToken>) -> bool {
    let fencing_matches = match fencing {
        None => old.fencing.is_none() && (holder.is_some() || old.fence_present),
        Some(fencing) => old.fencing == Some(fencing.get()),
    };
    old.token.as_ref() == holder && old.is_lease() && fencing_matches
}

/// Why a conditional delete of `(holder, fencing)` failed on `old`. An item that is no lease
/// (gone, or holding only a fenced value) is `Missing`, also when this call's own earlier
/// attempt removed it and its reply was lost: nothing in a deleted item can prove whose delete
/// it was, and a write counts as this call's own only when the store proves it.
fn refusal(old: &Decoded, holder: Option<&LeaseToken>, fencing: Option<FencingToken>) -> Refusal {
    if !old.is_lease() {
        return Refusal::NotOwned(NotOwnedReason::Missing);
    }
    if in_state(old, holder, fencing) {
        return Refusal::KeepFencedValue;
    }
    Refusal::NotOwned(match (&old.token, holder) {
        (None, Some(_)) => NotOwnedReason::Missing,
        _ => NotOwnedReason::TakenOver,
    })
}

impl DynamoLeases {
    /// One conditional `DeleteItem`; see [`LeaseBackend::delete`](lease_core::LeaseBackend).
    pub(crate) async fn delete_inner(
        &self,
        key: &LeaseKey,
        holder: Option<&LeaseToken>,
        fencing: Option<FencingToken>,
    ) -> Result<(), LeaseError> {
        self.check_input(key, None)?;
        let inner = &self.inner;
        let span = tracing::debug_span!(
            "lease_dynamo.delete",
            table = %inner.table,
            %key,
            token = holder.map(tracing::field::display),
            fencing = fencing.map(FencingToken::get),
        );
        async {
            let state = state_condition(holder, fencing);
            let values = state_values(holder, fencing);
            let condition = format!("{state} AND {NO_FENCED_VALUE}");
            let request = self.conditional_delete(key, &condition, values.clone());
            let result = with_retries(&inner.retry, &*inner.clock, None, "DeleteItem", || {
                request.clone().send()
            })
            .await;
            let (error, uncertain, attempts) = match result {
                Ok(_) => {
                    tracing::debug!("lease record deleted");
                    return Ok(());
                }
                Err(Failed {
                    error,
                    uncertain,
                    attempts,
                }) => (error, uncertain, attempts),
            };
            let old = self.refused_delete(error)?;
            let old = Decoded::from_item(&inner.names, &old);
            match refusal(&old, holder, fencing) {
                Refusal::KeepFencedValue => self.strip_lease(key, state, values).await,
                Refusal::NotOwned(reason) => {
                    if uncertain && reason == NotOwnedReason::Missing {
                        tracing::info!(
                            attempts,
                            "delete found the item gone after a lost reply; reported as not \
                             owned, since nothing proves the delete was this call's"
                        );
                    } else {
                        tracing::debug!(%reason, "delete refused");
                    }
                    Err(LeaseError::not_owned(key.clone(), reason))
                }
            }
        }
        .instrument(span)
        .await
    }

    /// The item is in the named state and holds a fenced value, which must outlive the lease:
    /// one conditional `UpdateItem` removes the lease attributes (and the TTL, so that the
    /// value is never collected with them), conditioned on the same state.
    async fn strip_lease(
        &self,
        key: &LeaseKey,
        state: &str,
        values: Values,
    ) -> Result<(), LeaseError> {
        let inner = &self.inner;
        let request = self.conditional_update(key, state, REMOVE_LEASE, values);
        let result = with_retries(&inner.retry, &*inner.clock, None, "UpdateItem", || {
            request.clone().send()
        })
        .await;
        let error = match result {
            Ok(_) => {
                tracing::debug!("lease attributes removed; the fenced value stays");
                return Ok(());
            }
            Err(Failed { error, .. }) => error,
        };
        let old = self.refused_item(error)?;
        let old = Decoded::from_item(&inner.names, &old);
        let reason = if old.is_lease() {
            NotOwnedReason::TakenOver
        } else {
            NotOwnedReason::Missing
        };
        tracing::debug!(%reason, "delete refused");
        Err(LeaseError::not_owned(key.clone(), reason))
    }

    /// A `DeleteItem` on `key`'s item with `condition`, the lease placeholders, `#vfence` and
    /// `values` bound where used, and the old item returned (`ALL_OLD`) when the condition
    /// fails.
    fn conditional_delete(
        &self,
        key: &LeaseKey,
        condition: &str,
        values: Values,
    ) -> DeleteItemFluentBuilder {
        let inner = &self.inner;
        let (mut names, mut all) = common(&inner.names);
        names.push(("#vfence", inner.names.value_fence.as_str()));
        all.extend(values);
        let mut request = inner
            .client
            .delete_item()
            .table_name(&inner.table)
            .set_key(Some(self.key_item(key)))
            .condition_expression(condition)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (placeholder, name) in names {
            if mentions(condition, placeholder) {
                request = request.expression_attribute_names(placeholder, name);
            }
        }
        for (placeholder, value) in all {
            if mentions(condition, placeholder) {
                request = request.expression_attribute_values(placeholder, value);
            }
        }
        request
    }

    /// The item a failed `DeleteItem` condition returned (empty when there was no item), or,
    /// when the request failed otherwise, that failure as a [`LeaseError::Backend`].
    fn refused_delete(
        &self,
        err: SdkError<DeleteItemError, HttpResponse>,
    ) -> Result<Item, LeaseError> {
        match err.as_service_error() {
            Some(DeleteItemError::ConditionalCheckFailedException(e)) => {
                Ok(e.item().cloned().unwrap_or_default())
            }
            _ => Err(backend_error_in("DeleteItem", &self.error_context(), err)),
        }
    }
}

/// The values the state conditions compare with.
fn state_values(holder: Option<&LeaseToken>, fencing: Option<FencingToken>) -> Values {
    let mut values = vec![(":fence", n(fencing.map_or(0, FencingToken::get)))];
    if let Some(token) = holder {
        values.push((":token", s(token.as_str())));
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AttributeNames;
    use crate::item::Item;

    fn decoded(pairs: &[(&str, aws_sdk_dynamodb::types::AttributeValue)]) -> Decoded {
        let item: Item = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        Decoded::from_item(&AttributeNames::default(), &item)
    }

    fn token(t: &str) -> LeaseToken {
        LeaseToken::new(t).unwrap_or_else(|_| unreachable!())
    }

    #[test]
    fn refusals_say_why_and_a_matching_state_keeps_the_fenced_value() {
        let f = |raw| Some(lease_core::backend::fencing_token(raw));
        let mine = token("mine-0000000000");
        let held = decoded(&[
            ("lease_token", s("mine-0000000000")),
            ("lease_expires_at", n(5)),
            ("lease_fence", n(7)),
        ]);
        let free = decoded(&[("lease_expires_at", n(0)), ("lease_fence", n(7))]);
        let gone = decoded(&[]);
        let value_only = decoded(&[("value_fence", n(3))]);
        let not_owned = |reason| Refusal::NotOwned(reason);
        use NotOwnedReason::{Missing, TakenOver};
        let cases = [
            (&held, Some(&mine), f(7), Refusal::KeepFencedValue),
            (&held, Some(&mine), f(8), not_owned(TakenOver)),
            (
                &held,
                Some(&token("other-000000000")),
                f(7),
                not_owned(TakenOver),
            ),
            (&held, None, f(7), not_owned(TakenOver)),
            (&held, Some(&mine), None, not_owned(TakenOver)),
            (&free, None, f(7), Refusal::KeepFencedValue),
            (&free, None, f(6), not_owned(TakenOver)),
            (&free, Some(&mine), f(7), not_owned(Missing)),
            (&free, None, None, not_owned(TakenOver)),
            (&gone, Some(&mine), f(7), not_owned(Missing)),
            (&gone, None, f(7), not_owned(Missing)),
            (&gone, None, None, not_owned(Missing)),
            (&value_only, None, None, not_owned(Missing)),
        ];
        for (i, (old, holder, fencing, expected)) in cases.into_iter().enumerate() {
            assert_eq!(refusal(old, holder, fencing), expected, "case {i}");
        }
    }

    #[test]
    fn items_without_a_usable_counter_are_named_by_none() {
        let mine = token("go-token-000000");
        let go_held = decoded(&[
            ("lease_token", s("go-token-000000")),
            ("lease_expires_at", n(5)),
        ]);
        assert!(in_state(&go_held, Some(&mine), None));
        assert!(!in_state(&go_held, None, None));
        let broken_free = decoded(&[("lease_fence", n(u64::MAX))]);
        assert!(in_state(&broken_free, None, None));
        assert!(!in_state(&decoded(&[]), None, None));
        assert_eq!(state_condition(Some(&mine), None), TENURE_UNFENCED);
        assert_eq!(state_condition(None, None), FREE_UNFENCED);
    }
}

//! [`FencedValues`] on DynamoDB: each operation is one conditional `UpdateItem`.

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_smithy_types::Blob;
use lease_core::backend::validate_fenced_value;
use lease_core::{BoxFuture, FencedValues, FencingToken, LeaseError, LeaseKey, NotOwnedReason};
use tracing::Instrument;

use crate::DynamoLeases;
use crate::error::malformed;
use crate::item::{Item, get_u64, n};
use crate::retry::{Failed, with_retries};

/// The condition of both fenced writes: no newer token has touched the name.
const NOT_FENCED_OUT: &str = "attribute_not_exists(#vfence) OR #vfence <= :t";

/// What a fenced item says.
#[derive(Debug)]
struct FencedItem {
    fence: Option<u64>,
    value: Option<Vec<u8>>,
}

impl FencedItem {
    fn decode(leases: &DynamoLeases, name: &LeaseKey, item: &Item) -> Result<Self, LeaseError> {
        let names = &leases.inner.names;
        let value = match item.get(names.fenced_value.as_str()) {
            None => None,
            Some(AttributeValue::B(blob)) => Some(blob.clone().into_inner()),
            Some(_) => {
                return Err(malformed(
                    name,
                    &leases.inner.table,
                    format!(
                        "the `{}` attribute is not binary (B)",
                        names.fenced_value.as_str()
                    ),
                ));
            }
        };
        Ok(Self {
            fence: get_u64(item, names.value_fence.as_str()),
            value,
        })
    }
}

impl DynamoLeases {
    /// One conditional `UpdateItem`: `SET #vfence = :t [, #val = :v]` if the fence is absent or
    /// not above `fencing`. Returns the value after the write (`ALL_NEW`) when reading.
    async fn fenced_write(
        &self,
        name: &LeaseKey,
        fencing: FencingToken,
        value: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, LeaseError> {
        if let Some(value) = value {
            validate_fenced_value(value)?;
        }
        self.check_input(name, None)?;
        let inner = &self.inner;
        let names = &inner.names;
        let span = tracing::debug_span!(
            "lease_dynamo.fenced",
            table = %inner.table,
            %name,
            fencing = fencing.get(),
            operation = if value.is_some() { "put_fenced" } else { "fence_and_read" },
            bytes = value.map(<[u8]>::len),
        );
        async {
            let mut request = inner
                .client
                .update_item()
                .table_name(&inner.table)
                .set_key(Some(self.key_item(name)))
                .condition_expression(NOT_FENCED_OUT)
                .expression_attribute_names("#vfence", names.value_fence.as_str())
                .expression_attribute_values(":t", n(fencing.get()))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                );
            // The TTL attribute is never touched: a checkpoint must not expire.
            request = match value {
                Some(value) => request
                    .update_expression("SET #val = :v, #vfence = :t")
                    .expression_attribute_names("#val", names.fenced_value.as_str())
                    .expression_attribute_values(":v", AttributeValue::B(Blob::new(value))),
                None => request
                    .update_expression("SET #vfence = :t")
                    .return_values(ReturnValue::AllNew),
            };
            // Both writes are idempotent for the same (token, value): a retry after a lost
            // reply passes the same condition and writes the same attributes.
            let result = with_retries(&inner.retry, &*inner.clock, None, "UpdateItem", || {
                request.clone().send()
            })
            .await;
            match result {
                Ok(output) => match value {
                    Some(_) => {
                        tracing::debug!("fenced value stored");
                        Ok(None)
                    }
                    None => {
                        let item = output.attributes().cloned().unwrap_or_default();
                        let read = FencedItem::decode(self, name, &item)?;
                        tracing::debug!(present = read.value.is_some(), "fence raised, value read");
                        Ok(read.value)
                    }
                },
                Err(failed) => self.fenced_write_refused(name, fencing, value, failed),
            }
        }
        .instrument(span)
        .await
    }

    /// Why a fenced write failed its condition (or its retries): reconciled when the item holds
    /// this call's token and value, "unknown" when an earlier attempt's reply was lost, and
    /// fenced out otherwise.
    fn fenced_write_refused(
        &self,
        name: &LeaseKey,
        fencing: FencingToken,
        value: Option<&[u8]>,
        failed: Failed<UpdateItemError>,
    ) -> Result<Option<Vec<u8>>, LeaseError> {
        let Failed {
            error,
            uncertain,
            attempts,
        } = failed;
        let old = self.refused_item(error)?;
        let old = FencedItem::decode(self, name, &old)?;
        // Unreachable with a numeric fence (an equal fence passes the condition), kept so that a
        // put whose earlier attempt landed is never reported refused.
        if let Some(value) = value
            && old.fence == Some(fencing.get())
            && old.value.as_deref() == Some(value)
        {
            tracing::info!(
                uncertain,
                attempts,
                "put_fenced reconciled: the item holds our token and value"
            );
            lease_core::metrics::reconciled(crate::BACKEND, "put_fenced");
            return Ok(None);
        }
        if uncertain {
            // An earlier attempt may have been applied before a newer token fenced the name:
            // "refused" would claim it was not. Say we cannot tell.
            tracing::warn!(
                fence = old.fence,
                attempts,
                "fenced write outcome unknown: an earlier attempt may have landed before a newer token fenced the name"
            );
            return Err(LeaseError::backend(
                crate::BACKEND,
                false,
                crate::DynamoError::new(
                    "UpdateItem",
                    &self.inner.table,
                    crate::DynamoErrorKind::Unreachable,
                    "fenced write outcome unknown: an earlier attempt's reply was lost, and a \
                     newer token has fenced the name since, so it may or may not have been \
                     applied",
                ),
            ));
        }
        tracing::debug!(fence = old.fence, "fenced out by a newer token");
        Err(LeaseError::not_owned(name.clone(), NotOwnedReason::Fenced))
    }
}

/// One conditional `UpdateItem` per operation on the item keyed like a lease (`pk` = the
/// partition, `sk` = the sort key or the lock sort key), touching only the `fenced_value` and
/// `value_fence` attributes (see [`AttributeNames`](crate::AttributeNames)).
///
/// | operation | request | condition | cost |
/// |---|---|---|---|
/// | [`put_fenced`](FencedValues::put_fenced) | `UpdateItem` `SET #val = :v, #vfence = :t` | `attribute_not_exists(#vfence) OR #vfence <= :t` | 1 request, 1 WCU per KB of the item |
/// | [`fence_and_read`](FencedValues::fence_and_read) | `UpdateItem` `SET #vfence = :t`, `ReturnValues=ALL_NEW` | the same | 1 request, 1 WCU per KB of the item |
///
/// * **Refusals**: a failed condition (a newer token touched the name) is
///   [`LeaseError::NotOwned`] with [`NotOwnedReason::Fenced`], learned from the same request
///   (`ReturnValuesOnConditionCheckFailure=ALL_OLD`). A refusal met by a *retry* after an
///   attempt whose outcome was lost is never reported as a refusal, since that attempt may have
///   been applied before the newer token came: it is a permanent [`LeaseError::Backend`] error
///   saying the outcome is unknown. Values over
///   [`MAX_FENCED_VALUE_BYTES`](lease_core::MAX_FENCED_VALUE_BYTES) (64 KiB) are refused before
///   anything is sent.
/// * **Retries are safe**: both writes are idempotent for the same `(token, value)`, so a
///   transient failure is retried with the same request like every other operation. If an
///   earlier attempt landed but its reply was lost, the retry passes its condition (the fence
///   equals its token) and writes the same attributes again; a retried put whose `ALL_OLD` item
///   shows our token and our value is reported as stored. A caller may likewise repeat a call
///   that failed transiently with the same arguments.
/// * **Cost**: a write consumes 1 WCU per KB of the *whole item* (the larger of its sizes before
///   and after), so `fence_and_read` of a 60 KiB value costs about 60 WCU, like its put; a refused
///   write consumes them too. The reply to `fence_and_read` carries the item and costs no read
///   units. IAM: `dynamodb:UpdateItem` only.
/// * **No expiry**: fenced writes never set or remove the TTL attribute, so an item holding only
///   a fenced value is never deleted by TTL: a checkpoint must outlive every lease.
/// * **Names** live in the caller's key space, which is the table's: use a partition of their
///   own, such as `LeaseKey::with_sort_key("checkpoints", "shard-7")`. A name equal to a lease key
///   shares that lease's item: neither side touches the other's attributes (leases, listing and
///   `inspect` ignore the fenced attributes; an item holding only a fenced value is not a lease),
///   but the lease's TTL then applies to the whole item, and DynamoDB deletes the value with it
///   one TTL buffer after the lease ends — one more reason to keep checkpoints apart.
impl FencedValues for DynamoLeases {
    fn fence_and_read<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, LeaseError>> {
        Box::pin(self.fenced_write(name, fencing, None))
    }

    fn put_fenced<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
        value: &'a [u8],
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(async move {
            self.fenced_write(name, fencing, Some(value))
                .await
                .map(drop)
        })
    }
}

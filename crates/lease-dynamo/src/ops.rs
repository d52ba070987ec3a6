//! Reading (inspect, list) and the trait implementations (the Go-shaped methods are in `go.rs`). The writes
//! live in `acquire.rs` and `tenure.rs`.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_smithy_runtime_api::http::Response as HttpResponse;
use lease_core::backend::validate_duration;
use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencingToken, Lease, LeaseBackend, LeaseError, LeaseKey,
    LeaseListing, LeaseRecord, LeaseToken,
};
use tracing::Instrument;

use crate::DynamoLeases;
use crate::error::backend_error_in;
use crate::item::{Decoded, Item, get_str, s};
use crate::leases::{MAX_PARTITION_KEY_BYTES, MAX_SORT_KEY_BYTES};
use crate::retry::with_retries;

impl DynamoLeases {
    /// The item a failed condition returned (`ALL_OLD`; empty when there was no item), or, when
    /// the request failed otherwise, that failure as a [`LeaseError::Backend`].
    pub(crate) fn refused_item(
        &self,
        err: SdkError<UpdateItemError, HttpResponse>,
    ) -> Result<Item, LeaseError> {
        match err.as_service_error() {
            Some(UpdateItemError::ConditionalCheckFailedException(e)) => {
                Ok(e.item().cloned().unwrap_or_default())
            }
            _ => Err(backend_error_in("UpdateItem", &self.error_context(), err)),
        }
    }
}

impl DynamoLeases {
    pub(crate) fn check_input(
        &self,
        key: &LeaseKey,
        duration: Option<Duration>,
    ) -> Result<(), LeaseError> {
        if !self.inner.validate {
            return Ok(());
        }
        if let Some(duration) = duration {
            validate_duration(duration)?;
        }
        if key.partition().is_empty() || key.partition().len() > MAX_PARTITION_KEY_BYTES {
            return Err(LeaseError::invalid(
                "partition key",
                format!("must be 1 to {MAX_PARTITION_KEY_BYTES} bytes"),
            ));
        }
        let sort = self.sort_value(key);
        if sort.is_empty() || sort.len() > MAX_SORT_KEY_BYTES {
            return Err(LeaseError::invalid(
                "sort key",
                format!("must be 1 to {MAX_SORT_KEY_BYTES} bytes"),
            ));
        }
        Ok(())
    }

    pub(crate) fn key_item(&self, key: &LeaseKey) -> Item {
        let names = &self.inner.names;
        HashMap::from([
            (names.partition_key.as_str().to_owned(), s(key.partition())),
            (names.sort_key.as_str().to_owned(), s(self.sort_value(key))),
        ])
    }

    /// One strongly consistent `GetItem`; an item every acquisition refuses is
    /// [`LeaseError::Corrupt`], never a record (which would read free or expired).
    pub(crate) async fn inspect_inner(
        &self,
        key: &LeaseKey,
    ) -> Result<Option<LeaseRecord>, LeaseError> {
        let Some(decoded) = self.inspect_decoded(key).await? else {
            return Ok(None);
        };
        match self.corrupt(key, &decoded) {
            Some(error) => Err(error),
            None => Ok(Some(decoded.record(key.clone()))),
        }
    }

    /// The same as [`LeaseBackend::inspect`] on this manager: the record of `key`, or, for an
    /// item that every acquisition refuses as corrupt, that error instead of a record: a
    /// fencing counter that is not one (or is exhausted), a holder's token that is not a string,
    /// or a holder's token with no usable expiry, as [`LeaseError::Corrupt`] naming the
    /// attribute, the value found and what to do. Every reader (`inspect`, this, `lease
    /// status`, `lease watch`, an [`Election`](lease_core::Election)'s observer) and every
    /// acquisition classify an item by the same rule, so a corrupt item is never shown free.
    /// One strongly consistent `GetItem`.
    ///
    /// ```no_run
    /// # async fn demo(leases: lease_dynamo::DynamoLeases) -> Result<(), lease_core::LeaseError> {
    /// let key = lease_core::LeaseKey::new("nightly")?;
    /// match leases.inspect_strict(&key).await {
    ///     Ok(Some(record)) => println!("holder: {:?}", record.holder()),
    ///     Ok(None) => println!("never acquired"),
    ///     Err(e) if e.is_corrupt() => println!("repair the item: {e}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LeaseError::Corrupt`] for such an item; otherwise as `inspect`.
    pub async fn inspect_strict(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        self.inspect_inner(key).await
    }

    /// The lease item of `key`, decoded (`None` when there is none, or it holds only a fenced
    /// value).
    async fn inspect_decoded(&self, key: &LeaseKey) -> Result<Option<Decoded>, LeaseError> {
        self.check_input(key, None)?;
        let inner = &self.inner;
        let span = tracing::debug_span!("lease_dynamo.inspect", table = %inner.table, %key);
        async {
            let request = inner
                .client
                .get_item()
                .table_name(&inner.table)
                .set_key(Some(self.key_item(key)))
                .consistent_read(true);
            let output = with_retries(&inner.retry, &*inner.clock, None, "GetItem", || {
                request.clone().send()
            })
            .await
            .map_err(|f| backend_error_in("GetItem", &self.error_context(), f.error))?;
            // An item holding only a fenced value (`FencedValues` under the same key) has no
            // lease: neither a holder nor a fencing counter.
            Ok(output
                .item()
                .map(|item| Decoded::from_item(&inner.names, item))
                .filter(Decoded::is_lease))
        }
        .instrument(span)
        .await
    }

    /// Strongly consistent `Query` pages on the partition key.
    pub(crate) async fn list_inner(&self, partition: &str) -> Result<Vec<LeaseRecord>, LeaseError> {
        let probe = LeaseKey::new(partition)?;
        self.check_input(&probe, None)?;
        let inner = &self.inner;
        let names = &inner.names;
        let span = tracing::debug_span!("lease_dynamo.list", table = %inner.table, partition, pages = tracing::field::Empty);
        async {
            let mut records = Vec::new();
            let mut start: Option<Item> = None;
            let mut pages = 0u32;
            loop {
                let request = inner
                    .client
                    .query()
                    .table_name(&inner.table)
                    .consistent_read(true)
                    .key_condition_expression("#pk = :pk")
                    .expression_attribute_names("#pk", names.partition_key.as_str())
                    .expression_attribute_values(":pk", s(partition))
                    .set_limit(inner.list_page_size)
                    .set_exclusive_start_key(start.take());
                let output = with_retries(&inner.retry, &*inner.clock, None, "Query", || {
                    request.clone().send()
                })
                .await
                .map_err(|f| backend_error_in("Query", &self.error_context(), f.error))?;
                pages += 1;
                for item in output.items() {
                    let decoded = Decoded::from_item(names, item);
                    // Items the Go package wrote (a holder, no fencing counter) are leases too;
                    // an item holding only a fenced value is not.
                    if !decoded.is_lease() {
                        continue;
                    }
                    let Some(sort) = get_str(item, names.sort_key.as_str()) else {
                        continue;
                    };
                    let key = if sort == inner.lock_sort_key {
                        LeaseKey::new(partition)
                    } else {
                        LeaseKey::with_sort_key(partition, sort)
                    };
                    if let Ok(key) = key {
                        records.push(decoded.record(key));
                    }
                }
                match output.last_evaluated_key() {
                    Some(last) if !last.is_empty() => start = Some(last.clone()),
                    _ => break,
                }
            }
            tracing::Span::current().record("pages", pages);
            records.sort_by(|a, b| a.key().cmp(b.key()));
            Ok(records)
        }
        .instrument(span)
        .await
    }
}

impl LeaseBackend for DynamoLeases {
    fn name(&self) -> &'static str {
        crate::BACKEND
    }

    fn clock(&self) -> &dyn Clock {
        &*self.inner.clock
    }

    fn as_listing(&self) -> Option<&dyn LeaseListing> {
        Some(self)
    }

    fn as_fenced_values(&self) -> Option<&dyn lease_core::FencedValues> {
        Some(self)
    }

    fn try_acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        options: &'a AcquireOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        Box::pin(async move {
            let result = self.acquire_inner(key, duration, options).await;
            lease_core::metrics::acquisition(self.name(), &result);
            result
        })
    }

    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        Box::pin(async move {
            let sent = lease_core::metrics::started(self.clock());
            let result = self.renew_inner(lease, duration).await;
            lease_core::metrics::renewal(self.name(), self.clock(), lease, sent, &result);
            result
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(self.release_inner(key, token, fencing))
    }

    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        Box::pin(self.inspect_inner(key))
    }

    /// One conditional `DeleteItem` naming the state (`#token = :token AND #fence = :fence`
    /// for a holder, `attribute_not_exists(#token) AND #fence = :fence` for a free record) and
    /// `attribute_not_exists(value_fence)`: 1 request, 1 WCU. When a
    /// [`FencedValues`](lease_core::FencedValues) value shares the item, a second conditional
    /// `UpdateItem` on the same state removes only the lease attributes and the TTL, so the
    /// value stays and is never collected by TTL. IAM: `dynamodb:DeleteItem` (and
    /// `dynamodb:UpdateItem`). See *Delete* in [`design`](crate::design) for lost replies.
    fn delete<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: Option<&'a LeaseToken>,
        fencing: Option<FencingToken>,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(self.delete_inner(key, holder, fencing))
    }
}

impl LeaseListing for DynamoLeases {
    fn list_partition<'a>(
        &'a self,
        partition: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseRecord>, LeaseError>> {
        Box::pin(self.list_inner(partition))
    }
}

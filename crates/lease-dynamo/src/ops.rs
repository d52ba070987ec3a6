//! The four operations, each one conditional request, and the listing query.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_smithy_runtime_api::http::Response as HttpResponse;
use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencingToken, Lease, LeaseBackend, LeaseError, LeaseKey,
    LeaseListing, LeaseRecord, LeaseToken, NotOwnedReason, holder_deadline, validate_duration,
};
use tracing::Instrument;

use crate::DynamoLeases;
use crate::error::{backend_error, malformed};
use crate::item::{
    Decoded, Item, epoch_micros, epoch_millis, from_millis, get_str, millis, n, s, ttl_seconds,
};
use crate::leases::{MAX_OWNER_BYTES, MAX_PARTITION_KEY_BYTES, MAX_SORT_KEY_BYTES};
use crate::retry::{Failed, with_retries};

/// The item a failed condition returned (`ALL_OLD`; empty when there was no item), if the
/// failure was a failed condition.
pub(crate) fn condition_failed_item(err: &SdkError<UpdateItemError, HttpResponse>) -> Option<Item> {
    match err.as_service_error() {
        Some(UpdateItemError::ConditionalCheckFailedException(e)) => {
            Some(e.item().cloned().unwrap_or_default())
        }
        _ => None,
    }
}

fn not_owned_reason(old: &Decoded, ours: &LeaseToken) -> NotOwnedReason {
    match &old.token {
        None => NotOwnedReason::Missing,
        Some(t) if t == ours => NotOwnedReason::Expired,
        Some(_) => NotOwnedReason::TakenOver,
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
            (names.partition_key().to_owned(), s(key.partition())),
            (names.sort_key().to_owned(), s(self.sort_value(key))),
        ])
    }

    /// One conditional `UpdateItem`: take `key` if it has no holder or its holder's lease ended
    /// at least `max_clock_skew` ago, incrementing the fencing counter in the same write.
    pub(crate) async fn acquire_inner(
        &self,
        key: &LeaseKey,
        duration: Duration,
        options: &AcquireOptions,
    ) -> Result<Lease, LeaseError> {
        self.check_input(key, Some(duration))?;
        if self.inner.validate && options.owner().is_some_and(|o| o.len() > MAX_OWNER_BYTES) {
            return Err(LeaseError::invalid(
                "owner",
                format!("is longer than {MAX_OWNER_BYTES} bytes"),
            ));
        }
        let inner = &self.inner;
        let names = &inner.names;
        let token = options
            .token()
            .cloned()
            .unwrap_or_else(|| inner.tokens.next_token());
        let span = tracing::debug_span!(
            "lease_dynamo.acquire",
            table = %inner.table,
            %key,
            %token,
            fencing = tracing::field::Empty,
        );
        async {
            let sent = inner.clock.monotonic();
            let now = inner.clock.now();
            let now_ms = epoch_millis(now);
            let expires_ms = now_ms.saturating_add(millis(duration));
            let cutoff_ms = now_ms.saturating_sub(millis(inner.max_clock_skew));
            let trust_until = holder_deadline(sent, duration, self.margin(duration));

            let mut set = vec![
                "#token = :token",
                "#expires = :expires",
                "#acquired = :now",
                "#fence = if_not_exists(#fence, :seed) + :one",
            ];
            let mut request = inner
                .client
                .update_item()
                .table_name(&inner.table)
                .set_key(Some(self.key_item(key)))
                .condition_expression("attribute_not_exists(#token) OR #expires <= :cutoff")
                .expression_attribute_names("#token", names.token())
                .expression_attribute_names("#expires", names.expires_at())
                .expression_attribute_names("#acquired", names.acquired_at())
                .expression_attribute_names("#fence", names.fencing())
                .expression_attribute_names("#owner", names.owner())
                .expression_attribute_values(":token", s(token.as_str()))
                .expression_attribute_values(":expires", n(expires_ms))
                .expression_attribute_values(":now", n(now_ms))
                .expression_attribute_values(":cutoff", n(cutoff_ms))
                .expression_attribute_values(":seed", n(epoch_micros(now)))
                .expression_attribute_values(":one", n(1))
                .return_values(ReturnValue::AllNew)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                );
            if inner.include_ttl {
                set.push("#ttl = :ttl");
                request = request
                    .expression_attribute_names("#ttl", names.ttl())
                    .expression_attribute_values(
                        ":ttl",
                        n(ttl_seconds(expires_ms, inner.ttl_buffer)),
                    );
            }
            let mut expression = format!("SET {}", set.join(", "));
            match options.owner() {
                Some(owner) => {
                    expression.push_str(", #owner = :owner");
                    request = request.expression_attribute_values(":owner", s(owner));
                }
                // A previous holder's description must not outlive its lease.
                None => expression.push_str(" REMOVE #owner"),
            }
            let request = request.update_expression(expression);

            let result = with_retries(
                &inner.retry,
                &*inner.clock,
                Some(trust_until),
                "UpdateItem",
                || request.clone().send(),
            )
            .await;
            match result {
                Ok(output) => {
                    let item = output.attributes().cloned().unwrap_or_default();
                    let fencing = Decoded::from_item(names, &item).fencing.ok_or_else(|| {
                        malformed(
                            "UpdateItem",
                            &inner.table,
                            "the acquire reply lacks the fencing counter",
                        )
                    })?;
                    tracing::Span::current().record("fencing", fencing);
                    tracing::debug!("lease acquired");
                    Ok(Lease::new(
                        key.clone(),
                        token.clone(),
                        FencingToken::new(fencing),
                        duration,
                        from_millis(expires_ms),
                        trust_until,
                    ))
                }
                Err(Failed {
                    error,
                    uncertain,
                    attempts,
                }) => {
                    let Some(old) = condition_failed_item(&error) else {
                        return Err(backend_error("UpdateItem", &inner.table, error));
                    };
                    let old = Decoded::from_item(names, &old);
                    if old.token.as_ref() == Some(&token) {
                        // Our token is in the item: an earlier attempt (or an earlier call with
                        // this caller-chosen token) took the lease.
                        let fencing = old.fencing.ok_or_else(|| {
                            malformed(
                                "UpdateItem",
                                &inner.table,
                                "the item lacks the fencing counter",
                            )
                        })?;
                        let stored_ms = old.expires_ms.unwrap_or(now_ms);
                        let shortfall = Duration::from_millis(expires_ms.saturating_sub(stored_ms));
                        tracing::Span::current().record("fencing", fencing);
                        tracing::info!(
                            uncertain,
                            attempts,
                            "acquire reconciled: our token is in the item"
                        );
                        return Ok(Lease::new(
                            key.clone(),
                            token.clone(),
                            FencingToken::new(fencing),
                            duration,
                            from_millis(stored_ms),
                            trust_until.checked_sub(shortfall).unwrap_or(sent),
                        ));
                    }
                    let holder = old.holder();
                    tracing::debug!(holder = ?holder, "lease held by another owner");
                    Err(LeaseError::held(key.clone(), holder))
                }
            }
        }
        .instrument(span)
        .await
    }

    /// One conditional `UpdateItem` extending the expiry, if our token holds an unexpired lease.
    pub(crate) async fn renew_inner(
        &self,
        lease: &Lease,
        duration: Duration,
    ) -> Result<Lease, LeaseError> {
        let key = lease.key();
        self.check_input(key, Some(duration))?;
        let inner = &self.inner;
        let names = &inner.names;
        let token = lease.token();
        let span = tracing::debug_span!(
            "lease_dynamo.renew",
            table = %inner.table,
            %key,
            %token,
            fencing = lease.fencing_token().get(),
        );
        async {
            let sent = inner.clock.monotonic();
            let now_ms = epoch_millis(inner.clock.now());
            let expires_ms = now_ms.saturating_add(millis(duration));
            let mut request = inner
                .client
                .update_item()
                .table_name(&inner.table)
                .set_key(Some(self.key_item(key)))
                .condition_expression("#token = :token AND #expires > :now")
                .expression_attribute_names("#token", names.token())
                .expression_attribute_names("#expires", names.expires_at())
                .expression_attribute_values(":token", s(token.as_str()))
                .expression_attribute_values(":expires", n(expires_ms))
                .expression_attribute_values(":now", n(now_ms))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                );
            request = if inner.include_ttl {
                request
                    .update_expression("SET #expires = :expires, #ttl = :ttl")
                    .expression_attribute_names("#ttl", names.ttl())
                    .expression_attribute_values(
                        ":ttl",
                        n(ttl_seconds(expires_ms, inner.ttl_buffer)),
                    )
            } else {
                request.update_expression("SET #expires = :expires")
            };
            // Retries are capped by the lease being renewed: past its deadline it is lost anyway.
            let result = with_retries(
                &inner.retry,
                &*inner.clock,
                Some(lease.deadline()),
                "UpdateItem",
                || request.clone().send(),
            )
            .await;
            let renewed = || {
                Lease::new(
                    key.clone(),
                    token.clone(),
                    lease.fencing_token(),
                    duration,
                    from_millis(expires_ms),
                    holder_deadline(sent, duration, self.margin(duration)),
                )
            };
            match result {
                Ok(_) => {
                    tracing::debug!("lease renewed");
                    Ok(renewed())
                }
                Err(Failed {
                    error,
                    uncertain,
                    attempts,
                }) => {
                    let Some(old) = condition_failed_item(&error) else {
                        return Err(backend_error("UpdateItem", &inner.table, error));
                    };
                    let old = Decoded::from_item(names, &old);
                    if old.token.as_ref() == Some(token)
                        && old.expires_ms.is_some_and(|e| e >= expires_ms)
                    {
                        tracing::info!(
                            uncertain,
                            attempts,
                            "renew reconciled: the item shows our expiry"
                        );
                        return Ok(renewed());
                    }
                    let reason = not_owned_reason(&old, token);
                    tracing::debug!(%reason, "renew refused");
                    Err(LeaseError::not_owned(key.clone(), reason))
                }
            }
        }
        .instrument(span)
        .await
    }

    /// One conditional `UpdateItem` removing the holder (the item and its fencing counter stay).
    pub(crate) async fn release_inner(
        &self,
        key: &LeaseKey,
        token: &LeaseToken,
        fencing: Option<FencingToken>,
    ) -> Result<(), LeaseError> {
        self.check_input(key, None)?;
        let inner = &self.inner;
        let names = &inner.names;
        let span = tracing::debug_span!(
            "lease_dynamo.release",
            table = %inner.table,
            %key,
            %token,
        );
        async {
            let now_ms = epoch_millis(inner.clock.now());
            let remove = "REMOVE #token, #expires, #owner, #acquired";
            let mut request = inner
                .client
                .update_item()
                .table_name(&inner.table)
                .set_key(Some(self.key_item(key)))
                .condition_expression("#token = :token")
                .expression_attribute_names("#token", names.token())
                .expression_attribute_names("#expires", names.expires_at())
                .expression_attribute_names("#owner", names.owner())
                .expression_attribute_names("#acquired", names.acquired_at())
                .expression_attribute_values(":token", s(token.as_str()))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                );
            request = if inner.include_ttl {
                // The released item (and its fencing counter) is collected a buffer from now.
                request
                    .update_expression(format!("{remove} SET #ttl = :ttl"))
                    .expression_attribute_names("#ttl", names.ttl())
                    .expression_attribute_values(":ttl", n(ttl_seconds(now_ms, inner.ttl_buffer)))
            } else {
                request.update_expression(remove)
            };
            let result = with_retries(&inner.retry, &*inner.clock, None, "UpdateItem", || {
                request.clone().send()
            })
            .await;
            match result {
                Ok(_) => {
                    tracing::debug!("lease released");
                    Ok(())
                }
                Err(Failed {
                    error,
                    uncertain,
                    attempts,
                }) => {
                    let Some(old) = condition_failed_item(&error) else {
                        return Err(backend_error("UpdateItem", &inner.table, error));
                    };
                    let old = Decoded::from_item(names, &old);
                    // An earlier attempt may have landed: no holder now, and (when known) the
                    // counter still at our acquisition, so nobody acquired since.
                    let landed = uncertain
                        && old.token.is_none()
                        && fencing.is_none_or(|f| old.fencing == Some(f.get()));
                    if landed {
                        tracing::info!(attempts, "release reconciled: the item has no holder");
                        return Ok(());
                    }
                    let reason = match not_owned_reason(&old, token) {
                        // Our token with a failed `#token = :token` cannot happen; be safe.
                        NotOwnedReason::Expired => NotOwnedReason::TakenOver,
                        other => other,
                    };
                    tracing::debug!(%reason, "release refused");
                    Err(LeaseError::not_owned(key.clone(), reason))
                }
            }
        }
        .instrument(span)
        .await
    }

    /// One strongly consistent `GetItem`.
    pub(crate) async fn inspect_inner(
        &self,
        key: &LeaseKey,
    ) -> Result<Option<LeaseRecord>, LeaseError> {
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
            .map_err(|f| backend_error("GetItem", &inner.table, f.error))?;
            // An item holding only a fenced value (`FencedValues` under the same key) has no
            // lease: neither a holder nor a fencing counter.
            Ok(output
                .item()
                .map(|item| Decoded::from_item(&inner.names, item))
                .filter(|d| d.token.is_some() || d.fencing.is_some())
                .map(|d| d.record(key.clone())))
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
                    .expression_attribute_names("#pk", names.partition_key())
                    .expression_attribute_values(":pk", s(partition))
                    .set_limit(inner.list_page_size)
                    .set_exclusive_start_key(start.take());
                let output = with_retries(&inner.retry, &*inner.clock, None, "Query", || {
                    request.clone().send()
                })
                .await
                .map_err(|f| backend_error("Query", &inner.table, f.error))?;
                pages += 1;
                for item in output.items() {
                    let decoded = Decoded::from_item(names, item);
                    // Items without a fencing counter were not written by this crate.
                    if decoded.fencing.is_none() {
                        continue;
                    }
                    let Some(sort) = get_str(item, names.sort_key()) else {
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

    /// Acquires the lease named by partition key `pk` alone (stored under the lock sort key),
    /// for `duration`: one conditional `UpdateItem` (Go: `Acquire`).
    ///
    /// # Errors
    /// [`LeaseError::Held`] (see [`LeaseError::is_held`]) naming the holder, its expiry and
    /// fencing token, learned from the failed write itself; [`LeaseError::InvalidInput`];
    /// [`LeaseError::Backend`].
    pub async fn acquire(&self, pk: &str, duration: Duration) -> Result<Lease, LeaseError> {
        let key = LeaseKey::new(pk)?;
        self.acquire_inner(&key, duration, &AcquireOptions::default())
            .await
    }

    /// Acquires the lease named by `key` (Go: `AcquireKey`). A key without a sort key is stored
    /// under the lock sort key.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_key(
        &self,
        key: &LeaseKey,
        duration: Duration,
    ) -> Result<Lease, LeaseError> {
        self.acquire_inner(key, duration, &AcquireOptions::default())
            .await
    }

    /// Acquires with per-call options (an owner description, a caller-chosen token).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_with(
        &self,
        key: &LeaseKey,
        duration: Duration,
        options: &AcquireOptions,
    ) -> Result<Lease, LeaseError> {
        self.acquire_inner(key, duration, options).await
    }

    /// Extends `lease` to `duration` from now: one conditional `UpdateItem` (Go: `Refresh`).
    ///
    /// # Errors
    /// [`LeaseError::NotOwned`] (see [`LeaseError::is_not_owned`]) if the lease expired, was
    /// released or taken over; [`LeaseError::InvalidInput`]; [`LeaseError::Backend`].
    pub async fn refresh(&self, lease: &Lease, duration: Duration) -> Result<Lease, LeaseError> {
        self.renew_inner(lease, duration).await
    }

    /// Releases `lease`: one conditional `UpdateItem` that removes the holder and keeps the item
    /// with its fencing counter (the Go package deleted the item, and with it any counter).
    ///
    /// # Errors
    /// [`LeaseError::NotOwned`] if another owner holds the lease or nobody does;
    /// [`LeaseError::Backend`].
    pub async fn release(&self, lease: &Lease) -> Result<(), LeaseError> {
        self.release_inner(lease.key(), lease.token(), Some(lease.fencing_token()))
            .await
    }

    /// Reads the record of `key` with one strongly consistent `GetItem`.
    ///
    /// # Errors
    /// [`LeaseError::Backend`].
    pub async fn inspect(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        self.inspect_inner(key).await
    }
}

impl LeaseBackend for DynamoLeases {
    fn name(&self) -> &'static str {
        "dynamodb"
    }

    fn clock(&self) -> &dyn Clock {
        &*self.inner.clock
    }

    fn try_acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        options: &'a AcquireOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        Box::pin(self.acquire_inner(key, duration, options))
    }

    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        Box::pin(self.renew_inner(lease, duration))
    }

    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(self.release_inner(key, token, None))
    }

    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        Box::pin(self.inspect_inner(key))
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

//! `LeaseBackend` and `LeaseListing` for `PgLeases`: each operation one statement.

use std::time::{Duration, SystemTime};

use lease_core::backend::{
    fmt_duration, fmt_time, holder_deadline, new_lease, validate_acquire_options, validate_duration,
};
use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencingToken, Holder, Lease, LeaseBackend, LeaseError,
    LeaseKey, LeaseListing, LeaseRecord, LeaseToken, NotOwnedReason, RecordWatch,
};
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::PgLeases;
use crate::record::{Current, key_of};

/// Longest owner description accepted, in bytes.
const MAX_OWNER_BYTES: usize = 1024;

/// A fresh id for one call (its retries reuse it). Not from the caller's
/// [`TokenSource`](lease_core::TokenSource): request ids must be unique even when a caller's
/// tokens repeat (the exception docs/architecture.md states for lease-dynamo too).
fn request_id() -> Uuid {
    Uuid::new_v4()
}

/// Checks what an acquire stores beside the key; nothing is sent otherwise.
fn check_acquire_options(options: &AcquireOptions) -> Result<(), LeaseError> {
    validate_acquire_options(options)?;
    if let Some(owner) = options.owner() {
        if owner.len() > MAX_OWNER_BYTES {
            return Err(LeaseError::invalid(
                "owner",
                format!("is {} bytes; the limit is {MAX_OWNER_BYTES}", owner.len()),
            ));
        }
        check_text("owner", owner)?;
    }
    if let Some(value) = options.value() {
        check_text("lease value", value)?;
    }
    Ok(())
}

/// Microseconds of a duration, as the statements take them.
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// The fencing token's raw value as the column stores it.
fn fencing_param(fencing: FencingToken) -> i64 {
    i64::try_from(fencing.get()).unwrap_or(i64::MAX)
}

/// Text PostgreSQL stores: no NUL byte.
fn check_text(field: &'static str, text: &str) -> Result<(), LeaseError> {
    if text.contains('\0') {
        return Err(LeaseError::invalid(
            field,
            "holds a NUL byte, which PostgreSQL text cannot",
        ));
    }
    Ok(())
}

impl PgLeases {
    /// The test hook: the time a manual clock says, which statements then take for the
    /// server's; `None` in production, where the server's clock alone judges expiry.
    fn clock_override(&self) -> Option<SystemTime> {
        self.inner.manual_clock.then(|| self.inner.clock.now())
    }

    fn sort_value(key: &LeaseKey) -> &str {
        key.sort().unwrap_or("")
    }

    fn no_row(&self, operation: &'static str) -> LeaseError {
        crate::PgError::new(
            operation,
            &self.inner.table.plain,
            crate::PgErrorKind::Rejected,
            "the statement returned no row",
        )
        .into_lease_error()
    }

    async fn acquire_inner(
        &self,
        key: &LeaseKey,
        duration: Duration,
        options: &AcquireOptions,
    ) -> Result<Lease, LeaseError> {
        validate_duration(duration)?;
        check_acquire_options(options)?;
        let inner = &self.inner;
        let token = options
            .token()
            .cloned()
            .unwrap_or_else(|| inner.tokens.next_token());
        let request = request_id();
        let (partition, sort) = (key.partition(), Self::sort_value(key));
        let (d, test_now, skew) = (
            micros(duration),
            self.clock_override(),
            micros(inner.max_clock_skew),
        );
        let grace = micros(inner.recreation_grace + inner.max_clock_skew);
        let (owner, value, token_text) = (options.owner(), options.value(), token.as_str());
        let checked = !inner.recreation_grace.is_zero();
        let mut params: Vec<(&(dyn tokio_postgres::types::ToSql + Sync), Type)> = vec![
            (&partition, Type::TEXT),
            (&sort, Type::TEXT),
            (&token_text, Type::TEXT),
            (&owner, Type::TEXT),
            (&value, Type::TEXT),
            (&d, Type::INT8),
            (&test_now, Type::TIMESTAMPTZ),
            (&skew, Type::INT8),
            (&request, Type::UUID),
        ];
        if checked {
            params.push((&grace, Type::INT8));
        }
        let sql = if checked {
            &inner.statements.acquire_checked
        } else {
            &inner.statements.acquire
        };
        let sent_at = inner.clock.monotonic();
        let answer = self
            .send("acquire", sql, &params, options.deadline())
            .await
            .map_err(crate::PgError::into_lease_error)?;
        let row = answer.rows.first().ok_or_else(|| self.no_row("acquire"))?;
        self.acquire_outcome(key, duration, &token, request, sent_at, row)
    }

    /// What an acquire statement's answer means: granted, granted by an earlier attempt of
    /// this call whose reply was lost, refused in a new incarnation's grace, or held.
    fn acquire_outcome(
        &self,
        key: &LeaseKey,
        duration: Duration,
        token: &LeaseToken,
        request: Uuid,
        sent_at: std::time::Instant,
        row: &tokio_postgres::Row,
    ) -> Result<Lease, LeaseError> {
        let inner = &self.inner;
        let cur = Current::read(key, row)?;
        let read = |column: &str| -> Result<Option<SystemTime>, LeaseError> {
            row.try_get(column)
                .map_err(|e| LeaseError::corrupt(key.clone(), format!("{column}: {e}")))
        };
        let won_fencing: Option<i64> = row
            .try_get("won_fencing")
            .map_err(|e| LeaseError::corrupt(key.clone(), e.to_string()))?;
        let deadline = holder_deadline(sent_at, duration, self.margin(duration));
        let granted = |fencing: FencingToken, expires_at: SystemTime| {
            new_lease(
                key.clone(),
                token.clone(),
                fencing,
                duration,
                expires_at,
                deadline,
            )
        };
        if let (Some(fencing), Some(expires_at)) = (won_fencing, read("won_expires_at")?) {
            let fencing = u64::try_from(fencing)
                .map(lease_core::backend::fencing_token)
                .map_err(|_| LeaseError::corrupt(key.clone(), "a negative fencing token"))?;
            if cur.holder.is_some() {
                lease_core::metrics::takeover(crate::BACKEND);
            }
            tracing::info!(
                table = %inner.table.plain, %key, %token, %fencing,
                took_over = cur.holder.is_some(),
                "acquired"
            );
            return Ok(granted(fencing, expires_at));
        }
        // An earlier attempt of this very call landed and its reply was lost.
        if cur.request_id == Some(request)
            && cur.holder.as_deref() == Some(token.as_str())
            && let (Some(fencing), Some(expires_at)) = (cur.fencing, cur.expires_at)
        {
            lease_core::metrics::reconciled(crate::BACKEND, "acquire");
            tracing::info!(
                table = %inner.table.plain, %key, %token, %fencing,
                "acquired (an earlier attempt landed; its reply was lost)"
            );
            return Ok(granted(fencing, expires_at));
        }
        let in_grace: Option<bool> = row
            .try_get("in_grace")
            .map_err(|e| LeaseError::corrupt(key.clone(), e.to_string()))?;
        if in_grace == Some(true) {
            return Err(self.in_grace(key, read("grants_from")?));
        }
        tracing::debug!(table = %inner.table.plain, %key, "held by another owner");
        Err(LeaseError::held(key.clone(), cur.holder_info()))
    }

    /// `Held` while the table is a new incarnation younger than the recreation grace.
    fn in_grace(&self, key: &LeaseKey, grants_from: Option<SystemTime>) -> LeaseError {
        let inner = &self.inner;
        let until = match grants_from {
            Some(at) => format!("until {}", fmt_time(at)),
            None => "until the grace another client just started ends".to_owned(),
        };
        tracing::warn!(
            table = %inner.table.plain,
            %key,
            "a new incarnation of the table (created, truncated, restored or failed over): \
             no grants until the recreation grace ends"
        );
        let owner = format!(
            "nobody yet: table `{}` is a new incarnation (created, truncated, restored or failed \
             over), and a holder in the one it replaced may still run; no grants {until} (a \
             recreation grace of {})",
            inner.table.plain,
            fmt_duration(inner.recreation_grace + inner.max_clock_skew),
        );
        let mut holder = Holder::new().with_owner(owner);
        if let Some(at) = grants_from {
            holder = holder.with_expires_at(at);
        }
        LeaseError::held(key.clone(), Some(holder))
    }

    async fn renew_inner(&self, lease: &Lease, duration: Duration) -> Result<Lease, LeaseError> {
        validate_duration(duration)?;
        let inner = &self.inner;
        let key = lease.key();
        let request = request_id();
        let (partition, sort) = (key.partition(), Self::sort_value(key));
        let (token, fencing) = (lease.token().as_str(), fencing_param(lease.fencing_token()));
        let (d, test_now) = (micros(duration), self.clock_override());
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 7] = [
            (&partition, Type::TEXT),
            (&sort, Type::TEXT),
            (&token, Type::TEXT),
            (&fencing, Type::INT8),
            (&d, Type::INT8),
            (&test_now, Type::TIMESTAMPTZ),
            (&request, Type::UUID),
        ];
        let sent_at = inner.clock.monotonic();
        let answer = self
            .send(
                "renew",
                &inner.statements.renew,
                &params,
                Some(lease.deadline()),
            )
            .await
            .map_err(crate::PgError::into_lease_error)?;
        let row = answer.rows.first().ok_or_else(|| self.no_row("renew"))?;
        let cur = Current::read(key, row)?;
        let renewed: Option<SystemTime> = row
            .try_get("new_expires_at")
            .map_err(|e| LeaseError::corrupt(key.clone(), e.to_string()))?;
        let ours =
            cur.holder.as_deref() == Some(token) && cur.fencing == Some(lease.fencing_token());
        let expires_at = match renewed {
            Some(at) => Some(at),
            None if ours && cur.request_id == Some(request) => {
                lease_core::metrics::reconciled(crate::BACKEND, "renew");
                cur.expires_at
            }
            None => None,
        };
        if let Some(expires_at) = expires_at {
            tracing::debug!(table = %inner.table.plain, %key, fencing = %lease.fencing_token(), "renewed");
            let deadline = holder_deadline(sent_at, duration, self.margin(duration));
            return Ok(new_lease(
                key.clone(),
                lease.token().clone(),
                lease.fencing_token(),
                duration,
                expires_at,
                deadline,
            ));
        }
        let reason = if cur.holder.is_none() {
            NotOwnedReason::Missing
        } else if ours {
            NotOwnedReason::Expired
        } else {
            NotOwnedReason::TakenOver
        };
        tracing::info!(table = %inner.table.plain, %key, fencing = %lease.fencing_token(), %reason, "renewal refused");
        Err(LeaseError::not_owned(key.clone(), reason))
    }

    async fn release_inner(
        &self,
        key: &LeaseKey,
        token: &LeaseToken,
        fencing: FencingToken,
    ) -> Result<(), LeaseError> {
        let inner = &self.inner;
        let request = request_id();
        let (partition, sort) = (key.partition(), Self::sort_value(key));
        let (token_text, fencing_value) = (token.as_str(), fencing_param(fencing));
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 5] = [
            (&partition, Type::TEXT),
            (&sort, Type::TEXT),
            (&token_text, Type::TEXT),
            (&fencing_value, Type::INT8),
            (&request, Type::UUID),
        ];
        let answer = self
            .send("release", &inner.statements.release, &params, None)
            .await
            .map_err(crate::PgError::into_lease_error)?;
        let row = answer.rows.first().ok_or_else(|| self.no_row("release"))?;
        let done: i64 = row
            .try_get("done")
            .map_err(|e| LeaseError::corrupt(key.clone(), e.to_string()))?;
        let cur = Current::read(key, row)?;
        if done > 0 {
            tracing::info!(table = %inner.table.plain, %key, %fencing, "released");
            return Ok(());
        }
        if cur.holder.is_none() && cur.fencing == Some(fencing) && cur.request_id == Some(request) {
            lease_core::metrics::reconciled(crate::BACKEND, "release");
            tracing::info!(
                table = %inner.table.plain, %key, %fencing,
                "released (an earlier attempt landed; its reply was lost)"
            );
            return Ok(());
        }
        let reason = if cur.holder.is_none() {
            NotOwnedReason::Missing
        } else {
            NotOwnedReason::TakenOver
        };
        Err(LeaseError::not_owned(key.clone(), reason))
    }

    async fn delete_inner(
        &self,
        key: &LeaseKey,
        holder: Option<&LeaseToken>,
        fencing: Option<FencingToken>,
    ) -> Result<(), LeaseError> {
        let inner = &self.inner;
        let (partition, sort) = (key.partition(), Self::sort_value(key));
        let holder_text = holder.map(LeaseToken::as_str);
        let fencing_value = fencing.map(fencing_param);
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 4] = [
            (&partition, Type::TEXT),
            (&sort, Type::TEXT),
            (&holder_text, Type::TEXT),
            (&fencing_value, Type::INT8),
        ];
        let answer = self
            .send("delete", &inner.statements.delete, &params, None)
            .await
            .map_err(crate::PgError::into_lease_error)?;
        let row = answer.rows.first().ok_or_else(|| self.no_row("delete"))?;
        let done: i64 = row
            .try_get("done")
            .map_err(|e| LeaseError::corrupt(key.clone(), e.to_string()))?;
        if done > 0 {
            tracing::info!(table = %inner.table.plain, %key, fencing = ?fencing.map(FencingToken::get), "deleted");
            return Ok(());
        }
        let cur = Current::read(key, row)?;
        let reason = if !cur.exists || (holder.is_some() && cur.holder.is_none()) {
            NotOwnedReason::Missing
        } else {
            NotOwnedReason::TakenOver
        };
        Err(LeaseError::not_owned(key.clone(), reason))
    }

    async fn inspect_inner(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        let (partition, sort) = (key.partition(), Self::sort_value(key));
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 2] =
            [(&partition, Type::TEXT), (&sort, Type::TEXT)];
        let answer = self
            .send("inspect", &self.inner.statements.inspect, &params, None)
            .await
            .map_err(crate::PgError::into_lease_error)?;
        match answer.rows.first() {
            None => Ok(None),
            Some(row) => Ok(Current::read(key, row)?.into_record(key)),
        }
    }

    async fn list_inner(&self, partition: &str) -> Result<Vec<LeaseRecord>, LeaseError> {
        // A partition no key may have lists nothing; nothing is sent.
        let Ok(probe) = LeaseKey::new(partition) else {
            return Ok(Vec::new());
        };
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 1] =
            [(&partition, Type::TEXT)];
        let answer = self
            .send("list", &self.inner.statements.list, &params, None)
            .await
            .map_err(crate::PgError::into_lease_error)?;
        let mut records = Vec::with_capacity(answer.rows.len());
        for row in &answer.rows {
            let sort: String = row
                .try_get("sort_key")
                .map_err(|e| LeaseError::corrupt(probe.clone(), e.to_string()))?;
            let key = key_of(partition, &sort)?;
            if let Some(record) = Current::read(&key, row)?.into_record(&key) {
                records.push(record);
            }
        }
        // By key, as the contract says: not by the database's collation.
        records.sort_by(|a, b| a.key().cmp(b.key()));
        Ok(records)
    }
}

impl LeaseBackend for PgLeases {
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

    /// One attempt, in one statement (one round trip): an `INSERT ... ON CONFLICT DO UPDATE ... WHERE` the key
    /// is free or expired by the server's clock, which also returns the current row, so a
    /// refusal names the holder and a retry after a lost reply finds its own request id. With
    /// a recreation grace, the incarnation check rides in the same statement.
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

    /// One statement: an `UPDATE` of the row iff it holds this tenure and has not expired by the
    /// server's clock.
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

    /// One statement: an `UPDATE` that clears the holder iff it is this tenure, and notifies
    /// waiters.
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(self.release_inner(key, token, fencing))
    }

    /// One `SELECT` by primary key.
    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        Box::pin(self.inspect_inner(key))
    }

    /// One statement: a `DELETE` iff the row is in exactly the state named. The fencing counter
    /// of a key acquired again afterwards is seeded from the server's clock, so in practice it
    /// stays above the tokens issued before the delete (the contract does not promise it).
    fn delete<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: Option<&'a LeaseToken>,
        fencing: Option<FencingToken>,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(self.delete_inner(key, holder, fencing))
    }

    fn changed<'a>(&'a self, key: &'a LeaseKey) -> Option<BoxFuture<'a, ()>> {
        let mut watch = self.watch_record(key)?;
        Some(Box::pin(async move { watch.next_change().await }))
    }

    fn watch_record(&self, key: &LeaseKey) -> Option<Box<dyn RecordWatch>> {
        let inner = &self.inner;
        crate::listen::watch(
            &inner.listener_state,
            inner.listener.as_ref(),
            &inner.table,
            key,
        )
    }
}

impl LeaseListing for PgLeases {
    /// One `SELECT` of the partition's rows (an index range of the primary key).
    fn list_partition<'a>(
        &'a self,
        partition: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseRecord>, LeaseError>> {
        Box::pin(self.list_inner(partition))
    }
}

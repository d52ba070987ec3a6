//! `LeaseBackend` and `LeaseListing` for `RedisLeases`: each operation one script (one round
//! trip).

use std::time::{Duration, Instant, SystemTime};

use lease_core::backend::{
    fmt_duration, fmt_time, holder_deadline, new_lease, validate_acquire_options, validate_duration,
};
use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencingToken, Holder, Lease, LeaseBackend, LeaseError,
    LeaseKey, LeaseListing, LeaseRecord, LeaseToken, NotOwnedReason, RecordWatch,
};
use redis::Value;

use crate::RedisLeases;
use crate::call::Request;
use crate::keys::Keys;
use crate::record::{Current, FIELDS, entries, fencing_of, micros_at, text};

/// Longest owner description accepted, in bytes.
const MAX_OWNER_BYTES: usize = 1024;

/// A fresh id for one call (its retries reuse it). Not from the caller's
/// [`TokenSource`](lease_core::TokenSource): request ids must be unique even when a caller's
/// tokens repeat.
fn request_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Microseconds of a duration, as the scripts take them.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn arg(text: impl ToString) -> Vec<u8> {
    text.to_string().into_bytes()
}

fn flag(present: bool) -> Vec<u8> {
    arg(if present { "1" } else { "0" })
}

/// Whether an acquire script's answer is a grant to this call: granted now, or found as an
/// earlier attempt of the call left it (the request id, entry 12: see the script's reply).
fn ours_granted(answer: &Value, request: &str) -> bool {
    let Value::Array(items) = answer else {
        return false;
    };
    let entry = |i: usize| items.get(i).and_then(text);
    entry(0).as_deref() == Some("granted") || entry(12).as_deref() == Some(request)
}

/// A reply's status (its first entry) and the rest.
fn status<'v>(key: &LeaseKey, value: &'v Value) -> Result<(String, &'v [Value]), LeaseError> {
    let items = entries(key, value)?;
    let (first, rest) = items
        .split_first()
        .ok_or_else(|| LeaseError::corrupt(key.clone(), "a script answered an empty array"))?;
    let status = text(first)
        .ok_or_else(|| LeaseError::corrupt(key.clone(), "a script answered no status"))?;
    Ok((status, rest))
}

impl RedisLeases {
    /// The test hook: the time a manual clock says, which scripts then take for the server's;
    /// empty in production, where the server's clock alone judges expiry.
    fn clock_override(&self) -> Vec<u8> {
        if !self.inner.manual_clock {
            return Vec::new();
        }
        let now = self.inner.clock.now();
        let since = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        arg(micros(since))
    }

    fn key_args(&self, key: &LeaseKey) -> (String, Vec<u8>) {
        (self.inner.keys.lease(key), arg(Keys::payload(key)))
    }

    async fn acquire_inner(
        &self,
        key: &LeaseKey,
        duration: Duration,
        options: &AcquireOptions,
    ) -> Result<Lease, LeaseError> {
        validate_duration(duration)?;
        validate_acquire_options(options)?;
        if let Some(owner) = options.owner()
            && owner.len() > MAX_OWNER_BYTES
        {
            return Err(LeaseError::invalid(
                "owner",
                format!("is {} bytes; the limit is {MAX_OWNER_BYTES}", owner.len()),
            ));
        }
        let inner = &self.inner;
        let token = options
            .token()
            .cloned()
            .unwrap_or_else(|| inner.tokens.next_token());
        let request = request_id();
        let (lease_key, payload) = self.key_args(key);
        let grace = if inner.recreation_grace.is_zero() {
            0
        } else {
            micros(inner.recreation_grace + inner.max_clock_skew)
        };
        let call = Request::Script {
            script: &inner.scripts.acquire,
            keys: vec![
                lease_key,
                inner.keys.meta.clone(),
                inner.keys.index(key.partition()),
            ],
            args: vec![
                arg("acquire"),
                arg(token.as_str()),
                flag(options.owner().is_some()),
                arg(options.owner().unwrap_or("")),
                flag(options.value().is_some()),
                arg(options.value().unwrap_or("")),
                arg(micros(duration)),
                self.clock_override(),
                arg(micros(inner.max_clock_skew)),
                arg(&request),
                arg(grace),
                Vec::new(), // the connection's incarnation
                arg(&inner.keys.channel),
                payload,
                arg(key.sort().unwrap_or("")),
            ],
            incarnation: Some(11),
        };
        let sent_at = inner.clock.monotonic();
        let wait = inner.wait_for_replicas;
        let then = |answer: &Value| {
            let (replicas, timeout) = wait?;
            ours_granted(answer, &request).then(|| {
                let mut cmd = redis::cmd("WAIT");
                cmd.arg(replicas)
                    .arg(timeout.as_millis().max(1).to_string());
                cmd
            })
        };
        let (answer, acknowledged) = self
            .send_then("acquire", &call, options.deadline(), &then)
            .await
            .map_err(crate::RedisError::into_lease_error)?;
        let lease = self.acquire_outcome(key, duration, &token, &request, sent_at, &answer)?;
        match (wait, acknowledged) {
            (Some((replicas, timeout)), Some(acked)) => {
                self.replicated(lease, replicas, timeout, &acked).await
            }
            _ => Ok(lease),
        }
    }

    /// `lease` when `acked` (`WAIT`'s answer) counts `replicas`; else the grant is released
    /// (best effort) and the acquisition fails, transiently.
    async fn replicated(
        &self,
        lease: Lease,
        replicas: u32,
        timeout: Duration,
        acked: &Value,
    ) -> Result<Lease, LeaseError> {
        let count = text(acked).and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
        if count >= u64::from(replicas) {
            return Ok(lease);
        }
        let prefix = &self.inner.keys.prefix;
        tracing::warn!(
            prefix = %prefix, key = %lease.key(), fencing = %lease.fencing_token(),
            acknowledged = count, asked = replicas,
            "grant not acknowledged by enough replicas; releasing it"
        );
        if let Err(error) = self
            .release_inner(lease.key(), lease.token(), lease.fencing_token())
            .await
        {
            tracing::warn!(prefix = %prefix, key = %lease.key(), %error, "releasing an unreplicated grant failed; it expires");
        }
        Err(crate::RedisError::new(
            "acquire",
            prefix,
            crate::RedisErrorKind::Unreplicated,
            format!(
                "the grant reached {count} of the {replicas} replicas asked for within {} \
                 (with_wait_for_replicas); it was released, so that no holder works on a grant \
                 a failover would forget",
                fmt_duration(timeout)
            ),
        )
        .into_lease_error())
    }

    /// What an acquire script's answer means: granted, granted by an earlier attempt of this
    /// call whose reply was lost, refused in a new incarnation's grace, or held.
    fn acquire_outcome(
        &self,
        key: &LeaseKey,
        duration: Duration,
        token: &LeaseToken,
        request: &str,
        sent_at: Instant,
        answer: &Value,
    ) -> Result<Lease, LeaseError> {
        let prefix = &self.inner.keys.prefix;
        let (status, rest) = status(key, answer)?;
        let field = |i: usize| rest.get(i).and_then(text);
        let cur = Current::read(key, rest.get(4..).unwrap_or(&[]))?;
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
        if status == "granted"
            && let (Some(fencing), Some(expires_at)) = (
                fencing_of(key, field(2))?,
                micros_at(key, "expires_at", field(3))?,
            )
        {
            if cur.holder.is_some() {
                lease_core::metrics::takeover(crate::BACKEND);
            }
            tracing::info!(
                prefix = %prefix, %key, %token, %fencing,
                took_over = cur.holder.is_some(),
                "acquired"
            );
            return Ok(granted(fencing, expires_at));
        }
        // An earlier attempt of this very call landed and its reply was lost.
        if cur.request_id.as_deref() == Some(request)
            && cur.holder.as_deref() == Some(token.as_str())
            && let (Some(fencing), Some(expires_at)) = (cur.fencing, cur.expires_at)
        {
            lease_core::metrics::reconciled(crate::BACKEND, "acquire");
            tracing::info!(
                prefix = %prefix, %key, %token, %fencing,
                "acquired (an earlier attempt landed; its reply was lost)"
            );
            return Ok(granted(fencing, expires_at));
        }
        match status.as_str() {
            "grace" => Err(self.in_grace(key, micros_at(key, "grants_from", field(1))?)),
            "held" => {
                tracing::debug!(prefix = %prefix, %key, "held by another owner");
                Err(LeaseError::held(key.clone(), cur.holder_info()))
            }
            other => Err(LeaseError::corrupt(
                key.clone(),
                format!("the acquire script answered {other:?}"),
            )),
        }
    }

    /// `Held` while the server is a new incarnation younger than the recreation grace.
    fn in_grace(&self, key: &LeaseKey, grants_from: Option<SystemTime>) -> LeaseError {
        let inner = &self.inner;
        let until = match grants_from {
            Some(at) => format!("until {}", fmt_time(at)),
            None => "until the grace another client started ends".to_owned(),
        };
        tracing::warn!(
            prefix = %inner.keys.prefix,
            %key,
            "a new incarnation of the Redis data set (restarted, failed over, flushed): no \
             grants until the recreation grace ends"
        );
        let owner = format!(
            "nobody yet: the Redis data set of prefix `{}` is a new incarnation (restarted, \
             failed over or flushed), and a holder in the one it replaced may still run; no \
             grants {until} (a recreation grace of {})",
            inner.keys.prefix,
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
        let (lease_key, _) = self.key_args(key);
        let call = Request::Script {
            script: &inner.scripts.renew,
            keys: vec![lease_key],
            args: vec![
                arg("renew"),
                arg(lease.token().as_str()),
                arg(lease.fencing_token().get()),
                arg(micros(duration)),
                self.clock_override(),
                arg(&request),
            ],
            incarnation: None,
        };
        let sent_at = inner.clock.monotonic();
        let answer = self
            .send("renew", &call, Some(lease.deadline()))
            .await
            .map_err(crate::RedisError::into_lease_error)?;
        let (status, rest) = status(key, &answer)?;
        let renewed = micros_at(key, "expires_at", rest.get(1).and_then(text))?;
        let cur = Current::read(key, rest.get(2..).unwrap_or(&[]))?;
        let ours = cur.holder.as_deref() == Some(lease.token().as_str())
            && cur.fencing == Some(lease.fencing_token());
        let expires_at = match renewed {
            Some(at) if status == "renewed" => Some(at),
            _ if ours && cur.request_id.as_deref() == Some(request.as_str()) => {
                lease_core::metrics::reconciled(crate::BACKEND, "renew");
                cur.expires_at
            }
            _ => None,
        };
        if let Some(expires_at) = expires_at {
            tracing::debug!(prefix = %inner.keys.prefix, %key, fencing = %lease.fencing_token(), "renewed");
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
        tracing::info!(prefix = %inner.keys.prefix, %key, fencing = %lease.fencing_token(), %reason, "renewal refused");
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
        let (lease_key, payload) = self.key_args(key);
        let call = Request::Script {
            script: &inner.scripts.release,
            keys: vec![lease_key],
            args: vec![
                arg("release"),
                arg(token.as_str()),
                arg(fencing.get()),
                arg(&request),
                arg(&inner.keys.channel),
                payload,
            ],
            incarnation: None,
        };
        let answer = self
            .send("release", &call, None)
            .await
            .map_err(crate::RedisError::into_lease_error)?;
        let (status, rest) = status(key, &answer)?;
        if status == "released" {
            tracing::info!(prefix = %inner.keys.prefix, %key, %fencing, "released");
            return Ok(());
        }
        let cur = Current::read(key, rest)?;
        if cur.holder.is_none()
            && cur.fencing == Some(fencing)
            && cur.request_id.as_deref() == Some(request.as_str())
        {
            lease_core::metrics::reconciled(crate::BACKEND, "release");
            tracing::info!(
                prefix = %inner.keys.prefix, %key, %fencing,
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
        let (lease_key, payload) = self.key_args(key);
        let call = Request::Script {
            script: &inner.scripts.delete,
            keys: vec![lease_key, inner.keys.index(key.partition())],
            args: vec![
                arg("delete"),
                flag(holder.is_some()),
                arg(holder.map_or("", LeaseToken::as_str)),
                flag(fencing.is_some()),
                arg(fencing.map_or(0, FencingToken::get)),
                arg(&inner.keys.channel),
                payload,
                arg(key.sort().unwrap_or("")),
            ],
            incarnation: None,
        };
        let answer = self
            .send("delete", &call, None)
            .await
            .map_err(crate::RedisError::into_lease_error)?;
        let (status, rest) = status(key, &answer)?;
        if status == "deleted" {
            tracing::info!(prefix = %inner.keys.prefix, %key, fencing = ?fencing.map(FencingToken::get), "deleted");
            return Ok(());
        }
        let cur = Current::read(key, rest)?;
        let reason = if !cur.exists || (holder.is_some() && cur.holder.is_none()) {
            NotOwnedReason::Missing
        } else {
            NotOwnedReason::TakenOver
        };
        Err(LeaseError::not_owned(key.clone(), reason))
    }

    async fn inspect_inner(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.inner.keys.lease(key)).arg(&[
            "holder",
            "owner",
            "value",
            "fencing",
            "acquired_at",
            "renewed_at",
            "expires_at",
            "request_id",
        ]);
        let answer = self
            .send("inspect", &Request::Command(cmd), None)
            .await
            .map_err(crate::RedisError::into_lease_error)?;
        Ok(Current::read(key, entries(key, &answer)?)?.into_record(key))
    }

    async fn list_inner(&self, partition: &str) -> Result<Vec<LeaseRecord>, LeaseError> {
        // A partition no key may have lists nothing; nothing is sent.
        let Ok(probe) = LeaseKey::new(partition) else {
            return Ok(Vec::new());
        };
        let inner = &self.inner;
        let call = Request::Script {
            script: &inner.scripts.list,
            keys: vec![inner.keys.index(partition)],
            args: vec![arg("list"), arg(inner.keys.lease_partition(partition))],
            incarnation: None,
        };
        let answer = self
            .send("list", &call, None)
            .await
            .map_err(crate::RedisError::into_lease_error)?;
        let items = entries(&probe, &answer)?;
        let mut records = Vec::with_capacity(items.len() / (FIELDS + 1));
        for row in items.chunks(FIELDS + 1) {
            let sort = row.first().and_then(text).unwrap_or_default();
            let key = if sort.is_empty() {
                LeaseKey::new(partition)?
            } else {
                LeaseKey::with_sort_key(partition, sort)?
            };
            if let Some(record) =
                Current::read(&key, row.get(1..).unwrap_or(&[]))?.into_record(&key)
            {
                records.push(record);
            }
        }
        records.sort_by(|a, b| a.key().cmp(b.key()));
        Ok(records)
    }
}

impl LeaseBackend for RedisLeases {
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

    /// One attempt, in one script (one round trip): granted iff the key is free or expired by
    /// the server's clock; the reply carries the current hash, so a refusal names the holder
    /// and a retry after a lost reply finds its own request id. With a recreation grace, the
    /// incarnation check rides in the same script.
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

    /// One script: extends the lease iff the hash holds this tenure and it has not expired by
    /// the server's clock.
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

    /// One script: clears the holder iff it is this tenure, and publishes the change to
    /// waiters.
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(self.release_inner(key, token, fencing))
    }

    /// One `HMGET` of the lease hash.
    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        Box::pin(self.inspect_inner(key))
    }

    /// One script: deletes the lease hash iff it is in exactly the state named. The fencing
    /// counter of a key acquired again afterwards is seeded from the server's clock, so in
    /// practice it stays above the tokens issued before the delete (the contract does not
    /// promise it).
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
        crate::listen::watch(&inner.listener, &inner.source, &inner.keys, key)
    }
}

impl LeaseListing for RedisLeases {
    /// One script reading the partition's index and each of its lease hashes.
    fn list_partition<'a>(
        &'a self,
        partition: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseRecord>, LeaseError>> {
        Box::pin(self.list_inner(partition))
    }
}

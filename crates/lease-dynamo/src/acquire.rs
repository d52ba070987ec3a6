//! Acquire: one conditional `UpdateItem` that takes a free or expired key and increments the
//! fencing counter in the same write.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::ReturnValue;
use lease_core::backend::holder_deadline;
use lease_core::{AcquireOptions, Lease, LeaseError, LeaseKey, LeaseToken};
use tracing::Instrument;

use crate::DynamoLeases;
use crate::error::{backend_error_in, malformed};
use crate::expr::{FENCE_USABLE, KEY_FREE, TOKEN_USABLE};
use crate::item::{
    Decoded, FENCE_LIMIT, Item, Malformed, epoch_micros, epoch_millis, from_millis, millis, n, s,
    seconds_up,
};
use crate::leases::MAX_OWNER_BYTES;
use crate::retry::{Failed, with_retries};

/// What undoing an acquisition does to the fencing counter its write incremented.
#[derive(Debug, Clone, Copy)]
enum Undo {
    /// Remove it: the write created it.
    ForgetCounter,
    /// Take the increment back: the counter is not a whole number.
    Decrement,
}

/// What one acquire call sends, and what it needs to read the reply.
struct Attempt<'a> {
    key: &'a LeaseKey,
    token: LeaseToken,
    duration: Duration,
    /// Unique to this call: a reply-less retry finds it in the item if an attempt landed.
    request: String,
    expires_ms: u64,
    /// The fencing counter an item without one is seeded with (the write adds 1).
    seed: u64,
    sent: Instant,
    trust_until: Instant,
}

impl DynamoLeases {
    /// One conditional `UpdateItem`: take `key` if it has no holder or its holder's lease ended
    /// at least `max_clock_skew` ago, incrementing the fencing counter in the same write.
    pub(crate) async fn acquire_inner(
        &self,
        key: &LeaseKey,
        duration: Duration,
        options: &AcquireOptions,
    ) -> Result<Lease, LeaseError> {
        self.check_input(key, Some(duration))?;
        lease_core::backend::validate_acquire_options(options)?;
        if self.inner.validate && options.owner().is_some_and(|o| o.len() > MAX_OWNER_BYTES) {
            return Err(LeaseError::invalid(
                "owner",
                format!("is longer than {MAX_OWNER_BYTES} bytes"),
            ));
        }
        let inner = &self.inner;
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
            let attempt = Attempt {
                key,
                token,
                duration,
                request: uuid::Uuid::new_v4().simple().to_string(),
                expires_ms: now_ms.saturating_add(millis(duration)),
                seed: epoch_micros(now),
                sent,
                trust_until: holder_deadline(sent, duration, self.margin(duration)),
            };
            let request = self.acquire_request(&attempt, now, options);
            // Retries end when the lease could no longer be trusted, or at the caller's
            // deadline if that comes first.
            let until = options
                .deadline()
                .map_or(attempt.trust_until, |d| d.min(attempt.trust_until));
            let result = with_retries(
                &inner.retry,
                &*inner.clock,
                Some(until),
                "UpdateItem",
                || request.clone().send(),
            )
            .await;
            match result {
                Ok(output) => {
                    let item = output.attributes().cloned().unwrap_or_default();
                    self.acquired(&attempt, &item).await
                }
                Err(Failed {
                    error, attempts, ..
                }) => {
                    let old = self.refused_item(error)?;
                    self.acquire_refused(&attempt, &old, attempts).await
                }
            }
        }
        .instrument(span)
        .await
    }

    fn acquire_request(
        &self,
        attempt: &Attempt<'_>,
        now: std::time::SystemTime,
        options: &AcquireOptions,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        let inner = &self.inner;
        let now_ms = epoch_millis(now);
        let cutoff_ms = now_ms.saturating_sub(millis(inner.max_clock_skew));
        let mut set = vec![
            "#token = :token",
            "#expires = :expires",
            "#expires_ms = :expires_ms",
            "#acquired = :now",
            "#fence = if_not_exists(#fence, :seed) + :one",
            "#request = :request",
        ];
        let mut remove = Vec::new();
        let ttl = self.ttl_at(attempt.expires_ms);
        match ttl {
            Some(_) => set.push("#ttl = :ttl"),
            None => remove.push("#ttl"),
        }
        let owner = options.owner();
        match owner {
            Some(_) => set.push("#owner = :owner"),
            // A previous holder's description must not outlive its lease.
            None => remove.push("#owner"),
        }
        // Nor its published value.
        match options.value() {
            Some(_) => set.push("#value = :value"),
            None => remove.push("#value"),
        }
        let mut update = format!("SET {}", set.join(", "));
        if !remove.is_empty() {
            update.push_str(&format!(" REMOVE {}", remove.join(", ")));
        }
        let condition = format!("{FENCE_USABLE} AND {TOKEN_USABLE} AND {KEY_FREE}");
        let values = vec![
            (":token", s(attempt.token.as_str())),
            (":expires", n(seconds_up(attempt.expires_ms))),
            (":expires_ms", n(attempt.expires_ms)),
            (":now", n(now_ms)),
            (":cutoff_ms", n(cutoff_ms)),
            // Go's items carry only whole seconds, rounded down: Go's own caller may hold one
            // until the next whole second, so take it one second after Go would.
            (":cutoff_s", n((cutoff_ms / 1000).saturating_sub(1))),
            (":cutoff_s_up", n(seconds_up(cutoff_ms))),
            (":seed", n(attempt.seed)),
            (":request", s(&attempt.request)),
            (":ttl", n(ttl.unwrap_or(0))),
            (":owner", s(owner.unwrap_or(""))),
            (":value", s(options.value().unwrap_or(""))),
        ];
        // The attributes as they were before the write (only those it changed): the counter the
        // write incremented, and the token of a holder it replaced, at no extra request.
        self.conditional_update(attempt.key, &condition, &update, values)
            .return_values(ReturnValue::UpdatedOld)
    }

    /// The write succeeded: the lease is ours, with the counter the write produced from the
    /// one in `old` (the changed attributes as they were before it).
    async fn acquired(&self, attempt: &Attempt<'_>, old: &Item) -> Result<Lease, LeaseError> {
        let decoded = Decoded::from_item(&self.inner.names, old);
        let fencing = match (decoded.fencing, decoded.fence_present) {
            (Some(before), _) => before.saturating_add(1),
            (None, false) => attempt.seed.saturating_add(1),
            (None, true) => {
                // The condition passed a counter that is not whole (DynamoDB cannot test for
                // that): give the key back rather than hold it under a token nobody can use, and
                // the counter as it was (DynamoDB's decimal arithmetic is exact).
                let shown = match decoded.malformed {
                    Some(Malformed::Fence(value)) => value,
                    _ => "nothing".to_owned(),
                };
                self.undo_acquire(attempt, Some(Undo::Decrement)).await;
                return Err(self.bad_fence(attempt.key, &shown));
            }
        };
        // The condition let the write replace a holder only if its lease had expired; a
        // released key has no token.
        if decoded.token.is_some() {
            tracing::debug!("took over a lease that expired unreleased");
            lease_core::metrics::takeover(crate::BACKEND);
        }
        // A write that created the counter found the item missing, perhaps with its table:
        // undone, the counter goes too, so that the next attempt starts from the clock again.
        let fencing = self
            .settle_incarnation(attempt, fencing, !decoded.fence_present)
            .await?;
        tracing::Span::current().record("fencing", fencing);
        tracing::debug!("lease acquired");
        Ok(lease_core::backend::new_lease(
            attempt.key.clone(),
            attempt.token.clone(),
            lease_core::backend::fencing_token(fencing),
            attempt.duration,
            from_millis(attempt.expires_ms),
            attempt.trust_until,
        ))
    }

    /// The incarnation check of a landed acquisition holding `fencing` (see
    /// [`check_incarnation`](DynamoLeases::check_incarnation)): the fencing token to issue, the
    /// counter raised first when it may come from a table this one replaced; or, in a table
    /// too young to trust (or when the check or the raise fails), the acquisition undone and
    /// the error. Sends nothing without a recreation grace.
    async fn settle_incarnation(
        &self,
        attempt: &Attempt<'_>,
        fencing: u64,
        created_counter: bool,
    ) -> Result<u64, LeaseError> {
        let floor = match self.check_incarnation(attempt.key, fencing).await {
            Ok(None) => return Ok(fencing),
            Ok(Some(floor)) => floor,
            Err(error) => {
                self.undo_acquire(attempt, created_counter.then_some(Undo::ForgetCounter))
                    .await;
                return Err(error);
            }
        };
        match self.raise_fence(attempt, fencing, floor).await {
            Ok(()) => Ok(floor),
            Err(error) => {
                self.undo_acquire(attempt, None).await;
                Err(error)
            }
        }
    }

    /// Raises the counter of the key this call holds from `from` to `to` (one conditional
    /// `UpdateItem`, on this call's request id and the counter it wrote).
    async fn raise_fence(
        &self,
        attempt: &Attempt<'_>,
        from: u64,
        to: u64,
    ) -> Result<(), LeaseError> {
        let inner = &self.inner;
        let values = vec![
            (":request", s(&attempt.request)),
            (":from", n(from)),
            (":to", n(to)),
        ];
        let request = self.conditional_update(
            attempt.key,
            "#request = :request AND #fence = :from",
            "SET #fence = :to",
            values,
        );
        let result = with_retries(
            &inner.retry,
            &*inner.clock,
            Some(attempt.trust_until),
            "UpdateItem",
            || request.clone().send(),
        )
        .await;
        let error = match result {
            Ok(_) => {
                tracing::info!(from, to, "fencing counter raised");
                return Ok(());
            }
            Err(Failed { error, .. }) => error,
        };
        let old = Decoded::from_item(&inner.names, &self.refused_item(error)?);
        // An earlier attempt whose reply was lost raised it.
        if old.request.as_deref() == Some(attempt.request.as_str()) && old.fencing == Some(to) {
            return Ok(());
        }
        // Not ours any more: the table was restored again, or the key taken over after this
        // call's lease ran out, between the acquisition and the raise. That is a key held (or
        // freed) by somebody else, not a corrupt item, unless the item says otherwise; a
        // waiting acquire tries again.
        if let Some(error) = self.corrupt(attempt.key, &old) {
            return Err(error);
        }
        tracing::debug!(
            holder = ?old.holder(),
            "the item changed under the fencing counter's raise"
        );
        Err(LeaseError::held(attempt.key.clone(), old.holder()))
    }

    /// The condition failed: an earlier attempt of this call may have landed (its reply lost),
    /// the item may be unusable, or somebody holds the key.
    async fn acquire_refused(
        &self,
        attempt: &Attempt<'_>,
        old: &Item,
        attempts: u32,
    ) -> Result<Lease, LeaseError> {
        let old = Decoded::from_item(&self.inner.names, old);
        if old.request.as_deref() == Some(attempt.request.as_str()) {
            return self.reconciled(attempt, &old, attempts).await;
        }
        if let Some(error) = self.corrupt(attempt.key, &old) {
            return Err(error);
        }
        let holder = old.holder();
        tracing::debug!(holder = ?holder, "lease held by another owner");
        Err(LeaseError::held(attempt.key.clone(), holder))
    }

    /// An earlier attempt of this very call wrote the item: the lease is ours.
    async fn reconciled(
        &self,
        attempt: &Attempt<'_>,
        old: &Decoded,
        attempts: u32,
    ) -> Result<Lease, LeaseError> {
        let fencing = old.fencing.ok_or_else(|| {
            malformed(
                attempt.key,
                &self.inner.table,
                "our acquisition landed but the item lacks a valid fencing counter",
            )
        })?;
        let fencing = self.settle_incarnation(attempt, fencing, false).await?;
        let stored_ms = old.expires_ms.unwrap_or(attempt.expires_ms);
        let shortfall = Duration::from_millis(attempt.expires_ms.saturating_sub(stored_ms));
        tracing::Span::current().record("fencing", fencing);
        tracing::info!(
            attempts,
            "acquire reconciled: our earlier attempt wrote the item"
        );
        lease_core::metrics::reconciled(crate::BACKEND, "acquire");
        Ok(lease_core::backend::new_lease(
            attempt.key.clone(),
            attempt.token.clone(),
            lease_core::backend::fencing_token(fencing),
            attempt.duration,
            from_millis(stored_ms),
            attempt
                .trust_until
                .checked_sub(shortfall)
                .unwrap_or(attempt.sent),
        ))
    }

    /// Gives back a key this call took (best effort, one request), and with `counter` undoes
    /// what the write did to its fencing counter: removes one it created in a table too young
    /// to trust (whose next acquisition must find no counter again), or takes back the
    /// increment of an unusable (fractional) one, so that refused acquisitions leave it as
    /// they found it.
    async fn undo_acquire(&self, attempt: &Attempt<'_>, counter: Option<Undo>) {
        let inner = &self.inner;
        let values = vec![
            (":request", s(&attempt.request)),
            (":undone", s(&format!("{}-undone", attempt.request))),
        ];
        let base = "SET #expires = :zero, #request = :undone";
        let remove = "REMOVE #token, #owner, #value, #acquired, #expires_ms";
        let update = match counter {
            Some(Undo::ForgetCounter) => format!("{base} {remove}, #fence"),
            Some(Undo::Decrement) => format!("{base}, #fence = #fence - :one {remove}"),
            None => format!("{base} {remove}"),
        };
        let request = self.conditional_update(attempt.key, "#request = :request", &update, values);
        let result = with_retries(&inner.retry, &*inner.clock, None, "UpdateItem", || {
            request.clone().send()
        })
        .await;
        match result {
            Ok(_) => tracing::warn!(counter = ?counter, "acquisition undone"),
            Err(failed) => tracing::error!(
                error = %backend_error_in("UpdateItem", &self.error_context(), failed.error),
                "could not undo an acquisition"
            ),
        }
    }

    /// The error an item [`Decoded::corruption`] refuses is reported as, or `None` for a
    /// usable one: what acquire, `inspect` and `inspect_strict` say of it alike.
    pub(crate) fn corrupt(&self, key: &LeaseKey, item: &Decoded) -> Option<LeaseError> {
        Some(match item.corruption()? {
            Malformed::Fence(value) => self.bad_fence(key, &value),
            Malformed::Expiry(value) => self.bad_expiry(key, value.as_deref()),
            Malformed::Token(value) => malformed(
                key,
                &self.inner.table,
                format!(
                    "attribute `{}` holds {value}, which is not a holder token (a string): no \
                     writer of this crate or the Go package writes it so, and no acquisition \
                     takes the key over. Check that every writer uses the same attribute \
                     names, then repair or delete the item",
                    self.inner.names.token.as_str()
                ),
            ),
        })
    }

    pub(crate) fn bad_fence(&self, key: &LeaseKey, value: &str) -> LeaseError {
        malformed(
            key,
            &self.inner.table,
            format!(
                "attribute `{}` holds {value}, which is not a fencing counter \
                 (a whole number from 0 to {FENCE_LIMIT}); nothing was acquired. Repair or \
                 remove the attribute: fencing tokens then restart from the clock-seeded value",
                self.inner.names.fencing.as_str()
            ),
        )
    }

    pub(crate) fn bad_expiry(&self, key: &LeaseKey, value: Option<&str>) -> LeaseError {
        let found = value.map_or_else(|| "is missing".to_owned(), |v| format!("holds {v}"));
        malformed(
            key,
            &self.inner.table,
            format!(
                "the item has a holder token but attribute `{}` {found}, so it never \
                 expires: neither this crate nor the Go package writes an item so. Check that \
                 every writer uses the same attribute names, then repair the attribute or \
                 delete the item",
                self.inner.names.expires_at.as_str()
            ),
        )
    }
}

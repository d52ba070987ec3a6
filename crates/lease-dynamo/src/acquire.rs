//! Acquire: one conditional `UpdateItem` that takes a free or expired key and increments the
//! fencing counter in the same write.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::ReturnValue;
use lease_core::backend::holder_deadline;
use lease_core::{AcquireOptions, Lease, LeaseError, LeaseKey, LeaseToken};
use tracing::Instrument;

use crate::DynamoLeases;
use crate::error::{backend_error_in, malformed};
use crate::expr::{FENCE_USABLE, KEY_FREE};
use crate::item::{
    Decoded, FENCE_LIMIT, Item, Malformed, epoch_micros, epoch_millis, from_millis, millis, n, s,
    seconds_up,
};
use crate::leases::MAX_OWNER_BYTES;
use crate::retry::{Failed, with_retries};

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
        let condition = format!("{FENCE_USABLE} AND {KEY_FREE}");
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
                // that): give the key back rather than hold it under a token nobody can use.
                let shown = match decoded.malformed {
                    Some(Malformed::Fence(value)) => plus_one(&value),
                    _ => "nothing".to_owned(),
                };
                self.undo_acquire(attempt, false).await;
                return Err(self.bad_fence(attempt.key, &format!("{shown} after the increment")));
            }
        };
        // The condition let the write replace a holder only if its lease had expired; a
        // released key has no token.
        if decoded.token.is_some() {
            tracing::debug!("took over a lease that expired unreleased");
            lease_core::metrics::takeover(crate::BACKEND);
        }
        // The write created the counter: the item was missing, perhaps with its table.
        if !decoded.fence_present
            && let Err(error) = self.check_recreation_grace(attempt.key).await
        {
            self.undo_acquire(attempt, true).await;
            return Err(error);
        }
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
            return self.reconciled(attempt, &old, attempts);
        }
        match &old.malformed {
            Some(Malformed::Fence(value)) => return Err(self.bad_fence(attempt.key, value)),
            Some(Malformed::Expiry(value)) => {
                return Err(self.bad_expiry(attempt.key, value.as_deref()));
            }
            None => {}
        }
        if old.fencing.is_some_and(|f| f >= FENCE_LIMIT) {
            return Err(self.bad_fence(attempt.key, &format!("N {FENCE_LIMIT} (exhausted)")));
        }
        let holder = old.holder();
        tracing::debug!(holder = ?holder, "lease held by another owner");
        Err(LeaseError::held(attempt.key.clone(), holder))
    }

    /// An earlier attempt of this very call wrote the item: the lease is ours.
    fn reconciled(
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

    /// Gives back a key this call took (best effort, one request): with an unusable counter, or
    /// (`forget_counter`) one it created in a table too young to trust, whose next acquisition
    /// must find no counter again.
    async fn undo_acquire(&self, attempt: &Attempt<'_>, forget_counter: bool) {
        let inner = &self.inner;
        let values = vec![
            (":request", s(&attempt.request)),
            (":undone", s(&format!("{}-undone", attempt.request))),
        ];
        let update = if forget_counter {
            "SET #expires = :zero, #request = :undone REMOVE #token, #owner, #value, #acquired, #expires_ms, #fence"
        } else {
            "SET #expires = :zero, #request = :undone REMOVE #token, #owner, #value, #acquired, #expires_ms"
        };
        let request = self.conditional_update(attempt.key, "#request = :request", update, values);
        let result = with_retries(&inner.retry, &*inner.clock, None, "UpdateItem", || {
            request.clone().send()
        })
        .await;
        match result {
            Ok(_) => tracing::warn!(forget_counter, "acquisition undone"),
            Err(failed) => tracing::error!(
                error = %backend_error_in("UpdateItem", &self.error_context(), failed.error),
                "could not undo an acquisition with an unusable fencing counter"
            ),
        }
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
                 every writer uses the same attribute names, or break the lease with a forced \
                 release of the holder's token",
                self.inner.names.expires_at.as_str()
            ),
        )
    }
}

/// A shown counter (`N 1.5`) as the increment left it (`N 2.5`): the reply holds the value
/// before it. Shown unchanged with `plus 1` where it is not a plain decimal.
fn plus_one(shown: &str) -> String {
    let number = shown.strip_prefix("N ").unwrap_or(shown);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    match whole.parse::<u128>() {
        Ok(whole) if fraction.bytes().all(|b| b.is_ascii_digit()) => {
            let dot = if fraction.is_empty() { "" } else { "." };
            format!("N {}{dot}{fraction}", whole.saturating_add(1))
        }
        _ => format!("{shown} plus 1"),
    }
}

//! Renew and release: one conditional `UpdateItem` each, on the caller's tenure (its token and
//! its fencing counter).

use std::time::Duration;

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use lease_core::backend::holder_deadline;
use lease_core::{FencingToken, Lease, LeaseError, LeaseKey, LeaseToken, NotOwnedReason};
use tracing::Instrument;

use crate::DynamoLeases;
use crate::expr::{TENURE, TENURE_UNFENCED};
use crate::item::{Decoded, epoch_millis, from_millis, millis, n, s, seconds_up};
use crate::retry::{Failed, with_retries};

/// Why a write conditioned on `(token, fencing)` failed, from the item it found.
fn not_owned_reason(old: &Decoded, token: &LeaseToken, fencing: FencingToken) -> NotOwnedReason {
    match &old.token {
        None => NotOwnedReason::Missing,
        Some(t) if t == token && old.fencing.unwrap_or(0) == fencing.get() => {
            NotOwnedReason::Expired
        }
        Some(_) => NotOwnedReason::TakenOver,
    }
}

impl DynamoLeases {
    /// One conditional `UpdateItem` extending the expiry, if our tenure holds an unexpired lease.
    pub(crate) async fn renew_inner(
        &self,
        lease: &Lease,
        duration: Duration,
    ) -> Result<Lease, LeaseError> {
        let key = lease.key();
        self.check_input(key, Some(duration))?;
        let inner = &self.inner;
        let token = lease.token();
        let fencing = lease.fencing_token();
        let span = tracing::debug_span!(
            "lease_dynamo.renew",
            table = %inner.table,
            %key,
            %token,
            fencing = fencing.get(),
        );
        async {
            let sent = inner.clock.monotonic();
            let now_ms = epoch_millis(inner.clock.now());
            let expires_ms = now_ms.saturating_add(millis(duration));
            let request = self.renew_request(lease, now_ms, expires_ms);
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
                lease_core::backend::new_lease(
                    key.clone(),
                    token.clone(),
                    fencing,
                    duration,
                    from_millis(expires_ms),
                    holder_deadline(sent, duration, self.margin(duration)),
                )
            };
            let (error, attempts) = match result {
                Ok(_) => {
                    tracing::debug!("lease renewed");
                    return Ok(renewed());
                }
                Err(Failed {
                    error, attempts, ..
                }) => (error, attempts),
            };
            // The table is gone (deleted, or DynamoDB Local restarted in memory), and the lease
            // item with it: the lease is lost now, whatever its deadline says; a table created
            // again under the same name holds no item of ours either.
            if matches!(
                error.as_service_error(),
                Some(UpdateItemError::ResourceNotFoundException(_))
            ) {
                tracing::warn!("renew refused: the table does not exist, and the lease with it");
                return Err(LeaseError::not_owned(key.clone(), NotOwnedReason::Missing));
            }
            let old = self.refused_item(error)?;
            let old = Decoded::from_item(&inner.names, &old);
            // Only this tenure writes this expiry: an earlier attempt of ours landed.
            if old.token.as_ref() == Some(token)
                && old.fencing == Some(fencing.get())
                && old.expires_ms.is_some_and(|e| e >= expires_ms)
            {
                tracing::info!(attempts, "renew reconciled: the item shows our expiry");
                lease_core::metrics::reconciled(crate::BACKEND, "renew");
                return Ok(renewed());
            }
            let reason = not_owned_reason(&old, token, fencing);
            tracing::debug!(%reason, "renew refused");
            Err(LeaseError::not_owned(key.clone(), reason))
        }
        .instrument(span)
        .await
    }

    /// The renewal request: `SET` the expiry (seconds and milliseconds) and TTL, if the item
    /// holds `lease`'s tenure and it has not expired.
    fn renew_request(
        &self,
        lease: &Lease,
        now_ms: u64,
        expires_ms: u64,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        let ttl = self.ttl_at(expires_ms);
        let update = match ttl {
            Some(_) => "SET #expires = :expires, #expires_ms = :expires_ms, #ttl = :ttl",
            None => "SET #expires = :expires, #expires_ms = :expires_ms REMOVE #ttl",
        };
        let values = vec![
            (":token", s(lease.token().as_str())),
            (":fence", n(lease.fencing_token().get())),
            (":expires", n(seconds_up(expires_ms))),
            (":expires_ms", n(expires_ms)),
            (":now_ms", n(now_ms)),
            (":ttl", n(ttl.unwrap_or(0))),
        ];
        let condition = format!("{TENURE} AND #expires_ms > :now_ms");
        self.conditional_update(lease.key(), &condition, update, values)
    }

    /// One conditional `UpdateItem` removing the holder of the tenure `(token, fencing)`. The
    /// item and its fencing counter stay; the expiry becomes 0, so the Go package sees the key
    /// free too.
    pub(crate) async fn release_inner(
        &self,
        key: &LeaseKey,
        token: &LeaseToken,
        fencing: FencingToken,
    ) -> Result<(), LeaseError> {
        self.check_input(key, None)?;
        let inner = &self.inner;
        let span = tracing::debug_span!(
            "lease_dynamo.release",
            table = %inner.table,
            %key,
            %token,
            fencing = fencing.get(),
        );
        async {
            let request_id = uuid::Uuid::new_v4().simple().to_string();
            let now_ms = epoch_millis(inner.clock.now());
            let ttl = self.ttl_at(now_ms);
            let remove = "REMOVE #token, #owner, #value, #acquired, #expires_ms";
            let update = match ttl {
                // The released item (and its fencing counter) is collected a buffer from now.
                Some(_) => {
                    format!("SET #expires = :zero, #request = :request, #ttl = :ttl {remove}")
                }
                None => format!("SET #expires = :zero, #request = :request {remove}, #ttl"),
            };
            // A tenure of an item with no fencing counter (a Go holder's) is named with raw 0.
            let condition = if fencing.get() == crate::item::NO_COUNTER {
                TENURE_UNFENCED
            } else {
                TENURE
            };
            let values = vec![
                (":token", s(token.as_str())),
                (":fence", n(fencing.get())),
                (":request", s(&request_id)),
                (":ttl", n(ttl.unwrap_or(0))),
            ];
            let request = self.conditional_update(key, condition, &update, values);
            let result = with_retries(&inner.retry, &*inner.clock, None, "UpdateItem", || {
                request.clone().send()
            })
            .await;
            let (error, attempts) = match result {
                Ok(_) => {
                    tracing::debug!("lease released");
                    return Ok(());
                }
                Err(Failed {
                    error, attempts, ..
                }) => (error, attempts),
            };
            let old = self.refused_item(error)?;
            let old = Decoded::from_item(&inner.names, &old);
            // Only this call writes its request id: an earlier attempt of ours landed, and
            // nothing has changed the holder since.
            if old.request.as_deref() == Some(request_id.as_str()) {
                tracing::info!(attempts, "release reconciled: our earlier attempt landed");
                lease_core::metrics::reconciled(crate::BACKEND, "release");
                return Ok(());
            }
            let reason = match not_owned_reason(&old, token, fencing) {
                // Our tenure with a failed tenure condition cannot happen; be safe.
                NotOwnedReason::Expired => NotOwnedReason::TakenOver,
                other => other,
            };
            tracing::debug!(%reason, "release refused");
            Err(LeaseError::not_owned(key.clone(), reason))
        }
        .instrument(span)
        .await
    }
}

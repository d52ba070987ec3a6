//! The worker's session: acquired once, renewed on its own schedule between any two unit
//! requests, trusted only as far as replies that came back in time allow, and never renewed once
//! that trust has lapsed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_core::{
    AcquireOptions, Lease, LeaseBackend, LeaseError, LeaseToken, LossReason, NotOwnedReason,
};

use super::builder::Config;
use super::counted::CountedStore;

/// The session lease and how far it is trusted.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    pub(crate) lease: Lease,
    /// Until when its units may be trusted: the send of the newest renewal whose reply came back
    /// within the bound, plus the duration, minus the margin.
    pub(crate) trust_until: Instant,
    /// When the next renewal is due.
    pub(crate) renew_due: Instant,
    /// The error of the latest renewal, if it failed: what a lapse is blamed on.
    pub(crate) last_error: Option<Arc<LeaseError>>,
}

/// Why every unit goes when the store refuses the session's renewal.
fn refused(error: &LeaseError) -> LossReason {
    match error {
        LeaseError::Lost { reason, .. } => reason.clone(),
        _ => LossReason::NotOwned(
            error
                .not_owned_reason()
                .unwrap_or(NotOwnedReason::TakenOver),
        ),
    }
}

/// What keeping a session asks of the worker that owns it.
#[derive(Debug)]
pub(crate) enum Kept {
    /// Nothing was due, or a renewal failed and the session stays trusted until its deadline
    /// (the renewal is retried sooner).
    Unchanged,
    /// Renewed: the worker publishes the new trust.
    Renewed,
    /// The session is over: the worker drops every unit for `reason`, forgets the session, then
    /// releases `release` (best effort) so that peers take over at once.
    Ended {
        reason: LossReason,
        release: Option<Lease>,
    },
}

impl Session {
    /// Whether the session may be trusted at `now`.
    pub(crate) fn trusted_at(&self, now: Instant) -> bool {
        now < self.trust_until
    }

    /// Keeps the session trusted: renews it if a renewal is due, and ends it once its trust has
    /// lapsed. The worker calls it before every unit request, so unit work of any length never
    /// starves the session.
    pub(crate) async fn keep(&mut self, config: &Config, store: &CountedStore) -> Kept {
        let now = store.clock().monotonic();
        if now >= self.trust_until {
            return self.lapse(config);
        }
        if now >= self.renew_due {
            return self.renew(config, store).await;
        }
        Kept::Unchanged
    }

    async fn renew(&mut self, config: &Config, store: &CountedStore) -> Kept {
        let sent = store.clock().monotonic();
        let outcome = store.renew(&self.lease, config.session_duration).await;
        let reply = store.clock().monotonic();
        match outcome {
            Ok(renewed) => {
                let trusted = trust_from(config, sent, reply, &renewed);
                *self = Session {
                    trust_until: trusted.map_or(self.trust_until, |t| t.max(self.trust_until)),
                    renew_due: if trusted.is_some() {
                        sent + config.interval
                    } else {
                        reply + config.interval / 4
                    },
                    lease: renewed,
                    last_error: None,
                };
                Kept::Renewed
            }
            Err(error) if error.is_not_owned() => {
                tracing::warn!(worker = %config.worker_id, %error, "fleet: session lost; dropping every unit");
                Kept::Ended {
                    reason: refused(&error),
                    release: None,
                }
            }
            Err(error) => {
                tracing::warn!(worker = %config.worker_id, %error, "fleet: session renewal failed; trusting it until its deadline");
                self.renew_due = reply + config.interval / 4;
                // A lapse reports it as the reason (and its source).
                self.last_error = Some(Arc::new(error));
                Kept::Unchanged
            }
        }
    }

    /// Ends a session whose trust lapsed: every unit is lost first, then the session is released
    /// (best effort) so that peers take over at once. A lapsed session is never renewed: a renewal
    /// landing now could follow a peer's verdict on an older version of the record.
    fn lapse(&self, config: &Config) -> Kept {
        tracing::warn!(worker = %config.worker_id, "fleet: session trust lapsed before a renewal answered in time; dropping every unit");
        let reason = match self.last_error.clone() {
            Some(last_error) => LossReason::BackendFailing(last_error),
            None => LossReason::DeadlinePassed,
        };
        Kept::Ended {
            reason,
            release: Some(self.lease.clone()),
        }
    }

    /// Acquires a new session: `None` when none is held and trusted after (a session of this
    /// worker id is still live because this worker restarted, which is waited out, or the reply
    /// came too late to trust).
    ///
    /// # Errors
    /// A store failure other than "held".
    pub(crate) async fn start(
        config: &Config,
        store: &CountedStore,
    ) -> Result<Option<Self>, LeaseError> {
        let token = config.tag().token(config.tokens.next_token().as_str());
        let token = LeaseToken::new(token)?;
        let options = AcquireOptions::default()
            .with_owner(config.worker_id.clone())
            .with_token(token);
        let sent = store.clock().monotonic();
        let outcome = store
            .try_acquire(&config.session_key, config.session_duration, &options)
            .await;
        let reply = store.clock().monotonic();
        match outcome {
            Ok(lease) => {
                let Some(trust_until) = trust_from(config, sent, reply, &lease) else {
                    let _ = store
                        .release(lease.key(), lease.token(), lease.fencing_token())
                        .await;
                    return Ok(None);
                };
                tracing::info!(worker = %config.worker_id, fencing = %lease.fencing_token(), "fleet: session started");
                Ok(Some(Session {
                    lease,
                    trust_until,
                    renew_due: sent + config.interval,
                    last_error: None,
                }))
            }
            Err(error) if error.is_held() => {
                tracing::debug!(worker = %config.worker_id, "fleet: an earlier session of this worker id is still live; waiting");
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }
}

/// The trust a request sent at `sent` and answered at `reply` gives `lease`, if its reply came
/// back within the bound. A slower reply proves nothing about when it landed: a peer may already
/// have judged the session by an older version of its record.
fn trust_from(config: &Config, sent: Instant, reply: Instant, lease: &Lease) -> Option<Instant> {
    let took = reply.saturating_duration_since(sent);
    if took > config.reply_bound() {
        slow_replies_warn(config, took);
        return None;
    }
    let own = lease_core::backend::holder_deadline(sent, config.session_duration, config.margin);
    Some(own.min(lease.deadline()))
}

fn slow_replies_warn(config: &Config, took: Duration) {
    tracing::warn!(
        worker = %config.worker_id,
        took_ms = took.as_millis(),
        bound_ms = config.reply_bound().as_millis(),
        "fleet: a session reply came back too late to extend trust"
    );
}

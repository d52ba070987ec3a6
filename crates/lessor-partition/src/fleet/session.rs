//! The worker's session: acquired once, renewed on its own schedule between any two unit
//! requests, trusted only as far as replies that came back in time allow, and never renewed once
//! that trust has lapsed.

use std::time::{Duration, Instant};

use lease_core::{
    AcquireOptions, Lease, LeaseBackend, LeaseError, LeaseToken, LossReason, NotOwnedReason,
};

use super::types::FleetEvent;
use super::worker::Worker;

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
    pub(crate) last_error: Option<String>,
}

/// Why every unit goes when the store refuses the session's renewal.
fn refused(error: &LeaseError) -> LossReason {
    error.loss_reason().cloned().unwrap_or_else(|| {
        LossReason::NotOwned(
            error
                .not_owned_reason()
                .unwrap_or(NotOwnedReason::TakenOver),
        )
    })
}

impl Worker {
    /// Keeps the session trusted: renews it if a renewal is due, and ends it (dropping every unit)
    /// once its trust has lapsed. Call it before every unit request, so unit work of any length
    /// never starves the session. Returns whether the session is trusted after.
    pub(crate) async fn keep_session(&mut self, events: &mut Vec<FleetEvent>) -> bool {
        let now = self.clock().monotonic();
        let Some(session) = self.session.as_ref() else {
            return false;
        };
        if now >= session.trust_until {
            self.lapse(events).await;
            return false;
        }
        if now >= session.renew_due {
            self.renew_session(events).await;
        }
        self.session_trusted()
    }

    async fn renew_session(&mut self, events: &mut Vec<FleetEvent>) {
        let Some(session) = self.session.clone() else {
            return;
        };
        let sent = self.clock().monotonic();
        let outcome = self
            .store
            .renew(&session.lease, self.config.session_duration)
            .await;
        let reply = self.clock().monotonic();
        match outcome {
            Ok(renewed) => {
                let trusted = self.trust_from(sent, reply, &renewed);
                let next = Session {
                    trust_until: trusted
                        .map_or(session.trust_until, |t| t.max(session.trust_until)),
                    renew_due: if trusted.is_some() {
                        sent + self.config.interval
                    } else {
                        reply + self.config.interval / 4
                    },
                    lease: renewed,
                    last_error: None,
                };
                self.set_session(Some(next));
            }
            Err(error) if error.is_not_owned() => {
                tracing::warn!(worker = %self.config.worker_id, %error, "fleet: session lost; dropping every unit");
                self.lose_all(refused(&error), events);
                self.set_session(None);
            }
            Err(error) => {
                tracing::warn!(worker = %self.config.worker_id, %error, "fleet: session renewal failed; trusting it until its deadline");
                let retry = reply + self.config.interval / 4;
                if let Some(session) = self.session.as_mut() {
                    session.renew_due = retry;
                    session.last_error = Some(error.to_string());
                }
            }
        }
    }

    /// The trust a request sent at `sent` and answered at `reply` gives `lease`, if its reply came
    /// back within the bound. A slower reply proves nothing about when it landed: a peer may
    /// already have judged the session by an older version of its record.
    fn trust_from(&self, sent: Instant, reply: Instant, lease: &Lease) -> Option<Instant> {
        let took = reply.saturating_duration_since(sent);
        if took > self.config.reply_bound() {
            self.slow_replies_warn(took);
            return None;
        }
        let own = lease_core::backend::holder_deadline(
            sent,
            self.config.session_duration,
            self.config.margin,
        );
        Some(own.min(lease.deadline()))
    }

    fn slow_replies_warn(&self, took: Duration) {
        tracing::warn!(
            worker = %self.config.worker_id,
            took_ms = took.as_millis(),
            bound_ms = self.config.reply_bound().as_millis(),
            "fleet: a session reply came back too late to extend trust"
        );
    }

    /// Ends a session whose trust lapsed: every unit is lost first, then the session is released
    /// (best effort) so that peers take over at once. A lapsed session is never renewed: a renewal
    /// landing now could follow a peer's verdict on an older version of the record.
    async fn lapse(&mut self, events: &mut Vec<FleetEvent>) {
        tracing::warn!(worker = %self.config.worker_id, "fleet: session trust lapsed before a renewal answered in time; dropping every unit");
        let reason = match self.session.as_ref().and_then(|s| s.last_error.clone()) {
            Some(last_error) => LossReason::BackendFailing { last_error },
            None => LossReason::DeadlinePassed,
        };
        self.lose_all(reason, events);
        if let Some(session) = self.session.take() {
            self.set_session(None);
            let lease = &session.lease;
            let _ = self
                .store
                .release(lease.key(), lease.token(), lease.fencing_token())
                .await;
        }
    }

    /// Acquires a new session. Returns whether one is held and trusted after.
    ///
    /// # Errors
    /// A store failure other than "held": a session of this worker id is still live (this
    /// worker restarted), which is waited out.
    pub(crate) async fn start_session(&mut self) -> Result<bool, LeaseError> {
        let token = self
            .config
            .tag()
            .token(self.config.tokens.next_token().as_str());
        let token = LeaseToken::new(token)?;
        let options = AcquireOptions::default()
            .with_owner(self.config.worker_id.clone())
            .with_token(token);
        let sent = self.clock().monotonic();
        let outcome = self
            .store
            .try_acquire(
                &self.config.session_key,
                self.config.session_duration,
                &options,
            )
            .await;
        let reply = self.clock().monotonic();
        match outcome {
            Ok(lease) => {
                let Some(trust_until) = self.trust_from(sent, reply, &lease) else {
                    let _ = self
                        .store
                        .release(lease.key(), lease.token(), lease.fencing_token())
                        .await;
                    return Ok(false);
                };
                tracing::info!(worker = %self.config.worker_id, fencing = %lease.fencing_token(), "fleet: session started");
                self.set_session(Some(Session {
                    lease,
                    trust_until,
                    renew_due: sent + self.config.interval,
                    last_error: None,
                }));
                self.planned_members = None;
                self.pending_takes.clear();
                Ok(true)
            }
            Err(error) if error.is_held() => {
                tracing::debug!(worker = %self.config.worker_id, "fleet: an earlier session of this worker id is still live; waiting");
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }
}

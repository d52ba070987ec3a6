//! Store loss: a table deleted and recreated (or restored from a backup, or DynamoDB Local
//! restarted) has forgotten every holder, who keep running until their next renewal fails; a
//! restored one also holds items from the past, whose holders look expired and whose fencing
//! counters are older than tokens already issued. With a recreation grace, every acquisition
//! that wrote is therefore checked against the table it landed in: in a table younger than the
//! grace (the longest lease any holder may have in the table it replaced), the key is given back
//! and reported held until the grace ends (Chubby's grace period after a master change); past
//! it, a counter not above the end of the grace is raised to the clock, so tokens never repeat
//! or go backwards across a restore.

use std::time::SystemTime;

use lease_core::{Holder, LeaseError, LeaseKey};

use crate::DynamoErrorKind;
use crate::DynamoLeases;
use crate::error::{DynamoError, backend_error_in};
use crate::item::epoch_micros;

impl DynamoLeases {
    /// When the table was created, by DynamoDB (`DescribeTable`, one request).
    async fn table_created(&self) -> Result<SystemTime, LeaseError> {
        let inner = &self.inner;
        let described = inner
            .client
            .describe_table()
            .table_name(&inner.table)
            .send()
            .await
            .map_err(|e| backend_error_in("DescribeTable", &self.error_context(), e))?;
        described
            .table()
            .and_then(|t| t.creation_date_time())
            .and_then(|t| SystemTime::try_from(*t).ok())
            .ok_or_else(|| {
                LeaseError::backend(
                    crate::BACKEND,
                    false,
                    DynamoError::new(
                        "DescribeTable",
                        &inner.table,
                        DynamoErrorKind::Rejected,
                        "the table description has no creation time",
                    ),
                )
            })
    }

    /// The incarnation check of an acquisition whose write landed, holding fencing token
    /// `fencing`: `Err(Held)` while the table (as `DescribeTable` reports it *after* the write,
    /// so it is the table the write landed in) is younger than the recreation grace plus the
    /// clock skew allowance, as seen by this manager's clock; `Ok(Some(floor))` when the token
    /// may belong to a table this one replaced (it is not above the instant the grace ended, in
    /// microseconds: every counter this crate seeds or raises in this table is above it) and
    /// must be raised to `floor`; `Ok(None)` when nothing is to be done, or no grace is
    /// configured (then nothing is sent).
    ///
    /// A restored table is a new table (its creation time is the restore's) holding old items:
    /// every acquisition is checked, not only one that created its key's counter, because
    /// nothing in a restored item tells it from a live one. Cost: one `DescribeTable` per
    /// acquisition that wrote, none for a refused one.
    pub(crate) async fn check_incarnation(
        &self,
        key: &LeaseKey,
        fencing: u64,
    ) -> Result<Option<u64>, LeaseError> {
        let inner = &self.inner;
        if inner.recreation_grace.is_zero() {
            return Ok(None);
        }
        let created = self.table_created().await?;
        tracing::debug!(
            table = %inner.table,
            created = %lease_core::backend::fmt_time(created),
            "DescribeTable: the incarnation the acquisition landed in"
        );
        let trusted_from = created + inner.recreation_grace + inner.max_clock_skew;
        let now = inner.clock.now();
        if now >= trusted_from {
            // Tokens issued in a table this one replaced were issued before it was created, so
            // are at most the issuing clock's reading then (see *Fencing* in `design`): below
            // the end of this table's grace whenever the grace is at least the skew allowance.
            // Every token issued here after the grace is above it: seeded or raised to a clock
            // reading past it, then only incremented.
            let grace_end = epoch_micros(trusted_from);
            if fencing > grace_end {
                return Ok(None);
            }
            let floor = epoch_micros(now).max(fencing.saturating_add(1));
            tracing::info!(
                table = %inner.table,
                %key,
                created = %lease_core::backend::fmt_time(created),
                from = fencing,
                to = floor,
                "fencing counter from before this table's grace ended (a restored or recreated \
                 table): raising it to the clock"
            );
            return Ok(Some(floor));
        }
        tracing::warn!(
            table = %inner.table,
            %key,
            created = %lease_core::backend::fmt_time(created),
            "table younger than the recreation grace: a holder in the table it replaced may still run"
        );
        let owner = format!(
            "nobody yet: table `{}` was created at {}, less than the recreation grace of {} ago, \
             and a holder in a table it replaced may still run",
            inner.table,
            lease_core::backend::fmt_time(created),
            lease_core::backend::fmt_duration(inner.recreation_grace + inner.max_clock_skew),
        );
        Err(LeaseError::held(
            key.clone(),
            Some(
                Holder::new()
                    .with_owner(owner)
                    .with_expires_at(trusted_from),
            ),
        ))
    }
}

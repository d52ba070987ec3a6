//! Store loss: a table deleted and recreated (or restored, or DynamoDB Local restarted) has
//! forgotten every holder, who keep running until their next renewal fails. An acquisition that
//! finds no item is therefore checked against the table's age: in a table younger than the
//! recreation grace (the longest lease any holder may have in the table it replaced), the key is
//! given back and reported held until the grace ends (Chubby's grace period after a master
//! change).

use std::time::SystemTime;

use lease_core::{Holder, LeaseError, LeaseKey};

use crate::DynamoErrorKind;
use crate::DynamoLeases;
use crate::error::{DynamoError, backend_error_in};

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

    /// `Err(Held)` while the table is younger than the recreation grace (plus the clock skew
    /// allowance), as seen by this manager's clock; `Ok` when no grace is configured or it has
    /// passed. Called only for acquisitions that created their key's fencing counter.
    pub(crate) async fn check_recreation_grace(&self, key: &LeaseKey) -> Result<(), LeaseError> {
        let inner = &self.inner;
        if inner.recreation_grace.is_zero() {
            return Ok(());
        }
        let created = self.table_created().await?;
        let trusted_from = created + inner.recreation_grace + inner.max_clock_skew;
        let now = inner.clock.now();
        if now >= trusted_from {
            return Ok(());
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

//! `FencedValues` for `PgLeases`: rows of their own kind in the lease table.

use lease_core::backend::validate_fenced_value;
use lease_core::{BoxFuture, FencedValues, FencingToken, LeaseError, LeaseKey, NotOwnedReason};
use tokio_postgres::types::{ToSql, Type};

use crate::PgLeases;

fn fencing_param(fencing: FencingToken) -> i64 {
    i64::try_from(fencing.get()).unwrap_or(i64::MAX)
}

impl PgLeases {
    async fn fence_and_read_inner(
        &self,
        name: &LeaseKey,
        fencing: FencingToken,
    ) -> Result<Option<Vec<u8>>, LeaseError> {
        let (partition, sort) = (name.partition(), name.sort().unwrap_or(""));
        let fencing_value = fencing_param(fencing);
        let params: [(&(dyn ToSql + Sync), Type); 3] = [
            (&partition, Type::TEXT),
            (&sort, Type::TEXT),
            (&fencing_value, Type::INT8),
        ];
        let answer = self
            .send(
                "fence_and_read",
                &self.inner.statements.fence_and_read,
                &params,
                None,
            )
            .await
            .map_err(crate::PgError::into_lease_error)?;
        let Some(row) = answer.rows.first() else {
            tracing::info!(table = %self.inner.table.plain, %name, %fencing, "fence refused: a newer token touched the value");
            return Err(LeaseError::not_owned(name.clone(), NotOwnedReason::Fenced));
        };
        row.try_get("data")
            .map_err(|e| LeaseError::corrupt(name.clone(), format!("its value: {e}")))
    }

    async fn put_fenced_inner(
        &self,
        name: &LeaseKey,
        fencing: FencingToken,
        value: &[u8],
    ) -> Result<(), LeaseError> {
        validate_fenced_value(value)?;
        let (partition, sort) = (name.partition(), name.sort().unwrap_or(""));
        let fencing_value = fencing_param(fencing);
        let params: [(&(dyn ToSql + Sync), Type); 4] = [
            (&partition, Type::TEXT),
            (&sort, Type::TEXT),
            (&fencing_value, Type::INT8),
            (&value, Type::BYTEA),
        ];
        let answer = self
            .send(
                "put_fenced",
                &self.inner.statements.put_fenced,
                &params,
                None,
            )
            .await
            .map_err(crate::PgError::into_lease_error)?;
        if answer.rows.is_empty() {
            tracing::info!(table = %self.inner.table.plain, %name, %fencing, "fenced write refused: a newer token touched the value");
            return Err(LeaseError::not_owned(name.clone(), NotOwnedReason::Fenced));
        }
        tracing::debug!(table = %self.inner.table.plain, %name, %fencing, bytes = value.len(), "fenced value written");
        Ok(())
    }
}

impl FencedValues for PgLeases {
    /// One statement: an `INSERT ... ON CONFLICT DO UPDATE` that raises the fence iff it is not
    /// above `fencing`, returning the value. A retry after a lost reply sends the same write,
    /// which passes again at the same fence.
    fn fence_and_read<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, LeaseError>> {
        Box::pin(self.fence_and_read_inner(name, fencing))
    }

    /// One statement: an `INSERT ... ON CONFLICT DO UPDATE` of the value iff the fence is not
    /// above `fencing`.
    fn put_fenced<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
        value: &'a [u8],
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(self.put_fenced_inner(name, fencing, value))
    }
}

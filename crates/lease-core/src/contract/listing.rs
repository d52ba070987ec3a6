//! An optional extension of the contract: listing the records under one partition key.

use std::sync::Arc;

use crate::{BoxFuture, LeaseBackend, LeaseError, LeaseRecord};

/// Backends that can list every record sharing a partition key, in one request where the store
/// allows (a DynamoDB `Query`, a directory read).
///
/// The lessor keeps its worker sessions and its units under a few partition keys and lists them
/// instead of scanning the store; the command line tool uses it for `lease status`. Records are
/// returned sorted by key; released records (no holder) are included, since they carry the
/// fencing counter.
pub trait LeaseListing: LeaseBackend {
    /// Every record whose key has partition key `partition` (with or without a sort key).
    fn list_partition<'a>(
        &'a self,
        partition: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseRecord>, LeaseError>>;
}

impl<L: LeaseListing + ?Sized> LeaseListing for Arc<L> {
    fn list_partition<'a>(
        &'a self,
        partition: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseRecord>, LeaseError>> {
        (**self).list_partition(partition)
    }
}

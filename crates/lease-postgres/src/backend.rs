//! `LeaseBackend` for `PgLeases`.

use std::time::Duration;

use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencingToken, Lease, LeaseBackend, LeaseError, LeaseKey,
    LeaseRecord, LeaseToken,
};

use crate::PgLeases;

impl LeaseBackend for PgLeases {
    fn name(&self) -> &'static str {
        crate::BACKEND
    }

    fn clock(&self) -> &dyn Clock {
        &*self.inner.clock
    }

    fn try_acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        options: &'a AcquireOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        let _ = (key, duration, options);
        Box::pin(async { Err(LeaseError::unsupported(crate::BACKEND, "try_acquire")) })
    }

    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        let _ = (lease, duration);
        Box::pin(async { Err(LeaseError::unsupported(crate::BACKEND, "renew")) })
    }

    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        let _ = (key, token, fencing);
        Box::pin(async { Err(LeaseError::unsupported(crate::BACKEND, "release")) })
    }

    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        let _ = key;
        Box::pin(async { Err(LeaseError::unsupported(crate::BACKEND, "inspect")) })
    }
}

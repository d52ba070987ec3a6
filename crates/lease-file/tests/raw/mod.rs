//! Raw leases for the tests, on top of the single-attempt contract: a waiting acquire and the
//! release or delete of a whole lease or record. Users hold leases through lease-core's guards,
//! which wait, renew and release; these tests want the raw [`Lease`] a store hands out, to look
//! at the files it leaves and to drive renewals and releases by hand.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use lease_core::{
    AcquireOptions, BoxFuture, Holder, Lease, LeaseBackend, LeaseError, LeaseKey, LeaseRecord,
    WaitOptions,
};

/// The longest a waiting acquire sleeps between attempts when the store cannot wake it.
const MAX_POLL: Duration = Duration::from_millis(50);

/// Raw-lease calls on every backend (see the module docs).
pub trait Raw: LeaseBackend {
    /// Acquires `key` for `duration`, waiting until it is free: attempts until one succeeds or
    /// fails with anything but held or transient.
    fn acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        Box::pin(wait_for(self, key, duration, None))
    }

    /// As [`acquire`](Self::acquire), giving up after `wait`'s timeout with
    /// [`LeaseError::Timeout`] (a zero timeout: one attempt, its error as it is).
    fn acquire_with<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        wait: &WaitOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        Box::pin(wait_for(self, key, duration, wait.timeout()))
    }

    /// Releases `lease`.
    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.release(lease.key(), lease.token(), lease.fencing_token())
    }

    /// Deletes `record`'s key if it is still exactly as `record` shows it.
    fn delete_record<'a>(
        &'a self,
        record: &'a LeaseRecord,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        let holder = record.holder().and_then(Holder::token);
        self.delete(record.key(), holder, record.fencing_token())
    }
}

impl<B: LeaseBackend + ?Sized> Raw for B {}

async fn wait_for<B: LeaseBackend + ?Sized>(
    store: &B,
    key: &LeaseKey,
    duration: Duration,
    timeout: Option<Duration>,
) -> Result<Lease, LeaseError> {
    let clock = store.clock();
    let start = clock.monotonic();
    let mut poll = Duration::from_millis(1);
    loop {
        let error = match store
            .try_acquire(key, duration, &AcquireOptions::default())
            .await
        {
            Ok(lease) => return Ok(lease),
            Err(error) if timeout == Some(Duration::ZERO) => return Err(error),
            Err(error) if error.is_held() || error.is_transient() => error,
            Err(error) => return Err(error),
        };
        let waited = clock.monotonic().saturating_duration_since(start);
        let left = match timeout {
            Some(timeout) if waited >= timeout => {
                return Err(LeaseError::timeout(key.clone(), waited, error));
            }
            Some(timeout) => timeout - waited,
            None => Duration::MAX,
        };
        let mut sleep = clock.sleep(poll.min(left));
        poll = (poll * 2).min(MAX_POLL);
        // Woken by the store when it can tell (a holder's kernel lock let go), else by time.
        match store.changed(key) {
            Some(mut woken) => first_of(&mut woken, &mut sleep).await,
            None => sleep.await,
        }
    }
}

/// Completes when either future does.
async fn first_of(
    a: &mut Pin<Box<dyn Future<Output = ()> + Send + '_>>,
    b: &mut Pin<Box<dyn Future<Output = ()> + Send + '_>>,
) {
    std::future::poll_fn(|cx| {
        if a.as_mut().poll(cx).is_ready() || b.as_mut().poll(cx).is_ready() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

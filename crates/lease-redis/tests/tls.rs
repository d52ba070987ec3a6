//! TLS through rustls (no OpenSSL in the client): a private `redis-server` with a TLS port and a
//! certificate from a throwaway CA. Trusting that CA (`redis::Client::build_with_tls`), every
//! operation and the pub/sub wake-ups run over TLS; with the system's roots
//! (`builder_for_url("rediss://...")`) the server is refused. Skipped, saying why, without
//! `redis-server` or `openssl` (unless `LEASE_REQUIRE_REDIS=1`).
#![allow(clippy::unwrap_used)]

mod private;
mod support;

use std::sync::Arc;
use std::time::Duration;

use lease_core::{AcquireOptions, LeaseBackend, LeaseGuard, LeaseKey};
use lease_redis::{RedisError, RedisErrorKind, RedisLeases, RetryPolicy};
use lease_testservers::RedisOptions;

const D: Duration = Duration::from_secs(10);

#[test]
fn leases_and_wake_ups_run_over_tls_with_a_trusted_ca_only() {
    let test = "leases_and_wake_ups_run_over_tls_with_a_trusted_ca_only";
    let Some(server) = private::private_with(test, RedisOptions::new().with_tls()) else {
        return;
    };
    let url = server.tls_url().unwrap();
    let ca = server.ca_cert().unwrap();
    support::runtime().block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = redis::Client::build_with_tls(
            url.as_str(),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca),
            },
        )
        .unwrap();
        let leases = Arc::new(
            RedisLeases::builder(client, support::prefix("tls"))
                .build()
                .unwrap(),
        );
        let key = LeaseKey::new("encrypted").unwrap();
        let once = AcquireOptions::default();
        let lease = leases.try_acquire(&key, D, &once).await.unwrap();
        let lease = leases.renew(&lease, D).await.unwrap();
        assert!(leases.inspect(&key).await.unwrap().is_some());
        let waiter = tokio::spawn({
            let (leases, key) = (leases.clone(), key.clone());
            async move { LeaseGuard::builder(leases, &key, D).acquire().await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        leases
            .release(lease.key(), lease.token(), lease.fencing_token())
            .await
            .unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the release's PUBLISH reached the waiter over TLS")
            .unwrap()
            .unwrap();
        guard.release().await.unwrap();

        // The system's roots do not know the throwaway CA: refused, and said so.
        let untrusted = RedisLeases::builder_for_url(&url, support::prefix("tls"))
            .unwrap()
            .with_retry_policy(RetryPolicy::default().with_max_attempts(1))
            .build()
            .unwrap();
        let err = untrusted.try_acquire(&key, D, &once).await.unwrap_err();
        let lease_core::LeaseError::Backend { source, .. } = &err else {
            panic!("a backend error, got {err}");
        };
        let redis = source.downcast_ref::<RedisError>().unwrap();
        assert_eq!(redis.kind(), RedisErrorKind::Connection, "{err}");
    });
}

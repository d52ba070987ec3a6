//! Private servers, for the tests whose faults restart, pause, kill or fail over a server and so
//! cannot share the one `LEASE_REDIS_URL` names: a `redis-server` of the test's own
//! (`lease-testservers`, the distribution's binary on a free loopback port, as an unprivileged
//! user when run as root, gone with the test). lease-testservers is never published, so the
//! files that use this module are left out of the package (the manifest's `exclude`).
#![allow(dead_code, unreachable_pub)]

use lease_testservers::{RedisOptions, RedisServer};

/// A private server of the test's own, or `None` after printing why the test is skipped (it
/// fails instead with `LEASE_REQUIRE_REDIS=1`).
pub fn private(test: &str) -> Option<RedisServer> {
    private_with(test, RedisOptions::new())
}

/// [`private`] with `options` (persistence, TLS).
pub fn private_with(test: &str, options: RedisOptions) -> Option<RedisServer> {
    match RedisServer::start_with(options) {
        Ok(server) => Some(server),
        Err(e) => {
            crate::support::skip(
                test,
                &format!("install redis-server: no private server: {e}"),
            );
            None
        }
    }
}

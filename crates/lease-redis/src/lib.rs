//! Leases on Redis, for services that already run it: one Lua script (one round trip) per
//! operation, expiry judged by the Redis server's clock, fencing tokens that never repeat or go
//! backwards (across restarts without persistence and promoted replicas too), lost replies
//! reconciled, and waiters woken by pub/sub.
//!
//! ```no_run
//! use lease_core::{LeaseGuard, LeaseKey};
//! use lease_redis::RedisLeases;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), lease_core::LeaseError> {
//! let leases = RedisLeases::builder_for_url("rediss://cache.internal:6380", "leases")?
//!     .with_recreation_grace(Duration::from_secs(30)) // the longest lease anyone takes
//!     .build()?;
//!
//! let key = LeaseKey::new("regenerate-sitemap")?;
//! // Waits until the lease is free, then renews it every 10 s until released or dropped.
//! let guard = LeaseGuard::builder(Arc::new(leases), &key, Duration::from_secs(30))
//!     .acquire()
//!     .await?;
//! let fencing = guard.check()?; // pass it with every write to the protected resource
//! # let _ = fencing;
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # What is here
//!
//! * [`RedisLeases`]: leases under one key prefix, one hash each. It implements lease-core's
//!   [`LeaseBackend`](lease_core::LeaseBackend) (so guards, counting leases and elections run on
//!   it), [`LeaseListing`](lease_core::LeaseListing) and
//!   [`FencedValues`](lease_core::FencedValues).
//! * [`RedisLeasesBuilder`]: every option; [`RetryPolicy`] for connection failures. One
//!   primary, by URL ([`RedisLeases::builder_for_url`], `rediss://` for TLS), by your own
//!   [`redis::Client`] ([`RedisLeases::builder`]), through Sentinel
//!   ([`RedisLeases::builder_for_sentinel`]), or the owner of the prefix's hash slot in a
//!   Cluster ([`RedisLeases::builder_for_cluster`]).
//! * [`RedisError`]: what a failed call means ([`RedisErrorKind`]), under
//!   [`LeaseError::Backend`](lease_core::LeaseError::Backend), with redis-rs's error as its
//!   source.
//!
//! This crate re-exports nothing of lease-core: depend on both.
//!
//! # What each operation costs
//!
//! One script (`EVALSHA`), one round trip, for every operation: acquire (granted, refused, or
//! taken over from an expired holder; with the recreation grace's incarnation check too),
//! renew, release, delete, listing a partition, `fence_and_read` and `put_fenced`; inspect is
//! one `HMGET`. The first call of each script on a server that does not have it costs two more
//! (`NOSCRIPT`, `SCRIPT LOAD`). A new connection costs its handshake, and with a recreation
//! grace one `INFO`. A reply lost in transit costs one more round trip on a fresh connection.
//! Waiters and observers cost one pub/sub connection per manager, and nothing while they wait.
//! [`design`] shows each script.
//!
//! # Guarantees
//!
//! Expiry is judged by the Redis server's clock (`TIME`, inside the script that changes the
//! hash); the holder trusts its lease until its own monotonic deadline, measured from before the
//! script was sent. Fencing tokens are `max(previous + 1, server time in microseconds)`: they
//! never repeat or go backwards, across a restart that lost the data or a promoted replica too,
//! while the server's clock does not step back. With a recreation grace, a new incarnation of
//! the data set grants nothing until the longest lease of the one it replaced is over. A retry
//! after a lost reply reports success only when its own attempt landed. One primary, not
//! Redlock: see [`design`]. Needs a tokio runtime.
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: feature-gated items then show their feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

/// This backend's [`name`](lease_core::LeaseBackend::name), in errors, traces and metrics.
pub(crate) const BACKEND: &str = "redis";

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[doc = include_str!("docs/design.md")]
pub mod design {}

mod backend;
mod call;
mod connections;
mod error;
mod fenced;
mod keys;
mod leases;
mod listen;
mod record;
mod retry;
mod scripts;
mod source;

pub use error::{RedisError, RedisErrorKind};
pub use leases::{RedisLeases, RedisLeasesBuilder};
pub use retry::RetryPolicy;

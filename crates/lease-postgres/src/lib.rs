//! Leases on PostgreSQL, for services that already run it: one statement (one round trip) per
//! operation, expiry judged by the database's clock, fencing tokens that never repeat or go
//! backwards, lost replies reconciled, and waiters woken by `LISTEN`/`NOTIFY`.
//!
//! ```no_run
//! use lease_core::{LeaseGuard, LeaseKey};
//! use lease_postgres::PgLeases;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), lease_core::LeaseError> {
//! let pool = lease_postgres::pool_from_url("postgres://app@db.internal/app?sslmode=require")?;
//! lease_postgres::create_table(&pool, "leases").await?; // once; idempotent
//! let leases = PgLeases::new(pool, "leases")?;
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
//! * [`PgLeases`]: leases in one table, one row each. It implements lease-core's
//!   [`LeaseBackend`](lease_core::LeaseBackend) (so guards, counting leases and elections run on
//!   it), [`LeaseListing`](lease_core::LeaseListing) and
//!   [`FencedValues`](lease_core::FencedValues).
//! * [`PgLeasesBuilder`]: every option; [`RetryPolicy`] for connection failures.
//! * [`create_table`]: the table, idempotent. [`pool_from_url`]: a deadpool pool with rustls TLS.
//! * [`PgError`]: what a failed statement means ([`PgErrorKind`]), under
//!   [`LeaseError::Backend`](lease_core::LeaseError::Backend), with the driver's error as its
//!   source.
//!
//! This crate re-exports nothing of lease-core: depend on both.
//!
//! # What each operation costs
//!
//! One statement, one round trip, for every operation: acquire (granted, refused, or taken over
//! from an expired holder; with the recreation grace's incarnation check too), renew, release,
//! delete, inspect, listing a partition, `fence_and_read` and `put_fenced`. A reply lost in
//! transit costs one more round trip on a fresh connection. Waiters and observers cost one
//! `LISTEN` connection per manager, and no statements while they wait. [`design`] shows each
//! statement.
//!
//! # Guarantees
//!
//! Expiry is judged by the database server's clock inside the statement that changes the row;
//! the holder trusts its lease until its own monotonic deadline, measured from before the
//! statement was sent. Fencing tokens are `GREATEST(previous + 1, server time in
//! microseconds)`: they never repeat or go backwards, across a `TRUNCATE`, a restored backup or
//! a promoted replica too, while the server's clock does not step back. With a recreation grace, a new incarnation of the
//! table grants nothing until the longest lease of the one it replaced is over. A retry after a
//! lost reply reports success only when its own attempt landed. Needs a tokio runtime.
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: feature-gated items then show their feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

/// This backend's [`name`](lease_core::LeaseBackend::name), in errors, traces and metrics.
pub(crate) const BACKEND: &str = "postgres";

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[doc = include_str!("docs/design.md")]
pub mod design {}

mod backend;
mod call;
mod connect;
mod error;
mod fenced;
mod leases;
mod listen;
mod record;
mod retry;
mod sql;
mod table;

pub use connect::pool_from_url;
pub use error::{PgError, PgErrorKind};
pub use leases::{PgLeases, PgLeasesBuilder};
pub use retry::RetryPolicy;
pub use table::create_table;

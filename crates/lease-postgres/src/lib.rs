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
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: feature-gated items then show their feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

/// This backend's [`name`](lease_core::LeaseBackend::name), in errors, traces and metrics.
pub(crate) const BACKEND: &str = "postgres";

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

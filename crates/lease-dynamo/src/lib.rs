//! Leases on DynamoDB conditional writes, for processes on many machines: one request per
//! operation, fencing tokens that survive release and TTL, the holder learned from the failed
//! write itself, and lost replies reconciled instead of dropping a lease that is still held.
//!
//! ```no_run
//! use lease_core::{LeaseGuard, LeaseKey};
//! use lease_dynamo::DynamoLeases;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), lease_core::LeaseError> {
//! // The SDK client as for any AWS service (lease_dynamo::client_for_endpoint for DynamoDB Local).
//! let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
//! let leases = DynamoLeases::new(aws_sdk_dynamodb::Client::new(&config), "leases")?;
//! leases.ensure_table().await?; // once: on-demand table with TTL
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
//! * [`DynamoLeases`]: leases in one table, one item each. It implements lease-core's
//!   [`LeaseBackend`](lease_core::LeaseBackend) (so guards, counting leases and elections run
//!   on it), [`LeaseListing`](lease_core::LeaseListing) and
//!   [`FencedValues`](lease_core::FencedValues) (checkpoints of up to 64 KiB that only the
//!   newest fencing token may write); its own methods are [`ensure_table`](DynamoLeases::ensure_table),
//!   [`inspect_strict`](DynamoLeases::inspect_strict) and [`table`](DynamoLeases::table).
//! * [`DynamoLeasesBuilder`]: every option, at the Go package's defaults; [`AttributeNames`]
//!   for a table whose attributes are named otherwise; [`RetryPolicy`] for transient failures.
//! * [`DynamoError`]: what a failed request means ([`DynamoErrorKind`]), under
//!   [`LeaseError::Backend`](lease_core::LeaseError::Backend), with the SDK's error as its
//!   source.
//! * [`client_for_endpoint`]: an SDK client for DynamoDB Local or another endpoint of its own.
//!
//! This crate re-exports nothing of lease-core: depend on both (`cargo add lease-core
//! lease-dynamo`). Everything it does is lease-core's contract, documented there.
//!
//! # How it works
//!
//! [`design`] has the item layout, the request each operation sends and its cost, retries and
//! lost replies, fenced values, delete, the time and fencing model, the IAM policy, metrics and
//! the tests. [`go_package`] shows how a table is shared with services on the Go `lease`
//! package, and each Go call in this crate's terms.
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: feature-gated items then show their feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// This backend's [`name`](lease_core::LeaseBackend::name), in errors, traces and metrics.
pub(crate) const BACKEND: &str = "dynamodb";

#[doc = include_str!("docs/design.md")]
pub mod design {}

#[doc = include_str!("docs/go_package.md")]
pub mod go_package {}

mod acquire;
mod client;
mod delete;
mod error;
mod expr;
mod fenced;
mod grace;
mod item;
mod leases;
mod names;
mod ops;
mod retry;
mod table;
mod tenure;

pub use client::client_for_endpoint;
pub use error::{DynamoError, DynamoErrorKind};
pub use leases::{DynamoLeases, DynamoLeasesBuilder};
pub use names::AttributeNames;
pub use retry::RetryPolicy;

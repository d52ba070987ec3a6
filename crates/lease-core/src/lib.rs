//! The lease contract: what every backend of this project promises, the guard that proves
//! holding a lease, and the tools to hold a backend to that promise.
//!
//! ```
//! use lease_core::{LeaseGuard, LeaseKey, MemoryBackend, WaitOptions};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let store = Arc::new(MemoryBackend::new()); // one process; lease-file and lease-dynamo go further
//! let key = LeaseKey::new("regenerate-sitemap")?;
//!
//! // Waits until the lease is free, then renews it every 10 s until released or dropped.
//! let guard = LeaseGuard::builder(store.clone(), &key, Duration::from_secs(30)).acquire_blocking()?;
//! let fencing = guard.check()?; // pass it with every write to the protected resource
//!
//! // Another holder is turned away (a zero wait is one attempt) and told who holds the lease.
//! let busy = LeaseGuard::builder(store, &key, Duration::from_secs(30))
//!     .with_wait(WaitOptions::new(Duration::ZERO))
//!     .acquire_blocking()
//!     .unwrap_err();
//! assert!(busy.is_held());
//! # let _ = fencing;
//! guard.release()?;
//! # Ok::<(), lease_core::LeaseError>(())
//! ```
//!
//! # What is here
//!
//! * [`LeaseGuard`] (async) and [`BlockingLeaseGuard`]: proof of holding a lease, renewed on
//!   their own. One way to each: [`LeaseGuard::builder`] then
//!   [`acquire`](LeaseGuardBuilder::acquire) or
//!   [`acquire_blocking`](LeaseGuardBuilder::acquire_blocking). [`CountingLease`] (at most N
//!   holders) and [`Election`] (a leader, its published value, an [`Observer`] stream of
//!   changes) hand out the same guards.
//! * [`LeaseKey`], [`FencingToken`], [`LeaseRecord`], [`Holder`]; [`LeaseError`], one error enum
//!   by meaning, and the [`LossReason`] of a lost lease.
//! * [`LeaseBackend`]: the small, dyn-compatible contract of single-attempt operations that a
//!   backend implements; its optional extensions [`LeaseListing`] and [`FencedValues`]; what
//!   only implementors use lives in [`backend`]. [`MemoryBackend`] is the reference backend.
//! * [`Clock`] ([`SystemClock`], [`ManualClock`]) and [`TokenSource`] ([`RandomTokens`]):
//!   time and randomness are injected.
//! * [`metrics`] (feature `metrics`) and `conformance` (feature `conformance`: the suite every
//!   backend passes; not API-stable).
//!
//! No async runtime: the futures run on any executor. With the feature `tokio`, an async guard's
//! keeper runs on the current tokio runtime; otherwise, and for blocking guards, on a thread of
//! its own.
//!
//! # Time and fencing
//!
//! A lease is a promise measured in two clocks. The store records its expiry on the **wall
//! clock**; the holder trusts the lease only until its **deadline on its own monotonic clock**:
//! the instant the request was *sent*, plus the duration, minus a safety margin. A contender that
//! waits for the recorded expiry can never take over while the holder still trusts the lease, as
//! long as clocks drift less than the margin (`docs/correctness.md` states each assumption).
//!
//! No lease can stop a paused holder (GC, SIGSTOP, a VM migration) from acting after its lease
//! ran out; fencing tokens make that harmless. Every acquisition of a key gets a
//! [`FencingToken`] strictly greater than every earlier one for that key; the protected resource
//! keeps the highest token it has seen and refuses writes with a lower one, atomically with the
//! write:
//!
//! ```sql
//! UPDATE reports SET body = $1, fence = $2 WHERE id = $3 AND fence <= $2
//! ```
//!
//! A write that updates zero rows came from a holder that lost its lease. See [`Election`] for
//! leaders and their followers, and [`CountingLease`] for semaphores.
//!
//! # Platforms
//!
//! Any platform with `std`. [`SystemClock`]'s monotonic time counts time the host spent asleep
//! on Linux (`CLOCK_BOOTTIME`), macOS and FreeBSD (`CLOCK_MONOTONIC`, which counts it there);
//! elsewhere it is std's `Instant`, which may not (on Windows, `QueryPerformanceCounter`, which
//! counts it). Every change is checked with clippy on macOS (x86_64, aarch64), FreeBSD and
//! Windows; the tests run on Linux, and under Wine on Windows.
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: feature-gated items then show their feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod backend;
mod clock;
mod contract;
mod election;
mod error;
mod executor;
mod fenced;
mod future;
mod human;
mod keeper;
mod lease;
mod memory;
pub mod metrics;
mod options;
mod sync;
mod wait;
mod watch;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use clock::{Clock, ManualClock, SystemClock};
#[cfg(any(test, feature = "conformance"))]
pub(crate) use contract::LeaseBackendExt;
pub use contract::listing::LeaseListing;
pub use contract::{LeaseBackend, RecordWatch};
pub use election::{DEFAULT_POLL_INTERVAL, Election, Leader, LeaderChange, Observer};
pub use error::key::{LeaseKey, MAX_KEY_PART_BYTES};
pub use error::token::{FencingToken, LeaseToken, MAX_TOKEN_BYTES, RandomTokens, TokenSource};
pub use error::{Holder, LeaseError, LossReason, NotOwnedReason};
pub use fenced::{FencedValues, MAX_FENCED_VALUE_BYTES};
pub use future::BoxFuture;
pub use keeper::counting::CountingLease;
pub use keeper::{BlockingLeaseGuard, LeaseGuard, LeaseGuardBuilder, Lost};
pub use lease::{Lease, LeaseRecord, MAX_LEASE_DURATION, MIN_LEASE_DURATION};
pub use memory::{MemoryBackend, MemoryBackendBuilder};
pub use options::{AcquireOptions, MAX_LEASE_VALUE_BYTES};
pub use wait::{Backoff, WaitCallback, WaitEvent, WaitOptions};

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

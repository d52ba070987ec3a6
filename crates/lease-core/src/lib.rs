//! The lease contract: what every backend of this project promises, and the tools to hold it to
//! that promise.
//!
//! ```
//! use lease_core::{AcquireOptions, LeaseBackend, LeaseBackendExt, LeaseKey, MemoryBackend};
//! use std::time::Duration;
//!
//! let store = MemoryBackend::new();
//! let key = LeaseKey::new("regenerate-sitemap")?;
//!
//! // `acquire` waits until the lease is free; `try_acquire` makes one attempt.
//! let lease = lease_core::executor::block_on(store.acquire(&key, Duration::from_secs(30)))?;
//! // Somebody else is turned away, and told who holds the lease until when.
//! let once = AcquireOptions::default();
//! let busy = lease_core::executor::block_on(store.try_acquire(&key, Duration::from_secs(30), &once)).unwrap_err();
//! assert!(busy.is_held());
//!
//! // Pass the fencing token with every write to the protected resource.
//! let fencing = lease.fencing_token();
//! let lease = lease_core::executor::block_on(store.renew(&lease, Duration::from_secs(30)))?;
//! assert_eq!(lease.fencing_token(), fencing);
//! lease_core::executor::block_on(store.release_lease(&lease))?;
//! # Ok::<(), lease_core::LeaseError>(())
//! ```
//!
//! # What is here
//!
//! * [`LeaseBackend`]: the small, dyn-compatible contract of single-attempt operations
//!   (try-acquire, renew, release, inspect, and the optional compare-and-delete
//!   [`LeaseBackend::delete`]); [`LeaseBackendExt`] adds the waiting
//!   [`acquire`](LeaseBackendExt::acquire) and conveniences.
//! * [`LeaseKey`], [`LeaseToken`], [`FencingToken`], [`Lease`], [`LeaseRecord`], [`Holder`].
//! * [`LeaseError`]: one error enum by meaning, with [`LeaseError::is_held`],
//!   [`LeaseError::is_not_owned`] and [`LeaseError::is_unsupported`].
//! * [`Clock`] ([`SystemClock`], [`ManualClock`]) and [`TokenSource`] ([`RandomTokens`]):
//!   time and randomness are injected.
//! * [`LeaseGuard`]: keeps a lease alive and tells its holder the moment it can no longer trust it
//!   ([`LeaseGuard::builder`] acquires and keeps in one call).
//! * [`executor`]: a minimal executor for runtime-free code ([`executor::block_on`]).
//! * [`Election`]: leader election over any backend: campaign with a published value, read the
//!   [`Leader`], and an [`Observer`] of every [`LeaderChange`] (see *Leader election* below);
//!   backends that can wake a reader on a change offer a [`RecordWatch`].
//! * [`LeaseListing`]: the optional extension that lists the records under one partition key.
//! * [`FencedValues`]: the optional extension that stores small values (checkpoints) only the
//!   newest fencing token may write.
//! * [`CountingLease`]: at most N holders of a name, each in a slot that is a lease of its own.
//! * [`MemoryBackend`]: the reference backend.
//! * [`backend`]: what only implementors of a backend use: the one place that assembles a
//!   [`Lease`] or a [`FencingToken`], and the checks every backend applies the same way.
//! * [`metrics`]: the names of the metrics every backend reports with the feature `metrics`
//!   (through the `metrics` facade; `docs/metrics.md` has the table).
//! * `conformance` (feature `conformance`): the suite every backend passes. Not API-stable.
//!
//! This crate depends on no async runtime: its futures run on any executor, or on the minimal
//! one in [`executor`] for backends that need no I/O reactor. The `tokio` feature adds
//! `LeaseGuard::spawn` and `LeaseGuardBuilder::acquire_spawned`.
//!
//! # Time
//!
//! A lease is a promise measured in two clocks. The store records `expires_at` on the **wall
//! clock**, the only time other hosts can compare; the holder trusts the lease only until its
//! **deadline on its own monotonic clock**: the instant the request was *sent*, plus the duration,
//! minus a safety margin ([`backend::holder_deadline`]). Since the store wrote `expires_at` after the send,
//! a contender that waits for `expires_at` (plus the backend's skew allowance) can never take over
//! while the holder still trusts the lease, as long as clocks drift less than the margin and wall
//! clocks disagree by less than the declared skew. `docs/correctness.md` states each assumption.
//!
//! # At most N holders
//!
//! A [`CountingLease`] is a semaphore over any backend: up to N holders of one name, each in a
//! **slot** that is an ordinary lease of a key derived from the name (slot 0 is the name itself,
//! slot `i` the key written `NAME#slot-i`). A slot expires when its holder stops renewing, keeps
//! its own fencing token sequence, and is kept alive by a [`LeaseGuard`] like any lease. Taking
//! a free slot costs one request; when N changes between holders, a newcomer takes only slots
//! below its own N, so at most the largest N in use hold at once and no slot ever has two
//! holders (see [`CountingLease`]).
//!
//! # Fencing
//!
//! No lease can stop a holder that was paused (GC, SIGSTOP, a VM migration) from acting after its
//! lease ran out. Fencing tokens make that harmless: every acquisition of a key gets a
//! [`FencingToken`] strictly greater than every earlier one for that key, across release, expiry
//! and takeover (not across a [`delete`](LeaseBackend::delete) of the key's record, which starts
//! the counter afresh). The protected resource keeps the highest token it has seen and refuses writes
//! that carry a lower one, atomically with the write, for example:
//!
//! ```sql
//! UPDATE reports SET body = $1, fence = $2 WHERE id = $3 AND fence <= $2
//! ```
//!
//! or a DynamoDB `ConditionExpression: attribute_not_exists(fence) OR fence <= :token`. A write
//! that updates zero rows came from a holder that lost its lease.
//!
//! # Leader election
//!
//! The leader is the holder of one key's lease. A candidate [campaigns](Election::campaign)
//! with a value published in the lease record ([`AcquireOptions::with_value`]: its address, its
//! id); followers read the [`Leader`] (value, since when, fencing token) once, or follow every
//! change with an [`Observer`]. They route requests to the leader's value and pass its fencing
//! token along, so that the resource refuses a deposed leader's late writes whatever a follower
//! believed:
//!
//! ```
//! use lease_core::{Election, LeaderChange, LeaseKey, MemoryBackend};
//! use lease_core::executor::block_on;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let store = Arc::new(MemoryBackend::new());
//! let election = Election::new(store, &LeaseKey::new("primary")?, Duration::from_secs(10));
//!
//! // A candidate: waits until elected, then its guard renews the lease.
//! let leading = election.campaign("10.0.0.7:5432").acquire_blocking()?;
//!
//! // A follower: where to send writes, and the token the resource checks them against.
//! let mut observer = election.observe();
//! if let LeaderChange::Elected(leader) = observer.next_blocking()? {
//!     let route_to = leader.value().expect("the leader published its address");
//!     let fence = leader.fencing_token();
//!     assert_eq!((route_to, fence), ("10.0.0.7:5432", leading.fencing_token()));
//!     // UPDATE ... WHERE fence <= $fence, as in *Fencing* above.
//! }
//!
//! block_on(leading.release())?; // resign: observers report the vacancy
//! assert_eq!(observer.next_blocking()?, LeaderChange::Vacant);
//! # Ok::<(), lease_core::LeaseError>(())
//! ```
//!
//! An observer reports each tenure at most once and in fencing order; it misses none that lasts
//! longer than one wake-up and one read where the backend offers a
//! [watch](LeaseBackend::watch_record) (memory; files, through the kernel), and none that lasts
//! longer than its poll interval elsewhere (DynamoDB: one strongly consistent read per
//! interval). `docs/correctness.md` states what observation promises and assumes.
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: feature-gated items then show their feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod backend;
mod clock;
mod contract;
mod counting;
mod election;
mod error;
pub mod executor;
mod fenced;
mod human;
mod keeper;
mod key;
mod lease;
mod listing;
mod memory;
pub mod metrics;
mod options;
mod sync;
mod token;
mod wait;
mod watch;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use clock::{Clock, ManualClock, SystemClock};
pub use contract::{BoxFuture, LeaseBackend, LeaseBackendExt, RecordWatch};
pub use counting::CountingLease;
pub use election::{DEFAULT_POLL_INTERVAL, Election, Leader, LeaderChange, Observer};
pub use error::{Holder, LeaseError, LossReason, NotOwnedReason};
pub use fenced::{FencedValues, MAX_FENCED_VALUE_BYTES};
pub use keeper::{KeeperOptions, KeeperTask, LeaseGuard, LeaseGuardBuilder, LossCallback, Lost};
pub use key::{LeaseKey, MAX_KEY_PART_BYTES};
pub use lease::{Lease, LeaseRecord, MAX_LEASE_DURATION, MIN_LEASE_DURATION};
pub use listing::LeaseListing;
pub use memory::{MemoryBackend, MemoryBackendBuilder};
pub use options::{AcquireOptions, MAX_LEASE_VALUE_BYTES};
pub use token::{FencingToken, LeaseToken, MAX_TOKEN_BYTES, RandomTokens, TokenSource};
pub use wait::{Backoff, WaitCallback, WaitEvent, WaitOptions};

/// What a user of any backend needs: each backend crate re-exports it at its root, so that one
/// dependency and one `use` get a lease.
///
/// ```
/// use lease_core::executor::block_on;
/// use lease_core::prelude::*;
///
/// let store = MemoryBackend::new();
/// let key = LeaseKey::new("nightly")?;
/// let lease = block_on(store.acquire(&key, std::time::Duration::from_secs(30)))?;
/// block_on(store.release_lease(&lease))?;
/// # Ok::<(), LeaseError>(())
/// ```
pub mod prelude {
    pub use crate::{
        AcquireOptions, Clock, CountingLease, FencedValues, FencingToken, KeeperOptions, Lease,
        LeaseBackend, LeaseBackendExt, LeaseError, LeaseGuard, LeaseKey, LeaseListing, LeaseRecord,
        LeaseToken, LossReason, ManualClock, MemoryBackend, NotOwnedReason, SystemClock,
        TokenSource, WaitOptions,
    };
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

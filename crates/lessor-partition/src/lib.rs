//! Partitioned range leasing for a fleet of workers, over any lease backend: each unit of work
//! (a shard key, a key range) has exactly one trusted owner at a time, every unit has an owner
//! while any worker lives, and work spreads to floor or ceil of L/W units per worker, moving as
//! little as possible.
//!
//! ```
//! use lessor_partition::{Partition, Worker};
//! use lease_core::{ManualClock, MemoryBackend};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! // Sixteen key ranges shared by two workers on one store (a manual clock: ticks by hand).
//! let clock = Arc::new(ManualClock::new());
//! let store = MemoryBackend::builder().with_clock(clock.clone()).build();
//! let shards = Partition::universe().split(16);
//! let mut workers = Vec::new();
//! for id in ["alpha", "beta"] {
//!     let worker = Worker::builder("indexer", id)
//!         .with_store(Arc::new(store.clone())) // or a lease_file / lease_dynamo store
//!         .with_partitions(&shards)
//!         .build()?;
//!     workers.push(worker);
//! }
//! let handles: Vec<_> = workers.iter().map(|w| w.handle()).collect();
//! for _ in 0..4 {
//!     for worker in &mut workers {
//!         pollster::block_on(worker.tick())?; // `run` ticks every interval for you
//!     }
//!     clock.advance(Duration::from_millis(2500)); // the default interval
//! }
//! // Balanced, every range owned once, each with a fencing token for its writes.
//! assert_eq!(handles[0].owned_units().len(), 8);
//! assert_eq!(handles[1].owned_units().len(), 8);
//! # Ok::<(), lease_core::LeaseError>(())
//! ```
//!
//! * [`Partition`] and [`PartitionSet`]: half-open ranges `[low, high)` over the 128-bit
//!   keyspace, with split, subtraction, intersection, merging and LUCI's hex text form
//!   `"low_high"`.
//! * [`Lessor`] (LUCI's interface): lease the unleased part of a range for the length of a
//!   callback; [`StoreLessor`] implements it over any store that can list; a [`Registry`] the
//!   application owns picks one by id.
//! * [`Worker`]: a member of a fleet that divides units among its live workers, balanced,
//!   sticky and fenced, for about two requests per worker per interval whatever the number of
//!   units. It runs ([`Worker::run`], [`Worker::spawn_thread`]); the application acts through its
//!   [`WorkerHandle`]: what it owns now, [`FleetEvent`]s, and the units it gains as
//!   [`UnitTask`]s, each a guard with its fencing token and its checkpoint
//!   ([`WorkerBuilder::with_checkpoints`]: fenced values in the lease store itself).
//!
//! The crate depends on `lease-core` only: a backend comes in as one
//! `Arc<dyn `[`LeaseBackend`](lease_core::LeaseBackend)`>` that can list, checked when a worker
//! or a lessor is made, so a fleet on files never compiles the AWS SDK. Every error is a
//! [`LeaseError`](lease_core::LeaseError).
//!
//! The protocol, its safety argument, its cost and timing: [`protocol`]. Metrics (feature
//! `metrics`): [`metrics`]. The deterministic simulators that check the protocol in the
//! workspace's tests and benchmarks are the unpublished crate `lessor-sim`, built on this
//! crate's public API only.
//!
//! # Platforms
//!
//! Any platform with `std`, as lease-core. Every change is checked with clippy on macOS (x86_64,
//! aarch64), FreeBSD and Windows, tests and benches included; the tests run on Linux, and under
//! Wine on Windows those that need no server and no file-store fleet (each suite says why). Its
//! DynamoDB suites build on Linux only: the AWS SDK's TLS stack (aws-lc-sys) needs the target's
//! system headers, which a check from Linux lacks.
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: feature-gated items then show their feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod fleet;
mod lessor;
pub mod metrics;
mod partition;
pub mod protocol;

pub use fleet::{
    Assignment, Checkpoint, FleetEvent, TickReport, UnitEnd, UnitTask, Worker, WorkerBuilder,
    WorkerHandle, WorkerStats,
};
pub use lessor::{Grant, LeaseCallback, Lessor, LessorFactory, Registry, StoreLessor};
pub use partition::{ParsePartitionError, Partition, PartitionSet};

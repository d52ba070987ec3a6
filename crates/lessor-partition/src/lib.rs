//! Partitioned range leasing for a fleet of workers, over any lease backend.
//!
//! ```
//! use lessor_partition::{Partition, Worker};
//! use lease_core::{ManualClock, MemoryBackend};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! // Sixteen key ranges shared by two workers on one store.
//! let clock = Arc::new(ManualClock::new());
//! let store = MemoryBackend::new().with_clock(clock.clone());
//! let shards = Partition::universe().split(16);
//! let mut workers = ["alpha", "beta"].map(|id| {
//!     Worker::builder("indexer", id).store(store.clone()).partitions(&shards).build()
//! });
//! let [Ok(alpha), Ok(beta)] = &mut workers else { unreachable!() };
//! for _ in 0..4 {
//!     lease_core::block_on(alpha.tick())?;
//!     lease_core::block_on(beta.tick())?;
//!     clock.advance(alpha.interval());
//! }
//! assert_eq!(alpha.owned_units().len() + beta.owned_units().len(), 16);
//! assert_eq!(alpha.owned_units().len(), 8);
//! # Ok::<(), lessor_partition::Error>(())
//! ```
//!
//! # What is here
//!
//! * [`Partition`] and [`PartitionSet`]: half-open ranges `[low, high)` over the 128-bit
//!   keyspace (`high` may be 2^128), with split, subtraction, intersection, merging and the hex
//!   text form `"low_high"`.
//! * [`Lessor`] (LUCI's interface): lease the unleased part of a range for the length of a
//!   callback; [`StoreLessor`] implements it over any store; [`Registry`], [`register`], [`get`].
//! * [`Worker`]: a member of a fleet that divides units (shard keys, ranges) among its live
//!   workers, balanced, sticky and fenced; [`CheckpointStore`] for per-unit checkpoints.
//! * [`sim`]: the deterministic simulator behind the tests and the benchmark, with a model of
//!   KCL 2.x for comparison.
//!
//! The crate depends on `lease-core` only: a backend comes in through [`LeaseStore`]
//! (`LeaseBackend + LeaseListing`), so a fleet on files never compiles the AWS SDK.
//!
//! # The fleet protocol
//!
//! Three kinds of record, under two partition keys of the store (fleet `F`):
//!
//! * **Sessions** — `fleet/F/sessions`, sort key = worker id. Each worker holds one session
//!   lease (default 10 s) and renews it every interval (default 2.5 s).
//! * **Units** — `fleet/F/units`, sort key = unit id. The owner of a unit holds a *long* lease on
//!   it (default 24 h) whose owner token names the worker and the fencing token of the session it
//!   was taken under (`<random>.<session fencing>.<worker id>`).
//!
//! A worker **trusts a unit** only while it holds the unit lease *and* its session lease is
//! within its holder-side deadline (the monotonic instant the renewal was sent plus the duration
//! minus the safety margin). So one session renewal per interval keeps all of a worker's units,
//! however many: that is where the cost goes from `O(L/W)` renewals per worker (KCL) to `O(1)`.
//!
//! Each tick a worker renews its session and lists the sessions partition (`W` records). From
//! what it sees it keeps a view of each session record: a member is **live** while its record is
//! held and has changed within one session duration *on this worker's monotonic clock* (the
//! Kubernetes/KCL observation rule, immune to wall-clock skew); with
//! [`WorkerBuilder::clock_skew_bound`] a record whose store-side `expires_at + skew` has passed is
//! also dead. A session whose record shows a *greater* fencing token, or no holder, has ended
//! (released, or expired by the store's own judgement and acquired again).
//!
//! When membership changes, while it is below its share, and (for the member with the lowest id)
//! every few ticks, a worker lists the units partition and computes the **plan**: a pure function
//! of the sorted live members and the current owners, so every worker that saw the same state
//! computes the same plan. With `L` units and `W` members each gets `floor(L/W)`, and the
//! `L mod W` members holding most get one more (a balanced fleet stays put); each keeps its
//! lowest-id units up to its share (sticky); the rest (free units, units of dead sessions, then
//! the surplus of members above their share) is dealt to members below their share. A worker
//! releases its surplus (telling the application first) and takes what the plan deals it, at most
//! `max_moves_per_interval` of each per tick. A plan never moves a unit between two members that
//! are both within their share, so a unit does not move back and forth.
//!
//! **Taking a unit of a dead session** is two conditional requests: release with the dead
//! owner's token (fails if anyone changed the record since it was listed), then acquire
//! (fails unless the key is free). Two takers cannot both win, and the fencing token of the unit
//! grows with every new owner.
//!
//! **Clean shutdown** ([`Worker::shutdown`], the end of [`Worker::run`]) releases every unit and
//! then the session: the others see the released session on their next tick and take the units
//! at once, with no expiry to wait for.
//!
//! ## Why no unit ever has two trusting owners
//!
//! Suppose worker `X` trusts unit `u` at instant `t`: it holds `u`'s lease under session `s`, and
//! `t` is before the deadline of its last session renewal `r` (sent at `r.sent`). Another worker
//! `Y` can own `u` only by acquiring it, which the store allows only after `X`'s unit lease was
//! released or expired. `X` releases only after telling the application (it stops trusting
//! first), and the unit lease is renewed long before expiry. So `Y` must have released `X`'s
//! token itself, having judged `s` ended. It judged so on one of:
//!
//! 1. the record shows a greater fencing or no holder: `s` was released (by `X`, after it stopped
//!    trusting) or expired by the store (whose contract says `X`'s deadline had passed);
//! 2. the record stayed unchanged for a session duration `d` on `Y`'s clock: `Y` first saw `r`'s
//!    write after it happened, hence after `r.sent`; `X`'s deadline is `r.sent + d - margin`,
//!    before `Y`'s judgement as long as clock rates differ by less than the margin;
//! 3. `expires_at + skew` passed on `Y`'s wall clock: with wall clocks within `skew`, `X`'s
//!    deadline (before `expires_at`) has passed.
//!
//! A unit whose owner session is not in `Y`'s view at all is never judged dead (a view older than
//! the unit's owner), and unknown owner tokens are never touched. The simulator checks this
//! property after every step, with pauses that outlast sessions.
//!
//! ## Cost, per worker per interval
//!
//! * steady state: **2 requests** (session renew + sessions listing of `W` records), plus
//!   `1/resync_every` of a units listing (`L` records) for the lowest-id member only, plus the
//!   unit lease renewals amortised over half the unit lease: `(L/W) * interval / (unit lease / 2)`
//!   (0.0003 per unit at the defaults);
//! * a membership change: one units listing per worker, then one release + one acquire per
//!   moved unit (a dead owner's unit costs one more release).
//!
//! KCL 2.x sends `L/W` renewals every 3.3 s and reads all `L` leases per worker every 20 s.
//!
//! ## Timing
//!
//! * A joining worker reaches its share in about three ticks (it is seen on the others' next
//!   listing, they release, it takes), more if its share exceeds the move bound.
//! * A crashed worker's units are owned again within `d` plus two intervals (one to first
//!   observe its last renewal, one to act), or `d + skew + interval` with a skew bound.
//! * A clean shutdown hands over within one to two intervals.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod error;
mod fleet;
mod lessor;
mod partition;
pub mod sim;

pub use error::Error;
pub use fleet::{
    Assignment, CheckpointStore, EventHandler, FleetEvent, LossCause, MemoryCheckpoints,
    TickReport, Worker, WorkerBuilder, WorkerHandle, WorkerStats,
};
pub use lessor::{
    Grant, LeaseCallback, LeaseStore, Lessor, LessorFactory, Registry, StoreLessor, get, register,
};
pub use partition::{End, ParsePartitionError, Partition, PartitionSet};

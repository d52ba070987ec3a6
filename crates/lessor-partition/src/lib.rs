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
//! let mut workers = Vec::new();
//! for id in ["alpha", "beta"] {
//!     workers.push(Worker::builder("indexer", id).store(store.clone()).partitions(&shards).build()?);
//! }
//! for _ in 0..4 {
//!     for worker in &mut workers {
//!         lease_core::block_on(worker.tick())?;
//!     }
//!     clock.advance(workers[0].interval());
//! }
//! // Balanced, every range owned once, each with a fencing token for its writes.
//! assert_eq!(workers[0].owned_units().len(), 8);
//! assert_eq!(workers[1].owned_units().len(), 8);
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
//!   workers, balanced, sticky and fenced; [`CheckpointStore`] for per-unit checkpoints, kept
//!   durably in the lease store itself by [`StoreCheckpoints`].
//! * [`sim`]: the deterministic simulator behind the tests and the benchmark, with a model of
//!   KCL 2.x for comparison, and [`sim::latency`], in which every request takes time and workers
//!   interleave request by request, with pauses, crashes and mixed configurations.
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
//! When membership changes, while it is below its share, after a units listing showed a free or
//! dead-owned unit, and (for the member with the lowest id) every few ticks, a worker lists the
//! units partition and computes the **plan**: a pure function of the sorted live members and the
//! current owners, so every worker that saw the same state computes the same plan. With `L` units
//! and `W` members each gets `floor(L/W)`, and the `L mod W` members with the lowest ids one
//! more. These **targets depend on the member list alone** (never on who holds what, nor on when
//! a worker looked), so workers that see the same members agree on them and they sum to `L`: while
//! any unit is unowned, some member is below its target, keeps listing and planning every tick,
//! and takes it as soon as it is free to take. A leave never lowers a survivor's target (survivors
//! only take) and a join never raises an existing member's (they only give). Each member keeps its
//! lowest-id units up to its target (sticky); the rest (free units, units of dead sessions, then
//! the surplus of members above their target) is dealt to members below their target. A worker
//! releases its surplus (telling the application first) and takes what the plan deals it, at most
//! `max_moves_per_interval` of each per tick. Since the targets of a member list are fixed, a unit
//! moves at most once per membership change and a settled fleet makes no moves.
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
//!    deadline (before `expires_at`) has passed;
//! 4. `s`'s record was missing from every sessions listing `Y` sent after it read the unit
//!    record naming `s`, for a session duration `d` on `Y`'s clock (the record was deleted by an
//!    operator or a TTL, or a listing dropped it). `X` acquired `s` before it took `u`, so before
//!    `Y` read `u`'s record: a listing sent after that read which misses the record means the
//!    record no longer existed when the store served it (at some instant `λ`). A renewal of `s`
//!    that reaches the store after `λ` fails (the store must hold `s`'s token, and a re-created
//!    record carries a new one), so `X`'s last successful renewal `r` was sent before `λ`, which
//!    is before that listing's reply, where `Y` starts counting `d`. So `X`'s deadline
//!    `r.sent + d - margin` has passed, as in 2. This needs listings that miss a record only when
//!    it does not exist; a backend whose listing can drop a live record (one being rewritten)
//!    must keep that rare and brief: `Y` needs it missing from every listing over `d`, at least
//!    `d / interval` listings in a row, while a live `X` rewrites it every interval.
//!
//! A session not in `Y`'s view with no such run of misses (a view older than the unit's owner)
//! is left alone.
//!
//! **A unit record whose token is not a fleet token** (corrupt, or written by something that does
//! not follow this protocol) is released with that token and taken once `Y`'s units listings
//! have shown the record unchanged (token, fencing, expiry) for a session duration. No worker
//! trusts such a unit: a worker trusts only a unit whose store record holds the token it wrote,
//! and every token a worker writes parses (`<uuid>.<fencing>.<id>`, ids without `.`); a worker
//! whose unit record now shows another token lost it, by release or expiry, as above, before the
//! record changed. So taking it cannot give a unit two trusting workers. The wait keeps the rule
//! of 2 for a foreign holder that keeps renewing (changing the expiry): it is left alone. A holder
//! whose token the store does not show cannot be released conditionally and is left alone.
//!
//! The simulator checks this property after every step, with pauses that outlast sessions,
//! session records that vanish after a crash, and units held under garbage tokens.
//!
//! ## Cost, per worker per interval
//!
//! * steady state: **2 requests** (session renew + sessions listing of `W` records), plus
//!   `1/resync_every` of a units listing (`L` records) for the lowest-id member only, plus the
//!   unit lease renewals amortised over half the unit lease: `(L/W) * interval / (unit lease / 2)`
//!   (0.0003 per unit at the defaults);
//! * a membership change: one units listing per worker, then one release + one acquire per
//!   moved unit (a dead owner's unit costs one more release); a worker below its target, or
//!   whose last units listing showed a free or dead-owned unit, lists the units again on every
//!   tick until it reaches its target and sees none.
//!
//! So a worker sends on average `2 + 1/(8W) + (L/W) / 17 280` requests per interval and reads
//! `W + L/(8W)` records. KCL 2.x sends `L/W` renewals every 3.3 s and reads all `L` leases per
//! worker every 20 s. Measured by the benchmark (`benches/fleet.rs`), requests per worker per
//! minute, ours vs KCL: L = 1024, W = 8: 48 vs 2 307; L = 8192, W = 2: 50 vs 73 731. Only when a
//! worker holds about one unit (L = 64, W = 32: 48 vs 39) is KCL cheaper.
//!
//! ## Running a worker
//!
//! [`Worker::tick`] is one round; drive it yourself (the simulator does, on a manual clock), or
//! let [`Worker::run`] tick every interval on the store's clock until [`WorkerHandle::stop`], then
//! shut down cleanly. `run` is a `Send` future that needs no particular runtime (spawn it on
//! tokio for DynamoDB); [`Worker::spawn_thread`] runs it on a thread for the memory and file
//! backends. [`WorkerHandle::snapshot`] shows what the worker owns and whom it sees, and
//! [`WorkerBuilder::on_event`] reports every gain (with the unit's fencing token and checkpoint)
//! and every loss as it happens.
//!
//! A worker learns of its own pause or of failing renewals at its next tick; between ticks,
//! check [`Worker::owns`] (or rely on the fencing token at the resource) before acting. A
//! restarted worker reusing its id waits until its previous session expires in the store.
//!
//! ## Timing
//!
//! * A joining worker reaches its share in about three ticks (it is seen on the others' next
//!   listing, they release, it takes), more if its share exceeds the move bound.
//! * A crashed worker's units are owned again about one session duration `d` after its last
//!   renewal: an observer first sees that renewal at its next tick and judges the session dead
//!   `d` later on its own clock. When `d` is a multiple of the interval (the default, `d = 4I`)
//!   that is within `d + I` of the crash, with several observers usually much less (measured:
//!   11.1 s for `d` = 10 s, `I` = 2.5 s); in general within `d + 2I`. With a skew bound it is
//!   within `d + skew + I` of the last renewal. A crashed worker whose session record vanished
//!   from the listings loses its units about `d + 2I` after the others' first units listing that
//!   names it (measured bound in the simulator: `d + 4I`); a unit under a foreign token is taken
//!   `d` after the first units listing that showed its record.
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
    Assignment, CheckpointStore, FleetEvent, LossCause, MemoryCheckpoints, StoreCheckpoints,
    TickReport, UnitTask, Worker, WorkerBuilder, WorkerHandle, WorkerStats,
};
pub use lessor::{
    Grant, LeaseCallback, LeaseStore, Lessor, LessorFactory, Registry, StoreLessor, get, register,
};
pub use partition::{End, ParsePartitionError, Partition, PartitionSet};

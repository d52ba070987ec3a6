//! The fleet protocol, why no unit ever has two trusting owners, and what it costs.
//!
//! Nothing to call here: this module is the documentation of the [`Worker`]'s protocol, kept
//! apart from the crate's front page.
//!
//!
//! Three kinds of record, under two partition keys of the store (fleet `F`), and a fourth with
//! an assigner (below):
//!
//! * **Sessions** — `fleet/F/sessions`, sort key = worker id. Each worker holds one session
//!   lease (default 10 s) and renews it every interval (default 2.5 s). Its token names the
//!   holder's configuration: `<random>.<session duration ms>.<max units or ->.<unit-list hash>`,
//!   so that workers configured differently judge each other by the *holder's* settings.
//! * **Units** — `fleet/F/units`, sort key = unit id. The owner of a unit holds a *long* lease on
//!   it (default 24 h) whose token names the worker, the fencing token of the session it was
//!   taken under and that session's duration (`<random>.<session fencing>.<duration ms>.<worker
//!   id>`).
//! * **Checkpoints** (optional) — `fleet/F/checkpoints`, sort key = unit id: fenced values, one
//!   per unit ([`WorkerBuilder::with_checkpoints`]).
//!
//! A worker **trusts a unit** only while it holds the unit lease *and* its session is within its
//! **trust deadline**: the instant the newest session renewal *whose reply came back within half
//! the safety margin* was sent, plus the session duration, minus the margin (default a tenth of
//! the duration). A renewal that answers later extends nothing, and a session whose trust has
//! lapsed is never renewed again: the worker drops every unit, releases it and starts a new
//! session (with a greater fencing token). Trust is kept as deadlines that every reader
//! ([`WorkerHandle::owns`], [`UnitTask::check`], [`UnitTask::lost`]) compares with the clock when
//! it reads, so a paused or starved worker stops trusting at its deadline, not at its next tick. One
//! session renewal per interval keeps all of a worker's units, however many: that is where the
//! cost goes from `O(L/W)` renewals per worker (KCL) to `O(1)`.
//!
//! The session is renewed **on its own schedule**: before every request a tick makes (each take,
//! checkpoint read, unit renewal, release), the worker renews the session if a renewal is due.
//! So unit work of any length (hundreds of takes on a slow store) never starves the session.
//!
//! Each tick a worker renews its session and lists the sessions partition (`W` records). Every
//! listing is stamped on the worker's monotonic clock with the instant it was **sent** and the
//! instant it **answered**. For each record version (fencing, token, expiry) the worker keeps
//! `since`, the answer of the first listing that showed it (the version was written before), and
//! `confirmed`, the send of the newest listing that still showed it (the version was still there
//! after). A member is **live** while its record is held and `confirmed - since` is below the
//! holder's session duration; with [`WorkerBuilder::with_clock_skew_bound`] a record whose store-side
//! `expires_at + skew` had passed on this worker's wall clock when `confirmed`'s listing was sent
//! is also dead. A session whose record shows a *greater* fencing token, or no holder, has ended.
//! A session that replaced a *held* session of the same worker id (the worker crashed and
//! restarted) is **on probation**: it is not a member until listings have shown it for its
//! session duration, so a worker that crash-loops is dealt nothing, and its units (whose session
//! ended when the new one appeared) go to the members as any dead worker's do, instead of back to
//! a process that is down again before it takes them. A clean restart (the old session released)
//! joins at once. Probation changes only whom the plan deals to, never a verdict that a session
//! ended.
//! **Every verdict is a function of listing timestamps alone**: when it is used, and how long the
//! requests between the listing and its use took, cannot change it.
//!
//! When membership changes, after a units listing offered something to take, when a unit pinned
//! by a pending verdict could first be judged (a session or foreign record reaching a duration
//! unchanged), and (for the member with the lowest id, or anyone below its share) every
//! `resync_every` ticks, a worker lists the units partition and computes the **plan**: a pure
//! function of the sorted live members and the current owners, so every worker that saw the same
//! state computes the same plan. The units planned over are the worker's configured units **and
//! every unit a listing shows**: the unit set is shared state in the store. A worker that sees a
//! live peer whose unit-list hash differs from its own logs an error, counts it
//! ([`WorkerStats::mismatches`]) and creates the records of its configured units that no listing
//! shows, so every worker plans over the union and no unit is left to workers that do not know
//! it. With `L` units and `W` members each gets `floor(L/W)`, and the `L mod W` members with the
//! lowest ids one more. These **targets depend on the member list alone** (never on who holds
//! what, nor on when a worker looked), so workers that see the same members agree on them and
//! they sum to `L`. A leave never lowers a survivor's target (survivors only take) and a join
//! never raises an existing member's (they only give). Each member keeps its lowest-id units up
//! to its target (sticky); the rest (free units, units of dead sessions, then the surplus of
//! members above their target) is dealt to members below their target. A worker hands its
//! surplus over, at most `max_moves_per_interval` units per tick, and takes every unit the plan
//! deals it that is free or held by a dead session at once: the bound throttles moving live
//! units (as KCL limits stealing), never taking units nobody can be working on, so a dead
//! worker's units are owned again within a session duration plus two intervals at any unit
//! count. Since the targets of a member list are fixed, a unit moves at most once per membership
//! change and a settled fleet makes no moves.
//!
//! **Taking a unit** is: release a dead owner's hold with its token (fails if anyone changed the
//! record since it was listed), acquire (fails unless the key is free), then, with checkpoints,
//! fence and read the unit's checkpoint (retried three times). Only then is the unit trusted and
//! reported [`FleetEvent::Gained`] (with the checkpoint: [`Checkpoint::Empty`] when none was ever
//! saved, [`Checkpoint::Lost`] when it vanished with the store's data). A checkpoint that cannot be read gives the unit back: no unit is ever reported gained with its
//! fence not raised, so an earlier owner's late save is always refused once a new owner works.
//!
//! **Handing over** ([`UnitEnd::HandedOver`], and [`UnitEnd::Shutdown`] at shutdown): when the
//! application takes units as [`UnitTask`]s ([`WorkerHandle::units`]), the task's
//! [`UnitTask::lost`] completes, the unit stays owned while the task saves a final checkpoint,
//! and the worker releases it once the task is dropped or the handoff timeout passes
//! ([`WorkerBuilder::with_handoff_timeout`], as KCL 3.x's graceful handoff). The next owner reads that
//! checkpoint when it takes the unit. Without tasks, a unit is released at once.
//!
//! **Limits and load** (KCL parity). [`WorkerBuilder::with_max_units`] caps a worker; the cap travels
//! in its session token, and the targets fill members up to their caps like water (lowest ids
//! first), so they still depend on the member list alone; when the caps add up to fewer than the
//! units, the rest stay unowned. With [`WorkerBuilder::with_balance_by_load`], each worker publishes
//! the sum of its units' reported loads ([`UnitTask::report_load`]) and its unit count in a
//! `<worker>.load` record of the sessions partition, so the figures arrive with the listing every
//! worker already makes. Free units go to the least loaded member; the most loaded member gives
//! a unit only when that leaves it above the receiver by more than a tenth of the fair share plus
//! the unit's load (so a unit never comes back), and only while every published figure matches
//! the units the listing shows its worker holding. The fleet plans by count whenever a live
//! member publishes no load.
//!
//! **Units at run time** (KCL's shard sync). The unit set is the configured units plus every unit
//! record in the store. [`WorkerHandle::add_units`] makes records for new units and moves the
//! *unit-set epoch*, a `.units` record of the sessions partition (no worker id contains a '.'),
//! whose change makes every worker list the units on its next tick. [`UnitTask::retire`] ends a
//! finished unit: trust ends at once, the record is deleted with the owner's token (the store's
//! compare-and-delete: DynamoDB and memory; elsewhere the call fails and the unit is trusted
//! again), and the epoch moves. The lowest-id member also deletes session records released for
//! ten session durations that no unit names, so listings stay the size of the live fleet.
//!
//! **An assigner** (KCL 3.x's leader/worker split; on by default,
//! [`WorkerBuilder::without_assigner`] turns it off). Listing every session every interval costs
//! the fleet `W²` records a tick. With an assigner, one
//! worker holds a fourth kind of record, the **assigner lease** `fleet/F/assigner` (sort key
//! `lease`, one session duration long, taken with the store's compare-and-swap like any lease).
//! It ticks as above and, after each sessions listing, publishes a **digest** in the lease's
//! token: a hash of the live members with their session fencing and the unit-set epoch, with a
//! *generation* that counts its rewrites of take lists (below). It renews the lease every tick
//! with the same token, or releases and takes it again with a new one (the token cannot change
//! on renewal; whoever wins in between publishes instead). The token also names, when the names
//! fit (256 bytes), the members it *suspects* (a session record its listings showed unchanged for
//! an interval, from the reply of the first to the send of the newest: a member renewing every
//! interval never stays unchanged that long) and the members whose session changed (joined, left,
//! ended, restarted) in its latest two changes of membership. Every other worker reads that
//! one record each tick (a get: one request, one record) and reads each suspect's session record
//! (one get each, judged by the same `since`/`confirmed` rule as a listing); when the digest it
//! computes from its own view differs, it also reads the unit-set epoch record and the record of
//! each member named as changed (a record not found removes that member, and judges no unit).
//! When the digest then equals its own, it **skips listing the sessions**: with its latest plan
//! of these members and epoch and nothing pending, dealt, owed or handed over (and not the
//! lowest-id member with a resync due) it renews its session and unit leases and does nothing
//! else; otherwise it plans as below without a sessions listing. When its own reads still
//! disagree (its verdict on a session comes up to two intervals after the assigner's) it keeps
//! what it holds and follows the assigner's current take list for up to three ticks, then lists
//! the sessions as without an assigner; it lists at once when the assigner cannot name what
//! changed (a new assigner, or too many names). A
//! follower whose reads show the assigner record unchanged for an
//! interval ticks in full too (it watches the sessions itself from then on), and one whose reads
//! show it unchanged for a session duration (or free) also tries to take the lease, so the fleet
//! **falls back** to every worker planning within one session duration of the assigner's last
//! renewal, and elects another. Workers balancing by load never skip (loads travel with the
//! sessions listing). The digest is a hint about *when* to list, nothing more: every verdict on
//! a peer's session comes from the worker's own listings and timestamps, and every take is its
//! own acquire, so the argument below is unchanged, and an assigner that is slow, paused,
//! partitioned or doubled can only make workers list later (balance later), never trust a unit
//! another trusts. Two incarnations cannot both publish: the store lets only the lease's current
//! holder renew it, and a release followed by an acquire fails for a holder that lost it.
//!
//! **Take lists.** When the assigner plans, it writes each other member's part of the plan (the
//! membership's digest, the member's target, the units dealt to it) as a fenced value
//! `fleet/F/takes` / worker id under its lease's fencing token, one write per member whose part
//! changed, and then publishes the next generation. A follower that must plan after a membership
//! change, or whose latest plan followed an older generation, reads its own list (one request)
//! instead of listing the units, reads the record of each listed unit it does not hold (one get
//! each), judges each as a listing's record, hands its surplus above the target over and takes
//! what it found free; a list of neither its own membership nor the assigner's current one, a
//! missing or too long one, or eight hinted plans in a row below target make it list as before.
//! Once its own listing judges a member's session ended (or a unit's foreign or absent holder
//! free; it lists the units again when such a verdict falls due, even at its own target), the
//! assigner takes the units its plan dealt to itself and releases the dead hold of every one
//! dealt to another member (one conditional release each, all at once: the move bound limits
//! moving live work), so that member takes it from its take list on its next tick with no
//! verdict at all: each unit changes owner once. A list decides only which units a follower
//! looks at, so a wrong one costs requests or balance, never a unit trusted twice.
//!
//! # Why no unit ever has two trusting owners
//!
//! Suppose worker `X` trusts unit `u` at instant `t`: it holds `u`'s lease under session `s`, and
//! `t` is before its trust deadline. Another worker `Y` can own `u` only by acquiring it, which
//! the store allows only after `X`'s unit lease was released or expired. `X` releases only after
//! it stopped trusting (it reports the loss first), and the unit lease is renewed long before
//! expiry. So `Y` must have released `X`'s token itself, having judged `s` ended. It judged so on
//! one of:
//!
//! 1. the record shows a greater fencing or no holder: `s` was released (by `X`, after it stopped
//!    trusting) or expired by the store (whose contract says `X`'s deadline had passed), and a
//!    lapsed or released session is never renewed again;
//! 2. a listing sent at `c` still showed the version `v` that a listing answered at `a` first
//!    showed, with `c - a ≥ d_X` (the holder's duration, from its token). `v` was written by a
//!    renewal (or the acquisition) `r` of `X`, sent before `a`, so the trust `r` gave ends before
//!    `a + d_X - m_X ≤ c - m_X`. A later renewal `r'` extends trust only if `X` sent it while
//!    still trusted (before `c - m_X`) and its reply came back within `m_X / 2`, so it landed
//!    before `c - m_X / 2`, before the listing sent at `c` was served; but every renewal changes
//!    the record's expiry, so that listing would not have shown `v`. Hence no renewal after `r`
//!    extended `X`'s trust, which ended before `c - m_X`, and `X` never renews a lapsed session.
//!    This holds whatever the requests cost: a verdict made at `c` stays true however late `Y`
//!    acts on it. Assumptions: clock rates differ by less than `m / (2d)` (5 % at the default
//!    margin; a margin below the floor `d / 50`, 1 %, is refused), a worker has one session renewal in flight at a time, and the store's clock
//!    advances between two writes of one record;
//! 3. `expires_at + skew` had passed on `Y`'s wall clock at the send `c` of a listing that showed
//!    `v`: with wall clocks within `skew`, `r`'s trust (before `expires_at`) ended before `c`, and
//!    later renewals are excluded as in 2;
//! 4. `s`'s record was missing from every sessions listing `Y` sent after a units listing naming
//!    `s` answered, from the first such listing (answered at `f`) to one sent at `c` with
//!    `c - f ≥ d_X` (the record was deleted by an operator or a TTL, or a listing dropped it). `X`
//!    acquired `s` before it took `u`, so before `Y` read `u`'s record: a listing sent after that
//!    which misses the record means the record no longer existed when the store served it,
//!    before `f`. A renewal landing after that fails (the store must hold `s`'s token, and a
//!    re-created record carries a new one), so `X`'s last successful renewal was sent before `f`
//!    and its trust ended before `f + d_X - m_X < c`. This needs listings that miss a record only
//!    when it does not exist, or rarely and briefly: `Y` needs it missing from every listing over
//!    `d_X`, while a live `X` rewrites it every interval.
//!
//! A session not in `Y`'s view with no such run of misses (a view older than the unit's owner)
//! is left alone.
//!
//! **A unit record whose token is not a fleet token** (corrupt, or written by something that does
//! not follow this protocol) is released with that token and taken once `Y`'s units listings
//! have shown the record unchanged (token, fencing, expiry) for a session duration, by the same
//! listing timestamps. No worker trusts such a unit: a worker trusts only a unit whose store
//! record holds the token it wrote, and every token a worker writes parses; a worker whose unit
//! record now shows another token lost it, by release or expiry, as above, before the record
//! changed. The wait keeps the rule of 2 for a foreign holder that keeps renewing (changing the
//! expiry): it is left alone. A holder whose token the store does not show cannot be released
//! conditionally and is left alone.
//!
//! **With an assigner** nothing above changes: a follower that skips listing makes no verdict
//! and takes nothing on that tick, and when it lists again its verdicts rest on its own listings
//! alone (a record version's `since` and `confirmed` are still the reply of the first and the
//! send of the newest listing that showed it, however long the gap between them). The assigner
//! decides only whether a follower lists this tick. `crates/lessor-sim/tests/assigner.rs` runs
//! the latency simulator's traces with the assigner paused past its lease while a peer crashes,
//! cut off and then healed (two assigners for a while), on a store answering in 300 ms and in
//! 800 ms, with a suspected peer paused while it trusts, and the chaos run with every worker
//! electing: 0 units trusted twice and 0 checkpoints written by an older owner.
//!
//! Two simulators (the unpublished crate `lessor-sim`) check this property: `lessor_sim` after
//! every tick, and `lessor_sim::latency`, in which every request takes time and the workers
//! interleave request by request, after every request.
//!
//! # Store loss
//!
//! When the store loses the fleet's data (a DynamoDB table deleted and re-created, DynamoDB Local
//! restarted, a memory store wiped), every session renewal fails (`NotOwned`, reason `Missing`),
//! so every worker drops its units and starts a new session, and the unit records are gone. With
//! checkpoints, the fleet keeps a **store epoch**, a fenced value `fleet/<fleet>/store` counting
//! the losses workers have seen, read when each session starts (one request) and when a gained
//! unit has no checkpoint (at most once a tick). A worker that finds the epoch it read before
//! missing knows the data is gone: it counts the loss ([`WorkerStats::store_losses`]), takes no
//! unit for one session duration (owners from before the loss may trust their units until their
//! deadlines, and nothing in the store says who they were), and reports every unit it gains
//! without a checkpoint with [`Checkpoint::Lost`] (in its [`FleetEvent::Gained`] and its
//! [`UnitTask::checkpoint`]), never as "never saved". A loss that no worker that knew the old store survives to check looks
//! like a new store.
//!
//! A unit's fencing counter starts again with its re-created record, while a checkpoint that an
//! old owner saved again before it noticed the loss keeps the old fence. So an ownership fences
//! its checkpoint at `losses << 52 | fencing` (the losses the worker's store epoch recorded when
//! it took the unit; the token alone before any loss), fixed for the ownership: after a recorded
//! loss every new owner fences above every owner from before it, and each unit is taken once,
//! a session duration after the loss was seen, whatever its old counter. A worker whose fenced
//! read is refused while it holds the unit's lease records one more loss itself (the counter
//! started again without a loss it knew of), gives the unit back and waits a session duration
//! like any worker that finds a loss. See `docs/correctness.md` (*A fleet whose store loses its data*).
//!
//! # Slow stores
//!
//! A session renewal extends trust only when its reply comes back within `m / 2` (half the safety
//! margin: 500 ms at the defaults, `d = 10 s`, `m = 1 s`). So **a fleet keeps its sessions on a
//! store whose requests answer within `m / 2`**; on a slower one no session is ever trusted and
//! nothing is owned (safe, not live). Below that bound, latency and throttling slow the moves but
//! never cost ownership: the session is renewed between any two unit requests, so a worker taking
//! `T` units at `ℓ` per request spends about `T × (2 + c) × ℓ` (two requests per take, `c = 1`
//! with checkpoints, one more for a dead owner's unit) plus one renewal per interval, and keeps
//! everything it holds meanwhile.
//!
//! The latency simulator checks both sides of that bound (`crates/lessor-sim/tests/latency.rs`; every request
//! takes the stated time, half before it lands): below `m / 2` per request every unit is owned
//! with no session loss, at any latency nothing is ever doubly trusted, and above it nothing is
//! owned.
//!
//! # Chaos
//!
//! `lessor_sim::latency::chaos` (seeded, 600 simulated seconds): 16 workers, 256 units, 2 to 40 ms
//! per request, checkpoints saved every 2 s, random pauses of 0.1 to 25 s (preferably with a save
//! in flight), crashes with later starts, restarts under the same id, a worker flapping every
//! 30 s and a rolling change from 10 s to 20 s sessions, checked after every request.
//! `crates/lessor-sim/tests/latency.rs` asserts of a seeded run: no double trust, no checkpoint going backwards,
//! and after every fault every unit owned again within `lessor_sim::latency::recovery_bound` of the
//! latest fault. `cargo bench -p lessor-sim
//! --bench chaos` runs six seeds; `cargo xtask bench` writes their figures to
//! [docs/benchmarks.md](https://github.com/lease-rs/lease/blob/main/docs/benchmarks.md).
//!
//! # Cost, per worker per interval
//!
//! * steady state: **2 requests** (session renew + sessions listing of `W` records), plus
//!   `1/resync_every` of a units listing (`L` records) for the lowest-id member only, plus the
//!   unit lease renewals amortised over half the unit lease: `(L/W) * interval / (unit lease / 2)`
//!   (0.0003 per unit at the defaults);
//! * a membership change: one units listing per worker, then one release + one acquire per
//!   moved unit (a dead owner's unit costs one more release, a checkpoint one fenced read); a
//!   worker whose last units listing offered it something lists again on the next tick, and one
//!   below its share with nothing offered lists again when a pending verdict falls due or after
//!   `resync_every` ticks.
//!
//! So without an assigner ([`WorkerBuilder::without_assigner`]) a worker sends on average
//! `2 + 1/(8W) + (L/W) / 17 280` requests per interval and reads
//! `W + L/(8W)` records.
//!
//! With an assigner (the default), in steady state a follower sends **2
//! requests** (session renew + a get of the assigner record, 1 record) and the assigner 3
//! (session renew, sessions listing of `W` records, assigner renew), so the fleet reads about
//! `2W + L/8` records a tick instead of `W² + L/8`. A suspicion costs every follower one get per
//! suspect per tick until it clears or the suspect's session has ended; a membership change makes
//! every follower read the changed members' session records (a get each, for a tick or a few),
//! the assigner list the units, each follower read its take list and the records of the units
//! listed in it, and a new worker list the sessions once: `O(W + L + units moved)` records per
//! change, of which `L` is the assigner's one units listing, instead of `O(W² + W·L)`. `cargo bench -p lessor-sim --bench
//! scale` (also run by `cargo xtask bench`) measures both, W up to 1,000 and L up to 100,000,
//! and prices them as DynamoDB on demand. KCL 2.x sends `L/W` renewals every 3.3 s and reads all `L` leases per
//! worker every 20 s.
//!
//! Measured in `lessor_sim` by the benchmark (`cargo bench -p lessor-sim --bench fleet`, also
//! run by `cargo xtask bench`; seeded, so every run prints these figures), both protocols on the
//! same schedule for 10 simulated minutes per row. A tick is 2.5 s here and 3.3 s (a renewal
//! round) for KCL; "per worker" divides by the running workers integrated over time. *churn*: one
//! worker flaps (it leaves, alternately cleanly and by crashing, a new process joins 30 s later
//! and leaves again 30 s after that) and every 3 minutes another worker crashes and a new process
//! replaces it at once. *foreign holds*: 4 of the 256 units are held by something outside the
//! fleet that renews every 5 s, so they are left alone and some workers stay below their share
//! (the KCL model has no such holder).
//!
//! | L | W | scenario | ours req/worker/tick | ours records/worker/tick | ours ticks with a units listing | ours req/worker/min | ours records/worker/min | KCL req/worker/tick | KCL records/worker/tick | KCL req/worker/min | KCL records/worker/min | requests ours/KCL | records ours/KCL | units moved ours / KCL |
//! |---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
//! | 64 | 32 | steady | 2.00 | 32.2 | 0.4 % | 48.1 | 774 | 2.2 | 11 | 39.0 | 192 | 1.233 | 4.03 | 0 / 0 |
//! | 64 | 32 | churn | 2.12 | 42.9 | 10.9 % | 51.0 | 1030 | 2.2 | 11 | 39.0 | 194 | 1.307 | 5.32 | 50 / 41 |
//! | 256 | 16 | steady | 2.01 | 18.0 | 0.8 % | 48.2 | 432 | 16.2 | 43 | 291.0 | 768 | 0.166 | 0.56 | 0 / 0 |
//! | 256 | 16 | churn | 2.33 | 49.5 | 11.6 % | 56.0 | 1188 | 16.2 | 43 | 291.9 | 781 | 0.192 | 1.52 | 400 / 139 |
//! | 256 | 16 | foreign holds, steady | 2.02 | 22.0 | 2.3 % | 48.6 | 528 | – | – | – | – | – | – | 0 / – |
//! | 256 | 16 | foreign holds, churn | 2.32 | 58.0 | 14.9 % | 55.8 | 1393 | – | – | – | – | – | – | 321 / – |
//! | 1024 | 8 | steady | 2.02 | 24.0 | 1.6 % | 48.4 | 576 | 128.2 | 171 | 2307.0 | 3072 | 0.021 | 0.19 | 0 / 0 |
//! | 1024 | 8 | churn | 5.69 | 143.3 | 12.8 % | 136.5 | 3440 | 128.2 | 177 | 2307.0 | 3181 | 0.059 | 1.08 | 3200 / 1065 |
//! | 8192 | 2 | steady | 2.06 | 514.0 | 6.2 % | 49.5 | 12336 | 4096.2 | 1365 | 73731.0 | 24576 | 0.001 | 0.50 | 0 / 0 |
//! | 8192 | 2 | churn | 299.50 | 1894.8 | 23.1 % | 7188.0 | 45475 | 3155.9 | 1547 | 56806.3 | 27853 | 0.127 | 1.63 | 52992 / 49158 |
//!
//! In steady state the figures are the formula's. Under churn every worker lists the units once
//! per membership change it sees; a surplus handed over beyond the move bound is taken on the
//! next ticks without listing again for each batch (at L = 8192, W = 2 a flap moves 4096 units:
//! before that rule every tick of the move listed all 8192 units, 71.1 % of ticks and 5831.5
//! records read per worker per tick; then 23.1 % and 1894.8). Free units and dead owners' units
//! are taken in the tick that plans them, whatever their number.
//!
//! # Running a worker
//!
//! [`Worker::tick`] is one round; drive it yourself (the simulator does, on a manual clock), or
//! let [`Worker::run`] tick every interval on the store's clock until [`WorkerHandle::stop`], then
//! shut down cleanly. `run` is a `Send` future that needs no particular runtime (spawn it on
//! tokio for DynamoDB); [`Worker::spawn_thread`] runs it on a thread for the memory and file
//! backends. While it runs, the application acts through its [`WorkerHandle`]:
//! [`owns`](crate::WorkerHandle::owns) before every act, fenced checkpoint saves, a snapshot, the
//! request counters, the stream of [`FleetEvent`]s (a slow consumer never delays a renewal) and
//! the units it gains as [`UnitTask`]s, each with its fencing token, its checkpoint and a loss
//! signal that fires at the deadline. A restarted worker reusing its id waits until its previous
//! session expires in the store.
//!
//! # Timing
//!
//! * A joining worker reaches its share in about three ticks (it is seen on the others' next
//!   listing, they release, it takes), more if its share exceeds the move bound (which limits
//!   how many units its peers hand over per tick).
//! * A crashed worker's units are owned again about one session duration `d` after its last
//!   renewal: an observer first sees that renewal at its next tick and judges the session dead
//!   once a listing sent `d` after that answer still shows it. That is within `d + 2I` of the
//!   crash (`I` the observer's interval), plus the time to take the units. With a skew bound it
//!   is within `d + skew + I` of the last renewal. A crashed worker whose session record vanished
//!   from the listings loses its units about `d + 2I` after the others' first units listing that
//!   names it; a unit under a foreign token is taken `d` after the first units listing that
//!   showed its record.
//! * A clean shutdown hands over within one to two intervals (plus the handoff timeout when
//!   tasks are still saving).
//! * A worker that starts (or restarts under its id) while a crashed peer's session record is
//!   still in the store counts that peer live for its own first session duration (it has no
//!   older observation to judge by), so it may take its share up to `d` later than the others
//!   expect. Measured on DynamoDB Local (`tests/dynamo_processes.rs`, 8 worker processes, 256
//!   units, `d` = 4 s, `I` = 1 s, checkpoints saved every second): every unit owned again 6.9 s
//!   after a SIGKILL, 12.0 s after a SIGSTOP of 12 s, and 9.6 s after a SIGKILL followed at once
//!   by a restart under the same id (the restarted worker's first unit 5.4 s after the kill,
//!   once its old session had expired); 9,280 accepted checkpoint saves checked, none backwards.
//! * A worker restarted under its id after a crash is dealt units one session duration after
//!   the others first list its new session (probation). A worker that crash-loops (up 8 s, down
//!   4 s, 10 s sessions) therefore costs each of its units one takeover, within `d + 2I` of the
//!   crash, and nothing after that (`crates/lessor-sim/tests/loss24.rs`).
//!
//! [`Checkpoint::Empty`]: crate::Checkpoint::Empty
//! [`Checkpoint::Lost`]: crate::Checkpoint::Lost
//! [`FleetEvent`]: crate::FleetEvent
//! [`FleetEvent::Gained`]: crate::FleetEvent::Gained
//! [`UnitEnd::HandedOver`]: crate::UnitEnd::HandedOver
//! [`UnitEnd::Shutdown`]: crate::UnitEnd::Shutdown
//! [`UnitTask`]: crate::UnitTask
//! [`UnitTask::check`]: crate::UnitTask::check
//! [`UnitTask::checkpoint`]: crate::UnitTask::checkpoint
//! [`UnitTask::lost`]: crate::UnitTask::lost
//! [`UnitTask::report_load`]: crate::UnitTask::report_load
//! [`UnitTask::retire`]: crate::UnitTask::retire
//! [`Worker`]: crate::Worker
//! [`Worker::run`]: crate::Worker::run
//! [`Worker::spawn_thread`]: crate::Worker::spawn_thread
//! [`Worker::tick`]: crate::Worker::tick
//! [`WorkerBuilder::with_balance_by_load`]: crate::WorkerBuilder::with_balance_by_load
//! [`WorkerBuilder::with_checkpoints`]: crate::WorkerBuilder::with_checkpoints
//! [`WorkerBuilder::with_clock_skew_bound`]: crate::WorkerBuilder::with_clock_skew_bound
//! [`WorkerBuilder::with_handoff_timeout`]: crate::WorkerBuilder::with_handoff_timeout
//! [`WorkerBuilder::with_max_units`]: crate::WorkerBuilder::with_max_units
//! [`WorkerBuilder::without_assigner`]: crate::WorkerBuilder::without_assigner
//! [`WorkerHandle`]: crate::WorkerHandle
//! [`WorkerHandle::add_units`]: crate::WorkerHandle::add_units
//! [`WorkerHandle::owns`]: crate::WorkerHandle::owns
//! [`WorkerHandle::stop`]: crate::WorkerHandle::stop
//! [`WorkerHandle::units`]: crate::WorkerHandle::units
//! [`WorkerStats::mismatches`]: crate::WorkerStats::mismatches
//! [`WorkerStats::store_losses`]: crate::WorkerStats::store_losses

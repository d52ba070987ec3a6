//! One fleet worker: a session lease, a view of the members, and the units it owns.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencingToken, Lease, LeaseBackend, LeaseError, LeaseKey,
    LeaseListing, LeaseRecord, LeaseToken, LossReason, NotOwnedReason,
};

use super::assigner::{self, Assigner, Heard, Published};
use super::builder::{Config, WorkerBuilder};
use super::checkpoint::{Checkpoints, EpochCheck};
use super::counted::CountedStore;
use super::join::join_all;
use super::session::{Kept, Session};
use super::shared::{Shared, SharedUnit, UnitTask, WorkerHandle};
use super::types::{Checkpoint, FleetEvent, TickReport, UnitEnd, WorkerStats};
use super::units::{self, Give, Members, Reading, Units, unit_key};
use super::view::{Listing, PublishedLoad, SessionTag, UnitHolder, View};

/// How many takes (each a conditional release of a dead hold, then a conditional acquire) a
/// worker has in flight at once: a dead worker's share on a store answering in milliseconds is
/// taken in share / 16 round trips instead of share x 2.
const TAKES_IN_FLIGHT: usize = 16;

/// How many times a checkpoint load is tried before a gained unit is given back.
const CHECKPOINT_ATTEMPTS: u32 = 3;

/// A fleet worker. Drive it with [`Worker::tick`] every interval, or let [`Worker::run`] do it.
///
/// Per tick, in steady state, it sends **two requests**: renew its session, list the sessions
/// partition (`W` records). It lists the units partition (`L` records, one request) when
/// membership changed, after a listing offered it something to take, for the member with the
/// lowest id every `resync_every` ticks, and, while it is below its share with nothing offered,
/// after 1, 2, 4, ... ticks. With an assigner (the default), a worker that is not the assigner
/// reads the assigner record instead of listing (two requests, one record) while the assigner's
/// digest matches its own last listing and it has nothing to move. Unit leases are renewed once
/// per half unit-lease duration. Moves cost one release by the giver and one acquire by the taker
/// (plus a release of the dead owner's token when the owner crashed) and, with checkpoints, one
/// fenced read.
///
/// The worker itself only runs: [`tick`](Self::tick), [`run`](Self::run),
/// [`spawn_thread`](Self::spawn_thread), [`shutdown`](Self::shutdown). Everything the
/// application asks of it (what it owns, checkpoints, events, units as tasks, stopping it) goes
/// through its [`WorkerHandle`] ([`handle`](Self::handle)), which stays usable while `run` owns
/// the worker.
///
/// ```
/// use lessor_partition::Worker;
/// use lease_core::{ManualClock, MemoryBackend};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let clock = Arc::new(ManualClock::new());
/// let store = MemoryBackend::builder().with_clock(clock.clone()).build();
/// let make = |id: &str| Worker::builder("demo", id).with_store(Arc::new(store.clone()))
///     .with_units((0..6).map(|i| format!("shard-{i}"))).build();
/// let (mut a, mut b) = (make("a")?, make("b")?);
/// let (ha, hb) = (a.handle(), b.handle());
/// for _ in 0..4 {
///     pollster::block_on(a.tick())?;
///     pollster::block_on(b.tick())?;
///     clock.advance(Duration::from_millis(2500));
/// }
/// assert_eq!(ha.owned_units().len(), 3);
/// assert_eq!(hb.owned_units().len(), 3);
/// pollster::block_on(a.shutdown())?; // hands its units over at once
/// pollster::block_on(b.tick())?;
/// pollster::block_on(b.tick())?;
/// assert_eq!(hb.owned_units().len(), 6);
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
pub struct Worker {
    pub(crate) config: Config,
    /// The lease store, counting every request ([`WorkerStats::requests`]).
    pub(crate) store: Arc<CountedStore>,
    pub(crate) checkpoints: Option<Checkpoints>,
    pub(crate) session: Option<Session>,
    pub(crate) view: View,
    /// The live members as of the latest sessions listing, this worker included, sorted.
    pub(crate) members: Vec<(String, u64)>,
    /// The units it holds, knows and moves.
    pub(crate) units: Units,
    /// A live peer is configured with a different unit list.
    pub(crate) mismatch: bool,
    /// The unit-set epoch of the latest plan.
    pub(crate) planned_epoch: Option<u64>,
    /// Each live peer's session tag (its limit and unit-list hash), as last listed.
    pub(crate) member_tags: BTreeMap<String, Option<SessionTag>>,
    pub(crate) planned_members: Option<Vec<(String, u64)>>,
    pub(crate) ticks_since_plan: u32,
    /// The tick in which the store epoch was last read.
    pub(crate) epoch_checked_at: Option<u64>,
    /// After a store loss, no unit is taken before this instant (see `check_store_epoch`).
    pub(crate) takes_frozen_until: Option<Instant>,
    pub(crate) stats: WorkerStats,
    pub(crate) shared: Arc<Shared>,
    /// Its part in electing and following an assigner, when the fleet has one.
    pub(crate) assigner: Assigner,
    /// Plans made from take lists since the last one that left this worker at its target (or
    /// its last units listing): bounded by [`MAX_HINTED_ROUNDS`], then it lists.
    pub(crate) hinted_rounds: u32,
    /// Ticks this worker waited for a take list of its current membership.
    pub(crate) hint_waits: u32,
    /// Ticks in a row in which this worker's members differed from the assigner's after it read
    /// the sessions the assigner names: bounded by [`MAX_LAG_TICKS`], then it lists them.
    pub(crate) lag_ticks: u32,
    /// The digest of the membership its latest plan was made for (a take list's, or its own
    /// from a units listing) and the assigner's take-list generation then: when the assigner
    /// publishes another, it reads its list again.
    pub(crate) followed_plan: Option<(u64, u64)>,
}

/// How many ticks in a row a worker keeps what it holds, without listing the sessions, while
/// its own reads of the sessions the assigner names still disagree with the assigner's digest.
/// Two verdicts on one session, each from its own reads, come within an interval or two of each
/// other (a follower starts reading a suspect an interval after the assigner); a listing would
/// not bring them closer, since it reads the same records.
const MAX_LAG_TICKS: u32 = 3;

/// How many plans in a row a worker makes from take lists while still below its target before
/// it lists the units (a session duration of 10 s at a 2.5 s interval takes 4 to end).
const MAX_HINTED_ROUNDS: u32 = 8;

impl WorkerBuilder {
    /// Checks the configuration and makes the worker. Sends nothing.
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] for a missing store, an invalid fleet name, worker id or unit,
    /// or durations that cannot work together; [`LeaseError::Unsupported`] for a store that
    /// cannot list (operation `list_partition`), or keeps no fenced values when
    /// [`with_checkpoints`](Self::with_checkpoints) asks for them (operation
    /// `fenced checkpoints`).
    pub fn build(self) -> Result<Worker, LeaseError> {
        let (config, store, checkpoints) = self.into_parts()?;
        Ok(Worker::from_config(config, store, checkpoints))
    }
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("worker_id", &self.config.worker_id)
            .field(
                "session",
                &self.session.as_ref().map(|s| s.lease.fencing_token()),
            )
            .field("owned", &self.units.owned.len())
            .field("target", &self.units.target)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// Starts configuring worker `worker_id` of fleet `fleet`.
    pub fn builder(fleet: impl Into<String>, worker_id: impl Into<String>) -> WorkerBuilder {
        WorkerBuilder::new(fleet.into(), worker_id.into())
    }

    pub(crate) fn from_config(
        config: Config,
        store: Arc<dyn LeaseBackend>,
        checkpoints: Option<Checkpoints>,
    ) -> Self {
        let shared = Arc::new(Shared::new(
            config.worker_id.clone(),
            store.clone(),
            checkpoints.clone(),
            (config.units_key.clone(), config.epoch_key.clone()),
            config.tokens.clone(),
        ));
        Self {
            view: View::new(config.session_duration, config.skew),
            units: Units::new(&config),
            config,
            store: Arc::new(CountedStore::new(store)),
            checkpoints,
            session: None,
            members: Vec::new(),
            mismatch: false,
            planned_epoch: None,
            member_tags: BTreeMap::new(),
            planned_members: None,
            ticks_since_plan: 0,
            epoch_checked_at: None,
            takes_frozen_until: None,
            stats: WorkerStats::default(),
            shared,
            assigner: Assigner::default(),
            hinted_rounds: 0,
            hint_waits: 0,
            lag_ticks: 0,
            followed_plan: None,
        }
    }

    /// A handle to observe this worker and act for the application while it runs: take it
    /// before [`run`](Self::run) or [`spawn_thread`](Self::spawn_thread) takes the worker.
    pub fn handle(&self) -> WorkerHandle {
        WorkerHandle {
            shared: self.shared.clone(),
        }
    }

    /// Request counts so far (what [`publish`](Self::publish) shares with the handles).
    pub(crate) fn stats(&self) -> WorkerStats {
        WorkerStats {
            requests: self.store.requests(),
            ..self.stats
        }
    }

    pub(crate) fn clock(&self) -> &dyn Clock {
        self.store.clock()
    }

    pub(crate) fn session_trusted(&self) -> bool {
        let now = self.clock().monotonic();
        self.session.as_ref().is_some_and(|s| s.trusted_at(now))
    }

    /// Keeps the session trusted ([`Session::keep`]): renews it if a renewal is due, and ends it
    /// (dropping every unit) once its trust has lapsed. Called before every unit request, so unit
    /// work of any length never starves the session. Returns whether the session is trusted
    /// after.
    pub(crate) async fn keep_session(&mut self, events: &mut Vec<FleetEvent>) -> bool {
        let Some(session) = self.session.as_mut() else {
            return false;
        };
        match session.keep(&self.config, &self.store).await {
            Kept::Unchanged => {}
            Kept::Renewed => {
                let renewed = self.session.take();
                self.set_session(renewed);
            }
            Kept::Ended { reason, release } => {
                self.lose_all(UnitEnd::Lost(reason), events);
                self.set_session(None);
                if let Some(lease) = release {
                    let _ = self
                        .store
                        .release(lease.key(), lease.token(), lease.fencing_token())
                        .await;
                }
                return false;
            }
        }
        self.session_trusted()
    }

    /// Acquires a new session ([`Session::start`]). Returns whether one is held and trusted
    /// after; a new session plans afresh.
    ///
    /// # Errors
    /// A store failure other than "held".
    pub(crate) async fn start_session(&mut self) -> Result<bool, LeaseError> {
        let Some(session) = Session::start(&self.config, &self.store).await? else {
            return Ok(false);
        };
        self.set_session(Some(session));
        self.planned_members = None;
        self.units.pending_takes.clear();
        Ok(true)
    }

    pub(crate) fn emit(&mut self, event: FleetEvent, events: &mut Vec<FleetEvent>) {
        match &event {
            FleetEvent::Gained {
                unit,
                fencing_token: fencing,
                checkpoint,
            } => {
                self.stats.gains += 1;
                super::meter::gained(&self.config.worker_id);
                if *checkpoint == Checkpoint::Lost {
                    self.stats.checkpoints_lost += 1;
                    tracing::error!(worker = %self.config.worker_id, unit, %fencing, "fleet: the unit's checkpoint vanished with the store's data");
                }
                tracing::info!(worker = %self.config.worker_id, unit, %fencing, "fleet: gained unit");
            }
            FleetEvent::Lost {
                unit,
                fencing_token: fencing,
                reason,
            } => {
                self.stats.losses += 1;
                super::meter::lost(&self.config.worker_id, reason);
                tracing::info!(worker = %self.config.worker_id, unit, %fencing, %reason, "fleet: lost unit");
            }
        }
        self.shared.push_event(event.clone());
        events.push(event);
    }

    /// Records the session (or none), and the deadline until which it is trusted.
    pub(crate) fn set_session(&mut self, session: Option<Session>) {
        let shared = session
            .as_ref()
            .map(|s| (s.lease.fencing_token(), s.trust_until));
        self.session = session;
        self.shared.update(|state| {
            if shared.is_some() {
                state.finished = false;
            }
            state.session = shared;
        });
    }

    /// Records a renewed unit lease.
    pub(crate) fn keep_unit(&mut self, unit: String, lease: Lease) {
        let deadline = lease.deadline();
        let fencing = lease.fencing_token();
        self.shared.update(|state| {
            if let Some(owned) = state.units.get_mut(&unit)
                && owned.fencing == fencing
            {
                owned.deadline = deadline;
            }
        });
        self.units.owned.insert(unit, lease);
    }

    /// Makes a gained unit trusted, hands it to the application as a task if it takes tasks, and
    /// tells it.
    pub(crate) fn gain_unit(
        &mut self,
        unit: &str,
        lease: Lease,
        (checkpoint, checkpoint_fencing): (Option<Vec<u8>>, FencingToken),
        events: &mut Vec<FleetEvent>,
    ) {
        let fencing = lease.fencing_token();
        let checkpoint = match checkpoint {
            Some(bytes) => Checkpoint::Saved(bytes),
            None if self
                .checkpoints
                .as_ref()
                .is_some_and(Checkpoints::after_loss) =>
            {
                Checkpoint::Lost
            }
            None => Checkpoint::Empty,
        };
        let shared = self.shared.clone();
        self.shared.update(|state| {
            let task_alive = state.tasks_wanted;
            state.units.insert(
                unit.to_owned(),
                SharedUnit {
                    fencing,
                    checkpoint_fencing,
                    token: lease.token().clone(),
                    retiring: false,
                    load: 1.0,
                    deadline: lease.deadline(),
                    handoff: None,
                    task_alive,
                    ended: None,
                },
            );
            if task_alive {
                state.new_tasks.push_back(UnitTask {
                    unit: unit.to_owned(),
                    fencing,
                    checkpoint: checkpoint.clone(),
                    shared,
                });
            }
        });
        self.units.hold(unit, lease);
        self.emit(
            FleetEvent::Gained {
                unit: unit.to_owned(),
                fencing_token: fencing,
                checkpoint,
            },
            events,
        );
    }

    /// Stops trusting `unit` and tells the application; returns its lease for a release.
    pub(crate) fn lose_unit(
        &mut self,
        unit: &str,
        reason: UnitEnd,
        events: &mut Vec<FleetEvent>,
    ) -> Option<Lease> {
        let lease = self.units.forget(unit)?;
        self.shared.update(|state| {
            if let Some(owned) = state.units.get_mut(unit) {
                owned.ended = Some(reason.clone());
                owned.handoff = None;
                if !owned.task_alive {
                    state.units.remove(unit);
                }
            }
        });
        self.emit(
            FleetEvent::Lost {
                unit: unit.to_owned(),
                fencing_token: lease.fencing_token(),
                reason,
            },
            events,
        );
        Some(lease)
    }

    pub(crate) fn lose_all(&mut self, reason: UnitEnd, events: &mut Vec<FleetEvent>) -> Vec<Lease> {
        let units: Vec<String> = self.units.owned.keys().cloned().collect();
        units
            .iter()
            .filter_map(|unit| self.lose_unit(unit, reason.clone(), events))
            .collect()
    }

    /// Lists one partition, stamping the listing for the view.
    pub(crate) async fn listing(
        &self,
        partition: &str,
    ) -> Result<(Vec<LeaseRecord>, Listing), LeaseError> {
        let sent = self.clock().monotonic();
        let wall_sent = self.clock().now();
        let records = self.store.list_partition(partition).await?;
        let reply = self.clock().monotonic();
        Ok((
            records,
            Listing {
                sent,
                reply,
                wall_sent,
            },
        ))
    }

    /// Lists the sessions and updates the view and the live members.
    async fn observe_sessions(&mut self) -> Result<(), LeaseError> {
        self.stats.lists += 1;
        let (records, listing) = self.listing(&self.config.sessions.clone()).await?;
        self.stats.records_read += records.len() as u64;
        self.view.observe_sessions(&records, listing);
        self.refresh_members();
        Ok(())
    }

    /// The live members by the view, this worker included.
    fn refresh_members(&mut self) {
        let me = self.config.worker_id.clone();
        let peers = self.view.live_peers(&me);
        self.member_tags = peers.iter().map(|(m, _, t)| (m.clone(), *t)).collect();
        let mut members: Vec<(String, u64)> = peers.into_iter().map(|(m, f, _)| (m, f)).collect();
        if let Some(session) = self.session.as_ref() {
            members.push((me.clone(), session.lease.fencing_token().get()));
            members.sort();
        }
        self.members = members;
        self.note_mismatch(&me);
    }

    /// Reads the session record of each member named (one request each) into the view, by the
    /// same rule as a listing, and updates the live members. `false` if a read failed.
    async fn read_sessions(&mut self, names: &[String]) -> bool {
        for name in names {
            if *name == self.config.worker_id {
                continue;
            }
            let Ok(key) = LeaseKey::with_sort_key(self.config.sessions.as_str(), name.as_str())
            else {
                return false;
            };
            let sent = self.clock().monotonic();
            let wall_sent = self.clock().now();
            let Ok(record) = self.store.inspect(&key).await else {
                return false;
            };
            let reply = self.clock().monotonic();
            self.stats.records_read += u64::from(record.is_some());
            let listing = Listing {
                sent,
                reply,
                wall_sent,
            };
            self.view.observe_session(name, record.as_ref(), listing);
        }
        if !names.is_empty() {
            self.refresh_members();
        }
        true
    }

    /// Reads the unit-set epoch record (one request) into the view. `false` if the read failed.
    async fn read_epoch(&mut self) -> bool {
        let Ok(record) = self.store.inspect(&self.config.epoch_key).await else {
            return false;
        };
        if let Some(record) = record {
            self.stats.records_read += 1;
            self.view.observe_epoch(&record);
        }
        true
    }

    /// Brings this worker's members level with the assigner's without listing the sessions
    /// (see [`Synced`]): it reads the sessions the assigner suspects, and, when its own view
    /// differs from the assigner's digest, those the assigner names as recently changed and the
    /// unit-set epoch. Each
    /// verdict on a session stays this worker's own (its reads, its timestamps): the names only
    /// say which records to read.
    async fn sync_with_assigner(&mut self, heard: Option<&Heard>) -> Synced {
        let Some(Heard::Digest(Published {
            digest: published,
            generation,
            suspects: Some(suspects),
            changed,
        })) = heard
        else {
            self.lag_ticks = 0;
            return Synced::List;
        };
        if self.units.by_load || self.sweeper_resync_due() {
            // Loads come with a sessions listing; the sweeper's resync lists them too.
            self.lag_ticks = 0;
            return Synced::List;
        }
        let agrees = |w: &Self| assigner::digest(&w.members, w.view.epoch()) == *published;
        let mut names = suspects.clone();
        if !agrees(self) {
            let Some(changed) = changed else {
                // The assigner cannot say what changed (a new assigner, or too many names):
                // its own reads cannot bring this worker level, a listing can.
                self.lag_ticks = 0;
                return Synced::List;
            };
            names.extend(changed.iter().filter(|c| !suspects.contains(c)).cloned());
            // Units added or retired move the epoch, which a sessions listing would bring.
            if !self.read_epoch().await {
                self.lag_ticks = 0;
                return Synced::List;
            }
        }
        if !self.read_sessions(&names).await {
            self.lag_ticks = 0;
            return Synced::List;
        }
        if self
            .followed_plan
            .is_some_and(|followed| followed != (*published, *generation))
        {
            // The assigner planned again since this worker's latest plan (perhaps for members
            // this worker already sees): its take list may have changed.
            self.units.relist = true;
        }
        if agrees(self) {
            self.lag_ticks = 0;
            return Synced::Agreed;
        }
        self.lag_ticks += 1;
        if self.lag_ticks > MAX_LAG_TICKS {
            self.lag_ticks = 0;
            return Synced::List;
        }
        Synced::Lagging
    }

    fn note_mismatch(&mut self, me: &str) {
        let peers = self.view.mismatched_peers(me, self.config.units_hash);
        let mismatch = !peers.is_empty();
        if mismatch && !self.mismatch {
            tracing::error!(worker = %me, peers = ?peers, "fleet: live workers are configured with different unit lists; planning over their union and creating the missing unit records");
            self.stats.mismatches += 1;
        }
        self.mismatch = mismatch;
    }

    /// One round of the protocol. Call it every interval
    /// ([`WorkerBuilder::with_interval`]), or let [`run`](Self::run) do it.
    ///
    /// # Errors
    /// A store failure ([`LeaseError::Backend`]) of a listing or of acquiring the session; the worker
    /// stays consistent and the next tick retries.
    pub async fn tick(&mut self) -> Result<TickReport, LeaseError> {
        let mut report = TickReport::default();
        self.stats.ticks += 1;
        let outcome = self.tick_inner(&mut report).await;
        report.has_session = self.session_trusted();
        self.publish();
        outcome.map(|()| report)
    }

    async fn tick_inner(&mut self, report: &mut TickReport) -> Result<(), LeaseError> {
        let events = &mut report.events;
        let starting = self.session.is_none();
        let fresh = starting && !self.start_session().await?;
        if self.session.is_none() || fresh || !self.keep_session(events).await {
            return Ok(());
        }
        if starting {
            // A session ends when the store loses its records: the next one checks whether the
            // checkpoints went with them.
            self.check_store_epoch().await;
        }
        let first = self.planned_members.is_none() && self.ticks_since_plan == 0;
        let heard = self.hear_assigner().await;
        let synced = if first {
            Synced::List
        } else {
            self.sync_with_assigner(heard.as_ref()).await
        };
        if synced != Synced::List && self.quiet() {
            // The assigner sees the members this worker sees (or this worker will, within a
            // tick or two) and it has nothing to move: keep what it holds without listing.
            self.ticks_since_plan += 1;
            self.drop_retired(events);
            self.finish_handoffs(events).await;
            self.keep_units(events).await;
            return Ok(());
        }
        if synced == Synced::List {
            self.observe_sessions().await?;
        }
        self.follow_or_lead(heard.as_ref()).await;
        self.drop_retired(events);
        self.finish_handoffs(events).await;
        self.keep_units(events).await;
        self.publish_load(false).await;
        if self.takes_frozen() {
            return Ok(());
        }
        if first {
            // Let workers that start together see each other before anyone deals units:
            // without this the first to start takes everything and hands most of it back.
            self.ticks_since_plan = 1;
            return Ok(());
        }
        if self.should_plan() {
            report.planned = true;
            if self.follow_take_list(heard.as_ref(), events).await {
                return Ok(());
            }
            self.plan_from_listing(heard.as_ref(), synced, events)
                .await?;
        } else {
            self.ticks_since_plan += 1;
            if !self.units.by_load {
                self.give_surplus(events).await;
            }
            self.take_pending(events).await;
        }
        self.after_moves().await;
        Ok(())
    }

    /// Lists the units (and the sessions, if this tick has not) and plans from the listing, as
    /// without an assigner.
    async fn plan_from_listing(
        &mut self,
        heard: Option<&Heard>,
        synced: Synced,
        events: &mut Vec<FleetEvent>,
    ) -> Result<(), LeaseError> {
        if synced != Synced::List {
            // Planning from a units listing judges holders by the sessions (an absent session
            // only by listings): list them too.
            self.observe_sessions().await?;
        }
        self.ticks_since_plan = 0;
        self.hinted_rounds = 0;
        self.hint_waits = 0;
        let (records, listing) = self.list_units().await?;
        self.stats.records_read += records.len() as u64;
        self.planned_epoch = self.view.epoch();
        self.plan_and_move(&records, listing, events).await;
        self.planned_members = Some(self.members.clone());
        self.followed_plan = Some((
            assigner::digest(&self.members, self.view.epoch()),
            heard_generation(heard),
        ));
        if self.is_sweeper() {
            units::sweep_sessions(&self.config, &self.store, &self.view, &records).await;
        }
        Ok(())
    }

    /// Plans from the take list when it can ([`Worker::plan_from_takes`]): `true` when the
    /// tick is done (planned, or waiting a tick for the assigner), `false` to list the units.
    async fn follow_take_list(
        &mut self,
        heard: Option<&Heard>,
        events: &mut Vec<FleetEvent>,
    ) -> bool {
        match self.plan_from_takes(heard, events).await {
            Hinted::Planned => {
                self.ticks_since_plan = 0;
                self.planned_epoch = self.view.epoch();
                self.planned_members = Some(self.members.clone());
                self.after_moves().await;
                true
            }
            Hinted::Wait => {
                self.ticks_since_plan += 1;
                self.give_surplus(events).await;
                self.take_pending(events).await;
                true
            }
            Hinted::List => false,
        }
    }

    /// Plans from this worker's take list ([`super::takes`]) instead of a units listing, while an
    /// assigner is alive and agrees: one request for the list, one read of each listed unit it
    /// does not own, each judged by the rule a listing gets; then it gives its surplus above the
    /// list's target and takes what is free. [`Hinted::List`] when the list is missing, of
    /// another membership for a second tick, too long to write, or the worker has used lists
    /// for [`MAX_HINTED_ROUNDS`] plans without reaching its target; a failed unit read also
    /// ends in a listing on the next plan.
    async fn plan_from_takes(
        &mut self,
        heard: Option<&Heard>,
        events: &mut Vec<FleetEvent>,
    ) -> Hinted {
        let usable = self.config.takes_key.is_some()
            && matches!(heard, Some(Heard::Digest(..)))
            && !self.assigner.is_assigner()
            && !self.mismatch
            && !self.units.by_load
            && self.hinted_rounds < MAX_HINTED_ROUNDS
            && !self.sweeper_resync_due();
        if !usable {
            return Hinted::List;
        }
        let Some(fencing) = self.assigner.heard_fencing() else {
            return Hinted::List;
        };
        let Some(list) = super::takes::read(&self.config, &self.store, fencing).await else {
            return Hinted::List;
        };
        self.stats.records_read += 1;
        // A list of the membership this worker sees, or of the one the assigner publishes now
        // (its plan for members this worker's own reads have not yet caught up with: the list
        // only says which units to look at, and each verdict on them stays this worker's).
        let plan = assigner::digest(&self.members, self.view.epoch());
        let current =
            matches!(heard, Some(Heard::Digest(published)) if published.digest == list.plan);
        if list.plan != plan && !current {
            // The assigner plans on its own tick: wait one for it.
            self.hint_waits += 1;
            return if self.hint_waits > 1 {
                Hinted::List
            } else {
                Hinted::Wait
            };
        }
        let Some(units) = list.units else {
            return Hinted::List;
        };
        self.hint_waits = 0;
        self.followed_plan = Some((list.plan, heard_generation(heard)));
        let Some(records) = self.read_listed(units).await else {
            self.hinted_rounds = MAX_HINTED_ROUNDS;
            return Hinted::List;
        };
        let (takes, waiting) =
            self.units
                .read_hinted(&self.config, &mut self.view, &self.members, records);
        tracing::debug!(worker = %self.config.worker_id, target = list.target, take = takes.len(), waiting, "fleet: planned from the assigner's take list");
        self.units.target = Some(list.target);
        self.units.pending_takes = takes;
        self.give_surplus(events).await;
        self.take_pending(events).await;
        // Units not yet free (a giver still handing over, a session not yet judged ended):
        // look at the list again next tick.
        self.units.relist = waiting > 0 && self.units.below_target();
        self.units.next_verdict = None;
        if self.units.below_target() {
            self.hinted_rounds += 1;
        } else {
            self.hinted_rounds = 0;
        }
        Hinted::Planned
    }

    /// Reads the record of each listed unit this worker does not hold, [`TAKES_IN_FLIGHT`] at
    /// a time: `None` if a read failed.
    async fn read_listed(
        &mut self,
        units: Vec<String>,
    ) -> Option<Vec<(String, Option<UnitHolder>, Listing)>> {
        let wanted: Vec<(String, LeaseKey)> = units
            .into_iter()
            .filter(|unit| !self.units.owned.contains_key(unit))
            .filter_map(|unit| Some((unit.clone(), unit_key(&self.config, &unit)?)))
            .collect();
        let mut records = Vec::new();
        for batch in wanted.chunks(TAKES_IN_FLIGHT) {
            // One stamp pair for the batch: the earliest send and the latest reply, which only
            // shortens any span a verdict measures.
            let sent = self.clock().monotonic();
            let wall_sent = self.clock().now();
            let store = &*self.store;
            let reads: Vec<_> = batch
                .iter()
                .map(|(_, key)| Box::pin(store.inspect(key)))
                .collect();
            let read = join_all(reads).await;
            let listing = Listing {
                sent,
                reply: self.clock().monotonic(),
                wall_sent,
            };
            for ((unit, _), record) in batch.iter().zip(read) {
                let record = record.ok()?;
                self.stats.records_read += u64::from(record.is_some());
                let holder = record.as_ref().and_then(UnitHolder::parse);
                records.push((unit.clone(), holder, listing));
            }
        }
        Some(records)
    }

    /// Reads the assigner record (one request) unless this worker is the assigner or the fleet
    /// has none.
    async fn hear_assigner(&mut self) -> Option<Heard> {
        if self.config.assigner_key.is_none() || self.assigner.is_assigner() {
            return None;
        }
        let heard = self.assigner.hear(&self.config, &self.store).await;
        if heard != Heard::Unknown {
            self.stats.records_read += 1;
        }
        Some(heard)
    }

    /// After a sessions listing: notes this worker's own digest, and publishes the fleet's if it
    /// is (or, with nobody alive, becomes) the assigner.
    async fn follow_or_lead(&mut self, heard: Option<&Heard>) {
        if self.config.assigner_key.is_none() {
            return;
        }
        let epoch = self.view.epoch();
        if !self.assigner.is_assigner() && heard != Some(&Heard::Nobody) {
            return;
        }
        let suspects = self
            .view
            .suspects(&self.config.worker_id, assigner::suspect_span(&self.config));
        let published = assigner::digest(&self.members, epoch);
        self.assigner.note_members(&self.members);
        self.assigner
            .lead(&self.config, &self.store, heard, published, &suspects)
            .await;
    }

    /// Whether this worker has nothing to move or judge: its latest plan is of the members and
    /// epoch it sees, it has nothing pending, dealt, owed or handed over, and it is not the
    /// sweeper with a resync due. Only then may it skip listing while the assigner agrees.
    fn quiet(&self) -> bool {
        self.planned_members.as_ref() == Some(&self.members)
            && self.planned_epoch == self.view.epoch()
            && self.units.pending_takes.is_empty()
            && !self.units.relist
            && self.units.next_verdict.is_none()
            && self.units.target == Some(self.units.owned.len())
            && self.units.handing_over.is_empty()
            && !self.mismatch
            && !self.units.by_load
            && !self.sweeper_resync_due()
    }

    /// Lists the units partition: one request.
    async fn list_units(
        &mut self,
    ) -> Result<(BTreeMap<String, Option<UnitHolder>>, Listing), LeaseError> {
        self.stats.lists += 1;
        self.stats.unit_lists += 1;
        let (records, listing) = self.listing(&self.config.units_key.clone()).await?;
        Ok((units::units_of(&records), listing))
    }

    /// Plans from a units listing ([`Units::plan`]), hands the surplus over and takes what the
    /// plan deals. Every request is preceded by [`Worker::keep_session`], so the session is
    /// renewed on its own schedule however long the unit work takes, and unit work stops as soon
    /// as it is not trusted.
    async fn plan_and_move(
        &mut self,
        records: &BTreeMap<String, Option<UnitHolder>>,
        listing: Listing,
        events: &mut Vec<FleetEvent>,
    ) {
        let reading = self.units.read(
            &self.config,
            &mut self.view,
            &self.members,
            records,
            listing,
        );
        for unit in &reading.stale {
            self.lose_unit(unit, taken_over(), events);
        }
        let own_loads = self.units.own_loads(&self.shared);
        let members = Members {
            live: &self.members,
            tags: &self.member_tags,
        };
        let Some(dealt) = self.units.plan(
            &self.config,
            &self.view,
            members,
            &own_loads,
            &reading,
            self.assigner.is_assigner(),
        ) else {
            return;
        };
        if self.assigner.is_assigner() {
            let plan = assigner::digest(&self.members, self.view.epoch());
            self.assigner
                .publish_takes(&self.config, &self.store, plan, dealt.others)
                .await;
            self.free_dead_for_others(events).await;
        }
        match dealt.give {
            Give::ByLoad(units) => {
                for unit in &units {
                    self.begin_handoff(unit, UnitEnd::HandedOver, events).await;
                }
            }
            Give::Surplus => self.give_surplus(events).await,
            Give::Nothing => {}
        }
        self.take_pending(events).await;
        self.register_missing(&reading, events).await;
        self.units.planned(dealt.dealt);
    }

    /// The assigner's part in a dead member's units dealt to others: releases each dead hold
    /// ([`units::release_dead`], conditional on the token and fencing its listing judged dead),
    /// [`TAKES_IN_FLIGHT`] at a time, the session kept before each batch. One request per unit;
    /// the member each was dealt to then takes it from its take list (one read and one acquire),
    /// so the unit changes owner once.
    async fn free_dead_for_others(&mut self, events: &mut Vec<FleetEvent>) {
        let free = std::mem::take(&mut self.units.free_for_others);
        if free.is_empty() {
            return;
        }
        tracing::info!(worker = %self.config.worker_id, units = free.len(), "fleet: releasing dead members' units for the members they are dealt to");
        for batch in free.chunks(TAKES_IN_FLIGHT) {
            if !self.keep_session(events).await {
                return;
            }
            let (config, store) = (&self.config, &*self.store);
            let releases: Vec<_> = batch
                .iter()
                .map(|(unit, dead)| {
                    Box::pin(async move {
                        if let Some(key) = unit_key(config, unit) {
                            units::release_dead(config, store, &key, unit, dead).await;
                        }
                    })
                })
                .collect();
            join_all(releases).await;
        }
    }

    /// Takes every unit the latest plan dealt this worker: they are all free or held by a dead
    /// session, so the move bound (which throttles handing over live units) does not apply, and a
    /// dead worker's units are owned again in one tick at any unit count. The takes go out
    /// [`TAKES_IN_FLIGHT`] at a time (each a release of the dead hold, if any, then an acquire:
    /// both conditional, so their order across units does not matter), the session kept before
    /// each batch; then each unit acquired is fenced and trusted. When the last is taken and
    /// the worker is still below target, it lists again on the next tick.
    async fn take_pending(&mut self, events: &mut Vec<FleetEvent>) {
        if self.units.pending_takes.is_empty() {
            return;
        }
        let pending = self.units.next_takes(usize::MAX);
        for batch in pending.chunks(TAKES_IN_FLIGHT) {
            if !self.keep_session(events).await {
                self.units.pending_takes.clear();
                return;
            }
            let Some(session) = self.session.as_ref().map(|s| s.lease.fencing_token()) else {
                return;
            };
            let acquired = {
                let (config, store) = (&self.config, &*self.store);
                let takes: Vec<_> = batch
                    .iter()
                    .map(|(unit, dead)| {
                        Box::pin(async move {
                            let key = unit_key(config, unit)?;
                            if let Some(dead) = dead {
                                units::release_dead(config, store, &key, unit, dead).await;
                            }
                            let lease =
                                units::acquire_unit(config, store, session, &key, unit).await?;
                            Some((unit.clone(), lease))
                        })
                    })
                    .collect();
                join_all(takes).await
            };
            for (unit, lease) in acquired.into_iter().flatten() {
                self.fence_and_gain(&unit, lease, events).await;
            }
        }
        self.units.took();
    }

    /// After acquiring `unit`: fences and reads its checkpoint, and only then trusts the unit
    /// and tells the application. A checkpoint that cannot be read gives the unit back: an
    /// unfenced unit is never reported gained.
    async fn fence_and_gain(&mut self, unit: &str, lease: Lease, events: &mut Vec<FleetEvent>) {
        match self
            .load_checkpoint(unit, lease.fencing_token(), events)
            .await
        {
            Some(checkpoint) => self.gain_unit(unit, lease, checkpoint, events),
            None => {
                let _ = self
                    .store
                    .release(lease.key(), lease.token(), lease.fencing_token())
                    .await;
            }
        }
    }

    /// Acquires `unit` under the current session ([`units::acquire_unit`]).
    async fn acquire_unit(&self, key: &LeaseKey, unit: &str) -> Option<Lease> {
        let session = self.session.as_ref()?.lease.fencing_token();
        units::acquire_unit(&self.config, &self.store, session, key, unit).await
    }

    /// Fences and reads the unit's checkpoint: `Some((checkpoint, fence))` once the fence is
    /// raised (checkpoint `None`: no checkpoint stored, or no checkpoint store; the fence every
    /// save of this ownership uses, [`Checkpoints::fence_for`]), `None` if every attempt failed,
    /// the fence was above this ownership's, or the session stopped being trusted.
    async fn load_checkpoint(
        &mut self,
        unit: &str,
        fencing: FencingToken,
        events: &mut Vec<FleetEvent>,
    ) -> Option<(Option<Vec<u8>>, FencingToken)> {
        let Some(store) = self.checkpoints.clone() else {
            return Some((None, fencing));
        };
        if self.takes_frozen() {
            // A loss found earlier in this batch: the unit's owner from before it may still
            // trust the unit.
            return None;
        }
        let fence = match store.fence_for(fencing) {
            Ok(fence) => fence,
            Err(error) => {
                tracing::error!(worker = %self.config.worker_id, unit, %error, "fleet: giving the unit back");
                return None;
            }
        };
        for attempt in 1..=CHECKPOINT_ATTEMPTS {
            if !self.keep_session(events).await {
                return None;
            }
            self.stats.checkpoint_requests += 1;
            match store.load(unit, fence).await {
                Ok(None) => {
                    // Empty: never saved, or vanished with the store's data (a store whose
                    // sessions survived, such as a separate checkpoint store). Once per tick.
                    if self.epoch_checked_at != Some(self.stats.ticks) {
                        self.check_store_epoch().await;
                        if self.takes_frozen() {
                            return None;
                        }
                    }
                    return Some((None, fence));
                }
                Ok(data) => return Some((data, fence)),
                Err(error) if error.not_owned_reason() == Some(NotOwnedReason::Fenced) => {
                    // This worker holds the unit's lease, yet an earlier owner fenced above it:
                    // the unit's fencing counter started again since (a store loss), and no
                    // loss this worker adopted accounts for it. Retrying at this fence cannot
                    // pass; the next take, after the loss is recorded, fences above.
                    self.stats.checkpoint_failures += 1;
                    self.fence_refused(unit).await;
                    return None;
                }
                Err(error) => {
                    tracing::warn!(worker = %self.config.worker_id, unit, attempt, %error, "fleet: checkpoint load failed");
                }
            }
        }
        self.stats.checkpoint_failures += 1;
        tracing::warn!(worker = %self.config.worker_id, unit, "fleet: giving the unit back: its checkpoint could not be fenced");
        None
    }

    /// Whether this worker takes no unit now: it found a store loss less than a session
    /// duration ago.
    fn takes_frozen(&self) -> bool {
        self.takes_frozen_until
            .is_some_and(|until| self.clock().monotonic() < until)
    }

    /// After a checkpoint fence above an ownership this worker holds: records the store loss
    /// that reset the unit's fencing counter ([`Checkpoints::record_loss`]; two requests, at
    /// most once a tick) and, as for any loss it finds, takes no unit for a session duration,
    /// so that the owner that raised the fence, which may still trust the unit, has stopped.
    /// Its takes after that fence above every owner's from before the loss, so each unit is
    /// retaken once, not once per step of its old fencing counter.
    async fn fence_refused(&mut self, unit: &str) {
        let Some(store) = self.checkpoints.clone() else {
            return;
        };
        if self.epoch_checked_at == Some(self.stats.ticks) && self.takes_frozen() {
            return;
        }
        self.stats.checkpoint_requests += 2;
        match store.record_loss().await {
            Ok(()) => {
                self.epoch_checked_at = Some(self.stats.ticks);
                self.stats.store_losses += 1;
                self.takes_frozen_until =
                    Some(self.clock().monotonic() + self.config.session_duration);
                tracing::error!(worker = %self.config.worker_id, unit, "fleet: a unit's checkpoint is fenced above its lease (the store lost its unit records); store loss recorded, taking no unit for a session duration");
            }
            Err(error) => {
                tracing::warn!(worker = %self.config.worker_id, unit, %error, "fleet: recording a store loss failed");
            }
        }
    }

    /// Reads the fleet's store epoch ([`Checkpoints::check_epoch`]; one request, two when it
    /// must be written): when the epoch this worker adopted is gone, the store lost its data:
    /// every unit gained without a checkpoint from then on is reported with
    /// [`Checkpoint::Lost`], and the worker takes no unit for a session duration, so
    /// that every owner from before the loss has stopped trusting (the unit records that would
    /// have told who held what are gone). A failed read is retried at the next occasion.
    async fn check_store_epoch(&mut self) {
        let Some(store) = self.checkpoints.clone() else {
            return;
        };
        self.stats.checkpoint_requests += 1;
        match store.check_epoch().await {
            Ok(EpochCheck::Same) => self.epoch_checked_at = Some(self.stats.ticks),
            Ok(EpochCheck::Lost) => {
                self.epoch_checked_at = Some(self.stats.ticks);
                self.stats.store_losses += 1;
                // The unit records went with the data, so no verdict guards them: a worker
                // paused across the loss may trust its units until its deadline, at most a
                // session after its last renewal, which was before the loss.
                self.takes_frozen_until =
                    Some(self.clock().monotonic() + self.config.session_duration);
                tracing::error!(worker = %self.config.worker_id, "fleet: the checkpoint store lost its data (its store epoch vanished); units gained without a checkpoint are reported lost");
            }
            Err(error) => {
                tracing::warn!(worker = %self.config.worker_id, %error, "fleet: reading the store epoch failed");
            }
        }
    }

    /// Hands units above the target over ([`Units::surplus`]), at most `max_moves` per tick.
    async fn give_surplus(&mut self, events: &mut Vec<FleetEvent>) {
        for unit in self.units.surplus(self.config.max_moves) {
            self.begin_handoff(&unit, UnitEnd::HandedOver, events).await;
        }
    }

    /// Renews unit leases past half their duration.
    async fn keep_units(&mut self, events: &mut Vec<FleetEvent>) {
        let units: Vec<String> = self.units.owned.keys().cloned().collect();
        for unit in units {
            let Some(lease) = self.units.owned.get(&unit).cloned() else {
                continue;
            };
            let left = lease
                .deadline()
                .saturating_duration_since(self.clock().monotonic());
            if left.is_zero() {
                let expired = LossReason::NotOwned(NotOwnedReason::Expired);
                self.lose_unit(&unit, UnitEnd::Lost(expired), events);
                continue;
            }
            if left > self.config.unit_duration / 2 {
                continue;
            }
            if !self.keep_session(events).await {
                return;
            }
            match self.store.renew(&lease, self.config.unit_duration).await {
                Ok(renewed) => self.keep_unit(unit, renewed),
                Err(error) if error.is_not_owned() => {
                    self.lose_unit(&unit, taken_over(), events);
                }
                Err(error) => {
                    tracing::warn!(worker = %self.config.worker_id, unit, %error, "fleet: unit renewal failed; retrying next tick");
                }
            }
        }
    }

    /// Makes the records of configured units that no listing shows ([`Units::missing`]), when a
    /// peer is configured with a different unit list: then every worker plans over the same
    /// units (the union), and none is left to a worker that does not know it. At most
    /// `max_moves` per tick, two requests each (acquire, release), once per unit.
    async fn register_missing(&mut self, reading: &Reading, events: &mut Vec<FleetEvent>) {
        if !self.mismatch {
            return;
        }
        let missing = self.units.missing(&self.config, reading);
        if missing.is_empty() {
            return;
        }
        for unit in missing {
            if !self.keep_session(events).await {
                return;
            }
            let Some(key) = unit_key(&self.config, &unit) else {
                continue;
            };
            if let Some(lease) = self.acquire_unit(&key, &unit).await {
                let _ = self
                    .store
                    .release(lease.key(), lease.token(), lease.fencing_token())
                    .await;
            }
        }
        // Every worker lists the units again on its next tick.
        let _ =
            super::shared::touch(&*self.store, &*self.config.tokens, &self.config.epoch_key).await;
    }

    /// Publishes this worker's load when it balances by load: when none is published under the
    /// current session, or it moved by more than 5 % and four ticks have passed since the last.
    /// Two requests (release the old record, acquire with the new figure in its token).
    async fn publish_load(&mut self, force: bool) {
        let (Some(key), Some(session)) = (self.config.load_key.clone(), self.session.as_ref())
        else {
            return;
        };
        let session = session.lease.fencing_token().get();
        let load: f64 = self.units.own_loads(&self.shared).values().sum();
        let published = self
            .view
            .load_of(&self.config.worker_id)
            .filter(|l| l.session == session)
            .cloned();
        let moved = published.as_ref().is_none_or(|p| {
            (load - p.load).abs() > p.load.max(1.0) * 0.05 || p.units != self.units.owned.len()
        });
        let quiet = self.stats.ticks < self.units.load_published_at + 4;
        if published.is_some() && !(force || (moved && !quiet)) {
            return;
        }
        if let Some(old) = self.view.load_of(&self.config.worker_id).cloned() {
            let _ = self
                .store
                .release(
                    &key,
                    &old.token,
                    lease_core::backend::fencing_token(old.fencing),
                )
                .await;
        }
        let random = self.config.tokens.next_token();
        let Ok(token) = LeaseToken::new(PublishedLoad::token(
            random.as_str(),
            session,
            load,
            self.units.owned.len(),
        )) else {
            return;
        };
        let options = AcquireOptions::default().with_token(token);
        match self
            .store
            .try_acquire(&key, self.config.unit_duration, &options)
            .await
        {
            Ok(_) => self.units.load_published_at = self.stats.ticks,
            Err(error) => {
                tracing::debug!(worker = %self.config.worker_id, %error, "fleet: publishing the load failed; retrying next tick")
            }
        }
    }

    /// After a tick's moves, when balancing by load: publish the new figure at once, and when a
    /// unit was given away move the unit-set epoch, so the least loaded member lists the units
    /// and takes it on its next tick (a load-mode give is invisible to takers otherwise).
    async fn after_moves(&mut self) {
        if self.config.load_key.is_none() || !std::mem::take(&mut self.units.load_dirty) {
            return;
        }
        self.publish_load(true).await;
        if std::mem::take(&mut self.units.gave_by_load) {
            let _ =
                super::shared::touch(&*self.store, &*self.config.tokens, &self.config.epoch_key)
                    .await;
        }
    }

    /// Whether this tick lists the units and plans.
    fn should_plan(&self) -> bool {
        let changed = self.planned_members.as_ref() != Some(&self.members)
            || self.planned_epoch != self.view.epoch();
        let due = self.ticks_since_plan + 1;
        let resync = self.sweeper_resync_due();
        let verdict_due = self
            .units
            .next_verdict
            .is_some_and(|at| self.clock().monotonic() >= at);
        let below = self.units.below_target() && (verdict_due || due >= self.config.resync_every);
        // The assigner lists again when a verdict it waits for falls due even at its target:
        // it takes what it then judges free (a dead or foreign hold) and hands it on, where a
        // follower would judge the hold from its own first read, a session duration later.
        let judge = verdict_due && self.assigner.is_assigner();
        let rebalance = self.units.by_load && due >= self.config.resync_every;
        changed
            || judge
            || self.units.relist
            || resync
            || below
            || rebalance
            || self.mismatch && due >= self.config.resync_every
    }

    /// Whether this tick is the sweeper's resync: it lists the units and the sessions whatever
    /// the assigner says.
    fn sweeper_resync_due(&self) -> bool {
        self.is_sweeper() && self.ticks_since_plan + 1 >= self.config.resync_every
    }

    /// The member with the lowest id resyncs and sweeps.
    fn is_sweeper(&self) -> bool {
        self.members
            .first()
            .is_some_and(|(m, _)| *m == self.config.worker_id)
    }

    pub(crate) fn publish(&self) {
        let members = self.members.iter().map(|(m, _)| m.clone()).collect();
        let target = self.units.target;
        super::meter::owned(&self.config.worker_id, self.units.owned.len(), target);
        let stats = self.stats();
        self.shared.update(|state| {
            state.members = members;
            state.target = target;
            state.stats = stats;
        });
    }

    /// Drops the units the application retired: their records are gone, so there is nothing to
    /// release.
    fn drop_retired(&mut self, events: &mut Vec<FleetEvent>) {
        let retired = std::mem::take(&mut self.shared.lock().retired);
        for unit in retired {
            self.lose_unit(&unit, UnitEnd::Retired, events);
            self.units.retire(unit);
        }
    }

    /// Asks the application to finish with `unit` (its task sees [`UnitTask::lost`] complete),
    /// or releases it at once when no task holds it.
    pub(crate) async fn begin_handoff(
        &mut self,
        unit: &str,
        reason: UnitEnd,
        events: &mut Vec<FleetEvent>,
    ) {
        let until = self.clock().monotonic() + self.config.handoff_timeout;
        let waits = self.shared.update(|state| match state.units.get_mut(unit) {
            Some(owned) if owned.task_alive => {
                owned.handoff = Some((reason.clone(), until));
                true
            }
            _ => false,
        });
        if waits {
            self.units.handing_over.insert(unit.to_owned());
        } else {
            self.release_unit(unit, reason, events).await;
        }
    }

    /// Releases the handed-over units whose task finished or whose timeout passed.
    pub(crate) async fn finish_handoffs(&mut self, events: &mut Vec<FleetEvent>) {
        let now = self.clock().monotonic();
        let done: Vec<(String, UnitEnd)> = {
            let state = self.shared.lock();
            self.units
                .handing_over
                .iter()
                .filter_map(|unit| {
                    let owned = state.units.get(unit)?;
                    let (reason, until) = owned.handoff.as_ref()?;
                    (!owned.task_alive || now >= *until).then(|| (unit.clone(), reason.clone()))
                })
                .collect()
        };
        for (unit, reason) in done {
            self.release_unit(&unit, reason, events).await;
        }
    }

    async fn release_unit(&mut self, unit: &str, reason: UnitEnd, events: &mut Vec<FleetEvent>) {
        let handed_over = reason == UnitEnd::HandedOver;
        let Some(lease) = self.lose_unit(unit, reason, events) else {
            return;
        };
        self.units.released(handed_over);
        if let Err(error) = self
            .store
            .release(lease.key(), lease.token(), lease.fencing_token())
            .await
        {
            tracing::warn!(worker = %self.config.worker_id, unit, %error, "fleet: release of a handed-over unit failed");
        }
    }

    /// Hands every unit over and ends the session, so the others take over on their next tick
    /// instead of waiting for an expiry. Each unit's task (if the application takes units as
    /// tasks) is asked to finish and given up to the handoff timeout to save a final checkpoint;
    /// each unit is reported lost ([`UnitEnd::Shutdown`]) when it is released.
    ///
    /// # Errors
    /// Only failures to release the session are returned; unit releases are best effort.
    pub async fn shutdown(&mut self) -> Result<(), LeaseError> {
        let mut events = Vec::new();
        let units: Vec<String> = self.units.owned.keys().cloned().collect();
        for unit in units {
            if !self.units.handing_over.contains(&unit) {
                self.begin_handoff(&unit, UnitEnd::Shutdown, &mut events)
                    .await;
            }
        }
        while !self.units.handing_over.is_empty() {
            if !self.keep_session(&mut events).await {
                break;
            }
            self.finish_handoffs(&mut events).await;
            self.wait_for_handoffs().await;
        }
        self.lose_all(UnitEnd::Shutdown, &mut events);
        let outcome = match self.session.take() {
            Some(session) => {
                self.set_session(None);
                tracing::info!(worker = %self.config.worker_id, "fleet: session ended");
                let lease = &session.lease;
                self.store
                    .release(lease.key(), lease.token(), lease.fencing_token())
                    .await
            }
            None => Ok(()),
        };
        self.assigner.resign(&self.store).await;
        self.units.target = None;
        self.planned_members = None;
        self.members.clear();
        self.publish();
        self.shared.update(|state| state.finished = true);
        match outcome {
            Ok(()) => Ok(()),
            Err(error) if error.is_not_owned() => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Sleeps until a task finishes, a handoff times out or a session renewal is due.
    async fn wait_for_handoffs(&self) {
        let mut wake = self.session.as_ref().map(|s| s.renew_due);
        {
            let state = self.shared.lock();
            for unit in &self.units.handing_over {
                if let Some(&(_, until)) = state.units.get(unit).and_then(|u| u.handoff.as_ref()) {
                    wake = Some(wake.map_or(until, |w| w.min(until)));
                }
            }
        }
        let wake = wake.unwrap_or_else(|| self.clock().monotonic() + self.config.interval);
        let pokes = self.shared.lock().pokes;
        Poked {
            shared: &self.shared,
            pokes,
            stop_too: false,
            sleep: sleep_until(self.clock(), wake),
        }
        .await;
    }

    /// Ticks every interval on the store's clock until [`WorkerHandle::stop`], then shuts down
    /// cleanly. Between ticks it finishes handoffs as soon as their tasks do. Tick errors are
    /// logged and retried on the next tick. A `Send` future that needs no particular runtime:
    /// spawn it on tokio (DynamoDB), or run it on a thread of its own with
    /// [`spawn_thread`](Self::spawn_thread) (memory, files).
    ///
    /// # Errors
    /// A failure to release the session at shutdown.
    pub async fn run(mut self) -> Result<WorkerStats, LeaseError> {
        'ticks: loop {
            let started = self.clock().monotonic();
            if self.shared.lock().stop {
                break;
            }
            if let Err(error) = self.tick().await {
                tracing::warn!(worker = %self.config.worker_id, %error, "fleet: tick failed");
            }
            let next = started + self.config.interval;
            loop {
                let pokes = self.shared.lock().pokes;
                let wake = self.next_handoff_deadline().map_or(next, |h| h.min(next));
                Poked {
                    shared: &self.shared,
                    pokes,
                    stop_too: true,
                    sleep: sleep_until(self.clock(), wake),
                }
                .await;
                if self.shared.lock().stop {
                    break 'ticks;
                }
                if self.clock().monotonic() >= next {
                    break;
                }
                let mut events = Vec::new();
                self.drop_retired(&mut events);
                if self.keep_session(&mut events).await {
                    self.finish_handoffs(&mut events).await;
                }
                self.publish();
            }
        }
        self.shutdown().await?;
        Ok(self.stats())
    }

    fn next_handoff_deadline(&self) -> Option<Instant> {
        let state = self.shared.lock();
        self.units
            .handing_over
            .iter()
            .filter_map(|u| {
                state
                    .units
                    .get(u)
                    .and_then(|u| u.handoff.as_ref())
                    .map(|(_, t)| *t)
            })
            .min()
    }

    /// Runs [`Worker::run`] on a new thread of its own, polled without an async runtime: for
    /// backends that need none (memory, files). Returns the worker's handle and the thread, which
    /// ends after [`WorkerHandle::stop`] with what `run` returns.
    ///
    /// ```
    /// use lessor_partition::Worker;
    /// use lease_core::MemoryBackend;
    /// use std::sync::Arc;
    ///
    /// let worker = Worker::builder("demo", "a")
    ///     .with_store(Arc::new(MemoryBackend::new()))
    ///     .with_units(["u1"])
    ///     .build()?;
    /// let (handle, thread) = worker.spawn_thread()?;
    /// handle.stop();
    /// let stats = thread.join().expect("the worker thread")?;
    /// assert!(stats.ticks <= 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The operating system's error when the thread could not be started (as
    /// [`std::thread::Builder::spawn`]).
    pub fn spawn_thread(
        self,
    ) -> std::io::Result<(
        WorkerHandle,
        std::thread::JoinHandle<Result<WorkerStats, LeaseError>>,
    )> {
        let handle = self.handle();
        let name = format!("fleet-{}", self.config.worker_id);
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || pollster::block_on(self.run()))?;
        Ok((handle, thread))
    }
}

/// The end of an ownership the store says another worker took.
fn taken_over() -> UnitEnd {
    UnitEnd::Lost(LossReason::NotOwned(NotOwnedReason::TakenOver))
}

/// A sleep on `clock` until its monotonic time reaches `until`.
fn sleep_until(clock: &dyn Clock, until: Instant) -> BoxFuture<'static, ()> {
    clock.sleep(until.saturating_duration_since(clock.monotonic()))
}

/// The take-list generation `heard` publishes (0 without one).
fn heard_generation(heard: Option<&Heard>) -> u64 {
    match heard {
        Some(Heard::Digest(published)) => published.generation,
        _ => 0,
    }
}

/// How a follower's members compare with its assigner's ([`Worker::sync_with_assigner`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Synced {
    /// Its members are the assigner's: plan without listing the sessions.
    Agreed,
    /// Its own reads of the named sessions do not yet agree with the assigner: keep what it
    /// holds, or follow the assigner's current take list, without listing the sessions.
    Lagging,
    /// No assigner to follow, a read failed, or it lagged too long: list the sessions.
    List,
}

/// What a plan from a take list came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hinted {
    /// Planned and moved: no listing this tick.
    Planned,
    /// The list is of another membership: wait a tick for the assigner's plan.
    Wait,
    /// List the units and plan as without an assigner.
    List,
}

/// Completes when the sleep ends, the application pokes the worker (a task finished, a stop),
/// or (with `stop_too`) a stop is requested.
struct Poked<'a> {
    shared: &'a Shared,
    pokes: u64,
    stop_too: bool,
    sleep: BoxFuture<'static, ()>,
}

impl Future for Poked<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        {
            let mut state = self.shared.lock();
            if (self.stop_too && state.stop) || state.pokes != self.pokes {
                return Poll::Ready(());
            }
            state.worker_waker = Some(cx.waker().clone());
        }
        self.sleep.as_mut().poll(cx)
    }
}

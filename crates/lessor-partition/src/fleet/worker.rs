//! One fleet worker: a session lease, a view of the members, and the units it owns.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencingToken, Lease, LeaseKey, LeaseRecord, LeaseToken,
    RandomTokens, TokenSource, sleep_until,
};

use super::builder::{Config, WorkerBuilder};
use super::checkpoint::CheckpointStore;
use super::plan::{Holding, plan};
use super::shared::{Shared, SharedUnit, UnitTask, WorkerHandle};
use super::types::{Assignment, FleetEvent, LossCause, TickReport, WorkerStats};
use super::view::{Absence, Foreign, Observed, UnitHolder};
use crate::{Error, LeaseStore};

/// A fleet worker. Drive it with [`Worker::tick`] every interval, or let [`Worker::run`] do it.
///
/// Per tick, in steady state, it sends **two requests**: renew its session, list the sessions
/// partition (`W` records). It lists the units partition (`L` records, one request) only when
/// membership changed, while it is below its share, after a listing showed a free or dead-owned
/// unit, and, for the member with the lowest id, every `resync_every` ticks. Unit leases are renewed once per half unit-lease duration.
/// Moves cost one release by the giver and one acquire by the taker (plus a release of the dead
/// owner's token when the owner crashed).
///
/// ```
/// use lessor_partition::Worker;
/// use lease_core::{ManualClock, MemoryBackend};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let clock = Arc::new(ManualClock::new());
/// let store = MemoryBackend::new().with_clock(clock.clone());
/// let make = |id: &str| Worker::builder("demo", id).store(store.clone())
///     .units((0..6).map(|i| format!("shard-{i}"))).build();
/// let (mut a, mut b) = (make("a")?, make("b")?);
/// for _ in 0..4 {
///     lease_core::block_on(a.tick())?;
///     lease_core::block_on(b.tick())?;
///     clock.advance(Duration::from_millis(2500));
/// }
/// assert_eq!(a.assignment().units.len(), 3);
/// assert_eq!(b.assignment().units.len(), 3);
/// lease_core::block_on(a.shutdown())?;
/// lease_core::block_on(b.tick())?;
/// lease_core::block_on(b.tick())?;
/// assert_eq!(b.assignment().units.len(), 6);
/// # Ok::<(), lessor_partition::Error>(())
/// ```
pub struct Worker {
    config: Config,
    store: Arc<dyn LeaseStore>,
    checkpoints: Option<Arc<dyn CheckpointStore>>,
    session: Option<Lease>,
    view: BTreeMap<String, Observed>,
    /// Unit owners' sessions missing from the sessions listing, by `(worker id, fencing)`.
    absent: BTreeMap<(String, u64), Absence>,
    /// Units held under tokens that are not fleet tokens, by unit.
    foreign: BTreeMap<String, Foreign>,
    /// The last units listing showed a unit free or a dead owner's: list again next tick.
    relist: bool,
    owned: BTreeMap<String, Lease>,
    target: Option<usize>,
    planned_members: Option<Vec<(String, u64)>>,
    ticks_since_plan: u32,
    stats: WorkerStats,
    shared: Arc<Shared>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("worker_id", &self.config.worker_id)
            .field("session", &self.session.as_ref().map(Lease::fencing_token))
            .field("owned", &self.owned.len())
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// Starts configuring worker `worker_id` of fleet `fleet`.
    pub fn builder(fleet: impl Into<String>, worker_id: impl Into<String>) -> WorkerBuilder {
        WorkerBuilder::new(fleet.into(), worker_id.into())
    }

    /// The worker id.
    pub fn id(&self) -> &str {
        &self.config.worker_id
    }

    /// The tick interval.
    pub fn interval(&self) -> Duration {
        self.config.interval
    }

    pub(crate) fn from_config(
        config: Config,
        store: Arc<dyn LeaseStore>,
        checkpoints: Option<Arc<dyn CheckpointStore>>,
    ) -> Self {
        let shared = Arc::new(Shared::new(
            config.worker_id.clone(),
            store.clone(),
            checkpoints.clone(),
        ));
        Self {
            config,
            store,
            checkpoints,
            session: None,
            view: BTreeMap::new(),
            absent: BTreeMap::new(),
            foreign: BTreeMap::new(),
            relist: false,
            owned: BTreeMap::new(),
            target: None,
            planned_members: None,
            ticks_since_plan: 0,
            stats: WorkerStats::default(),
            shared,
        }
    }

    /// A handle to observe this worker and act for the application while it runs.
    pub fn handle(&self) -> WorkerHandle {
        WorkerHandle {
            shared: self.shared.clone(),
        }
    }

    /// Request counts so far.
    pub fn stats(&self) -> WorkerStats {
        self.stats
    }

    fn clock(&self) -> &dyn Clock {
        self.store.clock()
    }

    fn session_trusted(&self) -> bool {
        let now = self.clock().monotonic();
        self.shared
            .lock()
            .session
            .is_some_and(|(_, deadline)| now < deadline)
    }

    /// The fencing token of `unit` if this worker owns it and may act on it *now*: its session
    /// and the unit's lease are both within their holder-side deadlines. Check it (or use the
    /// fencing token at the resource) before every act; [`WorkerHandle::owns`] answers the same
    /// while the worker runs.
    pub fn owns(&self, unit: &str) -> Option<FencingToken> {
        self.shared.owns(unit)
    }

    /// Until when, on the store's monotonic clock, this worker may trust what it owns, unless a
    /// renewal of its session lands first.
    pub fn deadline(&self) -> Option<Instant> {
        self.handle().deadline()
    }

    /// The units it trusts now, with their fencing tokens.
    pub fn owned_units(&self) -> BTreeMap<String, FencingToken> {
        self.handle().owned_units()
    }

    /// Its current view.
    pub fn assignment(&self) -> Assignment {
        self.handle().snapshot()
    }

    /// Stores `data` as the checkpoint of `unit`, fenced by this worker's fencing token for it
    /// (see [`WorkerHandle::save_checkpoint`]).
    ///
    /// # Errors
    /// [`Error::NotOwner`] unless this worker trusts its ownership now or if a newer owner fenced
    /// it; [`Error::InvalidInput`] without a checkpoint store.
    pub async fn save_checkpoint(&mut self, unit: &str, data: &[u8]) -> Result<(), Error> {
        self.stats.checkpoint_requests += 1;
        self.handle().save_checkpoint(unit, data).await
    }

    fn emit(&mut self, event: FleetEvent, events: &mut Vec<FleetEvent>) {
        match &event {
            FleetEvent::Gained { unit, fencing, .. } => {
                self.stats.gains += 1;
                tracing::info!(worker = %self.config.worker_id, unit, %fencing, "fleet: gained unit");
            }
            FleetEvent::Lost {
                unit,
                fencing,
                cause,
            } => {
                self.stats.losses += 1;
                tracing::info!(worker = %self.config.worker_id, unit, %fencing, ?cause, "fleet: lost unit");
            }
        }
        self.shared.push_event(event.clone());
        events.push(event);
    }

    /// Records a new session lease (or none), and the deadline until which it is trusted.
    fn set_session(&mut self, session: Option<Lease>) {
        let shared = session.as_ref().map(|s| (s.fencing_token(), s.deadline()));
        self.session = session;
        self.shared.update(|state| state.session = shared);
    }

    /// Records a renewed unit lease.
    fn keep_unit(&mut self, unit: String, lease: Lease) {
        let deadline = lease.deadline();
        let fencing = lease.fencing_token();
        self.shared.update(|state| {
            if let Some(owned) = state.units.get_mut(&unit)
                && owned.fencing == fencing
            {
                owned.deadline = deadline;
            }
        });
        self.owned.insert(unit, lease);
    }

    /// Makes a gained unit trusted, hands it to the application as a task if it takes tasks, and
    /// tells it.
    fn gain_unit(
        &mut self,
        unit: &str,
        lease: Lease,
        checkpoint: Option<Vec<u8>>,
        events: &mut Vec<FleetEvent>,
    ) {
        let fencing = lease.fencing_token();
        let shared = self.shared.clone();
        self.shared.update(|state| {
            let task_alive = state.tasks_wanted;
            state.units.insert(
                unit.to_owned(),
                SharedUnit {
                    fencing,
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
        self.owned.insert(unit.to_owned(), lease);
        self.emit(
            FleetEvent::Gained {
                unit: unit.to_owned(),
                fencing,
                checkpoint,
            },
            events,
        );
    }

    fn lose_unit(
        &mut self,
        unit: &str,
        cause: LossCause,
        events: &mut Vec<FleetEvent>,
    ) -> Option<Lease> {
        let lease = self.owned.remove(unit)?;
        self.shared.update(|state| {
            if let Some(owned) = state.units.get_mut(unit) {
                owned.ended = Some(cause);
                if !owned.task_alive {
                    state.units.remove(unit);
                }
            }
        });
        self.emit(
            FleetEvent::Lost {
                unit: unit.to_owned(),
                fencing: lease.fencing_token(),
                cause,
            },
            events,
        );
        Some(lease)
    }

    fn lose_all(&mut self, cause: LossCause, events: &mut Vec<FleetEvent>) -> Vec<Lease> {
        let units: Vec<String> = self.owned.keys().cloned().collect();
        units
            .iter()
            .filter_map(|unit| self.lose_unit(unit, cause, events))
            .collect()
    }

    /// Renews (or first acquires) the session. Returns whether a trusted session is held after.
    async fn keep_session(&mut self, events: &mut Vec<FleetEvent>) -> Result<bool, Error> {
        if let Some(session) = self.session.clone() {
            if !session.is_trusted(self.clock()) {
                tracing::warn!(worker = %self.config.worker_id, "fleet: session deadline passed before a renewal; dropping every unit");
                self.lose_all(LossCause::SessionLost, events);
                self.set_session(None);
                self.stats.requests += 1;
                // Best effort: if the store still has it, others may take over at once.
                let _ = self
                    .store
                    .release(session.key(), session.token(), session.fencing_token())
                    .await;
            } else {
                self.stats.requests += 1;
                match self
                    .store
                    .renew(&session, self.config.session_duration)
                    .await
                {
                    Ok(renewed) => self.set_session(Some(renewed)),
                    Err(error) if error.is_not_owned() => {
                        tracing::warn!(worker = %self.config.worker_id, %error, "fleet: session lost; dropping every unit");
                        self.lose_all(LossCause::SessionLost, events);
                        self.set_session(None);
                    }
                    Err(error) => {
                        tracing::warn!(worker = %self.config.worker_id, %error, "fleet: session renewal failed; trusting it until its deadline");
                    }
                }
            }
        }
        if self.session.is_none() {
            let token = RandomTokens.next_token();
            let options = AcquireOptions::default()
                .with_owner(self.config.worker_id.clone())
                .with_token(token);
            self.stats.requests += 1;
            match self
                .store
                .try_acquire(
                    &self.config.session_key,
                    self.config.session_duration,
                    &options,
                )
                .await
            {
                Ok(lease) => {
                    tracing::info!(worker = %self.config.worker_id, fencing = %lease.fencing_token(), "fleet: session started");
                    self.set_session(Some(lease));
                    self.planned_members = None;
                }
                Err(error) if error.is_held() => {
                    tracing::debug!(worker = %self.config.worker_id, "fleet: an earlier session of this worker id is still live; waiting");
                    return Ok(false);
                }
                Err(error) => return Err(error.into()),
            }
        }
        Ok(self.session_trusted())
    }

    /// Takes in a sessions listing sent at `listed_at`.
    fn observe(&mut self, records: &[LeaseRecord], listed_at: Instant) {
        let now = self.clock().monotonic();
        let mut seen = BTreeMap::new();
        for record in records {
            let Some(worker) = record.key().sort() else {
                continue;
            };
            let fencing = record.fencing().get();
            let held = record.holder().is_some();
            let expires_at = record.holder().and_then(|h| h.expires_at());
            let since = match self.view.get(worker) {
                Some(old)
                    if old.fencing == fencing
                        && old.held == held
                        && old.expires_at == expires_at =>
                {
                    old.since
                }
                _ => now,
            };
            seen.insert(
                worker.to_owned(),
                Observed {
                    fencing,
                    held,
                    expires_at,
                    since,
                },
            );
        }
        self.view = seen;
        // Owners missing from this listing: the absence counts only from a listing sent after
        // the units listing that named them, which their session record preceded.
        let view = &self.view;
        self.absent.retain(|(worker, _), absence| {
            if view.contains_key(worker) {
                return false;
            }
            if absence.since.is_none() && listed_at >= absence.named_at {
                absence.since = Some(now);
            }
            true
        });
    }

    /// Whether session `fencing` of `worker`, named by a unit record read at `read_at`, has
    /// certainly ended.
    fn session_ended(&self, worker: &str, fencing: u64) -> bool {
        let Some(seen) = self.view.get(worker) else {
            // Not in the view: either a session newer than the view, or a record gone from the
            // store (deleted by an operator or a TTL) or dropped by listings. Ended once sessions
            // listings sent after a unit record naming it was read have missed it for a session
            // duration (tracked in `absent` by `plan_and_move` and `observe`).
            let now = self.clock().monotonic();
            return self
                .absent
                .get(&(worker.to_owned(), fencing))
                .and_then(|absence| absence.since)
                .is_some_and(|since| {
                    now.saturating_duration_since(since) >= self.config.session_duration
                });
        };
        if seen.fencing != fencing {
            // Fencing only grows: a greater one proves the session ended (released, or expired by
            // the store's judgement and acquired again); a smaller one means the view is stale.
            return seen.fencing > fencing;
        }
        !seen.held || self.observed_expired(seen)
    }

    fn observed_expired(&self, seen: &Observed) -> bool {
        let clock = self.clock();
        if clock.monotonic().saturating_duration_since(seen.since) >= self.config.session_duration {
            return true;
        }
        match (self.config.skew, seen.expires_at) {
            (Some(skew), Some(expires)) => expires + skew <= clock.now(),
            _ => false,
        }
    }

    /// The members this worker believes live, sorted by id, with their session fencing.
    fn live_members(&self) -> Vec<(String, u64)> {
        let me = &self.config.worker_id;
        let mut members: Vec<(String, u64)> = self
            .view
            .iter()
            .filter(|(worker, seen)| *worker != me && seen.held && !self.observed_expired(seen))
            .map(|(worker, seen)| (worker.clone(), seen.fencing))
            .collect();
        if let Some(session) = self.session.as_ref().filter(|_| self.session_trusted()) {
            members.push((me.clone(), session.fencing_token().get()));
            members.sort();
        }
        members
    }

    async fn keep_units(&mut self, events: &mut Vec<FleetEvent>) {
        let units: Vec<String> = self.owned.keys().cloned().collect();
        for unit in units {
            let Some(lease) = self.owned.get(&unit).cloned() else {
                continue;
            };
            if !lease.is_trusted(self.clock()) {
                self.lose_unit(&unit, LossCause::Expired, events);
                continue;
            }
            if lease.remaining(self.clock()) > self.config.unit_duration / 2 {
                continue;
            }
            self.stats.requests += 1;
            match self.store.renew(&lease, self.config.unit_duration).await {
                Ok(renewed) => self.keep_unit(unit, renewed),
                Err(error) if error.is_not_owned() => {
                    self.lose_unit(&unit, LossCause::TakenOver, events);
                }
                Err(error) => {
                    tracing::warn!(worker = %self.config.worker_id, unit, %error, "fleet: unit renewal failed; retrying next tick");
                }
            }
        }
    }

    fn parse_holder(record: &LeaseRecord) -> Option<UnitHolder> {
        let holder = record.holder()?;
        let token = holder.token().cloned();
        // A fleet token is `<random>.<session fencing>.<worker id>`: the random part is a simple
        // UUID and worker ids contain no '.', so every token a worker writes parses.
        let owner = token.as_ref().and_then(|token| {
            let mut parts = token.as_str().splitn(3, '.');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(_), Some(fencing), Some(worker)) if !worker.is_empty() => fencing
                    .parse::<u64>()
                    .ok()
                    .map(|fencing| (worker.to_owned(), fencing)),
                _ => None,
            }
        });
        Some(UnitHolder {
            token,
            owner,
            fencing: record.fencing().get(),
            expires_at: holder.expires_at(),
        })
    }

    async fn list_units(&mut self) -> Result<BTreeMap<String, Option<UnitHolder>>, Error> {
        self.stats.requests += 1;
        self.stats.lists += 1;
        self.stats.unit_lists += 1;
        let records = self.store.list_partition(&self.config.units_key).await?;
        self.stats.records_read += records.len() as u64;
        Ok(records
            .iter()
            .filter_map(|r| Some((r.key().sort()?.to_owned(), Self::parse_holder(r))))
            .collect())
    }

    /// One round of the protocol. Call it every [`interval`](Self::interval).
    ///
    /// # Errors
    /// A store failure ([`Error::Lease`]) of a listing or of acquiring the session; the worker
    /// stays consistent and the next tick retries.
    pub async fn tick(&mut self) -> Result<TickReport, Error> {
        let mut report = TickReport::default();
        self.stats.ticks += 1;
        let outcome = self.tick_inner(&mut report).await;
        report.has_session = self.session_trusted();
        self.publish();
        outcome.map(|()| report)
    }

    async fn tick_inner(&mut self, report: &mut TickReport) -> Result<(), Error> {
        let events = &mut report.events;
        let fresh = self.session.is_none();
        if !self.keep_session(events).await? {
            return Ok(());
        }
        self.stats.requests += 1;
        self.stats.lists += 1;
        let listed_at = self.clock().monotonic();
        let sessions = self.store.list_partition(&self.config.sessions).await?;
        self.stats.records_read += sessions.len() as u64;
        self.observe(&sessions, listed_at);
        self.keep_units(events).await;
        if fresh {
            // Let workers that start together see each other before anyone deals units:
            // without this the first to start takes everything and hands most of it back.
            return Ok(());
        }

        let members = self.live_members();
        let changed = self.planned_members.as_ref() != Some(&members);
        let under = self.target.is_none_or(|t| self.owned.len() < t);
        let sweeper = members
            .first()
            .is_some_and(|(m, _)| *m == self.config.worker_id);
        let resync = sweeper && self.ticks_since_plan + 1 >= self.config.resync_every;
        if changed || under || resync || self.relist {
            report.planned = true;
            self.ticks_since_plan = 0;
            let records = self.list_units().await?;
            let read_at = self.clock().monotonic();
            self.plan_and_move(&members, &records, read_at, events)
                .await;
            self.planned_members = Some(members);
        } else {
            self.ticks_since_plan += 1;
            self.give_surplus(events).await;
        }
        Ok(())
    }

    async fn plan_and_move(
        &mut self,
        members: &[(String, u64)],
        records: &BTreeMap<String, Option<UnitHolder>>,
        read_at: Instant,
        events: &mut Vec<FleetEvent>,
    ) {
        let me = self.config.worker_id.clone();
        let live: BTreeMap<&str, u64> = members.iter().map(|(m, f)| (m.as_str(), *f)).collect();
        let now = self.clock().monotonic();
        let session_duration = self.config.session_duration;
        let mut holdings = BTreeMap::new();
        let mut dead: BTreeMap<String, (LeaseToken, FencingToken)> = BTreeMap::new();
        let mut stale = Vec::new();
        let mut named = std::collections::BTreeSet::new();
        let mut foreign = BTreeMap::new();
        for unit in &self.config.units {
            let holder = records.get(unit).and_then(Option::as_ref);
            let mine = self.owned.get(unit).map(Lease::token);
            let holding = match holder {
                None => Holding::Free,
                // A holder the store does not name: it cannot be released conditionally.
                Some(UnitHolder { token: None, .. }) => Holding::Pinned,
                Some(
                    h @ UnitHolder {
                        token: Some(token), ..
                    },
                ) => match &h.owner {
                    // Ours and tracked: ours.
                    Some((worker, _)) if *worker == me && mine == Some(token) => {
                        Holding::Member(me.clone())
                    }
                    // Ours by label but untracked (an earlier session, a lost reply): dead, since
                    // this worker does not trust it.
                    Some((worker, _)) if *worker == me => {
                        dead.insert(unit.clone(), (token.clone(), FencingToken::new(h.fencing)));
                        Holding::Free
                    }
                    Some((worker, fencing)) => {
                        if live.get(worker.as_str()) == Some(fencing) {
                            Holding::Member(worker.clone())
                        } else if self.session_ended(worker, *fencing) {
                            dead.insert(
                                unit.clone(),
                                (token.clone(), FencingToken::new(h.fencing)),
                            );
                            Holding::Free
                        } else {
                            named.insert((worker.clone(), *fencing));
                            Holding::Pinned
                        }
                    }
                    // Not a fleet token: no worker trusts this record. Taken once it has stayed
                    // unchanged for a session duration (see the crate docs).
                    None => {
                        let seen = match self.foreign.remove(unit) {
                            Some(old)
                                if old.token == *token
                                    && old.fencing == h.fencing
                                    && old.expires_at == h.expires_at =>
                            {
                                old
                            }
                            _ => Foreign {
                                token: token.clone(),
                                fencing: h.fencing,
                                expires_at: h.expires_at,
                                since: read_at,
                            },
                        };
                        let unchanged_for = now.saturating_duration_since(seen.since);
                        let holding = if unchanged_for >= session_duration {
                            dead.insert(
                                unit.clone(),
                                (token.clone(), FencingToken::new(h.fencing)),
                            );
                            Holding::Free
                        } else {
                            Holding::Pinned
                        };
                        foreign.insert(unit.clone(), seen);
                        holding
                    }
                },
            };
            if mine.is_some() && !matches!(&holding, Holding::Member(m) if *m == me) {
                // The store no longer names this acquisition.
                stale.push(unit.clone());
            }
            holdings.insert(unit.clone(), holding);
        }
        // Forget what this listing no longer shows.
        self.foreign = foreign;
        self.absent.retain(|owner, _| named.contains(owner));
        for (worker, fencing) in named {
            if !self.view.contains_key(&worker) {
                self.absent.entry((worker, fencing)).or_insert(Absence {
                    named_at: read_at,
                    since: None,
                });
            }
        }
        self.relist = holdings.values().any(|h| *h == Holding::Free);
        for unit in stale {
            self.lose_unit(&unit, LossCause::TakenOver, events);
        }
        let names: Vec<String> = members.iter().map(|(m, _)| m.clone()).collect();
        let mut plans = plan(&self.config.units, &names, &holdings);
        let Some(mine) = plans.remove(&me) else {
            return;
        };
        self.target = Some(mine.target);
        tracing::debug!(worker = %me, target = mine.target, give = mine.give.len(), take = mine.take.len(), members = names.len(), "fleet: planned");
        self.give_surplus(events).await;
        let mut moves = 0;
        for unit in mine.take {
            if moves >= self.config.max_moves || !self.session_trusted() {
                break;
            }
            if holdings.get(&unit) != Some(&Holding::Free) {
                // Still held by a live giver: taken on a later tick, once released.
                continue;
            }
            moves += 1;
            self.take(&unit, dead.get(&unit), events).await;
        }
    }

    async fn take(
        &mut self,
        unit: &str,
        dead: Option<&(LeaseToken, FencingToken)>,
        events: &mut Vec<FleetEvent>,
    ) {
        let Ok(key) = LeaseKey::with_sort_key(self.config.units_key.as_str(), unit) else {
            return;
        };
        let Some(session) = self.session.as_ref() else {
            return;
        };
        if let Some((token, fencing)) = dead {
            // Conditional on the dead owner's tenure: of two takers, only one release succeeds,
            // and the acquire below is conditional on the key being free.
            self.stats.requests += 1;
            match self.store.release(&key, token, *fencing).await {
                Ok(()) => {
                    tracing::info!(worker = %self.config.worker_id, unit, dead = %token, "fleet: released a dead owner's unit");
                }
                Err(error) => {
                    tracing::debug!(worker = %self.config.worker_id, unit, %error, "fleet: dead owner's unit already changed");
                }
            }
        }
        let token = format!(
            "{}.{}.{}",
            RandomTokens.next_token().as_str(),
            session.fencing_token().get(),
            self.config.worker_id
        );
        let Ok(token) = LeaseToken::new(token) else {
            return;
        };
        let options = AcquireOptions::default()
            .with_owner(format!(
                "{} session {}",
                self.config.worker_id,
                session.fencing_token()
            ))
            .with_token(token);
        self.stats.requests += 1;
        match self
            .store
            .try_acquire(&key, self.config.unit_duration, &options)
            .await
        {
            Ok(lease) => {
                let fencing = lease.fencing_token();
                let checkpoint = match self.checkpoints.clone() {
                    Some(store) => {
                        self.stats.checkpoint_requests += 1;
                        match store.load(unit, fencing).await {
                            Ok(data) => data,
                            Err(error) => {
                                tracing::warn!(worker = %self.config.worker_id, unit, %error, "fleet: checkpoint load failed");
                                None
                            }
                        }
                    }
                    None => None,
                };
                self.gain_unit(unit, lease, checkpoint, events);
            }
            Err(error) if error.is_held() => {
                tracing::debug!(worker = %self.config.worker_id, unit, "fleet: unit taken by someone else first");
            }
            Err(error) => {
                tracing::warn!(worker = %self.config.worker_id, unit, %error, "fleet: acquiring a unit failed");
            }
        }
    }

    /// Releases units above the target, highest ids first, at most `max_moves`.
    async fn give_surplus(&mut self, events: &mut Vec<FleetEvent>) {
        let Some(target) = self.target else {
            return;
        };
        let surplus = self
            .owned
            .len()
            .saturating_sub(target)
            .min(self.config.max_moves);
        let give: Vec<String> = self.owned.keys().rev().take(surplus).cloned().collect();
        for unit in give {
            if let Some(lease) = self.lose_unit(&unit, LossCause::HandedOver, events) {
                self.stats.requests += 1;
                if let Err(error) = self
                    .store
                    .release(lease.key(), lease.token(), lease.fencing_token())
                    .await
                {
                    tracing::warn!(worker = %self.config.worker_id, unit, %error, "fleet: release of a handed-over unit failed");
                }
            }
        }
    }

    fn publish(&self) {
        let members = self.live_members().into_iter().map(|(m, _)| m).collect();
        let target = self.target;
        let stats = self.stats;
        self.shared.update(|state| {
            state.members = members;
            state.target = target;
            state.stats = stats;
        });
    }

    /// Hands every unit over and ends the session, so the others take over on their next tick
    /// instead of waiting for an expiry. Each unit is reported lost ([`LossCause::Shutdown`])
    /// before it is released.
    ///
    /// # Errors
    /// Only failures to release the session are returned; unit releases are best effort.
    pub async fn shutdown(&mut self) -> Result<(), Error> {
        let mut events = Vec::new();
        for lease in self.lose_all(LossCause::Shutdown, &mut events) {
            self.stats.requests += 1;
            if let Err(error) = self
                .store
                .release(lease.key(), lease.token(), lease.fencing_token())
                .await
            {
                tracing::warn!(worker = %self.config.worker_id, key = %lease.key(), %error, "fleet: release at shutdown failed");
            }
        }
        let outcome = match self.session.take() {
            Some(session) => {
                self.stats.requests += 1;
                tracing::info!(worker = %self.config.worker_id, "fleet: session ended");
                self.store
                    .release(session.key(), session.token(), session.fencing_token())
                    .await
            }
            None => Ok(()),
        };
        self.target = None;
        self.planned_members = None;
        self.publish();
        match outcome {
            Ok(()) => Ok(()),
            Err(error) if error.is_not_owned() => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Ticks every interval on the store's clock until [`WorkerHandle::stop`], then shuts down
    /// cleanly. Tick errors are logged and retried on the next tick. Runs on any executor (for
    /// the memory and file backends, [`lease_core::block_on`] on a thread is enough).
    ///
    /// # Errors
    /// A failure to release the session at shutdown.
    pub async fn run(mut self) -> Result<WorkerStats, Error> {
        loop {
            if self.shared.lock().stop {
                break;
            }
            let started = self.clock().monotonic();
            if let Err(error) = self.tick().await {
                tracing::warn!(worker = %self.config.worker_id, %error, "fleet: tick failed");
            }
            let next = started + self.config.interval;
            StopOrSleep {
                shared: &self.shared,
                sleep: sleep_until(self.clock(), next),
            }
            .await;
        }
        self.shutdown().await?;
        Ok(self.stats)
    }

    /// Runs [`Worker::run`] on a new thread with [`lease_core::block_on`]: for backends that need
    /// no async runtime (memory, files).
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn spawn_thread(
        self,
    ) -> Result<
        (
            WorkerHandle,
            std::thread::JoinHandle<Result<WorkerStats, Error>>,
        ),
        Error,
    > {
        let handle = self.handle();
        let name = format!("fleet-{}", self.config.worker_id);
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || lease_core::block_on(self.run()))
            .map_err(|e| Error::invalid("thread", e.to_string()))?;
        Ok((handle, thread))
    }
}

/// Completes when the sleep ends or a stop is requested.
struct StopOrSleep<'a> {
    shared: &'a Shared,
    sleep: BoxFuture<'static, ()>,
}

impl Future for StopOrSleep<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        {
            let mut state = self.shared.lock();
            if state.stop {
                return Poll::Ready(());
            }
            state.worker_waker = Some(cx.waker().clone());
        }
        self.sleep.as_mut().poll(cx)
    }
}

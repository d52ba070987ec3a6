//! The worker's unit work: listing the units, planning, taking, handing over and renewing. Every
//! request here is preceded by [`Worker::keep_session`], so the session is renewed on its own
//! schedule however long the unit work takes, and unit work stops as soon as it is not trusted.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use lease_core::{
    AcquireOptions, FencingToken, Lease, LeaseBackend, LeaseError, LeaseKey, LeaseToken,
    LossReason, NotOwnedReason,
};

use super::plan::{Holding, Member, plan_with};
use super::shared::touch;
use super::types::FleetEvent;
use super::view::{Listing, PublishedLoad, UnitHolder, UnitOwner};
use super::worker::Worker;

/// How many times a checkpoint load is tried before a gained unit is given back.
const CHECKPOINT_ATTEMPTS: u32 = 3;

/// A dead owner's hold on a unit: its token and the record's fencing counter.
pub(crate) type DeadHold = (LeaseToken, FencingToken);

/// A unit the latest plan dealt this worker, with the dead hold to release first, if any.
pub(crate) type PendingTake = (String, Option<DeadHold>);

/// The planner's reading of one units listing.
#[derive(Debug, Default)]
pub(crate) struct Reading {
    pub(crate) holdings: BTreeMap<String, Holding>,
    pub(crate) dead: BTreeMap<String, DeadHold>,
    /// Units this worker tracks that the store no longer shows as its own.
    pub(crate) stale: Vec<String>,
    /// Unit owners' sessions the view does not show.
    pub(crate) named: BTreeSet<(String, u64)>,
    /// Units the listing shows.
    pub(crate) listed: BTreeSet<String>,
    /// The earliest instant at which a pinned unit could become free to take if nothing changes.
    pub(crate) next_due: Option<Instant>,
}

impl Reading {
    fn due(&mut self, at: Instant) {
        self.next_due = Some(self.next_due.map_or(at, |d| d.min(at)));
    }
}

impl Worker {
    /// Lists the units partition: one request.
    pub(crate) async fn list_units(
        &mut self,
    ) -> Result<(BTreeMap<String, Option<UnitHolder>>, Listing), LeaseError> {
        self.stats.lists += 1;
        self.stats.unit_lists += 1;
        let (records, listing) = self.listing(&self.config.units_key.clone()).await?;
        let units = records
            .iter()
            .filter_map(|r| Some((r.key().sort()?.to_owned(), UnitHolder::parse(r))))
            .collect();
        Ok((units, listing))
    }

    /// Classifies every unit of a listing for the planner.
    pub(crate) fn read_units(
        &mut self,
        records: &BTreeMap<String, Option<UnitHolder>>,
        listing: Listing,
    ) -> Reading {
        let mut reading = Reading::default();
        let mut foreign_seen = BTreeSet::new();
        // The unit set is shared state: this worker's configured units and every unit the store
        // shows (added at run time, or configured on a peer), less the ones retired here.
        self.known_units = self
            .config
            .units
            .iter()
            .chain(records.keys())
            .chain(self.owned.keys())
            .filter(|u| !self.retired.contains(*u))
            .cloned()
            .collect();
        for unit in self.known_units.clone() {
            let holder = records.get(&unit).and_then(Option::as_ref);
            if records.contains_key(&unit) {
                reading.listed.insert(unit.clone());
            }
            let holding = self.classify(&unit, holder, listing, &mut reading, &mut foreign_seen);
            let mine = matches!(&holding, Holding::Member(m) if *m == self.config.worker_id);
            if self.owned.contains_key(&unit) && !mine {
                reading.stale.push(unit.clone());
            }
            reading.holdings.insert(unit, holding);
        }
        self.view.keep_foreign(&foreign_seen);
        self.view.named(&reading.named, listing.reply);
        reading
    }

    fn classify(
        &mut self,
        unit: &str,
        holder: Option<&UnitHolder>,
        listing: Listing,
        reading: &mut Reading,
        foreign_seen: &mut BTreeSet<String>,
    ) -> Holding {
        let Some(holder) = holder else {
            return Holding::Free;
        };
        // A holder the store does not name cannot be released conditionally.
        let Some(token) = holder.token.clone() else {
            return Holding::Pinned;
        };
        let dead = (
            token.clone(),
            lease_core::backend::fencing_token(holder.fencing),
        );
        let ended = match &holder.owner {
            Some(owner) if owner.worker == self.config.worker_id => {
                if self.owned.get(unit).map(Lease::token) == Some(&token) {
                    return Holding::Member(owner.worker.clone());
                }
                // Ours by label but untracked (an earlier session, a lost reply): this worker
                // does not trust it, so nobody does.
                true
            }
            Some(owner) => {
                if self.is_live_member(owner) {
                    return Holding::Member(owner.worker.clone());
                }
                let ended = self.view.session_ended(owner);
                if !ended {
                    reading.named.insert((owner.worker.clone(), owner.session));
                    let next = listing.reply + self.config.interval;
                    reading.due(self.view.session_verdict_due(owner, next));
                }
                ended
            }
            // Not a fleet token: no worker trusts it. Taken once it stayed unchanged for a
            // session duration (see the crate docs).
            None => {
                let version = (token, holder.fencing, holder.expires_at);
                let unchanged = self
                    .view
                    .foreign_unchanged(unit, version, listing, foreign_seen);
                if let Some(due) = self.view.foreign_due(unit).filter(|_| !unchanged) {
                    reading.due(due);
                }
                unchanged
            }
        };
        if ended {
            reading.dead.insert(unit.to_owned(), dead);
            Holding::Free
        } else {
            Holding::Pinned
        }
    }

    fn is_live_member(&self, owner: &UnitOwner) -> bool {
        self.members
            .iter()
            .any(|(m, f)| *m == owner.worker && *f == owner.session)
    }

    /// Plans from a units listing, hands the surplus over and takes what the plan deals.
    pub(crate) async fn plan_and_move(
        &mut self,
        records: &BTreeMap<String, Option<UnitHolder>>,
        listing: Listing,
        events: &mut Vec<FleetEvent>,
    ) {
        let reading = self.read_units(records, listing);
        for unit in &reading.stale {
            self.lose_unit(
                unit,
                LossReason::NotOwned(NotOwnedReason::TakenOver),
                events,
            );
        }
        let units: Vec<String> = self.known_units.iter().cloned().collect();
        let members = self.plan_members();
        let by_load = members.iter().all(|m| m.load.is_some()) && self.config.load_key.is_some();
        let own_loads = self.own_loads();
        let me = self.config.worker_id.clone();
        let mut plans = plan_with(&units, &members, &reading.holdings, Some(&own_loads), &me);
        let Some(mine) = plans.remove(&me) else {
            return;
        };
        self.target = Some(mine.target);
        self.by_load = by_load;
        let free_for_me = mine
            .take
            .iter()
            .any(|u| reading.holdings.get(u) == Some(&Holding::Free));
        let coming = !mine.take.is_empty();
        self.note_listing_outcome(&reading, free_for_me, coming);
        tracing::debug!(worker = %me, target = mine.target, take = mine.take.len(), give = mine.give.len(), members = members.len(), by_load, "fleet: planned");
        if by_load {
            if self.loads_fresh(&members, &reading) {
                for unit in mine.give.iter().take(self.config.max_moves) {
                    self.begin_handoff(unit, LossReason::HandedOver, events)
                        .await;
                }
            } else {
                // A figure published before its worker's latest move: plan again next tick.
                self.relist = true;
            }
        } else {
            self.give_surplus(events).await;
        }
        // Free units and dead owners' units dealt to this worker, to take now and, beyond the
        // move bound, on the next ticks without listing again: every take is conditional (the
        // dead hold's release on the token and fencing listed, the acquire on a free key), and a
        // verdict that a session ended stays true however late it is acted on.
        self.pending_takes = mine
            .take
            .into_iter()
            .filter(|u| reading.holdings.get(u) == Some(&Holding::Free))
            .map(|u| {
                let dead = reading.dead.get(&u).cloned();
                (u, dead)
            })
            .collect();
        let dealt = !self.pending_takes.is_empty();
        self.take_pending(events).await;
        self.register_missing(&reading, events).await;
        // Nothing left to take and at target: the next listing can wait for a reason. Units
        // dealt beyond the move bound are taken on the next ticks without a listing.
        self.relist &= self.below_target() && (!dealt || self.pending_takes.is_empty());
    }

    /// Takes up to `max_moves` of the units the latest plan dealt this worker. When the last is
    /// taken and the worker is still below target, it lists again on the next tick.
    pub(crate) async fn take_pending(&mut self, events: &mut Vec<FleetEvent>) {
        if self.pending_takes.is_empty() {
            return;
        }
        let now: Vec<PendingTake> = {
            let n = self.pending_takes.len().min(self.config.max_moves);
            self.pending_takes.drain(..n).collect()
        };
        for (unit, dead) in now {
            if !self.keep_session(events).await {
                self.pending_takes.clear();
                return;
            }
            self.take(&unit, dead.as_ref(), events).await;
        }
        if self.pending_takes.is_empty() && self.below_target() {
            self.relist = true;
        }
    }

    /// Decides when to list the units again: next tick while the listing offered something to
    /// take (free units, dead owners' units, a surplus being handed over); while still below
    /// target with nothing offered, when the first pinned unit could be judged free if nothing
    /// changes (a session reaching its duration unchanged, a missing record, a foreign record),
    /// or after `resync_every` ticks at the latest.
    fn note_listing_outcome(&mut self, reading: &Reading, free_for_me: bool, coming: bool) {
        let any_free = reading.holdings.values().any(|h| *h == Holding::Free);
        self.relist = free_for_me || coming || (any_free && self.below_target());
        self.next_verdict = reading.next_due;
    }

    /// The live members as the planner sees them: each with its unit limit (from its session
    /// token) and its load (published under its current session), this worker included.
    fn plan_members(&self) -> Vec<Member> {
        self.members
            .iter()
            .map(|(id, session)| {
                let max_units = if *id == self.config.worker_id {
                    self.config.max_units
                } else {
                    self.member_tags
                        .get(id)
                        .copied()
                        .flatten()
                        .and_then(|t| t.max_units)
                };
                let load = self
                    .view
                    .load_of(id)
                    .filter(|l| l.session == *session)
                    .map(|l| l.load);
                Member {
                    id: id.clone(),
                    max_units,
                    load,
                }
            })
            .collect()
    }

    /// Whether every member's published load was published with as many units as the listing
    /// shows it holding: only then does the most loaded member give by load.
    fn loads_fresh(&self, members: &[Member], reading: &Reading) -> bool {
        members.iter().all(|m| {
            let held = reading
                .holdings
                .values()
                .filter(|h| matches!(h, Holding::Member(id) if *id == m.id))
                .count();
            self.view.load_of(&m.id).is_some_and(|p| p.units == held)
        })
    }

    /// The load the application reported for each unit this worker owns (1 if none).
    pub(crate) fn own_loads(&self) -> BTreeMap<String, f64> {
        let state = self.shared.lock();
        self.owned
            .keys()
            .map(|u| (u.clone(), state.units.get(u).map_or(1.0, |s| s.load)))
            .collect()
    }

    /// Publishes this worker's load when it balances by load: when none is published under the
    /// current session, or it moved by more than 5 % and four ticks have passed since the last.
    /// Two requests (release the old record, acquire with the new figure in its token).
    pub(crate) async fn publish_load(&mut self, force: bool) {
        let (Some(key), Some(session)) = (self.config.load_key.clone(), self.session.as_ref())
        else {
            return;
        };
        let session = session.lease.fencing_token().get();
        let load: f64 = self.own_loads().values().sum();
        let published = self
            .view
            .load_of(&self.config.worker_id)
            .filter(|l| l.session == session)
            .cloned();
        let moved = published.as_ref().is_none_or(|p| {
            (load - p.load).abs() > p.load.max(1.0) * 0.05 || p.units != self.owned.len()
        });
        let quiet = self.stats.ticks < self.load_published_at + 4;
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
            self.owned.len(),
        )) else {
            return;
        };
        let options = AcquireOptions::default().with_token(token);
        match self
            .store
            .try_acquire(&key, self.config.unit_duration, &options)
            .await
        {
            Ok(_) => self.load_published_at = self.stats.ticks,
            Err(error) => {
                tracing::debug!(worker = %self.config.worker_id, %error, "fleet: publishing the load failed; retrying next tick")
            }
        }
    }

    pub(crate) fn below_target(&self) -> bool {
        self.target.is_none_or(|t| self.owned.len() < t)
    }

    /// Takes `unit`: releases a dead owner's hold first, acquires, fences and reads the unit's
    /// checkpoint, and only then trusts the unit and tells the application. A checkpoint that
    /// cannot be read gives the unit back: an unfenced unit is never reported gained.
    pub(crate) async fn take(
        &mut self,
        unit: &str,
        dead: Option<&DeadHold>,
        events: &mut Vec<FleetEvent>,
    ) {
        let Ok(key) = LeaseKey::with_sort_key(self.config.units_key.as_str(), unit) else {
            return;
        };
        if let Some((token, fencing)) = dead {
            // Conditional on the dead owner's tenure: of two takers, only one release succeeds,
            // and the acquire below is conditional on the key being free.
            match self.store.release(&key, token, *fencing).await {
                Ok(()) => {
                    tracing::info!(worker = %self.config.worker_id, unit, "fleet: released a dead owner's unit");
                }
                Err(error) => {
                    tracing::debug!(worker = %self.config.worker_id, unit, %error, "fleet: dead owner's unit already changed");
                }
            }
            if !self.keep_session(events).await {
                return;
            }
        }
        let Some(lease) = self.acquire_unit(&key, unit).await else {
            return;
        };
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

    async fn acquire_unit(&mut self, key: &LeaseKey, unit: &str) -> Option<Lease> {
        let session = self.session.as_ref()?.lease.fencing_token();
        let owner = UnitOwner {
            worker: self.config.worker_id.clone(),
            session: session.get(),
            duration: Some(self.config.session_duration),
        };
        let token = LeaseToken::new(owner.token(self.config.tokens.next_token().as_str())).ok()?;
        let options = AcquireOptions::default()
            .with_owner(format!("{} session {session}", self.config.worker_id))
            .with_token(token);
        match self
            .store
            .try_acquire(key, self.config.unit_duration, &options)
            .await
        {
            Ok(lease) => Some(lease),
            Err(error) if error.is_held() => {
                tracing::debug!(worker = %self.config.worker_id, unit, "fleet: unit taken by someone else first");
                None
            }
            Err(error) => {
                tracing::warn!(worker = %self.config.worker_id, unit, %error, "fleet: acquiring a unit failed");
                None
            }
        }
    }

    /// Fences and reads the unit's checkpoint: `Some(checkpoint)` once the fence is raised
    /// (`Some(None)`: no checkpoint stored, or no checkpoint store), `None` if every attempt
    /// failed or the session stopped being trusted.
    async fn load_checkpoint(
        &mut self,
        unit: &str,
        fencing: FencingToken,
        events: &mut Vec<FleetEvent>,
    ) -> Option<Option<Vec<u8>>> {
        let Some(store) = self.checkpoints.clone() else {
            return Some(None);
        };
        for attempt in 1..=CHECKPOINT_ATTEMPTS {
            if !self.keep_session(events).await {
                return None;
            }
            self.stats.checkpoint_requests += 1;
            match store.load(unit, fencing).await {
                Ok(data) => return Some(data),
                Err(error) => {
                    tracing::warn!(worker = %self.config.worker_id, unit, attempt, %error, "fleet: checkpoint load failed");
                }
            }
        }
        self.stats.checkpoint_failures += 1;
        tracing::warn!(worker = %self.config.worker_id, unit, "fleet: giving the unit back: its checkpoint could not be fenced");
        None
    }

    /// Hands units above the target over, highest ids first, at most `max_moves` per tick.
    pub(crate) async fn give_surplus(&mut self, events: &mut Vec<FleetEvent>) {
        let Some(target) = self.target else {
            return;
        };
        let kept: Vec<String> = self
            .owned
            .keys()
            .filter(|u| !self.handing_over.contains(*u))
            .cloned()
            .collect();
        let surplus = kept.len().saturating_sub(target).min(self.config.max_moves);
        for unit in kept.iter().rev().take(surplus) {
            self.begin_handoff(unit, LossReason::HandedOver, events)
                .await;
        }
    }

    /// Renews unit leases past half their duration.
    pub(crate) async fn keep_units(&mut self, events: &mut Vec<FleetEvent>) {
        let units: Vec<String> = self.owned.keys().cloned().collect();
        for unit in units {
            let Some(lease) = self.owned.get(&unit).cloned() else {
                continue;
            };
            if !lease.is_trusted(self.clock()) {
                self.lose_unit(&unit, LossReason::NotOwned(NotOwnedReason::Expired), events);
                continue;
            }
            if lease.remaining(self.clock()) > self.config.unit_duration / 2 {
                continue;
            }
            if !self.keep_session(events).await {
                return;
            }
            match self.store.renew(&lease, self.config.unit_duration).await {
                Ok(renewed) => self.keep_unit(unit, renewed),
                Err(error) if error.is_not_owned() => {
                    self.lose_unit(
                        &unit,
                        LossReason::NotOwned(NotOwnedReason::TakenOver),
                        events,
                    );
                }
                Err(error) => {
                    tracing::warn!(worker = %self.config.worker_id, unit, %error, "fleet: unit renewal failed; retrying next tick");
                }
            }
        }
    }

    /// Makes the records of configured units that no listing shows, when a peer is configured
    /// with a different unit list: then every worker plans over the same units (the union), and
    /// none is left to a worker that does not know it. At most `max_moves` per tick, two
    /// requests each (acquire, release), once per unit.
    async fn register_missing(&mut self, reading: &Reading, events: &mut Vec<FleetEvent>) {
        if !self.mismatch {
            return;
        }
        let missing: Vec<String> = self
            .config
            .units
            .iter()
            .filter(|u| !reading.listed.contains(*u) && !self.owned.contains_key(*u))
            .take(self.config.max_moves)
            .cloned()
            .collect();
        if missing.is_empty() {
            return;
        }
        for unit in missing {
            if !self.keep_session(events).await {
                return;
            }
            let Ok(key) = LeaseKey::with_sort_key(self.config.units_key.as_str(), unit.as_str())
            else {
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
        let _ = touch(&*self.store, &*self.config.tokens, &self.config.epoch_key).await;
    }

    /// The sweeper's housekeeping: deletes session records released long ago (ten session
    /// durations unchanged) that no unit record names, so listings stay the size of the live
    /// fleet. A store without delete keeps them.
    pub(crate) async fn sweep_sessions(&mut self, records: &BTreeMap<String, Option<UnitHolder>>) {
        let named: BTreeSet<&str> = records
            .values()
            .flatten()
            .filter_map(|h| h.owner.as_ref().map(|o| o.worker.as_str()))
            .collect();
        let stale = self.view.released_for(self.config.session_duration * 10);
        for (worker, fencing) in stale {
            if named.contains(worker.as_str()) || worker == self.config.worker_id {
                continue;
            }
            let Ok(key) = LeaseKey::with_sort_key(self.config.sessions.as_str(), worker.as_str())
            else {
                continue;
            };
            match self
                .store
                .delete(&key, None, lease_core::backend::fencing_token(fencing))
                .await
            {
                Ok(()) => {
                    tracing::info!(worker = %self.config.worker_id, gone = %worker, "fleet: deleted a departed worker's session record")
                }
                Err(error) if error.is_unsupported() => return,
                Err(error) => {
                    tracing::debug!(worker = %self.config.worker_id, gone = %worker, %error, "fleet: session record changed; kept")
                }
            }
        }
    }
}

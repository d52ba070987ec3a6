//! The worker's units: the ones it holds and their leases, the ones it knows, hands over, was
//! dealt and retired, and the decisions over them (reading a units listing, planning, what to
//! hand over and take). Like the session, it decides and returns what the worker must apply:
//! the worker sends the requests, keeping its session between any two of them, and tells the
//! application.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use lease_core::{
    AcquireOptions, FencingToken, Lease, LeaseBackend, LeaseKey, LeaseRecord, LeaseToken,
};

use super::builder::Config;
use super::counted::CountedStore;
use super::plan::{Holding, Member, plan_with};
use super::shared::Shared;
use super::view::{Listing, SessionTag, UnitHolder, UnitOwner, View};

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

/// What the worker hands over after a plan.
#[derive(Debug)]
pub(crate) enum Give {
    /// Balancing by load with every figure fresh: these units, at most `max_moves`.
    ByLoad(Vec<String>),
    /// Balancing by count: the units above the target ([`Units::surplus`]).
    Surplus,
    /// Nothing this tick (a load figure was stale: the worker plans again next tick).
    Nothing,
}

/// What a plan asks of the worker: hand over, then take the pending units and register the
/// missing ones, then [`Units::planned`].
#[derive(Debug)]
pub(crate) struct Dealt {
    pub(crate) give: Give,
    /// The plan dealt this worker units to take.
    pub(crate) dealt: bool,
    /// Every other member's target and the units dealt to it (for the assigner's take lists).
    pub(crate) others: Vec<(String, usize, Vec<String>)>,
}

/// The members the planner works with, as the worker last listed them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Members<'a> {
    /// The live members, this worker included, sorted.
    pub(crate) live: &'a [(String, u64)],
    /// Each live peer's session tag.
    pub(crate) tags: &'a BTreeMap<String, Option<SessionTag>>,
}

/// The units a worker holds, knows and moves, and the decisions over them.
#[derive(Debug, Default)]
pub(crate) struct Units {
    pub(crate) owned: BTreeMap<String, Lease>,
    /// Units being handed over: still owned until their task finishes or the timeout passes.
    pub(crate) handing_over: BTreeSet<String>,
    /// Every unit this worker knows: its configured units and every unit a listing showed.
    pub(crate) known: BTreeSet<String>,
    /// The last units listing offered something to take: list again next tick.
    pub(crate) relist: bool,
    /// Units the latest plan dealt this worker beyond the move bound: taken on the next ticks.
    pub(crate) pending_takes: Vec<PendingTake>,
    /// When a pinned unit of the last units listing could first be judged free.
    pub(crate) next_verdict: Option<Instant>,
    /// Units retired through this worker: never planned over again.
    pub(crate) retired: BTreeSet<String>,
    /// Whether the latest plan balanced by load.
    pub(crate) by_load: bool,
    /// The tick of the latest load publication.
    pub(crate) load_published_at: u64,
    /// Units were gained or released since the load was published.
    pub(crate) load_dirty: bool,
    /// A unit was handed over by load since the epoch last moved.
    pub(crate) gave_by_load: bool,
    pub(crate) target: Option<usize>,
    /// Dead members' units the assigner's plan dealt to other members, with the dead hold to
    /// release: the assigner releases each (its verdict came first) and takes none of them, so
    /// each moves once, from the dead member to the one it was dealt to.
    pub(crate) free_for_others: Vec<(String, DeadHold)>,
}

/// The units of a units listing, each with its holder if the record names one.
pub(crate) fn units_of(records: &[LeaseRecord]) -> BTreeMap<String, Option<UnitHolder>> {
    records
        .iter()
        .filter_map(|r| Some((r.key().sort()?.to_owned(), UnitHolder::parse(r))))
        .collect()
}

/// The key of `unit`'s record.
pub(crate) fn unit_key(config: &Config, unit: &str) -> Option<LeaseKey> {
    LeaseKey::with_sort_key(config.units_key.as_str(), unit).ok()
}

impl Units {
    /// A worker's units before its first listing: none held, none known yet. The known set is
    /// only read after a listing's [`read`](Self::read), which sets it to the configured units,
    /// the listed ones and the held ones, so it is not copied from the configuration here: a
    /// follower that only ever reads take lists never needs it (at W = 1,000 x L = 100,000 the
    /// copies were half the simulated fleet's memory).
    pub(crate) fn new(config: &Config) -> Self {
        let _ = config;
        Self::default()
    }

    /// Holds a gained unit.
    pub(crate) fn hold(&mut self, unit: &str, lease: Lease) {
        self.owned.insert(unit.to_owned(), lease);
        self.load_dirty = true;
    }

    /// Stops holding `unit`; returns its lease if it was held.
    pub(crate) fn forget(&mut self, unit: &str) -> Option<Lease> {
        let lease = self.owned.remove(unit)?;
        self.handing_over.remove(unit);
        self.load_dirty = true;
        Some(lease)
    }

    /// Forgets a unit the application retired, for good.
    pub(crate) fn retire(&mut self, unit: String) {
        self.known.remove(&unit);
        self.retired.insert(unit);
    }

    /// A unit was released (`handed_over`: after a handoff): when balancing by load, the
    /// unit-set epoch moves after the tick's moves.
    pub(crate) fn released(&mut self, handed_over: bool) {
        self.gave_by_load |= self.by_load && handed_over;
    }

    pub(crate) fn below_target(&self) -> bool {
        self.target.is_none_or(|t| self.owned.len() < t)
    }

    /// Classifies every unit of a listing for the planner.
    pub(crate) fn read(
        &mut self,
        config: &Config,
        view: &mut View,
        members: &[(String, u64)],
        records: &BTreeMap<String, Option<UnitHolder>>,
        listing: Listing,
    ) -> Reading {
        let mut reading = Reading::default();
        let mut foreign_seen = BTreeSet::new();
        // The unit set is shared state: this worker's configured units and every unit the store
        // shows (added at run time, or configured on a peer), less the ones retired here.
        self.known = config
            .units
            .iter()
            .chain(records.keys())
            .chain(self.owned.keys())
            .filter(|u| !self.retired.contains(*u))
            .cloned()
            .collect();
        let mut classifier = Classifier {
            config,
            owned: &self.owned,
            members,
            view,
            listing,
            reading: &mut reading,
            foreign_seen: &mut foreign_seen,
        };
        for unit in &self.known {
            let holder = records.get(unit).and_then(Option::as_ref);
            if records.contains_key(unit) {
                classifier.reading.listed.insert(unit.clone());
            }
            let holding = classifier.classify(unit, holder);
            let mine = matches!(&holding, Holding::Member(m) if *m == config.worker_id);
            if self.owned.contains_key(unit) && !mine {
                classifier.reading.stale.push(unit.clone());
            }
            classifier.reading.holdings.insert(unit.clone(), holding);
        }
        view.keep_foreign(&foreign_seen);
        view.named(&reading.named, listing.reply);
        reading
    }

    /// Plans from a reading whose stale units the worker has already lost: sets the target,
    /// the units to take (now and, beyond the move bound, on the next ticks) and when to list
    /// again, and says what to hand over. `None` when the plan leaves this worker out.
    pub(crate) fn plan(
        &mut self,
        config: &Config,
        view: &View,
        members: Members<'_>,
        own_loads: &BTreeMap<String, f64>,
        reading: &Reading,
        take_all_dead: bool,
    ) -> Option<Dealt> {
        let units: Vec<String> = self.known.iter().cloned().collect();
        let members = plan_members(config, view, members);
        let by_load = members.iter().all(|m| m.load.is_some()) && config.load_key.is_some();
        let me = config.worker_id.clone();
        let mut plans = plan_with(&units, &members, &reading.holdings, Some(own_loads), &me);
        let mine = plans.remove(&me)?;
        let others = plans
            .into_iter()
            .map(|(id, plan)| (id, plan.target, plan.take))
            .collect();
        self.target = Some(mine.target);
        self.by_load = by_load;
        let free_for_me = mine
            .take
            .iter()
            .any(|u| reading.holdings.get(u) == Some(&Holding::Free));
        let coming = !mine.take.is_empty();
        self.note_listing_outcome(reading, free_for_me, coming);
        tracing::debug!(worker = %me, target = mine.target, take = mine.take.len(), give = mine.give.len(), members = members.len(), by_load, "fleet: planned");
        let give = if !by_load {
            Give::Surplus
        } else if loads_fresh(view, &members, reading) {
            Give::ByLoad(mine.give.into_iter().take(config.max_moves).collect())
        } else {
            // A figure published before its worker's latest move: plan again next tick.
            self.relist = true;
            Give::Nothing
        };
        // Free units and dead owners' units dealt to this worker, all taken this tick (the move
        // bound throttles handing over live units only): every take is conditional (the dead
        // hold's release on the token and fencing listed, the acquire on a free key), and a
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
        self.free_for_others.clear();
        if take_all_dead {
            // The assigner judges a death first (it lists the sessions every tick; a follower
            // starts reading a suspect's record only once the assigner names it): it releases
            // the dead hold of every dead member's unit that its plan dealt to another member,
            // so the unit is free to take with no verdict, and the member it was dealt to takes
            // it from its take list. Each unit moves once (before, the assigner took them all
            // and then handed most of them on: two moves, two restarts of the unit's work).
            // A set of the takes so far: a dead member's units can be half of a big fleet's,
            // and a scan of the list per unit made this quadratic in them.
            let dealt: BTreeSet<String> =
                self.pending_takes.iter().map(|(u, _)| u.clone()).collect();
            for (unit, dead) in &reading.dead {
                if !dealt.contains(unit) && !self.owned.contains_key(unit) {
                    self.free_for_others.push((unit.clone(), dead.clone()));
                }
            }
        }
        let dealt = !self.pending_takes.is_empty();
        Some(Dealt {
            give,
            dealt,
            others,
        })
    }

    /// Classifies the units of an assigner's take list from their records, each read by this
    /// worker (`records`: unit, record holder, the read's stamps), by the rule a listing gets
    /// ([`Units::read`]): returns the ones free to take now (with the dead hold to release
    /// first) and how many are not (held by a live member or not yet judged).
    pub(crate) fn read_hinted(
        &self,
        config: &Config,
        view: &mut View,
        members: &[(String, u64)],
        records: Vec<(String, Option<UnitHolder>, Listing)>,
    ) -> (Vec<PendingTake>, usize) {
        let mut takes = Vec::new();
        let mut waiting = 0;
        for (unit, holder, listing) in records {
            if self.owned.contains_key(&unit) || self.retired.contains(&unit) {
                continue;
            }
            let mut reading = Reading::default();
            let mut foreign_seen = BTreeSet::new();
            let mut classifier = Classifier {
                config,
                owned: &self.owned,
                members,
                view,
                listing,
                reading: &mut reading,
                foreign_seen: &mut foreign_seen,
            };
            if classifier.classify(&unit, holder.as_ref()) == Holding::Free {
                let dead = reading.dead.remove(&unit);
                takes.push((unit, dead));
            } else {
                waiting += 1;
            }
        }
        (takes, waiting)
    }

    /// After a plan's moves: with nothing left to take and at target, the next listing can wait
    /// for a reason. Units dealt beyond the move bound are taken on the next ticks without a
    /// listing.
    pub(crate) fn planned(&mut self, dealt: bool) {
        self.relist &= self.below_target() && (!dealt || self.pending_takes.is_empty());
    }

    /// The next at most `max_moves` units the latest plan dealt this worker, to take now.
    pub(crate) fn next_takes(&mut self, max_moves: usize) -> Vec<PendingTake> {
        let n = self.pending_takes.len().min(max_moves);
        self.pending_takes.drain(..n).collect()
    }

    /// After taking a batch: when the last is taken and the worker is still below target, it
    /// lists again on the next tick.
    pub(crate) fn took(&mut self) {
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

    /// The load the application reported for each unit this worker owns (1 if none).
    pub(crate) fn own_loads(&self, shared: &Shared) -> BTreeMap<String, f64> {
        let state = shared.lock();
        self.owned
            .keys()
            .map(|u| (u.clone(), state.units.get(u).map_or(1.0, |s| s.load)))
            .collect()
    }

    /// The units above the target to hand over: at most `max_moves`, the highest ids.
    pub(crate) fn surplus(&self, max_moves: usize) -> Vec<String> {
        let Some(target) = self.target else {
            return Vec::new();
        };
        let kept: Vec<&String> = self
            .owned
            .keys()
            .filter(|u| !self.handing_over.contains(*u))
            .collect();
        let excess = kept.len().saturating_sub(target).min(max_moves);
        kept.iter()
            .rev()
            .take(excess)
            .map(|u| (*u).clone())
            .collect()
    }

    /// The configured units no listing shows and this worker does not hold, at most
    /// `max_moves`: the records to make when a peer is configured with a different unit list.
    pub(crate) fn missing(&self, config: &Config, reading: &Reading) -> Vec<String> {
        config
            .units
            .iter()
            .filter(|u| !reading.listed.contains(*u) && !self.owned.contains_key(*u))
            .take(config.max_moves)
            .cloned()
            .collect()
    }
}

/// The live members as the planner sees them: each with its unit limit (from its session token)
/// and its load (published under its current session), this worker included.
fn plan_members(config: &Config, view: &View, members: Members<'_>) -> Vec<Member> {
    members
        .live
        .iter()
        .map(|(id, session)| {
            let max_units = if *id == config.worker_id {
                config.max_units
            } else {
                members
                    .tags
                    .get(id)
                    .copied()
                    .flatten()
                    .and_then(|t| t.max_units)
            };
            let load = view
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

/// Whether every member's published load was published with as many units as the listing shows
/// it holding: only then does the most loaded member give by load.
fn loads_fresh(view: &View, members: &[Member], reading: &Reading) -> bool {
    members.iter().all(|m| {
        let held = reading
            .holdings
            .values()
            .filter(|h| matches!(h, Holding::Member(id) if *id == m.id))
            .count();
        view.load_of(&m.id).is_some_and(|p| p.units == held)
    })
}

/// One listing's classification, unit by unit.
struct Classifier<'a> {
    config: &'a Config,
    owned: &'a BTreeMap<String, Lease>,
    members: &'a [(String, u64)],
    view: &'a mut View,
    listing: Listing,
    reading: &'a mut Reading,
    foreign_seen: &'a mut BTreeSet<String>,
}

impl Classifier<'_> {
    fn classify(&mut self, unit: &str, holder: Option<&UnitHolder>) -> Holding {
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
                    self.reading
                        .named
                        .insert((owner.worker.clone(), owner.session));
                    let next = self.listing.reply + self.config.interval;
                    self.reading.due(self.view.session_verdict_due(owner, next));
                }
                ended
            }
            // Not a fleet token: no worker trusts it. Taken once it stayed unchanged for a
            // session duration (see the crate docs).
            None => {
                let version = (token, holder.fencing, holder.expires_at);
                let unchanged =
                    self.view
                        .foreign_unchanged(unit, version, self.listing, self.foreign_seen);
                if let Some(due) = self.view.foreign_due(unit).filter(|_| !unchanged) {
                    self.reading.due(due);
                }
                unchanged
            }
        };
        if ended {
            self.reading.dead.insert(unit.to_owned(), dead);
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
}

/// Releases a dead owner's hold on `unit`, conditional on its tenure: of two takers, only one
/// release succeeds, and the acquire after is conditional on the key being free.
pub(crate) async fn release_dead(
    config: &Config,
    store: &CountedStore,
    key: &LeaseKey,
    unit: &str,
    (token, fencing): &DeadHold,
) {
    match store.release(key, token, *fencing).await {
        Ok(()) => {
            tracing::info!(worker = %config.worker_id, unit, "fleet: released a dead owner's unit");
        }
        Err(error) => {
            tracing::debug!(worker = %config.worker_id, unit, %error, "fleet: dead owner's unit already changed");
        }
    }
}

/// Acquires `unit` for session `session`, its owner named in the token: `None` when someone
/// else holds it or the request failed.
pub(crate) async fn acquire_unit(
    config: &Config,
    store: &CountedStore,
    session: FencingToken,
    key: &LeaseKey,
    unit: &str,
) -> Option<Lease> {
    let owner = UnitOwner {
        worker: config.worker_id.clone(),
        session: session.get(),
        duration: Some(config.session_duration),
    };
    let token = LeaseToken::new(owner.token(config.tokens.next_token().as_str())).ok()?;
    let options = AcquireOptions::default()
        .with_owner(format!("{} session {session}", config.worker_id))
        .with_token(token);
    match store.try_acquire(key, config.unit_duration, &options).await {
        Ok(lease) => Some(lease),
        Err(error) if error.is_held() => {
            tracing::debug!(worker = %config.worker_id, unit, "fleet: unit taken by someone else first");
            None
        }
        Err(error) => {
            tracing::warn!(worker = %config.worker_id, unit, %error, "fleet: acquiring a unit failed");
            None
        }
    }
}

/// The sweeper's housekeeping: deletes session records released long ago (ten session durations
/// unchanged) that no unit record names, so listings stay the size of the live fleet. A store
/// without delete keeps them.
pub(crate) async fn sweep_sessions(
    config: &Config,
    store: &CountedStore,
    view: &View,
    records: &BTreeMap<String, Option<UnitHolder>>,
) {
    let named: BTreeSet<&str> = records
        .values()
        .flatten()
        .filter_map(|h| h.owner.as_ref().map(|o| o.worker.as_str()))
        .collect();
    let stale = view.released_for(config.session_duration * 10);
    for (worker, fencing) in stale {
        if named.contains(worker.as_str()) || worker == config.worker_id {
            continue;
        }
        let Ok(key) = LeaseKey::with_sort_key(config.sessions.as_str(), worker.as_str()) else {
            continue;
        };
        // A record without a fencing counter (0) is deleted as one.
        let counter = (fencing != 0).then(|| lease_core::backend::fencing_token(fencing));
        match store.delete(&key, None, counter).await {
            Ok(()) => {
                tracing::info!(worker = %config.worker_id, gone = %worker, "fleet: deleted a departed worker's session record")
            }
            Err(error) if error.is_unsupported() => return,
            Err(error) => {
                tracing::debug!(worker = %config.worker_id, gone = %worker, %error, "fleet: session record changed; kept")
            }
        }
    }
}

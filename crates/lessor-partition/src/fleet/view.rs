//! What a worker has observed of its peers, and its verdicts on them.
//!
//! Every verdict rests on observations alone, each stamped on this worker's monotonic clock: when
//! the listing that first showed a record version *returned* (`since`: the version was written
//! before then) and when the newest listing that still showed it was *sent* (`confirmed`: the
//! version was still there after then). A session is judged ended only when
//! `confirmed - since` reaches the holder's own session duration, so the verdict never depends on
//! when it is used, however long the requests around it take (see the crate docs for the proof).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use lease_core::{FencingToken, LeaseRecord, LeaseToken};

/// The sort key, in the sessions partition, of the record whose fencing counter is the unit-set
/// epoch (worker ids contain no '.', so it is never a worker's).
pub(crate) const EPOCH_SORT_KEY: &str = ".units";

/// When a listing was sent and answered.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Listing {
    /// Sent (monotonic): everything it shows was still there at or after this instant.
    pub(crate) sent: Instant,
    /// Answered (monotonic): everything it shows was written before this instant.
    pub(crate) reply: Instant,
    /// The wall clock when it was sent, for the optional skew rule.
    pub(crate) wall_sent: SystemTime,
}

/// What a session's token tells its peers: the holder's configuration, so that workers configured
/// differently judge each other by the holder's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SessionTag {
    /// The holder's session duration.
    pub(crate) duration: Duration,
    /// The most units the holder takes.
    pub(crate) max_units: Option<usize>,
    /// A hash of the holder's configured unit list.
    pub(crate) units_hash: u64,
}

impl SessionTag {
    /// The token of a new session: `<random>.<duration ms>.<max units or ->.<units hash>`.
    pub(crate) fn token(&self, random: &str) -> String {
        let cap = self
            .max_units
            .map_or_else(|| "-".to_owned(), |m| m.to_string());
        format!(
            "{random}.{}.{cap}.{:x}",
            self.duration.as_millis(),
            self.units_hash
        )
    }

    /// Parses a session token written by [`token`](Self::token); `None` for anything else (a
    /// session of an older version).
    pub(crate) fn parse(token: &str) -> Option<Self> {
        let mut parts = token.split('.');
        let (_, millis, cap, hash) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let max_units = match cap {
            "-" => None,
            cap => Some(cap.parse().ok()?),
        };
        Some(Self {
            duration: Duration::from_millis(millis.parse().ok()?),
            max_units,
            units_hash: u64::from_str_radix(hash, 16).ok()?,
        })
    }
}

/// Who holds a unit record, as parsed from its owner token.
#[derive(Clone, Debug)]
pub(crate) struct UnitHolder {
    /// The holder's token, if the store shows it.
    pub(crate) token: Option<LeaseToken>,
    /// The owner, or `None` when the token is not a fleet token.
    pub(crate) owner: Option<UnitOwner>,
    /// The record's fencing counter and expiry: with the token, what "unchanged" compares.
    pub(crate) fencing: u64,
    pub(crate) expires_at: Option<SystemTime>,
}

/// The worker and session a unit token names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UnitOwner {
    pub(crate) worker: String,
    pub(crate) session: u64,
    /// The owner's session duration (absent in tokens of older versions).
    pub(crate) duration: Option<Duration>,
}

impl UnitOwner {
    /// The token of a unit taken under this owner: `<random>.<session>.<duration ms>.<worker>`.
    /// Worker ids contain no '.', so every token a worker writes parses.
    pub(crate) fn token(&self, random: &str) -> String {
        let millis = self.duration.unwrap_or_default().as_millis();
        format!("{random}.{}.{millis}.{}", self.session, self.worker)
    }

    /// Parses a unit token; also the older `<random>.<session>.<worker>` form.
    pub(crate) fn parse(token: &str) -> Option<Self> {
        let parts: Vec<&str> = token.splitn(4, '.').collect();
        let (session, duration, worker) = match parts.as_slice() {
            [_, session, millis, worker] if !worker.is_empty() && !worker.contains('.') => (
                session,
                Some(Duration::from_millis(millis.parse().ok()?)),
                *worker,
            ),
            [_, session, worker] if !worker.is_empty() => (session, None, *worker),
            _ => return None,
        };
        Some(Self {
            worker: worker.to_owned(),
            session: session.parse().ok()?,
            duration,
        })
    }
}

/// The record's fencing counter as a number: 0 when it carries none (a record another library
/// wrote), below every token a backend issues.
pub(crate) fn fencing_of(record: &LeaseRecord) -> u64 {
    record.fencing_token().map_or(0, FencingToken::get)
}

impl UnitHolder {
    pub(crate) fn parse(record: &LeaseRecord) -> Option<Self> {
        let holder = record.holder()?;
        let token = holder.token().cloned();
        let owner = token.as_ref().and_then(|t| UnitOwner::parse(t.as_str()));
        Some(Self {
            token,
            owner,
            fencing: fencing_of(record),
            expires_at: holder.expires_at(),
        })
    }
}

/// One version of a record, and how long this worker has seen it unchanged.
#[derive(Clone, Debug)]
struct Seen<V> {
    version: V,
    /// Reply of the first listing that showed this version.
    since: Instant,
    /// Send of the newest listing that showed it.
    confirmed: Instant,
    /// The wall clock at that send.
    confirmed_wall: SystemTime,
}

impl<V: PartialEq> Seen<V> {
    fn update(old: Option<Self>, version: V, listing: Listing) -> Self {
        match old {
            Some(old) if old.version == version => Self {
                confirmed: listing.sent.max(old.confirmed),
                confirmed_wall: listing.wall_sent,
                ..old
            },
            _ => Self {
                version,
                since: listing.reply,
                confirmed: listing.sent,
                confirmed_wall: listing.wall_sent,
            },
        }
    }

    /// Whether the version has stayed unchanged for `span`, by listings alone.
    fn unchanged_for(&self, span: Duration) -> bool {
        self.confirmed.saturating_duration_since(self.since) >= span
    }
}

/// A session record version: what a renewal, release or new tenure changes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct SessionVersion {
    fencing: u64,
    token: Option<LeaseToken>,
    expires_at: Option<SystemTime>,
}

impl SessionVersion {
    fn of(record: &LeaseRecord) -> Self {
        // A record without a holder is a released session: keep it as a version too (its
        // fencing proves every earlier session ended).
        let holder = record.holder();
        Self {
            fencing: fencing_of(record),
            token: holder.and_then(|h| h.token().cloned()),
            expires_at: holder.and_then(lease_core::Holder::expires_at),
        }
    }
}

/// A unit owner's session missing from the sessions listings.
#[derive(Clone, Copy, Debug)]
struct Absence {
    /// Reply of the units listing that named this session: its record existed before then.
    named: Instant,
    /// Reply of the first sessions listing sent after `named` that missed the record, and send of
    /// the newest that still missed it.
    missing: Option<(Instant, Instant)>,
}

/// A unit record held under a token that is not a fleet token.
type ForeignVersion = (LeaseToken, u64, Option<SystemTime>);

/// Everything a worker has observed of its peers.
#[derive(Debug)]
pub(crate) struct View {
    /// This worker's session duration: the rule for peers whose tokens carry none.
    own_duration: Duration,
    skew: Option<Duration>,
    sessions: BTreeMap<String, Seen<SessionVersion>>,
    absent: BTreeMap<(String, u64), Absence>,
    foreign: BTreeMap<String, Seen<ForeignVersion>>,
    /// Sessions that replaced a held session of the same worker id (a restart after a crash),
    /// with the reply of the first listing that showed them: such a session is not a member
    /// until listings have shown it for its own session duration (see [`View::live_peers`]).
    restarts: BTreeMap<String, (u64, Instant)>,
    /// The fencing counter of the unit-set epoch record, as last listed.
    epoch: Option<u64>,
    /// Published loads: worker → (session fencing it was published under, load, record token,
    /// record fencing).
    loads: BTreeMap<String, PublishedLoad>,
}

/// A worker's published load (a `<worker>.load` record of the sessions partition).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PublishedLoad {
    pub(crate) session: u64,
    pub(crate) load: f64,
    /// How many units the worker held when it published: a planner trusts the figure only while
    /// the units listing shows the worker holding as many.
    pub(crate) units: usize,
    pub(crate) token: LeaseToken,
    pub(crate) fencing: u64,
}

impl PublishedLoad {
    /// The token of a load record: `<random>.<session fencing>.<load in thousandths>.<units>`.
    pub(crate) fn token(random: &str, session: u64, load: f64, units: usize) -> String {
        let milli = (load.max(0.0) * 1000.0).round();
        // Saturates: a load beyond u64 thousandths is as good as infinite for balancing.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let milli = milli.min(u64::MAX as f64) as u64;
        format!("{random}.{session}.{milli}.{units}")
    }

    fn parse(record: &LeaseRecord) -> Option<Self> {
        let token = record.holder()?.token()?.clone();
        let mut parts = token.as_str().split('.');
        let (_, session, milli, units) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        #[allow(clippy::cast_precision_loss)]
        let load = milli.parse::<u64>().ok()? as f64 / 1000.0;
        Some(Self {
            session: session.parse().ok()?,
            load,
            units: units.parse().ok()?,
            fencing: fencing_of(record),
            token,
        })
    }
}

/// The suffix of a worker's load record in the sessions partition.
pub(crate) const LOAD_SUFFIX: &str = ".load";

impl View {
    pub(crate) fn new(own_duration: Duration, skew: Option<Duration>) -> Self {
        Self {
            own_duration,
            skew,
            sessions: BTreeMap::new(),
            absent: BTreeMap::new(),
            foreign: BTreeMap::new(),
            restarts: BTreeMap::new(),
            epoch: None,
            loads: BTreeMap::new(),
        }
    }

    /// Takes in a sessions listing.
    pub(crate) fn observe_sessions(&mut self, records: &[LeaseRecord], listing: Listing) {
        let mut sessions = BTreeMap::new();
        self.loads.clear();
        for record in records {
            let Some(worker) = record.key().sort() else {
                continue;
            };
            if worker.contains('.') {
                // Not a worker (worker ids have no '.'): the unit-set epoch.
                if worker == EPOCH_SORT_KEY {
                    self.epoch = Some(fencing_of(record));
                } else if let Some(owner) = worker.strip_suffix(LOAD_SUFFIX)
                    && let Some(load) = PublishedLoad::parse(record)
                {
                    self.loads.insert(owner.to_owned(), load);
                }
                continue;
            }
            let old = self.sessions.remove(worker);
            let version = SessionVersion::of(record);
            self.note_restart(worker, old.as_ref(), record, &version, listing);
            sessions.insert(worker.to_owned(), Seen::update(old, version, listing));
        }
        self.sessions = sessions;
        let sessions = &self.sessions;
        self.restarts.retain(|worker, (fencing, _)| {
            sessions
                .get(worker)
                .is_some_and(|seen| seen.version.fencing == *fencing)
        });
        let sessions = &self.sessions;
        self.absent.retain(|(worker, _), absence| {
            if sessions.contains_key(worker) {
                return false;
            }
            if listing.sent >= absence.named {
                let first = absence.missing.map_or(listing.reply, |(first, _)| first);
                absence.missing = Some((first, listing.sent));
            }
            true
        });
    }

    /// Takes in one read of `worker`'s session record (a get, stamped like a listing): the same
    /// rule as for a listing, for that record only. A record the read did not find leaves the
    /// members, as a listing without it would drop it; but only listings judge a unit owner's
    /// absence ([`session_ended`](Self::session_ended)), so no unit is judged free by a get.
    pub(crate) fn observe_session(
        &mut self,
        worker: &str,
        record: Option<&LeaseRecord>,
        listing: Listing,
    ) {
        let Some(record) = record else {
            self.sessions.remove(worker);
            self.restarts.remove(worker);
            return;
        };
        let old = self.sessions.remove(worker);
        let version = SessionVersion::of(record);
        self.note_restart(worker, old.as_ref(), record, &version, listing);
        self.sessions
            .insert(worker.to_owned(), Seen::update(old, version, listing));
    }

    /// A held session replaced by a held session of the same worker with a greater fencing
    /// token is a restart (a crash and a new incarnation): its new session is on probation.
    fn note_restart(
        &mut self,
        worker: &str,
        old: Option<&Seen<SessionVersion>>,
        record: &LeaseRecord,
        version: &SessionVersion,
        listing: Listing,
    ) {
        let held = record.holder().is_some();
        let restarted =
            old.is_some_and(|old| Self::held(old) && held && old.version.fencing < version.fencing);
        if restarted {
            self.restarts
                .insert(worker.to_owned(), (version.fencing, listing.reply));
        }
    }

    /// The load `worker` published under session `session`, if any.
    pub(crate) fn load_of(&self, worker: &str) -> Option<&PublishedLoad> {
        self.loads.get(worker)
    }

    /// Takes in one read of the unit-set epoch record.
    pub(crate) fn observe_epoch(&mut self, record: &LeaseRecord) {
        self.epoch = Some(fencing_of(record));
    }

    /// The unit-set epoch as last listed: it moves whenever units are added or retired.
    pub(crate) fn epoch(&self) -> Option<u64> {
        self.epoch
    }

    /// Workers whose session record has been released and unchanged for `age` by listings, with
    /// the record's fencing counter: records nobody needs any more.
    pub(crate) fn released_for(&self, age: Duration) -> Vec<(String, u64)> {
        self.sessions
            .iter()
            .filter(|(_, seen)| !Self::held(seen) && seen.unchanged_for(age))
            .map(|(worker, seen)| (worker.clone(), seen.version.fencing))
            .collect()
    }

    /// Live peers whose session record the listings have shown unchanged for at least `span`:
    /// a member renewing every interval never stays unchanged that long, so these have probably
    /// stopped. A suspicion decides nothing; it only makes workers watch (see
    /// [`WorkerBuilder::without_assigner`](crate::WorkerBuilder::without_assigner)).
    pub(crate) fn suspects(&self, me: &str, span: Duration) -> Vec<String> {
        self.sessions
            .iter()
            .filter(|(worker, seen)| {
                worker.as_str() != me
                    && Self::held(seen)
                    && !self.dead(seen)
                    && seen.unchanged_for(span)
            })
            .map(|(worker, _)| worker.clone())
            .collect()
    }

    fn held(seen: &Seen<SessionVersion>) -> bool {
        seen.version.token.is_some() || seen.version.expires_at.is_some()
    }

    fn tag(seen: &Seen<SessionVersion>) -> Option<SessionTag> {
        seen.version
            .token
            .as_ref()
            .and_then(|t| SessionTag::parse(t.as_str()))
    }

    /// Whether the session this record shows is over, by listings alone.
    fn dead(&self, seen: &Seen<SessionVersion>) -> bool {
        if !Self::held(seen) {
            return true;
        }
        let duration = Self::tag(seen).map_or(self.own_duration, |t| t.duration);
        if seen.unchanged_for(duration) {
            return true;
        }
        match (self.skew, seen.version.expires_at) {
            (Some(skew), Some(expires)) => expires + skew <= seen.confirmed_wall,
            _ => false,
        }
    }

    /// Whether the session this record shows replaced a held session of the same worker (the
    /// worker crashed and restarted) less than its session duration ago, by listings alone.
    ///
    /// Such a session is left out of the members: a worker that crash-loops (up for less than
    /// a session duration, down for a few seconds) would otherwise be dealt its own units back
    /// at every restart and keep them unowned while it is down, since each new session restarts
    /// the peers' verdict on it. On probation it is dealt nothing, its predecessor's units (that
    /// session ended: its fencing is smaller) go to the members, and it joins as any new worker
    /// once it has stayed up for a session duration. Only planning changes: which sessions may
    /// be judged ended, and so safety, does not.
    fn on_probation(&self, worker: &str, seen: &Seen<SessionVersion>) -> bool {
        self.restarts.get(worker).is_some_and(|&(fencing, first)| {
            let duration = Self::tag(seen).map_or(self.own_duration, |t| t.duration);
            fencing == seen.version.fencing
                && seen.confirmed.saturating_duration_since(first) < duration
        })
    }

    /// The peers this worker believes live (itself excluded), sorted by id, with their session
    /// fencing and tag. A session that restarted a crashed one is not counted until it has been
    /// listed for its session duration ([`on_probation`](Self::on_probation)).
    pub(crate) fn live_peers(&self, me: &str) -> Vec<(String, u64, Option<SessionTag>)> {
        self.sessions
            .iter()
            .filter(|(worker, seen)| {
                *worker != me && !self.dead(seen) && !self.on_probation(worker, seen)
            })
            .map(|(worker, seen)| (worker.clone(), seen.version.fencing, Self::tag(seen)))
            .collect()
    }

    /// The session tags of the live peers whose configured unit list differs from `hash`.
    pub(crate) fn mismatched_peers(&self, me: &str, hash: u64) -> Vec<String> {
        self.live_peers(me)
            .into_iter()
            .filter(|(_, _, tag)| tag.is_some_and(|t| t.units_hash != hash))
            .map(|(worker, _, _)| worker)
            .collect()
    }

    /// Whether session `session` of the unit owner `owner` has certainly ended. Unknown sessions
    /// (not in the view) are remembered with [`named`](Self::named) and judged by their absence.
    pub(crate) fn session_ended(&self, owner: &UnitOwner) -> bool {
        let Some(seen) = self.sessions.get(&owner.worker) else {
            let duration = owner.duration.unwrap_or(self.own_duration);
            return self
                .absent
                .get(&(owner.worker.clone(), owner.session))
                .and_then(|a| a.missing)
                .is_some_and(|(first, newest)| {
                    newest.saturating_duration_since(first) >= duration
                });
        };
        if seen.version.fencing != owner.session {
            // Fencing only grows: a greater one proves the session ended (released, or expired by
            // the store's judgement and acquired again); a smaller one means the view is stale.
            return seen.version.fencing > owner.session;
        }
        self.dead(seen)
    }

    /// The earliest instant at which [`session_ended`](Self::session_ended) could turn true for
    /// `owner` if nothing changes, given `next` (when the next sessions listing will be sent).
    pub(crate) fn session_verdict_due(&self, owner: &UnitOwner, next: Instant) -> Instant {
        let Some(seen) = self.sessions.get(&owner.worker) else {
            let duration = owner.duration.unwrap_or(self.own_duration);
            return self
                .absent
                .get(&(owner.worker.clone(), owner.session))
                .and_then(|a| a.missing)
                .map_or(next, |(first, _)| (first + duration).max(next));
        };
        let duration = Self::tag(seen).map_or(self.own_duration, |t| t.duration);
        (seen.since + duration).max(next)
    }

    /// The earliest instant at which a foreign record of `unit`, if unchanged, could be taken.
    pub(crate) fn foreign_due(&self, unit: &str) -> Option<Instant> {
        self.foreign.get(unit).map(|s| s.since + self.own_duration)
    }

    /// Records that a units listing answered at `reply` named these sessions, which the view does
    /// not show: their absence from later sessions listings counts from then. Forgets absences
    /// the listing no longer names.
    pub(crate) fn named(&mut self, owners: &BTreeSet<(String, u64)>, reply: Instant) {
        self.absent.retain(|owner, _| owners.contains(owner));
        for (worker, session) in owners {
            if !self.sessions.contains_key(worker) {
                self.absent
                    .entry((worker.clone(), *session))
                    .or_insert(Absence {
                        named: reply,
                        missing: None,
                    });
            }
        }
    }

    /// Whether a unit record held under a token that is not a fleet token has stayed unchanged
    /// for a session duration, by units listings alone. `seen` collects the records of this
    /// listing; pass it to [`keep_foreign`](Self::keep_foreign) afterwards.
    pub(crate) fn foreign_unchanged(
        &mut self,
        unit: &str,
        version: (LeaseToken, u64, Option<SystemTime>),
        listing: Listing,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        let old = self.foreign.remove(unit);
        let now = Seen::update(old, version, listing);
        let unchanged = now.unchanged_for(self.own_duration);
        self.foreign.insert(unit.to_owned(), now);
        seen.insert(unit.to_owned());
        unchanged
    }

    /// Forgets foreign records the latest units listing no longer showed.
    pub(crate) fn keep_foreign(&mut self, seen: &BTreeSet<String>) {
        self.foreign.retain(|unit, _| seen.contains(unit));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::{Holder, LeaseKey};

    fn listing(base: Instant, sent_ms: u64, reply_ms: u64) -> Listing {
        Listing {
            sent: base + Duration::from_millis(sent_ms),
            reply: base + Duration::from_millis(reply_ms),
            wall_sent: SystemTime::UNIX_EPOCH + Duration::from_millis(sent_ms),
        }
    }

    fn session(worker: &str, fencing: u64, token: &str, expires_ms: u64) -> LeaseRecord {
        let key = LeaseKey::with_sort_key("fleet/t/sessions", worker).expect("key");
        let holder = Holder::new()
            .with_token(LeaseToken::new(token).expect("token"))
            .with_expires_at(SystemTime::UNIX_EPOCH + Duration::from_millis(expires_ms));
        lease_core::backend::new_record(
            key,
            Some(holder),
            lease_core::backend::fencing_token(fencing),
        )
    }

    fn owner(worker: &str, session: u64) -> UnitOwner {
        UnitOwner {
            worker: worker.to_owned(),
            session,
            duration: None,
        }
    }

    #[test]
    fn a_verdict_counts_from_the_reply_that_first_showed_a_version_to_the_send_of_the_newest() {
        let base = Instant::now();
        let tag = SessionTag {
            duration: Duration::from_secs(10),
            max_units: None,
            units_hash: 7,
        };
        let token = tag.token("r");
        let mut view = View::new(Duration::from_secs(10), None);
        view.observe_sessions(&[session("x", 1, &token, 10_000)], listing(base, 0, 500));
        // 10.4 s after the first reply: a listing *sent* before since + d shows the same version.
        view.observe_sessions(
            &[session("x", 1, &token, 10_000)],
            listing(base, 10_400, 13_000),
        );
        assert!(
            !view.session_ended(&owner("x", 1)),
            "sent 9.9 s after the first reply"
        );
        view.observe_sessions(
            &[session("x", 1, &token, 10_000)],
            listing(base, 10_500, 10_600),
        );
        assert!(view.session_ended(&owner("x", 1)));
    }

    #[test]
    fn the_holders_own_duration_decides() {
        let base = Instant::now();
        let long = SessionTag {
            duration: Duration::from_secs(60),
            max_units: Some(4),
            units_hash: 1,
        };
        let token = long.token("r");
        assert_eq!(SessionTag::parse(&token), Some(long));
        let mut view = View::new(Duration::from_secs(10), None);
        view.observe_sessions(&[session("x", 3, &token, 0)], listing(base, 0, 0));
        view.observe_sessions(&[session("x", 3, &token, 0)], listing(base, 30_000, 30_000));
        assert!(!view.session_ended(&owner("x", 3)));
        assert_eq!(view.live_peers("me").len(), 1);
        view.observe_sessions(&[session("x", 3, &token, 0)], listing(base, 60_000, 60_000));
        assert!(view.session_ended(&owner("x", 3)));
        assert!(view.live_peers("me").is_empty());
    }

    #[test]
    fn a_renewal_restarts_the_count_and_a_greater_fencing_ends_a_session_at_once() {
        let base = Instant::now();
        let mut view = View::new(Duration::from_secs(10), None);
        view.observe_sessions(&[session("x", 1, "a.10000.-.1", 10)], listing(base, 0, 0));
        view.observe_sessions(
            &[session("x", 1, "a.10000.-.1", 20)],
            listing(base, 9_000, 9_000),
        );
        view.observe_sessions(
            &[session("x", 1, "a.10000.-.1", 20)],
            listing(base, 12_000, 12_000),
        );
        assert!(!view.session_ended(&owner("x", 1)));
        view.observe_sessions(
            &[session("x", 2, "b.10000.-.1", 30)],
            listing(base, 13_000, 13_000),
        );
        assert!(view.session_ended(&owner("x", 1)));
        assert!(!view.session_ended(&owner("x", 2)));
    }

    #[test]
    fn a_session_that_replaced_a_held_one_is_a_member_only_after_a_session_duration() {
        let base = Instant::now();
        let mut view = View::new(Duration::from_secs(10), None);
        view.observe_sessions(&[session("x", 1, "a.10000.-.1", 10)], listing(base, 0, 0));
        assert_eq!(view.live_peers("me").len(), 1);
        // Crashed and restarted: a new session over the held one.
        view.observe_sessions(
            &[session("x", 2, "b.10000.-.1", 30)],
            listing(base, 12_000, 12_000),
        );
        assert!(view.session_ended(&owner("x", 1)));
        assert!(view.live_peers("me").is_empty(), "on probation");
        view.observe_sessions(
            &[session("x", 2, "b.10000.-.1", 40)],
            listing(base, 21_000, 21_000),
        );
        assert!(view.live_peers("me").is_empty(), "9 s listed");
        view.observe_sessions(
            &[session("x", 2, "b.10000.-.1", 50)],
            listing(base, 22_000, 22_000),
        );
        assert_eq!(view.live_peers("me").len(), 1);
        // A released session followed by a new one is a clean restart: a member at once.
        let released = lease_core::backend::new_record(
            LeaseKey::with_sort_key("fleet/t/sessions", "y").expect("key"),
            None,
            lease_core::backend::fencing_token(4),
        );
        view.observe_sessions(&[released], listing(base, 23_000, 23_000));
        view.observe_sessions(
            &[session("y", 5, "c.10000.-.1", 60)],
            listing(base, 24_000, 24_000),
        );
        assert_eq!(view.live_peers("me").len(), 1);
    }

    #[test]
    fn a_missing_record_ends_its_session_only_after_listings_missed_it_for_a_duration() {
        let base = Instant::now();
        let mut view = View::new(Duration::from_secs(10), None);
        let x = UnitOwner {
            duration: Some(Duration::from_secs(20)),
            ..owner("x", 5)
        };
        view.named(
            &[("x".to_owned(), 5)].into(),
            base + Duration::from_millis(100),
        );
        // A sessions listing sent before the units listing's reply proves nothing.
        view.observe_sessions(&[], listing(base, 50, 200));
        view.observe_sessions(&[], listing(base, 150, 300));
        view.observe_sessions(&[], listing(base, 20_000, 20_100));
        assert!(
            !view.session_ended(&x),
            "19.7 s since the first miss's reply"
        );
        view.observe_sessions(&[], listing(base, 20_300, 20_400));
        assert!(view.session_ended(&x));
    }

    #[test]
    fn a_record_a_get_does_not_find_leaves_the_members_but_frees_no_unit() {
        let base = Instant::now();
        let mut view = View::new(Duration::from_secs(10), None);
        let x = owner("x", 5);
        view.observe_sessions(&[session("x", 5, "t", 60_000)], listing(base, 0, 10));
        assert_eq!(view.live_peers("me").len(), 1);
        view.observe_session("x", None, listing(base, 20_000, 20_010));
        view.observe_session("x", None, listing(base, 40_000, 40_010));
        assert!(view.live_peers("me").is_empty(), "gone from the members");
        assert!(
            !view.session_ended(&x),
            "a get proves no absence: only listings judge a unit's owner gone"
        );
    }

    #[test]
    fn unit_tokens_parse_in_both_forms() {
        let new = UnitOwner {
            worker: "host-1".into(),
            session: 9,
            duration: Some(Duration::from_millis(12_500)),
        };
        assert_eq!(UnitOwner::parse(&new.token("abc")), Some(new));
        assert_eq!(UnitOwner::parse("abc.4.w1"), Some(owner("w1", 4)));
        assert_eq!(UnitOwner::parse("garbage"), None);
        assert_eq!(UnitOwner::parse("a.b.c"), None);
    }
}

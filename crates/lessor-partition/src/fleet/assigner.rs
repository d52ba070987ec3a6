//! The assigner (the default; [`WorkerBuilder::without_assigner`](crate::WorkerBuilder::without_assigner)
//! turns it off): one worker, elected with a lease, that lists the sessions every tick and
//! publishes a digest of the membership in its lease's token, with the names of the members it
//! suspects and of those that changed lately; every other worker reads that one record per tick,
//! reads the named members' session records, and skips its own sessions listing while the digest
//! matches its own view.
//!
//! The digest decides only *when* a worker lists. Every verdict on a peer's session and every
//! take stays the worker's own (its listings, its timestamps, its leases), so an assigner that is
//! slow, paused, partitioned or duplicated can only make workers list later, never make one trust
//! a unit another trusts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use lease_core::{AcquireOptions, Lease, LeaseBackend, LeaseKey, LeaseRecord, LeaseToken};

use super::builder::{Config, fnv1a};
use super::counted::CountedStore;
use super::takes::{self, TakeList};
use super::view::fencing_of;

/// The assigner record as this worker last read it, and since when it has seen it unchanged:
/// the assigner renews every interval, so a record unchanged for a session duration (by this
/// worker's reads alone, as [`View`](super::view::View) judges sessions) means no assigner is
/// alive.
#[derive(Clone, Debug)]
struct Seen {
    version: (u64, Option<LeaseToken>, Option<SystemTime>),
    /// Reply of the first read that showed this version.
    since: Instant,
    /// Send of the newest read that showed it.
    confirmed: Instant,
}

/// What a read of the assigner record tells a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Heard {
    /// A live assigner publishes this.
    Digest(Published),
    /// The assigner has not renewed for an interval (it renews every tick): perhaps it
    /// stopped. Tick in full, so that this worker watches the sessions itself from now on
    /// instead of a session duration later.
    Quiet,
    /// No assigner is alive (none holds the lease, or the record has not changed for a session
    /// duration): tick in full and try to become the assigner.
    Nobody,
    /// The record could not be read: tick in full.
    Unknown,
}

/// What a live assigner's token says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Published {
    /// The digest of the membership it sees ([`digest`]).
    pub(crate) digest: u64,
    /// How many times it has rewritten take lists: a follower whose latest plan followed an
    /// older generation reads its list again.
    pub(crate) generation: u64,
    /// The members it suspects, when their names fit in its token.
    pub(crate) suspects: Option<Vec<String>>,
    /// The members whose session changed in its latest two changes of membership, when known
    /// and their names fit.
    pub(crate) changed: Option<Vec<String>>,
}

/// This worker's part in the assigner protocol.
#[derive(Debug, Default)]
pub(crate) struct Assigner {
    /// The assigner lease, while this worker is the assigner, with what its token carries after
    /// the random part.
    held: Option<(Lease, String)>,
    /// The record as last read.
    seen: Option<Seen>,
    /// While this worker is the assigner: the members it last published, and the members whose
    /// entry changed in each of its latest two changes of membership (newest first; `None`
    /// before it has seen one: it cannot know what its followers saw before it).
    published: Option<Vec<(String, u64)>>,
    recent: [Option<Vec<String>>; 2],
    /// The take list last written for each member, and under which assigner fencing.
    written: BTreeMap<String, (u64, TakeList)>,
    /// Take-list rewrites so far ([`Published::generation`]).
    generation: u64,
    /// The digest and suspects last published, to publish again with a new generation.
    last: Option<(u64, Vec<String>)>,
}

/// The digest of a membership: the live members with their session fencing and the unit-set
/// epoch. The assigner publishes it, and its take lists carry the digest of the membership they
/// were planned for. Stable across builds ([`fnv1a`]).
pub(crate) fn digest(members: &[(String, u64)], epoch: Option<u64>) -> u64 {
    let mut bytes = Vec::new();
    for (member, fencing) in members {
        bytes.extend_from_slice(member.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(&fencing.to_be_bytes());
    }
    bytes.push(1);
    bytes.extend_from_slice(&epoch.unwrap_or(0).to_be_bytes());
    fnv1a(bytes)
}

/// The most bytes of an assigner token's random part (the rest carries the digest and names).
const RANDOM_ROOM: usize = 64;

/// What an assigner token carries after its random part: `.<digest hex>-<generation hex>`, then
/// `.<suspect>` for each suspect, then an empty part and `.<member>` for each member whose entry
/// changed in the latest changes of membership (`changes`, newest first: as many whole known
/// changes as fit; worker ids are not empty and contain no '.'). Names that are unknown or do not
/// fit in a token are replaced by `?`: all of them (`.?`), or the changed members only (`..?`).
fn token_suffix(
    digest: u64,
    generation: u64,
    suspects: &[String],
    changes: &[Option<Vec<String>>],
) -> String {
    let mut suffix = format!(".{digest:x}-{generation:x}");
    let room = lease_core::MAX_TOKEN_BYTES - RANDOM_ROOM;
    let named = |names: &[String]| names.iter().map(|s| s.len() + 1).sum::<usize>();
    if suffix.len() + named(suspects) + 3 > room {
        suffix.push_str(".?");
        return suffix;
    }
    for suspect in suspects {
        suffix.push('.');
        suffix.push_str(suspect);
    }
    let mut changed: Vec<String> = Vec::new();
    let mut named_any = false;
    for change in changes {
        let Some(change) = change else {
            break;
        };
        let mut wider: Vec<String> = changed.iter().chain(change).cloned().collect();
        wider.sort();
        wider.dedup();
        if suffix.len() + 1 + named(&wider) > room {
            break;
        }
        changed = wider;
        named_any = true;
    }
    if !named_any {
        suffix.push_str("..?");
        return suffix;
    }
    if !changed.is_empty() {
        suffix.push('.');
        for member in &changed {
            suffix.push('.');
            suffix.push_str(member);
        }
    }
    suffix
}

/// What an assigner token says ([`token_suffix`]).
fn parse_token(token: &str) -> Option<Published> {
    let mut parts = token.split('.');
    let _random = parts.next()?;
    let (digest, generation) = parts.next()?.split_once('-')?;
    let digest = u64::from_str_radix(digest, 16).ok()?;
    let generation = u64::from_str_radix(generation, 16).ok()?;
    let rest: Vec<&str> = parts.collect();
    let published = |suspects, changed| Published {
        digest,
        generation,
        suspects,
        changed,
    };
    if rest == ["?"] {
        return Some(published(None, None));
    }
    let (suspects, changed) = match rest.iter().position(|part| part.is_empty()) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (&rest[..], &[][..]),
    };
    let owned = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    let changed = (changed != ["?"]).then(|| owned(changed));
    Some(published(Some(owned(suspects)), changed))
}

/// The ids whose entry differs between two member lists, sorted.
fn changed_between(old: &[(String, u64)], new: &[(String, u64)]) -> Vec<String> {
    let mut changed: Vec<String> = old
        .iter()
        .filter(|entry| !new.contains(entry))
        .chain(new.iter().filter(|entry| !old.contains(entry)))
        .map(|(id, _)| id.clone())
        .collect();
    changed.sort();
    changed.dedup();
    changed
}

impl Assigner {
    /// Whether this worker holds the assigner lease (it then always ticks in full).
    pub(crate) fn is_assigner(&self) -> bool {
        self.held.is_some()
    }

    /// The fencing token of the assigner lease as this worker last read it.
    pub(crate) fn heard_fencing(&self) -> Option<lease_core::FencingToken> {
        let seen = self.seen.as_ref()?;
        Some(lease_core::backend::fencing_token(seen.version.0))
    }

    /// Notes `members` as the ones this assigner publishes now, and with them the members whose
    /// entry changed in each of its latest two changes of membership.
    pub(crate) fn note_members(&mut self, members: &[(String, u64)]) {
        match self.published.replace(members.to_vec()) {
            Some(old) if old != members => {
                let newest = changed_between(&old, members);
                self.recent = [Some(newest), self.recent[0].take()];
            }
            Some(_) => {}
            None => self.recent = Default::default(),
        }
    }

    /// Reads the assigner record: one request, one record.
    pub(crate) async fn hear(&mut self, config: &Config, store: &CountedStore) -> Heard {
        let Some(key) = config.assigner_key.as_ref() else {
            return Heard::Unknown;
        };
        let sent = store.clock().monotonic();
        let record = store.inspect(key).await;
        let reply = store.clock().monotonic();
        match record {
            Ok(record) => self.judge(config, record.as_ref(), sent, reply),
            Err(error) => {
                tracing::debug!(worker = %config.worker_id, %error, "fleet: reading the assigner record failed; ticking in full");
                Heard::Unknown
            }
        }
    }

    fn judge(
        &mut self,
        config: &Config,
        record: Option<&LeaseRecord>,
        sent: Instant,
        reply: Instant,
    ) -> Heard {
        let Some((record, holder)) = record.and_then(|r| Some((r, r.holder()?))) else {
            self.seen = None;
            return Heard::Nobody;
        };
        let version = (
            fencing_of(record),
            holder.token().cloned(),
            holder.expires_at(),
        );
        let seen = match self.seen.take() {
            Some(old) if old.version == version => Seen {
                confirmed: sent.max(old.confirmed),
                ..old
            },
            _ => Seen {
                version,
                since: reply,
                confirmed: sent,
            },
        };
        let unchanged = seen.confirmed.saturating_duration_since(seen.since);
        let parsed = seen
            .version
            .1
            .as_ref()
            .and_then(|t| parse_token(t.as_str()));
        self.seen = Some(seen);
        match parsed {
            _ if unchanged >= config.session_duration => Heard::Nobody,
            Some(_) if unchanged >= suspect_span(config) => Heard::Quiet,
            Some(published) => Heard::Digest(published),
            None => Heard::Nobody,
        }
    }

    /// After a full tick: the assigner publishes `digest` and `suspects` with its generation and
    /// the recently changed members ([`token_suffix`]), renewing its lease, or re-acquiring it
    /// with the new token (two requests); a worker that heard [`Heard::Nobody`] tries to become
    /// the assigner (one request; the store lets only one win, and only once the old lease
    /// expired).
    pub(crate) async fn lead(
        &mut self,
        config: &Config,
        store: &CountedStore,
        heard: Option<&Heard>,
        digest: u64,
        suspects: &[String],
    ) {
        let Some(key) = config.assigner_key.as_ref() else {
            return;
        };
        let suffix = token_suffix(digest, self.generation, suspects, &self.recent);
        self.last = Some((digest, suspects.to_vec()));
        match self.held.take() {
            Some((lease, published)) if published == suffix => {
                match store.renew(&lease, config.session_duration).await {
                    Ok(renewed) => self.held = Some((renewed, suffix)),
                    Err(error) => {
                        tracing::info!(worker = %config.worker_id, %error, "fleet: no longer the assigner");
                    }
                }
            }
            Some((lease, _)) => {
                // A new digest: the token cannot change on renewal, so release and take again.
                // Another worker may win in between; it then publishes instead.
                let released = store
                    .release(lease.key(), lease.token(), lease.fencing_token())
                    .await;
                if released.is_ok() {
                    self.take(config, store, key, suffix, false).await;
                }
            }
            None if heard == Some(&Heard::Nobody) => {
                self.take(config, store, key, suffix, true).await;
            }
            None => {}
        }
        if self.held.is_none() {
            self.published = None;
        }
    }

    async fn take(
        &mut self,
        config: &Config,
        store: &CountedStore,
        key: &LeaseKey,
        suffix: String,
        new: bool,
    ) {
        let random = config.tokens.next_token();
        let mut random = random.as_str().replace('.', "");
        while random.len() > RANDOM_ROOM {
            random.pop();
        }
        let Ok(token) = LeaseToken::new(format!("{random}{suffix}")) else {
            return;
        };
        let options = AcquireOptions::default()
            .with_owner(config.worker_id.clone())
            .with_token(token);
        match store
            .try_acquire(key, config.session_duration, &options)
            .await
        {
            Ok(lease) => {
                if new {
                    tracing::info!(worker = %config.worker_id, fencing = %lease.fencing_token(), "fleet: now the assigner");
                }
                self.held = Some((lease, suffix));
            }
            Err(error) => {
                tracing::debug!(worker = %config.worker_id, %error, "fleet: did not become the assigner");
            }
        }
    }

    /// While this worker is the assigner: writes each other member's part of the plan it just
    /// made for the membership of digest `plan` ([`takes`]), one request per member whose part
    /// changed since it last wrote it; then, if it wrote any, publishes the next generation so
    /// that followers read their lists again (two requests). Stops at the first refusal (a
    /// newer assigner wrote).
    pub(crate) async fn publish_takes(
        &mut self,
        config: &Config,
        store: &CountedStore,
        plan: u64,
        others: Vec<(String, usize, Vec<String>)>,
    ) {
        let Some(fencing) = self.held.as_ref().map(|(lease, _)| lease.fencing_token()) else {
            return;
        };
        let live: Vec<String> = others.iter().map(|(id, _, _)| id.clone()).collect();
        self.written.retain(|id, _| live.contains(id));
        let mut wrote = false;
        for (member, target, units) in others {
            let list = TakeList {
                plan,
                target,
                units: Some(units),
            };
            // Unchanged since this worker last wrote it (under this or an earlier tenure of
            // its own): a newer assigner's list in between can only make the follower list.
            if self
                .written
                .get(&member)
                .is_some_and(|(_, old)| *old == list)
            {
                continue;
            }
            match takes::write(config, store, fencing, &member, &list).await {
                Ok(()) => {
                    self.written.insert(member, (fencing.get(), list));
                    wrote = true;
                }
                Err(error) if error.is_not_owned() => {
                    tracing::info!(worker = %config.worker_id, %error, "fleet: a newer assigner writes the take lists");
                    return;
                }
                Err(error) => {
                    tracing::debug!(worker = %config.worker_id, member, %error, "fleet: writing a take list failed");
                }
            }
        }
        if wrote && let Some((digest, suspects)) = self.last.clone() {
            self.generation += 1;
            self.lead(config, store, None, digest, &suspects).await;
        }
    }

    /// Lets the assigner lease go (shutdown, or the session ended): best effort, so that another
    /// worker takes over at once instead of after a session duration.
    pub(crate) async fn resign(&mut self, store: &CountedStore) {
        if let Some((lease, _)) = self.held.take() {
            let _ = store
                .release(lease.key(), lease.token(), lease.fencing_token())
                .await;
        }
    }
}

/// How long a record renewed every interval must stay unchanged before it is suspected: an
/// interval, measured from the reply of the first read that showed it to the send of the newest.
/// Two reads an interval apart span a little less than that (the first one's latency), so a
/// single renewal that lands just after a read, as when two workers' tick phases slide past each
/// other, never raises a suspicion: only a renewal missed outright does.
pub(crate) fn suspect_span(config: &Config) -> Duration {
    config.interval
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| (*id).to_owned()).collect()
    }

    /// The suspects and the changed members a token names.
    type Names = (Option<Vec<String>>, Option<Vec<String>>);

    fn said(suffix: &str) -> Option<Names> {
        parse_token(&format!("random{suffix}")).map(|p| (p.suspects, p.changed))
    }

    #[test]
    fn a_token_carries_the_suspects_and_the_recent_changes_that_fit() {
        let changes = [Some(names(&["w7"])), Some(names(&["w2", "w7"]))];
        let suffix = token_suffix(0xab, 3, &names(&["w1"]), &changes);
        assert_eq!(suffix, ".ab-3.w1..w2.w7");
        assert_eq!(
            parse_token(&format!("random{suffix}")),
            Some(Published {
                digest: 0xab,
                generation: 3,
                suspects: Some(names(&["w1"])),
                changed: Some(names(&["w2", "w7"])),
            })
        );
        let quiet = token_suffix(0xab, 0, &[], &[Some(Vec::new()), Some(Vec::new())]);
        assert_eq!(said(&quiet), Some((Some(vec![]), Some(vec![]))));
        let only_changed = token_suffix(1, 0, &[], &[Some(names(&["w3"])), None]);
        assert_eq!(
            said(&only_changed),
            Some((Some(vec![]), Some(names(&["w3"]))))
        );
    }

    #[test]
    fn names_that_are_unknown_or_do_not_fit_are_a_question_mark() {
        let many: Vec<String> = (0..100).map(|i| format!("worker-{i:04}")).collect();
        // The newest change fits, the older one does not: only the newest is named.
        let suffix = token_suffix(7, 0, &[], &[Some(names(&["w1"])), Some(many.clone())]);
        assert_eq!(said(&suffix), Some((Some(vec![]), Some(names(&["w1"])))));
        // No change fits, or none is known: the changed members are unknown.
        let suffix = token_suffix(7, 0, &names(&["w2"]), &[Some(many.clone())]);
        assert_eq!(said(&suffix), Some((Some(names(&["w2"])), None)));
        let suffix = token_suffix(7, 0, &names(&["w2"]), &[None, None]);
        assert_eq!(said(&suffix), Some((Some(names(&["w2"])), None)));
        // The suspects do not fit: nothing is named.
        let suffix = token_suffix(7, u64::MAX, &many, &[Some(names(&["w1"]))]);
        assert_eq!(said(&suffix), Some((None, None)));
        let longest = format!("{}{suffix}", "r".repeat(RANDOM_ROOM));
        assert!(longest.len() <= lease_core::MAX_TOKEN_BYTES);
    }

    #[test]
    fn the_changes_are_those_of_the_latest_two_changes_of_membership() {
        let mut assigner = Assigner::default();
        let a = vec![("w1".to_owned(), 1), ("w2".to_owned(), 2)];
        assigner.note_members(&a);
        // A new assigner cannot name what changed before it: followers that differ list.
        assert_eq!(assigner.recent, [None, None]);
        let b = vec![("w1".to_owned(), 1), ("w2".to_owned(), 5)];
        assigner.note_members(&b);
        assert_eq!(assigner.recent, [Some(names(&["w2"])), None]);
        assigner.note_members(&b);
        assert_eq!(assigner.recent, [Some(names(&["w2"])), None]);
        let c = vec![("w2".to_owned(), 5), ("w3".to_owned(), 6)];
        assigner.note_members(&c);
        assert_eq!(
            assigner.recent,
            [Some(names(&["w1", "w3"])), Some(names(&["w2"]))]
        );
    }
}

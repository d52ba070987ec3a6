//! The assigner ([`WorkerBuilder::with_assigner`](crate::WorkerBuilder::with_assigner)): one
//! worker, elected with a lease, that lists the sessions every tick and publishes a digest of the
//! membership in its lease's token; every other worker reads that one record per tick and skips
//! its own listings while the digest matches what it last saw and it has nothing to move.
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
    /// A live assigner publishes this digest, and the members it suspects when their names fit
    /// in its token (`None` when they do not).
    Digest(u64, Option<Vec<String>>),
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

/// This worker's part in the assigner protocol.
#[derive(Debug, Default)]
pub(crate) struct Assigner {
    /// The assigner lease, while this worker is the assigner, with the digest its token carries.
    held: Option<(Lease, u64)>,
    /// The record as last read.
    seen: Option<Seen>,
    /// This worker's own view at its latest sessions listing.
    own: Option<OwnView>,
    /// The take list last written for each member, and under which assigner fencing.
    written: BTreeMap<String, (u64, TakeList)>,
}

/// The live members (with their session fencing) and the unit-set epoch a worker last listed.
type OwnView = (Vec<(String, u64)>, Option<u64>);

/// The digest of a membership: the live members with their session fencing, the unit-set epoch
/// and the suspected members. Stable across builds ([`fnv1a`]).
pub(crate) fn digest(members: &[(String, u64)], epoch: Option<u64>, suspects: &[String]) -> u64 {
    let mut bytes = Vec::new();
    for (member, fencing) in members {
        bytes.extend_from_slice(member.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(&fencing.to_be_bytes());
    }
    bytes.push(1);
    bytes.extend_from_slice(&epoch.unwrap_or(0).to_be_bytes());
    for suspect in suspects {
        bytes.push(2);
        bytes.extend_from_slice(suspect.as_bytes());
    }
    fnv1a(bytes)
}

/// An assigner token: `<random>.<digest hex>`, then `.<suspect>` for each suspect when all
/// their names fit in a token (worker ids contain no '.'), else `.?`.
fn assigner_token(random: &str, digest: u64, suspects: &[String]) -> String {
    let mut token = format!("{random}.{digest:x}");
    let named: usize = suspects.iter().map(|s| s.len() + 1).sum();
    if token.len() + named <= lease_core::MAX_TOKEN_BYTES {
        for suspect in suspects {
            token.push('.');
            token.push_str(suspect);
        }
    } else {
        token.push_str(".?");
    }
    token
}

/// The digest and the suspects' names (if they fit) of an assigner token.
fn parse_token(token: &str) -> Option<(u64, Option<Vec<String>>)> {
    let mut parts = token.split('.');
    let _random = parts.next()?;
    let digest = u64::from_str_radix(parts.next()?, 16).ok()?;
    let rest: Vec<String> = parts.map(str::to_owned).collect();
    let suspects = (rest.len() != 1 || rest[0] != "?").then_some(rest);
    Some((digest, suspects))
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

    /// Records this worker's own view after a sessions listing.
    pub(crate) fn note_own(&mut self, members: &[(String, u64)], epoch: Option<u64>) {
        self.own = Some((members.to_vec(), epoch));
    }

    /// The members to watch if `heard` matches this worker's own view at its latest sessions
    /// listing (its members and epoch, with the suspects the assigner names): `Some(suspects)`
    /// (perhaps none), else `None`.
    pub(crate) fn agrees(&self, heard: &Heard) -> Option<Vec<String>> {
        let (Heard::Digest(published, Some(suspects)), Some((members, epoch))) = (heard, &self.own)
        else {
            return None;
        };
        (digest(members, *epoch, suspects) == *published).then(|| suspects.clone())
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
            record.fencing().get(),
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
            Some((digest, suspects)) => Heard::Digest(digest, suspects),
            None => Heard::Nobody,
        }
    }

    /// After a full tick: the assigner publishes `digest` (renewing its lease, or re-acquiring it
    /// with the new digest in its token: two requests); a worker that heard [`Heard::Nobody`]
    /// tries to become the assigner (one request; the store lets only one win, and only once the
    /// old lease expired).
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
        match self.held.take() {
            Some((lease, published)) if published == digest => {
                match store.renew(&lease, config.session_duration).await {
                    Ok(renewed) => self.held = Some((renewed, digest)),
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
                    self.take(config, store, key, digest, suspects).await;
                }
            }
            None if heard == Some(&Heard::Nobody) => {
                self.take(config, store, key, digest, suspects).await;
            }
            None => {}
        }
    }

    async fn take(
        &mut self,
        config: &Config,
        store: &CountedStore,
        key: &LeaseKey,
        digest: u64,
        suspects: &[String],
    ) {
        let random = config.tokens.next_token();
        let Ok(token) = LeaseToken::new(assigner_token(random.as_str(), digest, suspects)) else {
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
                if self.held.is_none() {
                    tracing::info!(worker = %config.worker_id, fencing = %lease.fencing_token(), "fleet: now the assigner");
                }
                self.held = Some((lease, digest));
            }
            Err(error) => {
                tracing::debug!(worker = %config.worker_id, %error, "fleet: did not become the assigner");
            }
        }
    }

    /// While this worker is the assigner: writes each other member's part of the plan it just
    /// made for the membership of digest `plan` ([`takes`]), one request per member whose part
    /// changed since it last wrote it. Stops at the first refusal (a newer assigner wrote).
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

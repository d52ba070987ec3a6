//! The LUCI-style lessor: lease the unleased part of a key range for the length of a callback.
//!
//! [`Lessor`] is LUCI's interface (`lessor.Lessor`), [`StoreLessor`] implements it over any
//! store that can list, and a [`Registry`] (LUCI's `lessor.Register` / `lessor.Get`) maps ids to
//! lessor factories; the application owns the registry and passes it where it is needed.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use lease_core::backend::validate_duration;
use lease_core::{
    AcquireOptions, BoxFuture, FencingToken, Lease, LeaseBackend, LeaseError, LeaseKey,
    LeaseListing, LeaseRecord, LossReason, NotOwnedReason,
};

use crate::{Partition, PartitionSet};

/// The listing half of `store`, or [`LeaseError::Unsupported`] naming what needed it: the lessor
/// and the fleet need a store that can list a partition key (the memory, file and DynamoDB
/// backends can).
pub(crate) fn listing_of<'a>(
    store: &'a dyn LeaseBackend,
    operation: &'static str,
) -> Result<&'a dyn LeaseListing, LeaseError> {
    store
        .as_listing()
        .ok_or_else(|| LeaseError::unsupported(store.name(), operation))
}

/// What [`Lessor::with_lease`] granted (see [`StoreLessor`] for an example): the leased parts of the
/// requested range and until when the callback may act on them.
#[derive(Clone, Debug)]
pub struct Grant {
    partitions: PartitionSet,
    deadline: Instant,
    leases: Vec<(Partition, FencingToken)>,
}

impl Grant {
    /// The leased keys: the requested range minus what others hold. May be empty.
    pub fn partitions(&self) -> &PartitionSet {
        &self.partitions
    }

    /// The instant, on the lessor's monotonic clock, before which every granted lease is still
    /// trusted. The callback is dropped when it passes.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Each leased range with the fencing token of its lease, for fenced writes.
    pub fn leases(&self) -> &[(Partition, FencingToken)] {
        &self.leases
    }
}

/// The callback of [`Lessor::with_lease`]: called once with the grant; its future is dropped if
/// the grant's deadline passes first.
pub type LeaseCallback<'a> = Box<dyn FnOnce(Grant) -> BoxFuture<'a, ()> + Send + 'a>;

/// Leases parts of a keyspace for the length of a callback (LUCI's `lessor.Lessor`).
///
/// Sections are independent keyspaces: leases in one never affect another.
pub trait Lessor: Send + Sync + fmt::Debug {
    /// Leases the parts of `partition` that nobody holds in `section` (possibly nothing) for
    /// `duration`, calls `callback` with them and a deadline that falls before the leases expire,
    /// and releases the leases when the callback returns (or is dropped at the deadline).
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] for a bad section or duration, the store's error when it
    /// fails, [`LeaseError::Lost`] with [`LossReason::DeadlinePassed`] (key: the section's
    /// partition key) when the callback outlived the deadline.
    fn with_lease<'a>(
        &'a self,
        section: &'a str,
        partition: Partition,
        duration: Duration,
        callback: LeaseCallback<'a>,
    ) -> BoxFuture<'a, Result<(), LeaseError>>;
}

/// A [`Lessor`] over any store that can list ([`LeaseBackend::as_listing`]).
///
/// Each leased range is one lease record under partition key `lessor/<section>` with the range's
/// text form as sort key. Acquiring is per key, and overlapping ranges have different keys, so the
/// grant is made race-free by *acquire, then list*: after acquiring its candidate ranges (at
/// first the whole requested range), a caller lists the section and gives back every range that
/// overlaps a live record of someone else. Of two overlapping acquisitions, the later one's
/// listing (by the store's order) sees the earlier, so at most one keeps the keys; when both see
/// each other both give back, and the next round (up to four) acquires what that listing showed
/// free.
///
/// Cost per call: one acquire, one listing, four requests for the grant's fencing token (below),
/// one release and one delete when nobody holds part of the range (eight in all; three before
/// records were deleted and tokens guarded); otherwise one more round (an acquire per free
/// piece, one listing) per collision or partly held range, plus a release and a delete of what
/// was given back, and one delete per stale record a listing finds (at most 64 a call). A record is judged live until its `expires_at` plus
/// the skew bound (default one second) has passed, so wall clocks of callers may disagree by that
/// much.
///
/// **Bounded records.** A released range's record is deleted (one compare-and-delete), and each
/// call's listing also deletes up to 64 records of others that are free or whose holder's lease
/// expired more than the skew bound ago (a caller that died inside its callback): one
/// compare-and-delete each, naming the record exactly as listed, so a record someone acquired
/// meanwhile stays. A section therefore holds the ranges leased now, plus those of callers that
/// died since its last call. On a store that cannot delete, the records stay.
///
/// **Fencing tokens.** A deleted record's fencing counter starts again when the range is leased
/// next, so a grant's token does not come from the records alone. Each section keeps two fenced
/// values in the store's [`FencedValues`](lease_core::FencedValues): a *guard*
/// (`lessor/<section>` / `~token-guard`) whose fence stands above every token granted in the
/// section, and a *hint* of that figure. After its acquisitions a grant picks `T`, at least the
/// hint and every granted range's record counter, checks it with a write to the guard at fence
/// `T` (refused while the fence is above `T`: then it reads the hint again and tries a greater
/// `T`), raises the guard to `T + 1` and the hint to `T + 1`, and only then runs the callback
/// with `T` for every range (four requests per call that grants anything; a grant whose deadline
/// passed meanwhile is given back unused). The next holder of a range acquires it after the
/// previous one released it or its lease expired, so after that raise, and its check is
/// refused at every `T` up to the previous token: a range's tokens only grow, deleted records or
/// not (tokens of different ranges are not comparable, as before). A store without fenced values
/// keeps every record, and grants the records' own counters.
///
/// ```
/// use lessor_partition::{Lessor, Partition, PartitionSet, StoreLessor};
/// use lease_core::MemoryBackend;
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let lessor = StoreLessor::new(Arc::new(MemoryBackend::new()))?;
/// let got = pollster::block_on(lessor.with_lease(
///     "tq-sweep",
///     Partition::universe(),
///     Duration::from_secs(30),
///     Box::new(|grant| Box::pin(async move {
///         assert_eq!(grant.partitions(), &PartitionSet::from(Partition::universe()));
///     })),
/// ));
/// assert!(got.is_ok());
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
#[derive(Debug, Clone)]
pub struct StoreLessor {
    store: Arc<dyn LeaseBackend>,
    skew: Duration,
    rounds: u32,
    compact: bool,
}

impl StoreLessor {
    /// A lessor over `store`.
    ///
    /// # Errors
    /// [`LeaseError::Unsupported`] (operation `list_partition`) when `store` cannot list.
    pub fn new(store: Arc<dyn LeaseBackend>) -> Result<Self, LeaseError> {
        listing_of(&*store, "list_partition")?;
        Ok(Self {
            store,
            skew: Duration::from_secs(1),
            rounds: 4,
            compact: true,
        })
    }

    /// Deletes the record of every range this lessor released, and the records of callers
    /// that died: the default now (see the type's docs, *Bounded records*), so this changes
    /// nothing; kept so that code written for the earlier opt-in still builds.
    ///
    /// The earlier opt-in let a later grant of the same range carry a smaller fencing token
    /// than an earlier one (a re-created record's counter starts again); the section's token
    /// floor now keeps a range's tokens growing across deletions.
    pub fn with_compaction(mut self) -> Self {
        self.compact = true;
        self
    }

    /// How far callers' wall clocks may disagree (default one second).
    pub fn with_skew_bound(mut self, skew: Duration) -> Self {
        self.skew = skew;
        self
    }

    fn is_live(&self, record: &LeaseRecord, now: SystemTime) -> bool {
        record.holder().is_some_and(|holder| {
            holder
                .expires_at()
                .is_none_or(|expires| now < expires + self.skew)
        })
    }

    /// The live leased ranges of `section` other than `mine`; deletes up to [`SWEEP_PER_CALL`]
    /// records of others that are free or expired ([`Self::sweep`]).
    async fn held(
        &self,
        partition_key: &str,
        mine: &BTreeMap<Partition, Lease>,
    ) -> Result<PartitionSet, LeaseError> {
        let records = listing_of(&*self.store, "list_partition")?
            .list_partition(partition_key)
            .await?;
        let now = self.store.clock().now();
        let mut held = PartitionSet::new();
        let mut stale = Vec::new();
        for record in &records {
            let Some(range) = record
                .key()
                .sort()
                .and_then(|s| s.parse::<Partition>().ok())
            else {
                continue;
            };
            let own = mine.get(&range).is_some_and(|lease| {
                record.holder().and_then(|h| h.token()) == Some(lease.token())
            });
            if own {
                continue;
            }
            if self.is_live(record, now) {
                held.insert(range);
            } else if stale.len() < SWEEP_PER_CALL {
                stale.push(record);
            }
        }
        self.sweep(&stale).await;
        Ok(held)
    }

    /// Deletes `stale` records (free, or held by a lease that expired more than the skew bound
    /// ago: a caller that died inside its callback), each by the compare-and-delete that names
    /// it as listed, so a record acquired or renewed since stays. One request each; nothing
    /// without compaction, nothing more on a store that cannot delete.
    async fn sweep(&self, stale: &[&LeaseRecord]) {
        if !self.compact {
            return;
        }
        for record in stale {
            let holder = record.holder().and_then(|h| h.token());
            if record.holder().is_some() && holder.is_none() {
                continue;
            }
            match self
                .store
                .delete(record.key(), holder, record.fencing_token())
                .await
            {
                Ok(()) => {
                    tracing::debug!(key = %record.key(), expired = holder.is_some(), "lessor: deleted a stale record");
                }
                Err(error) if error.is_unsupported() => return,
                Err(error) => {
                    tracing::debug!(key = %record.key(), %error, "lessor: stale record changed; kept");
                }
            }
        }
    }

    /// The fencing token of a grant (see the type's docs, *Fencing tokens*): `T`, at least
    /// every range's record counter and the section's hint, such that the section's guard
    /// accepts a write at fence `T` (so every token granted before is below `T`); then the
    /// guard is raised to `T + 1` and the hint to `T + 1`. Four requests when the hint is
    /// current (read the hint, check, raise, write the hint), one more check per grant that
    /// raced past it; the records' own counters on a store without fenced values.
    ///
    /// # Errors
    /// The store's error when the guard cannot be checked or raised, or
    /// [`LeaseError::Runtime`] after [`TOKEN_ATTEMPTS`] checks refused: the grant is given
    /// back, since its token could repeat an earlier holder's.
    async fn tokens(
        &self,
        partition_key: &str,
        leases: &BTreeMap<Partition, Lease>,
    ) -> Result<Vec<(Partition, FencingToken)>, LeaseError> {
        let own = || {
            leases
                .iter()
                .map(|(range, lease)| (*range, lease.fencing_token()))
                .collect()
        };
        let Some(values) = self.store.as_fenced_values() else {
            return Ok(own());
        };
        if leases.is_empty() || !self.compact {
            return Ok(own());
        }
        let hint_name = LeaseKey::with_sort_key(partition_key, "~token-hint")?;
        let guard_name = LeaseKey::with_sort_key(partition_key, "~token-guard")?;
        let constant = lease_core::backend::fencing_token(1);
        let read_hint = || async {
            let bytes = values.fence_and_read(&hint_name, constant).await?;
            Ok::<u64, LeaseError>(
                bytes
                    .as_deref()
                    .and_then(|b| std::str::from_utf8(b).ok())
                    .and_then(|text| text.parse::<u64>().ok())
                    .unwrap_or(0),
            )
        };
        let counters = leases
            .values()
            .map(|lease| lease.fencing_token().get())
            .max()
            .unwrap_or(1);
        let mut token = read_hint().await?.max(counters).max(1);
        let mut accepted = false;
        for _ in 0..TOKEN_ATTEMPTS {
            let level = lease_core::backend::fencing_token(token);
            match values.put_fenced(&guard_name, level, b"").await {
                Ok(()) => {
                    accepted = true;
                    break;
                }
                Err(error) if error.not_owned_reason() == Some(NotOwnedReason::Fenced) => {
                    // A grant after the hint was read (or a hint lowered by a late writer).
                    let hint = read_hint().await?;
                    token = hint.max(token.saturating_add(1));
                }
                Err(error) => return Err(error),
            }
        }
        let next = token.checked_add(1).filter(|_| accepted).ok_or_else(|| {
            LeaseError::runtime(format!(
                "no fencing token for a grant in {partition_key}: the section's token guard \
                 refused {TOKEN_ATTEMPTS} candidates"
            ))
        })?;
        let raised = lease_core::backend::fencing_token(next);
        let text = next.to_string();
        match values.put_fenced(&guard_name, raised, b"").await {
            Ok(()) => {}
            Err(error) if error.not_owned_reason() == Some(NotOwnedReason::Fenced) => {}
            Err(error) => return Err(error),
        }
        values
            .put_fenced(&hint_name, constant, text.as_bytes())
            .await?;
        let level = lease_core::backend::fencing_token(token);
        Ok(leases.keys().map(|range| (*range, level)).collect())
    }

    async fn release_all(&self, leases: &BTreeMap<Partition, Lease>) {
        for lease in leases.values() {
            if let Err(error) = self
                .store
                .release(lease.key(), lease.token(), lease.fencing_token())
                .await
            {
                tracing::warn!(key = %lease.key(), %error, "lessor: release failed; the lease will expire");
            }
        }
    }

    async fn grant(
        &self,
        partition_key: &str,
        partition: Partition,
        duration: Duration,
    ) -> Result<BTreeMap<Partition, Lease>, LeaseError> {
        let mut mine: BTreeMap<Partition, Lease> = BTreeMap::new();
        let wanted = PartitionSet::from(partition);
        // What others hold, as of the latest listing: none before the first. The first round
        // acquires the whole range blind and lists once to check it; only a collision (or a
        // range partly held) costs another round.
        let mut held: Option<PartitionSet> = None;
        for round in 0..self.rounds {
            let mut covered = PartitionSet::new();
            for range in mine.keys() {
                covered.insert(*range);
            }
            let free = match &held {
                Some(held) => wanted.difference(held).difference(&covered),
                None => wanted.clone(),
            };
            if free.is_empty() {
                break;
            }
            let (acquired_all, acquired_any) = match self
                .try_acquire_free(partition_key, &free, duration, &mut mine)
                .await
            {
                Ok(outcome) => outcome,
                Err(error) => {
                    self.release_all(&mine).await;
                    return Err(error);
                }
            };
            if !acquired_any && held.is_some() {
                break;
            }
            // List (once per round): give back whatever overlaps someone else's live record.
            let others = match self.held(partition_key, &mine).await {
                Ok(others) => others,
                Err(error) => {
                    self.release_all(&mine).await;
                    return Err(error);
                }
            };
            let clashing: BTreeMap<Partition, Lease> = mine
                .iter()
                .filter(|(range, _)| others.overlaps(range))
                .map(|(range, lease)| (*range, lease.clone()))
                .collect();
            held = Some(others);
            if clashing.is_empty() {
                if acquired_all {
                    break;
                }
                continue;
            }
            tracing::debug!(
                section = partition_key,
                clashes = clashing.len(),
                round,
                "lessor: overlapping grant, giving back"
            );
            self.release_all(&clashing).await;
            self.compact(&clashing).await;
            mine.retain(|range, _| !clashing.contains_key(range));
        }
        Ok(mine)
    }

    /// One attempt at every piece of `free` (those nobody holds are taken), into `mine`: whether it got all of
    /// them, and whether any. One request per piece.
    async fn try_acquire_free(
        &self,
        partition_key: &str,
        free: &PartitionSet,
        duration: Duration,
        mine: &mut BTreeMap<Partition, Lease>,
    ) -> Result<(bool, bool), LeaseError> {
        let (mut all, mut any) = (true, false);
        for piece in free.iter() {
            let key = LeaseKey::with_sort_key(partition_key, piece.to_string())?;
            let options = AcquireOptions::default().with_owner("lessor");
            match self.store.try_acquire(&key, duration, &options).await {
                Ok(lease) => {
                    any = true;
                    mine.insert(*piece, lease);
                }
                Err(error) if error.is_held() => all = false,
                Err(error) => return Err(error),
            }
        }
        Ok((all, any))
    }

    /// With [`with_compaction`](Self::with_compaction): deletes the records of `released`
    /// leases, each with the compare-and-delete on the free record at its fencing counter
    /// ([`LeaseBackend::delete`]), so a record someone acquired meanwhile stays. One request per
    /// record; nothing on a store that cannot delete (the records are kept).
    async fn compact(&self, released: &BTreeMap<Partition, Lease>) {
        if !self.compact {
            return;
        }
        for lease in released.values() {
            match self
                .store
                .delete(lease.key(), None, Some(lease.fencing_token()))
                .await
            {
                Ok(()) => {}
                Err(error) if error.is_unsupported() => return,
                Err(error) => {
                    tracing::debug!(key = %lease.key(), %error, "lessor: released record changed; kept");
                }
            }
        }
    }
}

impl Lessor for StoreLessor {
    fn with_lease<'a>(
        &'a self,
        section: &'a str,
        partition: Partition,
        duration: Duration,
        callback: LeaseCallback<'a>,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(async move {
            validate_duration(duration)?;
            let partition_key = format!("lessor/{section}");
            // Validates the section as a key part before anything is written.
            let section_key = LeaseKey::new(partition_key.as_str())?;
            let clock = self.store.clock();
            let sent = clock.monotonic();
            let leases = self.grant(&partition_key, partition, duration).await?;
            let deadline = leases
                .values()
                .map(Lease::deadline)
                .min()
                .unwrap_or_else(|| {
                    lease_core::backend::holder_deadline(
                        sent,
                        duration,
                        lease_core::backend::default_safety_margin(duration),
                    )
                });
            let tokens = match self.tokens(&partition_key, &leases).await {
                Ok(tokens) => tokens,
                Err(error) => {
                    self.release_all(&leases).await;
                    self.compact(&leases).await;
                    return Err(error);
                }
            };
            if clock.monotonic() >= deadline {
                // The floor's write may have landed after the leases expired, when the next
                // holder of a range could already have read the floor below it: this grant's
                // tokens are not known to be greater, so it is never used.
                self.release_all(&leases).await;
                self.compact(&leases).await;
                tracing::warn!(
                    section,
                    "lessor: the grant's deadline passed before its tokens were fenced"
                );
                return Err(LeaseError::lost(section_key, LossReason::DeadlinePassed));
            }
            let grant = Grant {
                partitions: leases.keys().copied().collect(),
                deadline,
                leases: tokens,
            };
            tracing::debug!(section, requested = %partition, granted = %grant.partitions, "lessor: granted");
            let outcome = Race {
                work: callback(grant),
                timer: clock.sleep(deadline.saturating_duration_since(clock.monotonic())),
            }
            .await;
            self.release_all(&leases).await;
            self.compact(&leases).await;
            if outcome {
                Ok(())
            } else {
                tracing::warn!(
                    section,
                    "lessor: callback outlived its lease deadline and was dropped"
                );
                Err(LeaseError::lost(section_key, LossReason::DeadlinePassed))
            }
        })
    }
}

/// How many candidate tokens a grant checks against the section's guard before it gives up.
const TOKEN_ATTEMPTS: u32 = 8;

/// The most stale records one call deletes: a section left with many by callers that died (or
/// by a version that kept every record) is cleaned over several calls, each at a bounded cost.
const SWEEP_PER_CALL: usize = 64;

/// Completes with `true` when `work` finishes first, `false` when `timer` does.
struct Race<'a> {
    work: BoxFuture<'a, ()>,
    timer: BoxFuture<'static, ()>,
}

impl Future for Race<'_> {
    type Output = bool;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        if self.work.as_mut().poll(cx).is_ready() {
            return Poll::Ready(true);
        }
        if self.timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(false);
        }
        Poll::Pending
    }
}

/// Makes a lessor; registered under an id with [`Registry::register`].
pub type LessorFactory = Arc<dyn Fn() -> Result<Arc<dyn Lessor>, LeaseError> + Send + Sync>;

/// Lessor implementations by id (LUCI's `lessor.Register` / `lessor.Get`), in a registry the
/// application owns: make one at start-up, register the lessors the deployment offers, and pass
/// it (or an `Arc` of it) to whatever picks a lessor by its configured id. Usable from any
/// thread.
///
/// ```
/// use lessor_partition::{Registry, StoreLessor};
/// use lease_core::MemoryBackend;
/// use std::sync::Arc;
///
/// let registry = Registry::new();
/// registry.register("memory", Arc::new(|| Ok(Arc::new(StoreLessor::new(Arc::new(MemoryBackend::new()))?) as _)))?;
/// assert!(registry.get("memory").is_ok());
/// assert!(registry.get("spanner").is_err());
/// assert!(registry.register("memory", Arc::new(|| Err(lease_core::LeaseError::invalid("demo", "never built")))).is_err());
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
#[derive(Default)]
pub struct Registry {
    factories: Mutex<BTreeMap<String, LessorFactory>>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let factories = self
            .factories
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Registry")
            .field("ids", &factories.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `factory` under `id`.
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] (field "lessor id") if `id` is taken.
    pub fn register(
        &self,
        id: impl Into<String>,
        factory: LessorFactory,
    ) -> Result<(), LeaseError> {
        let id = id.into();
        let mut factories = self
            .factories
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if factories.contains_key(&id) {
            return Err(LeaseError::invalid(
                "lessor id",
                format!("a lessor is already registered as {id:?}"),
            ));
        }
        tracing::debug!(%id, "lessor registered");
        factories.insert(id, factory);
        Ok(())
    }

    /// A lessor made by the factory registered under `id`.
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] (field "lessor id"), or the factory's own error.
    pub fn get(&self, id: &str) -> Result<Arc<dyn Lessor>, LeaseError> {
        let factory = self
            .factories
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
            .ok_or_else(|| {
                LeaseError::invalid("lessor id", format!("no lessor is registered as {id:?}"))
            })?;
        factory()
    }
}

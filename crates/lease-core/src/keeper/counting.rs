//! Counting leases: at most N holders of one name, each in a slot that is a lease of its own.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::{LeaseGuardBuilder, Target};
use crate::contract::wait_for_lease;
use crate::options::AcquireOptions;
use crate::wait::{WaitOptions, start_below};
use crate::{BoxFuture, Holder, Lease, LeaseBackend, LeaseError, LeaseKey, LeaseRecord};

/// At most `N` concurrent holders of one name (a semaphore), over any [`LeaseBackend`].
///
/// Each holder holds one **slot**, and slot `i` is an ordinary lease on a key derived from the
/// name, so everything a lease does a slot does: it expires when its holder stops renewing (a
/// crashed holder frees its slot by itself), [`LeaseGuard`](crate::LeaseGuard) keeps it alive
/// unchanged, and its fencing token is strictly greater than every earlier one *of that slot*.
/// Fencing tokens of different slots are unrelated: a resource fenced by a counting lease keeps
/// the highest token per slot ([`slot_of`](Self::slot_of) names the slot of a lease).
///
/// ```
/// use lease_core::{CountingLease, LeaseKey, MemoryBackend, WaitOptions};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let store = Arc::new(MemoryBackend::new());
/// let backfills = CountingLease::new(LeaseKey::new("backfill")?, 2)?;
/// let d = Duration::from_secs(30);
/// let first = backfills.lease(store.clone(), d).acquire_blocking()?;
/// let second = backfills.lease(store.clone(), d).acquire_blocking()?;
/// assert_ne!(backfills.slot_of(first.key()), backfills.slot_of(second.key()));
/// // A third is turned away while both slots are held, and told about a holder.
/// let once = WaitOptions::new(Duration::ZERO);
/// let busy = backfills.lease(store.clone(), d).with_wait(once.clone()).acquire_blocking().unwrap_err();
/// assert!(busy.is_held() && busy.holder().is_some());
/// // A slot is a lease: release it as any other.
/// let (first_key, first_token) = (first.key().clone(), first.fencing_token());
/// first.release()?;
/// let third = backfills.lease(store, d).with_wait(once).acquire_blocking()?;
/// assert_eq!(third.key(), &first_key, "the freed slot");
/// assert!(third.fencing_token() > first_token, "fencing grows per slot");
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
///
/// # Slot keys
///
/// Slot 0 is the name itself, so a counting lease of one holder *is* the plain lease of that
/// name. Slot `i >= 1` of a name written `K` (`PARTITION` or `PARTITION#SORT`) is the key written
/// `K#slot-i`, split at its first `#`: slot 2 of `backfill` is partition `backfill`, sort key
/// `slot-2`; slot 2 of `tenant-7#export` is partition `tenant-7`, sort key `export#slot-2`.
/// The names are stable (other languages can share the slots) and stay in the name's
/// partition, so one [`list_partition`](crate::LeaseListing::list_partition) reads every slot.
/// Do not name other leases of that partition like slots.
///
/// # What "at most N" means
///
/// A holder takes only slots below its own `N`, and a slot has at most one holder, so at any
/// instant the holders number at most the *largest* `N` any of them acquired with. When `N`
/// shrinks between runs, holders of an older, larger `N` keep their slots `>= N` until they end
/// (release, or expiry); newcomers meanwhile wait for slots below the new `N`, so the count falls
/// to the new `N` as the old holders end. When `N` grows, newcomers use the new slots at once.
/// No slot ever has two holders, whatever the mix of `N`s. The time assumptions are a lease's
/// (`docs/correctness.md`).
///
/// # Cost
///
/// Each attempt starts at a slot chosen once per thread at random (so
/// processes spread over the slots, and a thread that takes and gives back a slot in a loop
/// finds the same one free again) and tries slots in turn, one [`LeaseBackend::try_acquire`]
/// each, until one is granted: **one request when that slot is free**; with `k` of `N` slots
/// held, about `(N + 1) / (N - k + 1)` requests averaged over starting slots; `N` requests when
/// all are held. Releasing or renewing a slot is one request, as for any lease.
/// [`slots`](Self::slots) is one listing where the backend offers [`LeaseListing`](crate::LeaseListing),
/// else one read per slot.
#[derive(Clone, PartialEq, Eq)]
pub struct CountingLease {
    name: LeaseKey,
    /// The key of each slot below the limit, slot 0 (the name) first.
    slots: Vec<LeaseKey>,
}

/// How many waiters' wake-ups a waiting acquire asks the backend for (the first slots'): past a
/// few, polling with backoff costs less than one watcher per slot.
const MAX_WATCHED_SLOTS: usize = 32;

impl CountingLease {
    /// The most holders a counting lease may allow: a full round costs one request per slot.
    pub const MAX_HOLDERS: u32 = 1024;

    /// At most `holders` concurrent holders of `name`.
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] if `holders` is 0 or above [`MAX_HOLDERS`](Self::MAX_HOLDERS),
    /// or if the key of the last slot would be too long
    /// ([`MAX_KEY_PART_BYTES`](crate::MAX_KEY_PART_BYTES)).
    pub fn new(name: LeaseKey, holders: u32) -> Result<Self, LeaseError> {
        if holders == 0 || holders > Self::MAX_HOLDERS {
            return Err(LeaseError::invalid(
                "holders",
                format!(
                    "{holders} is outside 1..={}; a counting lease has at least one slot",
                    Self::MAX_HOLDERS
                ),
            ));
        }
        let slots = (0..holders)
            .map(|slot| slot_key(&name, slot))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { name, slots })
    }

    /// The name shared by every slot (slot 0's key).
    pub fn name(&self) -> &LeaseKey {
        &self.name
    }

    /// The most holders this counting lease lets in at once: its `N`.
    pub fn limit(&self) -> u32 {
        u32::try_from(self.slots.len()).unwrap_or(Self::MAX_HOLDERS)
    }

    /// The key of `slot`, if it is below the limit.
    ///
    /// ```
    /// use lease_core::{CountingLease, LeaseKey};
    ///
    /// let workers = CountingLease::new(LeaseKey::with_sort_key("tenant-7", "export")?, 3)?;
    /// assert_eq!(workers.slot_key(0), Some(workers.name()));
    /// assert_eq!(workers.slot_key(2).map(ToString::to_string).as_deref(), Some("tenant-7#export#slot-2"));
    /// assert_eq!(workers.slot_key(3), None);
    /// # Ok::<(), lease_core::LeaseError>(())
    /// ```
    pub fn slot_key(&self, slot: u32) -> Option<&LeaseKey> {
        self.slots.get(usize::try_from(slot).ok()?)
    }

    /// The slot `key` names for this counting lease's name, whatever the limit (a slot at or
    /// above it belongs to a holder that acquired with a larger `N`); `None` for any other key.
    pub fn slot_of(&self, key: &LeaseKey) -> Option<u32> {
        if *key == self.name {
            return Some(0);
        }
        if key.partition() != self.name.partition() {
            return None;
        }
        let sort = key.sort()?;
        let number = match self.name.sort() {
            Some(name) => sort.strip_prefix(name)?.strip_prefix(SLOT_MARK)?,
            None => sort.strip_prefix(&SLOT_MARK[1..])?,
        };
        let slot: u32 = number.parse().ok()?;
        // Only the canonical spelling: `slot-01` and `slot-0` are other leases.
        (slot >= 1 && slot.to_string() == number).then_some(slot)
    }

    /// A [`LeaseGuardBuilder`] that takes a free slot for `duration` from `backend` and keeps it.
    /// Each attempt tries the slots in turn from this thread's starting slot until one is granted
    /// (see *Cost*); while every slot is held it waits as set
    /// ([`with_wait`](LeaseGuardBuilder::with_wait); default: until a slot is free), woken early by
    /// a release where the backend can tell. The guard's [`key`](crate::LeaseGuard::key) is the
    /// slot's ([`slot_of`](Self::slot_of) names it).
    ///
    /// Errors (from `acquire`): [`LeaseError::Held`] naming this counting lease's name after a
    /// single attempt while every slot is held, with the holder whose lease expires first;
    /// [`LeaseError::Timeout`] when waiting runs out; any other error of a slot's attempt at
    /// once (a slot granted unknowingly by a failed attempt is never renewed and expires).
    pub fn lease(&self, backend: Arc<dyn LeaseBackend>, duration: Duration) -> LeaseGuardBuilder {
        LeaseGuardBuilder::new(backend, Target::Slots(self.clone()), duration)
    }

    /// Takes a slot, waiting as `wait` says: what a [`LeaseGuardBuilder`] of [`lease`](Self::lease)
    /// runs.
    pub(crate) async fn acquire_slot<B: LeaseBackend + ?Sized>(
        &self,
        backend: &B,
        duration: Duration,
        wait: &WaitOptions,
        options: &AcquireOptions,
    ) -> Result<Lease, LeaseError> {
        let attempt = |options: AcquireOptions| async move {
            self.try_acquire(backend, duration, &options).await
        };
        let changed = || self.any_slot_changed(backend);
        wait_for_lease(backend.clock(), &self.name, wait, options, attempt, changed).await
    }

    /// The record of every slot on record, by slot, slots at or above the limit included (held
    /// by holders of a larger `N`). Slots the store has never seen are left out; a released or
    /// expired slot is reported with its record (check [`LeaseRecord::is_held_at`]).
    ///
    /// Costs one [`list_partition`](crate::LeaseListing::list_partition) where the backend
    /// offers it, else one [`inspect`](LeaseBackend::inspect) per slot below the limit.
    ///
    /// # Errors
    /// The listing's or a read's error.
    pub fn slots<'a, B: LeaseBackend + ?Sized>(
        &'a self,
        backend: &'a B,
    ) -> BoxFuture<'a, Result<Vec<(u32, LeaseRecord)>, LeaseError>> {
        Box::pin(async move {
            let mut found = Vec::new();
            if let Some(listing) = backend.as_listing() {
                for record in listing.list_partition(self.name.partition()).await? {
                    if let Some(slot) = self.slot_of(record.key()) {
                        found.push((slot, record));
                    }
                }
            } else {
                for (slot, key) in (0u32..).zip(&self.slots) {
                    if let Some(record) = backend.inspect(key).await? {
                        found.push((slot, record));
                    }
                }
            }
            found.sort_by_key(|(slot, _)| *slot);
            Ok(found)
        })
    }

    /// One attempt: each slot in turn from this thread's starting slot until one is granted.
    pub(crate) async fn try_acquire<B: LeaseBackend + ?Sized>(
        &self,
        backend: &B,
        duration: Duration,
        options: &AcquireOptions,
    ) -> Result<Lease, LeaseError> {
        crate::lease::validate_duration(duration)?;
        let limit = self.limit();
        let start = start_below(limit);
        let mut first_to_expire: Option<Holder> = None;
        for step in 0..limit {
            let slot = (start + step) % limit;
            let Some(key) = self.slot_key(slot) else {
                continue;
            };
            match backend.try_acquire(key, duration, options).await {
                Ok(lease) => {
                    tracing::debug!(name = %self.name, slot, fencing = %lease.fencing_token(), tried = step + 1, "counting lease slot acquired");
                    return Ok(lease);
                }
                Err(error) if error.is_held() => {
                    let holder = error.holder().cloned().unwrap_or_default();
                    if first_to_expire
                        .as_ref()
                        .is_none_or(|first| expires_earlier(&holder, first))
                    {
                        first_to_expire = Some(holder);
                    }
                }
                Err(error) => return Err(error),
            }
        }
        tracing::debug!(name = %self.name, limit, "every slot of the counting lease is held");
        Err(LeaseError::held(self.name.clone(), first_to_expire))
    }

    fn any_slot_changed<'a, B: LeaseBackend + ?Sized>(
        &'a self,
        backend: &'a B,
    ) -> Option<BoxFuture<'a, ()>> {
        let watched: Vec<_> = self
            .slots
            .iter()
            .take(MAX_WATCHED_SLOTS)
            .filter_map(|key| backend.changed(key))
            .collect();
        (!watched.is_empty()).then(|| Box::pin(AnyOf(watched)) as BoxFuture<'a, ()>)
    }
}

/// Between a name and a slot number in a slot's sort key (`export#slot-2`); without the `#`
/// when the name has no sort key (`slot-2`).
const SLOT_MARK: &str = "#slot-";

fn slot_key(name: &LeaseKey, slot: u32) -> Result<LeaseKey, LeaseError> {
    if slot == 0 {
        return Ok(name.clone());
    }
    let sort = match name.sort() {
        Some(sort) => format!("{sort}{SLOT_MARK}{slot}"),
        None => format!("{}{slot}", &SLOT_MARK[1..]),
    };
    LeaseKey::with_sort_key(name.partition(), sort)
}

/// Whether `a`'s lease ends before `b`'s (an unknown expiry counts as last).
fn expires_earlier(a: &Holder, b: &Holder) -> bool {
    match (a.expires_at(), b.expires_at()) {
        (Some(a), Some(b)) => a < b,
        (Some(_), None) => true,
        _ => false,
    }
}

impl fmt::Debug for CountingLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingLease")
            .field("name", &self.name)
            .field("limit", &self.slots.len())
            .finish()
    }
}

/// Completes when any of its futures does.
struct AnyOf<'a>(Vec<BoxFuture<'a, ()>>);

impl Future for AnyOf<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.iter_mut().any(|f| f.as_mut().poll(cx).is_ready()) {
            self.0.clear();
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> LeaseKey {
        match text.split_once('#') {
            Some((p, s)) => LeaseKey::with_sort_key(p, s),
            None => LeaseKey::new(text),
        }
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn slot_keys_are_the_name_then_name_hash_slot_i() {
        for name in ["backfill", "tenant-7#export", "a#b#c"] {
            let counting = CountingLease::new(key(name), 12).unwrap_or_else(|e| panic!("{e}"));
            for slot in 0..12 {
                let k = counting
                    .slot_key(slot)
                    .unwrap_or_else(|| panic!("slot {slot}"));
                let written = if slot == 0 {
                    name.to_owned()
                } else {
                    format!("{name}#slot-{slot}")
                };
                assert_eq!(*k, key(&written), "{name} slot {slot}");
                assert_eq!(counting.slot_of(k), Some(slot));
            }
            // Larger N's slots are recognised; other keys are not.
            assert_eq!(counting.slot_of(&key(&format!("{name}#slot-99"))), Some(99));
            for other in ["slot-01", "slot-0", "slot-", "slot-x", "slots-1"] {
                assert_eq!(counting.slot_of(&key(&format!("{name}#{other}"))), None);
            }
            assert_eq!(counting.slot_of(&key("elsewhere#slot-1")), None);
        }
    }

    #[test]
    fn the_limit_is_checked() {
        assert!(CountingLease::new(key("k"), 0).is_err());
        assert!(CountingLease::new(key("k"), CountingLease::MAX_HOLDERS + 1).is_err());
        let long = format!("k#{}", "s".repeat(crate::MAX_KEY_PART_BYTES - 3));
        assert!(
            CountingLease::new(key(&long), 1).is_ok(),
            "slot 0 is the name"
        );
        let err = CountingLease::new(key(&long), 2).unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
    }
}

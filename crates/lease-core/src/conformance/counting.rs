//! The counting-lease cases: [`CountingLease`] over the backend under test.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{D, Subject, must};
use crate::{
    AcquireOptions, BoxFuture, CountingLease, FencingToken, Lease, LeaseBackendExt, LeaseError,
    LeaseKey, WaitOptions,
};

fn counting(name: LeaseKey, limit: u32) -> CountingLease {
    must(CountingLease::new(name, limit), "a counting lease")
}

async fn take(s: &Subject, counting: &CountingLease) -> Result<Lease, LeaseError> {
    counting
        .try_acquire(s.backend().as_ref(), D, &AcquireOptions::default())
        .await
}

fn slot(counting: &CountingLease, lease: &Lease) -> u32 {
    counting
        .slot_of(lease.key())
        .unwrap_or_else(|| panic!("{} is not a slot of {}", lease.key(), counting.name()))
}

/// The slots held at the clock's now, by slot.
async fn held_slots(s: &Subject, counting: &CountingLease) -> BTreeMap<u32, FencingToken> {
    let now = crate::Clock::now(s.clock().as_ref());
    must(counting.slots(s.backend().as_ref()).await, "list the slots")
        .into_iter()
        .filter(|(_, record)| record.is_held_at(now))
        .map(|(slot, record)| (slot, record.fencing()))
        .collect()
}

/// N holders get N distinct slots; the next is held off with a holder named; a released slot
/// is taken again with a greater fencing token; `slots` reports every holder.
pub fn counting_lease_admits_at_most_n(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        for name in [
            s.key("counting"),
            must(
                LeaseKey::with_sort_key(s.key("counting-sorted").partition(), "jobs"),
                "key",
            ),
        ] {
            let three = counting(name.clone(), 3);
            let mut leases = Vec::new();
            for _ in 0..3 {
                leases.push(must(take(s, &three).await, "a free slot"));
            }
            let slots: std::collections::BTreeSet<u32> =
                leases.iter().map(|l| slot(&three, l)).collect();
            assert_eq!(
                slots.len(),
                3,
                "three holders, three distinct slots: {slots:?}"
            );
            assert!(slots.iter().all(|slot| *slot < 3), "{slots:?}");
            let err = take(s, &three).await.expect_err("a fourth holder");
            assert!(err.is_held(), "a full counting lease is held: {err}");
            assert_eq!(err.key(), Some(&name), "the error names the counting lease");
            assert!(err.holder().is_some(), "the error tells of a holder: {err}");
            assert_eq!(
                held_slots(s, &three).await.len(),
                3,
                "slots reports all three"
            );

            let freed = leases.remove(1);
            must(s.backend().release_lease(&freed).await, "release a slot");
            let again = must(take(s, &three).await, "the freed slot");
            assert_eq!(again.key(), freed.key(), "the only free slot");
            assert!(
                again.fencing_token() > freed.fencing_token(),
                "fencing grows per slot"
            );
            assert!(take(s, &three).await.is_err_and(|e| e.is_held()));
            // A slot is a lease: renewed as any other, by its holder only.
            let renewed = must(s.backend().renew(&again, D).await, "renew a slot");
            assert_eq!(renewed.fencing_token(), again.fencing_token());
            for lease in leases.iter().chain([&renewed]) {
                must(s.backend().release_lease(lease).await, "release");
            }
            assert!(held_slots(s, &three).await.is_empty());
        }
    })
}

/// Holders that crash free their slots by expiry; every slot's fencing tokens only grow.
pub fn counting_lease_slots_expire_and_fence(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let two = counting(s.key("counting-expiry"), 2);
        let mut last: BTreeMap<u32, FencingToken> = BTreeMap::new();
        for round in 0..3 {
            for _ in 0..2 {
                let lease = must(take(s, &two).await, "a slot");
                let slot = slot(&two, &lease);
                if let Some(before) = last.insert(slot, lease.fencing_token()) {
                    assert!(
                        lease.fencing_token() > before,
                        "round {round}: slot {slot}'s fencing token went from {before} to {}",
                        lease.fencing_token()
                    );
                }
            }
            assert!(take(s, &two).await.is_err_and(|e| e.is_held()));
            // Both holders "crash": nobody renews, nobody releases.
            s.clock().advance(D / 2);
            assert!(
                take(s, &two).await.is_err_and(|e| e.is_held()),
                "still held halfway through"
            );
            s.expire(D / 2);
        }
        assert_eq!(last.len(), 2, "both slots were used");
    })
}

/// `N` may change between holders: a newcomer takes only slots below its own `N`, and no slot
/// ever has two holders.
pub fn counting_lease_limit_changes_never_share_a_slot(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let name = s.key("counting-limit");
        let (three, two, five) = (
            counting(name.clone(), 3),
            counting(name.clone(), 2),
            counting(name, 5),
        );
        let mut old = Vec::new();
        for _ in 0..3 {
            old.push(must(take(s, &three).await, "an old holder"));
        }
        assert!(
            take(s, &two).await.is_err_and(|e| e.is_held()),
            "a smaller N is full while its slots are held"
        );
        let top = old
            .iter()
            .position(|l| slot(&three, l) == 2)
            .expect("slot 2 is held");
        let top = old.remove(top);
        must(s.backend().release_lease(&top).await, "slot 2 released");
        assert!(
            take(s, &two).await.is_err_and(|e| e.is_held()),
            "slot 2 is not below the new N"
        );
        let low = old.remove(0);
        must(s.backend().release_lease(&low).await, "a low slot released");
        let newcomer = must(take(s, &two).await, "the freed low slot");
        assert_eq!(newcomer.key(), low.key());
        // A larger N uses the slots above the old ones at once.
        let grown = [
            must(take(s, &five).await, "slot of N=5"),
            must(take(s, &five).await, "slot of N=5"),
            must(take(s, &five).await, "slot of N=5"),
        ];
        let held = held_slots(s, &five).await;
        assert_eq!(held.len(), 5, "five distinct slots held: {held:?}");
        assert!(take(s, &five).await.is_err_and(|e| e.is_held()));
        // Every holder's slot is its own: each renews, none is another's.
        for lease in old.iter().chain([&newcomer]).chain(&grown) {
            must(s.backend().renew(lease, D).await, "each holder renews");
        }
    })
}

/// A waiting acquire of a full counting lease takes the first slot that frees up (a crashed
/// holder's expiry here), and a timeout names the counting lease.
pub fn counting_lease_waits_for_a_slot(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let two = counting(s.key("counting-wait"), 2);
        let kept = must(take(s, &two).await, "a slot kept alive");
        let crashed = must(take(s, &two).await, "a holder that crashes");
        s.clock().advance(D / 2);
        let kept = must(
            s.backend().renew(&kept, D).await,
            "renewed past the other's expiry",
        );
        let backend = s.backend().as_ref();
        s.clock().set_auto_advance(true);
        let short = WaitOptions::new(D / 4)
            .with_backoff(Duration::from_millis(10), Duration::from_millis(500));
        let err = two
            .acquire_slot(backend, D, &short, &AcquireOptions::default())
            .await
            .expect_err("times out while both are held");
        assert!(err.is_timeout(), "{err}");
        assert_eq!(err.key(), Some(two.name()), "{err}");
        assert!(err.holder().is_some(), "the timeout names a holder: {err}");
        let long = WaitOptions::new(D * 3)
            .with_backoff(Duration::from_millis(10), Duration::from_secs(60));
        let next = two
            .acquire_slot(backend, D, &long, &AcquireOptions::default())
            .await;
        s.clock().set_auto_advance(false);
        let next = must(next, "wait for a slot");
        assert_eq!(
            next.key(),
            crashed.key(),
            "the crashed holder's slot, not the kept one"
        );
        assert!(next.fencing_token() > crashed.fencing_token());
        let kept = must(
            s.backend().renew(&kept, D).await,
            "the kept slot is still its holder's",
        );
        for lease in [&kept, &next] {
            must(backend.release_lease(lease).await, "release");
        }
    })
}

/// A slot's acquire whose reply is lost while another holder takes a slot: the retry still
/// reports the slot this call's write took, and the two holders have distinct slots.
pub fn counting_lease_survives_lost_replies(s: &Subject) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let two = Arc::new(counting(s.key("counting-lost"), 2));
        let Some(faults) = s.faults.clone() else {
            return;
        };
        let other = Arc::new(Mutex::new(None));
        let meanwhile = {
            let (backend, two, other) = (s.backend().clone(), two.clone(), other.clone());
            Box::pin(async move {
                let won = two
                    .try_acquire(backend.as_ref(), D, &AcquireOptions::default())
                    .await;
                *other.lock().unwrap_or_else(PoisonError::into_inner) = Some(won);
            })
        };
        faults.lose_next_reply(Some(meanwhile));
        let mine = must(take(s, &two).await, "a slot with its reply lost");
        let theirs = other
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .expect("the other holder ran between the lost reply and the retry");
        let theirs = must(theirs, "the other holder's slot");
        assert_ne!(mine.key(), theirs.key(), "two holders of one slot");
        assert!(take(s, &two).await.is_err_and(|e| e.is_held()));
        for lease in [&mine, &theirs] {
            must(s.backend().renew(lease, D).await, "each holds its own slot");
            must(s.backend().release_lease(lease).await, "release");
        }
        assert!(held_slots(s, &two).await.is_empty());
    })
}

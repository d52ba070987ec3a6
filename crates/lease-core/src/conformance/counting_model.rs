//! A reference model of counting leases for property tests.
//!
//! [`check_counting_against_model`] plays a sequence of [`CountingOp`]s from several clients,
//! each acquiring one counting lease with a limit of its own (the limit changes between
//! acquisitions), against the backend and a pure model of its slots. It fails on the first step
//! where they disagree, where a slot's fencing token does not grow, and, at every instant, where
//! two clients trust one slot or more clients trust a slot than the largest limit they acquired
//! with. Acquisitions may have their replies lost ([`Subject::with_reply_faults`]) and clients
//! may pause (the clock moves while a holder does nothing, so its lease lapses unrenewed).
//! [`counting_ops`] is the proptest strategy.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;

use super::Subject;
use crate::{
    AcquireOptions, Clock, CountingLease, FencingToken, Lease, LeaseBackendExt, LeaseError,
    LeaseToken,
};

/// One step of a client, or of time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CountingOp {
    /// `client`, holding no slot, tries once to take a slot of the counting lease with `limit`
    /// holders, its reply lost if `lose_reply` (where the subject can lose replies).
    Acquire {
        /// Which client.
        client: usize,
        /// Its `N`.
        limit: u32,
        /// Lose the reply of the slot's write (the backend retries and reconciles).
        lose_reply: bool,
    },
    /// `client` renews its slot, if it holds one.
    Renew {
        /// Which client.
        client: usize,
    },
    /// `client` releases its slot, if it holds one.
    Release {
        /// Which client.
        client: usize,
    },
    /// `client` pauses for `millis` (a GC pause, SIGSTOP): the clock moves while it does nothing.
    Pause {
        /// Which client.
        client: usize,
        /// For this many milliseconds.
        millis: u64,
    },
}

/// Sequences of up to `max_len` operations by `clients` clients with limits `1..=max_limit`,
/// with pauses that land before, on and after the expiry of leases of `duration`.
pub fn counting_ops(
    clients: usize,
    max_limit: u32,
    duration: Duration,
    max_len: usize,
) -> impl Strategy<Value = Vec<CountingOp>> {
    let d = u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(4);
    let op = prop_oneof![
        4 => (0..clients, 1..=max_limit, proptest::bool::weighted(0.2)).prop_map(
            |(client, limit, lose_reply)| CountingOp::Acquire { client, limit, lose_reply }
        ),
        2 => (0..clients).prop_map(|client| CountingOp::Renew { client }),
        1 => (0..clients).prop_map(|client| CountingOp::Release { client }),
        2 => (0..clients, prop_oneof![Just(1u64), Just(d / 2), Just(d - 1), Just(d), Just(d + 1), 1..2 * d])
            .prop_map(|(client, millis)| CountingOp::Pause { client, millis }),
    ];
    proptest::collection::vec(op, 1..max_len)
}

#[derive(Debug, Default)]
struct ModelSlot {
    holder: Option<(LeaseToken, u64)>,
    last_fencing: Option<FencingToken>,
}

/// A client's slot: the lease, the slot and the limit it acquired with.
#[derive(Debug)]
struct Held {
    lease: Lease,
    slot: u32,
    limit: u32,
}

/// Plays `ops` against the subject's backend and the model; leases last `duration`. Every
/// client uses one counting lease name; slots may number up to the largest limit in `ops`.
///
/// # Errors
/// A description of the first disagreement or violation.
pub async fn check_counting_against_model(
    subject: &Subject,
    duration: Duration,
    ops: &[CountingOp],
) -> Result<(), String> {
    let mut run = CountingRun {
        subject,
        duration,
        delay_ms: u64::try_from(subject.takeover_delay.as_millis()).unwrap_or(u64::MAX),
        d_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        name: subject.key("counting-model"),
        slots: BTreeMap::new(),
        held: BTreeMap::new(),
        now_ms: 0,
    };
    for (step, op) in ops.iter().enumerate() {
        let fail = |what: String| format!("step {step} ({op:?}): {what}; ops = {ops:?}");
        match *op {
            CountingOp::Pause { millis, .. } => {
                subject.clock().advance(Duration::from_millis(millis));
                run.now_ms += millis;
            }
            CountingOp::Acquire {
                client,
                limit,
                lose_reply,
            } => run
                .acquire(client, limit, lose_reply)
                .await
                .map_err(&fail)?,
            CountingOp::Renew { client } => run.renew(client).await.map_err(&fail)?,
            CountingOp::Release { client } => run.release(client).await.map_err(&fail)?,
        }
        run.at_most_n_trusting().map_err(&fail)?;
    }
    Ok(())
}

struct CountingRun<'s> {
    subject: &'s Subject,
    duration: Duration,
    delay_ms: u64,
    d_ms: u64,
    name: crate::LeaseKey,
    slots: BTreeMap<u32, ModelSlot>,
    held: BTreeMap<usize, Held>,
    now_ms: u64,
}

fn kind<T>(result: &Result<T, LeaseError>) -> Result<&'static str, String> {
    match result {
        Ok(_) => Ok("Ok"),
        Err(e) if e.is_held() => Ok("Held"),
        Err(e) if e.is_not_owned() => Ok("NotOwned"),
        Err(e) => Err(format!("unexpected error: {e}")),
    }
}

impl CountingRun<'_> {
    fn is_free(&self, slot: u32) -> bool {
        self.slots
            .get(&slot)
            .and_then(|s| s.holder.as_ref())
            .is_none_or(|(_, expires)| self.now_ms >= expires + self.delay_ms)
    }

    async fn acquire(&mut self, client: usize, limit: u32, lose_reply: bool) -> Result<(), String> {
        if self.held.contains_key(&client) {
            return Ok(());
        }
        let counting = CountingLease::new(self.name.clone(), limit).map_err(|e| e.to_string())?;
        let free: BTreeSet<u32> = (0..limit).filter(|slot| self.is_free(*slot)).collect();
        if let Some(faults) = self.subject.faults.as_ref().filter(|_| lose_reply) {
            faults.lose_next_reply(None);
        }
        let result = counting
            .try_acquire(
                self.subject.backend().as_ref(),
                self.duration,
                &AcquireOptions::default(),
            )
            .await;
        let expect = if free.is_empty() { "Held" } else { "Ok" };
        let got = kind(&result)?;
        if got != expect {
            return Err(format!(
                "model says {expect} (free slots {free:?}), backend {result:?}"
            ));
        }
        let Ok(lease) = result else {
            return Ok(());
        };
        let slot = counting
            .slot_of(lease.key())
            .ok_or_else(|| format!("{} is not a slot", lease.key()))?;
        if !free.contains(&slot) {
            return Err(format!(
                "granted slot {slot}, which the model holds taken (free: {free:?})"
            ));
        }
        let state = self.slots.entry(slot).or_default();
        if let Some(last) = state
            .last_fencing
            .filter(|last| lease.fencing_token() <= *last)
        {
            return Err(format!(
                "slot {slot}'s fencing token {} is not above {last}",
                lease.fencing_token()
            ));
        }
        state.last_fencing = Some(lease.fencing_token());
        state.holder = Some((lease.token().clone(), self.now_ms + self.d_ms));
        self.held.insert(client, Held { lease, slot, limit });
        Ok(())
    }

    async fn renew(&mut self, client: usize) -> Result<(), String> {
        let Some(held) = self.held.get(&client) else {
            return Ok(());
        };
        let state = self.slots.entry(held.slot).or_default();
        let ours = state
            .holder
            .as_ref()
            .is_some_and(|(token, expires)| token == held.lease.token() && self.now_ms < *expires);
        let result = self
            .subject
            .backend()
            .renew(&held.lease, self.duration)
            .await;
        let (expect, got) = (if ours { "Ok" } else { "NotOwned" }, kind(&result)?);
        if got != expect {
            return Err(format!("model says {expect}, backend {result:?}"));
        }
        match result {
            Ok(renewed) if renewed.fencing_token() == held.lease.fencing_token() => {
                if let Some((_, expires)) = state.holder.as_mut() {
                    *expires = self.now_ms + self.d_ms;
                }
                if let Some(held) = self.held.get_mut(&client) {
                    held.lease = renewed;
                }
            }
            Ok(_) => return Err("renew changed the fencing token".into()),
            Err(_) => {
                self.held.remove(&client);
            }
        }
        Ok(())
    }

    async fn release(&mut self, client: usize) -> Result<(), String> {
        let Some(held) = self.held.remove(&client) else {
            return Ok(());
        };
        let state = self.slots.entry(held.slot).or_default();
        let ours = state
            .holder
            .as_ref()
            .is_some_and(|(token, _)| token == held.lease.token());
        let result = self.subject.backend().release_lease(&held.lease).await;
        let (expect, got) = (if ours { "Ok" } else { "NotOwned" }, kind(&result)?);
        if got != expect {
            return Err(format!("model says {expect}, backend {result:?}"));
        }
        if ours {
            state.holder = None;
        }
        Ok(())
    }

    /// At no instant do two clients trust one slot, or more clients trust slots than the
    /// largest limit among them.
    fn at_most_n_trusting(&self) -> Result<(), String> {
        check_trusted_slots(
            self.subject.clock().as_ref(),
            self.held
                .values()
                .map(|held| (held.slot, held.limit, &held.lease)),
        )
    }
}

/// The counting lease's promise at this instant, for the slots clients believe they hold:
/// `(slot, limit acquired with, lease)`. Among the leases `clock` says are trusted, no two are
/// of one slot, and they number at most the largest limit among them. Pause-injection tests
/// call it between the steps of real processes or threads.
///
/// ```
/// use lease_core::conformance::counting_model::check_trusted_slots;
/// use lease_core::{CountingLease, LeaseBackend, LeaseKey, MemoryBackend};
/// use pollster::block_on;
/// use std::time::Duration;
///
/// let store = MemoryBackend::new();
/// let two = CountingLease::new(LeaseKey::new("backfill")?, 2)?;
/// let once = lease_core::AcquireOptions::default();
/// let a = block_on(store.try_acquire(two.name(), Duration::from_secs(5), &once))?;
/// let second = two.slot_key(1).expect("two slots");
/// let b = block_on(store.try_acquire(second, Duration::from_secs(5), &once))?;
/// let slot = |l: &lease_core::Lease| two.slot_of(l.key()).unwrap_or(u32::MAX);
/// let held = [(slot(&a), 2, &a), (slot(&b), 2, &b)];
/// assert!(check_trusted_slots(store.clock(), held).is_ok());
/// // Had both been given slot 0, or had they acquired with a limit of 1, it would say so.
/// assert!(check_trusted_slots(store.clock(), [(0, 2, &a), (0, 2, &b)]).is_err());
/// assert!(check_trusted_slots(store.clock(), [(0, 1, &a), (1, 1, &b)]).is_err());
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
///
/// # Errors
/// A description of the violation, naming the trusted leases.
pub fn check_trusted_slots<'a>(
    clock: &dyn Clock,
    held: impl IntoIterator<Item = (u32, u32, &'a Lease)>,
) -> Result<(), String> {
    let trusting: Vec<(u32, u32, &Lease)> = held
        .into_iter()
        .filter(|(_, _, lease)| super::trusted(lease, clock))
        .collect();
    let slots: BTreeSet<u32> = trusting.iter().map(|(slot, _, _)| *slot).collect();
    if slots.len() < trusting.len() {
        return Err(format!("two clients trust one slot: {trusting:?}"));
    }
    let most = trusting
        .iter()
        .map(|(_, limit, _)| *limit)
        .max()
        .unwrap_or(0);
    if trusting.len() > usize::try_from(most).unwrap_or(usize::MAX) {
        return Err(format!(
            "{} clients trust slots of at most {most}: {trusting:?}",
            trusting.len()
        ));
    }
    Ok(())
}

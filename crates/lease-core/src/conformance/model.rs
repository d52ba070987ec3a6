//! A reference model of the contract for property tests.
//!
//! [`check_against_model`] plays a sequence of [`Op`]s from several clients against a backend
//! and against a pure model of the contract, and fails on the first step where they disagree, or
//! where two clients both trust a lease on the same key at the same instant. [`ops`] is the
//! proptest strategy for such sequences. Every backend runs it from a `proptest!` test.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;

use super::Subject;
use crate::{AcquireOptions, FencingToken, Lease, LeaseError, LeaseKey, LeaseToken};

/// One step of a client, or of time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `client` tries to acquire `key`.
    Acquire {
        /// Which client.
        client: usize,
        /// Which key.
        key: usize,
    },
    /// `client` renews its lease on `key`, if it has one.
    Renew {
        /// Which client.
        client: usize,
        /// Which key.
        key: usize,
    },
    /// `client` releases its lease on `key`, if it has one.
    Release {
        /// Which client.
        client: usize,
        /// Which key.
        key: usize,
    },
    /// The clock moves forward.
    Advance {
        /// By this many milliseconds.
        millis: u64,
    },
}

/// Sequences of up to `max_len` operations by `clients` clients on `keys` keys, with clock
/// advances that land before, on and after the expiry of leases of `duration`.
pub fn ops(
    clients: usize,
    keys: usize,
    duration: Duration,
    max_len: usize,
) -> impl Strategy<Value = Vec<Op>> {
    let d = u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(4);
    let op = prop_oneof![
        3 => (0..clients, 0..keys).prop_map(|(client, key)| Op::Acquire { client, key }),
        2 => (0..clients, 0..keys).prop_map(|(client, key)| Op::Renew { client, key }),
        1 => (0..clients, 0..keys).prop_map(|(client, key)| Op::Release { client, key }),
        2 => prop_oneof![
            Just(1u64),
            Just(d / 3),
            Just(d / 2),
            Just(d - 1),
            Just(d),
            Just(d + 1),
            1..2 * d,
        ]
        .prop_map(|millis| Op::Advance { millis }),
    ];
    proptest::collection::vec(op, 1..max_len)
}

#[derive(Debug, Clone)]
struct ModelHolder {
    token: LeaseToken,
    expires_ms: u64,
}

#[derive(Debug, Default)]
struct ModelKey {
    holder: Option<ModelHolder>,
    last_fencing: Option<FencingToken>,
}

/// What the model expects of one step.
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    Ok,
    Held,
    NotOwned,
}

fn outcome<T>(result: &Result<T, LeaseError>) -> Result<Expect, String> {
    match result {
        Ok(_) => Ok(Expect::Ok),
        Err(e) if e.is_held() => Ok(Expect::Held),
        Err(e) if e.is_not_owned() => Ok(Expect::NotOwned),
        Err(e) => Err(format!("unexpected error: {e}")),
    }
}

/// Plays `ops` against the subject's backend and the model; leases last `duration`.
///
/// # Errors
/// A description of the first disagreement or overlap.
pub async fn check_against_model(
    subject: &Subject,
    duration: Duration,
    ops: &[Op],
) -> Result<(), String> {
    let mut run = ModelRun {
        subject,
        duration,
        delay_ms: u64::try_from(subject.takeover_delay.as_millis()).unwrap_or(u64::MAX),
        d_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        keys: (0..8).map(|i| subject.key(&format!("model{i}"))).collect(),
        model: HashMap::new(),
        leases: HashMap::new(),
        now_ms: 0,
    };
    for (step, op) in ops.iter().enumerate() {
        let fail = |what: String| format!("step {step} ({op:?}): {what}; ops = {ops:?}");
        match *op {
            Op::Advance { millis } => {
                subject.clock().advance(Duration::from_millis(millis));
                run.now_ms += millis;
            }
            Op::Acquire { client, key } => run.acquire(client, key).await.map_err(&fail)?,
            Op::Renew { client, key } => run.renew(client, key).await.map_err(&fail)?,
            Op::Release { client, key } => run.release(client, key).await.map_err(&fail)?,
        }
        // The safety property: at no instant do two clients trust a lease on the same key.
        run.one_trusting_client().map_err(&fail)?;
    }
    Ok(())
}

/// The model, the backend, and the leases each client holds, during one
/// [`check_against_model`].
struct ModelRun<'s> {
    subject: &'s Subject,
    duration: Duration,
    delay_ms: u64,
    d_ms: u64,
    keys: Vec<LeaseKey>,
    model: HashMap<usize, ModelKey>,
    leases: HashMap<(usize, usize), Lease>,
    now_ms: u64,
}

impl ModelRun<'_> {
    async fn acquire(&mut self, client: usize, key: usize) -> Result<(), String> {
        let k = key % self.keys.len();
        let state = self.model.entry(k).or_default();
        let expect = match &state.holder {
            Some(h) if self.now_ms < h.expires_ms + self.delay_ms => Expect::Held,
            _ => Expect::Ok,
        };
        let result = self
            .subject
            .backend()
            .try_acquire(&self.keys[k], self.duration, &AcquireOptions::default())
            .await;
        let got = outcome(&result)?;
        if got != expect {
            return Err(format!("model says {expect:?}, backend {result:?}"));
        }
        if let Ok(lease) = result {
            if let Some(last) = state
                .last_fencing
                .filter(|last| lease.fencing_token() <= *last)
            {
                return Err(format!(
                    "fencing token {} not above {last}",
                    lease.fencing_token()
                ));
            }
            state.last_fencing = Some(lease.fencing_token());
            state.holder = Some(ModelHolder {
                token: lease.token().clone(),
                expires_ms: self.now_ms + self.d_ms,
            });
            self.leases.insert((client, k), lease);
        }
        Ok(())
    }

    async fn renew(&mut self, client: usize, key: usize) -> Result<(), String> {
        let k = key % self.keys.len();
        let Some(lease) = self.leases.get(&(client, k)).cloned() else {
            return Ok(());
        };
        let state = self.model.entry(k).or_default();
        let expect = match &state.holder {
            Some(h) if h.token == *lease.token() && self.now_ms < h.expires_ms => Expect::Ok,
            _ => Expect::NotOwned,
        };
        let result = self.subject.backend().renew(&lease, self.duration).await;
        let got = outcome(&result)?;
        if got != expect {
            return Err(format!("model says {expect:?}, backend {result:?}"));
        }
        match result {
            Ok(renewed) => {
                if renewed.fencing_token() != lease.fencing_token() {
                    return Err("renew changed the fencing token".into());
                }
                if let Some(h) = state.holder.as_mut() {
                    h.expires_ms = self.now_ms + self.d_ms;
                }
                self.leases.insert((client, k), renewed);
            }
            Err(_) => {
                self.leases.remove(&(client, k));
            }
        }
        Ok(())
    }

    async fn release(&mut self, client: usize, key: usize) -> Result<(), String> {
        let k = key % self.keys.len();
        let Some(lease) = self.leases.remove(&(client, k)) else {
            return Ok(());
        };
        let state = self.model.entry(k).or_default();
        let ours = state
            .holder
            .as_ref()
            .is_some_and(|h| h.token == *lease.token());
        let expect = if ours { Expect::Ok } else { Expect::NotOwned };
        let result = self
            .subject
            .backend()
            .release(&self.keys[k], lease.token(), lease.fencing_token())
            .await;
        let got = outcome(&result)?;
        if got != expect {
            return Err(format!("model says {expect:?}, backend {result:?}"));
        }
        if ours {
            state.holder = None;
        }
        Ok(())
    }

    fn one_trusting_client(&self) -> Result<(), String> {
        let clock = self.subject.clock();
        for k in 0..self.keys.len() {
            let trusting: Vec<usize> = self
                .leases
                .iter()
                .filter(|((_, key), lease)| *key == k && super::trusted(lease, clock.as_ref()))
                .map(|((client, _), _)| *client)
                .collect();
            if trusting.len() > 1 {
                return Err(format!("clients {trusting:?} all trust key {k}"));
            }
        }
        Ok(())
    }
}

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
use crate::{FencingToken, Lease, LeaseBackendExt, LeaseError, LeaseKey, LeaseToken};

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
    let backend = subject.backend();
    let clock = subject.clock();
    let delay_ms = u64::try_from(subject.takeover_delay.as_millis()).unwrap_or(u64::MAX);
    let d_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    let keys: Vec<LeaseKey> = (0..8).map(|i| subject.key(&format!("model{i}"))).collect();
    let mut model: HashMap<usize, ModelKey> = HashMap::new();
    let mut leases: HashMap<(usize, usize), Lease> = HashMap::new();
    let mut now_ms: u64 = 0;

    for (step, op) in ops.iter().enumerate() {
        let fail = |what: String| format!("step {step} ({op:?}): {what}; ops = {ops:?}");
        match *op {
            Op::Advance { millis } => {
                clock.advance(Duration::from_millis(millis));
                now_ms += millis;
            }
            Op::Acquire { client, key } => {
                let k = key % keys.len();
                let state = model.entry(k).or_default();
                let expect = match &state.holder {
                    Some(h) if now_ms < h.expires_ms + delay_ms => Expect::Held,
                    _ => Expect::Ok,
                };
                let result = backend.acquire(&keys[k], duration).await;
                let got = outcome(&result).map_err(&fail)?;
                if got != expect {
                    return Err(fail(format!("model says {expect:?}, backend {result:?}")));
                }
                if let Ok(lease) = result {
                    if let Some(last) = state.last_fencing
                        && lease.fencing_token() <= last
                    {
                        return Err(fail(format!(
                            "fencing token {} not above {last}",
                            lease.fencing_token()
                        )));
                    }
                    state.last_fencing = Some(lease.fencing_token());
                    state.holder = Some(ModelHolder {
                        token: lease.token().clone(),
                        expires_ms: now_ms + d_ms,
                    });
                    leases.insert((client, k), lease);
                }
            }
            Op::Renew { client, key } => {
                let k = key % keys.len();
                let Some(lease) = leases.get(&(client, k)).cloned() else {
                    continue;
                };
                let state = model.entry(k).or_default();
                let expect = match &state.holder {
                    Some(h) if h.token == *lease.token() && now_ms < h.expires_ms => Expect::Ok,
                    _ => Expect::NotOwned,
                };
                let result = backend.renew(&lease, duration).await;
                let got = outcome(&result).map_err(&fail)?;
                if got != expect {
                    return Err(fail(format!("model says {expect:?}, backend {result:?}")));
                }
                match result {
                    Ok(renewed) => {
                        if renewed.fencing_token() != lease.fencing_token() {
                            return Err(fail("renew changed the fencing token".into()));
                        }
                        if let Some(h) = state.holder.as_mut() {
                            h.expires_ms = now_ms + d_ms;
                        }
                        leases.insert((client, k), renewed);
                    }
                    Err(_) => {
                        leases.remove(&(client, k));
                    }
                }
            }
            Op::Release { client, key } => {
                let k = key % keys.len();
                let Some(lease) = leases.remove(&(client, k)) else {
                    continue;
                };
                let state = model.entry(k).or_default();
                let ours = state
                    .holder
                    .as_ref()
                    .is_some_and(|h| h.token == *lease.token());
                let expect = if ours { Expect::Ok } else { Expect::NotOwned };
                let result = backend
                    .release(&keys[k], lease.token(), lease.fencing_token())
                    .await;
                let got = outcome(&result).map_err(&fail)?;
                if got != expect {
                    return Err(fail(format!("model says {expect:?}, backend {result:?}")));
                }
                if ours {
                    state.holder = None;
                }
            }
        }
        // The safety property: at no instant do two clients trust a lease on the same key.
        for k in 0..keys.len() {
            let trusting: Vec<usize> = leases
                .iter()
                .filter(|((_, key), lease)| *key == k && lease.is_trusted(clock.as_ref()))
                .map(|((client, _), _)| *client)
                .collect();
            if trusting.len() > 1 {
                return Err(fail(format!("clients {trusting:?} all trust key {k}")));
            }
        }
    }
    Ok(())
}

//! `dynamo-lease`, `pg-lease` and `redis-lease`: `DynamoLeases`, `PgLeases` or `RedisLeases`
//! kept by a `LeaseGuard`, with
//! fenced writes beside the lease.

use std::sync::Arc;
use std::time::Duration;

use lease_core::{
    AcquireOptions, FencedValues, FencingToken, LeaseBackend, LeaseError, LeaseGuard, LeaseKey,
    NotOwnedReason, WaitOptions,
};

use crate::actor::{Actor, Rng};
use crate::cli::KeptLeaseArgs;
use crate::history::{Outcome, Surface, mono_ns, parse_value, value};

/// `dynamo-lease`: tenures on `DynamoLeases` until the actor stops.
pub(crate) fn run_dynamo(args: &KeptLeaseArgs, actor: &Actor) -> Result<(), String> {
    crate::actor::block_on(async {
        let leases = crate::dynamo::leases(&args.store, actor).await?;
        let table = leases.table().to_owned();
        let store = Store {
            surface: Surface::LeaseDynamo,
            key_name: Box::new(move |pk| crate::dynamo::lease_key(&table, pk)),
            value_prefix: format!("dynamo:{}", leases.table()),
            leases,
        };
        store.run(args, actor).await
    })?
}

/// `pg-lease`: tenures on `PgLeases` until the actor stops.
pub(crate) fn run_postgres(args: &KeptLeaseArgs, actor: &Actor) -> Result<(), String> {
    crate::actor::block_on(async {
        let leases = crate::postgres::leases(&args.store, actor).await?;
        let table = leases.table().to_owned();
        let store = Store {
            surface: Surface::LeasePostgres,
            value_prefix: format!("postgres:{table}"),
            key_name: Box::new(move |pk| crate::postgres::lease_key(&table, pk)),
            leases,
        };
        store.run(args, actor).await
    })?
}

/// `redis-lease`: tenures on `RedisLeases` until the actor stops.
pub(crate) fn run_redis(args: &KeptLeaseArgs, actor: &Actor) -> Result<(), String> {
    crate::actor::block_on(async {
        let leases = crate::redis::leases(&args.store, actor)?;
        let prefix = leases.prefix().to_owned();
        let store = Store {
            surface: Surface::LeaseRedis,
            value_prefix: format!("redis:{prefix}"),
            key_name: Box::new(move |pk| crate::redis::lease_key(&prefix, pk)),
            leases,
        };
        store.run(args, actor).await
    })?
}

/// A store the tenures run on, and how the history names its leases and values.
struct Store<L> {
    leases: Arc<L>,
    surface: Surface,
    /// The history's name of the lease `pk`.
    key_name: Box<dyn Fn(&str) -> String + Send + Sync>,
    /// The history's names of values are `<this>/value-<pk>`.
    value_prefix: String,
}

impl<L: LeaseBackend + FencedValues + 'static> Store<L> {
    /// Runs tenures on randomly picked keys until the actor stops.
    async fn run(&self, args: &KeptLeaseArgs, actor: &Actor) -> Result<(), String> {
        let mut rng = Rng::new();
        while !actor.stopping() {
            let pk = &args.keys[usize::try_from(rng.below(args.keys.len() as u64)).unwrap_or(0)];
            let tenure = Tenure::new(self, actor, pk, Duration::from_millis(args.ttl_ms))?;
            let done = if args.skip_check {
                tenure.run_unchecked().await
            } else {
                tenure.run(&mut rng).await
            };
            let pause = match done {
                Ok(true) => rng.millis(0, 50),
                Ok(false) => rng.millis(50, 250),
                Err(error) => {
                    eprintln!("{}: {pk}: {error}", actor.history.proc_id());
                    Duration::from_millis(200)
                }
            };
            actor.pause(pause).await;
        }
        Ok(())
    }
}

/// One attempt at a tenure of one key.
struct Tenure<'a, L> {
    store: &'a Store<L>,
    actor: &'a Actor,
    key: LeaseKey,
    /// The history's name of the lease.
    key_name: String,
    /// The fenced value beside it, and the history's name for it.
    value: LeaseKey,
    value_name: String,
    ttl: Duration,
}

impl<'a, L: LeaseBackend + FencedValues + 'static> Tenure<'a, L> {
    fn new(store: &'a Store<L>, actor: &'a Actor, pk: &str, ttl: Duration) -> Result<Self, String> {
        let invalid = |e: LeaseError| format!("key {pk}: {e}");
        Ok(Self {
            store,
            actor,
            key: LeaseKey::new(pk).map_err(invalid)?,
            key_name: (store.key_name)(pk),
            value: LeaseKey::new(format!("value-{pk}")).map_err(invalid)?,
            value_name: format!("{}/value-{pk}", store.value_prefix),
            ttl,
        })
    }

    /// Acquires (one attempt: `Ok(false)` if held), then for 2 to 4 renewal periods (a third of
    /// the lease each) claims and writes every sixth of the lease, then releases.
    async fn run(&self, rng: &mut Rng) -> Result<bool, LeaseError> {
        let backend: Arc<dyn LeaseBackend> = self.store.leases.clone();
        let sent = mono_ns();
        // One attempt, kept by its guard on this actor's runtime.
        let acquired = LeaseGuard::builder(backend, &self.key, self.ttl)
            .with_wait(WaitOptions::new(Duration::ZERO))
            .acquire()
            .await;
        let guard = match acquired {
            Ok(guard) => guard,
            Err(error) if error.is_held() => return Ok(false),
            Err(error) => return Err(error),
        };
        let acquired = mono_ns();
        let token = guard.fencing_token();
        let history = &self.actor.history;
        let wall = self.actor.wall_ms();
        history.acq(
            self.store.surface,
            &self.key_name,
            token.get(),
            sent,
            acquired,
            wall,
        );
        let mut seq = self.read(token).await;
        let steps = 2 * (2 + rng.below(3));
        for _ in 0..steps {
            if !self.actor.pause(self.ttl / 6).await {
                break;
            }
            let at = mono_ns();
            if guard.check().is_err() {
                // Lost: one late write, as a paused holder would make; the fence must refuse
                // it once a newer holder has read.
                seq += 1;
                self.write(token, seq).await;
                break;
            }
            history.claim(self.store.surface, &self.key_name, token.get(), at);
            seq += 1;
            self.write(token, seq).await;
        }
        match guard.release().await {
            Ok(()) => history.rel(self.store.surface, &self.key_name, token.get(), mono_ns()),
            Err(error) => eprintln!("{}: release: {error}", history.proc_id()),
        }
        Ok(true)
    }

    /// The sabotaged tenure (`--skip-check`): one bare grant, never renewed, claimed every
    /// sixth of the lease for two lease lengths without a check, then released (which fails
    /// once another holder took over).
    async fn run_unchecked(&self) -> Result<bool, LeaseError> {
        let leases = &self.store.leases;
        let sent = mono_ns();
        let lease = match leases
            .try_acquire(&self.key, self.ttl, &AcquireOptions::default())
            .await
        {
            Ok(lease) => lease,
            Err(error) if error.is_held() => return Ok(false),
            Err(error) => return Err(error),
        };
        let token = lease.fencing_token();
        let history = &self.actor.history;
        let wall = self.actor.wall_ms();
        history.acq(
            self.store.surface,
            &self.key_name,
            token.get(),
            sent,
            mono_ns(),
            wall,
        );
        for _ in 0..12 {
            if !self.actor.pause(self.ttl / 6).await {
                break;
            }
            history.claim(self.store.surface, &self.key_name, token.get(), mono_ns());
        }
        if leases
            .release(&self.key, lease.token(), token)
            .await
            .is_ok()
        {
            history.rel(self.store.surface, &self.key_name, token.get(), mono_ns());
        }
        Ok(true)
    }

    /// The fenced read a new holder makes first; returns the sequence number to go on from.
    async fn read(&self, token: FencingToken) -> u64 {
        let sent = mono_ns();
        let result = self.store.leases.fence_and_read(&self.value, token).await;
        let done = mono_ns();
        match result {
            Ok(seen) => {
                let seen = seen.as_deref().and_then(parse_value);
                let history = &self.actor.history;
                history.read(
                    self.store.surface,
                    &self.value_name,
                    token.get(),
                    (sent, done),
                    seen,
                );
                seen.map_or(0, |(_, seq)| seq)
            }
            Err(error) => {
                eprintln!("{}: fence_and_read: {error}", self.actor.history.proc_id());
                0
            }
        }
    }

    /// One fenced write of `<proc>:<token>:<seq>`, logged with its outcome.
    async fn write(&self, token: FencingToken, seq: u64) {
        let history = &self.actor.history;
        let text = value(history.proc_id(), token.get(), seq);
        let sent = mono_ns();
        let result = self
            .store
            .leases
            .put_fenced(&self.value, token, text.as_bytes())
            .await;
        let done = mono_ns();
        let outcome = match result {
            Ok(()) => Outcome::Ok,
            Err(error) if error.not_owned_reason() == Some(NotOwnedReason::Fenced) => {
                Outcome::Refused
            }
            Err(error) => {
                eprintln!("{}: put_fenced: {error}", history.proc_id());
                Outcome::Error
            }
        };
        history.write(
            self.store.surface,
            &self.value_name,
            token.get(),
            seq,
            (sent, done),
            outcome,
        );
    }
}

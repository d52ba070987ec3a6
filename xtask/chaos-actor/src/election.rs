//! `election`: a leader election on a `DirectoryStore`, `DynamoLeases`, `PgLeases` or
//! `RedisLeases` key, campaigning or
//! observing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_core::Stream;
use lease_core::{Clock, Election, LeaderChange, LeaseBackend, LeaseKey};
use lease_file::DirectoryStore;

use crate::actor::{Actor, Rng};
use crate::cli::{Backend, ElectionArgs, ElectionRole};
use crate::history::{Surface, mono_ns};

/// Between claims while leading.
const CLAIM_EVERY: Duration = Duration::from_millis(10);
/// How often a blocked observer looks at the stop file.
const STOP_POLL: Duration = Duration::from_millis(200);
/// How often an observer reads the record where the store cannot wake it (DynamoDB): one
/// `GetItem` each.
const DYNAMO_POLL: Duration = Duration::from_millis(100);

/// Campaigns or observes until the actor stops.
pub(crate) fn run(args: &ElectionArgs, actor: &Actor) -> Result<(), String> {
    let key = LeaseKey::new(&args.key).map_err(|e| e.to_string())?;
    let ttl = Duration::from_millis(args.ttl_ms);
    match args.backend {
        Backend::File => {
            let dir = args
                .dir
                .as_ref()
                .ok_or("--dir is required with --backend file")?;
            let store: Arc<dyn LeaseBackend> =
                Arc::new(DirectoryStore::open(dir).map_err(|e| format!("{}: {e}", dir.display()))?);
            let side = Side {
                election: Election::new(store, &key, ttl)
                    .with_poll_interval(Duration::from_secs(1)),
                name: format!("file:{}/{}", dir.display(), args.key),
                surface: Surface::ElectionFile,
                tokio: false,
                actor,
            };
            // No runtime: the file store needs none, and the guard's keeper gets a thread.
            pollster::block_on(side.run(args))
        }
        Backend::Dynamo => crate::actor::block_on(async {
            let leases = crate::dynamo::leases(&args.store, actor).await?;
            let name = crate::dynamo::lease_key(leases.table(), &args.key);
            let side = Side {
                election: Election::new(leases, &key, ttl).with_poll_interval(DYNAMO_POLL),
                name,
                surface: Surface::ElectionDynamo,
                tokio: true,
                actor,
            };
            side.run(args).await
        })?,
        Backend::Postgres => crate::actor::block_on(async {
            let leases = crate::postgres::leases(&args.store, actor).await?;
            let name = crate::postgres::lease_key(leases.table(), &args.key);
            let side = Side {
                // Woken by NOTIFY; the poll is the fallback when the LISTEN connection is down.
                election: Election::new(leases, &key, ttl)
                    .with_poll_interval(Duration::from_secs(1)),
                name,
                surface: Surface::ElectionPostgres,
                tokio: true,
                actor,
            };
            side.run(args).await
        })?,
        Backend::Redis => crate::actor::block_on(async {
            let leases = crate::redis::leases(&args.store, actor)?;
            let name = crate::redis::lease_key(leases.prefix(), &args.key);
            let side = Side {
                // Woken by the prefix's pub/sub channel; the poll is the fallback when the
                // subscription is down.
                election: Election::new(leases, &key, ttl)
                    .with_poll_interval(Duration::from_secs(1)),
                name,
                surface: Surface::ElectionRedis,
                tokio: true,
                actor,
            };
            side.run(args).await
        })?,
    }
}

/// One election as this actor sees it.
struct Side<'a> {
    election: Election,
    /// The history's name of the election's key.
    name: String,
    surface: Surface,
    /// Keep the lease from a tokio task (DynamoDB), or from a thread of its own (files).
    tokio: bool,
    actor: &'a Actor,
}

impl Side<'_> {
    async fn run(&self, args: &ElectionArgs) -> Result<(), String> {
        match args.role {
            ElectionRole::Campaign => self.campaign(args.hold_ms).await,
            ElectionRole::Observe => self.observe().await,
        }
    }

    /// Sleeps `duration`, waking early when stopping; `false` if stopping.
    async fn sleep(&self, duration: Duration) -> bool {
        if self.tokio {
            self.actor.pause(duration).await
        } else {
            self.actor.sleep(duration)
        }
    }

    /// Campaign (the value: this proc's id), lead for a while claiming after each `check()`,
    /// resign; again.
    async fn campaign(&self, hold_ms: u64) -> Result<(), String> {
        let (actor, name, surface) = (self.actor, self.name.as_str(), self.surface);
        let proc = actor.history.proc_id().to_owned();
        let mut rng = Rng::new();
        while !actor.stopping() {
            let sent = mono_ns();
            actor.history.campaign(surface, name, sent);
            // Waits until elected; at the end of the run every leader resigns, so it returns.
            // The keeper runs on the runtime where there is one (DynamoDB), else on a thread.
            let elected = self.election.campaign(proc.clone()).acquire().await;
            let guard = match elected {
                Ok(guard) => guard,
                Err(error) => {
                    eprintln!("{proc}: campaign: {error}");
                    self.sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let token = guard.fencing_token().get();
            actor
                .history
                .acq(surface, name, token, sent, mono_ns(), actor.wall_ms());
            let lead = rng.millis(hold_ms / 5, hold_ms);
            let mut led = Duration::ZERO;
            while led < lead && !actor.stopping() {
                let at = mono_ns();
                if guard.check().is_err() {
                    break;
                }
                actor.history.claim(surface, name, token, at);
                if self.tokio {
                    tokio::time::sleep(CLAIM_EVERY).await;
                } else {
                    std::thread::sleep(CLAIM_EVERY);
                }
                led += CLAIM_EVERY;
            }
            // Resign: the release tells every observer.
            if let Err(error) = guard.release().await {
                eprintln!("{proc}: resign: {error}");
            }
            actor.history.rel(surface, name, token, mono_ns());
            self.sleep(rng.millis(0, 20)).await;
        }
        Ok(())
    }

    /// Logs every report of the election's observer as an `observe` line.
    async fn observe(&self) -> Result<(), String> {
        let (actor, name, surface) = (self.actor, self.name.as_str(), self.surface);
        let mut observer = self.election.observe();
        let clock = lease_core::SystemClock;
        while !actor.stopping() {
            let next = std::future::poll_fn(|cx| Pin::new(&mut observer).poll_next(cx));
            let change = first(next, clock.sleep(STOP_POLL)).await.flatten();
            let Some(change) = change else {
                continue;
            };
            let at = mono_ns();
            match change.map_err(|e| e.to_string())? {
                LeaderChange::Elected(leader) => actor.history.observe(
                    surface,
                    name,
                    Some((
                        leader.fencing_token().map_or(0, |t| t.get()),
                        leader.value().unwrap_or("?"),
                    )),
                    at,
                ),
                _ => actor.history.observe(surface, name, None, at),
            }
        }
        Ok(())
    }
}

/// `Some(output)` of `work` if it completes first, `None` if `timer` does (`work` is dropped:
/// `Observer::next` is cancel-safe).
async fn first<T>(
    work: impl Future<Output = T>,
    timer: Pin<Box<dyn Future<Output = ()> + Send>>,
) -> Option<T> {
    let mut work = std::pin::pin!(work);
    let mut timer = timer;
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(output) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}

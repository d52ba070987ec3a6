//! `election`: a leader election on a `DirectoryStore` key, campaigning or observing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use lease_core::executor::block_on;
use lease_core::{Clock, Election, KeeperOptions, LeaderChange, LeaseBackend, LeaseKey};
use lease_file::DirectoryStore;

use crate::actor::{Actor, Rng};
use crate::cli::{ElectionArgs, ElectionRole};
use crate::history::{Surface, mono_ns};

const SURFACE: Surface = Surface::ElectionFile;
/// Between claims while leading.
const CLAIM_EVERY: Duration = Duration::from_millis(10);
/// How often a blocked observer looks at the stop file.
const STOP_POLL: Duration = Duration::from_millis(200);

/// Campaigns or observes until the actor stops.
pub(crate) fn run(args: &ElectionArgs, actor: &Actor) -> Result<(), String> {
    let store: Arc<dyn LeaseBackend> = Arc::new(
        DirectoryStore::open(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))?,
    );
    let key = LeaseKey::new(&args.key).map_err(|e| e.to_string())?;
    let name = format!("file:{}/{}", args.dir.display(), args.key);
    let election = Election::new(store, &key, Duration::from_millis(args.ttl_ms))
        .with_poll_interval(Duration::from_secs(1));
    match args.role {
        ElectionRole::Campaign => campaign(&election, &name, args.hold_ms, actor),
        ElectionRole::Observe => observe(&election, &name, actor),
    }
}

/// Campaign (the value: this proc's id), lead for a while claiming after each `check()`,
/// resign; again.
fn campaign(election: &Election, name: &str, hold_ms: u64, actor: &Actor) -> Result<(), String> {
    let proc = actor.history.proc_id().to_owned();
    let mut rng = Rng::new();
    let keeper = KeeperOptions::default();
    while !actor.stopping() {
        let sent = mono_ns();
        actor.history.campaign(SURFACE, name, sent);
        // Waits until elected; at the end of the run every leader resigns, so it returns.
        let guard = match election
            .campaign(proc.clone())
            .with_keeper(keeper.clone())
            .acquire_blocking()
        {
            Ok(guard) => guard,
            Err(error) => {
                eprintln!("{proc}: campaign: {error}");
                actor.sleep(Duration::from_millis(100));
                continue;
            }
        };
        let token = guard.fencing_token().get();
        actor
            .history
            .acq(SURFACE, name, token, sent, mono_ns(), actor.wall_ms());
        let lead = rng.millis(hold_ms / 5, hold_ms);
        let mut led = Duration::ZERO;
        while led < lead && !actor.stopping() {
            let at = mono_ns();
            if guard.check().is_err() {
                break;
            }
            actor.history.claim(SURFACE, name, token, at);
            std::thread::sleep(CLAIM_EVERY);
            led += CLAIM_EVERY;
        }
        // Resign: the release tells every observer.
        if let Err(error) = block_on(guard.release()) {
            eprintln!("{proc}: resign: {error}");
        }
        actor.history.rel(SURFACE, name, token, mono_ns());
        actor.sleep(rng.millis(0, 20));
    }
    Ok(())
}

/// Logs every report of the election's observer as an `observe` line.
fn observe(election: &Election, name: &str, actor: &Actor) -> Result<(), String> {
    let mut observer = election.observe();
    let clock = lease_core::SystemClock;
    while !actor.stopping() {
        let change = block_on(first(observer.next(), clock.sleep(STOP_POLL)));
        let Some(change) = change else {
            continue;
        };
        let at = mono_ns();
        match change.map_err(|e| e.to_string())? {
            LeaderChange::Elected(leader) => actor.history.observe(
                SURFACE,
                name,
                Some((leader.fencing_token().get(), leader.value().unwrap_or("?"))),
                at,
            ),
            _ => actor.history.observe(SURFACE, name, None, at),
        }
    }
    Ok(())
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

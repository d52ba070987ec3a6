//! `fleet`: one lessor-partition worker whose unit tasks claim their units and save fenced
//! checkpoints.

use std::sync::Arc;
use std::time::Duration;

use futures_core::Stream;
use lease_core::{LeaseBackend, LeaseError, LeaseKey};
use lease_file::DirectoryStore;
use lessor_partition::{Checkpoint, UnitEnd, UnitTask, Worker};

use crate::actor::Actor;
use crate::cli::{Backend, FleetArgs};
use crate::history::{History, Outcome, Surface, mono_ns, parse_value, value};

/// How long a stopping worker may take to hand its units over and end its session, beyond
/// its handoff timeout and session duration.
const STOP_SLACK: Duration = Duration::from_secs(5);
/// The worker's handoff timeout (the library's default, written out for the stop bound).
const HANDOFF: Duration = Duration::from_secs(5);

/// Runs the worker until the actor stops, then stops it cleanly (bounded).
pub(crate) fn run(args: &FleetArgs, actor: &Actor) -> Result<(), String> {
    crate::actor::block_on(async {
        let store = store(args, actor).await?;
        let worker = build(args, store.clone())?;
        let handle = worker.handle();
        // Hand units out as tasks (with graceful handoffs) from the first gain on: asking for
        // the stream switches the worker to it before it runs.
        let stream = handle.units();
        let units = Arc::new(Units::new(args, actor.history.clone(), store));
        let tasks = tokio::spawn(hand_out(stream, units));
        let running = match args.backend {
            // The file store does blocking I/O: its worker gets a thread, as `spawn_thread` would.
            Backend::File => tokio::task::spawn_blocking(move || pollster::block_on(worker.run())),
            Backend::Dynamo | Backend::Postgres | Backend::Redis => tokio::spawn(worker.run()),
        };
        while actor.pause(Duration::from_millis(200)).await {}
        handle.stop();
        let bound = HANDOFF + Duration::from_millis(args.session_ms) + STOP_SLACK;
        let proc_id = actor.history.proc_id();
        match tokio::time::timeout(bound, running).await {
            Ok(Ok(Ok(_stats))) => {}
            Ok(Ok(Err(error))) => eprintln!("{proc_id}: the worker stopped with {error}"),
            Ok(Err(error)) => eprintln!("{proc_id}: the worker panicked: {error}"),
            Err(_) => eprintln!("{proc_id}: the worker did not stop within {bound:?}"),
        }
        if tokio::time::timeout(STOP_SLACK, tasks).await.is_err() {
            eprintln!("{proc_id}: unit tasks still running {STOP_SLACK:?} after the worker");
        }
        Ok(())
    })?
}

/// The store the fleet shares: its leases, its listing and the checkpoints' fenced values.
async fn store(args: &FleetArgs, actor: &Actor) -> Result<Arc<dyn LeaseBackend>, String> {
    match args.backend {
        Backend::File => {
            let dir = args
                .dir
                .as_ref()
                .ok_or("--dir is required with --backend file")?;
            let mut builder = DirectoryStore::builder(dir);
            if args.steppable_file_clock {
                builder = builder.with_clock(actor.clock.clone());
            }
            let store = builder
                .build()
                .map_err(|e| format!("cannot open the store in {}: {e}", dir.display()))?;
            Ok(Arc::new(store))
        }
        Backend::Dynamo => Ok(crate::dynamo::leases(&args.store, actor).await?),
        Backend::Postgres => Ok(crate::postgres::leases(&args.store, actor).await?),
        Backend::Redis => Ok(crate::redis::leases(&args.store, actor)?),
    }
}

fn build(args: &FleetArgs, store: Arc<dyn LeaseBackend>) -> Result<Worker, String> {
    let width = args.units.saturating_sub(1).to_string().len().max(2);
    let mut builder = Worker::builder(args.fleet.clone(), args.worker.clone())
        .with_store(store)
        .with_units((0..args.units).map(|u| format!("u{u:0width$}")))
        .with_session_duration(Duration::from_millis(args.session_ms))
        .with_interval(Duration::from_millis(args.interval_ms))
        .with_safety_margin(Duration::from_millis(args.margin_ms))
        .with_handoff_timeout(HANDOFF)
        .with_checkpoints();
    if let Some(skew) = args.session_skew_ms {
        builder = builder.with_clock_skew_bound(Duration::from_millis(skew));
    }
    builder
        .build()
        .map_err(|e| format!("cannot configure worker {}: {e}", args.worker))
}

/// One task per unit gained, until the worker has stopped; then waits for them all, so every
/// final save is in the history before the process exits.
async fn hand_out(
    mut stream: impl Stream<Item = UnitTask> + Send + Unpin + 'static,
    units: Arc<Units>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(task) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut stream).poll_next(cx)).await
    {
        tasks.spawn(units.clone().work_on(task));
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}

/// What became of one step of a unit task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Claimed and saved (or the save failed otherwise): go on.
    Saved,
    /// The check failed: the ownership is over, nothing was sent.
    NotOwned,
    /// The store refused the save: a newer owner fenced the unit.
    Refused,
}

/// What every unit task of this worker shares.
struct Units {
    history: Arc<History>,
    surface: Surface,
    /// The fleet's store, whose fenced values keep the checkpoints: for the late save that
    /// bypasses the task's check.
    store: Arc<dyn LeaseBackend>,
    /// The fleet name, for the checkpoints' names in the store.
    fleet: String,
    /// `<file|dynamo|postgres|redis>:<fleet>`: unit keys are `<this>/<unit>`.
    keys: String,
    /// `fleet-<file|dynamo|postgres|redis>:<fleet>`: checkpoint names are `<this>/<unit>`.
    names: String,
    every: Duration,
}

impl Units {
    fn new(args: &FleetArgs, history: Arc<History>, store: Arc<dyn LeaseBackend>) -> Self {
        let (surface, backend) = match args.backend {
            Backend::File => (Surface::FleetFile, "file"),
            Backend::Dynamo => (Surface::FleetDynamo, "dynamo"),
            Backend::Postgres => (Surface::FleetPostgres, "postgres"),
            Backend::Redis => (Surface::FleetRedis, "redis"),
        };
        Self {
            history,
            surface,
            store,
            fleet: args.fleet.clone(),
            keys: format!("{backend}:{}", args.fleet),
            names: format!("fleet-{backend}:{}", args.fleet),
            every: Duration::from_millis(args.save_every_ms),
        }
    }

    /// The work on one unit: log the checkpoint it was handed, then every `every` claim and
    /// save the next one; one last claim and save when asked to hand the unit over. When the
    /// ownership ends otherwise (a loss, a failed check) it makes one late save with its old
    /// token, as a paused application would, for the fence to refuse; then it stops.
    async fn work_on(self: Arc<Self>, task: UnitTask) {
        let start = mono_ns();
        let token = task.fencing_token().get();
        let key = format!("{}/{}", self.keys, task.unit());
        let name = format!("{}/{}", self.names, task.unit());
        let seen = match task.checkpoint() {
            Checkpoint::Saved(bytes) => parse_value(bytes),
            _ => None,
        };
        let history = &self.history;
        history.read(self.surface, &name, token, (start, start), seen);
        let mut seq = seen.map_or(0, |(_, seq)| seq);
        loop {
            let reason = tokio::select! {
                reason = task.lost() => Some(reason),
                () = tokio::time::sleep(self.every) => None,
            };
            seq += 1;
            let (step, last) = match reason {
                None => (self.save(&task, (&key, &name), seq).await, false),
                Some(UnitEnd::HandedOver | UnitEnd::Shutdown) => {
                    (self.save(&task, (&key, &name), seq).await, true)
                }
                Some(_) => (Step::NotOwned, true),
            };
            match step {
                Step::Saved if !last => {}
                Step::NotOwned => return self.late_save(&task, &name, seq).await,
                Step::Saved | Step::Refused => return,
            }
        }
    }

    /// The instant, `check()`, the claim if it passed, then the fenced save of checkpoint
    /// `seq` through the task.
    async fn save(&self, task: &UnitTask, (key, name): (&str, &str), seq: u64) -> Step {
        let token = task.fencing_token().get();
        let at = mono_ns();
        if task.check().is_err() {
            return Step::NotOwned;
        }
        self.history.claim(self.surface, key, token, at);
        let text = value(self.history.proc_id(), token, seq);
        let sent = mono_ns();
        let result = task.save_checkpoint(text.as_bytes()).await;
        self.log_save(name, token, seq, sent, result)
    }

    /// The name the worker keeps `task`'s checkpoint under (`fleet/<fleet>/checkpoints`, unit).
    fn checkpoint_name(&self, task: &UnitTask) -> Result<LeaseKey, LeaseError> {
        LeaseKey::with_sort_key(format!("fleet/{}/checkpoints", self.fleet), task.unit())
    }

    /// A save with the task's token straight to the checkpoint store, past the task's own
    /// ownership check: `ok` only while no newer owner has read the checkpoint.
    async fn late_save(&self, task: &UnitTask, name: &str, seq: u64) {
        let token = task.fencing_token();
        let text = value(self.history.proc_id(), token.get(), seq);
        let sent = mono_ns();
        let result = match (self.store.as_fenced_values(), self.checkpoint_name(task)) {
            (Some(values), Ok(name)) => values.put_fenced(&name, token, text.as_bytes()).await,
            (None, _) => Err(LeaseError::unsupported(self.store.name(), "fenced values")),
            (_, Err(error)) => Err(error),
        };
        self.log_save(name, token.get(), seq, sent, result);
    }

    fn log_save(
        &self,
        name: &str,
        token: u64,
        seq: u64,
        sent: u64,
        result: Result<(), LeaseError>,
    ) -> Step {
        let done = mono_ns();
        let (outcome, step) = match result {
            Ok(()) => (Outcome::Ok, Step::Saved),
            Err(error) if error.is_not_owned() => (Outcome::Refused, Step::Refused),
            Err(error) => {
                eprintln!("{}: save {name}: {error}", self.history.proc_id());
                (Outcome::Error, Step::Saved)
            }
        };
        self.history
            .write(self.surface, name, token, seq, (sent, done), outcome);
        step
    }
}

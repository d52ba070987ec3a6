//! The scale table: what a fleet of `W` workers dividing `L` units costs the store, per worker
//! and fleet-wide, in steady state and under churn, priced as DynamoDB on demand.
//!
//! Every request a simulated worker sends passes a [`Tally`] that counts it, the records it
//! returns and their size as DynamoDB items (attribute names and values, as lease-dynamo writes
//! them: `pk`, `sk`, `lease_token`, `lease_owner`, `lease_fence`, `lease_expires_at`,
//! `lease_expires_at_ms`, `lease_acquired_at`, `lease_request`). Read units follow DynamoDB's
//! billing of strongly consistent reads: a query or a get costs one unit per 4 KB returned
//! (rounded up, at least one); a write costs one unit per 1 KB of the item written.
//!
//! ```
//! use lessor_sim::scale::{ScaleCell, run_cell};
//!
//! let row = run_cell(&ScaleCell::new(4, 64));
//! assert_eq!(row.ticks_not_owned, 0);
//! // Today's protocol: every worker lists every session record every interval.
//! assert!(row.fleet_records_per_tick >= 16.0);
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease_core::{LeaseKey, LeaseRecord};

use crate::{FleetModel, SimConfig, Simulation};

/// Price of one million on-demand read request units, DynamoDB us-east-1, in US dollars (after
/// the November 2024 price cut).
pub const READ_PRICE_PER_MILLION: f64 = 0.125;
/// Price of one million on-demand write request units, DynamoDB us-east-1, in US dollars (after
/// the November 2024 price cut).
pub const WRITE_PRICE_PER_MILLION: f64 = 0.625;
/// The month the prices were read from AWS's price list.
pub const PRICE_DATE: &str = "2024-11";
/// Seconds in a (30-day) month.
pub const MONTH_SECONDS: f64 = 30.0 * 24.0 * 3600.0;

/// The bytes of attribute names in every lease item, and of its number and request-id values.
const ITEM_OVERHEAD: usize = 2 + 2 + 11 + 11 + 11 + 16 + 19 + 17 + 13 + 4 * 8 + 36;
/// The owner written with a record when the request does not say (a worker id).
const OWNER_GUESS: usize = 8;

/// The size of a lease item as DynamoDB bills it.
fn item_bytes(key: &LeaseKey, token: usize, owner: usize) -> u64 {
    let sort = key.sort().map_or(0, str::len);
    (ITEM_OVERHEAD + key.partition().len() + sort + token + owner) as u64
}

fn record_bytes(record: &LeaseRecord) -> u64 {
    let (token, owner) = record.holder().map_or((0, 0), |h| {
        (
            h.token().map_or(0, |t| t.as_str().len()),
            h.owner().map_or(0, str::len),
        )
    });
    item_bytes(record.key(), token, owner)
}

/// Request, record and byte counters of everything the workers of a simulation send.
#[derive(Debug, Default)]
pub struct Tally {
    requests: AtomicU64,
    reads: AtomicU64,
    records: AtomicU64,
    bytes: AtomicU64,
    read_units: AtomicU64,
    writes: AtomicU64,
    write_units: AtomicU64,
}

/// A copy of a [`Tally`]'s counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TallyCounts {
    /// Every request.
    pub requests: u64,
    /// Of which reads (listings and gets).
    pub reads: u64,
    /// Records the reads returned.
    pub records: u64,
    /// Their bytes, as DynamoDB items.
    pub bytes: u64,
    /// Strongly consistent read units those reads cost.
    pub read_units: u64,
    /// Writes (acquire, renew, release, delete).
    pub writes: u64,
    /// Write units they cost.
    pub write_units: u64,
}

impl TallyCounts {
    /// The difference `self - earlier`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            requests: self.requests - earlier.requests,
            reads: self.reads - earlier.reads,
            records: self.records - earlier.records,
            bytes: self.bytes - earlier.bytes,
            read_units: self.read_units - earlier.read_units,
            writes: self.writes - earlier.writes,
            write_units: self.write_units - earlier.write_units,
        }
    }
}

impl Tally {
    /// Counts one read that returned `records`.
    pub(crate) fn read(&self, records: &[LeaseRecord]) {
        let bytes: u64 = records.iter().map(record_bytes).sum();
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.records
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.read_units
            .fetch_add(bytes.div_ceil(4096).max(1), Ordering::Relaxed);
    }

    /// Counts one write of the record at `key` with `token`.
    pub(crate) fn write(&self, key: &LeaseKey, token: Option<&str>) {
        let bytes = item_bytes(key, token.map_or(0, str::len), OWNER_GUESS);
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.write_units
            .fetch_add(bytes.div_ceil(1024).max(1), Ordering::Relaxed);
    }

    /// Counts one fenced read (a fence raise that returns the value) of the value at `key`,
    /// `value` bytes long if there is one: one request, one record if there is a value. Billed
    /// as the write it is on DynamoDB (an `UpdateItem` returning the item), and as a read of
    /// the bytes it returns.
    pub(crate) fn read_value(&self, key: &LeaseKey, value: Option<usize>) {
        let bytes = value.map_or(0, |len| item_bytes(key, len, 0));
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.records
            .fetch_add(u64::from(value.is_some()), Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.read_units
            .fetch_add(bytes.div_ceil(4096).max(1), Ordering::Relaxed);
    }

    /// Counts one fenced write of `value` bytes at `key`.
    pub(crate) fn write_value(&self, key: &LeaseKey, value: usize) {
        let bytes = item_bytes(key, value, 0);
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.write_units
            .fetch_add(bytes.div_ceil(1024).max(1), Ordering::Relaxed);
    }

    /// The counters now.
    pub fn counts(&self) -> TallyCounts {
        TallyCounts {
            requests: self.requests.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            read_units: self.read_units.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            write_units: self.write_units.load(Ordering::Relaxed),
        }
    }
}

/// One cell of the scale table.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ScaleCell {
    /// Workers.
    pub workers: usize,
    /// Units.
    pub units: usize,
    /// With a crash and a replacement every 8 ticks.
    pub churn: bool,
    /// Ticks measured (after the fleet first owned every unit).
    pub ticks: u32,
    /// Whether the workers elect an assigner.
    pub assigner: bool,
    /// The seed.
    pub seed: u64,
    /// Session duration and interval (default 10 s and 2.5 s).
    pub timing: Option<(Duration, Duration)>,
}

impl ScaleCell {
    /// `workers` x `units`, steady, 32 ticks measured, without an assigner.
    pub fn new(workers: usize, units: usize) -> Self {
        Self {
            workers,
            units,
            churn: false,
            ticks: 32,
            assigner: false,
            seed: 1,
            timing: None,
        }
    }

    /// With a crash and a replacement every 8 ticks.
    pub fn with_churn(mut self) -> Self {
        self.churn = true;
        self
    }

    /// With an assigner.
    pub fn with_assigner(mut self) -> Self {
        self.assigner = true;
        self
    }

    /// With sessions of `session` renewed every `interval`.
    pub fn with_timing(mut self, session: Duration, interval: Duration) -> Self {
        self.timing = Some((session, interval));
        self
    }

    /// Measuring `ticks` ticks.
    pub fn with_ticks(mut self, ticks: u32) -> Self {
        self.ticks = ticks;
        self
    }
}

/// What one cell measured.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ScaleRow {
    /// The cell.
    pub cell: ScaleCell,
    /// Requests per worker per tick.
    pub requests_per_worker_tick: f64,
    /// Records read per worker per tick.
    pub records_per_worker_tick: f64,
    /// Bytes read per worker per tick.
    pub bytes_per_worker_tick: f64,
    /// Requests per tick, fleet-wide.
    pub fleet_requests_per_tick: f64,
    /// Records read per tick, fleet-wide.
    pub fleet_records_per_tick: f64,
    /// Bytes read per tick, fleet-wide.
    pub fleet_bytes_per_tick: f64,
    /// Ticks (of [`ScaleCell::ticks`]) at whose end some unit had no running trusted owner.
    pub ticks_not_owned: u32,
    /// DynamoDB on demand, a month: reads.
    pub read_cost_month: f64,
    /// DynamoDB on demand, a month: writes.
    pub write_cost_month: f64,
    /// Safety violations (units trusted twice) seen.
    pub violations: usize,
}

/// Starts `workers` workers, runs until the fleet owns every unit (at most 10 simulated minutes)
/// and four ticks more, checking safety at every tick's end: whether it owns every unit then.
fn settle(sim: &mut Simulation, workers: usize, interval: Duration) -> bool {
    for _ in 0..workers {
        sim.join();
    }
    let mut waited = Duration::ZERO;
    let mut owned = sim.all_owned();
    while !owned && waited < Duration::from_secs(600) {
        sim.run_for(interval);
        owned = sim.check_now_and_owned();
        waited += interval;
    }
    for _ in 0..4 {
        sim.run_for(interval);
        owned = sim.check_now_and_owned();
    }
    owned
}

/// Runs one cell: `W` workers join (with a move bound of one share, `L/W`, a tick, or 256 if
/// more), the fleet runs until it owns every unit (at most 10 simulated minutes) and four ticks
/// more, then `ticks` ticks are measured, with a crash of a random
/// running worker and a new worker every 8 ticks under churn. Safety is checked at every tick's
/// end (the big cells would spend most of their time checking after every worker's tick).
pub fn run_cell(cell: &ScaleCell) -> ScaleRow {
    // One share a tick: with the default bound of 256, a fleet of 100,000 units needs hundreds of
    // ticks to settle, and a dead worker's share is taken 256 units a tick (the bound applies to
    // expired units too; lifting it there is another part of issue 24).
    let share = cell.units.div_ceil(cell.workers.max(1));
    let mut config = SimConfig::new(cell.units, cell.seed).with_max_moves(share.max(256));
    config.assigner = cell.assigner;
    config.check_every_step = false;
    if let Some((session, interval)) = cell.timing {
        config.session_duration = session;
        config.interval = interval;
    }
    let mut sim = Simulation::new(config);
    let interval = sim.interval();
    settle(&mut sim, cell.workers, interval);
    let before = sim.tally();
    let mut not_owned = 0;
    let mut worker_ticks = 0_u64;
    let mut rng = crate::Rng::new(cell.seed ^ 0x5ca1e);
    for tick in 1..=cell.ticks {
        if cell.churn && tick % 8 == 0 {
            let running = sim.running();
            if !running.is_empty() {
                let victim = running[rng.below(running.len() as u64) as usize];
                sim.crash(victim);
                sim.join();
            }
        }
        sim.run_for(interval);
        let owned = sim.check_now_and_owned();
        worker_ticks += sim.running().len() as u64;
        if !owned {
            not_owned += 1;
        }
    }
    let counts = sim.tally().since(&before);
    let ticks = f64::from(cell.ticks.max(1));
    let per_worker = worker_ticks.max(1) as f64;
    let seconds = ticks * interval.as_secs_f64();
    let month = MONTH_SECONDS / seconds;
    ScaleRow {
        cell: cell.clone(),
        requests_per_worker_tick: counts.requests as f64 / per_worker,
        records_per_worker_tick: counts.records as f64 / per_worker,
        bytes_per_worker_tick: counts.bytes as f64 / per_worker,
        fleet_requests_per_tick: counts.requests as f64 / ticks,
        fleet_records_per_tick: counts.records as f64 / ticks,
        fleet_bytes_per_tick: counts.bytes as f64 / ticks,
        ticks_not_owned: not_owned,
        read_cost_month: counts.read_units as f64 * month * READ_PRICE_PER_MILLION / 1e6,
        write_cost_month: counts.write_units as f64 * month * WRITE_PRICE_PER_MILLION / 1e6,
        violations: sim.violations().len(),
    }
}

/// A fleet under steady churn, for the "takeover under churn" table: `workers` workers (with an
/// assigner) dividing `units` units, one running worker crashed and a new one started every
/// `period` of simulated time, `crashes` times.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ChurnCell {
    /// Workers.
    pub workers: usize,
    /// Units.
    pub units: usize,
    /// Session duration `d`.
    pub session: Duration,
    /// Tick interval `I`.
    pub interval: Duration,
    /// Simulated time between crashes (each with a replacement).
    pub period: Duration,
    /// Crashes measured.
    pub crashes: u32,
    /// The seed (tick phases, victims).
    pub seed: u64,
}

impl ChurnCell {
    /// `workers` x `units` with sessions of `session` renewed every `interval`, a crash and a
    /// replacement every 20 s, 10 crashes measured, seed 1.
    pub fn new(workers: usize, units: usize, session: Duration, interval: Duration) -> Self {
        Self {
            workers,
            units,
            session,
            interval,
            period: Duration::from_secs(20),
            crashes: 10,
            seed: 1,
        }
    }

    /// Measuring `crashes` crashes.
    pub fn with_crashes(mut self, crashes: u32) -> Self {
        self.crashes = crashes;
        self
    }

    /// With seed `seed`.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The bound on a crashed worker's units being owned again: `d + 2I`.
    pub fn bound(&self) -> Duration {
        self.session + self.interval * 2
    }
}

/// What a [`ChurnCell`] measured.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ChurnRow {
    /// The cell.
    pub cell: ChurnCell,
    /// Ticks (intervals) measured: `crashes` periods.
    pub ticks: u32,
    /// Of which fully owned at their end: every unit had a running worker that trusted it.
    pub ticks_owned: u32,
    /// The longest time the fleet was not fully owned: from a crash (or, for a gap that no
    /// crash opened, the end of the last fully owned tick) to the first worker tick after which
    /// every unit was owned again. `None` if some gap had not closed when the run ended.
    pub longest_not_owned: Option<Duration>,
    /// Units trusted twice (must be 0).
    pub violations: usize,
}

impl ChurnRow {
    /// Fully owned ticks as a fraction of the ticks measured.
    pub fn owned_fraction(&self) -> f64 {
        f64::from(self.ticks_owned) / f64::from(self.ticks.max(1))
    }
}

/// Runs a [`ChurnCell`]: the workers join (move bound one share a tick, as [`run_cell`]), the
/// fleet runs until it owns every unit (at most 10 simulated minutes) and four ticks more; then
/// every `period` a random running worker crashes and a new one joins, `crashes` times, and each
/// tick's end is judged fully owned or not. Safety is checked at every tick's end; while the fleet
/// is not fully owned, ownership is checked after every worker tick, so the longest gap is timed
/// to the tick that closed it.
pub fn run_churn(cell: &ChurnCell) -> ChurnRow {
    let share = cell.units.div_ceil(cell.workers.max(1));
    let mut config = SimConfig::new(cell.units, cell.seed).with_max_moves(share.max(256));
    config.assigner = true;
    config.check_every_step = false;
    config.session_duration = cell.session;
    config.interval = cell.interval;
    let mut sim = Simulation::new(config);
    let interval = cell.interval;
    let owned = settle(&mut sim, cell.workers, interval);
    let per_period = u32::try_from(cell.period.as_nanos() / interval.as_nanos().max(1))
        .unwrap_or(u32::MAX)
        .max(1);
    let ticks = per_period.saturating_mul(cell.crashes);
    let mut rng = crate::Rng::new(cell.seed ^ 0x7a6e);
    let mut gap_since = (!owned).then(|| sim.now());
    let mut longest = Duration::ZERO;
    let mut ticks_owned = 0;
    for tick in 0..ticks {
        if tick % per_period == 0 {
            let running = sim.running();
            if !running.is_empty() {
                let victim = running[rng.below(running.len() as u64) as usize];
                sim.crash(victim);
                sim.join();
                gap_since.get_or_insert(sim.now());
            }
        }
        let end = sim.now() + interval;
        while sim.next_event_at().is_some_and(|at| at <= end) {
            sim.step();
            if let Some(since) = gap_since
                && sim.all_owned()
            {
                longest = longest.max(sim.now() - since);
                gap_since = None;
            }
        }
        sim.run_for(end.saturating_sub(sim.now()));
        if sim.check_now_and_owned() {
            ticks_owned += 1;
        } else {
            // A gap no crash opened (a hand-over between two ticks): counted from the end of
            // the last fully owned tick, an upper bound.
            gap_since.get_or_insert(end - interval);
        }
    }
    ChurnRow {
        cell: cell.clone(),
        ticks,
        ticks_owned,
        longest_not_owned: gap_since.is_none().then_some(longest),
        violations: sim.violations().len(),
    }
}

/// Kills one of `workers` (with an assigner; `victim_is_assigner` picks the assigner or another
/// worker) once the fleet owns `units` units and has run a session duration more; returns how
/// long until every unit is owned again (checked after every worker tick; `None` if not within
/// a minute of simulated time) and the units trusted twice.
pub fn run_kill(
    workers: usize,
    units: usize,
    session: Duration,
    interval: Duration,
    victim_is_assigner: bool,
) -> (Option<Duration>, usize) {
    let share = units.div_ceil(workers.max(1));
    let mut config = SimConfig::new(units, 1).with_max_moves(share.max(256));
    config.assigner = true;
    config.check_every_step = false;
    config.session_duration = session;
    config.interval = interval;
    let mut sim = Simulation::new(config);
    for _ in 0..workers {
        sim.join();
    }
    let settled = sim.run_until(Duration::from_secs(600), &mut |s| {
        s.assigner().is_some() && s.is_balanced()
    });
    sim.run_for(session);
    sim.check_now();
    let assigner = sim.assigner();
    let victim = match (settled, assigner) {
        (Some(_), Some(a)) if victim_is_assigner => a,
        (Some(_), Some(a)) => (a + 1) % workers.max(1),
        _ => return (None, sim.violations().len()),
    };
    sim.crash(victim);
    let took = sim.run_until_all_owned(Duration::from_secs(60));
    sim.check_now();
    (took, sim.violations().len())
}

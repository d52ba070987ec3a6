//! A model of the KCL 2.x lease algorithm, as ANCHORS.md describes it, for side-by-side figures.
//!
//! One record per lease (`owner`, `counter`). Every worker renews each lease it holds every
//! `failover / 3` (one conditional write each) and, every `2 * failover`, scans the whole table
//! (one request, `L` records) and takes leases: expired ones first (owner unset, or counter
//! unchanged for `failover` on the worker's own clock), up to `target = ceil(L / workers seen)`;
//! otherwise it steals one lease from the most loaded worker. Workers that hold no lease are
//! invisible to others; a clean shutdown hands nothing over.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::{Counters, FleetModel, Rng};

/// Settings of a [`KclSimulation`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct KclConfig {
    /// How many leases.
    pub units: usize,
    /// KCL's `failoverTimeMillis` (default 10 s).
    pub failover: Duration,
    /// Most leases stolen per taker run (KCL's `maxLeasesToStealAtOneTime`, default 1).
    pub max_steal: usize,
    /// The seed of every random choice.
    pub seed: u64,
}

impl KclConfig {
    /// KCL's defaults for `units` leases.
    pub fn new(units: usize, seed: u64) -> Self {
        Self {
            units,
            failover: Duration::from_secs(10),
            max_steal: 1,
            seed,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Record {
    owner: Option<usize>,
    counter: u64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    Running,
    Gone,
}

#[derive(Debug)]
struct KclWorker {
    state: State,
    held: BTreeSet<usize>,
    /// Per lease: (owner, counter) last scanned and when it last changed, on this worker's clock.
    view: Vec<Option<(Option<usize>, u64, Duration)>>,
    next_renew: Duration,
    next_take: Duration,
}

/// KCL 2.x, simulated.
#[derive(Debug)]
pub struct KclSimulation {
    config: KclConfig,
    rng: Rng,
    now: Duration,
    table: Vec<Record>,
    workers: Vec<KclWorker>,
    counters: Counters,
}

impl KclSimulation {
    /// An empty fleet over a table of `config.units` unowned leases.
    pub fn new(config: KclConfig) -> Self {
        Self {
            rng: Rng::new(config.seed),
            table: vec![
                Record {
                    owner: None,
                    counter: 0
                };
                config.units
            ],
            config,
            now: Duration::ZERO,
            workers: Vec::new(),
            counters: Counters::default(),
        }
    }

    /// Gives the leases to the running workers round-robin, as a balanced fleet holds them, and
    /// lets every worker see the table: the steady state, without simulating KCL's slow start.
    pub fn preassign(&mut self) {
        let running = self.running();
        if running.is_empty() {
            return;
        }
        for (lease, record) in self.table.iter_mut().enumerate() {
            let owner = running[lease % running.len()];
            record.owner = Some(owner);
            record.counter += 1;
        }
        let now = self.now;
        for (index, worker) in self.workers.iter_mut().enumerate() {
            worker.held.clear();
            for (lease, record) in self.table.iter().enumerate() {
                worker.view[lease] = Some((record.owner, record.counter, now));
                if record.owner == Some(index) {
                    worker.held.insert(lease);
                }
            }
        }
    }

    fn renew_every(&self) -> Duration {
        self.config.failover / 3
    }

    fn take_every(&self) -> Duration {
        self.config.failover * 2
    }

    fn renew(&mut self, w: usize) {
        let held: Vec<usize> = self.workers[w].held.iter().copied().collect();
        for lease in held {
            self.counters.requests += 1;
            let record = &mut self.table[lease];
            if record.owner == Some(w) {
                record.counter += 1;
            } else {
                self.workers[w].held.remove(&lease);
            }
        }
    }

    fn take(&mut self, w: usize) {
        let now = self.now;
        let failover = self.config.failover;
        self.counters.requests += 1;
        self.counters.unit_lists += 1;
        self.counters.records_read += self.table.len() as u64;
        let mut expired = Vec::new();
        let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
        for (lease, record) in self.table.iter().enumerate() {
            let seen = &mut self.workers[w].view[lease];
            let changed =
                !matches!(seen, Some((o, c, _)) if *o == record.owner && *c == record.counter);
            if changed {
                *seen = Some((record.owner, record.counter, now));
            }
            let since = seen.map_or(now, |(_, _, t)| t);
            match record.owner {
                None => expired.push(lease),
                Some(_) if now - since > failover => expired.push(lease),
                Some(owner) => *counts.entry(owner).or_default() += 1,
            }
        }
        counts.entry(w).or_default();
        let workers = counts.len();
        let target = self.table.len().div_ceil(workers);
        let mine = counts.get(&w).copied().unwrap_or(0);
        let needed = target.saturating_sub(mine);
        if needed == 0 {
            return;
        }
        let chosen: Vec<usize> = if expired.is_empty() {
            let Some((&victim, &load)) = counts
                .iter()
                .filter(|(o, _)| **o != w)
                .max_by_key(|(o, c)| (**c, std::cmp::Reverse(**o)))
            else {
                return;
            };
            if load > target || (load == target && needed > 1) {
                let mut theirs: Vec<usize> = (0..self.table.len())
                    .filter(|l| self.table[*l].owner == Some(victim))
                    .collect();
                self.rng.shuffle(&mut theirs);
                theirs.truncate(self.config.max_steal.min(needed));
                theirs
            } else {
                Vec::new()
            }
        } else {
            self.rng.shuffle(&mut expired);
            expired.truncate(needed);
            expired
        };
        for lease in chosen {
            // A conditional write on the counter the scan saw.
            self.counters.requests += 1;
            let seen = self.workers[w].view[lease].map(|(_, c, _)| c);
            let record = &mut self.table[lease];
            if Some(record.counter) == seen {
                record.owner = Some(w);
                record.counter += 1;
                self.workers[w].held.insert(lease);
                self.counters.moves += 1;
            }
        }
    }

    fn next_event(&self) -> Option<(usize, Duration, bool)> {
        self.workers
            .iter()
            .enumerate()
            .filter(|(_, k)| k.state == State::Running)
            .flat_map(|(i, k)| [(i, k.next_renew, false), (i, k.next_take, true)])
            .min_by_key(|(i, at, take)| (*at, *i, *take))
    }

    fn owned_counts(&self) -> BTreeMap<usize, usize> {
        let mut counts: BTreeMap<usize, usize> = self
            .workers
            .iter()
            .enumerate()
            .filter(|(_, k)| k.state == State::Running)
            .map(|(i, _)| (i, 0))
            .collect();
        for record in &self.table {
            if let Some(owner) = record.owner
                && let Some(c) = counts.get_mut(&owner)
            {
                *c += 1;
            }
        }
        counts
    }
}

impl FleetModel for KclSimulation {
    fn join(&mut self) -> usize {
        let index = self.workers.len();
        let renew_phase = self.rng.below(self.renew_every().as_millis() as u64);
        let take_phase = self.rng.below(self.take_every().as_millis() as u64);
        self.workers.push(KclWorker {
            state: State::Running,
            held: BTreeSet::new(),
            view: vec![None; self.table.len()],
            next_renew: self.now + Duration::from_millis(renew_phase),
            // KCL runs its first taker pass at start-up.
            next_take: self.now + Duration::from_millis(take_phase % 1000),
        });
        index
    }

    fn crash(&mut self, index: usize) {
        if let Some(k) = self.workers.get_mut(index) {
            k.state = State::Gone;
        }
    }

    fn shutdown(&mut self, index: usize) {
        // KCL 2.x does not hand leases over on shutdown (#845, #1452): same as a crash.
        self.crash(index);
    }

    fn run_for(&mut self, duration: Duration) {
        let end = self.now + duration;
        while self.next_event().is_some_and(|(_, at, _)| at <= end) {
            self.step();
        }
        self.now = self.now.max(end);
    }

    fn now(&self) -> Duration {
        self.now
    }

    fn is_balanced(&self) -> bool {
        let counts = self.owned_counts();
        if counts.is_empty() || !self.all_owned() {
            return false;
        }
        let units = self.table.len();
        let (lo, hi) = (units / counts.len(), units.div_ceil(counts.len()));
        counts.values().all(|c| (lo..=hi).contains(c))
    }

    fn all_owned(&self) -> bool {
        self.table.iter().all(|r| {
            r.owner.is_some_and(|o| {
                self.workers
                    .get(o)
                    .is_some_and(|k| k.state == State::Running)
            })
        })
    }

    fn counters(&self) -> Counters {
        self.counters
    }

    fn interval(&self) -> Duration {
        self.renew_every()
    }

    fn running(&self) -> Vec<usize> {
        (0..self.workers.len())
            .filter(|i| self.workers[*i].state == State::Running)
            .collect()
    }

    fn step(&mut self) -> bool {
        let Some((w, at, take)) = self.next_event() else {
            return false;
        };
        self.now = self.now.max(at);
        self.counters.ticks += 1;
        if take {
            self.take(w);
            self.workers[w].next_take = at + self.take_every();
        } else {
            self.renew(w);
            self.workers[w].next_renew = at + self.renew_every();
        }
        true
    }
}

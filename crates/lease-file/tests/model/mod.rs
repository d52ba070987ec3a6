//! An exhaustive model checker for lease protocols over a model file system (issue 9,
//! "Exhaustive model check of the protocol").
//!
//! # What is explored
//!
//! A [`World`] is a model file system ([`fs::Fs`]), up to [`MAX_PROCS`] processes, each an
//! explicit state machine (the protocol's `Local` type) or crashed, a ghost clock ([`Time`]) and
//! the ghost history of issued generations. From every world, every live process may take its
//! next step (one atomic file-system operation, possibly with a local decision merged into it)
//! or **crash** (stop forever; its files stay). A **pause** needs no transition of its own: a
//! process that is not scheduled is paused, for as many of the others' steps as the search
//! likes, at every point of its program. [`explore`] is a breadth-first search over all
//! interleavings with a visited set (so the first violation found has a shortest trace), and
//! it checks on every state that
//!
//! * no generation (fencing token) is issued twice,
//! * generations are issued in strictly increasing order,
//! * never two live processes believe they hold the lease ([`Protocol::believes`]).
//!
//! Crash transitions cannot, with these properties, reveal a violation that pauses do not: a
//! crashed process is one never scheduled again that also stops believing, so every violation
//! reachable through a crash is reachable by pausing instead. They are explored anyway (at about
//! twice the states): a model in which survivors observe deaths (a pid probe, a kernel lock the
//! kernel drops) needs them, and [`Bounds::crashes`] turns them off for quick experiments.
//!
//! The state space is kept finite by the models' own bounds (acquisitions and heartbeats per
//! process, the highest epoch number): a process that would exceed one simply stops, which is
//! a pause that never ends, so bounding can hide violations beyond the bounds but never makes
//! one up.
//!
//! # Time, staleness and pauses
//!
//! The models have no numeric clock. Instead, [`Time`] records *which clock readings are surely
//! older than the stale threshold*:
//!
//! * A process reads its monotonic clock to start a deadline (`sent` in `lock.rs`):
//!   [`Time::mark`] returns a [`Stamp`], the number of such readings that process has made.
//! * A contender that first observes something (a record's heartbeat counter, a critical
//!   section's epoch) takes [`Time::now`]: a [`Snapshot`] of every process's latest stamp.
//! * When a later step of the same contender observes the *same* thing again, the model may
//!   branch on "the stale threshold has passed since the first observation"
//!   ([`Time::threshold_passed_since`]). That judgement is allowed only when the observed
//!   state really stood still across the observer's own steps, exactly the condition the code
//!   times on its monotonic clock, and it is a choice because the real elapsed time can be
//!   anything. Taking it records that every stamp taken before the first observation is now more
//!   than a stale threshold old, so every deadline based on one has passed
//!   ([`Time::passed`]); deadlines based on later stamps are treated as still running, which
//!   they may be in a real run (the later stamp can be arbitrarily close to now).
//!
//! This is sound for safety. A stale judgement only ever demands that *at least* a stale
//! threshold passed between two of the model's steps, which a real run can always satisfy by
//! pausing someone (with monotonic clocks of equal rate, the assumption the crate documents):
//! so every duplicate or decreasing generation the model finds is one a real run can produce,
//! with pauses, whatever the threshold. A belief, on the other hand, demands that a deadline has
//! *not* yet passed; the model ignores the holder-side margin (`stale_threshold / 10` in
//! `lock.rs`) and so lets holders trust a little longer than the code does; an overlap it
//! reports is real provided the holder's stamp came more than that margin after the
//! contender's first observation (a pause between the two arranges that).
//!
//! For "finds nothing" to mean something, a model must also not miss runs: stale judgements are
//! offered whenever the code could make them, and beliefs last at least as long as in the code.
//! One known gap in [`heartbeat_only`]: a heartbeat that fails before its deadline has surely
//! passed is always retried, never given up. Not modelled there: the
//! pid-probe fast path (`writer_is_gone`: it only lets a contender act earlier on a crashed
//! writer, which the stale judgement also allows), unparseable records, kernel mode.
//! [`cas_chain`] models the proposed compare-and-swap protocol, kernel mode included, and its
//! fenced values, with Unix renames or Windows' two-step ones (with and without the `cas`
//! lock); its module docs say what it leaves out.
//!
//! # Adding a protocol
//!
//! Implement [`Protocol`]:
//!
//! 1. `Data`: what a file holds (a record, an epoch marker...); `Local`: a process's program
//!    counter plus everything it remembers (its tenure, its observations, its budgets). Both
//!    need `Clone + Debug + Eq + Hash`; keep them small, they are hashed on every state.
//! 2. [`Protocol::init`]: the initial file system and each process's initial state.
//! 3. [`Protocol::steps`]: for process `pid` in state `local`, every possible next step. Each
//!    step clones the world ([`World::with`]), applies **one** file-system operation (and the
//!    local decisions that follow from its result), and gives a label that says what happened
//!    (`"create P.cs.3 -> EEXIST"`). Nondeterministic decisions (a stale judgement) are several
//!    steps. When a process acquires, call [`World::issue`]; the checker does the rest.
//! 4. [`Protocol::believes`]: the generation a process would act on if asked now (in the
//!    file lock: `check()` returns `Ok`), using [`Time::passed`] for deadlines.
//!
//! Then `explore(&model, &Bounds::default())` and assert on the [`Report`]. See
//! [`heartbeat_only`] for today's heartbeat-only protocol, [`cas_chain`] for the proposed
//! compare-and-swap protocol and [`toys`] for small examples.

#![allow(dead_code)]

pub(crate) mod cas_chain;
pub(crate) mod fs;
pub(crate) mod heartbeat_only;
pub(crate) mod prune;
pub(crate) mod toys;

use std::collections::{HashSet, VecDeque};
use std::fmt::{self, Debug, Write as _};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::time::{Duration, Instant};

pub(crate) use fs::{Errno, Fs};

/// The most processes a world can have.
pub(crate) const MAX_PROCS: usize = 4;

/// A process index.
pub(crate) type Pid = usize;

/// One reading of a process's monotonic clock: its `n`th.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Stamp(u8);

/// Every process's latest clock reading at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Snapshot([u8; MAX_PROCS]);

/// The ghost clock: which stamps are surely older than the stale threshold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Time {
    marks: [u8; MAX_PROCS],
    passed: [u8; MAX_PROCS],
}

impl Time {
    /// Process `pid` reads its clock to start a deadline.
    pub(crate) fn mark(&mut self, pid: Pid) -> Stamp {
        self.marks[pid] += 1;
        Stamp(self.marks[pid])
    }
    /// Now, for an observation that may later be judged stale.
    pub(crate) fn now(&self) -> Snapshot {
        Snapshot(self.marks)
    }
    /// The stale threshold has passed since `since`.
    pub(crate) fn threshold_passed_since(&mut self, since: &Snapshot) {
        for (passed, &at) in self.passed.iter_mut().zip(since.0.iter()) {
            *passed = (*passed).max(at);
        }
    }
    /// Whether the stale threshold has surely passed since `pid` took `stamp`.
    pub(crate) fn passed(&self, pid: Pid, stamp: Stamp) -> bool {
        stamp.0 <= self.passed[pid]
    }
}

/// A process: running its protocol, or crashed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Proc<L> {
    Live(L),
    Crashed,
}

/// Everything that is, at one point of a run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct World<L, D> {
    pub(crate) fs: Fs<D>,
    pub(crate) procs: Vec<Proc<L>>,
    pub(crate) time: Time,
    /// Generations issued so far, in issue order.
    pub(crate) issued: Vec<u64>,
    /// Set by [`World::issue`] when a safety property broke.
    pub(crate) violation: Option<String>,
}

impl<L: Clone, D: Clone> World<L, D> {
    /// A world with `fs` and one process per local state.
    pub(crate) fn new(fs: Fs<D>, locals: Vec<L>) -> Self {
        assert!(locals.len() <= MAX_PROCS, "at most {MAX_PROCS} processes");
        Self {
            fs,
            procs: locals.into_iter().map(Proc::Live).collect(),
            time: Time::default(),
            issued: Vec::new(),
            violation: None,
        }
    }

    /// A copy of this world in which `pid` is in state `local`, to apply one step to.
    pub(crate) fn with(&self, pid: Pid, local: L) -> Self {
        let mut next = self.clone();
        next.procs[pid] = Proc::Live(local);
        next
    }

    /// Process `pid` was told it acquired the lease with `generation`.
    pub(crate) fn issue(&mut self, pid: Pid, generation: u64) {
        if self.violation.is_none() {
            if self.issued.contains(&generation) {
                self.violation = Some(format!(
                    "generation {generation} issued twice (P{pid} got it; issued so far: {:?})",
                    self.issued
                ));
            } else if let Some(&max) = self.issued.iter().max().filter(|&&m| m > generation) {
                self.violation = Some(format!(
                    "generation went backwards: P{pid} got {generation} after {max} was issued"
                ));
            }
        }
        self.issued.push(generation);
    }
}

/// One possible next step of a process.
#[derive(Debug)]
pub(crate) struct Step<L, D> {
    pub(crate) label: String,
    pub(crate) next: World<L, D>,
}

impl<L, D> Step<L, D> {
    pub(crate) fn new(label: impl Into<String>, next: World<L, D>) -> Self {
        Self {
            label: label.into(),
            next,
        }
    }
}

/// A protocol's model (see the module docs).
pub(crate) trait Protocol {
    /// A process's state.
    type Local: Clone + Debug + Eq + Hash;
    /// A file's contents.
    type Data: Clone + Debug + Eq + Hash;
    /// The initial world.
    fn init(&self) -> World<Self::Local, Self::Data>;
    /// Every next step of live process `pid`, which is in state `local`.
    fn steps(
        &self,
        pid: Pid,
        local: &Self::Local,
        world: &World<Self::Local, Self::Data>,
    ) -> Vec<Step<Self::Local, Self::Data>>;
    /// The generation `pid` would act on if asked now, if it believes it holds the lease.
    fn believes(
        &self,
        pid: Pid,
        local: &Self::Local,
        world: &World<Self::Local, Self::Data>,
    ) -> Option<u64>;
}

/// Limits of a search.
#[derive(Clone, Debug)]
pub(crate) struct Bounds {
    /// Whether processes may crash.
    pub(crate) crashes: bool,
    /// Stop (reporting `complete: false`) after this many distinct states.
    pub(crate) max_states: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            crashes: true,
            max_states: 20_000_000,
        }
    }
}

/// A broken property and how to get there.
#[derive(Debug)]
pub(crate) struct Violation {
    pub(crate) what: String,
    pub(crate) trace: Vec<String>,
    pub(crate) files: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "VIOLATION: {}", self.what)?;
        for (i, step) in self.trace.iter().enumerate() {
            writeln!(f, "{:>4}. {step}", i + 1)?;
        }
        write!(f, "files at the end: {}", self.files)
    }
}

/// The result of a search.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) states: usize,
    pub(crate) transitions: usize,
    pub(crate) depth: usize,
    /// All reachable states within the models' bounds were explored.
    pub(crate) complete: bool,
    pub(crate) violation: Option<Violation>,
    pub(crate) elapsed: Duration,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} states, {} transitions, depth {}, {}, {:.2?}",
            self.states,
            self.transitions,
            self.depth,
            if self.complete {
                "complete"
            } else {
                "incomplete"
            },
            self.elapsed
        )?;
        if let Some(v) = &self.violation {
            write!(f, "\n{v}")?;
        }
        Ok(())
    }
}

/// A fast 128-bit hasher for the visited set (SipHash dominated the profile). Two
/// multiply-rotate lanes, finished with the `MurmurHash3` mixer; not for adversarial input.
#[derive(Default)]
struct Fingerprinter {
    a: u64,
    b: u64,
}

impl Hasher for Fingerprinter {
    fn finish(&self) -> u64 {
        self.a
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0; 8];
            word.copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
        let mut last = 0u64;
        for &byte in chunks.remainder() {
            last = (last << 8) | u64::from(byte);
        }
        self.write_u64(last ^ ((bytes.len() as u64) << 56));
    }
    fn write_u8(&mut self, x: u8) {
        self.write_u64(u64::from(x));
    }
    fn write_u16(&mut self, x: u16) {
        self.write_u64(u64::from(x));
    }
    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
    fn write_u64(&mut self, x: u64) {
        self.a = (self.a ^ x)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(31);
        self.b = (self.b.rotate_left(23) ^ x)
            .wrapping_add(0x632b_e59b_d9b4_e019)
            .wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    }
}

fn fmix(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

fn fingerprint<T: Hash>(value: &T) -> u128 {
    let mut h = Fingerprinter::default();
    value.hash(&mut h);
    (u128::from(fmix(h.a)) << 64) | u128::from(fmix(h.b ^ h.a.rotate_left(7)))
}

/// The visited set's keys are fingerprints already: hash them by their low bits.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8) | u64::from(byte);
        }
    }
    fn write_u128(&mut self, x: u128) {
        #[allow(clippy::cast_possible_truncation)]
        {
            self.0 = x as u64;
        }
    }
}

type Visited = HashSet<u128, BuildHasherDefault<Prehashed>>;

/// Every successor of `world`, in a fixed order: each live process's steps, then its crash.
fn successors<P: Protocol>(
    model: &P,
    world: &World<P::Local, P::Data>,
    crashes: bool,
) -> Vec<Step<P::Local, P::Data>> {
    let mut out = Vec::new();
    for (pid, proc) in world.procs.iter().enumerate() {
        let Proc::Live(local) = proc else { continue };
        for step in model.steps(pid, local, world) {
            out.push(Step::new(format!("P{pid}: {}", step.label), step.next));
        }
        if crashes {
            let mut next = world.clone();
            next.procs[pid] = Proc::Crashed;
            out.push(Step::new(format!("P{pid}: crashes"), next));
        }
    }
    out
}

fn check<P: Protocol>(model: &P, world: &World<P::Local, P::Data>) -> Option<String> {
    if let Some(v) = &world.violation {
        return Some(v.clone());
    }
    let believers: Vec<(Pid, u64)> = world
        .procs
        .iter()
        .enumerate()
        .filter_map(|(pid, p)| match p {
            Proc::Live(l) => model.believes(pid, l, world).map(|g| (pid, g)),
            Proc::Crashed => None,
        })
        .collect();
    (believers.len() > 1).then(|| {
        let mut what = String::from("two processes believe they hold the lease:");
        for (pid, generation) in believers {
            let _ = write!(what, " P{pid} (generation {generation})");
        }
        what
    })
}

type ModelWorld<P> = World<<P as Protocol>::Local, <P as Protocol>::Data>;

/// Breadth-first search of every interleaving (see the module docs).
pub(crate) fn explore<P: Protocol>(model: &P, bounds: &Bounds) -> Report {
    let start = Instant::now();
    let init = model.init();
    // For each state: its parent's index and the successor's position, to replay its trace.
    let mut parents: Vec<(u32, u32)> = vec![(u32::MAX, 0)];
    let mut depths: Vec<u16> = vec![0];
    let mut visited = Visited::default();
    visited.insert(fingerprint(&init));
    let mut queue: VecDeque<(u32, ModelWorld<P>)> = VecDeque::from([(0, init)]);
    let mut transitions = 0;
    let mut depth = 0;
    let mut found = None;
    let mut complete = true;
    if let Some(what) = check(model, &queue[0].1) {
        found = Some((0, what));
    }
    'search: while let Some((index, world)) = queue.pop_front() {
        if found.is_some() {
            break;
        }
        for (position, step) in successors(model, &world, bounds.crashes)
            .into_iter()
            .enumerate()
        {
            transitions += 1;
            if !visited.insert(fingerprint(&step.next)) {
                continue;
            }
            if visited.len() > bounds.max_states {
                complete = false;
                break 'search;
            }
            let child = u32::try_from(parents.len()).unwrap_or(u32::MAX);
            parents.push((index, u32::try_from(position).unwrap_or(u32::MAX)));
            let d = depths[index as usize] + 1;
            depths.push(d);
            depth = depth.max(usize::from(d));
            if let Some(what) = check(model, &step.next) {
                found = Some((child, what));
                break 'search;
            }
            queue.push_back((child, step.next));
        }
    }
    let violation = found.map(|(index, what)| {
        let mut path = Vec::new();
        let mut at = index;
        while at != 0 {
            let (parent, position) = parents[at as usize];
            path.push(position as usize);
            at = parent;
        }
        path.reverse();
        let mut world = model.init();
        let mut trace = Vec::new();
        for position in path {
            let step = successors(model, &world, bounds.crashes)
                .into_iter()
                .nth(position)
                .expect("replay follows the search");
            trace.push(step.label);
            world = step.next;
        }
        Violation {
            what,
            trace,
            files: world.fs.to_string(),
        }
    });
    Report {
        states: visited.len(),
        transitions,
        depth,
        complete: complete && violation.is_none(),
        violation,
        elapsed: start.elapsed(),
    }
}

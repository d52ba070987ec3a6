//! The proposed compare-and-swap protocol: the lease state *is* the name of the one state entry
//! in the lock directory, and every transition is a `rename` of the observed name. Two models:
//! [`CasLease`] (the lease, heartbeat-only and kernel mode) and [`FencedChain`] (fenced values
//! kept in the same directory).
//!
//! # The lease ([`CasLease`])
//!
//! A lock is a directory `K` holding exactly one lease-state entry, created with `K` as
//! `free.0`:
//!
//! * `free.<gen>`: released (or never acquired);
//! * `held.<gen>.<seq>.<tok>.<flag>`: held by the tenure with fencing generation `gen`, renewed
//!   `seq` times; `tok` names the holder's tenure (the code's token hash; here the process and
//!   its tenure number), `flag` is `k` if the holder held the kernel lock (`flock` on `K`) when
//!   it wrote the name, else `n`. (The code's deadline field is left out: time is abstract.)
//!
//! A state never repeats (the generation only grows, and within one the counter only grows), so
//! `rename(observed, new)` succeeds exactly when the state is still the observed one: a
//! compare-and-swap. The steps of a process, each one atomic file-system operation:
//!
//! * **Acquire**: list `K`. From `free.g`, rename it to `held.(g+1).0.<me>.<flag>`; success
//!   issues generation `g + 1`. A `held` name of somebody else is timed: the first list that
//!   shows that exact name takes [`Time::now`](super::Time::now); a later list that shows the
//!   same name may judge it stale (the branch the checker's module docs describe), and the
//!   next step renames *that* name. In kernel mode, a process holding the `flock` that lists a
//!   `k` name may rename it at once: its holder took the `flock` before writing it and keeps it
//!   for its tenure, so only its death can have released it. (The stale judgement is offered
//!   too: the code may time the name before it gets the `flock`.)
//! * **Heartbeat**: rename the holder's current name to the same generation with `seq + 1` and
//!   the flag it has now (a holder that acquired without the `flock` and got it since upgrades
//!   `n` to `k`). `ENOENT`: the lease is lost.
//! * **Release**: rename the current name to `free.<gen>` (the tenure ends whatever the result).
//! * **`flock` on `K`** (kernel mode): a ghost lock, owned by at most one live process, taken at
//!   any point when free (a blocking `flock` returns exactly then; a non-blocking one that fails
//!   changes nothing). The kernel drops a crashed process's `flock` (crashed processes keep no
//!   state). A process without a tenure may unlock at any point (after its release, or after
//!   giving up an attempt); a holder never unlocks while its tenure lasts.
//!
//! Bounds: acquisitions per process, heartbeats per tenure and the highest generation anybody
//! acquires (a process that would exceed one stops: a pause that never ends). Every tenure may
//! release. A process left with nothing to do (no tenure, no `flock`, no acquisition left) exits,
//! which is the same as a crash for every property, and does not take the `flock` any more
//! (holding it idle would only keep others from it). Beyond the checker's properties, every
//! list checks that `K` holds exactly one state entry.
//!
//! A holder believes it holds the lease while its tenure is not lost or released and the
//! deadline of its latest successful acquire or heartbeat has not surely passed. The clock
//! reading that starts a deadline is merged into the rename it precedes: the model's deadline
//! then starts a little later than the code's, which only lets holders believe longer (so the
//! "two believers" check is, if anything, stricter than the code needs). A heartbeat is offered
//! even after its deadline passed: if the rename succeeds the state was still the holder's.
//!
//! [`LeaseMutation`] breaks the design on purpose, to show that the checker would notice.
//!
//! # Fenced values ([`FencedChain`])
//!
//! `K` also holds exactly one chain entry `V.<fence>.<seq>.<nonce>` (created with `K` as
//! `V.0.0.none`: no value yet) naming the data file `data.<nonce>` that holds the current value.
//! Every chain rename increments `seq`, so chain names never repeat either.
//!
//! * **`put(f, value)`**: `O_EXCL` create `data.<n>` (a fresh nonce), then write the value into
//!   it (two steps, as a real `open` + `write`; a create with its contents in one step is a
//!   special case); list; if the chain's fence is above `f`, unlink `data.<n>` and
//!   return `Fenced`; else rename `V.f0.s0.n0` to `V.f.(s0+1).n`; success acknowledges the put,
//!   then `data.<n0>` is unlinked; `ENOENT` lists again.
//! * **`fence_and_read(f)`**: list; a fence above `f` returns `Fenced`; open and read
//!   `data.<n0>` (the descriptor stays readable after an unlink: reading at the open is the
//!   same, as a referenced data file never changes; `ENOENT` lists again); rename `V.f0.s0.n0`
//!   to `V.f.(s0+1).n0`; success returns what was read, `ENOENT` lists again.
//!
//! Each writer has a fixed fence (its lease generation) and runs a bounded number of operations,
//! each `put` or `fence_and_read` as the search likes. Properties, checked as they happen:
//!
//! * **fences never go back**: no put with fence `f` is installed after a put or a
//!   `fence_and_read` with fence `g > f` was acknowledged (so no acknowledged value is replaced
//!   by one with a lower fence);
//! * **reads are fresh**: a `fence_and_read` returns a value some put wrote completely (or the
//!   initial empty value), and none older than the latest put acknowledged before it started.
//!
//! Every list also checks that `K` holds exactly one chain entry.
//!
//! A put counts as acknowledged as soon as its rename succeeds (the unlink after it is cleanup
//! whose result does not change the answer): the earliest moment any caller could learn of it,
//! which makes both properties as demanding as they can be. The checker's history of installed
//! values lives in a file `ghost` outside `K`, which no modelled process names: it is ghost
//! state, kept in the file system only so that the generic checker hashes and prints it.
//!
//! # Windows renames ([`Renames`])
//!
//! Everything above assumes Unix's `rename`, one kernel step that fails once its source name is
//! gone ([`Renames::Unix`], the default). On Windows a rename opens its source by name and then
//! renames the *file object* through the handle (`platforms.md`, *Windows*, points
//! 3 and 4): [`Renames::Windows`] makes every rename of both models two steps, [`Fs::open`]
//! then [`Fs::rename_file`], with a crash or pause allowed between them. Two writers that both
//! open the same name before either renames both succeed, the second moving the file on from
//! the first one's new name; the checker finds it in six steps for the lease (generation 1
//! issued twice) and in eight for the chain (a put with fence 1 installed after a
//! `fence_and_read` with fence 2 was acknowledged).
//!
//! [`Renames::WindowsUnderCas`] is the port's design: every rename (acquire, takeover,
//! heartbeat, release, both chain renames) takes the exclusive lock on `K/cas`, checks that its
//! source still exists, opens it, renames through the handle and unlocks: five steps, each
//! atomic, a crash or pause allowed between any two. The lock is a ghost file
//! `cas-owner.P<n>` outside `K` (no modelled process names it); the lock step is offered only
//! while nobody owns it (`File::lock` blocks until then). A crashed owner's lock stays taken
//! until a separate step frees it, which any live process offers (labelled "(the system)"), so
//! the search may free it at any point after the crash or never: the system frees it later,
//! never sooner. A holder's release stops believing at its first step (the model's holder
//! may believe a little longer than the code's while it waits for `cas`, which only makes the
//! "two believers" check stricter). With the lock, both models pass in every mode they pass
//! with Unix renames; [`Renames::WindowsUnlockBeforeRename`] (unlock once the handle is open,
//! before renaming through it) is caught.
//!
//! Under the lock the check of the source is redundant in this model: the open by name fails
//! on a missing name, and no other writer renames between the check and the rename. (With the
//! check left out, every `windows_rename_under_the_cas_lock_*` test still passes.) It stays
//! in the design as the port's defence should a rename call not fail on a missing source.
//!
//! The [`LeaseMutation`]s and [`ChainMutation`]s are meant for Unix renames (with Windows
//! renames, their extra list happens at each of the rename's steps).
//!
//! Not modelled, in both: the lease entry and the chain together in one `K` (they never name
//! each other's entries: lists are filtered by prefix), unparseable or foreign entries, `fsync`
//! and crash recovery of the directory itself, leftover data files of crashed writers (they
//! are never named by the chain again), and non-atomic `readdir` (lists are atomic here; a list
//! torn by a concurrent rename can show the old name, whose rename then fails, or zero or two
//! entries, which the code must treat as "list again").

use std::fmt::{self, Write as _};

use super::fs::Ino;
use super::{Errno, Fs, Pid, Proc, Protocol, Snapshot, Stamp, Step, World};

/// The lock directory.
const DIR: &str = "K";

fn path(entry: &str) -> String {
    format!("{DIR}/{entry}")
}

fn pid8(pid: Pid) -> u8 {
    u8::try_from(pid).unwrap_or(u8::MAX)
}

// ---------------------------------------------------------------------------------------------
// Renames: Unix, Windows, Windows under the `cas` lock
// ---------------------------------------------------------------------------------------------

/// How the models rename a state or chain entry (see the module docs, *Windows*).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Renames {
    /// POSIX `rename`: one atomic step that fails once the source name is gone.
    Unix,
    /// Windows' rename without a lock: open the source by name ([`Fs::open`]), then rename the
    /// file object through the handle ([`Fs::rename_file`]); two steps.
    Windows,
    /// The port's design: lock `cas` (offered only while it is free: a blocking
    /// `File::lock`), check that the source still exists, open it, rename through the handle,
    /// unlock; five steps.
    WindowsUnderCas,
    /// A deliberate bug: as [`Renames::WindowsUnderCas`], but `cas` is unlocked in the open's
    /// step, before the rename through the handle.
    WindowsUnlockBeforeRename,
}

/// Where a process is in a Windows rename (always [`Phase::Start`] with Unix renames, and
/// between renames).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Phase {
    /// No rename under way (or one about to start).
    Start,
    /// Holds `cas`; checks the source next.
    Locked,
    /// Holds `cas`, the source existed; opens it next.
    Checked,
    /// Holds a handle to the source's file object; renames it next.
    Opened(Ino),
    /// The rename is over; unlocks `cas` next, before anything else.
    Unlock,
}

/// The ghost file (outside `K`, named by no modelled process) whose presence says that process
/// `P<n>` owns the `cas` lock; a crashed owner's stays until [`free_crashed_cas`] removes it.
const CAS_OWNER: &str = "cas-owner.P";

/// Who owns the `cas` lock (possibly a crashed process whose lock the system has not freed yet).
fn cas_owner<D: Clone>(fs: &Fs<D>) -> Option<Pid> {
    fs.readdir("")
        .ok()?
        .iter()
        .find_map(|name| name.strip_prefix(CAS_OWNER)?.parse().ok())
}

fn cas_path(pid: Pid) -> String {
    format!("{CAS_OWNER}{pid}")
}

/// What one step of a rename did (see [`swap`]).
enum Swapped {
    /// A step short of the rename's end: the phase it leaves the process in, and a label.
    Part(Phase, String),
    /// The rename is over, with this result; the phase after it ([`Phase::Unlock`] if `cas`
    /// is still held) and the verb for the label (`"rename"` for Unix renames, keeping the
    /// labels the models had before Windows).
    Over(Result<(), Errno>, Phase, &'static str),
}

/// The next step of process `pid`'s rename of `from` to `to` (paths), in `phase`, done on `fs`;
/// `None` while it waits for `cas`. `lock_data`: what the ghost owner file holds.
fn swap<D: Clone>(
    how: Renames,
    fs: &mut Fs<D>,
    lock_data: D,
    pid: Pid,
    phase: Phase,
    (from, to): (&str, &str),
) -> Option<Swapped> {
    let locked = || {
        if how == Renames::Windows {
            Phase::Start
        } else {
            Phase::Unlock
        }
    };
    Some(match (how, phase) {
        (Renames::Unix, _) => Swapped::Over(fs.rename(from, to), Phase::Start, "rename"),
        (Renames::WindowsUnderCas | Renames::WindowsUnlockBeforeRename, Phase::Start) => {
            if cas_owner(fs).is_some() {
                return None;
            }
            fs.create_excl(&cas_path(pid), lock_data)
                .expect("the root always exists");
            Swapped::Part(Phase::Locked, format!("lock cas (to rename {from})"))
        }
        (_, Phase::Locked) => {
            if fs.exists(from) {
                Swapped::Part(Phase::Checked, format!("check (cas held): {from} exists"))
            } else {
                Swapped::Over(Err(Errno::NoEnt), locked(), "check (cas held)")
            }
        }
        (_, Phase::Start | Phase::Checked) => match fs.open(from) {
            Ok(ino) => {
                let mut label = format!("open {from} -> handle to #{ino}");
                if how == Renames::WindowsUnlockBeforeRename {
                    fs.unlink(&cas_path(pid)).expect("held");
                    label.push_str("; MUTATION: unlock cas before the rename");
                }
                Swapped::Part(Phase::Opened(ino), label)
            }
            Err(e) => Swapped::Over(Err(e), locked(), "open"),
        },
        (_, Phase::Opened(ino)) => {
            let after = if cas_owner(fs) == Some(pid) {
                Phase::Unlock
            } else {
                Phase::Start
            };
            Swapped::Over(fs.rename_file(ino, to), after, "rename the opened file")
        }
        (_, Phase::Unlock) => unreachable!("unlocking is the caller's step"),
    })
}

/// The step that unlocks `cas` after a rename (the phase goes back to [`Phase::Start`] in
/// `next`, which the caller made).
fn unlock_cas<L: Clone, D: Clone>(pid: Pid, mut next: World<L, D>) -> Step<L, D> {
    next.fs.unlink(&cas_path(pid)).expect("held");
    Step::new("unlock cas", next)
}

/// The system frees a crashed process's `cas` lock: a step any live process offers (the
/// search may so schedule it at any point after the crash, or never), labelled under that
/// process's name although it is the system's.
fn free_crashed_cas<L: Clone, D: Clone>(world: &World<L, D>) -> Option<Step<L, D>> {
    let owner = cas_owner(&world.fs)?;
    if !matches!(world.procs[owner], Proc::Crashed) {
        return None;
    }
    let mut next = world.clone();
    next.fs.unlink(&cas_path(owner)).expect("owned");
    Some(Step::new(
        format!("(the system) frees crashed P{owner}'s cas lock, late"),
        next,
    ))
}

// ---------------------------------------------------------------------------------------------
// The lease
// ---------------------------------------------------------------------------------------------

/// Whose tenure a `held` name is: the process and its tenure number (the code's token hash).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Tok {
    pid: u8,
    tenure: u8,
}

/// A lease state, as spelled by the name of `K`'s one state entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum LeaseState {
    Free {
        generation: u8,
    },
    Held {
        generation: u8,
        seq: u8,
        tok: Tok,
        /// The holder held the `flock` on `K` when it wrote this name (flag `k`).
        kernel: bool,
    },
}

impl LeaseState {
    fn generation(self) -> u8 {
        match self {
            Self::Free { generation } | Self::Held { generation, .. } => generation,
        }
    }

    fn path(self) -> String {
        path(&self.to_string())
    }

    fn parse(name: &str) -> Option<Self> {
        let mut parts = name.split('.');
        match (parts.next()?, parts.next()?.parse().ok()?) {
            ("free", generation) => parts.next().is_none().then_some(Self::Free { generation }),
            ("held", generation) => {
                let seq = parts.next()?.parse().ok()?;
                let (pid, tenure) = parts.next()?.strip_prefix('p')?.split_once('t')?;
                let tok = Tok {
                    pid: pid.parse().ok()?,
                    tenure: tenure.parse().ok()?,
                };
                let kernel = match parts.next()? {
                    "k" => true,
                    "n" => false,
                    _ => return None,
                };
                parts.next().is_none().then_some(Self::Held {
                    generation,
                    seq,
                    tok,
                    kernel,
                })
            }
            _ => None,
        }
    }
}

impl fmt::Display for LeaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Free { generation } => write!(f, "free.{generation}"),
            Self::Held {
                generation,
                seq,
                tok,
                kernel,
            } => write!(
                f,
                "held.{generation}.{seq}.p{}t{}.{}",
                tok.pid,
                tok.tenure,
                if kernel { 'k' } else { 'n' }
            ),
        }
    }
}

/// A lease-state entry's contents: none, its name is everything.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Entry;

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("entry")
    }
}

/// The one lease state in `K`, read by one atomic list.
fn list_lease(fs: &Fs<Entry>) -> Result<LeaseState, String> {
    let names = fs.readdir(DIR).map_err(|e| format!("list {DIR} -> {e}"))?;
    let states: Vec<LeaseState> = names.iter().filter_map(|n| LeaseState::parse(n)).collect();
    match states[..] {
        [one] => Ok(one),
        _ => Err(format!(
            "{DIR} holds {} lease-state entries: {names:?}",
            states.len()
        )),
    }
}

/// How a process takes part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Mode {
    /// Never touches the `flock`; takes over only on a stale judgement.
    HeartbeatOnly,
    /// Also takes the `flock` on `K`, and takes over a `k` holder at once when it holds it.
    Kernel,
}

/// A deliberate bug, to show the checker catches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum LeaseMutation {
    /// The protocol as designed.
    None,
    /// A takeover judges a name stale, then lists again and renames whatever name is current:
    /// the rename's source is not the name whose staleness was timed.
    TakeoverRenamesLatest,
    /// A heartbeat lists and renames whatever name is current, not the holder's own.
    HeartbeatRenamesLatest,
    /// A holder may unlock the `flock` during its tenure, its `k` name still current.
    HolderUnlocksEarly,
}

/// A holder's tenure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Tenure {
    generation: u8,
    seq: u8,
    tok: Tok,
    kernel: bool,
    /// The clock reading of the latest successful acquire or heartbeat: the deadline's start.
    stamp: Stamp,
    heartbeats: u8,
}

impl Tenure {
    /// The name this holder last wrote.
    fn state(&self) -> LeaseState {
        LeaseState::Held {
            generation: self.generation,
            seq: self.seq,
            tok: self.tok,
            kernel: self.kernel,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Pc {
    /// No tenure: may list to acquire.
    Idle,
    /// Decided to rename `from` to a new tenure of its own.
    Acquiring {
        from: LeaseState,
    },
    Holding(Tenure),
    /// Releasing this tenure: stopped believing, the rename (Windows: its later steps) next.
    Releasing(Tenure),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Local {
    pc: Pc,
    /// Holds the (ghost) `flock` on `K`.
    flock: bool,
    /// A `held` name seen by an acquire attempt, and since when: what staleness is timed on.
    seen: Option<(LeaseState, Snapshot)>,
    acquisitions: u8,
    /// Where the rename under way is (Windows renames only).
    rename: Phase,
}

/// The lease model, with its bounds.
#[derive(Clone, Debug)]
pub(crate) struct CasLease {
    /// One entry per process.
    pub(crate) modes: Vec<Mode>,
    /// Successful acquisitions per process.
    pub(crate) max_acquisitions: u8,
    /// Heartbeats per tenure.
    pub(crate) max_heartbeats: u8,
    /// The highest generation anybody acquires: a process that lists generation
    /// `max_generation` stops trying (a pause that never ends).
    pub(crate) max_generation: u8,
    pub(crate) mutation: LeaseMutation,
    /// How every rename is done.
    pub(crate) renames: Renames,
}

type LeaseWorld = World<Local, Entry>;

fn flock_free(world: &LeaseWorld) -> bool {
    !world
        .procs
        .iter()
        .any(|p| matches!(p, Proc::Live(l) if l.flock))
}

fn with_pc(world: &LeaseWorld, pid: Pid, local: &Local, pc: Pc) -> LeaseWorld {
    let mut l = local.clone();
    l.pc = pc;
    world.with(pid, l)
}

/// The step that ends the search: `K` no longer holds exactly one state entry.
fn broken_dir(world: &LeaseWorld, what: String) -> Step<Local, Entry> {
    let mut w = world.clone();
    w.violation = Some(what.clone());
    Step::new(what, w)
}

impl CasLease {
    /// An acquire attempt's list and decision.
    fn list_to_acquire(
        &self,
        pid: Pid,
        local: &Local,
        world: &LeaseWorld,
    ) -> Vec<Step<Local, Entry>> {
        let state = match list_lease(&world.fs) {
            Ok(s) => s,
            Err(what) => return vec![broken_dir(world, what)],
        };
        if state.generation() >= self.max_generation {
            return Vec::new();
        }
        let label = format!("acquire: list {DIR} = {state}");
        let acquiring = with_pc(world, pid, local, Pc::Acquiring { from: state });
        let LeaseState::Held { kernel, .. } = state else {
            return vec![Step::new(format!("{label}: free"), acquiring)];
        };
        let mut out = Vec::new();
        if local.flock && kernel && self.modes[pid] == Mode::Kernel {
            out.push(Step::new(
                format!("{label}: holds the flock, and the holder took it: the holder is dead"),
                acquiring.clone(),
            ));
        }
        match local.seen {
            Some((seen, since)) if seen == state => {
                let mut w = acquiring;
                w.time.threshold_passed_since(&since);
                out.push(Step::new(
                    format!("{label}: unchanged since an earlier list, judged stale"),
                    w,
                ));
                // Not yet stale: listing again is this same state.
            }
            _ => {
                let mut l = local.clone();
                l.seen = Some((state, world.time.now()));
                out.push(Step::new(
                    format!("{label}: held, starts timing it"),
                    world.with(pid, l),
                ));
            }
        }
        out
    }

    /// The acquire's rename of `from` (the takeover mutation renames whatever is current), or
    /// its next step if it is a Windows rename; `None` while it waits for `cas`.
    fn rename_to_acquire(
        &self,
        pid: Pid,
        local: &Local,
        world: &LeaseWorld,
        from: LeaseState,
    ) -> Option<Step<Local, Entry>> {
        let mut label = String::new();
        let source = if self.mutation == LeaseMutation::TakeoverRenamesLatest
            && matches!(from, LeaseState::Held { .. })
        {
            match list_lease(&world.fs) {
                Ok(current) => {
                    label = format!("MUTATION: lists {DIR} = {current}, ");
                    current
                }
                Err(what) => return Some(broken_dir(world, what)),
            }
        } else {
            from
        };
        let tok = Tok {
            pid: pid8(pid),
            tenure: local.acquisitions + 1,
        };
        let generation = source.generation() + 1;
        let to = LeaseState::Held {
            generation,
            seq: 0,
            tok,
            kernel: local.flock,
        };
        let mut w = world.clone();
        let mut l = local.clone();
        let paths = (source.path(), to.path());
        let (result, after, verb) = match swap(
            self.renames,
            &mut w.fs,
            Entry,
            pid,
            local.rename,
            (&paths.0, &paths.1),
        )? {
            Swapped::Part(phase, what) => {
                l.rename = phase;
                w.procs[pid] = Proc::Live(l);
                return Some(Step::new(format!("acquire: {what}"), w));
            }
            Swapped::Over(result, after, verb) => (result, after, verb),
        };
        l.rename = after;
        match result {
            Ok(()) => {
                let stamp = w.time.mark(pid);
                l.pc = Pc::Holding(Tenure {
                    generation,
                    seq: 0,
                    tok,
                    kernel: local.flock,
                    stamp,
                    heartbeats: 0,
                });
                l.acquisitions += 1;
                l.seen = None;
                w.procs[pid] = Proc::Live(l);
                w.issue(pid, u64::from(generation));
                let _ = write!(
                    label,
                    "{verb} {source} -> {to}: ok; ACQUIRED generation {generation}"
                );
            }
            Err(e) => {
                l.pc = Pc::Idle;
                w.procs[pid] = Proc::Live(l);
                let _ = write!(label, "{verb} {source} -> {to}: {e}, the state moved on");
            }
        }
        Some(Step::new(label, w))
    }

    /// A heartbeat's rename, or its next step if it is a Windows rename; `None` while it waits
    /// for `cas`.
    fn heartbeat(
        &self,
        pid: Pid,
        local: &Local,
        world: &LeaseWorld,
        t: Tenure,
    ) -> Option<Step<Local, Entry>> {
        let mut label = String::from("heartbeat: ");
        let source = if self.mutation == LeaseMutation::HeartbeatRenamesLatest {
            match list_lease(&world.fs) {
                Ok(current) => {
                    let _ = write!(label, "MUTATION: lists {DIR} = {current}, ");
                    current
                }
                Err(what) => return Some(broken_dir(world, what)),
            }
        } else {
            t.state()
        };
        let renewed = Tenure {
            seq: t.seq + 1,
            kernel: local.flock,
            heartbeats: t.heartbeats + 1,
            ..t
        };
        let mut w = world.clone();
        let mut l = local.clone();
        let paths = (source.path(), renewed.state().path());
        let (result, after, verb) = match swap(
            self.renames,
            &mut w.fs,
            Entry,
            pid,
            local.rename,
            (&paths.0, &paths.1),
        )? {
            Swapped::Part(phase, what) => {
                l.rename = phase;
                w.procs[pid] = Proc::Live(l);
                let _ = write!(label, "{what}");
                return Some(Step::new(label, w));
            }
            Swapped::Over(result, after, verb) => (result, after, verb),
        };
        l.rename = after;
        match result {
            Ok(()) => {
                l.pc = Pc::Holding(Tenure {
                    stamp: w.time.mark(pid),
                    ..renewed
                });
                let _ = write!(
                    label,
                    "{verb} {source} -> {}: ok, deadline renewed",
                    renewed.state()
                );
            }
            Err(e) => {
                l.pc = Pc::Idle;
                let _ = write!(
                    label,
                    "{verb} {source} -> {}: {e}, the lease is lost",
                    renewed.state()
                );
            }
        }
        w.procs[pid] = Proc::Live(l);
        Some(Step::new(label, w))
    }

    /// A release's rename (the tenure stops believing at its first step), or its next step if
    /// it is a Windows rename; `None` while it waits for `cas`.
    fn release(
        &self,
        pid: Pid,
        local: &Local,
        world: &LeaseWorld,
        t: Tenure,
    ) -> Option<Step<Local, Entry>> {
        let free = LeaseState::Free {
            generation: t.generation,
        };
        let prefix = if local.pc == Pc::Releasing(t) {
            "release: "
        } else {
            "release: stops believing, "
        };
        let mut l = local.clone();
        let mut w = world.clone();
        let paths = (t.state().path(), free.path());
        let swapped = swap(
            self.renames,
            &mut w.fs,
            Entry,
            pid,
            local.rename,
            (&paths.0, &paths.1),
        )?;
        let label = match swapped {
            Swapped::Part(phase, what) => {
                l.pc = Pc::Releasing(t);
                l.rename = phase;
                format!("{prefix}{what}")
            }
            Swapped::Over(r, after, verb) => {
                l.pc = Pc::Idle;
                l.rename = after;
                let result =
                    r.map_or_else(|e| format!("{e}, was no longer ours"), |()| "ok".into());
                format!("{prefix}{verb} {} -> {free}: {result}", t.state())
            }
        };
        w.procs[pid] = Proc::Live(l);
        Some(Step::new(label, w))
    }
}

impl Protocol for CasLease {
    type Local = Local;
    type Data = Entry;

    fn init(&self) -> LeaseWorld {
        let mut fs = Fs::default();
        fs.mkdir(DIR).expect("a fresh file system");
        fs.create_excl(&LeaseState::Free { generation: 0 }.path(), Entry)
            .expect("a fresh directory");
        let local = Local {
            pc: Pc::Idle,
            flock: false,
            seen: None,
            acquisitions: 0,
            rename: Phase::Start,
        };
        World::new(fs, vec![local; self.modes.len()])
    }

    fn steps(&self, pid: Pid, local: &Local, world: &LeaseWorld) -> Vec<Step<Local, Entry>> {
        let mut out = Vec::new();
        let exhausted = local.acquisitions >= self.max_acquisitions;
        // (A process with nothing left to do does not take the `flock`: holding it idle could
        // only keep others from it.)
        let active = !(exhausted && local.pc == Pc::Idle);
        if self.modes[pid] == Mode::Kernel && active && !local.flock && flock_free(world) {
            let mut l = local.clone();
            l.flock = true;
            out.push(Step::new(format!("flock {DIR} -> ok"), world.with(pid, l)));
        }
        if self.renames != Renames::Unix {
            out.extend(free_crashed_cas(world));
        }
        if local.rename == Phase::Unlock {
            let mut l = local.clone();
            l.rename = Phase::Start;
            out.push(unlock_cas(pid, world.with(pid, l)));
        } else {
            out.extend(self.program_steps(pid, local, world));
        }
        // A process left with nothing to do (no tenure, no `flock`, no acquisition left, no
        // rename under way) exits: it is one that is never scheduled again, and merging it with
        // a crash keeps the search from telling the two apart.
        for step in &mut out {
            if let Proc::Live(l) = &step.next.procs[pid]
                && l.pc == Pc::Idle
                && !l.flock
                && l.acquisitions >= self.max_acquisitions
                && l.rename == Phase::Start
            {
                step.next.procs[pid] = Proc::Crashed;
                step.label.push_str("; nothing left to do: exits");
            }
        }
        out
    }

    fn believes(&self, pid: Pid, local: &Local, world: &LeaseWorld) -> Option<u64> {
        match local.pc {
            Pc::Holding(t) if !world.time.passed(pid, t.stamp) => Some(u64::from(t.generation)),
            _ => None,
        }
    }
}

impl CasLease {
    /// The steps of `pid`'s program (all but the `flock` and the `cas` lock's bookkeeping).
    fn program_steps(
        &self,
        pid: Pid,
        local: &Local,
        world: &LeaseWorld,
    ) -> Vec<Step<Local, Entry>> {
        let mut out = Vec::new();
        let exhausted = local.acquisitions >= self.max_acquisitions;
        match local.pc {
            Pc::Idle => {
                if local.flock {
                    let mut l = local.clone();
                    l.flock = false;
                    out.push(Step::new(format!("unlock {DIR}"), world.with(pid, l)));
                }
                if !exhausted {
                    out.extend(self.list_to_acquire(pid, local, world));
                }
            }
            Pc::Acquiring { from } => out.extend(self.rename_to_acquire(pid, local, world, from)),
            // A heartbeat under way (Windows renames): only its next step.
            Pc::Holding(t) if local.rename != Phase::Start => {
                out.extend(self.heartbeat(pid, local, world, t));
            }
            Pc::Releasing(t) => out.extend(self.release(pid, local, world, t)),
            Pc::Holding(t) => {
                if local.flock && self.mutation == LeaseMutation::HolderUnlocksEarly {
                    let mut l = local.clone();
                    l.flock = false;
                    out.push(Step::new(
                        format!("MUTATION: unlock {DIR} while holding"),
                        world.with(pid, l),
                    ));
                }
                if t.heartbeats < self.max_heartbeats {
                    out.extend(self.heartbeat(pid, local, world, t));
                }
                out.extend(self.release(pid, local, world, t));
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Fenced values
// ---------------------------------------------------------------------------------------------

/// The ghost history's file, outside `K`: no modelled process names it.
const GHOST: &str = "ghost";

/// A put's nonce: the writer and its operation number (unique, as a random nonce is).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Nonce {
    pid: u8,
    op: u8,
}

impl fmt::Debug for Nonce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{}o{}", self.pid, self.op)
    }
}

fn data_path(nonce: Nonce) -> String {
    path(&format!("data.{nonce:?}"))
}

/// The chain entry `V.<fence>.<seq>.<nonce>` (`nonce` `None`: `none`, the initial no-value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Chain {
    fence: u8,
    seq: u8,
    nonce: Option<Nonce>,
}

impl Chain {
    fn path(self) -> String {
        path(&self.to_string())
    }

    fn parse(name: &str) -> Option<Self> {
        let mut parts = name.strip_prefix("V.")?.split('.');
        let fence = parts.next()?.parse().ok()?;
        let seq = parts.next()?.parse().ok()?;
        let nonce = match parts.next()? {
            "none" => None,
            n => {
                let (pid, op) = n.strip_prefix('p')?.split_once('o')?;
                Some(Nonce {
                    pid: pid.parse().ok()?,
                    op: op.parse().ok()?,
                })
            }
        };
        parts.next().is_none().then_some(Self { fence, seq, nonce })
    }
}

impl fmt::Display for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.nonce {
            Some(n) => write!(f, "V.{}.{}.{n:?}", self.fence, self.seq),
            None => write!(f, "V.{}.{}.none", self.fence, self.seq),
        }
    }
}

/// The checker's ghost history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct History {
    /// Values installed (puts acknowledged), oldest first, with their put's fence.
    installed: Vec<(Nonce, u8)>,
    /// The highest fence of an acknowledged put or `fence_and_read`.
    fence: u8,
}

/// A file's contents in the fenced-value model.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) enum ChainData {
    /// A chain entry: its name says everything.
    Entry,
    /// A data file: the value of the put with this nonce, or `None` while created but not yet
    /// written.
    Value(Option<Nonce>),
    Ghost(History),
}

impl fmt::Debug for ChainData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Entry => f.write_str("entry"),
            Self::Value(Some(n)) => write!(f, "value of {n:?}"),
            Self::Value(None) => f.write_str("(not yet written)"),
            Self::Ghost(h) => write!(f, "installed {:?}, fence {}", h.installed, h.fence),
        }
    }
}

/// What a `fence_and_read` read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Got {
    /// The initial chain: no value.
    Initial,
    Value(Nonce),
    /// A data file that was created but not yet written.
    Unwritten,
}

/// A deliberate bug, to show the checker catches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ChainMutation {
    /// The design.
    None,
    /// A put renames the chain entry first and creates and writes its data file after.
    DataAfterRename,
    /// A put's final rename is unconditional: it renames whatever chain entry is current, not
    /// the one whose fence it checked.
    UnconditionalRename,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ChainPc {
    Idle,
    /// Put: created its data file, empty; writes the value next. `replaced`: the data file
    /// to unlink afterwards (only in [`ChainMutation::DataAfterRename`], where the data file
    /// comes after the rename).
    PutWrite {
        replaced: Option<Nonce>,
    },
    PutList,
    PutRename {
        from: Chain,
    },
    /// Put (mutation): renamed already, creates its data file now.
    PutCreate {
        replaced: Option<Nonce>,
    },
    /// Put acknowledged: unlinks the replaced value's data file.
    PutCleanup {
        replaced: Nonce,
    },
    /// Put fenced: unlinks its own data file.
    PutFenced,
    /// `fence_and_read`; `floor`: how many values were installed when it started.
    ReadList {
        floor: u8,
    },
    ReadOpen {
        floor: u8,
        from: Chain,
    },
    ReadRename {
        floor: u8,
        from: Chain,
        got: Got,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ChainLocal {
    pc: ChainPc,
    /// Operations finished.
    done: u8,
    /// Where the rename under way is (Windows renames only).
    rename: Phase,
}

/// The fenced-value model, with its bounds.
#[derive(Clone, Debug)]
pub(crate) struct FencedChain {
    /// Each writer's fence (one entry per writer).
    pub(crate) fences: Vec<u8>,
    /// Operations (each a put or a `fence_and_read`) per writer.
    pub(crate) ops: u8,
    pub(crate) mutation: ChainMutation,
    /// How every chain rename is done.
    pub(crate) renames: Renames,
}

type ChainWorld = World<ChainLocal, ChainData>;
type ChainStep = Step<ChainLocal, ChainData>;
/// A chain rename's next step ([`FencedChain::swap`]): `Err` with the step if it is short of
/// the rename's end, else the rename's result, the process's state after it and the label's
/// verb.
type ChainSwapped = Result<(Result<(), Errno>, ChainLocal, &'static str), ChainStep>;

fn list_chain(fs: &Fs<ChainData>) -> Result<Chain, String> {
    let names = fs.readdir(DIR).map_err(|e| format!("list {DIR} -> {e}"))?;
    let chains: Vec<Chain> = names.iter().filter_map(|n| Chain::parse(n)).collect();
    match chains[..] {
        [one] => Ok(one),
        _ => Err(format!(
            "{DIR} holds {} chain entries: {names:?}",
            chains.len()
        )),
    }
}

fn history(world: &ChainWorld) -> History {
    match world.fs.read(GHOST) {
        Ok(ChainData::Ghost(h)) => h.clone(),
        other => unreachable!("the ghost history is always there: {other:?}"),
    }
}

fn set_history(world: &mut ChainWorld, h: History) {
    world
        .fs
        .replace(GHOST, ChainData::Ghost(h))
        .expect("the root always exists");
}

fn fail(world: &mut ChainWorld, what: String) {
    if world.violation.is_none() {
        world.violation = Some(what);
    }
}

fn chain_go(world: &ChainWorld, pid: Pid, local: &ChainLocal, pc: ChainPc) -> ChainWorld {
    world.with(
        pid,
        ChainLocal {
            pc,
            done: local.done,
            rename: local.rename,
        },
    )
}

/// The operation is over (whatever its result).
fn finished(world: &ChainWorld, pid: Pid, local: &ChainLocal) -> ChainWorld {
    world.with(
        pid,
        ChainLocal {
            pc: ChainPc::Idle,
            done: local.done + 1,
            rename: local.rename,
        },
    )
}

impl FencedChain {
    fn nonce(pid: Pid, local: &ChainLocal) -> Nonce {
        Nonce {
            pid: pid8(pid),
            op: local.done,
        }
    }

    /// A put's list and fence check.
    fn put_list(
        &self,
        pid: Pid,
        local: &ChainLocal,
        world: &ChainWorld,
        prefix: &str,
    ) -> ChainStep {
        let chain = match list_chain(&world.fs) {
            Ok(c) => c,
            Err(what) => {
                let mut w = world.clone();
                fail(&mut w, what.clone());
                return Step::new(what, w);
            }
        };
        let f = self.fences[pid];
        let label = format!("{prefix}list {DIR} = {chain}");
        if chain.fence > f {
            if self.mutation == ChainMutation::DataAfterRename {
                // No data file yet.
                Step::new(
                    format!("{label}: fence above {f}, put FENCED"),
                    finished(world, pid, local),
                )
            } else {
                Step::new(
                    format!("{label}: fence above {f}, fenced"),
                    chain_go(world, pid, local, ChainPc::PutFenced),
                )
            }
        } else {
            Step::new(
                label,
                chain_go(world, pid, local, ChainPc::PutRename { from: chain }),
            )
        }
    }

    /// A put's rename, or its next step if it is a Windows rename; `None` while it waits for
    /// `cas`.
    fn put_rename(
        &self,
        pid: Pid,
        local: &ChainLocal,
        world: &ChainWorld,
        from: Chain,
    ) -> Option<ChainStep> {
        let mut label = String::new();
        let source = if self.mutation == ChainMutation::UnconditionalRename {
            match list_chain(&world.fs) {
                Ok(current) => {
                    let _ = write!(label, "MUTATION: lists {DIR} = {current}, ");
                    current
                }
                Err(what) => {
                    let mut w = world.clone();
                    fail(&mut w, what.clone());
                    return Some(Step::new(what, w));
                }
            }
        } else {
            from
        };
        let f = self.fences[pid];
        let nonce = Self::nonce(pid, local);
        let to = Chain {
            fence: f,
            seq: source.seq + 1,
            nonce: Some(nonce),
        };
        let mut w = world.clone();
        let (result, local, verb) = match self.swap(pid, local, &mut w, source, to)? {
            Err(step) => return Some(step),
            Ok(over) => over,
        };
        let local = &local;
        match result {
            Ok(()) => {
                let _ = write!(label, "{verb} {source} -> {to}: ok; put ACKNOWLEDGED");
                let mut h = history(&w);
                if h.fence > f {
                    fail(
                        &mut w,
                        format!(
                            "put({f}) by P{pid} replaced {source} although fence {} was \
                             acknowledged before (installed so far: {:?})",
                            h.fence, h.installed
                        ),
                    );
                }
                h.installed.push((nonce, f));
                h.fence = h.fence.max(f);
                set_history(&mut w, h);
                let next = if self.mutation == ChainMutation::DataAfterRename {
                    chain_go(
                        &w,
                        pid,
                        local,
                        ChainPc::PutCreate {
                            replaced: source.nonce,
                        },
                    )
                } else if let Some(replaced) = source.nonce {
                    chain_go(&w, pid, local, ChainPc::PutCleanup { replaced })
                } else {
                    finished(&w, pid, local)
                };
                Some(Step::new(label, next))
            }
            Err(e) => {
                let _ = write!(label, "{verb} {source} -> {to}: {e}, lists again");
                Some(Step::new(label, chain_go(&w, pid, local, ChainPc::PutList)))
            }
        }
    }

    /// The next step of `pid`'s rename of `from` to `to`, done on `w` (a copy of the world):
    /// `Err` with the step if it is short of the rename's end, else the rename's result, the
    /// process's state with the phase after it, and the verb for the label. `None` while it
    /// waits for `cas`.
    fn swap(
        &self,
        pid: Pid,
        local: &ChainLocal,
        w: &mut ChainWorld,
        from: Chain,
        to: Chain,
    ) -> Option<ChainSwapped> {
        let paths = (from.path(), to.path());
        let mut l = local.clone();
        Some(
            match swap(
                self.renames,
                &mut w.fs,
                ChainData::Entry,
                pid,
                local.rename,
                (&paths.0, &paths.1),
            )? {
                Swapped::Part(phase, what) => {
                    l.rename = phase;
                    w.procs[pid] = Proc::Live(l);
                    Err(Step::new(what, w.clone()))
                }
                Swapped::Over(result, after, verb) => {
                    l.rename = after;
                    w.procs[pid] = Proc::Live(l.clone());
                    Ok((result, l, verb))
                }
            },
        )
    }

    /// A `fence_and_read`'s list (`prefix`: the operation this list starts, if it does).
    fn read_list(
        &self,
        pid: Pid,
        local: &ChainLocal,
        world: &ChainWorld,
        floor: u8,
        prefix: &str,
    ) -> ChainStep {
        let chain = match list_chain(&world.fs) {
            Ok(c) => c,
            Err(what) => {
                let mut w = world.clone();
                fail(&mut w, what.clone());
                return Step::new(what, w);
            }
        };
        let f = self.fences[pid];
        let label = format!("{prefix}list {DIR} = {chain}");
        if chain.fence > f {
            Step::new(
                format!("{label}: fence above {f}, fence_and_read FENCED"),
                finished(world, pid, local),
            )
        } else if chain.nonce.is_none() {
            Step::new(
                format!("{label}: no value yet"),
                chain_go(
                    world,
                    pid,
                    local,
                    ChainPc::ReadRename {
                        floor,
                        from: chain,
                        got: Got::Initial,
                    },
                ),
            )
        } else {
            Step::new(
                label,
                chain_go(world, pid, local, ChainPc::ReadOpen { floor, from: chain }),
            )
        }
    }

    /// A `fence_and_read`'s rename, or its next step if it is a Windows rename; `None` while
    /// it waits for `cas`.
    fn read_rename(
        &self,
        pid: Pid,
        local: &ChainLocal,
        world: &ChainWorld,
        (floor, from, got): (u8, Chain, Got),
    ) -> Option<ChainStep> {
        let f = self.fences[pid];
        let to = Chain {
            fence: f,
            seq: from.seq + 1,
            nonce: from.nonce,
        };
        let mut w = world.clone();
        let (result, local, verb) = match self.swap(pid, local, &mut w, from, to)? {
            Err(step) => return Some(step),
            Ok(over) => over,
        };
        let local = &local;
        match result {
            Ok(()) => {
                let mut h = history(&w);
                let latest = usize::from(floor).checked_sub(1).map(|i| h.installed[i]);
                let stale = match got {
                    Got::Unwritten => Some("a data file not yet written".to_owned()),
                    Got::Initial => latest.map(|_| "the initial no-value".to_owned()),
                    Got::Value(n) => {
                        let at = h.installed.iter().position(|&(m, _)| m == n);
                        (at.is_none_or(|i| i + 1 < usize::from(floor)))
                            .then(|| format!("the value of {n:?}"))
                    }
                };
                if let Some(what) = stale {
                    fail(
                        &mut w,
                        format!(
                            "fence_and_read({f}) by P{pid} returned {what}, but the latest put \
                             acknowledged before it started installed {latest:?} \
                             (installed: {:?})",
                            h.installed
                        ),
                    );
                }
                h.fence = h.fence.max(f);
                set_history(&mut w, h);
                Some(Step::new(
                    format!("{verb} {from} -> {to}: ok; fence_and_read RETURNS {got:?}"),
                    finished(&w, pid, local),
                ))
            }
            Err(e) => Some(Step::new(
                format!("{verb} {from} -> {to}: {e}, lists again"),
                chain_go(&w, pid, local, ChainPc::ReadList { floor }),
            )),
        }
    }

    fn unlink(
        pid: Pid,
        local: &ChainLocal,
        world: &ChainWorld,
        nonce: Nonce,
        why: &str,
    ) -> ChainStep {
        let mut w = finished(world, pid, local);
        let r = w.fs.unlink(&data_path(nonce));
        let result = r.map_or_else(|e| e.to_string(), |()| "ok".into());
        Step::new(format!("unlink data.{nonce:?} ({why}) -> {result}"), w)
    }
}

impl Protocol for FencedChain {
    type Local = ChainLocal;
    type Data = ChainData;

    fn init(&self) -> ChainWorld {
        let mut fs = Fs::default();
        fs.mkdir(DIR).expect("a fresh file system");
        let chain = Chain {
            fence: 0,
            seq: 0,
            nonce: None,
        };
        fs.create_excl(&chain.path(), ChainData::Entry)
            .expect("a fresh directory");
        fs.create_excl(GHOST, ChainData::Ghost(History::default()))
            .expect("a fresh file system");
        let local = ChainLocal {
            pc: ChainPc::Idle,
            done: 0,
            rename: Phase::Start,
        };
        World::new(fs, vec![local; self.fences.len()])
    }

    fn steps(&self, pid: Pid, local: &ChainLocal, world: &ChainWorld) -> Vec<ChainStep> {
        let mut out = Vec::new();
        if self.renames != Renames::Unix {
            out.extend(free_crashed_cas(world));
        }
        if local.rename == Phase::Unlock {
            let mut l = local.clone();
            l.rename = Phase::Start;
            out.push(unlock_cas(pid, world.with(pid, l)));
        } else {
            out.extend(self.program_steps(pid, local, world));
        }
        out
    }

    fn believes(&self, _: Pid, _: &ChainLocal, _: &ChainWorld) -> Option<u64> {
        None
    }
}

impl FencedChain {
    /// The steps of `pid`'s program (all but the `cas` lock's bookkeeping).
    fn program_steps(&self, pid: Pid, local: &ChainLocal, world: &ChainWorld) -> Vec<ChainStep> {
        let f = self.fences[pid];
        let nonce = Self::nonce(pid, local);
        let create = |world: &ChainWorld, pc: ChainPc, prefix: &str| {
            let mut w = chain_go(world, pid, local, pc);
            let r = w.fs.create_excl(&data_path(nonce), ChainData::Value(None));
            let result = r.map_or_else(|e| e.to_string(), |_| "ok".into());
            Step::new(
                format!("{prefix}create data.{nonce:?} (O_EXCL, empty) -> {result}"),
                w,
            )
        };
        match local.pc {
            ChainPc::Idle if local.done < self.ops => {
                let put = if self.mutation == ChainMutation::DataAfterRename {
                    self.put_list(pid, local, world, &format!("put({f}): "))
                } else {
                    create(
                        world,
                        ChainPc::PutWrite { replaced: None },
                        &format!("put({f}): "),
                    )
                };
                let floor = u8::try_from(history(world).installed.len()).unwrap_or(u8::MAX);
                let read =
                    self.read_list(pid, local, world, floor, &format!("fence_and_read({f}): "));
                vec![put, read]
            }
            ChainPc::Idle => Vec::new(),
            ChainPc::PutCreate { replaced } => {
                vec![create(world, ChainPc::PutWrite { replaced }, "")]
            }
            ChainPc::PutWrite { replaced } => {
                let next = if self.mutation != ChainMutation::DataAfterRename {
                    ChainPc::PutList
                } else if let Some(replaced) = replaced {
                    ChainPc::PutCleanup { replaced }
                } else {
                    ChainPc::Idle
                };
                let mut w = if next == ChainPc::Idle {
                    finished(world, pid, local)
                } else {
                    chain_go(world, pid, local, next)
                };
                w.fs.replace(&data_path(nonce), ChainData::Value(Some(nonce)))
                    .expect("K always exists");
                // (A write through the open descriptor: `replace` keeps the model's one inode
                // per name, and nobody else holds this file open before it is named.)
                vec![Step::new(format!("write the value into data.{nonce:?}"), w)]
            }
            ChainPc::PutList => vec![self.put_list(pid, local, world, "")],
            ChainPc::PutRename { from } => self
                .put_rename(pid, local, world, from)
                .into_iter()
                .collect(),
            ChainPc::PutCleanup { replaced } => vec![Self::unlink(
                pid,
                local,
                world,
                replaced,
                "the replaced value",
            )],
            ChainPc::PutFenced => vec![Self::unlink(pid, local, world, nonce, "fenced")],
            ChainPc::ReadList { floor } => vec![self.read_list(pid, local, world, floor, "")],
            ChainPc::ReadOpen { floor, from } => {
                let n = from.nonce.expect("the initial chain is not opened");
                let (got, label) = match world.fs.read(&data_path(n)) {
                    Ok(ChainData::Value(Some(v))) => {
                        (Some(Got::Value(*v)), format!("value of {v:?}"))
                    }
                    Ok(_) => (Some(Got::Unwritten), "nothing (not yet written)".into()),
                    Err(e) => (None, e.to_string()),
                };
                let pc = match got {
                    Some(got) => ChainPc::ReadRename { floor, from, got },
                    None => ChainPc::ReadList { floor },
                };
                vec![Step::new(
                    format!("open and read data.{n:?} -> {label}"),
                    chain_go(world, pid, local, pc),
                )]
            }
            ChainPc::ReadRename { floor, from, got } => self
                .read_rename(pid, local, world, (floor, from, got))
                .into_iter()
                .collect(),
        }
    }
}

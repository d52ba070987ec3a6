//! A model of deleting and pruning keys (issue 22, "Bounded disk"): acquirers and a pruner
//! racing on one key whose lock directory may be ended, removed and created again.
//!
//! The lock path is modelled as a name binding `P` (a file whose data says which directory it
//! names), and each lock directory as `d<id>`, a path never reused: so a process that opened
//! `P` and keeps working "through its descriptor" keeps renaming in `d<id>` after `P` names
//! another one, as the code does, and finds `ENOENT` there once `d<id>` is gone.
//!
//! * **Acquirer**: open `P`; list `d<id>`: `free.<g>` → rename it to `held.<g+1>` (issued; the
//!   ghost clock is raised to at least `g+1`: assumption (1) of the crate docs, "fewer
//!   acquisitions than microseconds"), later rename back to `free.<g+1>`; `held.*` → busy, try
//!   again; `dead.*` → finish the removal (below), then open again; empty → open again. `P` missing →
//!   create: make the temporary `init.<id>` (with `d<id>`), *then* read the clock `c`, write
//!   `d<id>/free.<c>`, and rename into place: one step that succeeds iff `P` is missing or names
//!   an empty directory (which it replaces), else the temporary goes.
//! * **Pruner**: read the clock; open `P`; list: `free.<g>` with `g` below the clock → rename
//!   to `dead.<g>`; then finish the removal.
//! * **Finishing a removal** (pruner, or an acquirer that found an ended directory): list the
//!   root for temporaries `init.*` (if any: leave the directory), unlink `dead.<g>`, then
//!   `rmdir P`: one step that removes the directory `P` names iff it is empty.
//!
//! The clock only moves forward (assumption (2)); the pruner may also tick it. Not modelled:
//! expiry and takeover (the CAS model covers them; a delete changes none of their steps), the
//! kernel lock (prune's `flock` only makes it skip keys), several keys.

use super::{Pid, Protocol, Step, World};

/// What a file holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Data {
    /// `P`: the directory the lock path names.
    Names(u8),
    /// `clock`: the ghost wall clock, in the units of generations.
    Clock(u8),
    /// A state entry or a temporary's marker.
    Empty,
}

/// A deliberate bug, to show the checker catches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum PruneMutation {
    None,
    /// The removal skips the check for creations under way (the first version of the code).
    NoCreationCheck,
    /// The creator reads the clock before making its temporary.
    ClockBeforeTemporary,
    /// The pruner removes the state entry it listed by name instead of renaming it to
    /// `dead.<g>` (an `rm -rf` of an idle-looking key).
    UnlinkInsteadOfEnd,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Pc {
    Start,
    /// Acquirer: `P` names `d<id>`; list it.
    List(u8),
    /// Acquirer: saw `free.<g>` in `d<id>`.
    Acquire(u8, u8),
    /// Acquirer: holds generation `g` in `d<id>`.
    Holding(u8, u8),
    /// Creator: about to make its temporary (with the clock already read, under the mutation).
    MakeTemp(Option<u8>),
    /// Creator: temporary made; read the clock (unless read already).
    ReadClock(u8, Option<u8>),
    /// Creator: write `d<id>/free.<seed>`.
    WriteFirst(u8, u8),
    /// Creator: rename `d<id>` into place.
    Place(u8),
    /// Finishing the removal of `d<id>`: 0 list the root, 1 unlink dead entries, 2 rmdir `P`.
    Finish(u8, u8),
    /// Pruner: clock read; open `P`.
    PruneOpen(u8),
    /// Pruner: list `d<id>` with the clock reading.
    PruneList(u8, u8),
    /// Pruner: end `free.<g>` in `d<id>`.
    PruneEnd(u8, u8),
    Done,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Local {
    pruner: bool,
    pc: Pc,
    /// Acquisitions (or prunes) left.
    budget: u8,
    /// Directories this process created so far (their ids are unique per process).
    created: u8,
}

/// Acquirers and one pruner on one key of a store that already prunes (a re-created key starts
/// from the clock).
#[derive(Clone, Debug)]
pub(crate) struct Prune {
    pub(crate) acquirers: usize,
    pub(crate) acquisitions: u8,
    pub(crate) prunes: u8,
    /// The clock never passes this (a bound of the search).
    pub(crate) max_clock: u8,
    pub(crate) mutation: PruneMutation,
}

fn dir(id: u8) -> String {
    format!("d{id}")
}

impl Prune {
    fn clock(world: &World<Local, Data>) -> u8 {
        match world.fs.read("clock") {
            Ok(Data::Clock(c)) => *c,
            _ => 0,
        }
    }

    fn set_clock(world: &mut World<Local, Data>, at_least: u8) {
        let now = Self::clock(world).max(at_least);
        world.fs.replace("clock", Data::Clock(now)).unwrap();
    }

    fn names(world: &World<Local, Data>) -> Option<u8> {
        match world.fs.read("P") {
            Ok(Data::Names(id)) => Some(*id),
            _ => None,
        }
    }

    /// The entries of `d<id>`, or `None` when it is gone.
    fn entries(world: &World<Local, Data>, id: u8) -> Option<Vec<String>> {
        world
            .fs
            .readdir(&dir(id))
            .ok()
            .map(|names| names.into_iter().map(str::to_owned).collect())
    }

    fn generation(name: &str, prefix: &str) -> Option<u8> {
        name.strip_prefix(prefix)?.parse().ok()
    }

    fn acquirer_steps(
        &self,
        pid: Pid,
        local: &Local,
        world: &World<Local, Data>,
    ) -> Vec<Step<Local, Data>> {
        let go = |pc: Pc| Local {
            pc,
            ..local.clone()
        };
        match &local.pc {
            Pc::Start if local.budget == 0 => vec![],
            Pc::Start => match Self::names(world) {
                Some(id) => vec![Step::new(
                    format!("open P -> d{id}"),
                    world.with(pid, go(Pc::List(id))),
                )],
                None if local.created >= 3 => vec![],
                None => {
                    let early = (self.mutation == PruneMutation::ClockBeforeTemporary)
                        .then(|| Self::clock(world));
                    vec![Step::new(
                        "open P -> ENOENT",
                        world.with(pid, go(Pc::MakeTemp(early))),
                    )]
                }
            },
            Pc::List(id) => {
                let id = *id;
                let Some(entries) = Self::entries(world, id) else {
                    return vec![Step::new(
                        format!("list d{id} -> gone"),
                        world.with(pid, go(Pc::Start)),
                    )];
                };
                let label = format!("list d{id} -> {entries:?}");
                let next = match entries.as_slice() {
                    [one] => match (Self::generation(one, "free."), one.starts_with("dead.")) {
                        (Some(g), _) => Pc::Acquire(id, g),
                        (None, true) => Pc::Finish(id, 0),
                        // Held: busy; try again later (a budget keeps the search finite).
                        (None, false) => {
                            return vec![Step::new(
                                label,
                                world.with(
                                    pid,
                                    Local {
                                        budget: local.budget - 1,
                                        pc: Pc::Start,
                                        ..local.clone()
                                    },
                                ),
                            )];
                        }
                    },
                    // Empty at the path: refused as damaged (the code reports it); try again.
                    [] => Pc::Start,
                    _ => unreachable!("two entries in d{id}: {entries:?}"),
                };
                vec![Step::new(label, world.with(pid, go(next)))]
            }
            Pc::Acquire(id, g) => {
                let (id, g) = (*id, *g);
                let mut next = world.with(pid, go(Pc::Holding(id, g + 1)));
                match next
                    .fs
                    .rename(&format!("d{id}/free.{g}"), &format!("d{id}/held.{}", g + 1))
                {
                    Ok(()) => {
                        next.issue(pid, u64::from(g) + 1);
                        Self::set_clock(&mut next, g + 1);
                        vec![Step::new(
                            format!("rename d{id}/free.{g} -> held.{} (acquired)", g + 1),
                            next,
                        )]
                    }
                    Err(e) => vec![Step::new(
                        format!("rename d{id}/free.{g} -> {e}"),
                        world.with(pid, go(Pc::Start)),
                    )],
                }
            }
            Pc::Holding(id, g) => {
                let (id, g) = (*id, *g);
                let mut next = world.with(
                    pid,
                    Local {
                        budget: local.budget - 1,
                        pc: Pc::Start,
                        ..local.clone()
                    },
                );
                let result = next
                    .fs
                    .rename(&format!("d{id}/held.{g}"), &format!("d{id}/free.{g}"));
                let label = match result {
                    Ok(()) => format!("release d{id}/held.{g}"),
                    Err(e) => format!("release d{id}/held.{g} -> {e}"),
                };
                vec![Step::new(label, next)]
            }
            Pc::MakeTemp(early) => {
                let id = (pid as u8) * 4 + local.created;
                let mut next = world.with(
                    pid,
                    Local {
                        created: local.created + 1,
                        pc: Pc::ReadClock(id, *early),
                        ..local.clone()
                    },
                );
                next.fs
                    .create_excl(&format!("init.{id}"), Data::Empty)
                    .unwrap();
                next.fs.mkdir(&dir(id)).unwrap();
                vec![Step::new(format!("mkdir temporary init.{id}"), next)]
            }
            Pc::ReadClock(id, early) => {
                let seed = early.unwrap_or_else(|| Self::clock(world));
                vec![Step::new(
                    format!("read clock -> {seed}"),
                    world.with(pid, go(Pc::WriteFirst(*id, seed))),
                )]
            }
            Pc::WriteFirst(id, seed) => {
                let mut next = world.with(pid, go(Pc::Place(*id)));
                next.fs
                    .create_excl(&format!("d{id}/free.{seed}"), Data::Empty)
                    .unwrap();
                vec![Step::new(format!("create d{id}/free.{seed}"), next)]
            }
            Pc::Place(id) => {
                let id = *id;
                let mut next = world.with(pid, go(Pc::Start));
                let replaceable = match Self::names(world) {
                    None => true,
                    Some(old) => Self::entries(world, old).is_none_or(|e| e.is_empty()),
                };
                if replaceable {
                    if let Some(old) = Self::names(world) {
                        let _ = next.fs.rmdir(&dir(old));
                    }
                    next.fs.replace("P", Data::Names(id)).unwrap();
                    next.fs.unlink(&format!("init.{id}")).unwrap();
                    vec![Step::new(
                        format!("rename init.{id} -> P (d{id} in place)"),
                        next,
                    )]
                } else {
                    // Someone else's directory is there: the temporary goes.
                    for entry in Self::entries(world, id).unwrap_or_default() {
                        next.fs.unlink(&format!("d{id}/{entry}")).unwrap();
                    }
                    next.fs.rmdir(&dir(id)).unwrap();
                    next.fs.unlink(&format!("init.{id}")).unwrap();
                    vec![Step::new(
                        format!("rename init.{id} -> P: ENOTEMPTY, temporary removed"),
                        next,
                    )]
                }
            }
            Pc::Finish(id, phase) => self.finish(pid, local, world, *id, *phase, Pc::Start),
            _ => vec![],
        }
    }

    /// The removal of the ended `d<id>`, then `then`.
    fn finish(
        &self,
        pid: Pid,
        local: &Local,
        world: &World<Local, Data>,
        id: u8,
        phase: u8,
        then: Pc,
    ) -> Vec<Step<Local, Data>> {
        let go = |pc: Pc| Local {
            pc,
            ..local.clone()
        };
        match phase {
            0 => {
                let pending = world
                    .fs
                    .readdir("")
                    .unwrap()
                    .iter()
                    .any(|name| name.starts_with("init."));
                if pending && self.mutation != PruneMutation::NoCreationCheck {
                    vec![Step::new(
                        "list root -> a creation under way: leave it",
                        world.with(pid, go(then)),
                    )]
                } else {
                    vec![Step::new(
                        "list root -> no creation under way",
                        world.with(pid, go(Pc::Finish(id, 1))),
                    )]
                }
            }
            1 => {
                let mut next = world.with(pid, go(Pc::Finish(id, 2)));
                for entry in Self::entries(world, id).unwrap_or_default() {
                    if entry.starts_with("dead.") {
                        next.fs.unlink(&format!("d{id}/{entry}")).unwrap();
                    }
                }
                vec![Step::new(format!("unlink d{id}/dead.*"), next)]
            }
            _ => {
                let mut next = world.with(pid, go(then));
                let label = match Self::names(world) {
                    Some(at) if Self::entries(world, at).is_none_or(|e| e.is_empty()) => {
                        let _ = next.fs.rmdir(&dir(at));
                        next.fs.unlink("P").unwrap();
                        format!("rmdir P (d{at})")
                    }
                    Some(at) => format!("rmdir P (d{at}) -> ENOTEMPTY"),
                    None => "rmdir P -> ENOENT".to_owned(),
                };
                vec![Step::new(label, next)]
            }
        }
    }

    fn pruner_steps(
        &self,
        pid: Pid,
        local: &Local,
        world: &World<Local, Data>,
    ) -> Vec<Step<Local, Data>> {
        let go = |pc: Pc| Local {
            pc,
            ..local.clone()
        };
        let done = Local {
            budget: local.budget.saturating_sub(1),
            pc: Pc::Start,
            ..local.clone()
        };
        match &local.pc {
            Pc::Start => {
                let mut steps = Vec::new();
                let clock = Self::clock(world);
                if clock < self.max_clock {
                    let mut next = world.with(pid, local.clone());
                    Self::set_clock(&mut next, clock + 1);
                    steps.push(Step::new(format!("clock ticks to {}", clock + 1), next));
                }
                if local.budget > 0 {
                    steps.push(Step::new(
                        format!("prune: read clock -> {clock}"),
                        world.with(pid, go(Pc::PruneOpen(clock))),
                    ));
                }
                steps
            }
            Pc::PruneOpen(clock) => match Self::names(world) {
                Some(id) => vec![Step::new(
                    format!("prune: open P -> d{id}"),
                    world.with(pid, go(Pc::PruneList(id, *clock))),
                )],
                None => vec![Step::new("prune: open P -> ENOENT", world.with(pid, done))],
            },
            Pc::PruneList(id, clock) => {
                let id = *id;
                let entries = Self::entries(world, id).unwrap_or_default();
                let label = format!("prune: list d{id} -> {entries:?}");
                match entries.as_slice() {
                    [one] => match Self::generation(one, "free.") {
                        Some(g) if g < *clock => {
                            vec![Step::new(label, world.with(pid, go(Pc::PruneEnd(id, g))))]
                        }
                        Some(_) => vec![Step::new(
                            label + ": ahead of the clock",
                            world.with(pid, done),
                        )],
                        None if one.starts_with("dead.") => {
                            vec![Step::new(label, world.with(pid, go(Pc::Finish(id, 0))))]
                        }
                        None => vec![Step::new(label + ": held", world.with(pid, done))],
                    },
                    [] => vec![Step::new(label, world.with(pid, go(Pc::Finish(id, 0))))],
                    _ => unreachable!("two entries"),
                }
            }
            Pc::PruneEnd(id, g) => {
                let (id, g) = (*id, *g);
                let mut next = world.with(pid, go(Pc::Finish(id, 0)));
                let from = format!("d{id}/free.{g}");
                let result = if self.mutation == PruneMutation::UnlinkInsteadOfEnd {
                    // Whatever the entry is now, it goes (modelled as: the name listed, or the
                    // one state entry there is).
                    let now = Self::entries(world, id).unwrap_or_default();
                    match now.first() {
                        Some(entry) => next.fs.unlink(&format!("d{id}/{entry}")),
                        None => Err(super::Errno::NoEnt),
                    }
                } else {
                    next.fs.rename(&from, &format!("d{id}/dead.{g}"))
                };
                match result {
                    Ok(()) => vec![Step::new(format!("prune: end {from}"), next)],
                    Err(e) => vec![Step::new(
                        format!("prune: end {from} -> {e}"),
                        world.with(pid, done),
                    )],
                }
            }
            Pc::Finish(id, phase) => {
                let mut steps = self.finish(pid, local, world, *id, *phase, Pc::Done);
                for step in &mut steps {
                    if let Some(super::Proc::Live(l)) = step.next.procs.get_mut(pid)
                        && l.pc == Pc::Done
                    {
                        l.pc = Pc::Start;
                        l.budget = l.budget.saturating_sub(1);
                    }
                }
                steps
            }
            _ => vec![],
        }
    }
}

impl Protocol for Prune {
    type Local = Local;
    type Data = Data;

    fn init(&self) -> World<Local, Data> {
        let mut fs = super::Fs::default();
        fs.create_excl("clock", Data::Clock(1)).unwrap();
        // The key exists, free at generation 0; its creator's id is out of every process's range.
        fs.mkdir("d255").unwrap();
        fs.create_excl("d255/free.0", Data::Empty).unwrap();
        fs.create_excl("P", Data::Names(255)).unwrap();
        let mut locals: Vec<Local> = (0..self.acquirers)
            .map(|_| Local {
                pruner: false,
                pc: Pc::Start,
                budget: self.acquisitions,
                created: 0,
            })
            .collect();
        locals.push(Local {
            pruner: true,
            pc: Pc::Start,
            budget: self.prunes,
            created: 0,
        });
        World::new(fs, locals)
    }

    fn steps(&self, pid: Pid, local: &Local, world: &World<Local, Data>) -> Vec<Step<Local, Data>> {
        if local.pruner {
            self.pruner_steps(pid, local, world)
        } else {
            self.acquirer_steps(pid, local, world)
        }
    }

    fn believes(&self, _pid: Pid, local: &Local, _world: &World<Local, Data>) -> Option<u64> {
        match local.pc {
            Pc::Holding(_, g) => Some(u64::from(g)),
            _ => None,
        }
    }
}

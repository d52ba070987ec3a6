//! Two toy protocols that show the checker is neither vacuous nor always failing.
//!
//! * [`TicketLock`] (correct): the generation is the name of an exclusively created,
//!   never-deleted file `T.<n>`; `T.<n>` may be created once `T.<n-1>.free` exists. No
//!   takeover: a crashed holder blocks the lock forever, which is safe.
//! * [`CheckThenWrite`] (broken): read `L`, and if it is missing or released, rename a record
//!   with generation + 1 over it. Two processes that both read before either writes both win.

use std::fmt;

use super::{Fs, Pid, Protocol, Step, World};

/// A toy file's contents.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) enum Data {
    Ticket,
    Free,
    Lock { owner: Option<u8>, generation: u64 },
}

impl fmt::Debug for Data {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ticket => f.write_str("ticket"),
            Self::Free => f.write_str("free"),
            Self::Lock {
                owner: Some(o),
                generation,
            } => write!(f, "{{owner P{o}, gen {generation}}}"),
            Self::Lock {
                owner: None,
                generation,
            } => write!(f, "{{released, gen {generation}}}"),
        }
    }
}

/// A toy process's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Pc {
    Idle,
    Create(u64),
    Write(u64),
    Holding(u64),
}

/// Local state of a toy process: where it is, and how often it acquired.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Local {
    pc: Pc,
    acquisitions: u8,
}

fn init<D: Clone>(processes: usize) -> World<Local, D> {
    World::new(
        Fs::default(),
        vec![
            Local {
                pc: Pc::Idle,
                acquisitions: 0,
            };
            processes
        ],
    )
}

fn go(world: &World<Local, Data>, pid: Pid, local: &Local, pc: Pc) -> World<Local, Data> {
    world.with(
        pid,
        Local {
            pc,
            acquisitions: local.acquisitions,
        },
    )
}

/// The correct toy: a ticket lock on exclusively created, never-deleted names.
#[derive(Debug)]
pub(crate) struct TicketLock {
    pub(crate) processes: usize,
    pub(crate) max_acquisitions: u8,
}

impl Protocol for TicketLock {
    type Local = Local;
    type Data = Data;

    fn init(&self) -> World<Local, Data> {
        init(self.processes)
    }

    fn steps(&self, pid: Pid, local: &Local, world: &World<Local, Data>) -> Vec<Step<Local, Data>> {
        match local.pc {
            Pc::Idle if local.acquisitions < self.max_acquisitions => {
                let names = world.fs.readdir("").unwrap_or_default();
                let max = names
                    .iter()
                    .filter_map(|n| n.strip_prefix("T.")?.parse::<u64>().ok())
                    .max();
                match max {
                    Some(n) if !names.contains(&format!("T.{n}.free").as_str()) => Vec::new(),
                    _ => {
                        let next = max.map_or(1, |n| n + 1);
                        vec![Step::new(
                            format!("readdir: T.{next} is next"),
                            go(world, pid, local, Pc::Create(next)),
                        )]
                    }
                }
            }
            Pc::Idle | Pc::Write(_) => Vec::new(),
            Pc::Create(n) => {
                let mut next = world.clone();
                match next.fs.create_excl(&format!("T.{n}"), Data::Ticket) {
                    Ok(_) => {
                        next.procs[pid] = super::Proc::Live(Local {
                            pc: Pc::Holding(n),
                            acquisitions: local.acquisitions + 1,
                        });
                        next.issue(pid, n);
                        vec![Step::new(
                            format!("create T.{n} -> ok; ACQUIRED generation {n}"),
                            next,
                        )]
                    }
                    Err(e) => vec![Step::new(
                        format!("create T.{n} -> {e}"),
                        go(world, pid, local, Pc::Idle),
                    )],
                }
            }
            Pc::Holding(n) => {
                let mut next = go(world, pid, local, Pc::Idle);
                let r = next.fs.create_excl(&format!("T.{n}.free"), Data::Free);
                vec![Step::new(
                    format!("create T.{n}.free -> {r:?}; released"),
                    next,
                )]
            }
        }
    }

    fn believes(&self, _: Pid, local: &Local, _: &World<Local, Data>) -> Option<u64> {
        match local.pc {
            Pc::Holding(n) => Some(n),
            _ => None,
        }
    }
}

/// The broken toy: read, decide, rename.
#[derive(Debug)]
pub(crate) struct CheckThenWrite {
    pub(crate) processes: usize,
    pub(crate) max_acquisitions: u8,
}

impl Protocol for CheckThenWrite {
    type Local = Local;
    type Data = Data;

    fn init(&self) -> World<Local, Data> {
        init(self.processes)
    }

    fn steps(&self, pid: Pid, local: &Local, world: &World<Local, Data>) -> Vec<Step<Local, Data>> {
        let me = u8::try_from(pid).unwrap_or(u8::MAX);
        match local.pc {
            Pc::Idle if local.acquisitions < self.max_acquisitions => match world.fs.read("L") {
                Err(e) => vec![Step::new(
                    format!("read L -> {e}: free"),
                    go(world, pid, local, Pc::Write(1)),
                )],
                Ok(Data::Lock {
                    owner: None,
                    generation,
                }) => vec![Step::new(
                    format!("read L = released, gen {generation}: free"),
                    go(world, pid, local, Pc::Write(generation + 1)),
                )],
                Ok(_) => Vec::new(),
            },
            Pc::Idle | Pc::Create(_) => Vec::new(),
            Pc::Write(n) => {
                let mut next = world.clone();
                let record = Data::Lock {
                    owner: Some(me),
                    generation: n,
                };
                let r = next.fs.replace("L", record);
                next.procs[pid] = super::Proc::Live(Local {
                    pc: Pc::Holding(n),
                    acquisitions: local.acquisitions + 1,
                });
                next.issue(pid, n);
                vec![Step::new(
                    format!(
                        "rename {{owner P{pid}, gen {n}}} over L -> {r:?}; ACQUIRED generation {n}"
                    ),
                    next,
                )]
            }
            Pc::Holding(n) => {
                let mut next = go(world, pid, local, Pc::Idle);
                let r = next.fs.replace(
                    "L",
                    Data::Lock {
                        owner: None,
                        generation: n,
                    },
                );
                vec![Step::new(
                    format!("rename released gen {n} over L -> {r:?}; released"),
                    next,
                )]
            }
        }
    }

    fn believes(&self, _: Pid, local: &Local, _: &World<Local, Data>) -> Option<u64> {
        match local.pc {
            Pc::Holding(n) => Some(n),
            _ => None,
        }
    }
}

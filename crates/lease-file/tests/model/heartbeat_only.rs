//! Today's heartbeat-only protocol (`FileLock` with `LockMode::HeartbeatOnly`), step by step.
//!
//! Files, for a lock at `P`: the record `P` (replaced by rename), critical-section epochs
//! `P.cs.<n>` and their markers `P.cs.<n>.done`, all created with `O_EXCL`.
//!
//! Each process is one `FileLock` (its heartbeat thread and its caller share one critical
//! section mutex, so one state machine per process is faithful). The steps, as in `cs.rs` and
//! `lock.rs` (a step is one system call, the local decisions that follow from its result are
//! merged into it):
//!
//! * **Enter** (`Cs::enter`, files mode): `readdir` for the highest epoch `n` and whether it is
//!   done; take `n + 1` if there is no epoch, or `n` is done, or `n` was seen stuck by an earlier
//!   scan of ours and is now judged stale (the choice the module docs describe). `O_EXCL` create
//!   `P.cs.<n+1>` (`EEXIST`: scan again); `readdir` again: a higher epoch means ours was a stale
//!   number, unlink it and scan again; else clean up: `readdir`, then unlink every epoch file
//!   and marker below `n`, one by one.
//! * **Acquire** (`try_acquire`, retried as `acquire_with` does): enter; read the clock
//!   (`sent`); read `P`: missing, released, or held. A held record is taken over only when the
//!   same owner, generation and heartbeat counter were seen by an earlier read of ours and are
//!   now judged stale; otherwise `Held`. Then `still_exclusive` (`lstat P.cs.<epoch+1>`), then
//!   the rename of the new record (generation = previous + 1), then `P.cs.<epoch>.done`; the
//!   generation is issued when `try_acquire` returns.
//! * **Heartbeat** (`heartbeat_once`): enter; read the clock; read `P`: not ours means lost;
//!   `still_exclusive` (if not: a failed heartbeat, the tenure is lost only if its deadline
//!   passed); rename the record with the counter + 1; `.done`; the deadline moves to
//!   `sent` + threshold.
//! * **Release**: enter; read `P`: ours, or the tenure is dropped unreleased; `still_exclusive`
//!   (if not: an error, the tenure is kept); rename the released record (no owner, same
//!   generation); the tenure ends; `.done`.
//!
//! Simplifications, none of which removes a behaviour others can observe: starting an operation
//! is merged into its first scan; writing a record (temporary file created, written, renamed)
//! is the one step of its rename, since nobody else can name the temporary file; the pid probe
//! (`epoch_writer_gone`, `writer_is_gone`) is left out, as the stale judgement covers every run
//! it allows, later. `atomic_check_and_rename` merges `still_exclusive` into the rename, which no
//! file system offers: it shows that closing that window would not be enough.
//!
//! A process believes it holds the lease (`FileLockGuard::check` is `Ok`) while it has a tenure that
//! is not lost and whose deadline (the `sent` of its last successful acquire or heartbeat plus
//! the stale threshold) has not surely passed.

use std::fmt;

use super::{Errno, Fs, Pid, Protocol, Snapshot, Stamp, Step, World};

const RECORD: &str = "P";

fn epoch(n: u32) -> String {
    format!("P.cs.{n}")
}

fn done(n: u32) -> String {
    format!("P.cs.{n}.done")
}

/// Who wrote a record: the process and its tenure (the code's random owner id).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Owner {
    pid: u8,
    tenure: u8,
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "P{}#{}", self.pid, self.tenure)
    }
}

/// A file's contents.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) enum Data {
    Record {
        owner: Option<Owner>,
        generation: u64,
        heartbeat: u8,
    },
    Epoch,
    Done,
}

impl fmt::Debug for Data {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Record {
                owner: Some(o),
                generation,
                heartbeat,
            } => write!(f, "{{owner {o:?}, gen {generation}, hb {heartbeat}}}"),
            Self::Record {
                owner: None,
                generation,
                heartbeat,
            } => write!(f, "{{released, gen {generation}, hb {heartbeat}}}"),
            Self::Epoch => f.write_str("epoch"),
            Self::Done => f.write_str("done"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    Acquire,
    Heartbeat,
    Release,
}

/// How a critical section ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Outcome {
    Acquired {
        owner: Owner,
        generation: u64,
        sent: Stamp,
    },
    /// Acquire refused: held by someone live.
    Held,
    /// `still_exclusive` failed (a transient error for acquire and release; a failed heartbeat).
    Busy,
    /// `still_exclusive` failed in a release: an error, the tenure is kept.
    ReleaseFailed,
    Beat {
        sent: Stamp,
    },
    /// The heartbeat found the record no longer ours.
    Lost,
    /// Released, or the release found the record no longer ours (the tenure is dropped both ways).
    Released,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Pc {
    /// No (live) tenure: may start an acquire attempt.
    Idle,
    /// Holding: may heartbeat or release.
    Holding,
    Scan(Op),
    Create {
        op: Op,
        next: u32,
        max: Option<u32>,
    },
    Rescan {
        op: Op,
        next: u32,
        max: Option<u32>,
    },
    UnlinkOwn {
        op: Op,
        next: u32,
    },
    CleanupScan {
        op: Op,
        epoch: u32,
        below: u32,
    },
    Cleanup {
        op: Op,
        epoch: u32,
        names: Vec<String>,
    },
    Clock {
        op: Op,
        epoch: u32,
    },
    Read {
        op: Op,
        epoch: u32,
        sent: Option<Stamp>,
    },
    Check {
        op: Op,
        epoch: u32,
        sent: Option<Stamp>,
        write: Data,
    },
    Write {
        op: Op,
        epoch: u32,
        sent: Option<Stamp>,
        write: Data,
    },
    Leave {
        epoch: u32,
        outcome: Outcome,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Tenure {
    owner: Owner,
    generation: u64,
    heartbeat: u8,
    sent: Stamp,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Local {
    pc: Pc,
    /// `Cs::Files::inner`: the epoch seen in progress, since when.
    cs_seen: Option<(u32, Snapshot)>,
    /// `observations()`: the record (owner, generation, heartbeat) seen, since when.
    record_seen: Option<((Owner, u64, u8), Snapshot)>,
    tenure: Option<Tenure>,
    lost: bool,
    acquisitions: u8,
    heartbeats: u8,
}

/// The model, with its bounds.
#[derive(Clone, Debug)]
pub(crate) struct HeartbeatOnly {
    pub(crate) processes: usize,
    /// Successful acquisitions per process.
    pub(crate) max_acquisitions: u8,
    /// Heartbeats written per process.
    pub(crate) max_heartbeats: u8,
    /// The highest critical-section epoch a process may create.
    pub(crate) max_epoch: u32,
    /// Make `still_exclusive` and the rename one atomic step: stronger than any file system
    /// allows, to show that even closing that window leaves the cleanup hole.
    pub(crate) atomic_check_and_rename: bool,
}

type W = World<Local, Data>;

fn scan(fs: &Fs<Data>) -> (Option<u32>, bool) {
    let mut max = None;
    let mut done_max = None;
    for name in fs.readdir("").unwrap_or_default() {
        let Some(rest) = name.strip_prefix("P.cs.") else {
            continue;
        };
        let (digits, is_done) = match rest.strip_suffix(".done") {
            Some(d) => (d, true),
            None => (rest, false),
        };
        let Ok(n) = digits.parse::<u32>() else {
            continue;
        };
        if is_done {
            done_max = done_max.max(Some(n));
        } else {
            max = max.max(Some(n));
        }
    }
    (max, max.is_some() && done_max >= max)
}

fn show(max: Option<u32>, done: bool) -> String {
    match max {
        None => "no epoch".into(),
        Some(n) if done => format!("epoch {n} done"),
        Some(n) => format!("epoch {n} in progress"),
    }
}

impl HeartbeatOnly {
    fn go(world: &W, pid: Pid, local: &Local, pc: Pc) -> W {
        let mut l = local.clone();
        l.pc = pc;
        world.with(pid, l)
    }

    /// What follows entering the critical section.
    fn entered(op: Op, epoch: u32) -> Pc {
        match op {
            Op::Acquire | Op::Heartbeat => Pc::Clock { op, epoch },
            Op::Release => Pc::Read {
                op,
                epoch,
                sent: None,
            },
        }
    }

    /// `scan_epochs` and the decision to take the next epoch (`prefix`: the operation this
    /// scan starts, if it does).
    fn scan_step(
        &self,
        pid: Pid,
        local: &Local,
        world: &W,
        op: Op,
        prefix: &str,
        out: &mut Vec<Step<Local, Data>>,
    ) {
        let (max, is_done) = scan(&world.fs);
        let seen = format!("{prefix}readdir: {}", show(max, is_done));
        match max {
            Some(n) if !is_done => match local.cs_seen {
                Some((m, since)) if m == n => {
                    if n < self.max_epoch {
                        let mut next = Self::go(
                            world,
                            pid,
                            local,
                            Pc::Create {
                                op,
                                next: n + 1,
                                max,
                            },
                        );
                        next.time.threshold_passed_since(&since);
                        out.push(Step::new(
                            format!("{seen}, stuck since an earlier scan: judged stale, reclaims"),
                            next,
                        ));
                    }
                    // Not yet stale: scanning again is this same state (or, from `Idle` or
                    // `Holding`, one with fewer choices).
                }
                _ => {
                    let mut l = local.clone();
                    l.cs_seen = Some((n, world.time.now()));
                    l.pc = Pc::Scan(op);
                    out.push(Step::new(
                        format!("{seen}, starts timing it"),
                        world.with(pid, l),
                    ));
                }
            },
            _ => {
                let next = max.map_or(1, |m| m + 1);
                if next <= self.max_epoch {
                    out.push(Step::new(
                        seen,
                        Self::go(world, pid, local, Pc::Create { op, next, max }),
                    ));
                }
            }
        }
    }

    #[allow(clippy::too_many_lines)]
    fn next_steps(&self, pid: Pid, local: &Local, world: &W) -> Vec<Step<Local, Data>> {
        let mut out = Vec::new();
        let owner_pid = u8::try_from(pid).unwrap_or(u8::MAX);
        match &local.pc {
            // Starting an operation is a local decision: merged into its first scan.
            Pc::Idle => {
                if local.acquisitions < self.max_acquisitions {
                    let mut l = local.clone();
                    // `try_acquire` forgets a lost tenure.
                    l.tenure = None;
                    l.lost = false;
                    self.scan_step(pid, &l, world, Op::Acquire, "acquire: ", &mut out);
                }
            }
            Pc::Holding => {
                if local.heartbeats < self.max_heartbeats {
                    self.scan_step(pid, local, world, Op::Heartbeat, "heartbeat: ", &mut out);
                }
                self.scan_step(pid, local, world, Op::Release, "release: ", &mut out);
            }
            &Pc::Scan(op) => self.scan_step(pid, local, world, op, "", &mut out),
            &Pc::Create { op, next, max } => {
                let mut w = world.clone();
                match w.fs.create_excl(&epoch(next), Data::Epoch) {
                    Ok(_) => {
                        let mut l = local.clone();
                        l.pc = Pc::Rescan { op, next, max };
                        w.procs[pid] = super::Proc::Live(l);
                        out.push(Step::new(format!("create {} -> ok", epoch(next)), w));
                    }
                    Err(e) => out.push(Step::new(
                        format!("create {} -> {e}", epoch(next)),
                        Self::go(world, pid, local, Pc::Scan(op)),
                    )),
                }
            }
            &Pc::Rescan { op, next, max } => {
                let (now_max, is_done) = scan(&world.fs);
                let seen = format!("readdir: {}", show(now_max, is_done));
                let pc = if now_max.is_some_and(|m| m > next) {
                    Pc::UnlinkOwn { op, next }
                } else if let Some(below) = max {
                    Pc::CleanupScan {
                        op,
                        epoch: next,
                        below,
                    }
                } else {
                    Self::entered(op, next)
                };
                out.push(Step::new(seen, Self::go(world, pid, local, pc)));
            }
            &Pc::UnlinkOwn { op, next } => {
                let mut w = Self::go(world, pid, local, Pc::Scan(op));
                let r = w.fs.unlink(&epoch(next));
                out.push(Step::new(format!("unlink {} -> {}", epoch(next), ok(r)), w));
            }
            &Pc::CleanupScan { op, epoch, below } => {
                let names: Vec<String> = world
                    .fs
                    .readdir("")
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|name| {
                        name.strip_prefix("P.cs.").is_some_and(|rest| {
                            rest.strip_suffix(".done")
                                .unwrap_or(rest)
                                .parse::<u32>()
                                .is_ok_and(|n| n < below)
                        })
                    })
                    .map(str::to_owned)
                    .collect();
                let label = format!("readdir for cleanup below {below}: {names:?}");
                let pc = if names.is_empty() {
                    Self::entered(op, epoch)
                } else {
                    Pc::Cleanup { op, epoch, names }
                };
                out.push(Step::new(label, Self::go(world, pid, local, pc)));
            }
            Pc::Cleanup { op, epoch, names } => {
                let mut rest = names.clone();
                let name = rest.remove(0);
                let pc = if rest.is_empty() {
                    Self::entered(*op, *epoch)
                } else {
                    Pc::Cleanup {
                        op: *op,
                        epoch: *epoch,
                        names: rest,
                    }
                };
                let mut w = Self::go(world, pid, local, pc);
                let r = w.fs.unlink(&name);
                out.push(Step::new(format!("unlink {name} -> {}", ok(r)), w));
            }
            &Pc::Clock { op, epoch } => {
                let mut w = world.clone();
                let sent = w.time.mark(pid);
                let mut l = local.clone();
                l.pc = Pc::Read {
                    op,
                    epoch,
                    sent: Some(sent),
                };
                w.procs[pid] = super::Proc::Live(l);
                out.push(Step::new(
                    format!("inside epoch {epoch}, reads its clock (sent)"),
                    w,
                ));
            }
            &Pc::Read { op, epoch, sent } => {
                let read = world.fs.read(RECORD).cloned();
                let label = match &read {
                    Ok(d) => format!("read P = {d:?}"),
                    Err(e) => format!("read P -> {e}"),
                };
                let tenure = local.tenure;
                match op {
                    Op::Acquire => {
                        let tenure_no = local.acquisitions + 1;
                        let new = |previous: u64| Data::Record {
                            owner: Some(Owner {
                                pid: owner_pid,
                                tenure: tenure_no,
                            }),
                            generation: previous + 1,
                            heartbeat: 0,
                        };
                        let check = |write| Pc::Check {
                            op,
                            epoch,
                            sent,
                            write,
                        };
                        match read {
                            Err(_) => out.push(Step::new(
                                format!("{label}: free"),
                                Self::go(world, pid, local, check(new(0))),
                            )),
                            Ok(Data::Record {
                                owner: None,
                                generation,
                                ..
                            }) => out.push(Step::new(
                                format!("{label}: free"),
                                Self::go(world, pid, local, check(new(generation))),
                            )),
                            Ok(Data::Record {
                                owner: Some(o),
                                generation,
                                heartbeat,
                            }) => {
                                let key = (o, generation, heartbeat);
                                let held = Pc::Leave {
                                    epoch,
                                    outcome: Outcome::Held,
                                };
                                match local.record_seen {
                                    Some((k, since)) if k == key => {
                                        let mut w =
                                            Self::go(world, pid, local, check(new(generation)));
                                        w.time.threshold_passed_since(&since);
                                        out.push(Step::new(
                                            format!(
                                                "{label}: unchanged since an earlier read, judged stale: takes over"
                                            ),
                                            w,
                                        ));
                                        out.push(Step::new(
                                            format!("{label}: unchanged, not yet stale: held"),
                                            Self::go(world, pid, local, held),
                                        ));
                                    }
                                    _ => {
                                        let mut l = local.clone();
                                        l.record_seen = Some((key, world.time.now()));
                                        l.pc = held;
                                        out.push(Step::new(
                                            format!("{label}: held, starts timing it"),
                                            world.with(pid, l),
                                        ));
                                    }
                                }
                            }
                            Ok(_) => unreachable!("only records are renamed to P"),
                        }
                    }
                    Op::Heartbeat | Op::Release => {
                        let t = tenure.expect("a tenure to heartbeat or release");
                        let ours = matches!(read, Ok(Data::Record { owner: Some(o), generation, .. })
                            if o == t.owner && generation == t.generation);
                        if ours {
                            let write = Data::Record {
                                owner: (op == Op::Heartbeat).then_some(t.owner),
                                generation: t.generation,
                                heartbeat: t.heartbeat + 1,
                            };
                            out.push(Step::new(
                                format!("{label}: ours"),
                                Self::go(
                                    world,
                                    pid,
                                    local,
                                    Pc::Check {
                                        op,
                                        epoch,
                                        sent,
                                        write,
                                    },
                                ),
                            ));
                        } else if op == Op::Heartbeat {
                            out.push(Step::new(
                                format!("{label}: not ours, the lease is lost"),
                                Self::go(
                                    world,
                                    pid,
                                    local,
                                    Pc::Leave {
                                        epoch,
                                        outcome: Outcome::Lost,
                                    },
                                ),
                            ));
                        } else {
                            let mut l = local.clone();
                            l.tenure = None;
                            l.pc = Pc::Leave {
                                epoch,
                                outcome: Outcome::Released,
                            };
                            out.push(Step::new(
                                format!("{label}: not ours, drops the tenure"),
                                world.with(pid, l),
                            ));
                        }
                    }
                }
            }
            Pc::Check {
                op,
                epoch,
                sent,
                write,
            } => {
                let later = self::epoch(epoch + 1);
                if world.fs.exists(&later) {
                    out.push(Step::new(
                        format!("still_exclusive: lstat {later} -> exists: gives up"),
                        Self::go(
                            world,
                            pid,
                            local,
                            Pc::Leave {
                                epoch: *epoch,
                                outcome: if *op == Op::Release {
                                    Outcome::ReleaseFailed
                                } else {
                                    Outcome::Busy
                                },
                            },
                        ),
                    ));
                } else if self.atomic_check_and_rename {
                    out.push(Self::write(
                        pid,
                        local,
                        world,
                        (*op, *epoch, *sent),
                        write,
                        format!("ATOMICALLY still_exclusive: lstat {later} -> ENOENT and "),
                    ));
                } else {
                    out.push(Step::new(
                        format!("still_exclusive: lstat {later} -> ENOENT"),
                        Self::go(
                            world,
                            pid,
                            local,
                            Pc::Write {
                                op: *op,
                                epoch: *epoch,
                                sent: *sent,
                                write: write.clone(),
                            },
                        ),
                    ));
                }
            }
            Pc::Write {
                op,
                epoch,
                sent,
                write,
            } => out.push(Self::write(
                pid,
                local,
                world,
                (*op, *epoch, *sent),
                write,
                String::new(),
            )),
            &Pc::Leave { epoch, outcome } => {
                let mut w = world.clone();
                let r = w.fs.create_excl(&done(epoch), Data::Done);
                let mut l = local.clone();
                let mut label = format!("create {} -> {}", done(epoch), ok(r.map(|_| ())));
                l.pc = match outcome {
                    Outcome::Acquired {
                        owner,
                        generation,
                        sent,
                    } => {
                        l.tenure = Some(Tenure {
                            owner,
                            generation,
                            heartbeat: 0,
                            sent,
                        });
                        l.lost = false;
                        l.acquisitions += 1;
                        w.issue(pid, generation);
                        label.push_str(&format!("; ACQUIRED generation {generation}"));
                        Pc::Holding
                    }
                    Outcome::Held => {
                        label.push_str("; acquire refused (held), will retry");
                        Pc::Idle
                    }
                    Outcome::Busy if l.tenure.is_none() => {
                        label.push_str("; acquire failed (transient), will retry");
                        Pc::Idle
                    }
                    Outcome::Busy => {
                        let t = l.tenure.expect("checked");
                        if w.time.passed(pid, t.sent) {
                            l.lost = true;
                            label.push_str("; failed, past its deadline: lease lost");
                            Pc::Idle
                        } else {
                            label.push_str("; failed, will retry before its deadline");
                            Pc::Holding
                        }
                    }
                    Outcome::ReleaseFailed => {
                        label.push_str("; release failed (transient), tenure kept");
                        Pc::Holding
                    }
                    Outcome::Beat { sent } => {
                        if let Some(t) = l.tenure.as_mut() {
                            t.heartbeat += 1;
                            t.sent = sent;
                        }
                        l.heartbeats += 1;
                        label.push_str("; heartbeat done, deadline renewed");
                        Pc::Holding
                    }
                    Outcome::Lost => {
                        l.lost = true;
                        label.push_str("; lease lost (taken over)");
                        Pc::Idle
                    }
                    Outcome::Released => {
                        label.push_str("; released");
                        Pc::Idle
                    }
                };
                w.procs[pid] = super::Proc::Live(l);
                out.push(Step::new(label, w));
            }
        }
        out
    }
}

impl HeartbeatOnly {
    /// The rename of a new record (`prefix` says what was merged into this step).
    fn write(
        pid: Pid,
        local: &Local,
        world: &W,
        (op, epoch, sent): (Op, u32, Option<Stamp>),
        write: &Data,
        prefix: String,
    ) -> Step<Local, Data> {
        let mut l = local.clone();
        let outcome = match (op, write) {
            (
                Op::Acquire,
                Data::Record {
                    owner: Some(owner),
                    generation,
                    ..
                },
            ) => {
                l.record_seen = None;
                Outcome::Acquired {
                    owner: *owner,
                    generation: *generation,
                    sent: sent.expect("acquire reads the clock"),
                }
            }
            (Op::Heartbeat, _) => Outcome::Beat {
                sent: sent.expect("heartbeat reads the clock"),
            },
            _ => {
                l.tenure = None;
                Outcome::Released
            }
        };
        l.pc = Pc::Leave { epoch, outcome };
        let mut w = world.with(pid, l);
        let r = w.fs.replace(RECORD, write.clone());
        Step::new(
            format!(
                "{prefix}rename a new record over P: {write:?} -> {}",
                ok(r.map(|_| ()))
            ),
            w,
        )
    }
}

fn ok(r: Result<(), Errno>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => e.to_string(),
    }
}

impl Protocol for HeartbeatOnly {
    type Local = Local;
    type Data = Data;

    fn init(&self) -> W {
        let local = Local {
            pc: Pc::Idle,
            cs_seen: None,
            record_seen: None,
            tenure: None,
            lost: false,
            acquisitions: 0,
            heartbeats: 0,
        };
        World::new(Fs::default(), vec![local; self.processes])
    }

    fn steps(&self, pid: Pid, local: &Local, world: &W) -> Vec<Step<Local, Data>> {
        self.next_steps(pid, local, world)
    }

    fn believes(&self, pid: Pid, local: &Local, world: &W) -> Option<u64> {
        let t = local.tenure?;
        (!local.lost && !world.time.passed(pid, t.sent)).then_some(t.generation)
    }
}

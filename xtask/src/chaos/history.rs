//! The history a chaos run leaves in its run directory (`docs/chaos.md`), parsed into compact
//! records: the `acq`, `claim`, `rel`, `write`, `read` and `clock` lines of every
//! `history/*.log`, and the `fault` lines of `faults.log`.
//!
//! A 30-minute run writes about a million lines, so the parser keeps no line text: procs, keys
//! and names are interned once and the records hold their ids, and the claims of one tenure are
//! folded into a single span as they are read. A malformed or truncated line (wrong field count,
//! an unknown line kind or surface, a number that does not parse, a last line without its
//! newline) is counted against its file and skipped.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Id of a string in an [`Interner`].
pub(crate) type Id = u32;

/// Strings seen in the history, each stored once and named by its index.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    /// The strings, by id.
    names: Vec<String>,
    /// Each string's id.
    ids: HashMap<String, Id>,
}

impl Interner {
    /// The id of `name`, adding it if it is new.
    pub(crate) fn intern(&mut self, name: &str) -> Id {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = Id::try_from(self.names.len()).expect("fewer than 2^32 distinct strings");
        self.names.push(name.to_owned());
        self.ids.insert(name.to_owned(), id);
        id
    }

    #[cfg(test)]
    /// The id of `name`, if it was seen.
    pub(crate) fn get(&self, name: &str) -> Option<Id> {
        self.ids.get(name).copied()
    }

    /// The string of `id`, which this interner returned.
    pub(crate) fn name(&self, id: Id) -> &str {
        &self.names[id as usize]
    }

    /// How many distinct strings were seen.
    pub(crate) fn count(&self) -> usize {
        self.names.len()
    }
}

/// The surface (the project's API under test) that wrote a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Surface {
    /// `lease run --file`: the child process.
    RunFile,
    /// `lease run` over DynamoDB: the child process.
    RunDynamo,
    /// `FileLock` in kernel mode.
    FilelockKernel,
    /// `FileLock` in heartbeat mode.
    FilelockHeartbeat,
    /// A `LeaseGuard` over `DynamoLeases`.
    LeaseDynamo,
    /// A fleet worker over the file store; keys are units.
    FleetFile,
    /// A fleet worker over DynamoDB; keys are units.
    FleetDynamo,
    /// A leader election (`Election`) over the file store: campaigners' tenures and
    /// observers' reports.
    ElectionFile,
    /// A leader election (`Election`) over DynamoDB, through the proxy.
    ElectionDynamo,
    /// `lease run` over PostgreSQL: the child process.
    RunPostgres,
    /// A `LeaseGuard` over `PgLeases`.
    LeasePostgres,
    /// A fleet worker over PostgreSQL; keys are units.
    FleetPostgres,
    /// A leader election (`Election`) over PostgreSQL, through the proxy.
    ElectionPostgres,
    /// `lease run` over Redis: the child process.
    RunRedis,
    /// A `LeaseGuard` over `RedisLeases`.
    LeaseRedis,
    /// A fleet worker over Redis; keys are units.
    FleetRedis,
    /// A leader election (`Election`) over Redis, through the proxy.
    ElectionRedis,
}

impl Surface {
    /// Every surface with its name in history lines.
    pub(crate) const ALL: [(Surface, &'static str); 17] = [
        (Surface::RunFile, "run-file"),
        (Surface::RunDynamo, "run-dynamo"),
        (Surface::FilelockKernel, "filelock-kernel"),
        (Surface::FilelockHeartbeat, "filelock-heartbeat"),
        (Surface::LeaseDynamo, "lease-dynamo"),
        (Surface::FleetFile, "fleet-file"),
        (Surface::FleetDynamo, "fleet-dynamo"),
        (Surface::ElectionFile, "election-file"),
        (Surface::ElectionDynamo, "election-dynamo"),
        (Surface::RunPostgres, "run-postgres"),
        (Surface::LeasePostgres, "lease-postgres"),
        (Surface::FleetPostgres, "fleet-postgres"),
        (Surface::ElectionPostgres, "election-postgres"),
        (Surface::RunRedis, "run-redis"),
        (Surface::LeaseRedis, "lease-redis"),
        (Surface::FleetRedis, "fleet-redis"),
        (Surface::ElectionRedis, "election-redis"),
    ];

    /// The surface named `name` in a history line.
    pub(crate) fn parse(name: &str) -> Option<Surface> {
        Surface::ALL
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(s, _)| *s)
    }

    /// Its name in history lines.
    pub(crate) fn as_str(self) -> &'static str {
        Surface::ALL
            .iter()
            .find(|(s, _)| *s == self)
            .map_or("?", |(_, n)| n)
    }

    /// The store the surface keeps its leases in.
    pub(crate) fn backend(self) -> super::Backend {
        match self {
            Surface::RunFile
            | Surface::FilelockKernel
            | Surface::FilelockHeartbeat
            | Surface::FleetFile
            | Surface::ElectionFile => super::Backend::File,
            Surface::RunDynamo
            | Surface::LeaseDynamo
            | Surface::FleetDynamo
            | Surface::ElectionDynamo => super::Backend::Dynamo,
            Surface::RunPostgres
            | Surface::LeasePostgres
            | Surface::FleetPostgres
            | Surface::ElectionPostgres => super::Backend::Postgres,
            Surface::RunRedis
            | Surface::LeaseRedis
            | Surface::FleetRedis
            | Surface::ElectionRedis => super::Backend::Redis,
        }
    }

    /// Whether the surface keeps its leases in DynamoDB, whose expiry compares wall clocks
    /// (assumption A1 of docs/correctness.md); file surfaces never read a wall clock, and
    /// PostgreSQL's and Redis's expiry is judged by the server's clock alone.
    pub(crate) fn is_dynamo(self) -> bool {
        matches!(
            self,
            Surface::RunDynamo
                | Surface::LeaseDynamo
                | Surface::FleetDynamo
                | Surface::ElectionDynamo
        )
    }

    /// Whether the surface is a leader election (its `acq` lines are elections, and observers
    /// report on its keys).
    pub(crate) fn is_election(self) -> bool {
        matches!(
            self,
            Surface::ElectionFile
                | Surface::ElectionDynamo
                | Surface::ElectionPostgres
                | Surface::ElectionRedis
        )
    }

    /// Whether the surface is a fleet worker (its keys are units).
    pub(crate) fn is_fleet(self) -> bool {
        matches!(
            self,
            Surface::FleetFile
                | Surface::FleetDynamo
                | Surface::FleetPostgres
                | Surface::FleetRedis
        )
    }
}

/// An `acq` line: an acquisition returned a tenure with fencing `token`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Acq {
    /// The acquiring process.
    pub(crate) proc: Id,
    /// Its surface.
    pub(crate) surface: Surface,
    /// The lease key ([`History::keys`]).
    pub(crate) key: Id,
    /// The fencing token of the tenure.
    pub(crate) token: u64,
    /// Monotonic instant read before the acquiring call (ns).
    pub(crate) sent_mono: u64,
    /// Monotonic instant read after it returned (ns); never before `sent_mono`.
    pub(crate) acquired_mono: u64,
    /// The process's own wall clock (Unix ms), for reports only.
    pub(crate) wall: i64,
}

/// The `claim` lines of one tenure `(proc, key, token)`, folded into their first and last instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClaimSpan {
    /// The claiming process.
    pub(crate) proc: Id,
    /// The surface of its first claim.
    pub(crate) surface: Surface,
    /// The lease key ([`History::keys`]).
    pub(crate) key: Id,
    /// The fencing token of the tenure.
    pub(crate) token: u64,
    /// The earliest claim instant (ns).
    pub(crate) first_mono: u64,
    /// The latest claim instant (ns).
    pub(crate) last_mono: u64,
    /// How many claim lines were folded in.
    pub(crate) count: u64,
}

/// A `rel` line: the process released its tenure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rel {
    /// The releasing process.
    pub(crate) proc: Id,
    /// Its surface.
    pub(crate) surface: Surface,
    /// The lease key ([`History::keys`]).
    pub(crate) key: Id,
    /// The fencing token of the tenure.
    pub(crate) token: u64,
    /// When it released (ns).
    pub(crate) mono: u64,
}

/// How a fenced write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Outcome {
    /// Accepted by the store.
    Ok,
    /// Fenced out: a higher token was seen.
    Refused,
    /// Failed without an answer: it may or may not have landed.
    Error,
}

impl Outcome {
    /// The outcome named `name` in a `write` line.
    fn parse(name: &str) -> Option<Outcome> {
        match name {
            "ok" => Some(Outcome::Ok),
            "refused" => Some(Outcome::Refused),
            "error" => Some(Outcome::Error),
            _ => None,
        }
    }

    /// Its name in `write` lines.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Refused => "refused",
            Outcome::Error => "error",
        }
    }
}

/// A `write` line: a fenced write of `<proc>:<token>:<seq>` to a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Write {
    /// The writing process.
    pub(crate) proc: Id,
    /// Its surface.
    pub(crate) surface: Surface,
    /// The written name ([`History::names`]).
    pub(crate) name: Id,
    /// The fencing token the write carried.
    pub(crate) token: u64,
    /// The writer's sequence number within its tenure.
    pub(crate) seq: u64,
    /// Monotonic instant read before the write was sent (ns).
    pub(crate) sent_mono: u64,
    /// Monotonic instant read after it returned (ns); never before `sent_mono`.
    pub(crate) done_mono: u64,
    /// How it ended.
    pub(crate) outcome: Outcome,
}

/// A `read` line: a fenced read returned the value written with some token and seq, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Read {
    /// The reading process.
    pub(crate) proc: Id,
    /// Its surface.
    pub(crate) surface: Surface,
    /// The read name ([`History::names`]).
    pub(crate) name: Id,
    /// The fencing token the read carried.
    pub(crate) token: u64,
    /// Monotonic instant read before the read was sent (ns).
    pub(crate) sent_mono: u64,
    /// Monotonic instant read after it returned (ns); never before `sent_mono`.
    pub(crate) done_mono: u64,
    /// `(value_token, value_seq)` of the value returned; `None` for `- -` (no value).
    pub(crate) value: Option<(u64, u64)>,
}

/// An `observe` line: an election's observer reported a leader (or a vacancy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Observe {
    /// The observing process.
    pub(crate) proc: Id,
    /// Its surface.
    pub(crate) surface: Surface,
    /// The election's lease key ([`History::keys`]).
    pub(crate) key: Id,
    /// The reported leader: its fencing token and the proc its published value names
    /// ([`History::procs`]); `None` for a vacancy.
    pub(crate) leader: Option<(u64, Id)>,
    /// When it was reported (ns).
    pub(crate) mono: u64,
}

/// A `clock` line: from `mono` on, the process's wall clock runs `offset_ms` off the host's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClockSet {
    /// The process.
    pub(crate) proc: Id,
    /// The offset it applied (signed ms).
    pub(crate) offset_ms: i64,
    /// From when (ns).
    pub(crate) mono: u64,
}

/// A `fault` line of `faults.log`: one fault the orchestrator injected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fault {
    /// When it was injected (ns).
    pub(crate) mono: u64,
    /// The orchestrator's wall clock (Unix ms).
    pub(crate) wall: i64,
    /// `sigkill`, `sigstop`, `delay`, ... (docs/chaos.md).
    pub(crate) kind: String,
    /// The proc, proxy, store or file it hit.
    pub(crate) target: String,
    /// Kind-specific detail (a length, a count, an offset).
    pub(crate) detail: String,
}

impl std::fmt::Display for Fault {
    /// The line as `faults.log` has it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Fault {
            mono,
            wall,
            kind,
            target,
            detail,
        } = self;
        write!(f, "fault {mono} {wall} {kind} {target} {detail}")
    }
}

/// How many faults of each kind `faults` holds.
pub(crate) fn faults_by_kind(faults: &[Fault]) -> BTreeMap<&str, u64> {
    let mut counts = BTreeMap::new();
    for fault in faults {
        *counts.entry(fault.kind.as_str()).or_insert(0) += 1;
    }
    counts
}

/// What was read from one file of the run directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileStats {
    /// Its path relative to the run directory, like `history/fl2.17.log`.
    pub(crate) name: String,
    /// Lines read, malformed ones included.
    pub(crate) lines: u64,
    /// Lines counted and skipped as malformed or truncated.
    pub(crate) malformed: u64,
}

/// Everything a run's processes and orchestrator wrote, parsed.
#[derive(Debug, Default)]
pub(crate) struct History {
    /// Process names (`fl2.17`).
    pub(crate) procs: Interner,
    /// Lease keys of `acq`, `claim` and `rel` lines.
    pub(crate) keys: Interner,
    /// Names of `write` and `read` lines.
    pub(crate) names: Interner,
    /// Every `acq` line, in file order.
    pub(crate) acqs: Vec<Acq>,
    /// One span per tenure that has claim lines, in order of first appearance.
    pub(crate) claims: Vec<ClaimSpan>,
    /// How many `claim` lines were read.
    pub(crate) claim_lines: u64,
    /// Every `rel` line.
    pub(crate) rels: Vec<Rel>,
    /// Every `write` line.
    pub(crate) writes: Vec<Write>,
    /// Every `read` line.
    pub(crate) reads: Vec<Read>,
    /// Every `clock` line.
    pub(crate) clocks: Vec<ClockSet>,
    /// Every `observe` line, in file order (so each observer's in its own order).
    pub(crate) observes: Vec<Observe>,
    /// `(key, proc)` of every `campaign` line: who stood for election where.
    pub(crate) campaigns: Vec<(Id, Id)>,
    /// Every `fault` line, sorted by `mono`.
    pub(crate) faults: Vec<Fault>,
    /// One entry per file read: the history files in name order, then `faults.log`.
    pub(crate) files: Vec<FileStats>,
    /// Index into `claims` of each `(proc, key, token)`, while parsing.
    claim_index: HashMap<(Id, Id, u64), usize>,
}

/// Which lines a file may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileKind {
    /// `history/<proc>.log`: history lines.
    History,
    /// `faults.log`: fault lines.
    Faults,
}

impl History {
    /// Parses the run directory `run`: every `history/*.log` (the directory must exist) and
    /// `faults.log` (absent means no fault was injected). Only I/O errors are errors; bad lines
    /// are counted in [`History::files`].
    pub(crate) fn load(run: &Path) -> io::Result<History> {
        let mut history = History::default();
        for path in history_files(&run.join("history"))? {
            history.read_file(run, &path, FileKind::History)?;
        }
        let faults = run.join("faults.log");
        if faults.exists() {
            history.read_file(run, &faults, FileKind::Faults)?;
        }
        history.faults.sort_by_key(|f| f.mono);
        history.claim_index = HashMap::new();
        Ok(history)
    }

    /// Lines read, malformed ones included, over all files.
    pub(crate) fn lines(&self) -> u64 {
        self.files.iter().map(|f| f.lines).sum()
    }

    /// Malformed lines skipped, over all files.
    pub(crate) fn malformed(&self) -> u64 {
        self.files.iter().map(|f| f.malformed).sum()
    }

    /// Reads one file line by line, without keeping its text.
    fn read_file(&mut self, run: &Path, path: &Path, kind: FileKind) -> io::Result<()> {
        let name = path.strip_prefix(run).unwrap_or(path);
        let mut stats = FileStats {
            name: name.display().to_string(),
            lines: 0,
            malformed: 0,
        };
        let mut reader = BufReader::with_capacity(1 << 16, File::open(path)?);
        let mut buf = Vec::with_capacity(256);
        loop {
            buf.clear();
            if reader.read_until(b'\n', &mut buf)? == 0 {
                break;
            }
            stats.lines += 1;
            // A line without its newline is the tail of an interrupted write: never trusted.
            let whole = buf.pop() == Some(b'\n');
            let parsed = whole
                && std::str::from_utf8(&buf).is_ok_and(|line| match kind {
                    FileKind::History => self.history_line(line).is_some(),
                    FileKind::Faults => self.fault_line(line).is_some(),
                });
            if !parsed {
                stats.malformed += 1;
            }
        }
        self.files.push(stats);
        Ok(())
    }

    /// Parses and records one history line; `None` if it is malformed.
    fn history_line(&mut self, line: &str) -> Option<()> {
        let (kind, rest) = line.split_once(' ')?;
        match kind {
            "acq" => self.acq_line(rest),
            "claim" | "rel" => self.claim_or_rel_line(kind == "claim", rest),
            "write" => self.write_line(rest),
            "read" => self.read_line(rest),
            "observe" => self.observe_line(rest),
            "campaign" => {
                let [proc, surface, key, mono] = fields(rest)?;
                Surface::parse(surface)?;
                num::<u64>(mono)?;
                let (proc, key) = (self.procs.intern(proc), self.keys.intern(key));
                self.campaigns.push((key, proc));
                Some(())
            }
            "clock" => {
                let [proc, offset, mono] = fields(rest)?;
                let (offset_ms, mono) = (num(offset)?, num(mono)?);
                let proc = self.procs.intern(proc);
                self.clocks.push(ClockSet {
                    proc,
                    offset_ms,
                    mono,
                });
                Some(())
            }
            _ => None,
        }
    }

    /// `acq <proc> <surface> <key> <token> <sent_mono> <acquired_mono> <wall>`.
    fn acq_line(&mut self, rest: &str) -> Option<()> {
        let [proc, surface, key, token, sent, acquired, wall] = fields(rest)?;
        let surface = Surface::parse(surface)?;
        let (token, sent_mono, acquired_mono, wall) =
            (num(token)?, num(sent)?, num(acquired)?, num(wall)?);
        if acquired_mono < sent_mono {
            return None;
        }
        let acq = Acq {
            proc: self.procs.intern(proc),
            surface,
            key: self.keys.intern(key),
            token,
            sent_mono,
            acquired_mono,
            wall,
        };
        self.acqs.push(acq);
        Some(())
    }

    /// `claim|rel <proc> <surface> <key> <token> <mono>`; claims fold into their tenure's span.
    fn claim_or_rel_line(&mut self, is_claim: bool, rest: &str) -> Option<()> {
        let [proc, surface, key, token, mono] = fields(rest)?;
        let surface = Surface::parse(surface)?;
        let (token, mono) = (num(token)?, num(mono)?);
        let (proc, key) = (self.procs.intern(proc), self.keys.intern(key));
        if !is_claim {
            self.rels.push(Rel {
                proc,
                surface,
                key,
                token,
                mono,
            });
            return Some(());
        }
        self.claim_lines += 1;
        let claims = &mut self.claims;
        let at = *self
            .claim_index
            .entry((proc, key, token))
            .or_insert_with(|| {
                claims.push(ClaimSpan {
                    proc,
                    surface,
                    key,
                    token,
                    first_mono: mono,
                    last_mono: mono,
                    count: 0,
                });
                claims.len() - 1
            });
        let span = &mut self.claims[at];
        span.first_mono = span.first_mono.min(mono);
        span.last_mono = span.last_mono.max(mono);
        span.count += 1;
        Some(())
    }

    /// `observe <proc> <surface> <key> <token> <leader> <mono>`; a vacancy is `0 -`.
    fn observe_line(&mut self, rest: &str) -> Option<()> {
        let [proc, surface, key, token, leader, mono] = fields(rest)?;
        let surface = Surface::parse(surface)?;
        let (token, mono): (u64, u64) = (num(token)?, num(mono)?);
        let leader = match (token, leader) {
            (0, "-") => None,
            (0, _) | (_, "-") => return None,
            (token, leader) => Some((token, self.procs.intern(leader))),
        };
        let observe = Observe {
            proc: self.procs.intern(proc),
            surface,
            key: self.keys.intern(key),
            leader,
            mono,
        };
        self.observes.push(observe);
        Some(())
    }

    /// `write <proc> <surface> <name> <token> <seq> <sent_mono> <done_mono> <outcome>`.
    fn write_line(&mut self, rest: &str) -> Option<()> {
        let [proc, surface, name, token, seq, sent, done, outcome] = fields(rest)?;
        let surface = Surface::parse(surface)?;
        let outcome = Outcome::parse(outcome)?;
        let (token, seq, sent_mono, done_mono) = (num(token)?, num(seq)?, num(sent)?, num(done)?);
        if done_mono < sent_mono {
            return None;
        }
        let write = Write {
            proc: self.procs.intern(proc),
            surface,
            name: self.names.intern(name),
            token,
            seq,
            sent_mono,
            done_mono,
            outcome,
        };
        self.writes.push(write);
        Some(())
    }

    /// `read <proc> <surface> <name> <token> <sent_mono> <done_mono> <value_token> <value_seq>`.
    fn read_line(&mut self, rest: &str) -> Option<()> {
        let [
            proc,
            surface,
            name,
            token,
            sent,
            done,
            value_token,
            value_seq,
        ] = fields(rest)?;
        let surface = Surface::parse(surface)?;
        let (token, sent_mono, done_mono) = (num(token)?, num(sent)?, num(done)?);
        let value = match (value_token, value_seq) {
            ("-", "-") => None,
            (value_token, value_seq) => Some((num(value_token)?, num(value_seq)?)),
        };
        if done_mono < sent_mono {
            return None;
        }
        let read = Read {
            proc: self.procs.intern(proc),
            surface,
            name: self.names.intern(name),
            token,
            sent_mono,
            done_mono,
            value,
        };
        self.reads.push(read);
        Some(())
    }

    /// `fault <mono> <wall> <kind> <target> <detail>`.
    fn fault_line(&mut self, line: &str) -> Option<()> {
        let rest = line.strip_prefix("fault ")?;
        let [mono, wall, kind, target, detail] = fields(rest)?;
        self.faults.push(Fault {
            mono: num(mono)?,
            wall: num(wall)?,
            kind: kind.to_owned(),
            target: target.to_owned(),
            detail: detail.to_owned(),
        });
        Some(())
    }
}

/// The `*.log` files directly in `dir`, sorted by name.
fn history_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "log") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Exactly `N` non-empty fields separated by single spaces.
fn fields<const N: usize>(rest: &str) -> Option<[&str; N]> {
    let mut out = [""; N];
    let mut parts = rest.split(' ');
    for slot in &mut out {
        *slot = parts.next().filter(|p| !p.is_empty())?;
    }
    parts.next().is_none().then_some(out)
}

/// A number field; `None` if it does not parse.
fn num<T: FromStr>(field: &str) -> Option<T> {
    field.parse().ok()
}

/// A run directory under the system temp directory for tests, removed on drop.
#[cfg(test)]
pub(crate) struct TempRun {
    /// The run directory.
    pub(crate) dir: PathBuf,
}

#[cfg(test)]
impl TempRun {
    /// A fresh, empty run directory with its `history/` folder.
    pub(crate) fn new(tag: &str) -> TempRun {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("xtask-chaos-{tag}-{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(name);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("history")).expect("create the test run directory");
        TempRun { dir }
    }

    /// Writes `history/<proc>.log` with `lines`, each followed by a newline.
    pub(crate) fn log<S: AsRef<str>>(&self, proc: &str, lines: &[S]) -> &TempRun {
        let path = self.dir.join("history").join(format!("{proc}.log"));
        fs::write(path, lines_text(lines)).expect("write a history file");
        self
    }

    /// Writes `history/<proc>.log` byte for byte.
    pub(crate) fn raw(&self, proc: &str, bytes: &[u8]) -> &TempRun {
        let path = self.dir.join("history").join(format!("{proc}.log"));
        fs::write(path, bytes).expect("write a history file");
        self
    }

    /// Writes `faults.log` with `lines`.
    pub(crate) fn faults<S: AsRef<str>>(&self, lines: &[S]) -> &TempRun {
        fs::write(self.dir.join("faults.log"), lines_text(lines)).expect("write faults.log");
        self
    }

    /// Parses the directory.
    pub(crate) fn load(&self) -> History {
        History::load(&self.dir).expect("load the test run directory")
    }
}

/// `lines`, each followed by a newline.
#[cfg(test)]
fn lines_text<S: AsRef<str>>(lines: &[S]) -> String {
    lines.iter().map(|l| format!("{}\n", l.as_ref())).collect()
}

#[cfg(test)]
impl Drop for TempRun {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_kind_is_parsed() {
        let run = TempRun::new("parse");
        run.log(
            "fl1.0",
            &[
                "acq fl1.0 lease-dynamo dynamo:t/a/b 7 100 150 1700000000000",
                "claim fl1.0 lease-dynamo dynamo:t/a/b 7 200",
                "write fl1.0 lease-dynamo dynamo:t/v/x 7 1 210 260 ok",
                "read fl1.0 lease-dynamo dynamo:t/v/x 7 270 280 7 1",
                "read fl1.0 lease-dynamo dynamo:t/v/y 7 290 295 - -",
                "clock fl1.0 -1500 300",
                "rel fl1.0 lease-dynamo dynamo:t/a/b 7 400",
            ],
        );
        run.faults(&["fault 90 1699999999990 clock-step fl1.0 -1500ms,beyond"]);
        let h = run.load();
        let (p, k) = (h.procs.get("fl1.0"), h.keys.get("dynamo:t/a/b"));
        let (p, k) = (p.expect("proc"), k.expect("key"));
        let x = h.names.get("dynamo:t/v/x").expect("name");
        assert_eq!(
            h.acqs,
            [Acq {
                proc: p,
                surface: Surface::LeaseDynamo,
                key: k,
                token: 7,
                sent_mono: 100,
                acquired_mono: 150,
                wall: 1_700_000_000_000
            }]
        );
        assert_eq!(
            (h.claims.len(), h.claim_lines, h.claims[0].first_mono),
            (1, 1, 200)
        );
        assert_eq!(h.writes[0].outcome, Outcome::Ok);
        assert_eq!(
            (h.writes[0].name, h.writes[0].seq, h.writes[0].done_mono),
            (x, 1, 260)
        );
        assert_eq!(h.reads[0].value, Some((7, 1)));
        assert_eq!(h.reads[1].value, None);
        assert_eq!(
            h.clocks,
            [ClockSet {
                proc: p,
                offset_ms: -1500,
                mono: 300
            }]
        );
        assert_eq!(h.rels[0].mono, 400);
        assert_eq!(
            h.faults[0].to_string(),
            "fault 90 1699999999990 clock-step fl1.0 -1500ms,beyond"
        );
        assert_eq!((h.lines(), h.malformed()), (8, 0));
    }

    #[test]
    fn claims_of_one_tenure_fold_into_one_span() {
        let run = TempRun::new("fold");
        run.log(
            "a",
            &[
                "claim a fleet-file dir:u1 3 50",
                "claim a fleet-file dir:u1 3 10",
                "claim a fleet-file dir:u1 4 60",
                "claim a fleet-file dir:u1 3 90",
            ],
        );
        let h = run.load();
        assert_eq!(h.claim_lines, 4);
        let spans: Vec<_> = h
            .claims
            .iter()
            .map(|c| (c.token, c.first_mono, c.last_mono, c.count))
            .collect();
        assert_eq!(spans, [(3, 10, 90, 3), (4, 60, 60, 1)]);
    }

    #[test]
    fn malformed_and_truncated_lines_are_counted_per_file_and_skipped() {
        let run = TempRun::new("malformed");
        run.log(
            "good",
            &[
                "claim good run-file file:/l 1 10",
                "claim good run-file file:/l 1 20",
            ],
        );
        let bad: [&[u8]; 13] = [
            b"claim b run-file file:/l 1 10\n",    // fine
            b"claim b run-file file:/l 1\n",       // too few fields
            b"claim b run-file file:/l 1 10 11\n", // too many fields
            b"claim b run-file file:/l one 10\n",  // non-numeric token
            b"claim b  run-file file:/l 1 10\n",   // two spaces: an empty field
            b"claim b run-nfs file:/l 1 10\n",     // unknown surface
            b"hold b run-file file:/l 1 10\n",     // unknown line kind
            b"acq b run-file file:/l 2 50 40 0\n", // acquired before sent
            b"write b run-file n 1 1 5 6 maybe\n", // unknown outcome
            b"read b run-file n 1 5 6 - 3\n",      // half a value
            b"\n",                                 // empty
            b"claim b run-file file:/l \xff 10\n", // not UTF-8
            b"claim b run-file file:/l 1 30",      // truncated: no newline
        ];
        run.raw("b", &bad.concat());
        run.faults(&[
            "fault 1 2 sigkill b -",
            "fault x 2 sigkill b -",
            "claim b run-file k 1 1",
        ]);
        let h = run.load();
        let stats: Vec<_> = h
            .files
            .iter()
            .map(|f| (f.name.as_str(), f.lines, f.malformed))
            .collect();
        assert_eq!(
            stats,
            [
                ("history/b.log", 13, 12),
                ("history/good.log", 2, 0),
                ("faults.log", 3, 2)
            ]
        );
        assert_eq!((h.lines(), h.malformed()), (18, 14));
        assert_eq!(h.claim_lines, 3);
        assert!(h.acqs.is_empty() && h.writes.is_empty() && h.reads.is_empty());
        assert_eq!(h.faults.len(), 1);
        assert_eq!(h.procs.count(), 2, "a malformed line interns nothing");
    }

    #[test]
    fn faults_are_sorted_and_counted_by_kind_and_a_missing_faults_log_is_none() {
        let run = TempRun::new("faults");
        run.faults(&[
            "fault 300 3 sigstop fl1.2 2000",
            "fault 100 1 sigkill fl1.1 -",
            "fault 200 2 sigkill run-d0.4 -",
        ]);
        let h = run.load();
        assert_eq!(
            h.faults.iter().map(|f| f.mono).collect::<Vec<_>>(),
            [100, 200, 300]
        );
        let by_kind: Vec<_> = faults_by_kind(&h.faults).into_iter().collect();
        assert_eq!(by_kind, [("sigkill", 2), ("sigstop", 1)]);

        let empty = TempRun::new("nofaults");
        assert!(empty.load().faults.is_empty());
        assert!(History::load(&empty.dir.join("absent")).is_err());
    }
}

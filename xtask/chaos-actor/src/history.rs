//! The history file of one actor process: the line formats of `docs/chaos.md`.
//!
//! Each line is formatted into one buffer and appended with one `write(2)` on a file opened with
//! `O_APPEND`, so a process killed at any point leaves only whole lines, and the clock watcher
//! thread and the unit tasks of one process never interleave within a line.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Which surface of the project a line speaks for (`<surface>` in `docs/chaos.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Surface {
    /// A `lease run --file` child.
    RunFile,
    /// A `lease run --dynamo` child.
    RunDynamo,
    /// A `FileLock` in kernel mode.
    FileLockKernel,
    /// A `FileLock` in heartbeat-only mode.
    FileLockHeartbeat,
    /// A `LeaseGuard` over `DynamoLeases`.
    LeaseDynamo,
    /// A fleet worker on a `DirectoryStore`.
    FleetFile,
    /// A fleet worker on `DynamoLeases`.
    FleetDynamo,
    /// A leader election (`Election`) on a `DirectoryStore`.
    ElectionFile,
    /// A leader election (`Election`) on `DynamoLeases`.
    ElectionDynamo,
    /// A `lease run --postgres` child.
    RunPostgres,
    /// A `LeaseGuard` over `PgLeases`.
    LeasePostgres,
    /// A fleet worker on `PgLeases`.
    FleetPostgres,
    /// A leader election (`Election`) on `PgLeases`.
    ElectionPostgres,
    /// A `lease run --redis` child.
    RunRedis,
    /// A `LeaseGuard` over `RedisLeases`.
    LeaseRedis,
    /// A fleet worker on `RedisLeases`.
    FleetRedis,
    /// A leader election (`Election`) on `RedisLeases`.
    ElectionRedis,
}

impl Surface {
    /// The name history lines carry.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::RunFile => "run-file",
            Self::RunDynamo => "run-dynamo",
            Self::FileLockKernel => "filelock-kernel",
            Self::FileLockHeartbeat => "filelock-heartbeat",
            Self::LeaseDynamo => "lease-dynamo",
            Self::FleetFile => "fleet-file",
            Self::FleetDynamo => "fleet-dynamo",
            Self::ElectionFile => "election-file",
            Self::ElectionDynamo => "election-dynamo",
            Self::RunPostgres => "run-postgres",
            Self::LeasePostgres => "lease-postgres",
            Self::FleetPostgres => "fleet-postgres",
            Self::ElectionPostgres => "election-postgres",
            Self::RunRedis => "run-redis",
            Self::LeaseRedis => "lease-redis",
            Self::FleetRedis => "fleet-redis",
            Self::ElectionRedis => "election-redis",
        }
    }
}

/// What became of a fenced write (`<outcome>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Accepted.
    Ok,
    /// Fenced out by a newer token.
    Refused,
    /// Failed otherwise: it may or may not have landed.
    Error,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Refused => "refused",
            Self::Error => "error",
        }
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the scale every process on the host (and the orchestrator)
/// shares. The same clock `std::time::Instant` reads on Linux, so an instant read here before a
/// lease check is no later than the instant the check compares with its deadline.
pub(crate) fn mono_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
        let nanos = u64::try_from(t.tv_nsec()).unwrap_or(0);
        secs.saturating_mul(1_000_000_000).saturating_add(nanos)
    })
}

/// `at` in Unix milliseconds (0 before the epoch).
pub(crate) fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A field as lines carry it: printable ASCII without spaces. Anything else (a space in a
/// path, say) is percent-encoded, the same way in every process, so keys still compare.
pub(crate) fn field(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_graphic() && byte != b'%' {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// The value a fenced write stores: `<proc>:<token>:<seq>`.
pub(crate) fn value(proc_id: &str, token: u64, seq: u64) -> String {
    format!("{}:{token}:{seq}", field(proc_id))
}

/// The `(token, seq)` of a value written by [`value`]; `None` for anything else.
pub(crate) fn parse_value(bytes: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut parts = text.rsplitn(3, ':');
    let seq = parts.next()?.parse().ok()?;
    let token = parts.next()?.parse().ok()?;
    parts.next()?;
    Some((token, seq))
}

/// One process's history file, `<run>/history/<proc>.log`.
#[derive(Debug)]
pub(crate) struct History {
    file: File,
    proc_id: String,
}

impl History {
    /// Opens (creating the `history` directory and the file if needed) for appending.
    pub(crate) fn open(run: &Path, proc_id: &str) -> std::io::Result<Self> {
        let dir = run.join("history");
        std::fs::create_dir_all(&dir)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("{proc_id}.log")))?;
        Ok(Self {
            file,
            proc_id: field(proc_id),
        })
    }

    /// This process's id, as lines carry it.
    pub(crate) fn proc_id(&self) -> &str {
        &self.proc_id
    }

    /// `acq <proc> <surface> <key> <token> <sent_mono> <acquired_mono> <wall>`.
    pub(crate) fn acq(&self, s: Surface, key: &str, token: u64, sent: u64, got: u64, wall: u64) {
        let key = field(key);
        self.line(
            "acq",
            format_args!("{} {key} {token} {sent} {got} {wall}", s.as_str()),
        );
    }

    /// `claim <proc> <surface> <key> <token> <mono>`: write it only after the check at `mono`
    /// passed.
    pub(crate) fn claim(&self, s: Surface, key: &str, token: u64, mono: u64) {
        let key = field(key);
        self.line("claim", format_args!("{} {key} {token} {mono}", s.as_str()));
    }

    /// `rel <proc> <surface> <key> <token> <mono>`.
    pub(crate) fn rel(&self, s: Surface, key: &str, token: u64, mono: u64) {
        let key = field(key);
        self.line("rel", format_args!("{} {key} {token} {mono}", s.as_str()));
    }

    /// `write <proc> <surface> <name> <token> <seq> <sent_mono> <done_mono> <outcome>`.
    pub(crate) fn write(
        &self,
        s: Surface,
        name: &str,
        token: u64,
        seq: u64,
        span: (u64, u64),
        o: Outcome,
    ) {
        let (name, (sent, done)) = (field(name), span);
        let o = o.as_str();
        self.line(
            "write",
            format_args!("{} {name} {token} {seq} {sent} {done} {o}", s.as_str()),
        );
    }

    /// `read <proc> <surface> <name> <token> <sent_mono> <done_mono> <value_token> <value_seq>`
    /// (`- -` for no value, or one this tool did not write).
    pub(crate) fn read(
        &self,
        s: Surface,
        name: &str,
        token: u64,
        span: (u64, u64),
        seen: Option<(u64, u64)>,
    ) {
        let (name, (sent, done)) = (field(name), span);
        let seen = seen.map_or_else(|| "- -".to_owned(), |(t, q)| format!("{t} {q}"));
        self.line(
            "read",
            format_args!("{} {name} {token} {sent} {done} {seen}", s.as_str()),
        );
    }

    /// `campaign <proc> <surface> <key> <mono>`: about to stand for election on `key`.
    pub(crate) fn campaign(&self, s: Surface, key: &str, mono: u64) {
        let key = field(key);
        self.line("campaign", format_args!("{} {key} {mono}", s.as_str()));
    }

    /// `observe <proc> <surface> <key> <token> <leader> <mono>`: an observer reported the
    /// leader `leader` (the value it published) with fencing `token` at `mono`; a vacancy is
    /// token 0 and leader `-`.
    pub(crate) fn observe(&self, s: Surface, key: &str, leader: Option<(u64, &str)>, mono: u64) {
        let key = field(key);
        let (token, leader) = leader.map_or((0, "-".to_owned()), |(t, l)| (t, field(l)));
        self.line(
            "observe",
            format_args!("{} {key} {token} {leader} {mono}", s.as_str()),
        );
    }

    /// `clock <proc> <offset_ms> <mono>`.
    pub(crate) fn clock(&self, offset_ms: i64, mono: u64) {
        let mut line = format!("clock {} {offset_ms} {mono}", self.proc_id);
        line.push('\n');
        self.append(&line);
    }

    /// `<kind> <proc> <rest>`: `rest` starts with the surface.
    fn line(&self, kind: &str, rest: std::fmt::Arguments<'_>) {
        let mut line = String::with_capacity(128);
        let _ = writeln!(line, "{kind} {} {rest}", self.proc_id);
        self.append(&line);
    }

    /// One `write(2)` of a whole line; a failure is reported, never fatal (the history is
    /// evidence, and a checker counts what is missing).
    fn append(&self, line: &str) {
        match (&self.file).write(line.as_bytes()) {
            Ok(n) if n == line.len() => {}
            Ok(n) => eprintln!("history: short write ({n} of {} bytes)", line.len()),
            Err(error) => eprintln!("history: write failed: {error}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_foreign_values_are_none() {
        assert_eq!(
            parse_value(value("fl2.17", 42, 7).as_bytes()),
            Some((42, 7))
        );
        assert_eq!(parse_value(b"a:b:1:2"), Some((1, 2)));
        assert_eq!(parse_value(b"12"), None);
        assert_eq!(parse_value(b"x:1:y"), None);
        assert_eq!(parse_value(&[0xff, b':', b'1', b':', b'2']), None);
    }

    #[test]
    fn fields_have_no_spaces() {
        assert_eq!(field("file:/tmp/a b/k"), "file:/tmp/a%20b/k");
        assert_eq!(field("100%"), "100%25");
        assert_eq!(field("dynamo:t/k1/LOCK"), "dynamo:t/k1/LOCK");
    }

    #[test]
    fn lines_are_whole_and_in_the_documented_order() {
        let dir = std::env::temp_dir().join(format!("chaos-actor-test-{}", std::process::id()));
        let history = History::open(&dir, "p.1").expect("open");
        history.acq(Surface::FileLockKernel, "file:/x", 3, 10, 20, 30);
        history.claim(Surface::FileLockKernel, "file:/x", 3, 25);
        history.write(
            Surface::LeaseDynamo,
            "dynamo:t/value-k",
            3,
            1,
            (40, 50),
            Outcome::Refused,
        );
        history.read(Surface::FleetFile, "fleet-file:f/u1", 3, (60, 60), None);
        history.clock(-1500, 70);
        let text = std::fs::read_to_string(dir.join("history/p.1.log")).expect("read");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            text,
            "acq p.1 filelock-kernel file:/x 3 10 20 30\n\
             claim p.1 filelock-kernel file:/x 3 25\n\
             write p.1 lease-dynamo dynamo:t/value-k 3 1 40 50 refused\n\
             read p.1 fleet-file fleet-file:f/u1 3 60 60 - -\n\
             clock p.1 -1500 70\n"
        );
    }
}

//! Who this process is, and whether the process named by a record is provably gone.

use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;

/// This process as records describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) pid: u32,
    pub(crate) host: String,
    pub(crate) pid_ns: Option<u64>,
    pub(crate) boot_id: Option<String>,
    pub(crate) start_time: Option<u64>,
}

/// The current process's identity, cached per pid (a forked child recomputes it).
pub(crate) fn current() -> Identity {
    static CACHE: Mutex<Option<Identity>> = Mutex::new(None);
    let pid = std::process::id();
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(id) = cache.as_ref().filter(|id| id.pid == pid) {
        return id.clone();
    }
    let id = Identity {
        pid,
        host: nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default(),
        pid_ns: std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino()),
        boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .map(|s| s.trim().to_owned()),
        start_time: start_time_of("self"),
    };
    *cache = Some(id.clone());
    id
}

/// Field 22 of `/proc/<pid>/stat`: the process start time in clock ticks since boot.
pub(crate) fn start_time_of(pid: &str) -> Option<u64> {
    proc_stat(pid).map(|(_, start)| start)
}

/// Fields 3 (state) and 22 (start time) of `/proc/<pid>/stat`.
fn proc_stat(pid: &str) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

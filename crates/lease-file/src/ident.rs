//! Who this process is, as its records describe it.

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
        host: crate::sys::host_name(),
        pid_ns: crate::sys::pid_namespace(),
        boot_id: crate::sys::boot_id(),
        start_time: crate::sys::start_time(),
    };
    *cache = Some(id.clone());
    id
}

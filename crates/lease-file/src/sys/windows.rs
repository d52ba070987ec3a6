//! Windows: std's `Instant` for every deadline, no identities, no permission bits (see the
//! [platforms](crate::platforms) page, *Windows*).

use std::time::SystemTime;

/// None: the tenure's second deadline is not kept. lease-core's `SystemClock` reads std's
/// `Instant` there, `QueryPerformanceCounter`, which counts the time the host slept.
pub(crate) fn suspend_clock_ns() -> Option<u64> {
    None
}

/// None: the check that a temporary directory was born after it is skipped. It guards against
/// another user swapping in an older directory through the store directory's permission bits,
/// which Windows has not (its access control list keeps other users out).
pub(crate) fn birth_floor() -> Option<SystemTime> {
    None
}

/// No PID namespaces.
pub(crate) fn pid_namespace() -> Option<u64> {
    None
}

/// No boot identity readable without `unsafe` (see [`host_instance`]).
pub(crate) fn boot_id() -> Option<String> {
    None
}

/// No process start time readable without `unsafe`.
pub(crate) fn start_time() -> Option<u64> {
    None
}

/// No boot identity, so no scale shared with the other processes on this host: contenders time
/// a holder's duration from when they first saw its state, as on macOS and FreeBSD.
pub(crate) fn host_instance() -> Option<String> {
    None
}

/// This host's name (`COMPUTERNAME`, which Windows sets for every process), or empty.
pub(crate) fn host_name() -> String {
    std::env::var("COMPUTERNAME").unwrap_or_default()
}

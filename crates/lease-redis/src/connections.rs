//! The manager's connections to the server: each call takes an idle one or opens its own, and
//! gives it back when its call was answered (at most [`MAX_IDLE`] are kept). Below `call`, which
//! sends the requests, and `leases`, which holds them.

use redis::aio::MultiplexedConnection;

/// A connection and what it was opened to.
pub(crate) struct Live {
    pub(crate) connection: MultiplexedConnection,
    /// `run_id/master_replid` of the server it reached, read once when it was opened
    /// (empty when the recreation grace is off: nothing reads it then).
    pub(crate) incarnation: String,
}

/// Idle connections kept for the next calls, at most.
const MAX_IDLE: usize = 16;

/// The manager's connections: each call takes one for itself (so a call whose reply is late
/// never holds up another, and a connection whose call timed out is closed, never handed on)
/// and gives it back when its call was answered.
#[derive(Default)]
pub(crate) struct Connections {
    idle: std::sync::Mutex<Vec<Live>>,
    pub(crate) opened: std::sync::atomic::AtomicU64,
}

impl Connections {
    pub(crate) fn take(&self) -> Option<Live> {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
    }

    /// Closes every idle connection: one failed in transit or reached a server that is no
    /// longer the primary (or no longer owns the slot), and the others reached the same one.
    pub(crate) fn forget_idle(&self) {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }

    pub(crate) fn give_back(&self, live: Live) {
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(live);
        }
    }
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("opened", &self.opened)
            .finish_non_exhaustive()
    }
}

//! A wall clock the orchestrator can step: `<run>/clock/<proc>` holds the offset.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use lease_core::{BoxFuture, Clock, SystemClock};

use crate::history::{History, mono_ns};

/// How often the watcher reads the offset file.
const POLL: Duration = Duration::from_millis(20);

/// A [`Clock`] whose wall time is the system's plus an offset in milliseconds; its monotonic
/// time and sleeps are the system's, untouched. So a step moves what the stores compare across
/// processes (DynamoDB expiry) and never a holder's own deadline.
#[derive(Debug, Default)]
pub(crate) struct SteppableClock {
    offset_ms: AtomicI64,
}

impl SteppableClock {
    /// A clock whose offset follows `<run>/clock/<proc>` (absent: 0), read once now and then by
    /// a thread every 20 ms. Every change is logged as a `clock` line, stamped after the offset
    /// took effect.
    pub(crate) fn watching(run: PathBuf, proc_id: &str, history: Arc<History>) -> Arc<Self> {
        let clock = Arc::new(Self::default());
        let path = run.join("clock").join(proc_id);
        let watched = clock.clone();
        watched.follow(&path, &history);
        let spawned = std::thread::Builder::new()
            .name("clock-watch".to_owned())
            .spawn(move || {
                loop {
                    std::thread::sleep(POLL);
                    watched.follow(&path, &history);
                }
            });
        if let Err(error) = spawned {
            eprintln!("clock: cannot watch {proc_id}'s offset file: {error}");
        }
        clock
    }

    /// Applies the offset in `path` if it changed. A file that does not parse (being written,
    /// or garbage) is ignored until it does.
    fn follow(&self, path: &std::path::Path, history: &History) {
        let offset = match std::fs::read_to_string(path) {
            Ok(text) => match text.trim().parse::<i64>() {
                Ok(offset) => offset,
                Err(_) => return,
            },
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => 0,
            Err(_) => return,
        };
        if self.offset_ms.swap(offset, Ordering::SeqCst) != offset {
            history.clock(offset, mono_ns());
        }
    }

    /// The offset now applied, in milliseconds.
    pub(crate) fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::SeqCst)
    }
}

impl Clock for SteppableClock {
    fn now(&self) -> SystemTime {
        let real = SystemTime::now();
        let offset = self.offset_ms();
        let step = Duration::from_millis(offset.unsigned_abs());
        let stepped = if offset >= 0 {
            real.checked_add(step)
        } else {
            real.checked_sub(step)
        };
        stepped.unwrap_or(real)
    }

    fn monotonic(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        SystemClock.sleep(duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_moves_wall_time_only() {
        let clock = SteppableClock::default();
        clock.offset_ms.store(-60_000, Ordering::SeqCst);
        let behind = SystemTime::now()
            .duration_since(clock.now())
            .expect("the stepped clock is behind");
        assert!(behind >= Duration::from_secs(59), "{behind:?}");
        let before = Instant::now();
        assert!(clock.monotonic() >= before);
    }
}

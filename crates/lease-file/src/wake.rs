//! Waiters woken by the kernel: a thread blocked in `flock` on a lock directory whose holder
//! holds the kernel lock returns the moment the holder releases or dies.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::state::{KeyDir, Kind, State};

/// One blocked `flock`, shared by every waiter on the same lock directory.
#[derive(Debug, Default)]
struct Signal {
    state: Mutex<(bool, Vec<Waker>)>,
}

impl Signal {
    fn fire(&self) {
        let wakers = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.0 = true;
            std::mem::take(&mut state.1)
        };
        for waker in wakers {
            waker.wake();
        }
    }
}

/// Completes when the signal fires.
#[derive(Debug)]
pub(crate) struct Woken(Arc<Signal>);

impl Future for Woken {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.0 {
            return Poll::Ready(());
        }
        if !state.1.iter().any(|w| w.will_wake(cx.waker())) {
            state.1.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// The store's blocked `flock`s, one per lock directory at most, each with the process whose
/// thread blocks: in a `fork`ed child that thread does not exist (and its descriptor is the
/// parent's), so the child starts its own.
#[derive(Debug, Default)]
pub(crate) struct Waiters(Arc<Mutex<HashMap<PathBuf, Started>>>);

/// A blocked `flock`'s signal, with the process whose thread blocks in it.
type Started = (u32, Arc<Signal>);

impl Waiters {
    /// A future woken when the holder of the lock at `path` lets go, if that holder holds the
    /// kernel lock on it; `None` when it does not (or the lock is free, or unreadable): then
    /// only polling can tell.
    pub(crate) fn when_released(
        &self,
        base: &Arc<crate::fsio::Base>,
        name: &std::ffi::OsStr,
    ) -> Option<Woken> {
        let path = &base.join(name);
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let pid = std::process::id();
        match map.get(path) {
            Some((started_in, signal)) if *started_in == pid => return Some(Woken(signal.clone())),
            _ => {}
        }
        let kd = KeyDir::open(base, name, Kind::Lease, None).ok()??;
        let found = kd.state().ok()?;
        let State::Held(held) = found.state else {
            return None;
        };
        if held.kernel != Some(kd.id()) {
            return None;
        }
        let signal = Arc::new(Signal::default());
        map.insert(path.to_owned(), (pid, signal.clone()));
        let waiters = self.0.clone();
        let key = path.to_owned();
        let fired = signal.clone();
        let spawned = std::thread::Builder::new()
            .name("lease-file-waiter".into())
            .spawn(move || {
                let mut kd = kd;
                // Granted when the holder releases or dies; let go at once, the waiter's next
                // attempt takes it for real.
                let _ = kd.lock_blocking();
                drop(kd);
                waiters
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&key);
                fired.fire();
            });
        if spawned.is_err() {
            map.remove(path);
            return None;
        }
        Some(Woken(signal))
    }
}

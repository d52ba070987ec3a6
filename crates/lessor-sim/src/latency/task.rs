//! The executor's unit: one future with its own waker, polled only when that waker fired.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

/// Set by the future's waker; cleared when the executor polls it.
#[derive(Debug)]
struct Ready(AtomicBool);

impl Wake for Ready {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

/// A future of the simulation (a worker's `run`, its application, a foreign holder).
pub(crate) struct Task<T> {
    future: Pin<Box<dyn Future<Output = T>>>,
    ready: Arc<Ready>,
    waker: Waker,
}

impl<T> fmt::Debug for Task<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Task")
            .field("ready", &self.is_ready())
            .finish_non_exhaustive()
    }
}

impl<T> Task<T> {
    /// A task, ready to be polled a first time.
    pub(crate) fn new(future: impl Future<Output = T> + 'static) -> Self {
        let ready = Arc::new(Ready(AtomicBool::new(true)));
        Self {
            future: Box::pin(future),
            waker: Waker::from(ready.clone()),
            ready,
        }
    }

    /// Whether its waker fired since it was last polled.
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.0.load(Ordering::Acquire)
    }

    /// Polls it once.
    pub(crate) fn poll(&mut self) -> Poll<T> {
        self.ready.0.store(false, Ordering::Release);
        let mut cx = Context::from_waker(&self.waker);
        self.future.as_mut().poll(&mut cx)
    }
}

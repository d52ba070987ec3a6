//! A minimal executor: this crate's blocking guards and its own tests drive the contract's
//! runtime-free futures on the current thread with it. Not public: async users bring their
//! runtime, blocking users get a blocking guard.

use std::future::Future;
#[cfg(any(test, feature = "conformance"))]
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::Instant;

use crate::{BoxFuture, Clock};

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        thread::park();
    }
}

#[cfg(any(test, feature = "conformance"))]
pub(crate) fn join_all<F: Future + Unpin>(futures: Vec<F>) -> JoinAll<F> {
    JoinAll {
        slots: futures.into_iter().map(Slot::Pending).collect(),
    }
}

#[cfg(any(test, feature = "conformance"))]
enum Slot<F: Future> {
    Pending(F),
    Done(Option<F::Output>),
}

/// The future returned by [`join_all`].
#[must_use = "futures do nothing unless polled"]
#[cfg(any(test, feature = "conformance"))]
pub(crate) struct JoinAll<F: Future> {
    slots: Vec<Slot<F>>,
}

#[cfg(any(test, feature = "conformance"))]
impl<F: Future> std::fmt::Debug for JoinAll<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinAll")
            .field("len", &self.slots.len())
            .finish()
    }
}

// The futures are boxed or otherwise `Unpin`, and outputs are only moved out, never pinned.
#[cfg(any(test, feature = "conformance"))]
impl<F: Future> Unpin for JoinAll<F> {}

#[cfg(any(test, feature = "conformance"))]
impl<F: Future + Unpin> Future for JoinAll<F> {
    type Output = Vec<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut all_done = true;
        for slot in &mut this.slots {
            if let Slot::Pending(future) = slot {
                match Pin::new(future).poll(cx) {
                    Poll::Ready(output) => *slot = Slot::Done(Some(output)),
                    Poll::Pending => all_done = false,
                }
            }
        }
        if !all_done {
            return Poll::Pending;
        }
        let outputs = this
            .slots
            .iter_mut()
            .filter_map(|slot| match slot {
                Slot::Done(output) => output.take(),
                Slot::Pending(_) => None,
            })
            .collect();
        Poll::Ready(outputs)
    }
}

pub(crate) fn sleep_until(clock: &dyn Clock, deadline: Instant) -> BoxFuture<'static, ()> {
    clock.sleep(deadline.saturating_duration_since(clock.monotonic()))
}

//! What a backend that sees every write hands its [`RecordWatch`]es: a change counter with wakers.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::sync::lock;
use crate::{BoxFuture, RecordWatch};

/// A change counter with wakers: what a backend that sees every write of its store (memory, or
/// a thread reading kernel notifications) hands its watches. [`notify`](Self::notify) on every
/// change; [`watch`](Self::watch) makes a [`RecordWatch`] armed at the current count.
///
/// ```
/// use lease_core::backend::Changes;
/// use pollster::block_on;
///
/// let changes = Changes::new();
/// let mut watch = changes.watch();
/// changes.notify();
/// block_on(watch.next_change()); // completes at once: a change came after the watch was made
/// ```
#[derive(Clone, Default)]
pub struct Changes(Arc<Mutex<Counter>>);

#[derive(Default)]
struct Counter {
    count: u64,
    wakers: Vec<Waker>,
}

impl fmt::Debug for Changes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Changes")
            .field("count", &lock(&self.0).count)
            .finish_non_exhaustive()
    }
}

impl Changes {
    /// A counter at zero, with no watch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts a change and wakes every watch waiting for one.
    pub fn notify(&self) {
        let wakers = {
            let mut counter = lock(&self.0);
            counter.count = counter.count.wrapping_add(1);
            std::mem::take(&mut counter.wakers)
        };
        for waker in wakers {
            waker.wake();
        }
    }

    /// A watch armed at the current count: its first
    /// [`next_change`](RecordWatch::next_change) completes after the next
    /// [`notify`](Self::notify), or at once if one came since.
    pub fn watch(&self) -> Box<dyn RecordWatch> {
        let seen = lock(&self.0).count;
        Box::new(ChangesWatch {
            changes: self.clone(),
            seen,
        })
    }
}

#[derive(Debug)]
struct ChangesWatch {
    changes: Changes,
    seen: u64,
}

impl RecordWatch for ChangesWatch {
    fn next_change(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(NextChange { watch: self })
    }
}

struct NextChange<'a> {
    watch: &'a mut ChangesWatch,
}

impl Future for NextChange<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let watch = &mut *self.watch;
        let mut counter = lock(&watch.changes.0);
        if counter.count != watch.seen {
            watch.seen = counter.count;
            return Poll::Ready(());
        }
        if !counter.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            counter.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

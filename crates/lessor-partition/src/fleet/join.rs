//! Polling several futures at once on the task that awaits them: the worker's batches of takes
//! and reads, without a runtime.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

/// Awaits every future of `futures` concurrently; their outputs in the same order.
pub(crate) async fn join_all<F: Future + Unpin>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pending: Vec<Option<F>> = futures.into_iter().map(Some).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut done = true;
        for (slot, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            let Some(future) = slot.as_mut() else {
                continue;
            };
            match Pin::new(future).poll(cx) {
                Poll::Ready(out) => {
                    *output = Some(out);
                    *slot = None;
                }
                Poll::Pending => done = false,
            }
        }
        if done {
            Poll::Ready(outputs.iter_mut().filter_map(Option::take).collect())
        } else {
            Poll::Pending
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_in_order_whatever_order_they_finish_in() {
        let mut polls = 0;
        let slow = Box::pin(poll_fn(move |cx| {
            polls += 1;
            if polls < 3 {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(1)
            }
        })) as Pin<Box<dyn Future<Output = i32>>>;
        let quick = Box::pin(std::future::ready(2)) as Pin<Box<dyn Future<Output = i32>>>;
        assert_eq!(pollster::block_on(join_all(vec![slow, quick])), [1, 2]);
        let none: Vec<std::future::Ready<u8>> = Vec::new();
        assert!(pollster::block_on(join_all(none)).is_empty());
    }
}

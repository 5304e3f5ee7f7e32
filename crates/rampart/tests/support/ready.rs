//! Polling a future that must finish at once: how the allocation tests run a success path
//! without a runtime's own allocations in the count.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// Polls `future` once with a no-op waker and returns its output.
///
/// # Panics
///
/// When the future is still pending: the success path under test must not wait.
pub(crate) fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the success path must complete on its first poll"),
    }
}

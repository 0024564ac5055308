use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use super::ManualClock;

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

/// Run `fut` to completion on the current thread in virtual time: whenever it is
/// waiting and nothing woke it, `clock` jumps to the next sleeper's deadline.
///
/// # Panics
/// When `fut` waits with no sleeper left to wake it (a deadlock in the code under
/// test), or after 10 million polls (a livelock): both are bugs worth a loud failure.
pub fn block_on<F: Future>(clock: &ManualClock, fut: F) -> F::Output {
    let flag = Arc::new(Flag(AtomicBool::new(true)));
    let waker = Waker::from(Arc::clone(&flag));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    for _ in 0..10_000_000u32 {
        flag.0.store(false, Ordering::Release);
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        if flag.0.load(Ordering::Acquire) {
            continue;
        }
        match clock.next_deadline() {
            Some(t) => clock.advance_to(t),
            None => panic!("block_on: the future waits but nothing can wake it (deadlock)"),
        }
    }
    panic!("block_on: still running after 10 million polls (livelock)");
}

//! Connecting to something that may not be up yet: retry while the error is
//! temporary, give up at once when it is not.

use std::future::Future;

use drain_core::{Backoff, PortError};

/// Call `connect` until it succeeds or fails permanently. A temporary error (the
/// broker or store is down, refusing, not serving yet) is logged with `what` and
/// retried after `backoff`'s jittered delay for that attempt; a permanent one (a
/// credential, a missing queue, a port that speaks another protocol) is returned at
/// once: it needs someone to act. Give up sooner by dropping the future (in a
/// `select!` with a signal, say).
///
/// ```
/// # async fn demo() -> Result<(), drain_core::PortError> {
/// use std::time::Duration;
///
/// use drain_core::{Backoff, ErrorKind, PortError};
///
/// let mut attempts = 0;
/// let backoff = Backoff { initial: Duration::from_millis(1), max: Duration::from_millis(4) };
/// let answer = drain_runtime::retrying("reach the broker", backoff, || {
///     attempts += 1;
///     let up = attempts > 2;
///     async move { if up { Ok(42) } else { Err(PortError::new(ErrorKind::Connection, "refused")) } }
/// })
/// .await?;
/// assert_eq!((answer, attempts), (42, 3));
/// # Ok(())
/// # }
/// ```
pub async fn retrying<T, F, Fut>(what: &str, backoff: Backoff, mut connect: F) -> Result<T, PortError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, PortError>>,
{
    let mut attempt = 0u32;
    loop {
        attempt = attempt.saturating_add(1);
        match connect().await {
            Ok(v) => {
                if attempt > 1 {
                    tracing::info!("connected to {what} after {attempt} attempts");
                }
                return Ok(v);
            }
            Err(e) if e.is_temporary() => {
                // Drawn before the await: the thread's generator is not Send.
                let wait = backoff.delay(attempt - 1, &mut rand::rng());
                tracing::warn!(
                    attempt,
                    retry_in_s = wait.as_secs_f64(),
                    "cannot {what} yet ({e}); attempt {attempt} failed, retrying in {:.1} s",
                    wait.as_secs_f64()
                );
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(e),
        }
    }
}

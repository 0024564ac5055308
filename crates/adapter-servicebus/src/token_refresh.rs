//! Keeping a connection's CBS token valid (Service Bus): one loop for every
//! connection that put one, the source's and the submitter's. It is generic over how
//! a token is put ([`PutToken`]), so it is tested without a broker. (A delivery's
//! lock is renewed elsewhere: [`crate::renewal`].)
//!
//! A token is replaced [`sas::refresh_after`] its validity (5 minutes before a
//! one-hour token expires). A put the CBS node refuses is retried with jittered
//! [`RETRY`] delays while the old token is still valid; once it expired, the loop
//! gives up and its owner reconnects. A put that takes longer than its limit ends
//! the loop at once: the `$cbs` request/response links may be out of step then (a
//! late answer would be read as the answer to the next put), and only a new
//! connection recovers.

use std::time::Duration;

use async_trait::async_trait;
use drain_core::{ErrorKind, PortError};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

use crate::{error, sas};
use drain_core::Backoff;

/// Delays between attempts after a refused put: 1 s doubling to 30 s, jittered.
pub(crate) const RETRY: Backoff = Backoff { initial: Duration::from_secs(1), max: Duration::from_secs(30) };

/// Puts a fresh token on the broker.
#[async_trait]
pub(crate) trait PutToken: Send + 'static {
    /// Sign and put a fresh token; returns how long it is valid from now.
    async fn put_token(&mut self) -> Result<Duration, PortError>;

    /// Release what the putter holds (its links); called once, when refreshing stops.
    async fn close(self);
}

/// Replace the token, which is valid for `valid_for` from now, before it expires,
/// again and again. Returns only when the token could not be kept valid: the old
/// one expired while puts failed (retried with `retry` delays), or a put took longer
/// than `limit`. `what` names the endpoint in logs and errors.
pub(crate) async fn keep_fresh<P: PutToken>(
    put: &mut P,
    valid_for: Duration,
    retry: Backoff,
    limit: Duration,
    what: &str,
) -> PortError {
    let mut expires = Instant::now() + valid_for;
    loop {
        sleep(sas::refresh_after(expires.saturating_duration_since(Instant::now()))).await;
        let mut attempt = 0u32;
        loop {
            let err = match timeout(limit, put.put_token()).await {
                Ok(Ok(valid_for)) => {
                    expires = Instant::now() + valid_for;
                    tracing::debug!(endpoint = %what, valid_for_s = valid_for.as_secs(), "CBS token refreshed");
                    break;
                }
                Ok(Err(e)) => e,
                Err(_) => {
                    let e = error::timeout(what, "refreshing the CBS token", limit);
                    tracing::warn!(endpoint = %what, error = %e, "CBS token refresh timed out; reconnecting");
                    return e;
                }
            };
            let now = Instant::now();
            if now >= expires {
                tracing::warn!(endpoint = %what, error = %err, "CBS token expired before a new one was accepted; reconnecting");
                return err;
            }
            let delay = retry.delay(attempt, &mut rand::rng()).min(expires - now);
            tracing::warn!(
                endpoint = %what,
                error = %err,
                attempt,
                retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                "CBS token refresh failed; retrying while the current token is valid"
            );
            attempt = attempt.saturating_add(1);
            sleep(delay).await;
        }
    }
}

/// [`keep_fresh`] running on a task of its own, with the putter it owns. Dropping
/// this (or [`TokenRefresh::stop`]) ends the loop; the task then closes the putter.
pub(crate) struct TokenRefresh {
    stop: Option<oneshot::Sender<()>>,
    /// `None` once it ended and [`TokenRefresh::failed`] reported it.
    task: Option<JoinHandle<Option<PortError>>>,
}

impl TokenRefresh {
    /// Start refreshing the token `put` just put, valid for `valid_for`; each put is
    /// bounded by `limit`. Must be called inside a Tokio runtime.
    pub(crate) fn start<P: PutToken>(put: P, valid_for: Duration, limit: Duration, what: String) -> Self {
        Self::start_with(put, valid_for, RETRY, limit, what)
    }

    fn start_with<P: PutToken>(mut put: P, valid_for: Duration, retry: Backoff, limit: Duration, what: String) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let failed = tokio::select! {
                biased;
                _ = stopped => None,
                e = keep_fresh(&mut put, valid_for, retry, limit, &what) => Some(e),
            };
            let _ = timeout(limit, put.close()).await;
            failed
        });
        TokenRefresh { stop: Some(stop), task: Some(task) }
    }

    /// Resolves when the token could not be kept valid, with the reason; pending
    /// forever while refreshing works. Cancel-safe.
    pub(crate) async fn failed(&mut self) -> PortError {
        let Some(task) = &mut self.task else { return std::future::pending().await };
        let ended = task.await;
        self.task = None;
        match ended {
            Ok(Some(e)) => e,
            Ok(None) => std::future::pending().await,
            Err(e) => PortError::new(ErrorKind::Other, format!("the CBS token refresh task failed: {e}")),
        }
    }

    /// Stop refreshing and wait, at most `within`, for the putter to close.
    pub(crate) async fn stop(mut self, within: Duration) {
        drop(self.stop.take());
        if let Some(task) = self.task.take() {
            let _ = timeout(within, task).await;
        }
    }
}

#[cfg(test)]
mod tests;

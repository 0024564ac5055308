//! [`LockRenewal`] under Tokio's paused clock, with a source whose `renew_lock`
//! answers from a script.

use std::collections::VecDeque;
use std::sync::Mutex;

use async_trait::async_trait;
use drain_core::ports::{Capabilities, Delivery};
use drain_core::{ErrorKind, PortError};
use tokio::time::Instant;

use super::*;

fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A source whose `renew_lock` answers from a script and records when it was called.
struct Script {
    answers: Mutex<VecDeque<Result<Duration, PortError>>>,
    calls: Mutex<Vec<Instant>>,
}

#[async_trait]
impl MessageSource for Script {
    fn capabilities(&self) -> Capabilities {
        Capabilities { lock_renewal: true, release: false }
    }
    async fn receive(&self, _: usize, _: Duration) -> Result<Vec<Delivery>, PortError> {
        Ok(Vec::new())
    }
    async fn complete(&self, _: DeliveryHandle) -> Result<(), PortError> {
        Ok(())
    }
    async fn abandon(&self, _: DeliveryHandle) -> Result<(), PortError> {
        Ok(())
    }
    async fn release(&self, _: DeliveryHandle) -> Result<(), PortError> {
        Err(PortError::new(ErrorKind::Unsupported, "no release"))
    }
    async fn dead_letter(&self, _: DeliveryHandle, _: &str, _: &str) -> Result<(), PortError> {
        Ok(())
    }
    async fn renew_lock(&self, _: DeliveryHandle) -> Result<Duration, PortError> {
        self.calls.lock().unwrap().push(Instant::now());
        self.answers.lock().unwrap().pop_front().unwrap_or(Ok(s(60)))
    }
}

fn script(answers: Vec<Result<Duration, PortError>>) -> Arc<Script> {
    Arc::new(Script { answers: Mutex::new(answers.into()), calls: Mutex::new(Vec::new()) })
}

#[tokio::test(start_paused = true)]
async fn renews_until_the_maximum_then_reports_it() {
    let source = script(Vec::new());
    let start = Instant::now();
    let mut r = LockRenewal::start(source.clone(), DeliveryHandle(1), s(60), s(200));
    let mut events = Vec::new();
    while let Some(e) = r.next_event().await {
        events.push(e);
    }
    let renewed = RenewEvent::Renewed { lock: s(60) };
    assert_eq!(events, vec![renewed.clone(), renewed.clone(), renewed, RenewEvent::MaxDurationReached]);
    let at: Vec<u64> = source.calls.lock().unwrap().iter().map(|t| (*t - start).as_secs()).collect();
    assert_eq!(at, vec![50, 100, 150], "10 s before each expiry; none at or after 200 s");
}

#[tokio::test(start_paused = true)]
async fn a_failure_is_reported_and_stops_the_renewer() {
    let lost = PortError::new(ErrorKind::LockLost, "gone");
    let source = script(vec![Ok(s(30)), Err(lost.clone())]);
    let start = Instant::now();
    let mut r = LockRenewal::start(source.clone(), DeliveryHandle(1), s(60), s(3600));
    assert_eq!(r.next_event().await, Some(RenewEvent::Renewed { lock: s(30) }));
    assert_eq!(r.next_event().await, Some(RenewEvent::Failed(lost)));
    assert_eq!(r.next_event().await, None);
    let at: Vec<u64> = source.calls.lock().unwrap().iter().map(|t| (*t - start).as_secs()).collect();
    assert_eq!(at, vec![50, 70], "the second renewal follows the renewed 30 s lock");
}

#[tokio::test(start_paused = true)]
async fn stopping_cancels_pending_renewals() {
    let source = script(Vec::new());
    let r = LockRenewal::start(source.clone(), DeliveryHandle(1), s(60), s(3600));
    tokio::time::sleep(s(10)).await;
    r.stop();
    tokio::time::sleep(s(600)).await;
    assert!(source.calls.lock().unwrap().is_empty(), "no renewal after stop");
}

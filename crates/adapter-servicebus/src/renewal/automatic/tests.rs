//! Start-on-receive and stop-on-settle, under Tokio's paused clock, with a source
//! whose `renew_lock` answers from a script.

use std::collections::VecDeque;

use drain_core::ports::Message;
use tokio::time::{Instant, sleep};

use super::*;

fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// One answer of the fake `renew_lock`: after `after`, `result`.
struct Answer {
    after: Duration,
    result: Result<Duration, PortError>,
}

/// What the fake source was asked, shared with the test.
#[derive(Default)]
struct Log {
    /// (handle, seconds since the test began) of every renewal.
    renewals: Mutex<Vec<(u64, u64)>>,
    settled: Mutex<Vec<(u64, &'static str)>>,
}

impl Log {
    fn renewals_of(&self, handle: u64) -> Vec<u64> {
        self.renewals.lock().unwrap().iter().filter(|(h, _)| *h == handle).map(|(_, at)| *at).collect()
    }
}

/// A source that hands out numbered deliveries (message id `m<n>`) whose locks last
/// 60 s, and renews them for 60 s unless scripted otherwise.
struct Fake {
    lock_renewal: bool,
    start: Instant,
    next: Mutex<u64>,
    answers: Mutex<HashMap<u64, VecDeque<Answer>>>,
    log: Arc<Log>,
}

fn new_fake(lock_renewal: bool) -> (Fake, Arc<Log>) {
    let log = Arc::new(Log::default());
    let fake =
        Fake { lock_renewal, start: Instant::now(), next: Mutex::new(1), answers: Mutex::default(), log: log.clone() };
    (fake, log)
}

impl Fake {
    fn script(self, handle: u64, answers: Vec<Answer>) -> Self {
        self.answers.lock().unwrap().insert(handle, answers.into());
        self
    }
}

fn token(handle: u64) -> LockToken {
    LockToken::from_bytes([u8::try_from(handle).unwrap(); 16])
}

impl LockLookup for Fake {
    fn held_lock(&self, handle: DeliveryHandle) -> DeliveryLock {
        DeliveryLock { token: Some(token(handle.0)), remaining: Some(s(60)) }
    }
}

#[async_trait]
impl MessageSource for Fake {
    fn capabilities(&self) -> Capabilities {
        Capabilities { lock_renewal: self.lock_renewal, release: true }
    }

    async fn receive(&self, max: usize, _: Duration) -> Result<Vec<Delivery>, PortError> {
        let mut next = self.next.lock().unwrap();
        let first = *next;
        *next += max as u64;
        Ok((first..*next)
            .map(|n| Delivery {
                handle: DeliveryHandle(n),
                message: {
                    let mut m = Message::default();
                    m.message_id = Some(format!("m{n}").into());
                    m
                },
                delivery_count: 0,
            })
            .collect())
    }

    async fn complete(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.log.settled.lock().unwrap().push((handle.0, "complete"));
        Ok(())
    }

    async fn abandon(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.log.settled.lock().unwrap().push((handle.0, "abandon"));
        Ok(())
    }

    async fn release(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.log.settled.lock().unwrap().push((handle.0, "release"));
        Ok(())
    }

    async fn dead_letter(&self, handle: DeliveryHandle, _: &str, _: &str) -> Result<(), PortError> {
        self.log.settled.lock().unwrap().push((handle.0, "dead_letter"));
        Ok(())
    }

    async fn renew_lock(&self, handle: DeliveryHandle) -> Result<Duration, PortError> {
        if !self.lock_renewal {
            return Err(PortError::new(ErrorKind::Unsupported, "no locks here"));
        }
        self.log.renewals.lock().unwrap().push((handle.0, (Instant::now() - self.start).as_secs()));
        let answer = self.answers.lock().unwrap().get_mut(&handle.0).and_then(VecDeque::pop_front);
        let Answer { after, result } = answer.unwrap_or(Answer { after: Duration::ZERO, result: Ok(s(60)) });
        sleep(after).await;
        result
    }
}

fn events(rx: &mut broadcast::Receiver<LockEvent>) -> Vec<LockEvent> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

fn lost() -> PortError {
    PortError::new(ErrorKind::LockLost, "gone")
}

#[tokio::test(start_paused = true)]
async fn renews_each_received_delivery_until_it_is_settled() {
    let (fake, log) = new_fake(true);
    let source = AutoRenew::new(fake, s(300), "test".into());
    let got = source.receive(4, s(1)).await.unwrap();
    assert_eq!(got.len(), 4);
    assert_eq!(source.renewing(), 4, "renewal starts when receive hands the delivery out");
    sleep(s(120)).await;
    source.complete(DeliveryHandle(1)).await.unwrap();
    source.abandon(DeliveryHandle(2)).await.unwrap();
    source.dead_letter(DeliveryHandle(3), "r", "d").await.unwrap();
    assert_eq!(source.renewing(), 1, "settling stops the renewal");
    sleep(s(1000)).await;
    for settled in 1..=3 {
        assert_eq!(log.renewals_of(settled), [50, 100], "10 s before each expiry, none after settling");
    }
    assert_eq!(log.renewals_of(4), [50, 100, 150, 200, 250], "the unsettled one, up to the 300 s maximum");
    assert_eq!(source.renewing(), 0, "none left after the maximum");
    let settled = log.settled.lock().unwrap().clone();
    assert_eq!(settled, [(1, "complete"), (2, "abandon"), (3, "dead_letter")], "settlements still reach the source");
}

#[tokio::test(start_paused = true)]
async fn events_tell_renewals_failures_and_the_maximum_per_message() {
    let script = vec![
        Answer { after: Duration::ZERO, result: Ok(s(60)) },
        Answer { after: Duration::ZERO, result: Err(lost()) },
    ];
    let (fake, log) = new_fake(true);
    let source = AutoRenew::new(fake.script(1, script), s(120), "test".into());
    let mut rx = source.events();
    source.receive(2, s(1)).await.unwrap();
    sleep(s(1000)).await;
    let event = |handle: u64, event: RenewEvent| LockEvent {
        handle: DeliveryHandle(handle),
        message_id: Some(format!("m{handle}")),
        lock_token: Some(token(handle)),
        event,
    };
    let renewed = RenewEvent::Renewed { lock: s(60) };
    let mut got = events(&mut rx);
    got.sort_by_key(|e| e.handle);
    assert_eq!(
        got,
        [
            event(1, renewed.clone()),
            event(1, RenewEvent::Failed(lost())),
            event(2, renewed.clone()),
            event(2, renewed),
            event(2, RenewEvent::MaxDurationReached),
        ]
    );
    assert_eq!(log.renewals_of(1), [50, 100], "a failure stops the renewal");
    assert_eq!(source.renewing(), 0);
}

#[tokio::test(start_paused = true)]
async fn nothing_is_renewed_without_the_capability_or_with_a_zero_maximum() {
    for (lock_renewal, max) in [(false, s(300)), (true, Duration::ZERO)] {
        let (fake, log) = new_fake(lock_renewal);
        let source = AutoRenew::new(fake, max, "test".into());
        let mut rx = source.events();
        assert_eq!(source.receive(3, s(1)).await.unwrap().len(), 3);
        assert_eq!(source.renewing(), 0, "lock_renewal={lock_renewal} max={max:?}");
        sleep(s(3600)).await;
        assert!(log.renewals.lock().unwrap().is_empty());
        assert!(events(&mut rx).is_empty());
        source.complete(DeliveryHandle(1)).await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_renewal_in_flight_when_the_delivery_is_settled_reports_nothing() {
    let slow_failure = vec![Answer { after: s(5), result: Err(lost()) }];
    let (fake, log) = new_fake(true);
    let source = AutoRenew::new(fake.script(1, slow_failure), s(300), "test".into());
    let mut rx = source.events();
    source.receive(1, s(1)).await.unwrap();
    sleep(s(52)).await; // the renewal started at 50 s and answers at 55 s
    source.complete(DeliveryHandle(1)).await.unwrap();
    sleep(s(600)).await;
    assert_eq!(log.renewals_of(1), [50]);
    assert!(events(&mut rx).is_empty(), "the settled delivery's late answer is no failure");
}

#[tokio::test(start_paused = true)]
async fn closing_or_dropping_the_source_stops_every_renewal() {
    let (fake, log) = new_fake(true);
    let source = AutoRenew::new(fake, s(300), "test".into());
    source.receive(2, s(1)).await.unwrap();
    source.stop_all();
    assert_eq!(source.renewing(), 0);
    sleep(s(600)).await;
    assert!(log.renewals.lock().unwrap().is_empty(), "stop_all (close) stops them");

    let (fake, log) = new_fake(true);
    let source = AutoRenew::new(fake, s(300), "test".into());
    source.receive(2, s(1)).await.unwrap();
    drop(source);
    sleep(s(600)).await;
    assert!(log.renewals.lock().unwrap().is_empty(), "dropping the source stops them");
}

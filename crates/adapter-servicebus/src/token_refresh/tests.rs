//! The refresh loop under Tokio's paused clock, with a scripted putter.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::*;

fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// What the fake CBS node answers to one put.
#[derive(Clone, Copy)]
enum Answer {
    /// Accepted; the new token is valid this long.
    Valid(Duration),
    /// Refused (as a 401 would be).
    Refuse,
    /// Never answers.
    Hang,
}

#[derive(Default)]
struct Log {
    /// When each put started, since the test began.
    puts: Vec<Duration>,
    closed: bool,
}

/// A putter that answers from a script (then accepts one-hour tokens) and records
/// when it was called and whether it was closed.
struct Fake {
    start: Instant,
    answers: VecDeque<Answer>,
    log: Arc<Mutex<Log>>,
}

#[async_trait]
impl PutToken for Fake {
    async fn put_token(&mut self) -> Result<Duration, PortError> {
        self.log.lock().unwrap().puts.push(Instant::now() - self.start);
        match self.answers.pop_front().unwrap_or(Answer::Valid(s(3600))) {
            Answer::Valid(d) => Ok(d),
            Answer::Refuse => Err(PortError::new(ErrorKind::Auth, "refused")),
            Answer::Hang => std::future::pending().await,
        }
    }

    async fn close(self) {
        self.log.lock().unwrap().closed = true;
    }
}

fn fake(answers: Vec<Answer>) -> (Fake, Arc<Mutex<Log>>) {
    let log = Arc::new(Mutex::new(Log::default()));
    (Fake { start: Instant::now(), answers: answers.into(), log: log.clone() }, log)
}

fn puts(log: &Mutex<Log>) -> Vec<Duration> {
    log.lock().unwrap().puts.clone()
}

/// `fut`'s output; fails the test (instead of hanging it) when it does not end within a day.
async fn ends<T>(fut: impl Future<Output = T>) -> T {
    timeout(s(24 * 3600), fut).await.expect("ends within a day")
}

const LIMIT: Duration = Duration::from_secs(10);
const SLOW: Backoff = Backoff { initial: Duration::from_secs(10), max: Duration::from_secs(40) };

#[tokio::test(start_paused = true)]
async fn re_puts_before_every_expiry() {
    let (mut put, log) = fake(vec![Answer::Valid(s(3600)), Answer::Valid(s(600)), Answer::Valid(s(3600))]);
    let run = keep_fresh(&mut put, s(3600), SLOW, LIMIT, "test");
    let ended = timeout(s(4 * 3600), run).await;
    assert!(ended.is_err(), "the loop runs for as long as its owner polls it");
    // One-hour tokens 5 min before expiry; the 600 s one 5 min before its expiry too.
    assert_eq!(puts(&log), [3300, 6600, 6900, 10_200, 13_500].map(s));
    assert!(!log.lock().unwrap().closed, "keep_fresh never closes the putter itself");
}

#[tokio::test(start_paused = true)]
async fn a_refused_put_is_retried_with_growing_jittered_delays() {
    let answers = vec![Answer::Refuse, Answer::Refuse, Answer::Refuse, Answer::Valid(s(3600))];
    let (mut put, log) = fake(answers);
    let run = keep_fresh(&mut put, s(3600), SLOW, LIMIT, "test");
    assert!(timeout(s(7000), run).await.is_err(), "a refused put does not end the loop");
    let at = puts(&log);
    assert_eq!(at.len(), 5, "three refused, one accepted, then the next refresh: {at:?}");
    assert_eq!(at[0], s(3300));
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!((s(5)..=s(10)).contains(&gaps[0]), "first retry within [cap/2, cap] of 10 s: {gaps:?}");
    assert!((s(10)..=s(20)).contains(&gaps[1]), "second within [10, 20] s: {gaps:?}");
    assert!((s(20)..=s(40)).contains(&gaps[2]), "third within [20, 40] s: {gaps:?}");
    assert_eq!(gaps[3], s(3300), "the accepted token is refreshed on schedule: {gaps:?}");
}

#[tokio::test(start_paused = true)]
async fn gives_up_when_the_token_expired_without_a_successful_put() {
    let (mut put, log) = fake(vec![Answer::Refuse; 100]);
    let start = Instant::now();
    let err = ends(keep_fresh(&mut put, s(600), SLOW, LIMIT, "test")).await;
    assert_eq!(err.kind, ErrorKind::Auth, "the last refusal is reported: {err}");
    assert_eq!(Instant::now() - start, s(600), "gave up exactly at expiry");
    let at = puts(&log);
    assert_eq!(at.first(), Some(&s(300)));
    assert_eq!(at.last(), Some(&s(600)), "a last attempt at expiry: {at:?}");
    assert!(at.len() >= 5 && at.len() <= 40, "retried with backoff, not in a tight loop: {at:?}");
}

#[tokio::test(start_paused = true)]
async fn a_put_without_an_answer_ends_the_loop_after_its_limit() {
    let (mut put, log) = fake(vec![Answer::Valid(s(3600)), Answer::Hang]);
    let start = Instant::now();
    let err = ends(keep_fresh(&mut put, s(3600), SLOW, LIMIT, "test")).await;
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    assert_eq!(Instant::now() - start, s(6600) + LIMIT);
    assert_eq!(puts(&log), [s(3300), s(6600)], "no retry on a link that may be out of step");
}

#[tokio::test(start_paused = true)]
async fn dropping_the_owner_stops_refreshing_and_closes_the_putter() {
    let (put, log) = fake(Vec::new());
    let refresh = TokenRefresh::start(put, s(3600), LIMIT, "test".into());
    sleep(s(4000)).await;
    assert_eq!(puts(&log), [s(3300)]);
    drop(refresh);
    sleep(s(10 * 3600)).await;
    assert_eq!(puts(&log), [s(3300)], "no put after the owner is gone");
    assert!(log.lock().unwrap().closed, "the putter's links are closed");
}

#[tokio::test(start_paused = true)]
async fn stop_closes_the_putter_before_returning() {
    let (put, log) = fake(Vec::new());
    let refresh = TokenRefresh::start(put, s(3600), LIMIT, "test".into());
    sleep(s(10)).await;
    refresh.stop(LIMIT).await;
    assert!(log.lock().unwrap().closed);
    sleep(s(10 * 3600)).await;
    assert!(puts(&log).is_empty());
}

#[tokio::test(start_paused = true)]
async fn failed_reports_why_the_token_could_not_be_kept() {
    let (put, log) = fake(vec![Answer::Refuse; 100]);
    let mut refresh = TokenRefresh::start_with(put, s(600), SLOW, LIMIT, "test".into());
    let start = Instant::now();
    let err = ends(refresh.failed()).await;
    assert_eq!(err.kind, ErrorKind::Auth);
    assert_eq!(Instant::now() - start, s(600));
    assert!(log.lock().unwrap().closed, "the putter is closed when the loop ends");
    // Reported once; afterwards `failed` is pending (the owner reconnects meanwhile).
    assert!(timeout(s(3600), refresh.failed()).await.is_err());
}

//! Scheduled messages, time to live, deferral and peek: scenarios, then random runs
//! against a model of where each message is.

use std::collections::BTreeMap;

use fe2o3_amqp_types::messaging::{Data, Header, MessageId, Properties};
use fe2o3_amqp_types::primitives::Binary;
use proptest::prelude::*;

use super::*;

fn message(id: &str, ttl_ms: Option<u32>) -> StoredMessage {
    let mut payload = Vec::new();
    if let Some(ttl) = ttl_ms {
        payload.extend(serde_amqp::to_vec(&Header { ttl: Some(ttl), ..Header::default() }).unwrap());
    }
    let props = Properties { message_id: Some(MessageId::String(id.into())), ..Properties::default() };
    payload.extend(serde_amqp::to_vec(&props).unwrap());
    payload.extend(serde_amqp::to_vec(&Data(Binary::from(b"body".to_vec()))).unwrap());
    StoredMessage::parse(&payload).unwrap()
}

fn scheduled(id: &str, due: i64) -> StoredMessage {
    let mut m = message(id, None);
    m.set_scheduled_enqueue_ms(due);
    m
}

fn queue(default_ttl_ms: Option<u64>, dead_letter_on_expiry: bool) -> Queue {
    Queue::new(
        "q",
        QueueConfig {
            lock_duration: Duration::from_millis(1000),
            default_ttl: default_ttl_ms.map(Duration::from_millis),
            dead_letter_on_expiry,
            ..QueueConfig::default()
        },
    )
}

fn ids(q: &Queue, sub: SubQueue) -> Vec<String> {
    q.entries(sub).iter().filter_map(|(e, _)| e.message.message_id().map(id_string)).collect()
}

fn token(n: u8) -> LockToken {
    [n; 16]
}

#[test]
fn a_scheduled_message_waits_for_its_time_and_can_be_cancelled() {
    let mut q = queue(None, false);
    assert_eq!(q.send(scheduled("a", 500), 0), Sent::Enqueued(1));
    assert_eq!(q.schedule(message("b", None), 500, 0), Ok(2));
    assert_eq!(q.schedule(message("c", None), 500, 0), Ok(3));
    assert_eq!(q.send(scheduled("past", 0), 10), Sent::Enqueued(4), "a time already passed enqueues at once");
    assert_eq!(ids(&q, SubQueue::Main), ["past"]);
    assert!(q.cancel_scheduled(3));
    assert!(!q.cancel_scheduled(3), "cancelled once");
    assert!(!q.cancel_scheduled(4), "an enqueued message is not scheduled");
    assert_eq!(q.next_deadline(), Some(500));
    assert!(q.lock_next(SubQueue::Main, 499, token(1)).is_some_and(|d| d.sequence == 4));
    assert_eq!(q.expire(499), Vec::<SubQueue>::new());
    assert_eq!(q.expire(500), vec![SubQueue::Main]);
    assert_eq!(ids(&q, SubQueue::Main), ["a", "b", "past"]);
    assert!(q.entries(SubQueue::Main).iter().filter(|(e, _)| e.sequence < 3).all(|(e, _)| e.enqueued_ms == 500));
    assert_eq!(q.counters.scheduled, 3);
}

#[test]
fn time_to_live_dead_letters_or_drops_and_the_shorter_one_wins() {
    let check = |default_ttl: Option<u64>, own: Option<u32>, dead_letter: bool, expires: Option<i64>| {
        let mut q = queue(default_ttl, dead_letter);
        q.send(message("a", own), 100);
        assert_eq!(q.entries(SubQueue::Main)[0].0.expires_ms, expires, "{default_ttl:?} {own:?}");
        let Some(at) = expires else { return };
        assert_eq!(q.next_deadline(), Some(at));
        q.expire(at - 1);
        assert_eq!(ids(&q, SubQueue::Main), ["a"]);
        q.expire(at);
        assert!(ids(&q, SubQueue::Main).is_empty());
        let dead = q.entries(SubQueue::DeadLetter);
        assert_eq!(dead.len(), usize::from(dead_letter));
        if dead_letter {
            assert_eq!(dead[0].0.message.string_property(DEAD_LETTER_REASON), Some(TTL_EXPIRED));
            assert_eq!(dead[0].0.expires_ms, None, "a dead letter does not expire");
        }
        assert_eq!(q.counters.expired, 1);
    };
    check(None, None, true, None);
    check(Some(1000), None, true, Some(1100));
    check(Some(1000), Some(300), true, Some(400));
    check(Some(300), Some(1000), false, Some(400));
    check(None, Some(50), false, Some(150));
}

#[test]
fn an_expired_message_is_never_handed_out_and_a_locked_one_expires_when_it_comes_back() {
    let mut q = queue(Some(100), true);
    q.send(message("a", None), 0);
    q.send(message("b", None), 50);
    // The sweeper has not run: the receive itself skips what expired.
    let d = q.lock_next(SubQueue::Main, 120, token(1)).unwrap();
    assert_eq!(d.sequence, 2);
    assert_eq!(ids(&q, SubQueue::DeadLetter), ["a"]);
    // b's time runs out while it is locked; released afterwards, it expires.
    q.expire(200);
    assert_eq!(q.counts(SubQueue::Main), (0, 1), "a locked message waits for its lock");
    q.settle(SubQueue::Main, &token(1), Settlement::Release, 201).unwrap();
    assert_eq!(ids(&q, SubQueue::DeadLetter), ["a", "b"]);
}

#[test]
fn a_deferred_message_comes_back_only_by_sequence_number() {
    let mut q = queue(None, false);
    q.send(message("a", None), 0);
    q.send(message("b", None), 0);
    q.lock_next(SubQueue::Main, 0, token(1)).unwrap();
    q.settle(SubQueue::Main, &token(1), Settlement::Defer, 1).unwrap();
    assert_eq!(q.lock_next(SubQueue::Main, 2, token(2)).map(|d| d.sequence), Some(2), "a is set aside");
    assert!(q.lock_next(SubQueue::Main, 2, token(3)).is_none());
    assert_eq!(q.lock_deferred(SubQueue::Main, &[2], None, 3, || token(4)).unwrap_err(), NotDeferred(2));
    let mut n = 10;
    let got = q
        .lock_deferred(SubQueue::Main, &[1], None, 3, || {
            n += 1;
            token(n)
        })
        .unwrap();
    assert_eq!((got.len(), got[0].sequence, got[0].token, got[0].until_ms), (1, 1, token(11), 1003));
    // Abandoned, it is deferred again, counted; completed, it is gone.
    q.settle(SubQueue::Main, &token(11), Settlement::Abandon { failed: true, annotations: vec![] }, 4).unwrap();
    assert!(q.lock_next(SubQueue::Main, 5, token(12)).is_none());
    let again = q.lock_deferred(SubQueue::Main, &[1], None, 5, || token(13)).unwrap();
    assert_eq!(StoredMessage::parse(&again[0].payload).unwrap().header.delivery_count, 1);
    // Its lock runs out: deferred again.
    q.expire(1005);
    assert_eq!(q.lock_deferred(SubQueue::Main, &[1], None, 1006, || token(14)).unwrap().len(), 1);
    q.settle(SubQueue::Main, &token(14), Settlement::Complete, 1007).unwrap();
    assert_eq!(q.lock_deferred(SubQueue::Main, &[1], None, 1008, || token(15)).unwrap_err(), NotDeferred(1));
    assert_eq!(q.counters.deferred, 1);
}

#[test]
fn peek_shows_everything_from_a_sequence_number_and_locks_nothing() {
    let mut q = queue(None, false);
    for id in ["a", "b", "c"] {
        q.send(message(id, None), 0);
    }
    q.send(scheduled("later", 1000), 0);
    q.lock_next(SubQueue::Main, 0, token(1)).unwrap();
    q.lock_next(SubQueue::Main, 0, token(2)).unwrap();
    q.settle(SubQueue::Main, &token(2), Settlement::Defer, 0).unwrap();
    let seqs = |from, count| q.peek(SubQueue::Main, from, count, None).into_iter().map(|(s, _)| s).collect::<Vec<_>>();
    assert_eq!(seqs(1, 10), [1, 2, 3, 4], "locked, deferred, waiting and scheduled");
    assert_eq!(seqs(2, 2), [2, 3]);
    assert!(seqs(5, 10).is_empty());
    let (_, first) = &q.peek(SubQueue::Main, 1, 1, None)[0];
    let m = StoredMessage::parse(first).unwrap();
    assert!(m.annotation("x-opt-lock-token").is_none(), "a peeked message carries no lock");
    assert_eq!(m.annotation("x-opt-sequence-number"), Some(&Value::Long(1)));
    assert_eq!(q.counts(SubQueue::Main), (1, 1), "c waits, a is locked, b deferred");
}

/// One step of a random run over scheduling, time to live and deferral.
#[derive(Debug, Clone)]
enum Op {
    Send { ttl: Option<u16> },
    Schedule { delay: u16 },
    Cancel(usize),
    Lock,
    Defer(usize),
    LockDeferred(usize),
    Complete(usize),
    Wait(u16),
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => proptest::option::of(0u16..6).prop_map(|t| Op::Send { ttl: t.map(|n| n * 100) }),
        2 => (0u16..6).prop_map(|d| Op::Schedule { delay: d * 100 }),
        1 => any::<usize>().prop_map(Op::Cancel),
        3 => Just(Op::Lock),
        2 => any::<usize>().prop_map(Op::Defer),
        2 => any::<usize>().prop_map(Op::LockDeferred),
        2 => any::<usize>().prop_map(Op::Complete),
        2 => (0u16..4).prop_map(|n| Op::Wait(n * 100)),
        1 => Just(Op::Sweep),
    ]
}

/// Where the model has a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Scheduled(i64),
    Waiting,
    Deferred,
    Locked { deferred: bool },
    Dead,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A scheduled message is never handed out before its time and never after it
    /// was cancelled; an expired one never at all (it ends dead-lettered); a
    /// deferred one only by its sequence number.
    #[test]
    fn scheduling_time_to_live_and_deferral_agree_with_a_model(ops in proptest::collection::vec(op(), 1..100)) {
        // Locks outlast every run (the lock state machine has its own model test).
        const LOCK: i64 = 1_000_000;
        let mut q = Queue::new("q", QueueConfig {
            lock_duration: Duration::from_millis(LOCK as u64),
            dead_letter_on_expiry: true,
            max_delivery_count: 1000,
            ..QueueConfig::default()
        });
        // sequence -> (place, expires)
        let mut model: BTreeMap<i64, (Place, Option<i64>)> = BTreeMap::new();
        let mut locks: BTreeMap<i64, LockToken> = BTreeMap::new();
        let (mut now, mut n) = (0i64, 0u32);
        let mut next_token = || { n += 1; let mut t = [0u8; 16]; t[..4].copy_from_slice(&n.to_be_bytes()); t };
        let pick = |model: &BTreeMap<i64, (Place, Option<i64>)>, i: usize, want: fn(Place) -> bool| {
            let seqs: Vec<i64> = model.iter().filter(|(_, (p, _))| want(*p)).map(|(s, _)| *s).collect();
            (!seqs.is_empty()).then(|| seqs[i % seqs.len()])
        };
        for op in ops {
            match op {
                Op::Send { ttl } => {
                    let Sent::Enqueued(seq) = q.send(message("m", ttl.map(u32::from)), now) else { panic!("kept") };
                    model.insert(seq, (Place::Waiting, ttl.map(|t| now + i64::from(t))));
                }
                Op::Schedule { delay } => {
                    let due = now + i64::from(delay);
                    let seq = q.schedule(message("s", None), due, now).unwrap();
                    model.insert(seq, (if delay == 0 { Place::Waiting } else { Place::Scheduled(due) }, None));
                }
                Op::Cancel(i) => {
                    let Some(seq) = pick(&model, i, |p| matches!(p, Place::Scheduled(_))) else { continue };
                    prop_assert!(q.cancel_scheduled(seq));
                    model.remove(&seq);
                }
                Op::Lock => {
                    // The oldest waiting message that has not expired; expired ones on the way die.
                    let mut want = None;
                    for (seq, (place, expires)) in model.iter_mut() {
                        if *place == Place::Waiting {
                            if expires.is_some_and(|at| at <= now) {
                                *place = Place::Dead;
                            } else {
                                want = Some(*seq);
                                break;
                            }
                        }
                    }
                    let t = next_token();
                    let got = q.lock_next(SubQueue::Main, now, t).map(|d| d.sequence);
                    prop_assert_eq!(got, want);
                    if let Some(seq) = got {
                        model.get_mut(&seq).unwrap().0 = Place::Locked { deferred: false };
                        locks.insert(seq, t);
                    }
                }
                Op::Defer(i) | Op::Complete(i) => {
                    let Some(seq) = pick(&model, i, |p| matches!(p, Place::Locked { .. })) else { continue };
                    let t = locks[&seq];
                    let settlement = if matches!(op, Op::Defer(_)) { Settlement::Defer } else { Settlement::Complete };
                    prop_assert_eq!(q.settle(SubQueue::Main, &t, settlement, now), Ok(()));
                    if matches!(op, Op::Defer(_)) {
                        let expires = model[&seq].1;
                        // Back among the deferred, unless its time ran out meanwhile.
                        let place = if expires.is_some_and(|at| at <= now) { Place::Dead } else { Place::Deferred };
                        model.insert(seq, (place, expires));
                    } else {
                        model.remove(&seq);
                    }
                }
                Op::LockDeferred(i) => {
                    let Some(seq) = pick(&model, i, |p| p == Place::Deferred) else {
                        let waiting = pick(&model, i, |p| p == Place::Waiting);
                        if let Some(seq) = waiting {
                            prop_assert!(q.lock_deferred(SubQueue::Main, &[seq], None, now, &mut next_token).is_err());
                        }
                        continue;
                    };
                    let got = q.lock_deferred(SubQueue::Main, &[seq], None, now, &mut next_token);
                    let got = got.map(|d| d.into_iter().map(|d| (d.sequence, d.token)).collect::<Vec<_>>());
                    if model[&seq].1.is_some_and(|at| at <= now) {
                        // Not swept yet: still deferred, and locking it works (Service Bus expires lazily too).
                        prop_assert!(got.is_ok());
                    }
                    let got = got.unwrap();
                    prop_assert_eq!(got.len(), 1);
                    model.get_mut(&seq).unwrap().0 = Place::Locked { deferred: true };
                    locks.insert(seq, got[0].1);
                }
                Op::Wait(d) => now += i64::from(d),
                Op::Sweep => {
                    q.expire(now);
                    for (place, expires) in model.values_mut() {
                        match *place {
                            Place::Scheduled(due) if due <= now => *place = Place::Waiting,
                            _ => {}
                        }
                        if matches!(*place, Place::Waiting | Place::Deferred) && expires.is_some_and(|at| at <= now) {
                            *place = Place::Dead;
                        }
                    }
                    // Scheduled messages get their time to live when enqueued (none here).
                }
            }
            let dead: Vec<i64> = model.iter().filter(|(_, (p, _))| *p == Place::Dead).map(|(s, _)| *s).collect();
            let got_dead: Vec<i64> = q.entries(SubQueue::DeadLetter).iter().map(|(e, _)| e.sequence).collect();
            prop_assert_eq!(got_dead, dead);
            let scheduled: Vec<i64> = model.iter().filter(|(_, (p, _))| matches!(p, Place::Scheduled(_))).map(|(s, _)| *s).collect();
            prop_assert_eq!(q.scheduled.keys().copied().collect::<Vec<_>>(), scheduled);
            let deferred: Vec<i64> = model.iter().filter(|(_, (p, _))| *p == Place::Deferred).map(|(s, _)| *s).collect();
            prop_assert_eq!(q.main.deferred.keys().copied().collect::<Vec<_>>(), deferred);
        }
    }
}

//! The queue state machine: scenarios, then random operation sequences against a
//! model.

use std::collections::BTreeMap;

use fe2o3_amqp_types::messaging::{Data, MessageId, Properties};
use fe2o3_amqp_types::primitives::Binary;
use proptest::prelude::*;

use super::*;

fn message(id: Option<&str>) -> StoredMessage {
    let mut payload = Vec::new();
    let props = Properties { message_id: id.map(|i| MessageId::String(i.into())), ..Properties::default() };
    payload.extend(serde_amqp::to_vec(&props).unwrap());
    payload.extend(serde_amqp::to_vec(&Data(Binary::from(b"body".to_vec()))).unwrap());
    StoredMessage::parse(&payload).unwrap()
}

fn queue(lock_ms: u64, max: u32, dedup_ms: Option<u64>) -> Queue {
    Queue::new(
        "q",
        QueueConfig {
            lock_duration: Duration::from_millis(lock_ms),
            max_delivery_count: max,
            duplicate_detection: dedup_ms.map(Duration::from_millis),
            ..QueueConfig::default()
        },
    )
}

fn token(n: u8) -> LockToken {
    [n; 16]
}

fn delivered(d: &Delivery) -> StoredMessage {
    StoredMessage::parse(&d.payload).unwrap()
}

#[test]
fn peek_lock_hands_out_in_order_with_the_broker_annotations() {
    let mut q = queue(1000, 10, None);
    assert_eq!(q.send(message(Some("a")), 10), Sent::Enqueued(1));
    assert_eq!(q.send(message(Some("b")), 20), Sent::Enqueued(2));
    let d = q.lock_next(SubQueue::Main, 100, token(1)).unwrap();
    assert_eq!((d.sequence, d.until_ms, d.token), (1, 1100, token(1)));
    let m = delivered(&d);
    assert_eq!(m.header.delivery_count, 0);
    assert_eq!(m.annotation("x-opt-lock-token"), Some(&uuid(token(1))));
    assert_eq!(m.annotation("x-opt-locked-until"), Some(&timestamp(1100)));
    assert_eq!(m.annotation("x-opt-sequence-number"), Some(&Value::Long(1)));
    assert_eq!(m.annotation("x-opt-enqueued-time"), Some(&timestamp(10)));
    assert_eq!(q.counts(SubQueue::Main), (1, 1));
    assert!(q.holds(SubQueue::Main, &token(1)));
    assert_eq!(q.settle(SubQueue::Main, &token(1), Settlement::Complete, 200), Ok(()));
    assert_eq!(q.settle(SubQueue::Main, &token(1), Settlement::Complete, 200), Err(LockLost), "settled twice");
    assert_eq!(q.counts(SubQueue::Main), (1, 0));
    let taken = q.take_next(SubQueue::Main, None, 300).unwrap();
    assert!(StoredMessage::parse(&taken).unwrap().annotation("x-opt-lock-token").is_none());
    assert!(q.lock_next(SubQueue::Main, 300, token(2)).is_none());
}

#[test]
fn abandon_counts_release_does_not_and_the_message_keeps_its_place() {
    let mut q = queue(1000, 10, None);
    q.send(message(Some("a")), 0);
    q.send(message(Some("b")), 0);
    q.lock_next(SubQueue::Main, 0, token(1)).unwrap();
    let abandon = Settlement::Abandon { failed: true, annotations: vec![(Symbol::from("why"), Value::Int(7))] };
    q.settle(SubQueue::Main, &token(1), abandon, 1).unwrap();
    let again = q.lock_next(SubQueue::Main, 2, token(2)).unwrap();
    assert_eq!(again.sequence, 1, "back at its place, before b");
    let m = delivered(&again);
    assert_eq!(m.header.delivery_count, 1);
    assert_eq!(m.annotation("why"), Some(&Value::Int(7)));
    q.settle(SubQueue::Main, &token(2), Settlement::Release, 3).unwrap();
    let third = q.lock_next(SubQueue::Main, 4, token(3)).unwrap();
    assert_eq!(delivered(&third).header.delivery_count, 1, "released is not a failed delivery");
    q.settle(SubQueue::Main, &token(3), Settlement::Abandon { failed: false, annotations: vec![] }, 5).unwrap();
    assert_eq!(delivered(&q.lock_next(SubQueue::Main, 6, token(4)).unwrap()).header.delivery_count, 1);
    assert_eq!(q.counters.abandoned, 2);
}

#[test]
fn an_expired_lock_comes_back_counted_and_settling_it_fails() {
    let mut q = queue(1000, 10, None);
    q.send(message(Some("a")), 0);
    q.lock_next(SubQueue::Main, 0, token(1)).unwrap();
    assert_eq!(q.next_deadline(), Some(1000));
    assert!(q.expire(999).is_empty());
    assert_eq!(q.expire(1000), vec![SubQueue::Main]);
    assert_eq!(q.next_deadline(), None);
    assert_eq!(q.settle(SubQueue::Main, &token(1), Settlement::Complete, 1001), Err(LockLost));
    let d = q.lock_next(SubQueue::Main, 1002, token(2)).unwrap();
    assert_eq!(delivered(&d).header.delivery_count, 1);
    // Settling after the lock ran out but before the sweeper noticed: still lost, and
    // the message is back.
    assert_eq!(q.settle(SubQueue::Main, &token(2), Settlement::Complete, 2002), Err(LockLost));
    assert_eq!(q.counts(SubQueue::Main), (1, 0));
    assert_eq!(q.counters.locks_expired, 2);
    assert_eq!(q.counters.lock_lost, 2);
}

#[test]
fn renew_moves_the_expiry() {
    let mut q = queue(1000, 10, None);
    q.send(message(None), 0);
    q.lock_next(SubQueue::Main, 0, token(1)).unwrap();
    assert_eq!(q.renew(SubQueue::Main, &token(1), 900), Ok(1900));
    assert!(q.expire(1500).is_empty());
    assert_eq!(q.next_deadline(), Some(1900));
    assert_eq!(q.renew(SubQueue::Main, &token(1), 1900), Err(LockLost), "renewing at expiry is too late");
    assert_eq!(q.renew(SubQueue::Main, &token(9), 0), Err(LockLost));
    assert_eq!(q.counters.renewals, 1);
}

#[test]
fn the_max_delivery_count_dead_letters_with_its_reason() {
    let mut q = queue(1000, 2, None);
    q.send(message(Some("a")), 0);
    q.lock_next(SubQueue::Main, 0, token(1)).unwrap();
    q.settle(SubQueue::Main, &token(1), Settlement::Abandon { failed: true, annotations: vec![] }, 1).unwrap();
    q.lock_next(SubQueue::Main, 1, token(2)).unwrap();
    assert_eq!(q.expire(1001), vec![SubQueue::DeadLetter], "the second failed delivery dead-letters");
    assert_eq!(q.counts(SubQueue::Main), (0, 0));
    assert_eq!(q.counts(SubQueue::DeadLetter), (1, 0));
    let d = q.lock_next(SubQueue::DeadLetter, 2000, token(3)).unwrap();
    let m = delivered(&d);
    assert_eq!(m.string_property(DEAD_LETTER_REASON), Some(MAX_DELIVERY_COUNT_EXCEEDED));
    assert_eq!(
        m.string_property(DEAD_LETTER_DESCRIPTION),
        Some("Message could not be consumed after 2 delivery attempts.")
    );
    assert_eq!(m.header.delivery_count, 2);
    // In the dead-letter queue there is no maximum.
    for n in 0..5 {
        q.settle(SubQueue::DeadLetter, &token(3 + n), Settlement::Abandon { failed: true, annotations: vec![] }, 2001)
            .unwrap();
        q.lock_next(SubQueue::DeadLetter, 2002, token(4 + n)).unwrap();
    }
    q.settle(SubQueue::DeadLetter, &token(8), Settlement::Complete, 2003).unwrap();
    assert_eq!(q.counts(SubQueue::DeadLetter), (0, 0));
}

#[test]
fn dead_letter_keeps_reason_and_description() {
    let check = |reason: Option<&str>, description: Option<&str>| {
        let mut q = queue(1000, 10, None);
        q.send(message(Some("a")), 0);
        q.lock_next(SubQueue::Main, 0, token(1)).unwrap();
        let dl = Settlement::DeadLetter { reason: reason.map(Into::into), description: description.map(Into::into) };
        q.settle(SubQueue::Main, &token(1), dl, 1).unwrap();
        let m = delivered(&q.lock_next(SubQueue::DeadLetter, 2, token(2)).unwrap());
        assert_eq!(m.string_property(DEAD_LETTER_REASON), reason);
        assert_eq!(m.string_property(DEAD_LETTER_DESCRIPTION), description);
        assert_eq!(m.header.delivery_count, 0, "a dead-letter is no failed delivery");
    };
    check(Some("Poison"), Some("cannot parse"));
    check(Some("Poison"), None);
    check(None, None);
}

#[test]
fn duplicate_detection_drops_ids_inside_the_window_only() {
    let mut q = queue(1000, 10, Some(500));
    assert_eq!(q.send(message(Some("a")), 0), Sent::Enqueued(1));
    assert_eq!(q.send(message(Some("a")), 499), Sent::Duplicate);
    assert_eq!(q.send(message(None), 499), Sent::Enqueued(2), "no id: nothing to compare");
    assert_eq!(q.send(message(None), 499), Sent::Enqueued(3));
    assert_eq!(q.send(message(Some("a")), 500), Sent::Enqueued(4), "the window is over");
    assert_eq!(q.send(message(Some("a")), 600), Sent::Duplicate, "the window restarts with the accepted copy");
    // A completed message still counts: duplicate detection is about ids accepted.
    q.lock_next(SubQueue::Main, 600, token(1)).unwrap();
    q.settle(SubQueue::Main, &token(1), Settlement::Complete, 600).unwrap();
    assert_eq!(q.send(message(Some("a")), 700), Sent::Duplicate);
    assert_eq!(q.counters.duplicates_dropped, 3);

    let mut off = queue(1000, 10, None);
    assert_eq!(off.send(message(Some("a")), 0), Sent::Enqueued(1));
    assert_eq!(off.send(message(Some("a")), 0), Sent::Enqueued(2), "off by default");
}

/// One step of a random run.
#[derive(Debug, Clone)]
enum Op {
    Send(Option<u8>),
    Lock(SubQueue),
    Complete(usize),
    Abandon(usize),
    Release(usize),
    DeadLetter(usize),
    Renew(usize),
    /// Time passes; the sweeper does not run.
    Wait(u16),
    /// The lock-expiry sweeper runs.
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    let sub = prop_oneof![Just(SubQueue::Main), Just(SubQueue::DeadLetter)];
    prop_oneof![
        3 => proptest::option::of(0u8..6).prop_map(Op::Send),
        3 => sub.prop_map(Op::Lock),
        2 => any::<usize>().prop_map(Op::Complete),
        2 => any::<usize>().prop_map(Op::Abandon),
        1 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::DeadLetter),
        1 => any::<usize>().prop_map(Op::Renew),
        // Coarse steps, so that settling exactly at a lock's expiry happens.
        2 => (0u16..8).prop_map(|n| Op::Wait(n * 50)),
        1 => Just(Op::Sweep),
    ]
}

/// What the model knows of a message.
#[derive(Debug, Clone, PartialEq)]
struct Model {
    sub: SubQueue,
    count: u32,
    lock: Option<(LockToken, i64)>,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Nothing is lost or made up: every kept message is in exactly one place, with
    /// the delivery count the model predicts; settling needs a live lock; the
    /// maximum delivery count is never exceeded in the queue; a duplicate is only
    /// dropped inside the window.
    #[test]
    fn the_queue_agrees_with_a_model(ops in proptest::collection::vec(op(), 1..120)) {
        const LOCK: i64 = 300;
        const MAX: u32 = 3;
        const WINDOW: i64 = 250;
        let mut q = queue(LOCK as u64, MAX, Some(WINDOW as u64));
        let mut model: BTreeMap<i64, Model> = BTreeMap::new();
        let mut seen: BTreeMap<String, i64> = BTreeMap::new();
        let mut held: Vec<(SubQueue, LockToken, i64)> = Vec::new();
        let (mut now, mut next_token) = (0i64, 0u32);
        let fail = |m: &mut Model| {
            m.count += 1;
            m.lock = None;
            if m.sub == SubQueue::Main && m.count >= MAX {
                m.sub = SubQueue::DeadLetter;
            }
        };
        for op in ops {
            match op {
                Op::Send(id) => {
                    let id = id.map(|n| format!("id-{n}"));
                    let dup = id.as_ref().is_some_and(|i| seen.get(i).is_some_and(|at| now - at < WINDOW));
                    match q.send(message(id.as_deref()), now) {
                        Sent::Duplicate => prop_assert!(dup, "dropped outside the window"),
                        Sent::Refused(why) => prop_assert!(false, "refused: {}", why),
                        Sent::Enqueued(seq) => {
                            prop_assert!(!dup, "a duplicate was kept");
                            if let Some(i) = id {
                                seen.insert(i, now);
                            }
                            model.insert(seq, Model { sub: SubQueue::Main, count: 0, lock: None });
                        }
                    }
                }
                Op::Lock(sub) => {
                    next_token += 1;
                    let mut t = [0u8; 16];
                    t[..4].copy_from_slice(&next_token.to_be_bytes());
                    let want = model.iter().find(|(_, m)| m.sub == sub && m.lock.is_none()).map(|(s, _)| *s);
                    let got = q.lock_next(sub, now, t);
                    prop_assert_eq!(got.as_ref().map(|d| d.sequence), want);
                    if let Some(d) = got {
                        let m = model.get_mut(&d.sequence).unwrap();
                        prop_assert_eq!(delivered(&d).header.delivery_count, m.count);
                        m.lock = Some((t, now + LOCK));
                        held.push((sub, t, d.sequence));
                    }
                }
                Op::Complete(i) | Op::Abandon(i) | Op::Release(i) | Op::DeadLetter(i) | Op::Renew(i) => {
                    if held.is_empty() {
                        continue;
                    }
                    let (sub, t, seq) = held[i % held.len()];
                    let live = model.get(&seq).is_some_and(|m| m.sub == sub && m.lock.is_some_and(|(lt, until)| lt == t && until > now));
                    let expired = model.get(&seq).is_some_and(|m| m.lock.is_some_and(|(lt, until)| lt == t && until <= now));
                    let result = match &op {
                        Op::Renew(_) => q.renew(sub, &t, now).map(|_| ()),
                        Op::Complete(_) => q.settle(sub, &t, Settlement::Complete, now),
                        Op::Abandon(_) => q.settle(sub, &t, Settlement::Abandon { failed: true, annotations: vec![] }, now),
                        Op::Release(_) => q.settle(sub, &t, Settlement::Release, now),
                        _ => q.settle(sub, &t, Settlement::DeadLetter { reason: Some("r".into()), description: None }, now),
                    };
                    prop_assert_eq!(result.is_ok(), live, "{:?} on a lock that is live: {}", op, live);
                    if expired {
                        fail(model.get_mut(&seq).unwrap());
                    }
                    if live {
                        let m = model.get_mut(&seq).unwrap();
                        match op {
                            Op::Renew(_) => m.lock = Some((t, now + LOCK)),
                            Op::Complete(_) => { model.remove(&seq); }
                            Op::Abandon(_) => fail(m),
                            Op::Release(_) => m.lock = None,
                            _ => { m.lock = None; m.sub = SubQueue::DeadLetter; }
                        }
                    }
                }
                Op::Wait(d) => now += i64::from(d),
                Op::Sweep => {
                    q.expire(now);
                    for m in model.values_mut() {
                        if m.lock.is_some_and(|(_, until)| until <= now) {
                            fail(m);
                        }
                    }
                }
            }
            // The queue holds exactly what the model holds, where the model says.
            for sub in [SubQueue::Main, SubQueue::DeadLetter] {
                let want: Vec<(i64, u32, bool)> =
                    model.iter().filter(|(_, m)| m.sub == sub).map(|(s, m)| (*s, m.count, m.lock.is_some())).collect();
                let got: Vec<(i64, u32, bool)> =
                    q.entries(sub).iter().map(|(e, l)| (e.sequence, e.delivery_count, l.is_some())).collect();
                prop_assert_eq!(&got, &want, "{:?} at {}", sub, now);
            }
            prop_assert!(q.entries(SubQueue::Main).iter().all(|(e, _)| e.delivery_count < MAX));
        }
    }
}

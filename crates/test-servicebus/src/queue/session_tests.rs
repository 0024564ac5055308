//! Sessions: scenarios, then random runs of holders against a model (one holder per
//! session, FIFO within a session, nothing lost when a lock runs out).

use std::collections::BTreeMap;

use fe2o3_amqp_types::messaging::{Data, Properties};
use fe2o3_amqp_types::primitives::Binary;
use proptest::prelude::*;

use super::sessions::Refusal;
use super::*;

fn message(session: Option<&str>) -> StoredMessage {
    let mut payload = Vec::new();
    let props = Properties { group_id: session.map(str::to_owned), ..Properties::default() };
    payload.extend(serde_amqp::to_vec(&props).unwrap());
    payload.extend(serde_amqp::to_vec(&Data(Binary::from(b"body".to_vec()))).unwrap());
    StoredMessage::parse(&payload).unwrap()
}

fn queue(lock_ms: u64) -> Queue {
    Queue::new(
        "q",
        QueueConfig { lock_duration: Duration::from_millis(lock_ms), requires_session: true, ..QueueConfig::default() },
    )
}

fn token(n: u8) -> LockToken {
    [n; 16]
}

#[test]
fn a_session_entity_refuses_a_message_without_a_session_id() {
    let mut q = queue(1000);
    assert_eq!(q.send(message(None), 0), Sent::Refused(NO_SESSION_ID));
    assert_eq!(q.send(message(Some("s")), 0), Sent::Enqueued(1));
}

#[test]
fn a_holder_gets_its_session_only_in_order_and_no_one_else_gets_it() {
    let mut q = queue(1000);
    for s in ["a", "b", "a", "b", "a"] {
        q.send(message(Some(s)), 0);
    }
    assert_eq!(q.accept_session(Some("a"), 1, 0), Ok(("a".to_owned(), 1000)));
    assert_eq!(q.accept_session(Some("a"), 2, 10), Err(Refusal::Locked("a".to_owned())));
    let seqs: Vec<i64> =
        (0..4).filter_map(|n| q.lock_next_in(SubQueue::Main, Some("a"), 1, token(n)).map(|d| d.sequence)).collect();
    assert_eq!(seqs, [1, 3, 5], "only a's, oldest first");
    // A message locked in a session lasts as long as the session's lock.
    assert!(q.expire(999).is_empty());
    assert_eq!(q.next_deadline(), Some(1000));
    assert_eq!(q.accept_session(None, 2, 10), Ok(("b".to_owned(), 1010)), "next available: the unlocked one");
    assert_eq!(q.accept_session(None, 3, 10), Err(Refusal::NoneAvailable));
    // An empty session can be accepted by name.
    assert_eq!(q.accept_session(Some("empty"), 3, 10), Ok(("empty".to_owned(), 1010)));
}

#[test]
fn a_session_lock_renews_and_when_it_runs_out_its_messages_come_back_counted() {
    let mut q = queue(1000);
    q.send(message(Some("a")), 0);
    q.send(message(Some("a")), 0);
    q.accept_session(Some("a"), 7, 0).unwrap();
    q.lock_next_in(SubQueue::Main, Some("a"), 0, token(1)).unwrap();
    assert_eq!(q.renew_session("a", 8, 500), Err(sessions::SessionLost), "only the holder renews");
    assert_eq!(q.renew_session("a", 7, 500), Ok(1500));
    assert_eq!(q.renew(SubQueue::Main, &token(1), 600), Ok(1500), "a message lock in a session is the session's");
    assert!(q.expire(1200).is_empty());
    assert!(q.holds_session("a", 7, 1499));
    assert_eq!(q.settle(SubQueue::Main, &token(1), Settlement::Complete, 1400), Ok(()), "still held: settles");
    q.lock_next_in(SubQueue::Main, Some("a"), 1400, token(2)).unwrap();
    assert_eq!(q.expire(1500), vec![SubQueue::Main]);
    assert!(!q.holds_session("a", 7, 1500));
    assert_eq!(q.renew_session("a", 7, 1500), Err(sessions::SessionLost));
    assert_eq!(q.settle(SubQueue::Main, &token(2), Settlement::Complete, 1501), Err(LockLost));
    let (id, _) = q.accept_session(None, 9, 1501).unwrap();
    let d = q.lock_next_in(SubQueue::Main, Some(&id), 1501, token(3)).unwrap();
    assert_eq!(StoredMessage::parse(&d.payload).unwrap().header.delivery_count, 1);
}

#[test]
fn session_state_is_kept_per_session_for_its_holder() {
    let mut q = queue(1000);
    q.accept_session(Some("a"), 1, 0).unwrap();
    assert_eq!(q.session_state("a", 1, 0), Ok(None));
    q.set_session_state("a", 1, Some(b"x".to_vec()), 1).unwrap();
    assert_eq!(q.set_session_state("a", 2, None, 1), Err(sessions::SessionLost));
    assert_eq!(q.session_state("a", 2, 1), Err(sessions::SessionLost));
    q.release_session("a", 1);
    assert!(q.session_state("a", 1, 2).is_err(), "released: not held");
    q.accept_session(Some("a"), 2, 3).unwrap();
    assert_eq!(q.session_state("a", 2, 3), Ok(Some(b"x".to_vec())), "the state outlives its holder");
}

/// One step of a random run: holders 0..3 over sessions a, b, c.
#[derive(Debug, Clone)]
enum Op {
    Send(u8),
    Accept { holder: u64, session: Option<u8> },
    Lock(u64),
    Complete(usize),
    Renew(u64),
    Release(u64),
    Wait(u16),
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..3).prop_map(Op::Send),
        2 => (0u64..3, proptest::option::of(0u8..3)).prop_map(|(holder, session)| Op::Accept { holder, session }),
        3 => (0u64..3).prop_map(Op::Lock),
        2 => any::<usize>().prop_map(Op::Complete),
        1 => (0u64..3).prop_map(Op::Renew),
        1 => (0u64..3).prop_map(Op::Release),
        2 => (0u16..6).prop_map(|n| Op::Wait(n * 100)),
        1 => Just(Op::Sweep),
    ]
}

fn name(n: u8) -> String {
    ["a", "b", "c"][usize::from(n % 3)].to_owned()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// At most one holder per session at any time; a holder receives only its
    /// session's messages, oldest first; a lock that runs out (or is let go) gives
    /// its messages back; nothing is lost or duplicated.
    #[test]
    fn sessions_agree_with_a_model(ops in proptest::collection::vec(op(), 1..120)) {
        const LOCK: i64 = 400;
        let mut q = queue(LOCK as u64);
        q.config.max_delivery_count = 10_000; // the model does not count deliveries
        // session -> (holder, until)
        let mut holders: BTreeMap<String, (u64, i64)> = BTreeMap::new();
        // sequence -> (session, locked by token)
        let mut messages: BTreeMap<i64, (String, Option<LockToken>)> = BTreeMap::new();
        let mut held_tokens: Vec<(LockToken, i64)> = Vec::new();
        let (mut now, mut n) = (0i64, 0u32);
        let live = |holders: &BTreeMap<String, (u64, i64)>, s: &str, now: i64| holders.get(s).filter(|(_, u)| *u > now).copied();
        for op in ops {
            match op {
                Op::Send(s) => {
                    let Sent::Enqueued(seq) = q.send(message(Some(&name(s))), now) else { panic!("kept") };
                    messages.insert(seq, (name(s), None));
                }
                Op::Accept { holder, session } => {
                    let got = q.accept_session(session.map(name).as_deref(), holder, now);
                    match session.map(name) {
                        Some(s) => {
                            let free = live(&holders, &s, now).is_none();
                            prop_assert_eq!(got.is_ok(), free, "accept {} at {}", s, now);
                            if free {
                                // A lapsed lock gives its messages back first.
                                for m in messages.values_mut().filter(|m| m.0 == s) { m.1 = None; }
                                holders.insert(s, (holder, now + LOCK));
                            }
                        }
                        None => {
                            let want = messages.values().filter(|m| m.1.is_none()).map(|m| m.0.clone())
                                .find(|s| live(&holders, s, now).is_none());
                            prop_assert_eq!(got.as_ref().ok().map(|(s, _)| s.clone()), want.clone());
                            if let Some(s) = want {
                                for m in messages.values_mut().filter(|m| m.0 == s) { m.1 = None; }
                                holders.insert(s, (holder, now + LOCK));
                            }
                        }
                    }
                }
                Op::Lock(holder) => {
                    let Some(s) = holders.iter().find(|(_, (h, u))| *h == holder && *u > now).map(|(s, _)| s.clone()) else { continue };
                    n += 1;
                    let mut t = [0u8; 16];
                    t[..4].copy_from_slice(&n.to_be_bytes());
                    let want = messages.iter().find(|(_, m)| m.0 == s && m.1.is_none()).map(|(seq, _)| *seq);
                    let got = q.lock_next_in(SubQueue::Main, Some(&s), now, t).map(|d| d.sequence);
                    prop_assert_eq!(got, want);
                    if let Some(seq) = got {
                        messages.get_mut(&seq).unwrap().1 = Some(t);
                        held_tokens.push((t, seq));
                    }
                }
                Op::Complete(i) => {
                    if held_tokens.is_empty() { continue; }
                    let (t, seq) = held_tokens[i % held_tokens.len()];
                    let ok = messages.get(&seq).is_some_and(|m| m.1 == Some(t) && live(&holders, &m.0, now).is_some());
                    let got = q.settle(SubQueue::Main, &t, Settlement::Complete, now);
                    if ok {
                        prop_assert_eq!(got, Ok(()));
                        messages.remove(&seq);
                    } else if let Some(s) = messages.get(&seq).filter(|m| m.1 == Some(t)).map(|m| m.0.clone()) {
                        // Its session lock ran out, not swept yet: lost, and the session's messages come back.
                        prop_assert_eq!(got, Err(LockLost));
                        for m in messages.values_mut().filter(|m| m.0 == s) { m.1 = None; }
                    } else {
                        prop_assert_eq!(got, Err(LockLost));
                    }
                }
                Op::Renew(holder) => {
                    for (s, (h, until)) in holders.iter_mut() {
                        if *h == holder {
                            let got = q.renew_session(s, holder, now);
                            prop_assert_eq!(got.is_ok(), *until > now);
                            if *until > now { *until = now + LOCK; }
                        }
                    }
                }
                Op::Release(holder) => {
                    let mine: Vec<String> = holders.iter().filter(|(_, (h, _))| *h == holder).map(|(s, _)| s.clone()).collect();
                    for s in mine {
                        q.release_session(&s, holder);
                        holders.remove(&s);
                        for m in messages.values_mut().filter(|m| m.0 == s) { m.1 = None; }
                    }
                }
                Op::Wait(d) => now += i64::from(d),
                Op::Sweep => {
                    q.expire(now);
                    let lapsed: Vec<String> = holders.iter().filter(|(_, (_, u))| *u <= now).map(|(s, _)| s.clone()).collect();
                    for s in lapsed {
                        holders.remove(&s);
                        for m in messages.values_mut().filter(|m| m.0 == s) { m.1 = None; }
                    }
                }
            }
            let got: Vec<(i64, bool)> = q.entries(SubQueue::Main).iter().map(|(e, l)| (e.sequence, l.is_some())).collect();
            let want: Vec<(i64, bool)> = messages.iter().map(|(s, m)| (*s, m.1.is_some())).collect();
            prop_assert_eq!(got, want, "at {}", now);
            for (s, (h, until)) in &holders {
                prop_assert_eq!(q.holds_session(s, *h, now), *until > now);
            }
        }
    }
}

//! Key encoding under hostile names and ids of every type: no hash-tag breakage, no
//! collisions, every key parses back.

use adapter_redis::keys::{KeyKind, KeySpace, decode_name, encode_name, hash_tag};
use drain_core::ports::{LeaseName, MessageId};
use proptest::prelude::*;

fn name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Anything at all, including invalid UTF-8 and control bytes.
        proptest::collection::vec(any::<u8>(), 0..40),
        // Mostly the dangerous characters.
        proptest::collection::vec(prop::sample::select(b"{}:%% ab-_.\x00\n\xff".to_vec()), 0..20),
    ]
}

fn id() -> impl Strategy<Value = MessageId> {
    prop_oneof![
        name().prop_map(|b| MessageId::String(String::from_utf8_lossy(&b).into_owned())),
        any::<u64>().prop_map(MessageId::Ulong),
        any::<[u8; 16]>().prop_map(MessageId::Uuid),
        name().prop_map(MessageId::Binary),
        // The texts other types look like.
        (0u64..100).prop_map(|n| MessageId::String(format!("ulong:{n}"))),
        (0u64..100).prop_map(|n| MessageId::String(n.to_string())),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    #[test]
    fn encoding_is_injective_and_reversible(a in name(), b in name()) {
        let (ea, eb) = (encode_name(&a), encode_name(&b));
        prop_assert_eq!(decode_name(&ea), Some(a.clone()));
        prop_assert_eq!(a == b, ea == eb, "distinct names must give distinct encodings");
        prop_assert!(ea.bytes().all(|c| c.is_ascii_alphanumeric() || b"-_.%".contains(&c)), "{}", ea);
    }

    #[test]
    fn every_key_of_a_queue_shares_its_tag_and_parses_back(q in name(), id in id()) {
        let ks = KeySpace::new("t");
        let q_str = String::from_utf8_lossy(&q).into_owned();
        let lease = ks.lease(&LeaseName::queue(q_str.clone()));
        let msg = ks.message_claim(&q_str, &id);
        let tag = encode_name(q_str.as_bytes());
        prop_assert_eq!(hash_tag(&lease.lease), tag.as_str());
        prop_assert_eq!(hash_tag(&lease.fence), tag.as_str());
        prop_assert_eq!(hash_tag(&msg), tag.as_str());
        prop_assert_eq!(ks.parse(&lease.lease), Some(KeyKind::Lease { queue: q_str.clone().into_bytes() }));
        prop_assert_eq!(ks.parse(&msg), Some(KeyKind::MessageClaim { queue: q_str.into_bytes(), message_id: id }));
    }

    #[test]
    fn distinct_queues_or_ids_never_share_a_claim_key(q1 in name(), q2 in name(), i1 in id(), i2 in id()) {
        let ks = KeySpace::new("t");
        let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let (a, b) = ((s(&q1), i1), (s(&q2), i2));
        prop_assert_eq!(a == b, ks.message_claim(&a.0, &a.1) == ks.message_claim(&b.0, &b.1));
        let (la, lb) = (LeaseName::queue(a.0.clone()), LeaseName::queue(b.0.clone()));
        prop_assert_eq!(a.0 == b.0, ks.lease(&la) == ks.lease(&lb));
        prop_assert_ne!(ks.lease(&la).lease, ks.lease(&LeaseName::owner(a.0.clone())).lease, "kinds never meet");
    }
}

#[test]
fn ten_kib_names_are_fine() {
    let ks = KeySpace::new("t");
    let big = "{".repeat(10 * 1024);
    let key = ks.lease(&LeaseName::queue(big)).lease;
    assert_eq!(key.len(), "t:lease:{}".len() + 3 * 10 * 1024);
    assert_eq!(hash_tag(&key).len(), 3 * 10 * 1024);
}

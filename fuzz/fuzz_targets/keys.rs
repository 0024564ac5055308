//! Key encoding (adapter-redis `keys`): `encode_name`/`decode_name` round trip and
//! canonical form, every builder's key parses back and carries its name's encoding
//! as its hash tag, distinct names give distinct keys, and whatever `parse` accepts
//! is rebuilt exactly.
#![no_main]

use adapter_redis::keys::{KeyKind, KeySpace, decode_name, encode_name, hash_tag};
use drain_core::ports::{LeaseName, MessageId};
use libfuzzer_sys::fuzz_target;

fn round_trip(name: &[u8]) {
    let enc = encode_name(name);
    assert!(enc.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.%".contains(&b)), "{enc}");
    assert_eq!(decode_name(&enc).as_deref(), Some(name), "decode(encode(x)) == x");
}

fn keys_of(ks: &KeySpace, q: &str, id: &str) {
    let tag = encode_name(q.as_bytes());
    let lease = ks.lease(&LeaseName::queue(q));
    for key in [&lease.lease, &lease.fence] {
        assert_eq!(hash_tag(key), tag, "{key}");
    }
    assert_eq!(ks.parse(&lease.lease), Some(KeyKind::Lease { queue: q.as_bytes().to_vec() }));
    assert_eq!(ks.parse(&lease.fence), Some(KeyKind::Fence { queue: q.as_bytes().to_vec() }));
    for id in [MessageId::from(id), MessageId::Binary(id.as_bytes().to_vec()), MessageId::Ulong(id.len() as u64)] {
        let msg = ks.message_claim(q, &id);
        assert_eq!(hash_tag(&msg), tag, "a queue's claims share its slot");
        let expected = KeyKind::MessageClaim { queue: q.as_bytes().to_vec(), message_id: id };
        assert_eq!(ks.parse(&msg), Some(expected));
    }
    let owner = ks.lease(&LeaseName::owner(q));
    assert_eq!(owner.lease, ks.owner_claim(q));
    assert_eq!(ks.parse(&owner.lease), Some(KeyKind::OwnerClaim { owner: q.as_bytes().to_vec() }));
    assert_eq!(ks.parse(&owner.fence), Some(KeyKind::OwnerFence { owner: q.as_bytes().to_vec() }));
    assert_eq!(hash_tag(&owner.fence), tag);
    let waiters = ks.owner_waiters(q);
    assert_eq!(hash_tag(&waiters), tag, "an owner's waiter list shares its claim's slot");
    assert_eq!(ks.parse(&waiters), Some(KeyKind::OwnerWaiters { owner: q.as_bytes().to_vec() }));
    assert_eq!(ks.parse(&ks.wake_channel(q)), None, "a wake channel is not a key");
    let job = ks.lease(&LeaseName::job(q));
    assert_eq!(hash_tag(&job.lease), hash_tag(&job.fence), "a job's lease and fence share a slot");
    assert_eq!(ks.parse(&job.lease), Some(KeyKind::Job { job: q.as_bytes().to_vec() }));
    assert_eq!(ks.parse(&job.fence), Some(KeyKind::JobFence { job: q.as_bytes().to_vec() }));
}

fn rebuild(ks: &KeySpace, kind: &KeyKind) -> Option<String> {
    let s = |b: &Vec<u8>| String::from_utf8(b.clone()).ok();
    Some(match kind {
        KeyKind::Lease { queue } => ks.lease(&LeaseName::queue(s(queue)?)).lease,
        KeyKind::Fence { queue } => ks.lease(&LeaseName::queue(s(queue)?)).fence,
        KeyKind::OwnerClaim { owner } => ks.owner_claim(&s(owner)?),
        KeyKind::OwnerFence { owner } => ks.lease(&LeaseName::owner(s(owner)?)).fence,
        KeyKind::OwnerWaiters { owner } => ks.owner_waiters(&s(owner)?),
        KeyKind::Job { job } => ks.lease(&LeaseName::job(s(job)?)).lease,
        KeyKind::JobFence { job } => ks.lease(&LeaseName::job(s(job)?)).fence,
        KeyKind::MessageClaim { queue, message_id } => ks.message_claim(&s(queue)?, message_id),
    })
}

fuzz_target!(|data: &[u8]| {
    round_trip(data);
    let split = data.iter().position(|&b| b == 0xA7).unwrap_or(data.len());
    let (a, b) = (&data[..split], data.get(split + 1..).unwrap_or_default());
    round_trip(a);
    round_trip(b);
    if a != b {
        assert_ne!(encode_name(a), encode_name(b), "injective");
    }

    let ks = KeySpace::new("p:x");
    let (qa, qb) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    keys_of(&ks, &qa, &qb);
    if qa != qb {
        assert_ne!(ks.lease(&LeaseName::queue(qa.as_ref())), ks.lease(&LeaseName::queue(qb.as_ref())));
        let (ia, ib) = (MessageId::from(qa.as_ref()), MessageId::from(qb.as_ref()));
        assert_ne!(ks.message_claim(&qa, &ib), ks.message_claim(&qb, &ia));
        assert_ne!(ks.owner_claim(&qa), ks.owner_claim(&qb));
        assert_ne!(ks.owner_waiters(&qa), ks.owner_waiters(&qb));
        assert_ne!(ks.wake_channel(&qa), ks.wake_channel(&qb));
    }

    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(bytes) = decode_name(text) {
            assert_eq!(encode_name(&bytes), text, "decode accepts only the canonical encoding");
        }
        for prefix in ["p:x", "drain"] {
            let ks = KeySpace::new(prefix);
            if let Some(kind) = ks.parse(text)
                && let Some(again) = rebuild(&ks, &kind)
            {
                assert_eq!(again, text, "parse then build gives the key back");
            }
        }
    }
});

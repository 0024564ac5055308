use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::ErrorKind;
use crate::ports::{Delivery, MessageSource, SubmitContext, Submitter};
use crate::testkit::message;

/// Receive until `want` deliveries arrived or `rounds` receives came back empty.
async fn collect<S: MessageSource + ?Sized>(source: &S, want: usize, max_wait: Duration) -> Vec<Delivery> {
    let mut out = Vec::new();
    let mut empty_rounds = 0;
    while out.len() < want && empty_rounds < 5 {
        let got = source.receive(want - out.len(), max_wait).await.expect("receive");
        assert!(got.len() <= want - out.len(), "receive MUST NOT return more than max");
        if got.is_empty() {
            empty_rounds += 1;
        }
        out.extend(got);
    }
    out
}

/// The [`MessageSource`] contract: what is fed arrives intact; complete removes;
/// abandon redelivers; dead-letter moves to the dead-letter queue; a handle settles
/// once; `max` is respected; an empty queue returns empty; renewal matches the
/// capability flag.
///
/// `source` must start empty. `feed` puts messages on the same queue; when
/// `dead_letters` is given it receives from the queue's dead-letter queue, which must
/// start empty too. `max_wait` is the wait for one receive (e.g. 500 ms on a broker).
///
/// # Panics
/// On the first broken rule, naming it.
pub async fn message_source<S: MessageSource + ?Sized>(
    source: &S,
    feed: &dyn Submitter,
    dead_letters: Option<&dyn MessageSource>,
    max_wait: Duration,
) {
    let ctx = SubmitContext { queue: "contract", fence: None };
    assert!(
        source.receive(10, max_wait).await.expect("receive on empty").is_empty(),
        "the queue MUST start empty for this suite"
    );

    let ids = ["c1", "c2", "c3"];
    for id in ids {
        feed.submit(&message(id), &ctx).await.expect("feed");
    }
    let got = collect(source, 3, max_wait).await;
    let by_id: BTreeMap<String, &Delivery> =
        got.iter().map(|d| (d.message.message_id.clone().expect("message id MUST arrive"), d)).collect();
    assert_eq!(by_id.keys().map(String::as_str).collect::<Vec<_>>(), ids, "every fed message MUST arrive once");
    for (id, d) in &by_id {
        assert_eq!(d.message.body, message(id).body, "the body MUST arrive intact");
        assert_eq!(d.message.content_type.as_deref(), Some("text/plain"), "content type MUST arrive");
    }
    let (c1, c2, c3) = (by_id["c1"].handle, by_id["c2"].handle, by_id["c3"].handle);

    source.complete(c1).await.expect("complete");
    source.abandon(c2).await.expect("abandon");
    source.dead_letter(c3, "ContractTest", "dead-lettered by the contract suite").await.expect("dead-letter");
    for (what, r) in [("complete", source.complete(c1).await), ("abandon", source.abandon(c1).await)] {
        let e = r.expect_err("settling a settled delivery MUST fail");
        assert_eq!(e.kind, ErrorKind::LockLost, "{what} of a settled delivery MUST be LockLost, got {e}");
    }

    let again = collect(source, 1, max_wait).await;
    assert_eq!(again.len(), 1, "an abandoned message MUST be redelivered");
    assert_eq!(again[0].message.message_id.as_deref(), Some("c2"), "only the abandoned message comes back");
    source.complete(again[0].handle).await.expect("complete redelivery");
    assert!(source.receive(10, max_wait).await.expect("receive").is_empty(), "completed messages MUST be gone");

    if let Some(dlq) = dead_letters {
        let dead = collect(dlq, 1, max_wait).await;
        assert_eq!(dead.len(), 1, "a dead-lettered message MUST reach the dead-letter queue");
        assert_eq!(dead[0].message.message_id.as_deref(), Some("c3"));
        dlq.complete(dead[0].handle).await.expect("complete dead letter");
    }

    // `max` is respected.
    for i in 0..5 {
        feed.submit(&message(&format!("m{i}")), &ctx).await.expect("feed");
    }
    let first = source.receive(2, max_wait).await.expect("receive 2");
    assert!(
        !first.is_empty() && first.len() <= 2,
        "receive(2) MUST return 1..=2 when messages wait, got {}",
        first.len()
    );
    let rest = collect(source, 5 - first.len(), max_wait).await;
    assert_eq!(first.len() + rest.len(), 5, "every message MUST arrive");

    // Renewal matches the capability.
    let probe = first[0].handle;
    match (source.capabilities().lock_renewal, source.renew_lock(probe).await) {
        (true, Ok(d)) => assert!(d > Duration::ZERO, "a renewed lock MUST last"),
        (false, Err(e)) => {
            assert_eq!(e.kind, ErrorKind::Unsupported, "renewal without the capability MUST be Unsupported")
        }
        (cap, r) => panic!("renew_lock MUST match capabilities().lock_renewal={cap}, got {r:?}"),
    }
    for d in first.iter().chain(&rest) {
        source.complete(d.handle).await.expect("complete");
    }
    assert!(source.receive(10, max_wait).await.expect("receive").is_empty(), "the queue MUST end empty");
}

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Checked, Rule, Tally, Violation};
use crate::error::ErrorKind;
use crate::ports::{Delivery, Message, MessageId, MessageSource, SubmitContext, Submitter};
use crate::testkit::message;

/// Receive until `want` deliveries arrived or five receives came back empty.
async fn collect<S: MessageSource + ?Sized>(
    s: &mut Tally,
    source: &S,
    want: usize,
    max_wait: Duration,
) -> Result<Vec<Delivery>, Violation> {
    let mut out = Vec::new();
    let mut empty_rounds = 0;
    while out.len() < want && empty_rounds < 5 {
        let max = want - out.len();
        let got = s.answer("receive", source.receive(max, max_wait).await)?;
        s.ensure(got.len() <= max, Rule::SourceReceiveMax, || format!("receive({max}) returned {}", got.len()))?;
        if got.is_empty() {
            empty_rounds += 1;
        }
        out.extend(got);
    }
    Ok(out)
}

fn id_of(d: &Delivery) -> String {
    d.message.message_id.as_ref().map(ToString::to_string).unwrap_or_default()
}

/// A message with every header a target keeps, and an id of another type.
fn full(id: u64) -> Message {
    Message {
        message_id: Some(MessageId::Ulong(id)),
        correlation_id: Some(MessageId::String(format!("corr-{id}"))),
        subject: Some("contract".to_owned()),
        reply_to: Some("contract-replies".to_owned()),
        ..message("unused")
    }
}

/// The [`MessageSource`] contract: what is fed arrives once and intact; complete
/// removes; abandon redelivers; dead-letter moves to the dead-letter queue; a handle
/// settles once; `max` is respected; renewal and release match the capabilities
/// (a release counts no delivery).
///
/// `source` must start empty. `feed` puts messages on the same queue; when
/// `dead_letters` is given it receives from the queue's dead-letter queue, which must
/// start empty too (without it, dead-lettering is only checked not to come back).
/// `max_wait` is the wait for one receive (e.g. 500 ms on a broker).
///
/// # Errors
/// The first rule the source broke.
pub async fn message_source<S: MessageSource + ?Sized>(
    source: &S,
    feed: &dyn Submitter,
    dead_letters: Option<&dyn MessageSource>,
    max_wait: Duration,
) -> Result<Checked, Violation> {
    let mut s = Tally::default();
    let ctx = SubmitContext { queue: "contract", fence: None };
    let first = s.answer("receive", source.receive(10, max_wait).await)?;
    s.ensure(first.is_empty(), Rule::SourceReceiveIntact, || {
        format!("the queue must start empty for this suite; it held {}", first.len())
    })?;

    let ids = ["c1", "c2", "c3"];
    for id in ids {
        s.answer("feed", feed.submit(&message(id), &ctx).await)?;
    }
    let typed = full(42);
    s.answer("feed", feed.submit(&typed, &ctx).await)?;
    let got = collect(&mut s, source, 4, max_wait).await?;
    let by_id: BTreeMap<String, &Delivery> = got.iter().map(|d| (id_of(d), d)).collect();
    let want: Vec<String> = ids.iter().map(|i| (*i).to_owned()).chain(["ulong:42".to_owned()]).collect();
    s.ensure(got.len() == 4 && by_id.keys().cloned().collect::<Vec<_>>() == want, Rule::SourceReceiveIntact, || {
        format!("fed {want:?}, received {:?}", got.iter().map(id_of).collect::<Vec<_>>())
    })?;
    for id in ids {
        let d = by_id[id];
        let m = message(id);
        s.ensure(
            d.message.body == m.body && d.message.content_type == m.content_type,
            Rule::SourceReceiveIntact,
            || format!("{id} arrived as {:?}", d.message),
        )?;
    }
    let d = by_id["ulong:42"];
    let same = d.message.message_id == typed.message_id
        && d.message.correlation_id == typed.correlation_id
        && d.message.subject == typed.subject
        && d.message.reply_to == typed.reply_to;
    s.ensure(same, Rule::SourceReceiveIntact, || format!("sent {typed:?}, received {:?}", d.message))?;
    let (c1, c2, c3, c4) = (by_id["c1"].handle, by_id["c2"].handle, by_id["c3"].handle, d.handle);

    s.answer("complete", source.complete(c1).await)?;
    s.answer("complete", source.complete(c4).await)?;
    s.answer("abandon", source.abandon(c2).await)?;
    s.answer("dead_letter", source.dead_letter(c3, "ContractTest", "dead-lettered by the contract suite").await)?;
    for (what, r) in [("complete", source.complete(c1).await), ("abandon", source.abandon(c1).await)] {
        s.ensure(r.as_ref().is_err_and(|e| e.kind == ErrorKind::LockLost), Rule::SourceSettleOnce, || {
            format!("{what} of a settled delivery answered {r:?}")
        })?;
    }

    let again = collect(&mut s, source, 2, max_wait).await?;
    s.ensure(again.len() == 1 && id_of(&again[0]) == "c2", Rule::SourceAbandonRedelivers, || {
        format!(
            "after abandoning c2 (and completing c1, dead-lettering c3) the queue gave {:?}",
            again.iter().map(id_of).collect::<Vec<_>>()
        )
    })?;
    s.answer("complete", source.complete(again[0].handle).await)?;
    let rest = s.answer("receive", source.receive(10, max_wait).await)?;
    s.ensure(rest.is_empty(), Rule::SourceCompleteRemoves, || {
        format!("completed messages came back: {:?}", rest.iter().map(id_of).collect::<Vec<_>>())
    })?;

    if dead_letters.is_none() {
        s.skip(&[Rule::SourceDeadLetter], "no dead-letter source given");
    }
    if let Some(dlq) = dead_letters {
        let dead = collect(&mut s, dlq, 1, max_wait).await?;
        s.ensure(dead.len() == 1 && id_of(&dead[0]) == "c3", Rule::SourceDeadLetter, || {
            format!("the dead-letter queue gave {:?}, not c3", dead.iter().map(id_of).collect::<Vec<_>>())
        })?;
        s.answer("complete", dlq.complete(dead[0].handle).await)?;
    }

    // `max` is respected.
    for i in 0..5 {
        s.answer("feed", feed.submit(&message(&format!("m{i}")), &ctx).await)?;
    }
    let first = s.answer("receive", source.receive(2, max_wait).await)?;
    s.ensure(!first.is_empty() && first.len() <= 2, Rule::SourceReceiveMax, || {
        format!("receive(2) with 5 messages waiting returned {}", first.len())
    })?;
    let rest = collect(&mut s, source, 5 - first.len(), max_wait).await?;
    s.ensure(first.len() + rest.len() == 5, Rule::SourceReceiveIntact, || {
        format!("fed 5, received {}", first.len() + rest.len())
    })?;

    // Renewal matches the capability.
    let probe = first[0].handle;
    let cap = source.capabilities().lock_renewal;
    let r = source.renew_lock(probe).await;
    let ok = match (&r, cap) {
        (Ok(d), true) => *d > Duration::ZERO,
        (Err(e), false) => e.kind == ErrorKind::Unsupported,
        _ => false,
    };
    s.ensure(ok, Rule::SourceRenewCapability, || format!("renew_lock with lock_renewal={cap} answered {r:?}"))?;

    // Release matches the capability and counts no delivery.
    let mut settle: Vec<Delivery> = first.iter().skip(1).chain(&rest).cloned().collect();
    let given = first[0].clone();
    let r = source.release(given.handle).await;
    if source.capabilities().release {
        s.ensure(r.is_ok(), Rule::SourceReleaseUncounted, || format!("release with release=true answered {r:?}"))?;
        let back = collect(&mut s, source, 1, max_wait).await?;
        let same = back.len() == 1 && id_of(&back[0]) == id_of(&given);
        s.ensure(same && back[0].delivery_count == given.delivery_count, Rule::SourceReleaseUncounted, || {
            format!(
                "{} (delivery count {}) released came back as {:?}",
                id_of(&given),
                given.delivery_count,
                back.iter().map(|d| (id_of(d), d.delivery_count)).collect::<Vec<_>>()
            )
        })?;
        settle.extend(back);
    } else {
        let unsupported = r.as_ref().is_err_and(|e| e.kind == ErrorKind::Unsupported);
        s.ensure(unsupported, Rule::SourceReleaseUncounted, || format!("release with release=false answered {r:?}"))?;
        settle.push(given);
    }
    for d in &settle {
        s.answer("complete", source.complete(d.handle).await)?;
    }
    let left = s.answer("receive", source.receive(10, max_wait).await)?;
    s.ensure(left.is_empty(), Rule::SourceCompleteRemoves, || {
        format!("the queue must end empty; it held {}", left.len())
    })?;
    Ok(s.finish())
}

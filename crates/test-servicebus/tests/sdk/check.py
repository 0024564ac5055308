"""Microsoft's azure-servicebus SDK against test-servicebus, public API only.

Usage: python check.py '<connection string of the broker>' [CHECK_NAME ...]
(names given: only those checks run)

The broker must have the entities of tests/sdk/Config.json (Microsoft's emulator
configuration; tests/sdk.rs starts the broker with `--config` on it):
  basic        defaults (lock 60 s, max delivery 10)
  expiry       a lock left to expire (2 s)
  poison       dead-lettered after two failed deliveries
  dedup        duplicate detection
  sessions     requires sessions (session lock 30 s)
  shortsessions  requires sessions (session lock 2 s, left to run out)
  shortlived   time to live 1 s, dead-lettered on expiry
  droplived    expired messages dropped
  later        scheduled, deferred and peeked messages
  orders       a topic: subscriptions all, eu (a correlation filter), everything (SQL 1=1)

Each check prints `ok <name>` or `FAILED <name>: <why>`; the last line is
`sdk-check: N passed, M failed`, and the exit status is 0 only when nothing failed.
Timeouts are short (retry_total=0, timeout=5): a settlement the broker does not
confirm fails within seconds instead of being retried or settled another way.
"""

import datetime
import sys
import threading
import time
import traceback

from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import (
    MessageNotFoundError,
    ServiceBusAuthenticationError,
    ServiceBusError,
    SessionCannotBeLockedError,
)

CONN = sys.argv[1]
WAIT = 2  # seconds a receive waits for its first message


def client(conn=CONN):
    return ServiceBusClient.from_connection_string(conn, retry_total=0, timeout=5)


def expect(cond, why):
    if not cond:
        raise AssertionError(why)


def receive(receiver, n, wait=WAIT):
    """Up to n messages, waiting at most `wait` seconds for each batch."""
    got = []
    deadline = time.time() + wait + 3
    while len(got) < n and time.time() < deadline:
        batch = receiver.receive_messages(max_message_count=n - len(got), max_wait_time=wait)
        if not batch:
            break
        got.extend(batch)
    return got


def now():
    return datetime.datetime.now(datetime.timezone.utc)


def check_send_with_ids_and_complete(sb):
    with sb.get_queue_sender("basic") as sender:
        sender.send_messages([ServiceBusMessage(f"body-{i}", message_id=f"batch-{i}") for i in range(3)])
        sender.send_messages(ServiceBusMessage("single", message_id="single-1", application_properties={"tenant": "t1"}))
    with sb.get_queue_receiver("basic") as receiver:
        msgs = receive(receiver, 4)
        ids = [m.message_id for m in msgs]
        expect(ids == ["batch-0", "batch-1", "batch-2", "single-1"], f"ids in order: {ids}")
        expect([str(m) for m in msgs] == ["body-0", "body-1", "body-2", "single"], "bodies")
        seqs = [m.sequence_number for m in msgs]
        expect(seqs == sorted(seqs) and len(set(seqs)) == 4, f"sequence numbers {seqs}")
        expect(len({m.lock_token for m in msgs}) == 4 and all(m.lock_token for m in msgs), "a lock token each")
        expect(all(m.locked_until_utc > now() for m in msgs), "locked until the future")
        expect(all(m.enqueued_time_utc is not None for m in msgs), "enqueued time")
        expect(all(m.delivery_count == 0 for m in msgs), f"first delivery: {[m.delivery_count for m in msgs]}")
        expect(msgs[3].application_properties.get(b"tenant") == b"t1", f"properties {msgs[3].application_properties}")
        for m in msgs:
            receiver.complete_message(m)
        expect(receive(receiver, 1, wait=1) == [], "completed messages are gone")


def check_abandon_raises_the_delivery_count(sb):
    with sb.get_queue_sender("basic") as sender:
        sender.send_messages(ServiceBusMessage("again", message_id="abandon-1"))
    with sb.get_queue_receiver("basic") as receiver:
        [m] = receive(receiver, 1)
        expect(m.delivery_count == 0, "first delivery")
        receiver.abandon_message(m)
        [m] = receive(receiver, 1)
        expect(m.message_id == "abandon-1", "the same message comes back")
        expect(m.delivery_count == 1, f"delivery count after an abandon: {m.delivery_count}")
        receiver.complete_message(m)


def check_dead_letter_with_reason(sb):
    with sb.get_queue_sender("basic") as sender:
        sender.send_messages(ServiceBusMessage("poison", message_id="dead-1"))
    with sb.get_queue_receiver("basic") as receiver:
        [m] = receive(receiver, 1)
        receiver.dead_letter_message(m, reason="BadPayload", error_description="cannot parse the body")
        expect(receive(receiver, 1, wait=1) == [], "gone from the queue")
    with sb.get_queue_receiver("basic", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        [d] = receive(dlq, 1)
        expect(d.message_id == "dead-1", "in the dead-letter queue")
        expect(d.dead_letter_reason == "BadPayload", f"reason {d.dead_letter_reason!r}")
        expect(d.dead_letter_error_description == "cannot parse the body", f"description {d.dead_letter_error_description!r}")
        dlq.complete_message(d)
        expect(receive(dlq, 1, wait=1) == [], "completed in the dead-letter queue")


def check_renew_lock_advances_locked_until(sb):
    with sb.get_queue_sender("basic") as sender:
        sender.send_messages(ServiceBusMessage("slow", message_id="renew-1"))
    with sb.get_queue_receiver("basic") as receiver:
        [m] = receive(receiver, 1)
        before = m.locked_until_utc
        time.sleep(1.2)
        returned = receiver.renew_message_lock(m)
        expect(returned > before, f"renewed until {returned}, was {before}")
        expect(m.locked_until_utc == returned, "the message knows its new lock")
        receiver.complete_message(m)


def check_an_expired_lock_redelivers_with_count_plus_one(sb):
    with sb.get_queue_sender("expiry") as sender:
        sender.send_messages(ServiceBusMessage("forgotten", message_id="expire-1"))
    with sb.get_queue_receiver("expiry") as receiver:
        [m] = receive(receiver, 1)
        first_token = m.lock_token
        expect(m.delivery_count == 0, "first delivery")
        time.sleep(max(0.0, (m.locked_until_utc - now()).total_seconds()) + 0.5)
        [again] = receive(receiver, 1)
        expect(again.message_id == "expire-1", "the same message comes back")
        expect(again.delivery_count == 1, f"delivery count after the lock expired: {again.delivery_count}")
        expect(again.lock_token != first_token, "under a new lock")
        receiver.complete_message(again)


def check_max_delivery_count_dead_letters(sb):
    with sb.get_queue_sender("poison") as sender:
        sender.send_messages(ServiceBusMessage("never works", message_id="poison-1"))
    with sb.get_queue_receiver("poison") as receiver:
        for attempt in range(2):
            [m] = receive(receiver, 1)
            expect(m.delivery_count == attempt, f"attempt {attempt}: count {m.delivery_count}")
            receiver.abandon_message(m)
        expect(receive(receiver, 1, wait=1) == [], "gone from the queue after two deliveries")
    with sb.get_queue_receiver("poison", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        [d] = receive(dlq, 1)
        expect(d.message_id == "poison-1", "in the dead-letter queue")
        expect(d.dead_letter_reason == "MaxDeliveryCountExceeded", f"reason {d.dead_letter_reason!r}")
        expect(bool(d.dead_letter_error_description), "a description")
        dlq.complete_message(d)


def check_duplicate_ids_are_dropped(sb):
    with sb.get_queue_sender("dedup") as sender:
        sender.send_messages(ServiceBusMessage("first", message_id="dup-1"))
        sender.send_messages(ServiceBusMessage("copy", message_id="dup-1"))
        sender.send_messages([ServiceBusMessage("in a batch", message_id="dup-1"), ServiceBusMessage("other", message_id="dup-2")])
    with sb.get_queue_receiver("dedup") as receiver:
        msgs = receive(receiver, 4, wait=1)
        got = [(m.message_id, str(m)) for m in msgs]
        expect(got == [("dup-1", "first"), ("dup-2", "other")], f"received {got}")
        for m in msgs:
            receiver.complete_message(m)


def check_a_closed_receiver_gives_its_prefetched_messages_back_uncounted(sb):
    # The SDK drains the link on close and releases what it holds: the broker must
    # take the drain, stop sending, and put released messages back without counting
    # a delivery (a lock left to run out would keep them away and count one).
    with sb.get_queue_sender("basic") as sender:
        sender.send_messages([ServiceBusMessage(f"pre-{i}", message_id=f"prefetch-{i}") for i in range(5)])
    with sb.get_queue_receiver("basic", prefetch_count=10) as receiver:
        [first] = receive(receiver, 1)
        receiver.complete_message(first)
    started = time.time()
    with sb.get_queue_receiver("basic") as receiver:
        rest = receive(receiver, 4)
        ids = sorted(m.message_id for m in rest)
        expect(ids == sorted(f"prefetch-{i}" for i in range(5) if f"prefetch-{i}" != first.message_id), f"back at once: {ids}")
        expect(time.time() - started < 10, "not after a lock ran out")
        expect(all(m.delivery_count == 0 for m in rest), f"released, not abandoned: {[m.delivery_count for m in rest]}")
        for m in rest:
            receiver.complete_message(m)


def check_a_wrong_key_is_an_authentication_error(_sb):
    wrong = ";".join(
        "SharedAccessKey=not-the-key" if part.startswith("SharedAccessKey=") else part for part in CONN.split(";")
    )
    try:
        with client(wrong) as sb, sb.get_queue_sender("basic") as sender:
            sender.send_messages(ServiceBusMessage("nope"))
    except ServiceBusAuthenticationError:
        return
    raise AssertionError("sending with a wrong key did not raise ServiceBusAuthenticationError")


def expect_error(fn, kinds, needle, why):
    try:
        fn()
    except kinds as e:  # pylint: disable=broad-except
        expect(needle.lower() in str(e).lower(), f"{why}: the error says {e!r}")
        return
    raise AssertionError(f"{why}: no error")


def check_sessions_are_fifo_exclusive_and_next_available_names_its_session(sb):
    with sb.get_queue_sender("sessions") as sender:
        sender.send_messages([ServiceBusMessage(f"s1-{i}", session_id="s1", message_id=f"s1-{i}") for i in range(3)])
        sender.send_messages(ServiceBusMessage("s2-0", session_id="s2", message_id="s2-0"))
    with sb.get_queue_receiver("sessions", session_id="s1") as receiver:
        msgs = receive(receiver, 3)
        got = [(m.message_id, m.session_id) for m in msgs]
        expect(got == [(f"s1-{i}", "s1") for i in range(3)], f"only s1, in order: {got}")
        expect(receiver.session.session_id == "s1", "the session receiver names its session")
        expect(receiver.session.locked_until_utc and receiver.session.locked_until_utc > now(), "a session lock")

        def second():
            with sb.get_queue_receiver("sessions", session_id="s1") as other:
                other.receive_messages(max_message_count=1, max_wait_time=1)

        expect_error(second, SessionCannotBeLockedError, "cannot be accepted", "a second holder of s1")
        for m in msgs:
            receiver.complete_message(m)
    with sb.get_queue_receiver("sessions", session_id=NEXT_AVAILABLE_SESSION) as receiver:
        [m] = receive(receiver, 1)
        expect(receiver.session.session_id == "s2", f"next available is s2: {receiver.session.session_id!r}")
        expect((m.message_id, m.session_id) == ("s2-0", "s2"), f"{m.message_id} of {m.session_id}")
        receiver.complete_message(m)


def check_session_state_and_lock_renewal(sb):
    with sb.get_queue_sender("sessions") as sender:
        sender.send_messages(ServiceBusMessage("s3-0", session_id="s3"))
    with sb.get_queue_receiver("sessions", session_id="s3") as receiver:
        [m] = receive(receiver, 1)
        expect(receiver.session.get_state() is None, "no state at first")
        receiver.session.set_state("step-1")
        expect(receiver.session.get_state() == b"step-1", "the state set is read back")
        before = receiver.session.locked_until_utc
        time.sleep(0.5)
        after = receiver.session.renew_lock()
        expect(after > before, f"renewed until {after}, was {before}")
        receiver.complete_message(m)
    with sb.get_queue_receiver("sessions", session_id="s3") as receiver:
        expect(receiver.session.get_state() == b"step-1", "the state outlives the receiver")
        receiver.session.set_state(None)
        expect(receiver.session.get_state() is None, "cleared")


def check_a_session_lock_runs_out_and_the_session_is_free_again(sb):
    with sb.get_queue_sender("shortsessions") as sender:
        sender.send_messages(ServiceBusMessage("s4-0", session_id="s4", message_id="s4-0"))
    first = sb.get_queue_receiver("shortsessions", session_id="s4")
    [m] = receive(first, 1)
    time.sleep(max(0.0, (first.session.locked_until_utc - now()).total_seconds()) + 0.5)
    with sb.get_queue_receiver("shortsessions", session_id="s4") as second:
        [again] = receive(second, 1)
        expect(again.message_id == "s4-0", "the message comes back in the session")
        expect(again.delivery_count == 1, f"counted once: {again.delivery_count}")
        second.complete_message(again)
    try:
        first.close()
    except Exception:  # pylint: disable=broad-except
        pass


def check_receivers_and_entities_must_agree_on_sessions(sb):
    def plain_on_sessions():
        with sb.get_queue_receiver("sessions") as receiver:
            receiver.receive_messages(max_message_count=1, max_wait_time=1)

    def session_on_plain():
        with sb.get_queue_receiver("basic", session_id="s1") as receiver:
            receiver.receive_messages(max_message_count=1, max_wait_time=1)

    def no_session_id():
        with sb.get_queue_sender("sessions") as sender:
            sender.send_messages(ServiceBusMessage("no session"))

    expect_error(plain_on_sessions, ServiceBusError, "requires sessions", "a plain receiver on a session queue")
    expect_error(session_on_plain, ServiceBusError, "does not require sessions", "a session receiver on a plain queue")
    expect_error(no_session_id, ServiceBusError, "SessionId was not set", "a message without a session id")


def check_a_topic_fans_out_by_rules(sb):
    with sb.get_topic_sender("orders") as sender:
        sender.send_messages(
            [
                ServiceBusMessage("eu order", message_id="o-eu", subject="order", application_properties={"region": "eu"}),
                ServiceBusMessage("us order", message_id="o-us", subject="order", application_properties={"region": "us"}),
                ServiceBusMessage("eu note", message_id="n-eu", subject="note", application_properties={"region": "eu"}),
            ]
        )
    for sub, want in [("all", ["o-eu", "o-us", "n-eu"]), ("eu", ["o-eu"]), ("everything", ["o-eu", "o-us", "n-eu"])]:
        with sb.get_subscription_receiver("orders", sub) as receiver:
            msgs = receive(receiver, 3, wait=1)
            ids = [m.message_id for m in msgs]
            expect(ids == want, f"subscription {sub} got {ids}, wants {want}")
            for m in msgs:
                if sub == "all" and m.message_id == "n-eu":
                    receiver.dead_letter_message(m, reason="NotAnOrder", error_description="a note")
                else:
                    receiver.complete_message(m)
    with sb.get_subscription_receiver("orders", "all", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        [d] = receive(dlq, 1)
        expect((d.message_id, d.dead_letter_reason) == ("n-eu", "NotAnOrder"), f"{d.message_id} {d.dead_letter_reason}")
        dlq.complete_message(d)


def check_scheduled_messages_wait_and_can_be_cancelled(sb):
    # Far enough ahead for the sends, the schedule requests and a receiver to open,
    # on a loaded machine too.
    at = now() + datetime.timedelta(seconds=6)
    with sb.get_queue_sender("later") as sender:
        sender.send_messages(ServiceBusMessage("by annotation", message_id="sched-a", scheduled_enqueue_time_utc=at))
        [kept] = sender.schedule_messages(ServiceBusMessage("by request", message_id="sched-b"), at)
        [dropped] = sender.schedule_messages(ServiceBusMessage("cancelled", message_id="sched-c"), at)
        expect(kept != dropped, "a sequence number each")
        sender.cancel_scheduled_messages(dropped)
    with sb.get_queue_receiver("later") as receiver:
        expect(receive(receiver, 1, wait=0.5) == [], "nothing before the scheduled time")
        expect(now() < at, "the check itself took longer than the schedule allows")
        time.sleep(max(0.0, (at - now()).total_seconds()) + 0.3)
        msgs = receive(receiver, 3, wait=1)
        ids = sorted(m.message_id for m in msgs)
        expect(ids == ["sched-a", "sched-b"], f"due and not cancelled: {ids}")
        expect(all(m.enqueued_time_utc >= at - datetime.timedelta(milliseconds=5) for m in msgs), "enqueued when due")
        for m in msgs:
            receiver.complete_message(m)


def check_time_to_live_dead_letters_or_drops(sb):
    with sb.get_queue_sender("shortlived") as sender:
        sender.send_messages(ServiceBusMessage("stale", message_id="ttl-1"))
    with sb.get_queue_sender("droplived") as sender:
        sender.send_messages(ServiceBusMessage("stale", message_id="ttl-2", time_to_live=datetime.timedelta(seconds=1)))
    time.sleep(1.5)
    for queue in ["shortlived", "droplived"]:
        with sb.get_queue_receiver(queue) as receiver:
            expect(receive(receiver, 1, wait=0.5) == [], f"{queue}: expired messages are not received")
    with sb.get_queue_receiver("shortlived", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        [d] = receive(dlq, 1)
        expect((d.message_id, d.dead_letter_reason) == ("ttl-1", "TTLExpiredException"), f"{d.message_id} {d.dead_letter_reason}")
        dlq.complete_message(d)
    with sb.get_queue_receiver("droplived", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        expect(receive(dlq, 1, wait=0.5) == [], "dropped, not dead-lettered")


def check_defer_and_receive_deferred(sb):
    with sb.get_queue_sender("later") as sender:
        sender.send_messages(ServiceBusMessage("not yet", message_id="defer-1"))
    with sb.get_queue_receiver("later") as receiver:
        [m] = receive(receiver, 1)
        seq = m.sequence_number
        receiver.defer_message(m)
        expect(receive(receiver, 1, wait=0.5) == [], "a deferred message is not received")
        [d] = receiver.receive_deferred_messages([seq])
        expect(d.message_id == "defer-1" and d.sequence_number == seq, f"by sequence number: {d.message_id}")
        receiver.complete_message(d)
        expect_error(lambda: receiver.receive_deferred_messages([seq]), MessageNotFoundError, "", "completed: gone")


def check_peek_does_not_lock(sb):
    with sb.get_queue_sender("later") as sender:
        sender.send_messages([ServiceBusMessage(f"peek-{i}", message_id=f"peek-{i}") for i in range(2)])
    with sb.get_queue_receiver("later") as receiver:
        peeked = receiver.peek_messages(max_message_count=10)
        ids = [m.message_id for m in peeked]
        expect(ids == ["peek-0", "peek-1"], f"peeked {ids}")
        msgs = receive(receiver, 2)
        expect([m.delivery_count for m in msgs] == [0, 0], "peek counts no delivery")
        for m in msgs:
            receiver.complete_message(m)


# Groups of checks that share entities run in order; groups run side by side (each
# on its own client), so that the waits of one overlap the others'.
GROUPS = [
    [
        check_send_with_ids_and_complete,
        check_abandon_raises_the_delivery_count,
        check_dead_letter_with_reason,
        check_renew_lock_advances_locked_until,
        check_duplicate_ids_are_dropped,
        check_a_closed_receiver_gives_its_prefetched_messages_back_uncounted,
        check_a_wrong_key_is_an_authentication_error,
    ],
    [check_an_expired_lock_redelivers_with_count_plus_one, check_max_delivery_count_dead_letters],
    [
        check_sessions_are_fifo_exclusive_and_next_available_names_its_session,
        check_session_state_and_lock_renewal,
        check_receivers_and_entities_must_agree_on_sessions,
    ],
    [check_a_topic_fans_out_by_rules, check_a_session_lock_runs_out_and_the_session_is_free_again],
    [check_scheduled_messages_wait_and_can_be_cancelled, check_defer_and_receive_deferred, check_peek_does_not_lock],
    [check_time_to_live_dead_letters_or_drops],
]


def run_group(group, results, lock):
    with client() as sb:
        for check in group:
            name = check.__name__[len("check_"):]
            if sys.argv[2:] and name not in sys.argv[2:]:
                continue
            started = time.time()
            try:
                check(sb)
            except Exception as e:  # pylint: disable=broad-except
                with lock:
                    results.append(False)
                    print(f"FAILED {name}: {e!r}", flush=True)
                    traceback.print_exc()
            else:
                with lock:
                    results.append(True)
                    print(f"ok {name} ({time.time() - started:.1f} s)", flush=True)


def main():
    results, lock = [], threading.Lock()
    threads = [threading.Thread(target=run_group, args=(g, results, lock)) for g in GROUPS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    passed, failed = results.count(True), results.count(False)
    print(f"sdk-check: {passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

"""Microsoft's azure-servicebus SDK against test-servicebus, public API only.

Usage: python check.py '<connection string of the broker>'

The broker must have these queues (tests/sdk.rs starts it so):
  basic                       defaults (lock 60 s, max delivery 10)
  expiry:lock-secs=2          a lock left to expire
  poison:max-delivery=2       dead-lettered after two failed deliveries
  dedup:dedup-secs=60         duplicate detection

Each check prints `ok <name>` or `FAILED <name>: <why>`; the last line is
`sdk-check: N passed, M failed`, and the exit status is 0 only when nothing failed.
Timeouts are short (retry_total=0, timeout=5): a settlement the broker does not
confirm fails within seconds instead of being retried or settled another way.
"""

import datetime
import sys
import time
import traceback

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import ServiceBusAuthenticationError

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


CHECKS = [
    check_send_with_ids_and_complete,
    check_abandon_raises_the_delivery_count,
    check_dead_letter_with_reason,
    check_renew_lock_advances_locked_until,
    check_an_expired_lock_redelivers_with_count_plus_one,
    check_max_delivery_count_dead_letters,
    check_duplicate_ids_are_dropped,
    check_a_closed_receiver_gives_its_prefetched_messages_back_uncounted,
    check_a_wrong_key_is_an_authentication_error,
]


def main():
    passed = failed = 0
    with client() as sb:
        for check in CHECKS:
            name = check.__name__[len("check_"):]
            started = time.time()
            try:
                check(sb)
            except Exception as e:  # pylint: disable=broad-except
                failed += 1
                print(f"FAILED {name}: {e!r}", flush=True)
                traceback.print_exc()
            else:
                passed += 1
                print(f"ok {name} ({time.time() - started:.1f} s)", flush=True)
    print(f"sdk-check: {passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

"""Receive and complete up to N messages of a queue with Microsoft's SDK; print how many.

Usage: receive_all.py <connection string> <queue> <n>. Each receive waits at most
5 s: messages still locked to a receiver that went away would not come in time.
"""
import sys

from azure.servicebus import ServiceBusClient

conn, queue, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
got = 0
with ServiceBusClient.from_connection_string(conn) as client:
    with client.get_queue_receiver(queue, max_wait_time=5) as receiver:
        while got < n:
            batch = receiver.receive_messages(max_message_count=n - got, max_wait_time=5)
            if not batch:
                break
            for m in batch:
                receiver.complete_message(m)
                got += 1
print(got)

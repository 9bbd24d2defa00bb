"""moto's server (SQS for the tests), with a race of moto's own closed first.

moto's `Queue.delete_message` rebuilds the queue's message list from a copy and assigns it back
without the lock that `add_message` appends under. Its server answers each request on a thread
of its own, so two deletes and a send at once lose the sent message: a delete that began before
the other finished assigns back a list made from the old one, without the message appended to
the newer list in between. The send was answered as stored, and the message is then on no list:
never received, not in flight, not in the dead-letter queue. (The second delete also brings back
the message the first one deleted.) Under the chaos story's load, with two consumers deleting
while the story sends, that lost events now and then (issue 53).

Here each delete runs under the queue's lock, as its appends do.

A second: moto counts a FIFO message group as in flight while any of its messages is pending,
the ones whose visibility timeout ran out included, and a receive takes such a message off the
pending ones only when it reaches it in the queue's order, looking again at the groups then. A
group whose consumer died with two messages in flight then gives its second before its first:
at the first, the second still counts as in flight, so the first is skipped; at the second, none
does. Or another group's message taken off the pending ones makes the receive look again at a
group whose first message ran out after the receive began, so that it is not in the receive's
list, and its second is given. SQS gives a group's messages in order. Here a message whose
visibility timeout ran out is taken off the pending ones whenever moto looks at them, so that a
receive sees each group as it was when it began: a group held then stays held through it, and
its first message comes in the next receive, before the rest. (The keys story, a consumer
killed with groups in flight, found both.)

A third: a receive that waits (long polling) looks at the groups in flight once, when it
begins, and keeps that look through its waits; and two receives run at once on two threads,
each with its own look. A group whose first message another receive took meanwhile then gives
its second to this one, while the first is still in flight: two consumers handled one group's
messages out of order (the soak rig on SQS, two warehouses on one FIFO queue). SQS gives a
group's next message only once the one in flight is gone. Here a receive looks once per pass,
each pass under the queue's lock, and waits between passes as moto's own does.

A fourth, for speed alone: moto reads its clock through a datetime (`utcnow`, then arithmetic
on a timedelta) each time it asks whether a message is visible or delayed, which it does for
every message of a queue, several times per message sent (a send builds every attribute of the
queue, its approximate counts included, to read one). A queue that grows to a few thousand
messages (the soak rig reads its `PickTaskCreated` back only at the end) then made each send
cost tens of milliseconds, and the relays' rounds timed out. Here the clock is `time.time()`,
the same reading without the datetimes.

The rest is moto's own server, with moto's own options:
`python3 scripts/moto_server.py -H 127.0.0.1 -p 5000`.
"""

import inspect
import sys
import time

from moto.server import main
from moto.sqs import models

_delete_message = models.Queue.delete_message


def delete_message(self, receipt_handle):
    # The lock is a Condition over an RLock: receives wait on it, releasing it while they wait.
    with self._messages_lock:
        return _delete_message(self, receipt_handle)


if "self._messages_lock" not in inspect.getsource(models.Queue.__init__):
    sys.exit("moto_server.py: this moto's queues have no _messages_lock to delete under; "
             "install the version scripts/services.sh pins (MOTO_PACKAGE)")
models.Queue.delete_message = delete_message


def pending_messages(self):
    # A pending message visible again is one whose receiver let its timeout run out. One clock
    # reading for the lot: a receive looks at the pending messages once per message it passes.
    now = models.unix_time_millis()
    for message in [m for m in self._pending_messages if now > m.visible_at]:
        self._pending_messages.discard(message)
    return self._pending_messages


def pending_message_groups(self):
    return {m.group_id for m in pending_messages(self) if m.group_id is not None}


for name in ("pending_messages", "pending_message_groups"):
    if not isinstance(models.Queue.__dict__.get(name), property):
        sys.exit(f"moto_server.py: this moto's queues have no {name} to mend; "
                 "install the version scripts/services.sh pins (MOTO_PACKAGE)")
models.Queue.pending_messages = property(pending_messages)
models.Queue.pending_message_groups = property(pending_message_groups)

_receive_message = models.SQSBackend.receive_message


def receive_message(self, queue_name, count, wait_seconds_timeout, visibility_timeout,
                    message_attribute_names=None):
    queue = self.get_queue(queue_name)
    ends = models.unix_time() + wait_seconds_timeout
    while True:
        # One pass, no wait inside it: it looks at the groups in flight as they are now.
        with queue._messages_lock:
            found = _receive_message(self, queue_name, count, 0, visibility_timeout,
                                     message_attribute_names)
        if found or models.unix_time() >= ends:
            return found
        # Visible messages of held groups end moto's wait at once: a pause, not a spin.
        time.sleep(0.02)
        queue.wait_for_messages(1)


if list(inspect.signature(_receive_message).parameters) != [
    "self", "queue_name", "count", "wait_seconds_timeout", "visibility_timeout",
    "message_attribute_names",
]:
    sys.exit("moto_server.py: this moto's receive_message takes other arguments; "
             "install the version scripts/services.sh pins (MOTO_PACKAGE)")
models.SQSBackend.receive_message = receive_message

_unix_time, _unix_time_millis = models.unix_time, models.unix_time_millis


def unix_time(dt=None):
    return time.time() if dt is None else _unix_time(dt)


def unix_time_millis(dt=None):
    return time.time() * 1000.0 if dt is None else _unix_time_millis(dt)


models.unix_time, models.unix_time_millis = unix_time, unix_time_millis

if __name__ == "__main__":
    sys.exit(main())

"""moto's server (SQS for the tests), with a race of moto's own closed first.

moto's `Queue.delete_message` rebuilds the queue's message list from a copy and assigns it back
without the lock that `add_message` appends under. Its server answers each request on a thread
of its own, so two deletes and a send at once lose the sent message: a delete that began before
the other finished assigns back a list made from the old one, without the message appended to
the newer list in between. The send was answered as stored, and the message is then on no list:
never received, not in flight, not in the dead-letter queue. (The second delete also brings back
the message the first one deleted.) Under the chaos story's load, with two consumers deleting
while the story sends, that lost events now and then (issue 53).

Here each delete runs under the queue's lock, as its appends do. The rest is moto's own server,
with moto's own options: `python3 scripts/moto_server.py -H 127.0.0.1 -p 5000`.
"""

import inspect
import sys

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

if __name__ == "__main__":
    sys.exit(main())

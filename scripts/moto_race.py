"""Checks a local SQS server for the race scripts/moto_server.py closes: one sender sends batches
of ten while several consumers receive and delete, then every message the server confirmed must
have been received, and nothing deleted may be left on the queue.

    python3 scripts/moto_race.py http://127.0.0.1:5000 [batches] [consumers]

moto's own server shows it only when its threads switch often: start it for this check as
    python3 -c "import sys; sys.setswitchinterval(1e-6); sys.argv = ['moto_server', '-p', '5098']; \
        from moto.server import main; main()"
(or the same with scripts/moto_server.py run through exec, for the launcher). Exits 1 on a loss.
"""

import sys
import threading
import time

import boto3


def client(endpoint):
    return boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


def main():
    endpoint = sys.argv[1]
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    consumers = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    url = client(endpoint).create_queue(
        QueueName=f"moto-race-{int(time.time() * 1000)}",
        Attributes={"VisibilityTimeout": "30"},
    )["QueueUrl"]
    confirmed, received = set(), set()
    lock, sent_all = threading.Lock(), threading.Event()

    def send():
        sqs = client(endpoint)
        for batch in range(batches):
            entries = [{"Id": str(n), "MessageBody": f"m{batch}-{n}"} for n in range(10)]
            answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
            assert not answer.get("Failed"), answer
            with lock:
                confirmed.update(entry["MessageId"] for entry in answer["Successful"])
        sent_all.set()

    def consume():
        sqs = client(endpoint)
        idle = 0
        while idle < 3:
            messages = sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1
            ).get("Messages", [])
            if not messages:
                idle += sent_all.is_set()
                continue
            with lock:
                received.update(message["MessageId"] for message in messages)
            entries = [
                {"Id": str(n), "ReceiptHandle": message["ReceiptHandle"]}
                for n, message in enumerate(messages)
            ]
            sqs.delete_message_batch(QueueUrl=url, Entries=entries)

    threads = [threading.Thread(target=send)]
    threads += [threading.Thread(target=consume) for _ in range(consumers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    attributes = client(endpoint).get_queue_attributes(QueueUrl=url, AttributeNames=names)
    left = sum(int(attributes["Attributes"][name]) for name in names)
    lost = len(confirmed - received)
    print(
        f"confirmed {len(confirmed)}, received {len(received)}, lost {lost}, "
        f"left on the queue after every delete {left}"
    )
    sys.exit(1 if lost or left else 0)


if __name__ == "__main__":
    main()

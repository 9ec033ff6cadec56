"""What the console's write actions do beyond one Admin call: sending a test message with the
user's key. Each runs with the Admin of whoever asked (auth on: the logged-in user's key), so
the brokers' ACL decides; their refusal (NoPermissionError and its remark) is what the page
shows. Not owned: who may act at all (guard.py), the input checks (inputs.py)."""

PRODUCER_GROUP = "QUIVER_CONSOLE"


def send_test(admin, topic: str, body: bytes, keys: list[str], tags: str) -> str:
    """Send one message to `topic` with the Admin's key and network; what the broker answered."""
    from quiver.client.message import Message
    from quiver.client.producer import Producer
    p = Producer(PRODUCER_GROUP, namesrv=";".join(admin.namesrvs), credentials=admin.credentials)
    p._transport_factory = admin._transport_factory   # quiver.testing's network in unit tests
    with p:
        r = p.send(Message(topic, body, tags=tags or None, keys=keys or None))
    return f"msgId {r.msg_id} on {r.broker} queue {r.queue_id} at offset {r.queue_offset} ({r.status.name})"

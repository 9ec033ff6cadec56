"""Cancelled delayed messages: (msg id, topic) pairs, kept in memory and in the db's tombstones.

A cancel names the message's id and its real topic; the caller was authorized
for PUB on that topic (SCHEDULE_CANCEL's declaration), so a cancel only ever
stops a message of a topic its sender may write. A pair whose topic is None
(a tombstone written before cancels carried a topic) stops the id on any topic.

Checking a delivery costs one set lookup; the message's REAL_TOPIC is read only
for an id that was cancelled at all.
"""

from quiver.wire import properties
from quiver.wire.properties import REAL_TOPIC


class Cancels:
    def __init__(self, pairs=()):
        self.pairs: set[tuple[str, str | None]] = set()
        self.ids: set[str] = set()
        for msg_id, topic in pairs:
            self.add(msg_id, topic)

    def add(self, msg_id: str, topic: str | None) -> None:
        self.pairs.add((msg_id, topic))
        self.ids.add(msg_id)

    def __len__(self) -> int:
        return len(self.pairs)

    def hits(self, msg_id: str, props) -> bool:
        """True if the message `msg_id` with properties `props` (a string, or a dict) was cancelled."""
        if msg_id not in self.ids:
            return False
        if (msg_id, None) in self.pairs:
            return True
        return (msg_id, topic_of(props)) in self.pairs


def topic_of(props) -> str | None:
    """The real topic a parked message goes back to (None if absent or malformed)."""
    return properties.read_topic(props, REAL_TOPIC)

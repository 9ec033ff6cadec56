"""Messages and bytes through this broker: in per topic, out per topic and consumer group.

Filled on the service thread by the send path (sending.py, also retry puts) and
the pull path (pulling.py) with plain dict bumps; read by metrics.py at scrape
time. A topic is counted as stored: a delayed message under the schedule topic,
a half message under the half topic. Label sets are capped (histogram.bump):
topic and group names come from peers.
"""

from quiver.runtime.histogram import bump


class Traffic:
    __slots__ = ("in_msgs", "in_bytes", "out_msgs", "out_bytes")

    def __init__(self):
        self.in_msgs: dict[str, int] = {}
        self.in_bytes: dict[str, int] = {}
        self.out_msgs: dict[tuple[str, str], int] = {}    # (topic, group)
        self.out_bytes: dict[tuple[str, str], int] = {}

    def put(self, topic: str, count: int, body_bytes: int) -> None:
        bump(self.in_msgs, topic, count)
        bump(self.in_bytes, topic, body_bytes)

    def pulled(self, topic: str, group: str | None, count: int, record_bytes: int) -> None:
        key = (topic, group or "")
        bump(self.out_msgs, key, count)
        bump(self.out_bytes, key, record_bytes)

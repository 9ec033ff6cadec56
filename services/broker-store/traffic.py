"""Messages and bytes through this broker: in per topic, out per topic and consumer group, the
size of each message stored, and messages dead-lettered per consumer group.

Filled on the service thread by the send path (sending.py, also retry puts), the
pull path (pulling.py) and the two DLQ moves (retry.py, pop_revive.py) with plain
dict bumps; read by metrics.py at scrape time. A topic is counted as stored: a
delayed message under the schedule topic, a half message under the half topic.
Label sets are capped (histogram.bump): topic and group names come from peers.
"""

from bisect import bisect_left

from quiver.runtime.histogram import Histogram, bump

# bytes: a message body (the broker's --max-message-bytes is 4 MiB by default)
SIZE_BOUNDS_BYTES = (64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)


class Traffic:
    __slots__ = ("in_msgs", "in_bytes", "out_msgs", "out_bytes", "sizes", "dlq")

    def __init__(self):
        self.in_msgs: dict[str, int] = {}
        self.in_bytes: dict[str, int] = {}
        self.out_msgs: dict[tuple[str, str], int] = {}    # (topic, group)
        self.out_bytes: dict[tuple[str, str], int] = {}
        self.sizes = Histogram(SIZE_BOUNDS_BYTES)          # every body stored, all topics
        self.dlq: dict[str, int] = {}                      # group -> messages moved to %DLQ%group

    def put(self, topic: str, bodies: list) -> None:
        lengths = list(map(len, bodies))
        counts, bounds = self.sizes.counts, self.sizes.bounds   # Histogram.observe inlined: the send path
        for n in lengths:
            counts[bisect_left(bounds, n)] += 1
        total = sum(lengths)
        self.sizes.sum += total
        bump(self.in_msgs, topic, len(bodies))
        bump(self.in_bytes, topic, total)

    def pulled(self, topic: str, group: str | None, count: int, record_bytes: int) -> None:
        key = (topic, group or "")
        bump(self.out_msgs, key, count)
        bump(self.out_bytes, key, record_bytes)

    def dead_lettered(self, group: str) -> None:
        bump(self.dlq, group)

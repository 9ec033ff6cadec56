"""What one SCHEDULE_REPUT carries, and what the broker's answer to it says.

Owns the batch limits and the request and reply shapes that level queues
(levels.py) and timer queues (timers.py) share; not when or what to deliver.

A batch is capped three ways, so the broker can always take it:

- `max_reput_batch` entries;
- body bytes: the bodies travel packed in one frame, and the broker drops a
  frame over its cap (max_message_bytes + 1 MiB + 64 KiB, ZMQ_MAXMSGSIZE)
  together with the connection: the request would time out and be retried
  forever. A batch keeps its bodies within `max_reput_bytes` (default the
  broker's default max_message_bytes), or within the broker's own
  max_message_bytes when its SCHEDULE_INIT answer names a smaller one;
- header bytes: each entry's meta ([flag, properties, born, reconsume,
  sys flag, due]) is in the header, which may not exceed
  protocol.MAX_HEADER_BYTES (1024 entries of 32 KiB properties would be 32 MiB).

The first entry of a batch always fits: the broker accepted its body once.
"""

import time

import orjson

from quiver.wire import protocol
from quiver.wire import requests as rq
from quiver.wire.codes import ResponseCode
from quiver.errors import FieldError

HEADER_BUDGET_BYTES = protocol.MAX_HEADER_BYTES - 64 * 1024   # the rest: code, id, keys, born host
META_OVERHEAD_BYTES = 96   # an entry's five integers, brackets and commas, and its entry in the body lengths


def body_cap(max_reput_bytes: int, init: rq.ScheduleInitReply) -> int:
    """Body bytes one re-put to this broker may carry."""
    announced = init.max_message_bytes
    return min(max_reput_bytes, announced) if announced else max_reput_bytes


class Budget:
    """Counts the entries of one batch as they are taken, in order."""
    __slots__ = ("max_entries", "max_body_bytes", "entries", "body_bytes", "header_bytes")

    def __init__(self, max_entries: int, max_body_bytes: int):
        self.max_entries, self.max_body_bytes = max_entries, max_body_bytes
        self.entries = self.body_bytes = self.header_bytes = 0

    def take(self, body: bytes, props: str) -> bool:
        """Count one more entry if it fits (the first always does); False: it waits for the next batch."""
        head = len(orjson.dumps(props)) + META_OVERHEAD_BYTES
        if self.entries and (self.entries >= self.max_entries
                             or self.body_bytes + len(body) > self.max_body_bytes
                             or self.header_bytes + head > HEADER_BUDGET_BYTES):
            return False
        self.entries += 1
        self.body_bytes += len(body)
        self.header_bytes += head
        return True


def split(rows: list, max_entries: int, max_body_bytes: int) -> list[list]:
    """`rows` (each with .body and .props) in order, cut into batches that each fit."""
    out, budget = [], None
    for r in rows:
        if budget is None or not budget.take(r.body, r.props):
            budget = Budget(max_entries, max_body_bytes)
            budget.take(r.body, r.props)
            out.append([])
        out[-1].append(r)
    return out


def request(rows: list, dues: list[int], roll: bool = False) -> tuple[rq.ScheduleReput, list]:
    """(the typed request, its body frames) for `rows` (records or timer rows) due at `dues`."""
    metas = [(r.flag, r.props, r.born_ts, r.reconsume, r.sys_flag, due) for r, due in zip(rows, dues)]
    lengths, frames = rq.pack_bodies([r.body for r in rows])
    return rq.ScheduleReput(metas=metas, lengths=lengths, roll=roll), frames


def refused(env, n: int) -> set[int]:
    """Indices of a batch of `n` the broker refused as MESSAGE_ILLEGAL (its `bad` list);
    empty for any other answer (then the whole batch is retried). A refusal of a single
    entry that does not say which is that entry's."""
    if isinstance(env, Exception) or env.code != ResponseCode.MESSAGE_ILLEGAL:
        return set()
    try:
        bad = rq.ScheduleReputReply.decode(env.ext).bad
    except FieldError:
        bad = None
    if bad is None:
        return {0} if n == 1 else set()
    return {i for i in bad if i < n}


def stored_ms(env) -> int:
    """When the broker stored a re-put batch (its clock), or now if the answer does not say."""
    try:
        ts = rq.ScheduleReputReply.decode(env.ext).store_ts
    except FieldError:
        ts = 0
    return ts or int(time.time() * 1000)

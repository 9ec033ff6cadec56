"""The broker's own trace events: Retry and DLQ, stored in this broker's trace topic.

A consumer's send-back of a traced message (its properties say TRACE_ON=true,
set by a traced producer) is recorded here when the broker parks the copy for
`%RETRY%<group>` (Retry) or moves it to `%DLQ%<group>` (DLQ). The record is
put straight into the local store, on the service thread, just before the
copy itself, so the copy's flush and replication cover it and no client or
socket is involved; untraced messages cost one dict lookup. A failed trace put
is counted (`trace_put_failed`) and never fails the send-back.
The trace topic (RMQ_SYS_TRACE_TOPIC, a system topic) is made here, for these
puts and for the first client send to it (sending.py). Record format:
quiver.wire.trace, the only encoder.
"""

import logging
import time

from quiver.wire import trace
from quiver.wire.properties import KEYS, TAGS
from quiver.wire.names import TRACE_TOPIC
from quiver.wire.property_string import format_properties

from .store import PutStatus

log = logging.getLogger(__name__)

TRACE_QUEUES = 4   # what a client's route offers before the topic exists (producer._default_route)
_LOOPBACK = b"\x7f\x00\x00\x01\x00\x00\x00\x00"


def trace_topic(topics) -> dict:
    """The trace topic's config, made (a system topic) if missing."""
    return topics.config(TRACE_TOPIC, create=True, system=True, queues=TRACE_QUEUES)


def is_traced(props: dict) -> bool:
    return props.get(trace.TRACE_ON) == "true"


class BrokerTrace:
    """Writes Retry and DLQ events of traced messages into the local trace topic."""

    def __init__(self, store, topics, counters, broker_name: str):
        self.store = store
        self.topics = topics
        self.counters = counters
        self.broker_name = broker_name

    def sent_back(self, type_: str, props: dict, msg_id: str, origin: str, group: str, reconsume: int,
                  extra: dict) -> None:
        """A traced message parked for retry (type Retry) or dead-lettered (DLQ)."""
        keys = props.get(KEYS)
        msg = trace.msg_entry(msg_id, keys, props.get(TAGS), None, None, {"reconsume_times": reconsume})
        ev = trace.event(type_, int(time.time() * 1000), None, type_.upper(), origin, self.broker_name, group, None,
                         extra, trace.columns([msg]))
        self.put([ev])

    def put(self, events: list) -> None:
        try:
            trace_topic(self.topics)
            for body, ids in trace.pack(events, 200):
                keys = format_properties(((KEYS, " ".join(ids)),))
                res = self.store.put_batch(TRACE_TOPIC, 0, [body], [keys], [0], 0, int(time.time() * 1000), _LOOPBACK)
                if res.status is not PutStatus.PUT_OK:
                    raise OSError(res.remark)
            self.counters["trace_events"] += len(events)
        except Exception as exc:   # never the send-back's problem: counted and logged
            self.counters["trace_put_failed"] += 1
            log.warning("trace event not stored: %s", exc)

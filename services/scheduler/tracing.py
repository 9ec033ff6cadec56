"""The scheduler's trace events: Delayed, when a traced delayed or timer message is re-put.

A message whose properties carry TRACE_ON=true (a traced producer's) gets one
Delayed event when its re-put to the real topic is stored: the broker's store
time, the due time and how late it was. Events go through the SDK's
TraceDispatcher (its bounded queue and its own Producer, with this process's
service key when auth is on), made at the first traced delivery, so a
scheduler that never sees one starts no client. Untraced messages cost one
substring scan of their properties. Record format: quiver.wire.trace.
"""

from quiver.wire import trace
from quiver.wire.properties import REAL_QID, REAL_TOPIC, index_fields, read_int
from quiver.wire.property_string import get_property, parse_properties
from quiver.client.trace_dispatcher import TraceDispatcher


class DeliveryTrace:
    def __init__(self, namesrv: str, group: str, client: str):
        self.namesrv, self.group, self.client = namesrv, group, client
        self.dispatcher: TraceDispatcher | None = None

    def delivered(self, store_ts: int, broker: str, entries) -> None:
        """`entries`: (msg id, due ms, parked properties) of one re-put the broker stored."""
        by_topic: dict[str, list] = {}   # real topic -> trace.msg_entry rows
        for mid, due, props in entries:
            if get_property(props, trace.TRACE_ON) != "true":
                continue
            p = parse_properties(props)
            tag, _, keys = index_fields(props)
            extra = {"due_ms": due, "late_ms": store_ts - due}
            qid = read_int(p, REAL_QID, 0)
            by_topic.setdefault(p.get(REAL_TOPIC) or "?", []).append(
                trace.msg_entry(mid, " ".join(keys) or None, tag, qid, None, extra))
        if not by_topic:  # nothing traced: no client is ever made
            return
        if self.dispatcher is None:
            self.dispatcher = TraceDispatcher(self.namesrv, name="scheduler-trace")
        self.dispatcher.add_events([trace.event(trace.DELAYED, store_ts, None, "DELIVERED", topic, broker, self.group,
                                                self.client, None, trace.columns(rows))
                                    for topic, rows in by_topic.items()])

    def close(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.close()

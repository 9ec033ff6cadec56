"""A trace queue that sends through a Producer of its own, built from name-server addresses.

For a holder that is not a client (the scheduler's Delayed events, `add_events`)
and for tests; a traced client gets its queue from its tracer factory
(producer.py's `client_tracer`). The queue, its thread and what a client records
are tracing.py's, re-exported here.
"""

from quiver.client.producer import trace_producer
from quiver.client.tracing import ClientTrace, TraceQueue, enabled

__all__ = ["ClientTrace", "TraceDispatcher", "enabled"]


class TraceDispatcher(TraceQueue):
    """`producer`: what sends (a started Producer), else one of its own on `namesrv`, made at
    the first send on `transport_factory` (a client's; quiver.testing: the fake network).
    Other keywords are TraceQueue's."""

    def __init__(self, namesrv, credentials=None, *, producer=None, transport_factory=None, **settings):
        if producer is not None:
            super().__init__(producer, **settings)
        else:
            super().__init__(make_producer=lambda: trace_producer(namesrv, credentials, transport_factory),
                             **settings)

"""The HA master's lag tracker keeps only the CommitLog ends some slave still lacks."""

import types

from quiver_broker.ha_master import ReplicationMaster
from quiver_broker.ha_stream import LagTracker


def _master(end):
    m = ReplicationMaster.__new__(ReplicationMaster)   # step() alone: no sockets, no thread
    m.store = types.SimpleNamespace(max_phys_offset=end)
    m._puts = __import__("collections").deque()
    m.lag = LagTracker()
    m.links = {}
    m.terms = None  # master/slave mode: no confirm offset to send
    m._post = lambda: None
    return m


def test_without_a_slave_the_put_ends_are_not_kept():
    m = _master(0)
    for i in range(1, 50_001):
        m._puts.append((i * 100, float(i)))
        if i % 1000 == 0:
            m.store.max_phys_offset = i * 100
            m.step(float(i))
    assert len(m.lag.ends) <= 1 and len(m.lag.times) == len(m.lag.ends)


def test_a_slave_keeps_what_it_lacks_and_no_more():
    m = _master(0)
    link = types.SimpleNamespace(acked=5_000, seen=0.0, diverged=True, handshake=False, sent_at=0.0)
    m.links = {b"s": link}
    m.expiry_s, m.hb_s = 1e9, 1e9
    for i in range(1, 101):
        m._puts.append((i * 100, float(i)))
    m.store.max_phys_offset = 10_000
    m.step(1.0)
    assert m.lag.ends[0] <= 5_100 and len(m.lag.ends) >= 50
    assert m.lag.lag_ms(5_000, 101.0) > 0

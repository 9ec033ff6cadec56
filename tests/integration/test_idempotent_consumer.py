"""At-least-once delivery, exactly-once effect: a consumer that dies after its database commit
but before committing its offsets gets the messages again, and SqlDedupe skips them (real
broker, real SQLite file)."""

import time

from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, func, select

from quiver import Admin, Message, Producer, PullConsumer
from quiver.client.idempotent import SqlDedupe

N = 60


def _consume(namesrv, engine, seen, effects, want, commit: bool) -> int:
    """Apply each message once per key; returns how many deliveries it saw."""
    delivered, deadline = 0, time.monotonic() + 30
    c = PullConsumer("billing", namesrv=namesrv, consume_from="first", auto_commit=False)
    c.subscribe("Charges")
    c.start()
    try:
        while delivered < want and time.monotonic() < deadline:
            for m in c.poll(0.3):
                delivered += 1
                with engine.begin() as conn:
                    if seen.claim(conn, m):
                        conn.execute(effects.insert().values(order=m.body.decode()))
        if commit:
            c.commit()
    finally:
        c.shutdown()
    return delivered


def test_a_redelivery_after_a_crash_before_the_offset_commit_takes_effect_once(cluster, tmp_path):
    Admin(namesrv=cluster.namesrv).create_topic("Charges", queues=2)
    with Producer("shop", namesrv=cluster.namesrv) as p:
        for i in range(N):
            p.send(Message("Charges", f"order-{i}".encode()))
    engine = create_engine(f"sqlite:///{tmp_path / 'billing.db'}")
    effects = Table("charges", MetaData(), Column("id", Integer, primary_key=True), Column("order", String(32)))
    effects.metadata.create_all(engine)
    seen = SqlDedupe(engine, group="billing")
    try:
        assert _consume(cluster.namesrv, engine, seen, effects, N, commit=False) == N   # "crashes" uncommitted
        assert _consume(cluster.namesrv, engine, seen, effects, N, commit=True) == N    # all delivered again
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(effects)).scalar() == N
            assert conn.execute(select(func.count(func.distinct(effects.c.order)))).scalar() == N
    finally:
        engine.dispose()

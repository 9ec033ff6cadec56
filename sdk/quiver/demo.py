"""The short demo `quiver up --demo` runs: send, consume, query by key."""

import time

from .admin import Admin
from .consumer import PullConsumer
from .message import Message
from .producer import Producer


def run_demo(namesrv: str, topic: str = "DemoOrders", count: int = 1000) -> None:
    admin = Admin(namesrv=namesrv)
    admin.create_topic(topic, queues=4)
    print(f"demo: created topic {topic} with 4 queues")
    with Producer("demo-producer", namesrv=namesrv) as p:
        first = p.send(Message(topic, b"order #0", tags="created", keys=["order-0"]))
        print(f"demo: sync send -> {first.status.value} msg_id={first.msg_id} queue={first.queue_id}")
        t0 = time.perf_counter()
        futs = [p.send_async(Message(topic, f"order #{i}".encode(), tags="created" if i % 2 else "paid",
                                     keys=[f"order-{i}"])) for i in range(1, count)]
        for f in futs:
            f.result()
        print(f"demo: {count - 1} pipelined sends in {time.perf_counter() - t0:.2f} s")
    with PullConsumer("demo-consumer", namesrv=namesrv, consume_from="first") as c:
        c.subscribe(topic, "paid")
        got, deadline = [], time.monotonic() + 10
        while len(got) < count // 2 and time.monotonic() < deadline:
            got.extend(c.poll(0.5))
        c.commit()
        print(f"demo: consumer with tag filter 'paid' got {len(got)} messages")
    hits = admin.query_by_key(topic, "order-42")
    print(f"demo: query by key order-42 -> {[m.body.decode() for m in hits]}")
    view = admin.view_message(first.offset_msg_id)
    print(f"demo: view by offset msgId {first.offset_msg_id} -> {view.body.decode()!r}")
    admin.shutdown()

"""PushConsumer with consume_inline=True against real processes: the listener runs on the IO
thread that received the pull's answer; nothing lost or doubled, offsets committed (its retries:
test_retry_dlq.py, its orderly consumption: test_orderly.py)."""

import threading

from quiver import Admin, ConsumeResult, Message, Producer, PushConsumer
from support.waiting import wait_for as _wait


def test_every_message_once_across_queues_and_committed(cluster):
    Admin(namesrv=cluster.namesrv).create_topic("Inline", queues=4)
    seen: list[bytes] = []
    threads: set[str] = set()

    def fn(msgs):
        threads.add(threading.current_thread().name)
        seen.extend(m.body for m in msgs)
        return ConsumeResult.SUCCESS

    sent = [f"m-{i}".encode() for i in range(2000)]
    with Producer("pg", namesrv=cluster.namesrv) as p:
        for f in [p.send_async(Message("Inline", b)) for b in sent]:
            f.result(10)
    c = PushConsumer("inline", namesrv=cluster.namesrv, consume_from="first", consume_inline=True, batch_size=3)
    c.subscribe("Inline")
    c.register(fn)
    with c:
        c.start()
        _wait(lambda: len(seen) >= len(sent), 20, "every message")
        io_thread = c._transport._thread.name
    assert sorted(seen) == sorted(sent)                       # none lost, none twice
    assert threads == {io_thread}
    # committed on shutdown: the group resumes past everything
    again: list[bytes] = []
    c2 = PushConsumer("inline", namesrv=cluster.namesrv, consume_from="first", consume_inline=True)
    c2.subscribe("Inline")
    c2.register(lambda msgs: again.extend(m.body for m in msgs) or ConsumeResult.SUCCESS)
    with Producer("pg", namesrv=cluster.namesrv) as p, c2:
        c2.start()
        p.send(Message("Inline", b"after"))
        _wait(lambda: again, 10, "the message sent after the restart")
    assert again == [b"after"]

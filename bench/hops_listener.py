"""The consumer of bench.hops, in its own process: when each message reached the app.

    python -m bench.hops_listener NAMESRV TOPIC QUEUES COUNT SECONDS MODE

MODE: push (PushConsumer, listener on the consume threads), push-inline (consume_inline:
the listener on the IO thread), pull (PullConsumer.poll, as `python -m bench` e2e),
pull-direct (direct_poll). Messages whose property "i" is -1 are warm-up: "ready" is
printed once one has come from each of the topic's QUEUES queues (every queue owned and
pulled). Then prints one JSON object: {"seen": [[i, t, born_ms, store_ms], ...],
"threads": {thread name: messages}}, t = time.time() when the listener (or poll) got it.
"""

import json
import sys
import threading
import time

from quiver import ConsumeResult, PullConsumer, PushConsumer


def main(namesrv: str, topic: str, queues: int, count: int, seconds: float, mode: str) -> None:
    seen: list[list] = []
    threads: dict[str, int] = {}
    warm: set[int] = set()
    done = threading.Event()
    lock = threading.Lock()

    def got(msgs) -> None:
        now = time.time()
        name = threading.current_thread().name.rstrip("0123456789_")
        with lock:
            for m in msgs:
                i = int(m.properties.get("i", "-1"))
                if i < 0:
                    if len(warm) < queues:
                        warm.add(m.queue_id)
                        if len(warm) == queues:
                            print("ready", flush=True)
                    continue
                seen.append([i, now, m.born_timestamp, m.store_timestamp])
                threads[name] = threads.get(name, 0) + 1
            if len(seen) >= count:
                done.set()

    deadline = time.monotonic() + seconds
    if mode.startswith("push"):
        c = PushConsumer("hops", namesrv=namesrv, consume_from="last", consume_inline=mode == "push-inline")
        c.subscribe(topic)

        def listener(msgs):
            got(msgs)
            return ConsumeResult.SUCCESS
        c.register(listener)
        c.start()
        try:
            done.wait(max(0.0, deadline - time.monotonic()))
        finally:
            c.shutdown()
    else:
        with PullConsumer("hops", namesrv=namesrv, consume_from="last", direct_poll=mode == "pull-direct") as pc:
            pc.subscribe(topic)
            while not done.is_set() and time.monotonic() < deadline:
                msgs = pc.poll(0.05)
                if msgs:
                    got(msgs)
    print(json.dumps({"seen": seen, "threads": threads}), flush=True)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], int(a[2]), int(a[3]), float(a[4]), a[5])

"""/metrics under idle connections from anyone who reaches the port (a real broker process).

prometheus_client's server spent a thread and a file descriptor on every connection and never
closed an idle one: 1,200 idle connections made 1,212 broker threads and a normal send took 4 s.
The served port now has one thread, a cap on open connections (the oldest evicted) and 5 s per
connection: the thread count stays flat, a scrape and a send still work at once.
"""

import socket
import time
import urllib.request

import pytest

from quiver import Admin, Message, Producer
from quiver.tools.local import free_port
from support.waiting import wait_for

pytestmark = pytest.mark.timeout(300)

IDLE = 1200


def threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def scrape(addr: str) -> str:
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
        return r.read().decode()


@pytest.fixture
def broker(make_cluster):
    metrics = f"127.0.0.1:{free_port()}"
    c = make_cluster(broker_args=("--metrics-listen", metrics))
    admin = Admin(namesrv=c.namesrv)
    admin.create_topic("Limits", queues=1)
    admin.shutdown()
    svc = next(s for s in c.services if s.role == "broker")
    return c, svc, metrics


def test_idle_connections_do_not_add_threads_and_a_scrape_and_a_send_still_work(broker):
    c, svc, metrics = broker
    host, port = metrics.rsplit(":", 1)
    assert "quiver_requests_total" in scrape(metrics)
    before = threads(svc.pid)
    idle = []
    try:
        for _ in range(IDLE):
            s = socket.create_connection((host, int(port)), timeout=10)
            idle.append(s)
        time.sleep(1.0)   # let the server accept them all
        during = threads(svc.pid)
        assert during <= before + 2, (before, during)
        t0 = time.monotonic()
        assert "quiver_requests_total" in scrape(metrics)   # the oldest idle one made room
        with Producer("limits-pg", namesrv=c.namesrv) as p:
            assert p.send(Message("Limits", b"sent while /metrics is flooded")).topic == "Limits"
        took = time.monotonic() - t0
        assert threads(svc.pid) <= before + 2
    finally:
        for s in idle:
            s.close()
    print(f"threads before {before}, with {IDLE} idle connections {during}; a scrape and a send took {took:.3f} s")


def test_an_idle_or_trickling_connection_is_closed_after_its_deadline(broker):
    c, svc, metrics = broker
    host, port = metrics.rsplit(":", 1)
    quiet = socket.create_connection((host, int(port)), timeout=30)
    slow = socket.create_connection((host, int(port)), timeout=30)
    try:
        t0 = time.monotonic()
        slow.sendall(b"GET /metr")            # a request head that never ends
        assert quiet.recv(1) == b"" and slow.recv(1) == b""   # closed by the server
        assert 3.0 <= time.monotonic() - t0 <= 20.0
    finally:
        quiet.close()
        slow.close()
    wait_for(lambda: "quiver_requests_total" in scrape(metrics), 10, "a scrape after the deadlines")
    for bad, status in ((b"POST /metrics HTTP/1.1\r\n\r\n", b"405"), (b"GET /secret HTTP/1.1\r\n\r\n", b"404"),
                        (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 9000, b"431")):
        s = socket.create_connection((host, int(port)), timeout=10)
        try:
            s.sendall(bad)
            assert s.recv(64).split()[1] == status
        finally:
            s.close()

"""The console's counters over an in-process cluster (quiver.testing): each page answered counted
by page and status, each Admin call by method, a call that raised by its error class, and the
families render and parse as Prometheus text."""

from quiver.runtime.service import Service
from quiver.testing import stub_cluster
from support.scrape import samples, value

from quiver_console.app import create_app
from quiver_console.config import Config
from quiver_console.metrics import ConsoleMetrics, ConsoleStats


def test_pages_and_admin_calls_are_counted():
    stats = ConsoleStats()
    with stub_cluster(brokers=1) as c:
        c.admin().create_topic("Orders", queues=2)
        web = create_app(Config(), c.admin(), stats).test_client()
        assert web.get("/topics/Orders").status_code == 200
        assert web.get("/topics/Missing").status_code == 200     # the page shows the error
        assert web.get("/messages?key=k").status_code == 400      # a key search needs a topic
        assert web.get("/nowhere").status_code == 404
    got = samples(ConsoleMetrics(Service("127.0.0.1:0", {}, "console"), stats))   # never bound
    requests = {(l["page"], l["status"]): v for l, v in got["quiver_console_http_requests_total"]}
    assert requests == {("topic", "200"): 2, ("messages", "400"): 1, ("_none", "404"): 1}
    assert value(got, "quiver_console_http_latency_seconds_count", page="topic") == 2
    assert value(got, "quiver_console_admin_calls_total", call="queues") == 2
    assert value(got, "quiver_console_admin_calls_total", call="min_offset") == 6   # Orders' two queues: first stored, first local, first not compacted
    assert value(got, "quiver_console_admin_errors_total", call="queues", error="TopicNotExistError") == 1
    assert value(got, "quiver_console_admin_errors_total", call="min_offset") is None

"""The metrics runtime every service shares: histograms, capped label maps, the listen address,
request stats on the real service loop, JSON log lines, the shared settings' checks, and
`quiver status -v` printing a peer's STATUS safely."""

import json
import logging
import sys
import urllib.error
import urllib.request

import pytest
from support.scrape import samples, value

from quiver.runtime import log_format, settings
from quiver.runtime.histogram import MAX_SERIES, OTHER, Histogram, RequestStats, bump, snapshot
from quiver.runtime.metrics import MetricsServer, ServiceCollector, parse_listen
from quiver.runtime.service import Service
from quiver.tools import cli_status
from quiver.wire import protocol
from quiver.wire.codes import RequestCode, ResponseCode
from quiver_namesrv.config import Config as NamesrvConfig


class Sink:
    """A ROUTER stand-in that keeps what the service sends."""

    def __init__(self):
        self.sent = []

    def send_multipart(self, frames, flags=0, copy=True):
        self.sent.append(frames)


def test_histogram_buckets_are_cumulative_and_end_at_inf():
    h = Histogram((1.0, 2.0))
    for v in (0.5, 1.0, 1.5, 9.0, -3.0):
        h.observe(v)
    assert h.buckets() == [("1.0", 3), ("2.0", 4), ("+Inf", 5)]
    assert h.sum == 9.0
    both = h.merged(h)
    assert both.buckets()[-1] == ("+Inf", 10) and h.buckets()[-1] == ("+Inf", 5)


def test_bump_caps_label_sets_from_peers():
    d: dict = {}
    for i in range(MAX_SERIES + 50):
        bump(d, (f"topic-{i}", "g"))
    assert len(d) == MAX_SERIES + 1 and d[(OTHER, OTHER)] == 50
    bump(d, ("topic-0", "g"), 5)
    assert d[("topic-0", "g")] == 6 and snapshot(d) == d


@pytest.mark.parametrize("text", ["", "9100", "host:", "h:-1", "h:65536", "h:٣", "h: 1", "h:1x", "x" * 300 + ":1"])
def test_parse_listen_refuses_what_is_not_host_port(text):
    with pytest.raises(ValueError):
        parse_listen(text)


def test_parse_listen_accepts_wildcards_and_ipv6():
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen(":9100") == ("0.0.0.0", 9100)
    assert parse_listen("[::1]:9100") == ("::1", 9100)


def test_request_stats_on_the_service_loop_count_known_codes_only():
    svc = Service("127.0.0.1:1", {}, "unit")
    svc.use_socket(Sink())
    svc.handle([b"peer", *protocol.request(RequestCode.PING, 1)])
    svc.handle([b"peer", *protocol.request(RequestCode.STATUS, 2)])
    svc.handle([b"peer", *protocol.request(9999, 3)])           # unknown: an error, no latency series
    svc.handle([b"peer", b"not a version", b"{}"])                # malformed
    got = samples(ServiceCollector(svc))
    assert value(got, "quiver_rpc_latency_seconds_count", request_code="PING") == 1
    assert value(got, "quiver_rpc_latency_seconds_count", request_code="STATUS") == 1
    assert {l["request_code"] for l, _ in got["quiver_rpc_latency_seconds_count"]} == {"PING", "STATUS"}
    assert value(got, "quiver_request_errors_total", response_code="REQUEST_CODE_NOT_SUPPORTED") == 1
    assert value(got, "quiver_request_errors_total", response_code="VERSION_NOT_SUPPORTED") == 1
    assert value(got, "quiver_requests_total") == 2
    assert value(got, "quiver_service_events_total", event="unsupported") == 1
    assert value(got, "quiver_service_info", service="unit", listen="127.0.0.1:1") == 1


def test_request_stats_ignore_codes_they_do_not_know():
    stats = RequestStats([RequestCode.PING], clock=lambda: 10.0)
    stats.replied(RequestCode.PING, ResponseCode.SUCCESS, 9.5)
    stats.replied(RequestCode.STATUS, ResponseCode.SYSTEM_ERROR, 9.0)
    assert list(stats.latency) == [RequestCode.PING] and stats.latency[RequestCode.PING].sum == 0.5
    assert stats.errors == {ResponseCode.SYSTEM_ERROR: 1}


def test_a_failing_section_is_left_out_not_the_scrape():
    class Broken(ServiceCollector):
        def sections(self):
            def boom():
                raise RuntimeError("state went away")
                yield  # pragma: no cover
            return [boom]
    c = Broken(Service("127.0.0.1:1", {}, "unit"))
    assert value(samples(c), "quiver_service_info") == 1 and c.failed_sections == 1


def test_metrics_server_serves_on_a_free_loopback_port_and_stops():
    server = MetricsServer("127.0.0.1:0", ServiceCollector(Service("127.0.0.1:1", {}, "unit")))
    addr = server.start()
    try:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert "quiver_service_info" in text and "process_cpu_seconds_total" in text
    finally:
        server.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://{addr}/metrics", timeout=2)


def test_metrics_port_serves_an_index_at_root_and_404_elsewhere():
    server = MetricsServer("127.0.0.1:0", ServiceCollector(Service("127.0.0.1:1", {}, "unit")))
    addr = server.start()
    try:
        with urllib.request.urlopen(f"http://{addr}/", timeout=5) as r:
            body = r.read().decode()
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/html")
        assert 'href="/metrics"' in body and "quiver_" not in body
        for path in ("/metric", "/metrics/x", "/favicon.ico", "/index.html"):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(f"http://{addr}{path}", timeout=5)
            assert err.value.code == 404, path
    finally:
        server.stop()


def test_service_loop_counters_have_families_of_their_own():
    svc = Service("127.0.0.1:1", {}, "unit")
    svc.use_socket(Sink())
    svc.handle([b"peer"])                                         # too short: dropped
    svc.handle([b"peer", *protocol.request(9999, 3)])           # unsupported
    svc.counters["flush_failed"] += 3                            # a loop's failures (loops.Failures)
    got = samples(ServiceCollector(svc))
    assert value(got, "quiver_frames_dropped_total") == 1
    assert value(got, "quiver_requests_unsupported_total") == 1
    assert value(got, "quiver_requests_denied_total") == 0
    assert value(got, "quiver_loop_failures_total", loop="flush") == 3
    assert value(got, "quiver_loop_failures_total", loop="send") is None   # send_failed has its own family
    assert value(got, "quiver_service_events_total", event="unsupported") == 1   # deprecated, still served


def _record(msg, *args, exc_info=None):
    return logging.LogRecord("quiver.test", logging.WARNING, __file__, 1, msg, args, exc_info)


def test_json_log_lines_are_one_object_with_every_field():
    fmt = log_format.formatter("json")
    line = fmt.format(_record("peer said %r\n\x1b[2J", "é\x00"))
    assert "\n" not in line
    obj = json.loads(line)
    assert obj["level"] == "WARNING" and obj["logger"] == "quiver.test" and obj["time"].endswith("Z")
    assert obj["message"] == "peer said 'é\\x00'\n\x1b[2J"
    try:
        raise ValueError("boom")
    except ValueError:
        obj = json.loads(fmt.format(_record("failed", exc_info=sys.exc_info())))
    assert "ValueError: boom" in obj["exc"]


def test_json_log_lines_survive_bad_args_and_lone_surrogates():
    fmt = log_format.formatter("json")
    assert "unformattable" in json.loads(fmt.format(_record("%d items", "many")))["message"]
    text = b"\xff".decode("utf-8", "surrogateescape")
    assert json.loads(fmt.format(_record("bytes: %s", text)))["message"] == "bytes: \\udcff"


def test_shared_settings_are_checked_at_load():
    assert settings.load(NamesrvConfig, ["--log-format", "json"], env={}).log_format == "json"
    assert settings.load(NamesrvConfig, [], env={"QUIVER_METRICS_LISTEN": "127.0.0.1:9100"}).metrics_listen
    for argv in (["--log-format", "xml"], ["--metrics-listen", "nope"], ["--metrics-listen", "h:99999"]):
        with pytest.raises(SystemExit):
            settings.load(NamesrvConfig, argv, env={})


def test_status_pretty_escapes_control_characters_and_cuts_deep_nesting():
    deep: dict = {"leaf": 1}
    for _ in range(50):
        deep = {"d": deep}
    lines = cli_status.pretty({"name\x1b[31m": "v\r\x07", "list": [1, "a\x1b"], "deep": deep, "rows": [{"a": 1}]})
    text = "\n".join(lines)
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert "name\\x1b[31m: v\\r\\x07" in text and "list: [1, a\\x1b]" in text
    assert "..." in text and len(lines) < 20
    assert "rows:" in text and "  -" in text

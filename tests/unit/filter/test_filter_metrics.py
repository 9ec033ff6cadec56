"""The filter server's collector: scanned and matched from the pull path's counters."""

from support.scrape import samples, value

from quiver.runtime.service import Service
from quiver_filter.metrics import FilterMetrics
from quiver_filter.selectors import SelectorCache


def test_filter_collector_reads_scanned_and_matched():
    svc = Service("127.0.0.1:1", {}, "filter")
    svc.counters.update(scanned=40, matched=10, pulls=3, replies_found=2, replies_not_found=1)
    got = samples(FilterMetrics(svc, SelectorCache(), lambda: True))
    assert value(got, "quiver_filter_scanned_messages_total") == 40
    assert value(got, "quiver_filter_matched_messages_total") == 10
    assert value(got, "quiver_filter_replies_total", found="true") == 2
    assert value(got, "quiver_filter_replies_total", found="false") == 1
    assert value(got, "quiver_filter_registered") == 1 and value(got, "quiver_filter_selectors") == 0

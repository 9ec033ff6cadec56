"""Periodic loops survive failing steps and failing items, and count them."""

import logging

from quiver.errors import InvalidParameterError
from quiver.runtime.loops import Failures


def test_each_skips_a_bad_item_counts_it_and_logs_it_once(caplog):
    failures = Failures()
    seen = []

    def step(item):
        if item == "bad":
            raise InvalidParameterError("bad item")
        seen.append(item)

    with caplog.at_level(logging.WARNING, logger="quiver.runtime.loops"):
        assert failures.each("scan", ["a", "bad", "b"], step) == 2
        assert failures.each("scan", ["bad", "c"], step) == 1
    assert seen == ["a", "b", "c"]
    assert failures.counters["scan_failed"] == 2
    assert len([r for r in caplog.records if "bad item" in r.getMessage()]) == 1


def test_a_bug_is_logged_with_its_traceback(caplog):
    failures = Failures()
    with caplog.at_level(logging.WARNING, logger="quiver.runtime.loops"):
        assert not failures.guard("x", lambda: 1 / 0)
    assert caplog.records[0].exc_info is not None


"""The transaction checker's collector: rounds, results by a known name only, per-broker backlog."""

import collections

from support.scrape import samples, value

from quiver.runtime.service import Service
from quiver_txn.metrics import TxnCheckerMetrics


class State:
    def __init__(self, behind):
        self.behind = behind


class Checker:
    def __init__(self):
        self.brokers = {"broker-a": State(4), "broker-b": State(0)}
        self.owned = {"broker-a": "127.0.0.1:1", "broker-b": "127.0.0.1:2"}


def test_txn_collector_bounds_results_a_broker_named():
    counters = collections.Counter(rounds=3, checked=2, resolved=1, ops_read=9, failed_rounds=1)
    counters["\x1b[31m made up by a broker"] = 7
    got = samples(TxnCheckerMetrics(Service("127.0.0.1:1", {}, "txn-checker"), counters, Checker()))
    assert value(got, "quiver_transaction_check_rounds_total") == 3
    assert value(got, "quiver_transaction_check_rounds_failed_total") == 1
    results = {l["result"]: v for l, v in got["quiver_transaction_check_results_total"]}
    assert results["checked"] == 2 and results["resolved"] == 1 and results["other"] == 7
    assert len(results) == 7
    assert value(got, "quiver_transaction_unchecked_half_messages", broker="broker-a") == 4
    assert value(got, "quiver_transaction_checked_brokers") == 2

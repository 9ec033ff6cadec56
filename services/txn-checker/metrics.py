"""The transaction checker's Prometheus metrics: check rounds, check results, and per broker the
half messages its rounds have not walked past yet.

All read at scrape time: counters the check job keeps, and each owned broker's
`behind`, set at the end of its round (checking.py). Check results come from
brokers' replies, so only the known ones are labels; anything else is "other".
"""

from quiver.runtime.histogram import snapshot
from quiver.runtime.metrics import ServiceCollector, counter, gauge

RESULTS = ("checked", "no_producer", "requeued", "discarded", "resolved", "missing")
_NOT_RESULTS = {"rounds", "failed_rounds", "bad_system_properties", "ops_read"}   # the job's own counters


class TxnCheckerMetrics(ServiceCollector):
    def __init__(self, service, counters, checker):
        super().__init__(service)
        self.counters = counters   # the check job's (App.counters)
        self.checker = checker     # checking.Checker

    def sections(self) -> list:
        return [self._rounds]

    def _rounds(self):
        c = snapshot(self.counters)
        yield counter("quiver_transaction_check_rounds_total", "check rounds run", rows=[((), c.get("rounds", 0))])
        yield counter("quiver_transaction_check_rounds_failed_total", "check rounds that failed",
                      rows=[((), c.get("failed_rounds", 0))])
        results = {r: c.get(r, 0) for r in RESULTS}
        results["other"] = sum(n for k, n in c.items() if k not in RESULTS and k not in _NOT_RESULTS)
        yield counter("quiver_transaction_check_results_total", "half messages checked, by the broker's answer",
                      ("result",), sorted(results.items()))
        brokers = snapshot(self.checker.brokers)
        yield gauge("quiver_transaction_unchecked_half_messages", "half messages past where the last round on "
                    "the broker stopped (younger than the check time, or not reached)", ("broker",),
                    sorted((name, st.behind) for name, st in brokers.items()))
        yield gauge("quiver_transaction_checked_brokers", "brokers whose half queue this instance checks",
                    rows=[((), len(self.checker.owned))])



def collector(app) -> TxnCheckerMetrics:
    """What `python -m quiver_txn --metrics-listen` serves."""
    return TxnCheckerMetrics(app.service, app.counters, app.checker)

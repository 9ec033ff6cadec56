"""The scheduler's collector: deliveries and their lateness (stats.py), pending per level from
its sample step."""

from support.scrape import samples, value

from quiver.runtime.service import Service
from quiver_scheduler.metrics import SchedulerMetrics
from quiver_scheduler.stats import DeliveryStats


class Levels:
    def pending_by_level(self):
        return {"10": 1, "2": 5, "1": 0}


class Timers:
    def in_memory(self):
        return 4


def test_scheduler_collector_counts_deliveries_and_samples_pending():
    stats = DeliveryStats()
    stats.delivered(10_000, [9_000, 10_000, 10_500], ["a", "b", "c"])   # 1 s late, on time, early
    m = SchedulerMetrics(Service("127.0.0.1:1", {}, "scheduler"), stats, Levels(), Timers(), {"u1": "running",
                                                                                              "u2": "starting"})
    got = samples(m)
    assert value(got, "quiver_scheduler_delivered_total") == 3 and value(got, "quiver_scheduler_early_total") == 1
    assert value(got, "quiver_scheduler_delivery_lateness_seconds_count") == 3
    assert value(got, "quiver_scheduler_delivery_lateness_seconds_sum") == 1.0
    assert value(got, "quiver_scheduler_delivery_lateness_seconds_bucket", le="0.01") == 2
    assert "quiver_scheduler_pending_messages" not in got   # not sampled yet
    m.sample_step()
    got = samples(m)
    assert [(l["level"], v) for l, v in got["quiver_scheduler_pending_messages"]] == [("1", 0), ("2", 5), ("10", 1)]
    assert value(got, "quiver_scheduler_timers_in_memory") == 4 and value(got, "quiver_scheduler_owned_units") == 1

"""The scheduler's Prometheus metrics: messages pending per delay level, timers held, deliveries
and how late they were (RocketMQ 5 has rocketmq_timer_* for its timer wheel; these are ours).

Delivery counters and the lateness histogram (stats.py) are read at scrape time;
pending per level and owned units are sampled by `sample_step` on the service
thread (they walk its queue tables) every SAMPLE_INTERVAL_S.
"""

from quiver.runtime.metrics import ServiceCollector, counter, gauge, histogram

SAMPLE_INTERVAL_S = 2.0


class SchedulerMetrics(ServiceCollector):
    def __init__(self, service, stats, levels, timers, owned):
        super().__init__(service)
        self.stats = stats        # stats.DeliveryStats
        self.levels = levels      # levels.Levels
        self.timers = timers      # timers.Timers
        self.owned = owned        # unit -> "starting" | "running" (the App's dict)
        self.sample: dict = {}

    def sample_step(self) -> dict:
        self.sample = {"pending": self.levels.pending_by_level(), "timers": self.timers.in_memory(),
                       "owned": sum(s == "running" for s in list(self.owned.values()))}
        return self.sample

    def sections(self) -> list:
        return [self._deliveries, self._sampled]

    def _deliveries(self):
        s = self.stats
        yield counter("quiver_scheduler_delivered_total", "scheduled messages put back on their topic",
                      rows=[((), s.count)])
        yield counter("quiver_scheduler_early_total", "deliveries stored before their due time",
                      rows=[((), s.early)])
        yield counter("quiver_scheduler_cancelled_skipped_total", "cancelled messages not delivered",
                      rows=[((), s.cancelled_skipped)])
        yield histogram("quiver_scheduler_delivery_lateness_seconds", "stored on its topic minus due time "
                        "(early: 0)", rows=[((), s.lateness)])

    def _sampled(self):
        s = self.sample
        if not s:
            return
        yield gauge("quiver_scheduler_pending_messages", "delayed messages waiting, by delay level (owned units)",
                    ("level",), sorted(s["pending"].items(), key=lambda kv: int(kv[0])))
        yield gauge("quiver_scheduler_timers_in_memory", "timer messages (deliver_at) loaded for the next window",
                    rows=[((), s["timers"])])
        yield gauge("quiver_scheduler_owned_units", "delay-level and timer units this instance runs",
                    rows=[((), s["owned"])])


def collector(app) -> SchedulerMetrics:
    """What `python -m quiver_scheduler --metrics-listen` serves (call before the loop runs)."""
    m = SchedulerMetrics(app.service, app.stats, app.levels, app.timers, app.owned)
    app.service.every("metrics_sample", SAMPLE_INTERVAL_S, m.sample_step, first_delay_s=0.0)
    return m

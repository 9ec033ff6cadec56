"""The metric names Quiver's services export, read from their collectors (not from their source),
for tests of what deploy/ files use: a renamed or dropped family breaks those tests."""

import concurrent.futures
import functools
import types

from quiver.runtime.service import Service

_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "info": ("_info",),
             "summary": ("_count", "_sum")}


def names(collector) -> set[str]:
    """Every sample name `collector` serves (a family with no sample yet included)."""
    out = set()
    for fam in collector.collect():
        out.add(fam.name)
        out.update(fam.name + s for s in _SUFFIXES.get(fam.type, ()))
    return out


@functools.lru_cache(maxsize=1)   # one stub cluster per test session, whoever asks first
def broker_namesrv_scheduler() -> frozenset[str]:
    """The broker's (on a stub cluster, sampled once), a name server's with a controller and a
    scheduler's families, each with the families every service shares."""
    from quiver.testing import stub_cluster
    from quiver_broker.metrics import BrokerMetrics
    from quiver_namesrv.metrics import NamesrvMetrics
    from quiver_scheduler.metrics import SchedulerMetrics
    from quiver_scheduler.stats import DeliveryStats

    with stub_cluster() as c:
        app = c.broker()
        m = BrokerMetrics(app.service, ("broker-a", "C", "x"), app.store, app.topics, app.metadata, app.clients,
                          app.puller, app.traffic, app.ha)
        sampled = concurrent.futures.Future()
        app.service.call_soon_threadsafe(lambda: sampled.set_result(m.sample_step()))
        sampled.result(5)
        got = names(m)
    svc = Service("127.0.0.1:1", {}, "unit")
    ctl = types.SimpleNamespace(elections=0, is_leader=False, state=types.SimpleNamespace(data={}), fallback_s=1.0,
                                heard={})
    got |= names(NamesrvMetrics(svc, types.SimpleNamespace(live={}, topics={}, clusters={}), ctl))
    sched = SchedulerMetrics(svc, DeliveryStats(), types.SimpleNamespace(pending_by_level=lambda: {}),
                             types.SimpleNamespace(in_memory=lambda: 0), {})
    sched.sample_step()
    return frozenset(got | names(sched))

"""The scheduler follows a broker name to its new master (automatic failover) without processes."""

from types import SimpleNamespace

from quiver_scheduler.allocation import Unit
from quiver_scheduler.app import App
from quiver_scheduler.membership import BrokerInfo


def test_units_of_a_broker_at_a_new_address_restart_there():
    unit, other = Unit("fo", "S", 0), Unit("b2", "S", 0)
    later = []
    app = SimpleNamespace(owned={unit: "running", other: "running"}, released=[],
                          brokers={"fo": BrokerInfo("10.0.0.1:1", None), "b2": BrokerInfo("10.0.0.9:1", None)},
                          config=SimpleNamespace(takeover_delay_ms=500),
                          service=SimpleNamespace(call_later=lambda s, fn: later.append(fn)))
    app._release = lambda u: (app.released.append(u), app.owned.pop(u))
    moved = {"fo": BrokerInfo("10.0.0.2:1", None), "b2": BrokerInfo("10.0.0.9:1", None)}
    App.apply_allocation(app, [unit, other], moved)
    assert app.released == [unit] and app.owned == {other: "running", unit: "starting"} and len(later) == 1
    assert app.brokers == moved

"""A filter server attached to one broker serves pulls for any broker of its cluster (issue 16):
with or without --broker, each register round refreshes the cluster's broker addresses from the
name servers; a pull naming an address not known starts a look at the cluster at once (a broker
that just joined is served) and is refused only if the look does not find it. No processes: a
fake transport."""

import pytest

from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.protocol import Envelope
from quiver_filter.app import App
from quiver_filter.config import Config

BA, BB, NS = "127.0.0.1:30911", "127.0.0.1:30912", "127.0.0.1:39876"
CLUSTER = {"brokers": {"a": {"cluster": "C", "broker_name": "a", "addrs": {"0": BA}},
                       "b": {"cluster": "C", "broker_name": "b", "addrs": {"0": BB}}},
           "live": {BA: {"broker_name": "a", "filter_servers": ["127.0.0.1:30929"]},   # another filter server
                    BB: {"broker_name": "b", "filter_servers": []}}}


class _Transport:
    """Answers at once: cluster info from the name server, registrations from brokers; records pulls."""

    def __init__(self, namesrv_up: bool = True):
        self.sent, self.namesrv_up = [], namesrv_up

    def send(self, addr, req, ext, bodies, callback, timeout=3.0):
        self.sent.append((addr, req))
        if isinstance(req, rq.GetClusterInfo):
            callback(Envelope(ResponseCode.SUCCESS, 1, {"cluster": CLUSTER}, [], "") if self.namesrv_up
                     else ConnectionError("no name server"))
        elif isinstance(req, rq.RegisterFilterServer):
            callback(Envelope(ResponseCode.SUCCESS, 1, {"broker_name": "a"}, [], ""))

    def close(self):
        pass


@pytest.fixture
def make_app():
    made = []

    def make(namesrv_up: bool = True, **over) -> App:
        app = App(Config(listen="127.0.0.1:30921", namesrv=NS, register_interval_ms=1000, **over))
        made.append(app)
        app.transport.close()
        app.transport = _Transport(namesrv_up)
        app.service.call_soon_threadsafe = lambda fn, *args: fn(*args)   # the service thread, here
        app.later = []
        app.service.call_later = lambda delay_s, fn, *args: app.later.append(delay_s)
        return app
    yield make
    for app in made:
        app.service.close()


class _Req:
    def __init__(self, **fields):
        self.args = rq.PullMessage(topic="T", queue_id=0, offset=0, expression="a > 1", expression_type="SQL92",
                                   **fields)
        self.replies = []
        self.answered = False

    def reply(self, *answer):
        self.replies.append(answer)
        self.answered = True


def _pulls(app) -> list[str]:
    return [addr for addr, req in app.transport.sent if isinstance(req, rq.PullMessage)]


def test_a_filter_server_given_its_broker_learns_the_cluster_and_serves_every_broker(make_app):
    app = make_app(broker=BA)
    app.register_step()
    sent = [(addr, type(req).__name__) for addr, req in app.transport.sent]
    assert sent == [(BA, "RegisterFilterServer"), (NS, "GetClusterInfo")]   # registered first, not after a look
    assert app.broker == BA and app.known_brokers == {BA, BB} and app.later == [1.0]
    assert app.status()["serves_brokers"] == [BA, BB]
    pull = app.service.handlers[RequestCode.PULL_MESSAGE]
    pull(_Req(broker_addr=BB))
    pull(_Req())                                          # no broker named: its own
    assert _pulls(app) == [BB, BA]
    stranger = _Req(broker_addr="127.0.0.1:1")
    pull(stranger)                                        # looked for, not found: refused with why
    assert stranger.replies and stranger.replies[0][0] == ResponseCode.SERVICE_NOT_AVAILABLE
    assert "not a broker of this cluster" in stranger.replies[0][1]
    assert _pulls(app) == [BB, BA]


def test_a_broker_that_joined_since_the_last_round_is_served_after_one_look(make_app, monkeypatch):
    app = make_app(broker=BA)
    app.register_step()
    bc = "127.0.0.1:30913"
    brokers = dict(CLUSTER["brokers"], c={"cluster": "C", "broker_name": "c", "addrs": {"0": bc}})
    monkeypatch.setitem(CLUSTER, "brokers", brokers)      # broker c registers after our round
    looks = sum(isinstance(r, rq.GetClusterInfo) for _, r in app.transport.sent)
    pull = app.service.handlers[RequestCode.PULL_MESSAGE]
    req = _Req(broker_addr=bc)
    pull(req)
    assert _pulls(app) == [bc] and not req.replies
    assert sum(isinstance(r, rq.GetClusterInfo) for _, r in app.transport.sent) == looks + 1
    for _ in range(5):                                     # unknown addresses: at most one look a second
        pull(_Req(broker_addr="127.0.0.1:2"))
    assert sum(isinstance(r, rq.GetClusterInfo) for _, r in app.transport.sent) == looks + 1


def test_with_no_name_server_a_given_broker_is_still_registered_and_served(make_app):
    app = make_app(namesrv_up=False, broker=BA)
    app.register_step()
    assert app.registered_at is not None and app.known_brokers == set() and app.later == [1.0]
    app.service.handlers[RequestCode.PULL_MESSAGE](_Req(broker_addr=BA))
    assert _pulls(app) == [BA]


def test_without_broker_it_attaches_to_the_least_loaded_and_serves_the_rest(make_app):
    app = make_app()
    app.register_step()
    assert app.broker == BB and app.known_brokers == {BA, BB}

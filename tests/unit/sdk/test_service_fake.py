"""Service.handle's fallbacks on the real service loop (quiver.testing's network, no sockets).

Unknown code -> REQUEST_CODE_NOT_SUPPORTED naming the service; a field of the
wrong type or range -> INVALID_PARAMETER (or the field's own code) naming the
field; a QuiverError -> its own code; anything else -> SYSTEM_ERROR with the
exception in the remark; malformed frames -> BAD_REQUEST / VERSION_NOT_SUPPORTED
with the id they carried. After each, the loop still answers.
"""

import logging

import orjson
import pytest

from quiver.wire import protocol
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import (SystemError_, InvalidParameterError, MessageIllegalError,
                           RequestCodeNotSupportedError, RequestTimeoutError, TopicNotExistError)
from quiver.runtime.service import Service
from quiver.testing import FakeNetwork, stub_cluster, wait_until

ADDR = "192.0.2.9:2"


def _boom(req):
    raise RuntimeError("boom")


def _not_found(req):
    raise TopicNotExistError(f"no topic {req.args.topic!r}")


@pytest.fixture
def toy():
    net = FakeNetwork()
    svc = Service(ADDR, {RequestCode.GET_MAX_OFFSET: _boom, RequestCode.GET_MIN_OFFSET: _not_found}, "toy")
    net.serve(svc)
    yield net, svc
    net.close()


def _still_alive(net):
    assert net.call(ADDR, rq.Ping()).remark == "pong"


def test_unknown_code_is_not_supported_and_names_the_service(toy):
    net, svc = toy
    with pytest.raises(RequestCodeNotSupportedError, match="4242 is not supported by toy"):
        net.call(ADDR, 4242, {"x": 1})
    assert svc.counters["unsupported"] == 1
    _still_alive(net)


def test_bad_field_is_invalid_parameter_naming_the_field(toy):
    net, svc = toy
    with pytest.raises(InvalidParameterError) as err:
        net.call(ADDR, RequestCode.GET_MIN_OFFSET, {"t": "T", "q": "zero"})
    assert "field 'q' (queue_id)" in err.value.remark and "'zero'" in err.value.remark
    assert svc.counters["bad_requests"] == 1
    _still_alive(net)


def test_handler_exception_is_system_error_with_remark(toy, caplog):
    net, svc = toy
    with caplog.at_level(logging.ERROR, logger="quiver.runtime.service"):
        with pytest.raises(SystemError_, match="RuntimeError: boom"):
            net.call(ADDR, rq.GetMaxOffset(topic="T", queue_id=0))
    assert "handler for code" in caplog.text  # the traceback is logged once, on the service side
    _still_alive(net)


def test_quiver_error_keeps_its_code(toy):
    net, _ = toy
    with pytest.raises(TopicNotExistError, match="no topic 'Nope'"):
        net.call(ADDR, rq.GetMinOffset(topic="Nope", queue_id=0))


@pytest.mark.parametrize("frames, code, req_id", [
    ([b"QV9", b'{"c": 9000, "id": 5}'], ResponseCode.VERSION_NOT_SUPPORTED, 5),
    ([b"QV9", b'\x00\x01'], ResponseCode.VERSION_NOT_SUPPORTED, protocol.UNATTRIBUTED_ID),
    ([protocol.VERSION, b"{not json"], ResponseCode.BAD_REQUEST, protocol.UNATTRIBUTED_ID),
    ([protocol.VERSION, b'{"c": "x", "id": 8}'], ResponseCode.BAD_REQUEST, 8),
    ([protocol.VERSION, b'{"c": 9000, "id": 9, "ext": 5}'], ResponseCode.BAD_REQUEST, 9),
    ([protocol.VERSION], ResponseCode.BAD_REQUEST, protocol.UNATTRIBUTED_ID),
])
def test_malformed_frames_get_a_bad_request_code_with_their_id(toy, frames, code, req_id):
    net, svc = toy
    env = net.exchange(ADDR, frames)
    assert (env.code, env.id) == (code, req_id)
    assert env.remark
    assert svc.counters["malformed_frames"] == 1
    _still_alive(net)


def test_a_reply_sent_to_a_service_is_counted_not_answered(toy):
    net, svc = toy
    reply = [protocol.VERSION, orjson.dumps({"c": 0, "id": 3, "r": ""})]
    with pytest.raises(RequestTimeoutError):
        net.exchange(ADDR, reply, timeout=0.2)
    assert svc.counters["replies_in"] == 1
    _still_alive(net)


def test_status_reports_counters(toy):
    net, _ = toy
    net.call(ADDR, rq.Ping())
    status = net.call(ADDR, rq.Status()).ext["status"]
    assert status["service"] == "toy" and status["counters"]["requests"] >= 1


def test_the_broker_and_name_server_use_the_same_fallbacks():
    with stub_cluster() as c:
        broker = c.broker_addrs["broker-a"]
        with pytest.raises(RequestCodeNotSupportedError, match="broker-store"):
            c.network.call(broker, 4242)
        with pytest.raises(RequestCodeNotSupportedError, match="namesrv"):
            c.network.call(c.namesrv, RequestCode.SEND_MESSAGE, {"t": "T", "m": [[0, ""]]}, [b"x"])
        with pytest.raises(MessageIllegalError):   # a send's topic field names MESSAGE_ILLEGAL, not INVALID_PARAMETER
            c.network.call(broker, RequestCode.SEND_MESSAGE, {"t": "bad topic!", "m": [[0, ""]]}, [b"x"])
        with pytest.raises(TopicNotExistError):
            c.network.call(c.namesrv, rq.GetRouteInfo(topic="Nowhere"))
        assert wait_until(lambda: c.broker().service.counters["bad_requests"] == 1)

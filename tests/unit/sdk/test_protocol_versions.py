"""A peer of another protocol version is refused by name, and the refusal reaches the request it answers."""

import threading

import orjson
import pytest
import zmq

from quiver.errors import ProtocolError, VersionNotSupportedError
from quiver.wire import protocol
from quiver.wire import requests as rq
from quiver.wire.transport import Transport


@pytest.mark.parametrize("header, rid", [
    (b'{"c": 10, "id": 42, "ext": {"new": 1}}', 42),
    (b'{"c": 10, "id": "42"}', protocol.UNATTRIBUTED_ID),
    (b"\x00not json", protocol.UNATTRIBUTED_ID),
    (b"[42]", protocol.UNATTRIBUTED_ID),
])
def test_a_frame_of_another_version_is_refused_with_its_id_when_it_has_one(header, rid):
    with pytest.raises(ProtocolError) as info:
        protocol.decode([b"QV2", header])
    assert info.value.version_mismatch
    assert protocol.request_id_of(info.value) == rid
    assert "QV2" in info.value.remark and "QV1" in info.value.remark and "upgrade" in info.value.remark


def test_a_client_call_answered_in_another_version_fails_at_once_with_the_refusal():
    """A server of another version answers in its own frame: the call fails with VERSION_NOT_SUPPORTED
    naming both versions, long before its timeout (before: the reply was dropped, the call timed out)."""
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()

    def serve():
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        while not stop.is_set():
            if poller.poll(50):
                ident, _, head, *_ = router.recv_multipart()
                rid = orjson.loads(head)["id"]
                router.send_multipart([ident, b"QV2", orjson.dumps({"c": 0, "id": rid, "r": "", "v2": True})])

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    t = Transport("version-test")
    try:
        with pytest.raises(VersionNotSupportedError) as info:
            t.call(f"127.0.0.1:{port}", rq.Ping(), timeout=20.0)
        assert "QV2" in info.value.remark and "QV1" in info.value.remark
        assert f"127.0.0.1:{port}" in info.value.remark
        with pytest.raises(VersionNotSupportedError, match="QV2"):   # the IO thread's path
            t.call_future(f"127.0.0.1:{port}", rq.Ping(), timeout=20.0).result(10)
    finally:
        t.close()
        stop.set()
        server.join(5)
        router.close(0)

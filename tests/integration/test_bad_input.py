"""Every kind of bad input gets its response code and a remark; the broker stays up, nothing is lost."""

import orjson
import pytest
import zmq

from quiver import Admin, Message, Producer
from quiver.wire import protocol
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import (InvalidParameterError, MessageIllegalError, NoPermissionError,
                           PropertiesSizeExceededError, TopicNotExistError)
from quiver.wire.transport import Transport


@pytest.fixture
def raw(cluster):
    """A bare DEALER on the broker: sends exactly the frames a test writes."""
    broker = next(s for s in cluster.services if s.role == "broker")
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 3000)
    sock.connect(f"tcp://{broker.addr}")
    yield sock, broker
    sock.close()


def _ask(sock, frames):
    sock.send_multipart(frames)
    return protocol.decode(sock.recv_multipart())


def _send_raw(sock, ext, bodies, code=RequestCode.SEND_MESSAGE):
    return _ask(sock, protocol.request(code, 5, ext, bodies))


def test_malformed_frames_answered_and_counted(raw):
    sock, _ = raw
    env = _ask(sock, [b"QV1", b"{garbage"])
    assert env.code == ResponseCode.BAD_REQUEST and "JSON" in env.remark and env.id == -1
    env = _ask(sock, [b"QV0", b"{}"])
    assert env.code == ResponseCode.VERSION_NOT_SUPPORTED and "QV1" in env.remark
    env = _ask(sock, [b"QV1", orjson.dumps({"c": "x", "id": 77})])
    assert env.code == ResponseCode.BAD_REQUEST and env.id == 77
    env = _ask(sock, protocol.request(4242, 8))
    assert env.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "4242" in env.remark
    env = _ask(sock, protocol.request(RequestCode.PULL_MESSAGE, 9, {"t": 5}))
    assert env.code == ResponseCode.INVALID_PARAMETER and "'t'" in env.remark
    env = _send_raw(sock, {"t": "Bad", "q": 0, "m": [[0, "x"]]}, [])
    assert env.code == ResponseCode.INVALID_PARAMETER and "one body frame" in env.remark
    env = _send_raw(sock, {"t": "Bad", "q": 0, "m": [["flag", 1]]}, [b"x"])
    assert env.code == ResponseCode.INVALID_PARAMETER
    status = _ask(sock, protocol.request(RequestCode.STATUS, 10)).ext["status"]
    assert status["counters"]["malformed_frames"] >= 3


def test_send_refusals_have_codes_and_remarks(raw, cluster):
    sock, _ = raw
    cases = [
        ({"t": "bad topic!", "q": 0, "m": [[0, ""]]}, [b"x"], ResponseCode.MESSAGE_ILLEGAL, "illegal characters"),
        ({"t": "x" * 128, "q": 0, "m": [[0, ""]]}, [b"x"], ResponseCode.MESSAGE_ILLEGAL, "limit is 127"),
        ({"t": "SCHEDULE_TOPIC_XXXX", "q": 0, "m": [[0, ""]]}, [b"x"], ResponseCode.NO_PERMISSION, "system topic"),
        ({"t": "Ok", "q": 0, "m": [[0, ""]]}, [b""], ResponseCode.MESSAGE_ILLEGAL, "empty"),
        ({"t": "Ok", "q": 0, "m": [[0, ""]]}, [b"x" * (4 * 1024 * 1024 + 1)], ResponseCode.MESSAGE_ILLEGAL, "limit"),
        ({"t": "Ok", "q": 0, "m": [[0, "a\x01" + "v" * 40000 + "\x02"]]}, [b"x"],
         ResponseCode.PROPERTIES_SIZE_EXCEEDED, "32767"),
        ({"t": "Ok", "q": 99, "m": [[0, ""]]}, [b"x"], ResponseCode.INVALID_PARAMETER, "not a write queue"),
    ]
    for ext, bodies, code, fragment in cases:
        env = _send_raw(sock, ext, bodies)
        assert env.code == code, (ext.get("t", "")[:20], env.remark)
        assert fragment in env.remark, env.remark
    env = _send_raw(sock, {"t": "Ok", "q": 0, "m": [[0, "DELAY\x013\x02"], [0, ""]]}, [b"a", b"b"],
                    RequestCode.SEND_BATCH_MESSAGE)
    assert env.code == ResponseCode.MESSAGE_ILLEGAL and "batch cannot carry a delay" in env.remark
    # a good send still works after all that
    env = _send_raw(sock, {"t": "Ok", "q": 0, "m": [[0, ""]]}, [b"fine"])
    assert env.code == ResponseCode.SUCCESS


def test_sdk_raises_the_class_the_server_meant(cluster):
    with Producer("pg", namesrv=cluster.namesrv) as p:
        ok = p.send(Message("Kept", b"acknowledged"))
        with pytest.raises(MessageIllegalError, match="illegal characters"):
            p.send(Message("no spaces", b"x"))
        with pytest.raises(MessageIllegalError, match="empty"):
            p.send(Message("Kept", b""))
        with pytest.raises(MessageIllegalError, match="limit"):
            p.send(Message("Kept", b"x" * (4 * 1024 * 1024 + 1)))
        with pytest.raises(MessageIllegalError, match="reserved"):
            p.send(Message("Kept", b"x", properties={"UNIQ_KEY": "mine"}))
        with pytest.raises(PropertiesSizeExceededError):
            p.send(Message("Kept", b"x", properties={"big": "v" * 40000}))
        with pytest.raises(NoPermissionError):
            p.send(Message("RMQ_SYS_TRANS_HALF_TOPIC", b"x"))
        with pytest.raises(MessageIllegalError, match="batch cannot carry a delay"):
            p.send_batch([Message("Kept", b"a", delay_level=2)])
    admin = Admin(namesrv=cluster.namesrv)
    with pytest.raises(NoPermissionError):
        admin.create_topic("TBW102")
    assert admin.view_message(ok.offset_msg_id).body == b"acknowledged"
    admin.shutdown()


def test_auto_create_off_gives_topic_not_exist(make_cluster):
    c = make_cluster(broker_args=("--no-auto-create-topics",))
    with Producer("pg", namesrv=c.namesrv, retries=0) as p:
        with pytest.raises(TopicNotExistError, match="create it"):
            p.send(Message("NeverCreated", b"x"))
    admin = Admin(namesrv=c.namesrv)
    admin.create_topic("NowCreated", queues=2)
    with Producer("pg", namesrv=c.namesrv) as p:
        assert p.send(Message("NowCreated", b"x")).queue_id in (0, 1)
    with pytest.raises(InvalidParameterError):
        Transport().call(c.services[1].addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "Q", "read": 0})
    admin.shutdown()

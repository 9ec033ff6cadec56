"""The one-step send (Sender.direct, dispatched by Service.handle for a `Direct` handler) against
the reference handler path: the same requests, plain and hostile, to two brokers, one answering
through each, give the same reply frames, the same stored files and the same counters."""

import os
import threading
import time

import pytest

from quiver.runtime.service import Direct
from quiver.wire import protocol, record
from quiver.wire.codes import RequestCode as RC, ResponseCode
from quiver.wire.names import SCHEDULE_TOPIC
from quiver_broker.app import App
from quiver_broker.config import Config

TOPIC = "Twin"
IDENTITY = b"\x00peer"
SEND_CODES = (RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE)


class Sink:
    def __init__(self):
        self.replies = []

    def send_multipart(self, frames, flags=0, copy=True):
        self.replies.append([bytes(f) for f in frames])

    def setsockopt(self, *a):
        pass


def _app(data_dir: str, direct: bool, **options) -> App:
    config = Config(listen="127.0.0.1:0", advertise="127.0.0.1:10911", namesrv="127.0.0.1:1",
                    broker_name="broker-twin", data_dir=data_dir, segment_bytes=1 << 20, index_slots=1 << 10,
                    index_entries=1 << 12, max_message_bytes=4096, **{"flush": "async", **options})
    app = App(config)
    app.store.open()
    app.service.use_socket(Sink())
    app.topics.config(TOPIC, create=True)
    if not direct:   # the reference: the handler alone
        for code in SEND_CODES:
            app.service.handlers[code] = app.service.handlers[code].handler
    return app


@pytest.fixture
def twins(tmp_path, monkeypatch):
    monkeypatch.setattr(time, "time", lambda: 1_800_000_000.123)  # store times equal in both stores
    apps = [_app(str(tmp_path / name), name == "direct") for name in ("direct", "reference")]
    yield apps
    _close(*apps)


def _close(*apps) -> None:
    closing = [threading.Thread(target=app.transport.close) for app in apps]   # about 0.5 s each
    for t in closing:
        t.start()
    for t in closing:
        t.join()
    for app in apps:
        app.store.close()
        app.metadata.close()


def _frames(req_id: int, ext: dict, bodies: list, code=RC.SEND_MESSAGE) -> list:
    return [IDENTITY, *protocol.request(code, req_id, ext, bodies)]


def _ext(props: list, topic=TOPIC, queue_id=0, **more) -> dict:
    return {"t": topic, "q": queue_id, "m": [[0, p] for p in props], "b": 1_700_000_000_000,
            "bh": "10.1.2.3:4567", **more}


def _batch(bodies: list, props: list, **more):
    return _ext(props, l=[len(b) for b in bodies], **more), [b"".join(bodies)], RC.SEND_BATCH_MESSAGE


PLAIN = "TAGS\x01A\x02KEYS\x01k1 k2\x02"
REQUESTS = [   # (ext, bodies, code)
    (_ext([PLAIN]), [b"x" * 1024], RC.SEND_MESSAGE),
    (_ext(["TAGS\x01B\x02"], queue_id=3), [b"y" * 10], RC.SEND_MESSAGE_V2),
    _batch([b"a", b"bb", b"ccc"], [PLAIN, "", "KEYS\x01z\x02"]),
    (_ext([PLAIN], w=False), [b"oneway"], RC.SEND_MESSAGE),
    (_ext(["DELAY\x012\x02"]), [b"later"], RC.SEND_MESSAGE),                      # parked
    (_ext(["DELAY\x01abc\x02"]), [b"bad delay"], RC.SEND_MESSAGE),                # MESSAGE_ILLEGAL
    (_ext(["REAL_TOPIC\x01X\x02"]), [b"broker's own"], RC.SEND_MESSAGE),          # MESSAGE_ILLEGAL
    (_ext([PLAIN]), [b""], RC.SEND_MESSAGE),                                      # empty body
    (_ext([PLAIN]), [b"z" * 4097], RC.SEND_MESSAGE),                              # over the limit
    _batch([b"q" * 3000, b"r" * 3000], ["", ""]),                                 # batch over the limit
    (_ext(["", ""]), [b"one", b"two"], RC.SEND_MESSAGE),                          # two on SEND_MESSAGE
    (_ext([PLAIN], queue_id=99), [b"no such queue"], RC.SEND_MESSAGE),
    (_ext([PLAIN], topic="NewOne"), [b"auto-created"], RC.SEND_MESSAGE),
    (_ext([PLAIN], topic=SCHEDULE_TOPIC), [b"system"], RC.SEND_MESSAGE),
    (_ext([PLAIN], sf=record.TX_PREPARED), [b"half"], RC.SEND_MESSAGE),
    ({"t": 5, "q": 0, "m": [[0, ""]]}, [b"bad topic type"], RC.SEND_MESSAGE),     # BAD_REQUEST
    (_ext([""], l=[3, 4]), [b"abcdef"], RC.SEND_BATCH_MESSAGE),                  # lengths mismatch
    (_ext([PLAIN]), [b"x" * 1024], RC.SEND_MESSAGE),
]


def _files(root: str) -> dict:
    """Relative path -> bytes under the store's commitlog and consumequeue; index files by order
    (their names hold the wall clock)."""
    out = {}
    for sub in ("commitlog", "consumequeue", "index"):
        for d, _, names in os.walk(os.path.join(root, sub)):
            for i, name in enumerate(sorted(names)):
                rel = os.path.relpath(os.path.join(d, name), root)
                with open(os.path.join(d, name), "rb") as f:
                    out[f"index/{i}" if sub == "index" else rel] = f.read()
    return out


def _counted(app: App) -> dict:
    stats = app.service.request_stats
    return {"app": dict(app.counters), "service": dict(app.service.counters), "store": dict(app.store._counts),
            "latency": {c: sum(h.counts) for c, h in stats.latency.items()}, "errors": dict(stats.errors),
            "in_msgs": dict(app.traffic.in_msgs), "in_bytes": dict(app.traffic.in_bytes),
            "sizes": list(app.traffic.sizes.counts), "size_sum": app.traffic.sizes.sum}


def test_direct_answers_and_stores_what_the_handler_path_does(twins):
    direct, reference = twins
    for i, (ext, bodies, code) in enumerate(REQUESTS):
        for app in twins:
            app.service.handle(_frames(i + 1, ext, bodies, code))
        got, want = direct.service._sock.replies, reference.service._sock.replies
        assert got == want, f"request {i}: {protocol.decode(want[-1][1:])}"
    codes = [protocol.decode(r[1:]).code for r in reference.service._sock.replies]
    assert codes.count(ResponseCode.SUCCESS) == 7 and len(set(codes)) >= 4, codes  # both kinds were sent
    assert _files(direct.config.data_dir) == _files(reference.config.data_dir)
    assert _counted(direct) == _counted(reference)
    assert direct.counters["put_messages"] == 9


def test_plain_sends_take_the_direct_path_and_the_rest_the_handler(twins):
    app = twins[0]
    entry = app.service.handlers[RC.SEND_MESSAGE]
    assert type(entry) is Direct
    took = []

    def counted(direct):
        def run(service, identity, env):
            answered = direct(service, identity, env)
            if answered:
                took.append(env.id)
            return answered
        return run
    for code in SEND_CODES:
        h = app.service.handlers[code]
        app.service.handlers[code] = Direct(h.handler, counted(h.direct))
    for i, (ext, bodies, code) in enumerate(REQUESTS):
        app.service.handle(_frames(i + 1, ext, bodies, code))
    assert took == [1, 2, 3, 4, 18]   # the rest are declined: each is unusual in its own way
    assert app.counters["put_messages"] == 9   # and the handler stored the parked and auto-created ones


def test_sync_flush_declines_to_the_handler(tmp_path):
    app = _app(str(tmp_path), True, flush="sync")
    try:
        entry = app.service.handlers[RC.SEND_MESSAGE]
        env = protocol.decode(protocol.request(RC.SEND_MESSAGE, 1, _ext([PLAIN]), [b"x"]))
        assert entry.direct(app.service, IDENTITY, env) is False
        assert app.counters["put_messages"] == 0 and app.store.commit_log.write_end == 0
    finally:
        _close(app)


def test_a_refused_put_is_answered_like_the_handler_answers_it(twins):
    for app in twins:
        app.store.disk.refusal = lambda nbytes: "disk 97 % full on /data; writes resume below 85 %"
        app.service.handle(_frames(1, _ext([PLAIN]), [b"x"]))
    direct, reference = twins
    assert direct.service._sock.replies == reference.service._sock.replies
    assert protocol.decode(direct.service._sock.replies[0][1:]).code != ResponseCode.SUCCESS
    assert _counted(direct) == _counted(reference)


class _DenyAll:
    on_denied = None

    def __init__(self):
        self.checked = []

    def check(self, user_id, source, access, args):
        self.checked.append((user_id, args.topic))
        return f"user {user_id} may not PUB to {args.topic}"


def test_with_auth_on_a_send_is_checked_against_the_acl(twins):
    app = twins[0]
    app.service.security = security = _DenyAll()
    app.service.handle(_frames(1, _ext([PLAIN]), [b"x"]), "alice", "10.0.0.7")
    env = protocol.decode(app.service._sock.replies[-1][1:])
    assert (env.code, env.remark) == (ResponseCode.NO_PERMISSION, f"user alice may not PUB to {TOPIC}")
    assert security.checked == [("alice", TOPIC)]
    assert app.counters["put_messages"] == 0 and app.service.counters["denied"] == 1

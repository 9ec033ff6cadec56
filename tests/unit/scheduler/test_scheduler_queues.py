"""Level and timer queues without processes: the typed requests they send, how a re-put batch is cut
(entries, body bytes under the broker's frame cap, header bytes), and how they go on past poison."""

import collections
import time
import types

from quiver.wire import protocol, record
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.property_string import format_properties
from quiver.errors import QueryNotFoundError
from quiver_scheduler import reput
from quiver_scheduler.allocation import Unit
from quiver_scheduler.cancels import Cancels
from quiver_scheduler.config import Config
from quiver_scheduler.db import TimerDB
from quiver_scheduler.levels import LevelQueue, Levels, poison_of
from quiver_scheduler.stats import DeliveryStats
from quiver_scheduler.timers import TimerQueue, Timers, plan_start
from quiver_scheduler.tracing import DeliveryTrace
from quiver_scheduler.writer import Writer

MiB = 1 << 20
BROKER_MAX_MESSAGE_BYTES = 4 * MiB                   # broker-store's --max-message-bytes default
BROKER_FRAME_CAP = BROKER_MAX_MESSAGE_BYTES + protocol.MAX_HEADER_BYTES + 64 * 1024   # its max_frame_bytes


class _SchedApp:
    """What the level and timer queues use of their app: config, service timers and counters,
    requests (recorded here, answered by the test), stats, trace, cancellations, the timer index and
    its writer thread (what it hands back runs at `settle`, on the test's thread)."""

    def __init__(self, db=None, **config):
        self.config, self.db, self.stats, self.cancelled = Config(**config), db, DeliveryStats(), Cancels()
        self.trace = DeliveryTrace("127.0.0.1:1", "SCHEDULE_CONSUMER", "test")   # untraced messages: no client
        self.later = []   # what the queues asked to run later: never run, but the timer queues' mark writes
        self.service = types.SimpleNamespace(counters=collections.Counter(),
                                             call_later=lambda *a: self.later.append(a) or object(),
                                             cancel=lambda t: None)
        self.requests = []
        self.handed = []
        self.writer = Writer(db.engine, lambda fn, *a: self.handed.append((fn, a))) if db is not None else None
        self.restarted = []

    def settle(self):
        """Run the marks' writes now, and what the writer hands back once its writes are committed,
        until it hands back no more."""
        while True:
            marks = [a for a in self.later if getattr(a[1], "__name__", "") == "_write_marks"]
            self.later = [a for a in self.later if a not in marks]
            for _, fn, *args in marks:
                fn(*args)
            assert self.writer.sync(10)
            if not self.handed:
                return
            handed, self.handed = self.handed, []
            for fn, args in handed:
                fn(*args)

    def restart_unit(self, unit):
        self.restarted.append(unit)

    def request(self, addr, req, callback, bodies=(), timeout=3.0):
        assert isinstance(req, rq.Schema), "requests are typed (quiver.wire.requests), never (code, ext)"
        self.requests.append((req, list(bodies), callback))

    def reputs(self):
        return [r for r in self.requests if isinstance(r[0], rq.ScheduleReput)]


def props(**kv) -> str:
    return format_properties({"UNIQ_KEY": "7F00000100002A9F0000000000000001", **kv})


def _parked(entries, body_bytes=0):
    """Decoded records of a parked queue: (properties, queue offset) each."""
    host = b"\x7f\0\0\x01\0\0\0\0"
    return record.decode_many(b"".join(
        record.encode(f"b{off}".encode().ljust(body_bytes, b"."), topic=b"SCHEDULE_TOPIC_XXXX",
                      props=format_properties({"UNIQ_KEY": f"M{off}", **p}).encode(), queue_offset=off,
                      phys_offset=off * 1000, born_ts=1, born_host=host, store_ts=2, store_host=host)
        for p, off in entries))


def _env(code, **ext):
    return types.SimpleNamespace(code=code, remark="entry: property REAL_QID ...", ext=ext, bodies=[])


def _on_the_wire(req, frames):
    """The frames the broker gets, checked as its Service would: frame cap, header cap, schema."""
    wire = protocol.request(req, 7, None, frames)
    assert all(len(f) <= BROKER_FRAME_CAP for f in wire)
    env = protocol.decode(wire)
    back = rq.ScheduleReput.decode(env.ext)
    return back, [bytes(b) for b in back.bodies(env.bodies)]


# ---- the re-put batch -----------------------------------------------------------------------------


def test_budget_caps_entries_body_bytes_and_header_bytes():
    def row(body, props):
        return types.SimpleNamespace(body=body, props=props, flag=0, born_ts=1, reconsume=0, sys_flag=0)
    small = [row(body=b"x" * 10, props="a\x01b\x02") for _ in range(10)]
    assert [len(b) for b in reput.split(small, 4, MiB)] == [4, 4, 2]
    big = [row(body=b"x" * (MiB + MiB // 2), props="") for _ in range(5)]
    batches = reput.split(big, 1024, BROKER_MAX_MESSAGE_BYTES)
    assert [len(b) for b in batches] == [2, 2, 1]
    assert all(sum(len(r.body) for r in b) <= BROKER_MAX_MESSAGE_BYTES for b in batches)
    huge = [row(body=b"x" * (BROKER_MAX_MESSAGE_BYTES + 1), props="")] * 2   # taken once: the first always fits
    assert [len(b) for b in reput.split(huge, 1024, BROKER_MAX_MESSAGE_BYTES)] == [1, 1]
    # 32 KiB of properties each, half of them separators JSON spells as 6 bytes: the header is the limit
    heavy = [row(body=b"", props="k\x01" * 8000) for _ in range(200)]
    batches = reput.split(heavy, 1024, BROKER_MAX_MESSAGE_BYTES)
    assert len(batches) > 1 and sum(map(len, batches)) == 200
    for b in batches:
        req, frames = reput.request(b, [1] * len(b))
        assert len(protocol.request(req, 1, None, frames)[1]) <= protocol.MAX_HEADER_BYTES
    assert reput.split([], 10, 10) == []


def test_request_is_typed_and_round_trips_through_the_schema():
    recs = _parked([({"REAL_TOPIC": "Ü", "REAL_QID": "0"}, 0), ({"REAL_TOPIC": "T"}, 1)])
    req, frames = reput.request(recs, [5, 6], roll=True)
    assert req.CODE == RequestCode.SCHEDULE_REPUT and req.roll and len(frames) == 1   # bodies packed
    back, bodies = _on_the_wire(req, frames)
    assert back.roll and [m[5] for m in back.metas] == [5, 6] and bodies == [r.body for r in recs]
    assert back.metas[0][1] == recs[0].props
    one, frames = reput.request(recs[:1], [5])
    back, bodies = _on_the_wire(one, frames)
    assert back.lengths is None and not back.roll and bodies == [recs[0].body]


def test_body_cap_takes_the_smaller_of_ours_and_the_brokers():
    init = rq.ScheduleInitReply.decode({"delay_levels_ms": [1000], "broker_name": "b", "schedule_queues": 1,
                                        "timer_queues": 1, "timer_horizon_ms": 0, "now_ms": 0})
    assert reput.body_cap(4 * MiB, init) == 4 * MiB                           # the broker does not say
    smaller = rq.ScheduleInitReply.decode({**init.ext(), "delay_levels_ms": [1000], "max_message_bytes": MiB})
    assert reput.body_cap(4 * MiB, smaller) == MiB


def test_refused_and_stored_ms_read_the_reply_schema():
    illegal = types.SimpleNamespace(code=ResponseCode.MESSAGE_ILLEGAL, remark="r", ext={"bad": [1, 5, "x", -1, 9]})
    assert reput.refused(illegal, 6) == {1, 5}                              # garbage and out of range dropped
    assert reput.refused(_env(ResponseCode.MESSAGE_ILLEGAL), 1) == {0}     # a lone entry: that one
    assert reput.refused(_env(ResponseCode.MESSAGE_ILLEGAL), 3) == set()   # cannot tell: retry all
    assert reput.refused(_env(ResponseCode.MESSAGE_ILLEGAL, bad="x"), 1) == {0}
    assert reput.refused(_env(ResponseCode.SYSTEM_BUSY, bad=[0]), 3) == set()
    assert reput.refused(TimeoutError(), 3) == set()
    assert reput.stored_ms(_env(ResponseCode.SUCCESS, ts=123, n=1)) == 123
    assert abs(reput.stored_ms(_env(ResponseCode.SUCCESS, ts="soon")) - time.time() * 1000) < 5000


def test_poison_of():
    assert poison_of(props(REAL_TOPIC="Orders", REAL_QID="3")) is None
    assert poison_of(props(REAL_TOPIC="Orders")) is None                    # absent qid: queue 0
    assert "REAL_TOPIC" in poison_of(props(REAL_TOPIC="../../../x", REAL_QID="0"))
    assert "REAL_QID" in poison_of(props(REAL_TOPIC="Orders", REAL_QID="x"))


# ---- level queues ---------------------------------------------------------------------------------


def _level(app, max_bytes=4 * MiB):
    levels = Levels(app)
    unit = Unit("b", "S", 0)
    q = levels.queues[unit] = LevelQueue(unit, "addr", 1000, 0, max_bytes)
    return levels, q


def test_level_queue_pulls_and_commits_with_typed_requests():
    app = _SchedApp()
    levels, q = _level(app)
    levels._pull(q)
    (pull, _, pulled), = app.requests
    assert pull == rq.PullMessage(group=app.config.group, topic="SCHEDULE_TOPIC_XXXX", queue_id=0, offset=0,
                                  max_msgs=app.config.pull_batch, suspend_ms=15_000)   # every record: no expression
    recs = _parked([({"REAL_TOPIC": "T"}, 0), ({"REAL_TOPIC": "T"}, 1)])
    env = types.SimpleNamespace(code=ResponseCode.SUCCESS, remark="", ext={"next": 2, "min": 0, "max": 9},
                                bodies=[b"".join(map(record.encode_record, recs))])
    pulled(env)
    assert q.next_pull == 2 and q.max_offset == 9
    (_, _, done), = app.reputs()                         # stored long ago, 1 s delay: both due at once
    done(_env(ResponseCode.SUCCESS, ts=5, n=2))
    commit = app.requests[-1][0]
    assert commit == rq.UpdateConsumerOffset(group=app.config.group, topic="SCHEDULE_TOPIC_XXXX", queue_id=0,
                                             offset=2)
    n = len(app.requests)
    app.requests[-2][2](_env(ResponseCode.SUCCESS, next="garbled"))   # the next pull: a bad reply is a failed pull
    assert len(app.requests) == n and not q.pulling


def test_level_batches_stay_under_the_broker_frame_cap():
    app = _SchedApp()
    levels, q = _level(app, BROKER_MAX_MESSAGE_BYTES)
    recs = _parked([({"REAL_TOPIC": "T"}, off) for off in range(5)], body_bytes=MiB + MiB // 2)
    for r in recs:
        q.buffer.append((0, r.queue_offset, f"M{r.queue_offset}", r))
    q.next_pull = q.max_offset = 5
    levels._deliver(q)                              # fills the reput window at once: everything is due
    sent = app.reputs()
    assert [len(r[0].metas) for r in sent] == [2, 2, 1]
    delivered = []
    for req, frames, done in sent:
        assert sum(map(len, frames)) <= BROKER_MAX_MESSAGE_BYTES
        _, bodies = _on_the_wire(req, frames)
        delivered += bodies
        done(_env(ResponseCode.SUCCESS, ts=1, n=len(req.metas)))
    assert delivered == [r.body for r in recs] and q.delivered == 5 and app.stats.count == 5


def test_level_queue_goes_on_past_poison():
    app = _SchedApp()
    levels, q = _level(app)
    recs = _parked([({"REAL_TOPIC": "T", "REAL_QID": "0"}, 0), ({"REAL_TOPIC": "../../../x"}, 1),
                    ({"REAL_TOPIC": "T", "REAL_QID": "1"}, 2), ({"REAL_TOPIC": "T", "REAL_QID": "7"}, 3),
                    ({"REAL_TOPIC": "T", "REAL_QID": "x"}, 4)])
    for r in recs:
        q.buffer.append((0, r.queue_offset, f"M{r.queue_offset}", r))
    q.next_pull = q.max_offset = 5
    levels._deliver(q)
    (req, _, done), = app.reputs()
    assert len(req.metas) == 3                              # two poisoned ones never left the scheduler
    done(_env(ResponseCode.MESSAGE_ILLEGAL, bad=[2]))       # REAL_QID 7: not a queue of T on the broker
    assert len(app.reputs()) == 2
    req, _, done = app.reputs()[-1]
    assert len(req.metas) == 2                              # the rest, re-put at once
    done(_env(ResponseCode.SUCCESS, ts=1, n=2))
    assert q.delivered == 5 and not q.in_flight and app.stats.count == 2
    assert app.service.counters["poisoned_skipped"] == 3 and not levels.in_flight_ids


def test_a_cancel_stops_only_the_message_of_its_topic():
    """PUB on the topic named is the right to cancel: a cancel naming another topic stops nothing."""
    app = _SchedApp()
    levels, q = _level(app)
    recs = _parked([({"REAL_TOPIC": "Mine"}, 0), ({"REAL_TOPIC": "Theirs"}, 1), ({"REAL_TOPIC": "Theirs"}, 2)])
    for r in recs:
        q.buffer.append((0, r.queue_offset, f"M{r.queue_offset}", r))
        levels.buffered[f"M{r.queue_offset}"] = q
    q.next_pull = q.max_offset = 3
    assert levels.cancel("M1", "Mine") is None and levels.cancel("M0", "Mine") == "cancelled"
    app.cancelled.add("M0", "Mine")
    app.cancelled.add("M1", "Mine")        # an id of Theirs with the wrong topic: no effect
    app.cancelled.add("M2", None)          # a tombstone from before cancels carried a topic: any topic
    levels._deliver(q)
    (req, _, _), = app.reputs()
    assert [m[1] for m in req.metas] == [recs[1].props]
    assert app.stats.cancelled_skipped == 2


# ---- timer queues ---------------------------------------------------------------------------------


def _timers(tmp_path, max_bytes=4 * MiB, **config):
    db = TimerDB(f"sqlite:///{tmp_path / 't.db'}")
    app = _SchedApp(db, **config)
    timers = Timers(app)
    unit = Unit("b", "T", 0)
    q = timers.queues[unit] = TimerQueue(unit, "addr", {"start": 0, "rebuild_until": 0, "wm": -1}, max_bytes)
    q.loaded_until = 2**62
    return db, app, timers, q


def test_timer_queue_goes_on_past_poison(tmp_path):
    db, app, timers, q = _timers(tmp_path)
    due = str(int(time.time() * 1000) - 1000)
    recs = _parked([({"TIMER_DELIVER_MS": "inf", "REAL_TOPIC": "T"}, 0),
                    ({"TIMER_DELIVER_MS": due, "REAL_TOPIC": "T"}, 1),
                    ({"TIMER_DELIVER_MS": due, "REAL_TOPIC": "a/b"}, 2),
                    ({"TIMER_DELIVER_MS": due, "REAL_TOPIC": "T"}, 3)])
    timers.ingest(q, recs, 4)
    assert not app.requests                                 # the offset waits for the rows to be committed
    app.settle()
    assert db.pending_count() == 2 and app.service.counters["poisoned_skipped"] == 2
    commits = [r[0] for r in app.requests if isinstance(r[0], rq.UpdateConsumerOffset)]
    assert [c.group for c in commits] == [f"{app.config.group}_TIMER_WM", app.config.group]   # watermark first
    timers._deliver(q)
    (_, _, done), = app.reputs()
    done(_env(ResponseCode.MESSAGE_ILLEGAL, bad=[0]))       # refused by the broker: cancelled, the rest goes on
    app.settle()
    assert db.pending_count() == 1 and app.service.counters["poisoned_skipped"] == 3
    timers._deliver(q)
    req, _, done = app.reputs()[-1]
    assert len(req.metas) == 1
    done(_env(ResponseCode.SUCCESS, ts=1, n=1))
    assert timers.in_flight_ids() == {"M3"}                 # a cancel is too late until it is marked
    app.settle()
    assert db.pending_count() == 0 and not timers.in_flight_ids()
    app.writer.close()
    db.close()


def test_a_timer_ingested_after_the_watermark_passed_its_due_time_lowers_it(tmp_path):
    """Sent out of due order: a timer stored later but due sooner than the pending ones. The
    watermark the broker keeps must fall below it, or the next start would drop it as delivered."""
    db, app, timers, q = _timers(tmp_path)
    later = int(time.time() * 1000) + 60_000
    timers.ingest(q, _parked([({"TIMER_DELIVER_MS": str(later), "REAL_TOPIC": "T"}, 0)]), 1)
    app.settle()
    timers.ingest(q, _parked([({"TIMER_DELIVER_MS": str(later - 30_000), "REAL_TOPIC": "T"}, 1)]), 2)
    app.settle()
    wms = [r[0].offset for r in app.requests
           if isinstance(r[0], rq.UpdateConsumerOffset) and r[0].group.endswith("_TIMER_WM")]
    assert wms == [later - 1, later - 30_000 - 1]
    assert db.drop_delivered_by_others("b", wms[-1]) == 0    # a restart drops neither of them
    app.writer.close()
    db.close()


def test_timer_batches_and_rolls_stay_under_the_broker_frame_cap(tmp_path):
    db, app, timers, q = _timers(tmp_path, BROKER_MAX_MESSAGE_BYTES, roll_after_ms=1000)
    now = int(time.time() * 1000)
    recs = _parked([({"TIMER_DELIVER_MS": str(now - 1000 + off), "REAL_TOPIC": "T"}, off) for off in range(3)] +
                   [({"TIMER_DELIVER_MS": str(now + 3_600_000), "REAL_TOPIC": "T"}, off) for off in range(3, 6)],
                   body_bytes=MiB + MiB // 2)
    timers.ingest(q, recs, 6)                              # the due ones leave at once, pipelined:
    app.settle()
    (req, frames, done), (req2, frames2, done2) = app.reputs()   # what does not fit goes in a 2nd batch
    assert len(req.metas) == 2 and sum(map(len, frames)) <= BROKER_MAX_MESSAGE_BYTES
    assert len(req2.metas) == 1 and sum(map(len, frames2)) <= BROKER_MAX_MESSAGE_BYTES
    assert not [mid for due, mid in q.heap if due <= now] and len(q.in_flight) == 2
    done2(_env(ResponseCode.SUCCESS, ts=1, n=1))           # answers in any order
    done(_env(ResponseCode.SUCCESS, ts=1, n=2))
    app.settle()
    assert not q.in_flight and len(app.reputs()) == 2
    assert db.pending_count() == 3
    with db.engine.begin() as conn:                        # the far ones' stored copies are old
        conn.exec_driver_sql("UPDATE timers SET stored_ms = 0")
    n = len(app.reputs())
    assert timers.roll_step() == 3
    rolls = app.reputs()[n:]
    assert [len(r[0].metas) for r in rolls] == [2, 1] and all(r[0].roll for r in rolls)
    assert all(sum(map(len, r[1])) <= BROKER_MAX_MESSAGE_BYTES for r in rolls)
    app.writer.close()
    db.close()


def test_timer_reputs_are_pipelined_within_the_window(tmp_path):
    db, app, timers, q = _timers(tmp_path, max_reput_batch=2, reput_window=2)
    due = str(int(time.time() * 1000) - 1000)
    timers.ingest(q, _parked([({"TIMER_DELIVER_MS": due, "REAL_TOPIC": "T"}, off) for off in range(7)]), 7)
    app.settle()
    first = app.reputs()
    assert [len(r[0].metas) for r in first] == [2, 2] and len(q.in_flight) == 2   # the window is full
    assert len(timers.in_flight_ids()) == 4
    first[0][2](_env(ResponseCode.SUCCESS, ts=1, n=2))     # one answered: the next batch goes at once
    assert [len(r[0].metas) for r in app.reputs()] == [2, 2, 2]
    first[1][2](_env(ResponseCode.SUCCESS, ts=1, n=2))
    app.reputs()[2][2](_env(ResponseCode.SUCCESS, ts=1, n=2))
    app.reputs()[3][2](_env(ResponseCode.SUCCESS, ts=1, n=1))
    app.settle()
    assert [len(r[0].metas) for r in app.reputs()] == [2, 2, 2, 1]
    assert db.pending_count() == 0 and not q.in_flight and app.stats.count == 7
    app.writer.close()
    db.close()


def test_plan_start_reads_offsets_through_typed_requests(tmp_path):
    calls = []

    class Client:
        def call_broker(self, addr, req):
            calls.append(req)
            if isinstance(req, rq.QueryConsumerOffset):
                raise QueryNotFoundError("none")
            return types.SimpleNamespace(code=0, ext={"offset": 7})
    db = TimerDB(f"sqlite:///{tmp_path / 't.db'}")
    plan = plan_start(Client(), db, "G", Unit("b", "T", 0), "addr")
    assert plan["start"] == 7 and plan["mode"] == "fresh"
    assert calls == [rq.QueryConsumerOffset(group="G", topic="rmq_sys_wheel_timer", queue_id=0),
                     rq.QueryConsumerOffset(group="G_TIMER_WM", topic="rmq_sys_wheel_timer", queue_id=0),
                     rq.GetMinOffset(topic="rmq_sys_wheel_timer", queue_id=0)]
    db.close()


def test_heartbeat_is_a_typed_consumer_of_both_parked_topics():
    from quiver_scheduler.membership import SchedulerClient
    client = SchedulerClient(Config(namesrv="127.0.0.1:1"), lambda: None)
    hb = client._heartbeat()                              # what ClientBase sends (and leaves on close)
    assert hb == rq.HeartBeat.decode(hb.ext()) and hb.client_id == client.client_id
    (me,), = [hb.consumers]
    assert me.group == Config().group and me.model == "CLUSTERING"
    assert {t: (s.type, s.expression) for t, s in me.subscriptions.items()} == {
        "SCHEDULE_TOPIC_XXXX": ("TAG", "*"), "rmq_sys_wheel_timer": ("TAG", "*")}

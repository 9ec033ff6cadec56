"""The Spark sink without Spark (quiver.spark.sink_rows): options, the schema check, rows -> Messages,
and the send loop against a fake producer (acks, failures, the in-flight bound)."""

import datetime
from concurrent.futures import Future

import pytest

pytest.importorskip("pyspark")   # quiver.spark's package imports it
pa = pytest.importorskip("pyarrow")

from quiver.client.message import Message, SendResult, SendStatus  # noqa: E402
from quiver.errors import ClientError, MessageIllegalError, SystemBusyError  # noqa: E402
from quiver.spark.sink_rows import DEFAULT_KEY_PROPERTY, SinkOptions, check_schema, messages, send_all  # noqa: E402

KEY = DEFAULT_KEY_PROPERTY


def _msgs(cols, opts=None, prefix="q:7:1", first=0):
    n = len(next(iter(cols.values())))
    return list(messages(cols, n, opts or SinkOptions.parse({"namesrv": "ns", "topic": "T"}), prefix, first))


def test_options_parse_case_insensitive_and_refuse_bad_values():
    o = SinkOptions.parse({"NameSrv": "h:1", "topic": " T ", "MAXINFLIGHT": "5", "writeId": "daily"})
    assert (o.namesrv, o.topic, o.max_in_flight, o.write_id, o.key_property) == ("h:1", "T", 5, "daily", KEY)
    assert SinkOptions.parse({}).topic is None
    with pytest.raises(ClientError, match="maxInFlight must be a positive integer"):
        SinkOptions.parse({"maxInFlight": "0"})
    with pytest.raises(ClientError, match="sendTimeoutMs"):
        SinkOptions.parse({"sendTimeoutMs": "soon"})
    with pytest.raises(ClientError, match="idempotenceProperty"):
        SinkOptions.parse({"idempotenceProperty": "UNIQ_KEY"})   # the producer writes that one


def test_schema_check_names_the_column_to_fix():
    opts = SinkOptions.parse({"topic": "T"})
    check_schema(opts, {"body": "string", "keys": "array<string>", "broker": "string", "queue_offset": "bigint"})
    with pytest.raises(ClientError, match="needs a 'body' column"):
        check_schema(opts, {"value": "binary"})
    with pytest.raises(ClientError, match="option 'topic' or a 'topic' column"):
        check_schema(SinkOptions.parse({}), {"body": "binary"})
    with pytest.raises(ClientError, match="column 'properties' must be map<string,string>, not map<string,int>"):
        check_schema(opts, {"body": "binary", "properties": "map<string,int>"})
    with pytest.raises(ClientError, match="idempotenceKeyColumn 'id' must be a column of type .* no such column"):
        check_schema(SinkOptions.parse({"topic": "T", "idempotenceKeyColumn": "id"}), {"body": "binary"})


def test_rows_become_messages_with_a_key_per_row():
    cols = {"body": [b"a", "b\u00e9", None], "keys": [["k1", "k2"], None, "k3 k4"], "tags": ["t", None, "u"],
            "properties": [[("p", "1"), ("UNIQ_KEY", "x"), ("KEYS", "old"), ("REAL_TOPIC", "y"), ("n", None)],
                           {"q": "2"}, None],
            "broker": ["b", "b", "b"]}
    a, b, c = _msgs(cols, first=10)
    assert (a.topic, a.body, a.keys, a.tags) == ("T", b"a", ["k1", "k2"], "t")
    assert a.properties == {"p": "1", KEY: "q:7:1:10"}    # what the producer / broker write is dropped
    assert (b.body, b.keys, b.properties) == ("b\u00e9".encode(), None, {"q": "2", KEY: "q:7:1:11"})
    assert (c.body, c.key_list(), c.properties) == (b"", ["k3", "k4"], {KEY: "q:7:1:12"})   # a tombstone


def test_topic_option_wins_over_the_column_and_a_null_topic_is_refused():
    cols = {"topic": ["A", None], "body": [b"1", b"2"]}
    assert [m.topic for m in _msgs(cols)] == ["T", "T"]
    with pytest.raises(ClientError, match="row 4: no topic"):
        _msgs(cols, SinkOptions.parse({}), first=3)


def test_delays_and_the_users_key_column():
    due = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
    cols = {"body": [b"1", b"2", b"3", b"4"], "delay_level": [3, None, 0, None], "delay_ms": [None, 500, None, None],
            "deliver_at": [None, None, due, None], "id": ["o-1", 2, "o-3", "o-4"]}
    opts = SinkOptions.parse({"topic": "T", "idempotenceKeyColumn": "id", "idempotenceProperty": "dedupe"})
    m = _msgs(cols, opts)
    assert [(x.delay_level, x.delay_ms, x.deliver_at) for x in m] == [
        (3, None, None), (0, 500, None), (0, None, int(due.timestamp() * 1000)), (0, None, None)]
    assert [x.properties for x in m] == [{"dedupe": "o-1"}, {"dedupe": "2"}, {"dedupe": "o-3"}, {"dedupe": "o-4"}]
    with pytest.raises(ClientError, match="row 0: idempotenceKeyColumn 'id' is null"):
        _msgs({"body": [b"1"], "id": [None]}, opts)


def test_arrow_columns_convert_like_rows():
    batch = pa.RecordBatch.from_pydict({"body": pa.array([b"x"]), "properties": pa.array(
        [[("a", "1")]], pa.map_(pa.string(), pa.string())), "keys": pa.array([["k"]], pa.list_(pa.string()))})
    [m] = _msgs({n: batch.column(i).to_pylist() for i, n in enumerate(batch.schema.names)})
    assert (m.body, m.keys, m.properties) == (b"x", ["k"], {"a": "1", KEY: "q:7:1:0"})


class FakeProducer:
    """send_async answered at once: an ack with `status`, or a failure for the `fail_at`-th message."""

    def __init__(self, fail_at: int | None = None, status=SendStatus.SEND_OK):
        self.futures: list[Future] = []
        self.max_open = 0
        self.fail_at, self.status = fail_at, status

    def send_async(self, msg: Message) -> Future:
        if not msg.body and not msg.keys:
            raise MessageIllegalError("the body is empty")
        f: Future = Future()
        self.futures.append(f)
        if self.fail_at == len(self.futures) - 1:
            f.set_exception(SystemBusyError("broker busy"))
        else:
            self.answer(f)
        return f

    def answer(self, f: Future) -> None:
        f.set_result(SendResult(self.status, "id", "b", 0, 0, "T"))


class LateProducer(FakeProducer):
    """Acks arrive only when the loop waits for them, so the most ever unanswered is seen."""

    def answer(self, f: Future) -> None:
        self.max_open = max(self.max_open, sum(not x.done() for x in self.futures))
        wait = f.result

        def result(timeout=None):
            if not f.done():
                FakeProducer.answer(self, f)
            return wait(timeout)
        f.result = result


def test_send_all_waits_for_every_ack_within_the_in_flight_bound():
    p = LateProducer()
    done = send_all(p.send_async, (Message("T", b"%d" % i) for i in range(50)), 8, 5)
    assert done.rows == 50 and done.not_ok == 0
    assert all(f.done() for f in p.futures) and p.max_open == 8


def test_a_failed_send_fails_the_partition():
    with pytest.raises(SystemBusyError, match="broker busy"):
        send_all(FakeProducer(fail_at=3).send_async, (Message("T", b"x") for _ in range(10)), 100, 5)
    with pytest.raises(MessageIllegalError, match="row 2 \\(topic 'T'\\): the body is empty"):
        send_all(FakeProducer().send_async, [Message("T", b"a"), Message("T", b"b"), Message("T", b"")], 100, 5)
    done = send_all(FakeProducer(status=SendStatus.FLUSH_SLAVE_TIMEOUT).send_async, [Message("T", b"a")], 100, 5)
    assert (done.rows, done.not_ok) == (1, 1)   # stored: counted, not failed


def test_rows_and_arrow_batches_chunk_into_the_same_columns():
    """PySpark 4.0's stream writer gets Rows, later ones Arrow batches: both reach messages() alike."""
    from pyspark.sql import Row

    from quiver.spark import sink
    rows = [Row(body=b"%d" % i, keys=["k"], properties={"a": str(i)}) for i in range(5)]
    batch = pa.RecordBatch.from_pylist([r.asDict() for r in rows], pa.schema(
        [("body", pa.binary()), ("keys", pa.list_(pa.string())), ("properties", pa.map_(pa.string(), pa.string()))]))
    by_rows = list(sink._row_columns(iter(rows)))
    assert [n for _, n in by_rows] == [5] and by_rows[0][0]["body"] == [b"%d" % i for i in range(5)]
    row_path = [_msgs(cols) for cols, _ in by_rows]
    arrow_path = [_msgs(cols) for cols, _ in sink._arrow_columns([batch])]
    assert row_path == arrow_path and arrow_path[0][4].properties == {"a": "4", KEY: "q:7:1:4"}
    many = list(sink._row_columns(iter([Row(body=b"x")] * (sink.ROWS_PER_CHUNK + 1))))
    assert [n for _, n in many] == [sink.ROWS_PER_CHUNK, 1]

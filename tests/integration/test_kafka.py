"""Kafka clients (confluent-kafka, i.e. librdkafka) against the Kafka gateway (quiver_kafka) as a process.

One cluster (a name server, two brokers, the gateway) serves the module; each test uses its own
topic. Consumers assign partitions themselves (no group).
"""

import asyncio
import shutil
import socket
import struct
import subprocess
import time
import urllib.request

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402

from quiver import Admin  # noqa: E402
from quiver import Message as QMessage  # noqa: E402
from quiver import MessageSelector, PullConsumer  # noqa: E402
from quiver import Producer as QProducer  # noqa: E402
from quiver.client.base import MessageQueue  # noqa: E402
from quiver.tools.local import LocalCluster, free_port, wait_healthy  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MAX_REQUEST = 64 * 1024


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    c = LocalCluster(str(tmp_path_factory.mktemp("kafka")))
    try:
        c.add_core(brokers=2)
        bootstrap = f"127.0.0.1:{free_port()}"
        gw = c.add_service("kafka", "quiver_kafka", "--kafka-listen", bootstrap, "--max-request-bytes",
                           str(MAX_REQUEST), "--metrics-listen", f"127.0.0.1:{free_port()}", data=False)
        c.wait()
        admin = Admin(namesrv=c.namesrv)
    except BaseException:
        c.stop()
        raise
    yield c, gw, admin, bootstrap
    admin.shutdown()
    c.stop()


def _topic(admin, name, queues=2):
    admin.create_topic(name, queues=queues)
    wait_for(lambda: len({q.broker for q in admin.queues(name)}) == 2, 30, f"{name} routed on both brokers")
    return sorted(admin.queues(name), key=lambda q: (q.broker, q.queue_id))


def _consume(bootstrap, topic, partitions, count, timeout=20):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in partitions])
        got, deadline = [], time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m)
        return got
    finally:
        c.close()


def test_produce_with_key_headers_timestamp_and_consume_exactly(env):
    c, gw, admin, bootstrap = env
    queues = _topic(admin, "KfRound")
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    reports = []
    sent = []
    for i in range(40):
        key = None if i % 10 == 9 else (b"\xff\x00bin" if i % 5 == 4 else f"key-{i}".encode())
        value = b"" if i == 7 else f"value-{i}".encode()
        headers = [("color", b"blue"), ("n", str(i).encode())]
        if i % 4 == 0:
            headers += [("raw", b"\x00\xfe"), ("n", None)]   # binary, repeated and null
        ts = 1_700_000_000_000 + i * 7
        sent.append((i % 4, key, value, headers, ts))
        p.produce("KfRound", value=value, key=key, headers=headers, partition=i % 4, timestamp=ts,
                  on_delivery=lambda err, msg: reports.append((err, msg.partition(), msg.offset())))
    assert p.flush(20) == 0
    assert len(reports) == 40 and all(err is None for err, _, _ in reports), reports[:3]
    got = _consume(bootstrap, "KfRound", range(4), 40)
    assert len(got) == 40
    by_value = {(m.partition(), m.value()): m for m in got}
    for part, key, value, headers, ts in sent:
        m = by_value[(part, value)]
        assert m.key() == key and m.headers() == headers and m.timestamp()[1] == ts
    # partition i is the i-th queue by broker name, then queue id; the offsets are its queue offsets
    for part, mq in enumerate(queues):
        assert admin.max_offset(mq) == 10
        offsets = sorted(m.offset() for m in got if m.partition() == part)
        assert offsets == list(range(10))
    # a UTF-8 key is a Quiver key too
    found = wait_for(lambda: admin.query_by_key("KfRound", "key-3"), 20, "key-3 indexed")
    assert found[0].body == b"value-3" and found[0].properties["color"] == "blue"


def test_quiver_producer_to_kafka_consumer_and_list_offsets(env):
    c, gw, admin, bootstrap = env
    queues = _topic(admin, "KfFromQuiver", queues=1)
    with QProducer("kf-q", namesrv=c.namesrv) as qp:
        results = [qp.send(QMessage("KfFromQuiver", f"q-{i}".encode(), keys=[f"k{i}"], properties={"region": "eu"}),
                           queue=queues[1]) for i in range(5)]
    got = _consume(bootstrap, "KfFromQuiver", [1], 5)
    assert [m.value() for m in got] == [b"q-%d" % i for i in range(5)]
    assert [m.key() for m in got] == [b"k%d" % i for i in range(5)]
    assert all(m.headers() == [("region", b"eu")] for m in got)
    born = admin.view_message(results[0].msg_id, "KfFromQuiver").born_timestamp
    assert got[0].timestamp() == (confluent_kafka.TIMESTAMP_CREATE_TIME, born)
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        lo, hi = cons.get_watermark_offsets(TopicPartition("KfFromQuiver", 1), timeout=10)
        assert (lo, hi) == (0, 5)
        assert cons.get_watermark_offsets(TopicPartition("KfFromQuiver", 0), timeout=10) == (0, 0)
        md = cons.list_topics("KfFromQuiver", timeout=10).topics["KfFromQuiver"]
        assert sorted(md.partitions) == [0, 1] and md.error is None
        missing = cons.list_topics("KfNoSuchTopic", timeout=10).topics["KfNoSuchTopic"]
        assert missing.error is not None
    finally:
        cons.close()


@pytest.mark.parametrize("acks", [0, 1])
def test_acks_0_and_1_store_every_message(env, acks):
    c, gw, admin, bootstrap = env
    topic = f"KfAcks{acks}"
    queues = _topic(admin, topic, queues=1)
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 2})
    for i in range(20):
        p.produce(topic, b"a-%d" % i, partition=i % 2)
    assert p.flush(20) == 0
    wait_for(lambda: sum(admin.max_offset(q) for q in queues) == 20, 20, f"20 messages stored with acks={acks}")
    got = _consume(bootstrap, topic, [0, 1], 20)
    assert sorted(m.value() for m in got) == sorted(b"a-%d" % i for i in range(20))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_produce_reads_back(env, codec):
    c, gw, admin, bootstrap = env
    topic = f"KfZip{codec}"
    _topic(admin, topic, queues=1)
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20})
    values = [(b"%s-%d " % (codec.encode(), i)) * 20 for i in range(30)]
    for v in values:
        p.produce(topic, v, key=b"k", headers=[("codec", codec.encode())], partition=1)
    assert p.flush(20) == 0
    got = _consume(bootstrap, topic, [1], 30)
    assert [m.value() for m in got] == values and {m.headers()[0][1] for m in got} == {codec.encode()}


def test_idempotent_producer_stores_each_message_once_in_order(env):
    c, gw, admin, bootstrap = env
    _topic(admin, "KfIdem", queues=1)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2})
    for i in range(60):
        p.produce("KfIdem", b"i-%d" % i, partition=i % 2)
    assert p.flush(20) == 0
    got = _consume(bootstrap, "KfIdem", [0, 1], 60)
    for part in (0, 1):
        assert [m.value() for m in got if m.partition() == part] == [b"i-%d" % i for i in range(part, 60, 2)]


def test_a_gateway_without_a_producers_state_finds_its_sequences_in_the_queue(env):
    c, gw, admin, bootstrap = env
    [q] = _topic(admin, "KfSeq", queues=1)[:1]
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 50})
    for i in range(6):
        p.produce("KfSeq", b"s-%d" % i, partition=0)
    assert p.flush(20) == 0
    import struct
    import types

    from crc32c import crc32c
    from quiver_kafka import records
    from quiver_kafka.handlers import Gateway
    fresh = Gateway(types.SimpleNamespace(namesrv=c.namesrv, request_timeout_ms=10_000, max_message_bytes=4 << 20,
                                          max_request_bytes=1 << 20), "127.0.0.1", 1)   # as after a restart
    try:
        stored = fresh._stored_sequences("KfSeq", q)
        assert stored and stored[0][0] == 0 and sum(int(v.split(":")[3]) for _, v in stored) == 6
        pid, epoch, first, count = map(int, stored[-1][1].split(":"))
        retry = bytearray(records.encode([records.Record(i, 1000, None, b"again") for i in range(count)]))
        struct.pack_into(">qhi", retry, 43, pid, epoch, first)
        struct.pack_into(">I", retry, 17, crc32c(bytes(retry[21:])))
        part = types.SimpleNamespace(index=0, records=bytes(retry))
        body = types.SimpleNamespace(acks=-1, transactional_id=None,
                                     topic_data=[types.SimpleNamespace(name="KfSeq", partition_data=[part])])
        [resp] = fresh.produce(body)()["responses"]
        assert resp["partition_responses"][0]["base_offset"] == stored[-1][0]   # answered, not stored again
        assert admin.max_offset(q) == 6
    finally:
        fresh.shutdown()


def test_admin_client_creates_grows_and_deletes_topics(env):
    c, gw, admin, bootstrap = env
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
    ac = AdminClient({"bootstrap.servers": bootstrap})
    [f] = ac.create_topics([NewTopic("KfAdmin", 5)], operation_timeout=10).values()
    assert f.result(20) is None
    parts = lambda: len(ac.list_topics("KfAdmin", timeout=10).topics["KfAdmin"].partitions)   # noqa: E731
    wait_for(lambda: parts() == 5, 20, "5 partitions")
    before = sorted(admin.queues("KfAdmin"), key=lambda q: (q.broker, q.queue_id))
    assert [sum(q.broker == b for q in before) for b in sorted({q.broker for q in before})] == [3, 2]
    [again] = ac.create_topics([NewTopic("KfAdmin", 5)]).values()
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        again.result(20)
    [grow] = ac.create_partitions([NewPartitions("KfAdmin", 7)]).values()
    assert grow.result(20) is None
    wait_for(lambda: parts() == 7, 20, "7 partitions")
    after = sorted(admin.queues("KfAdmin"), key=lambda q: (q.broker, q.queue_id))
    assert after[:5] == before      # the old partitions keep their numbers
    from confluent_kafka.admin import ConfigResource
    [cfg] = ac.describe_configs([ConfigResource("topic", "KfAdmin")]).values()
    assert cfg.result(20)["max.message.bytes"].value == str(4 * 1024 * 1024)
    [gone] = ac.delete_topics(["KfAdmin"]).values()
    assert gone.result(20) is None
    wait_for(lambda: ac.list_topics("KfAdmin", timeout=10).topics["KfAdmin"].error is not None, 20, "deleted")


@pytest.mark.skipif(not shutil.which("kcat"), reason="Debian's kcat is not installed (.ci/run installs it)")
def test_kcat_lists_produces_and_consumes_in_a_group(env):
    c, gw, admin, bootstrap = env
    _topic(admin, "KfKcat", queues=1)
    run = lambda *args, **kw: subprocess.run(["kcat", "-b", bootstrap, *args], capture_output=True,  # noqa: E731
                                             timeout=60, check=True, **kw)
    listing = run("-L", "-t", "KfKcat").stdout.decode()
    assert 'topic "KfKcat" with 2 partitions' in listing
    run("-P", "-t", "KfKcat", "-K", ":", input=b"".join(b"k%d:v%d\n" % (i, i) for i in range(6)))
    out = run("-C", "-G", "kf-kcat", "-o", "beginning", "-c", "6", "-f", "%k=%s\n", "KfKcat").stdout.decode()
    assert sorted(out.split()) == sorted(f"k{i}=v{i}" for i in range(6))


def test_kafka_python_and_aiokafka_produce_and_consume_in_groups(env):
    c, gw, admin, bootstrap = env
    kafka = pytest.importorskip("kafka")
    aiokafka = pytest.importorskip("aiokafka")
    _topic(admin, "KfPyClients", queues=1)
    p = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(8):
        p.send("KfPyClients", value=b"kp-%d" % i, key=b"k%d" % i, headers=[("via", b"kafka-python")])
    p.flush(20)
    p.close()
    cons = kafka.KafkaConsumer("KfPyClients", bootstrap_servers=bootstrap, group_id="kf-py",
                               auto_offset_reset="earliest", consumer_timeout_ms=20_000)
    got = []
    for m in cons:
        got.append((m.key, m.value, m.headers))
        if len(got) == 8:
            break
    cons.close()
    assert sorted(got) == sorted((b"k%d" % i, b"kp-%d" % i, [("via", b"kafka-python")]) for i in range(8))

    async def aio():
        pr = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await pr.start()
        try:
            for i in range(8):
                await pr.send_and_wait("KfPyClients", b"aio-%d" % i, key=b"k", partition=0)
        finally:
            await pr.stop()
        co = aiokafka.AIOKafkaConsumer("KfPyClients", bootstrap_servers=bootstrap, group_id="kf-aio",
                                       auto_offset_reset="earliest")
        await co.start()
        out = []
        try:
            async with asyncio.timeout(20):
                async for m in co:
                    out.append(m.value)
                    if len(out) == 16:
                        return out
        finally:
            await co.stop()
    out = asyncio.run(aio())
    assert [v for v in out if v.startswith(b"aio-")] == [b"aio-%d" % i for i in range(8)]   # one partition: in order


def _poll_one(consumer, timeout=20):
    m = wait_for(lambda: consumer.poll(0.5), timeout, "a message")
    assert m.error() is None, m.error()
    return m


def test_committed_offsets_are_quiver_consumer_offsets_and_a_new_consumer_resumes(env):
    c, gw, admin, bootstrap = env
    queues = _topic(admin, "KfCommit")
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(6):
        p.produce("KfCommit", b"c-%d" % i, partition=2)
    assert p.flush(20) == 0
    conf = {"bootstrap.servers": bootstrap, "group.id": "kf-commit", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100}
    first = Consumer(conf)
    try:
        first.assign([TopicPartition("KfCommit", 2)])        # no offset: the group's committed one, else earliest
        got = [_poll_one(first) for _ in range(4)]
        assert [m.value() for m in got] == [b"c-0", b"c-1", b"c-2", b"c-3"]
        first.commit(message=got[-1], asynchronous=False)  # commits offset 4: the next to read
        [tp] = first.committed([TopicPartition("KfCommit", 2)], timeout=10)
        assert tp.offset == 4
    finally:
        first.close()
    assert admin.consumer_offset("kf-commit", queues[2]) == 4   # partition 2 = the third queue
    second = Consumer(conf)
    try:
        second.assign([TopicPartition("KfCommit", 2)])
        m = _poll_one(second)
        assert m.value() == b"c-4" and m.offset() == 4
    finally:
        second.close()


def test_a_group_of_two_subscribers_shares_the_partitions_and_rebalances_when_one_leaves(env):
    c, gw, admin, bootstrap = env
    _topic(admin, "KfGroup")
    p = Producer({"bootstrap.servers": bootstrap})
    conf = {"bootstrap.servers": bootstrap, "group.id": "kf-group", "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "fetch.wait.max.ms": 100, "session.timeout.ms": 30000,
            "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range"}
    members = [Consumer(conf), Consumer(conf)]
    got = {0: [], 1: []}
    try:
        for m in members:
            m.subscribe(["KfGroup"])

        def joined():   # both in the group before anything is sent: neither can take all 40 alone
            for m in members:
                assert m.poll(0.2) is None
            return all(len(m.assignment()) == 2 for m in members)
        wait_for(joined, 60, "two members assigned two partitions each")
        for i in range(40):
            p.produce("KfGroup", b"g-%d" % i, partition=i % 4)
        assert p.flush(20) == 0

        def poll_all():
            for i, m in enumerate(members):
                msg = m.poll(0.2)
                if msg is not None and msg.error() is None:
                    got[i].append(msg.value())
                    m.commit(message=msg, asynchronous=False)
            return len(got[0]) + len(got[1]) >= 40 and all(len(m.assignment()) == 2 for m in members)
        wait_for(poll_all, 60, "40 messages shared by two members of two partitions each")
        assert sorted(got[0] + got[1]) == sorted(b"g-%d" % i for i in range(40))   # each once
        assert got[0] and got[1]
        from confluent_kafka.admin import AdminClient
        ac = AdminClient({"bootstrap.servers": bootstrap})
        desc = ac.describe_consumer_groups(["kf-group"])["kf-group"].result(20)
        assert len(desc.members) == 2 and desc.partition_assignor == "range"
        listed = ac.list_consumer_groups().result(20)
        assert "kf-group" in {g.group_id for g in listed.valid}
        members.pop().close()                                   # LeaveGroup: the other takes all four
        wait_for(lambda: members[0].poll(0.2) is None and len(members[0].assignment()) == 4, 30,
                 "the remaining member assigned all four partitions")
        for i in range(4):
            p.produce("KfGroup", b"after-%d" % i, partition=i)
        assert p.flush(20) == 0
        after = sorted(_poll_one(members[0]).value() for _ in range(4))
        assert after == [b"after-%d" % i for i in range(4)]   # what was committed does not come again
    finally:
        for m in members:
            m.close()


def test_a_static_member_restarted_takes_its_place_at_once_and_resumes(env):
    c, gw, admin, bootstrap = env
    _topic(admin, "KfStatic")
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(4):
        p.produce("KfStatic", b"s-%d" % i, partition=0)
    assert p.flush(20) == 0
    conf = {"bootstrap.servers": bootstrap, "group.id": "kf-static", "group.instance.id": "host-1",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 100,
            "session.timeout.ms": 30000, "max.poll.interval.ms": 300000}

    def read_two(consumer):
        consumer.subscribe(["KfStatic"])
        got = [_poll_one(consumer, 30) for _ in range(2)]
        consumer.commit(message=got[-1], asynchronous=False)
        return [m.value() for m in got]
    first = Consumer(conf)
    try:
        assert read_two(first) == [b"s-0", b"s-1"]
    finally:
        first.close()   # a static member does not leave: its place waits for it
    # the same instance id back: served at once (a new member would wait for the first one to rejoin,
    # up to its 300 s rebalance timeout)
    second = Consumer(conf)
    try:
        assert read_two(second) == [b"s-2", b"s-3"]
    finally:
        second.close()


def test_alter_configs_take_what_changes_nothing_and_describe_cluster_names_the_gateway(env):
    c, gw, admin, bootstrap = env
    _topic(admin, "KfConfigs")
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
    ac = AdminClient({"bootstrap.servers": bootstrap})

    def alter(name, value, op=AlterConfigOpType.SET, topic="KfConfigs"):
        entry = ConfigEntry(name, value, incremental_operation=op)
        [f] = ac.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=[entry])]).values()
        return f.result(20)
    assert alter("cleanup.policy", "delete") is None              # what it is already
    assert alter("max.message.bytes", None, AlterConfigOpType.DELETE) is None
    with pytest.raises(KafkaException, match="INVALID_CONFIG.*fixed at"):
        alter("max.message.bytes", "10")
    with pytest.raises(KafkaException, match="INVALID_CONFIG.*retention.ms"):
        alter("retention.ms", "1000")
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        alter("cleanup.policy", "delete", topic="KfNoSuchTopic")
    with pytest.warns(DeprecationWarning):
        [f] = ac.alter_configs([ConfigResource("topic", "KfConfigs", set_config={"cleanup.policy": "compact"})]).values()
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        f.result(20)
    cluster = ac.describe_cluster().result(20)
    assert cluster.cluster_id == "quiver" and [(n.id, f"{n.host}:{n.port}") for n in cluster.nodes] == [(0, bootstrap)]


def test_a_transactional_producer_is_refused_at_once_saying_why(env):
    c, gw, admin, bootstrap = env
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "kf-tx"})
    t0 = time.monotonic()
    with pytest.raises(KafkaException, match="transactions are not served") as err:
        p.init_transactions(30)
    assert err.value.args[0].fatal() and time.monotonic() - t0 < 20   # not retried until the timeout


def test_offsets_for_times_finds_the_first_message_stored_at_or_after(env):
    c, gw, admin, bootstrap = env
    _topic(admin, "KfTimes", queues=1)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(4):
        p.produce("KfTimes", b"t-%d" % i, partition=0)
    assert p.flush(20) == 0
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    for i in range(4, 8):
        p.produce("KfTimes", b"t-%d" % i, partition=0)
    assert p.flush(20) == 0
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": "kf-times"})
    try:
        [tp] = cons.offsets_for_times([TopicPartition("KfTimes", 0, cut)], timeout=10)
        assert tp.error is None and tp.offset == 4
        cons.assign([tp])                               # seek by timestamp
        assert _poll_one(cons).value() == b"t-4"
    finally:
        cons.close()


def test_kafka_producer_to_quiver_pull_consumer_with_keys_properties_and_born_time(env):
    c, gw, admin, bootstrap = env
    _topic(admin, "KfToQuiver", queues=1)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        p.produce("KfToQuiver", b"kq-%d" % i, key=b"order-%d" % i, headers=[("region", b"eu")],
                  timestamp=1_600_000_000_000 + i, partition=i % 2)
        assert p.flush(20) == 0      # one record a batch: its timestamp is the born time itself
    got = []
    pc = PullConsumer("kf-to-quiver", namesrv=c.namesrv, consume_from="first")
    pc.subscribe("KfToQuiver", "*")                 # before start: its first rebalance owns the queues
    with pc:
        wait_for(lambda: got.extend(pc.poll(timeout=0.5)) or len(got) >= 3, 30, "3 messages in Quiver")
    by_body = {m.body: m for m in got}
    for i in range(3):
        m = by_body[b"kq-%d" % i]
        assert m.keys == ["order-%d" % i] and m.properties["region"] == "eu"
        assert m.born_timestamp == 1_600_000_000_000 + i


def test_kafka_headers_are_properties_a_sql92_selector_filters_on(env):
    c, gw, admin, bootstrap = env
    _topic(admin, "KfSql", queues=1)
    flt = c.add_service("filter", "quiver_filter", "--register-interval-ms", "500", data=False)
    wait_healthy([flt])
    wait_for(lambda: flt.addr in {a for addrs in admin.topic_route("KfSql").get("filter_servers", {}).values()
                                  for a in addrs}, 30, "the filter server in KfSql's route")
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        p.produce("KfSql", b"s-%d" % i, headers=[("region", b"eu" if i % 2 else b"us"), ("n", str(i).encode())],
                  partition=i % 2)
    assert p.flush(20) == 0
    got = []
    pc = PullConsumer("kf-sql", namesrv=c.namesrv, consume_from="first")
    pc.subscribe("KfSql", MessageSelector.sql("region = 'eu' AND n > 2"))
    with pc:
        wait_for(lambda: got.extend(m.body for m in pc.poll(timeout=0.5)) or len(got) >= 4, 30, "4 matches")
        got.extend(m.body for m in pc.poll(timeout=0.5))
    assert sorted(got) == [b"s-3", b"s-5", b"s-7", b"s-9"]


def _frame(api_key, version, corr, body=b""):
    head = struct.pack(">hhih", api_key, version, corr, 4) + b"test"
    return struct.pack(">i", len(head) + len(body)) + head + body


def _answer(sock):
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    return sock.recv(size, socket.MSG_WAITALL)


def _closed(sock) -> bool:
    """The peer closed `sock` (an orderly close, or a reset when our unread bytes were dropped)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_unsupported_api_is_answered_and_oversize_frame_closes_only_that_connection(env):
    c, gw, admin, bootstrap = env
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(_frame(29, 1, 77))                                              # DescribeAcls v1
        out = _answer(s)
        assert struct.unpack_from(">i", out)[0] == 77
        assert struct.unpack_from(">ih", out, 4)[1] == 35                         # UNSUPPORTED_VERSION
        s.sendall(_frame(18, 9, 78))                                              # ApiVersions v9
        out = _answer(s)
        assert struct.unpack_from(">ih", out) == (78, 35)
        s.sendall(_frame(18, 2, 79))                                              # the connection lives on
        assert struct.unpack_from(">ih", _answer(s)) == (79, 0)
    with socket.create_connection((host, int(port)), timeout=10) as big, \
            socket.create_connection((host, int(port)), timeout=10) as other:
        big.sendall(struct.pack(">i", MAX_REQUEST + 1) + b"x" * 1024)
        assert _closed(big)
        other.sendall(_frame(18, 2, 80))
        assert struct.unpack_from(">ih", _answer(other)) == (80, 0)
    assert gw.alive()


def test_metrics_count_answers_by_api_and_error_and_the_groups_members(env):
    c, gw, admin, bootstrap = env
    metrics = gw.args[gw.args.index("--metrics-listen") + 1]
    _topic(admin, "KfMetrics", queues=1)
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce("KfMetrics", b"x", partition=0)
    assert p.flush(20) == 0
    text = wait_for(lambda: (t := urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5).read().decode())
                    and 'quiver_kafka_answers_total{api="produce",error_code="0"}' in t and t, 20, "produce counted")
    assert 'quiver_kafka_answers_total{api="metadata"' not in text   # Metadata is not counted per call
    assert "quiver_kafka_connections " in text and "quiver_kafka_connections_closed_total" in text
    assert all(f'quiver_kafka_fetch_broker_total{{what="{w}"}}' in text for w in ("pulls", "pulled", "answered"))

"""The Kafka APIs over Quiver's SDK: ApiVersions, Metadata, Produce, Fetch, ListOffsets.

A Kafka topic is the Quiver topic of that name. Its partitions are the topic's readable queues
ordered by broker name, then queue id: partition i is the i-th. Adding queues (or a broker) to a
topic appends partitions only when the new ones sort last; otherwise partitions are renumbered,
as a Kafka client learns on its next Metadata. Offsets are queue offsets. The gateway is the one
Kafka broker (node 0) it hands out, leader of every partition, so several gateways behind one
bootstrap list each serve every partition.

acks: 0 sends oneway (no answer, as Kafka); 1 and all wait for the broker's answer, which comes
after its flush and replication as the broker is configured (SYNC_FLUSH, SYNC_MASTER): the
gateway cannot ask for more than the broker does.
"""

import logging
import threading
import time

from quiver.client import queue_puller
from quiver.client.access import broker_access
from quiver.client.admin import Admin
from quiver.errors import MessageIllegalError, NoPermissionError, QuiverError, RequestTimeoutError, TopicNotExistError
from quiver.wire import record
from quiver.wire.names import topic_problem

from . import holding, mapping, records
from .protocol import (API_VERSIONS, CORRUPT_MESSAGE, DESCRIBE_CLUSTER, FETCH, INVALID_RECORD, INVALID_REQUIRED_ACKS,
                       INVALID_TOPIC_EXCEPTION, KAFKA_STORAGE_ERROR, LIST_OFFSETS, MESSAGE_TOO_LARGE, METADATA,
                       NONE, OFFSET_OUT_OF_RANGE, PRODUCE, REQUEST_TIMED_OUT, TOPIC_AUTHORIZATION_FAILED,
                       UNKNOWN_SERVER_ERROR, UNKNOWN_TOPIC_OR_PARTITION, UNSUPPORTED_COMPRESSION_TYPE,
                       UNSUPPORTED_FOR_MESSAGE_FORMAT, Request, api_versions)
from .idempotence import SEQ, TAIL_MESSAGES, Idempotence, seq_property
from .readahead import AHEAD_BYTES, ReadAhead
from .sending import QueueSender, Sent

log = logging.getLogger(__name__)

NODE_ID = 0
CLUSTER_ID = "quiver"
EARLIEST, LATEST = -2, -1
MAX_PULL_MSGS = 1024
SENT, AHEAD, HELD = "sent", "ahead", "held"   # how a partition's pull of a Fetch round was started


class Awaiting:
    """Values given by `fn()`, which waits for `futures` (call it once they are done not to wait)."""

    __slots__ = ("futures", "fn")

    def __init__(self, futures: list, fn):
        self.futures, self.fn = futures, fn

    def __call__(self):
        return self.fn()


def error_of(exc: Exception) -> int:
    """The Kafka error code of what the SDK raised."""
    if isinstance(exc, TopicNotExistError):
        return UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, NoPermissionError):
        return TOPIC_AUTHORIZATION_FAILED
    if isinstance(exc, MessageIllegalError):
        return INVALID_RECORD
    if isinstance(exc, RequestTimeoutError):
        return REQUEST_TIMED_OUT
    if isinstance(exc, QuiverError):
        return KAFKA_STORAGE_ERROR   # retriable on the client: a broker is unwell
    return UNKNOWN_SERVER_ERROR


class Gateway:
    """Answers one parsed request: `handle(req)` -> kio response values, or None for no answer."""

    def __init__(self, config, host: str, port: int, credentials=None, shared: "Gateway | None" = None):
        """`credentials`: the Quiver user the SDK clients act as; `shared`: the gateway whose answer
        counts this one (another user's) adds to."""
        self.config, self.host, self.port = config, host, port
        timeout = config.request_timeout_ms / 1000
        self.admin = Admin(config.namesrv, timeout, credentials=credentials)
        self.sender = QueueSender(config.namesrv, timeout, config.max_message_bytes, credentials)
        self.counts: dict[tuple[str, int], int] = shared.counts if shared else {}   # (api, error) -> answers
        self._lock = shared._lock if shared else threading.Lock()
        self.apis = {API_VERSIONS: self.api_versions, METADATA: self.metadata, PRODUCE: self.produce,
                     FETCH: self.fetch, LIST_OFFSETS: self.list_offsets, DESCRIBE_CLUSTER: self.describe_cluster}   # offsets.py and groups.py add theirs
        self.idempotence = Idempotence()
        self.ahead = ReadAhead()   # a user's own: a pull made with one user's key is never another's
        self._log_start: dict[tuple[str, int], int] = {}   # a partition's last known first offset
        self.fetched = shared.fetched if shared else {"pulls": 0, "pulled": 0, "answered": 0}   # Fetch's broker work
        self.apis.update(self.idempotence.apis())

    def shutdown(self) -> None:
        self.sender.shutdown()
        self.admin.shutdown()

    def handle(self, req: Request) -> dict | None:
        return self.apis[req.api_key](req.body)

    # ---- partitions ---------------------------------------------------------------------------

    def partitions(self, topic: str, refresh: bool = False) -> list:
        """The topic's queues in partition order; TopicNotExistError."""
        route = broker_access(self.admin).route(topic, refresh=refresh)
        return sorted(route.read_queues, key=lambda q: (q.broker, q.queue_id))

    def queue(self, topic: str, partition: int):
        """(queue, error code): the queue of a partition or why there is none."""
        if topic_problem(topic):
            return None, INVALID_TOPIC_EXCEPTION
        try:
            qs = self.partitions(topic)
        except Exception as exc:
            return None, error_of(exc)
        if not 0 <= partition < len(qs):
            return None, UNKNOWN_TOPIC_OR_PARTITION
        return qs[partition], NONE

    # ---- APIs ---------------------------------------------------------------------------------

    def api_versions(self, _body) -> dict:
        return api_versions()

    def metadata(self, body) -> dict:
        if body.topics is None:
            try:
                names = sorted(t for t in self.admin.topic_list() if not topic_problem(t) and "%" not in t)
            except QuiverError:
                names = []
        else:
            names = [t.name for t in body.topics if t.name is not None]
        topics = []
        for name in names:
            err, parts = NONE, []
            if topic_problem(name):
                err = INVALID_TOPIC_EXCEPTION
            else:
                try:
                    parts = self.partitions(name, refresh=True)
                except Exception as exc:
                    err = error_of(exc)
            topics.append({"error_code": err, "name": name, "is_internal": False, "partitions": [
                {"error_code": NONE, "partition_index": i, "leader_id": NODE_ID, "leader_epoch": 0,
                 "replica_nodes": [NODE_ID], "isr_nodes": [NODE_ID], "offline_replicas": []}
                for i in range(len(parts))]})
        return {"throttle_time": 0, "brokers": [{"node_id": NODE_ID, "host": self.host, "port": self.port}],
                "cluster_id": CLUSTER_ID, "controller_id": NODE_ID, "topics": topics}

    def describe_cluster(self, _body) -> dict:
        """The cluster as Metadata gives it: this gateway is its one broker and controller."""
        return {"throttle_time": 0, "error_code": NONE, "error_message": None, "endpoint_type": 1,
                "cluster_id": CLUSTER_ID, "controller_id": NODE_ID,
                "brokers": [{"broker_id": NODE_ID, "host": self.host, "port": self.port, "rack": None}],
                "cluster_authorized_operations": -2147483648}   # not asked for (Kafka's INT32_MIN)

    def produce(self, body):
        """The answer's values, None for acks=0, or - sends under way - a callable giving them, whose
        `futures` are the sends' replies it waits for (the connection reads its next request
        meanwhile: a client's pipelined produces overlap)."""
        if body.acks not in (0, 1, -1):
            return self._produce_answer(body, {}, (INVALID_REQUIRED_ACKS, -1, None))
        if body.transactional_id is not None:
            return self._produce_answer(body, {}, (UNSUPPORTED_FOR_MESSAGE_FORMAT, -1,
                                                   "transactions are not served by the gateway"))
        started = {(td.name, pd.index): self._produce_start(td.name, pd, body.acks != 0)
                   for td in body.topic_data for pd in td.partition_data}
        if body.acks == 0:
            return None
        return Awaiting([sent.future for got in started.values() if isinstance(got, list)
                         for sent, _ in got if isinstance(sent, Sent)], lambda: self._produce_answer(body, started))

    def _produce_answer(self, body, started: dict, same=None) -> dict:
        responses = []
        for td in body.topic_data:
            parts = []
            for pd in td.partition_data:
                got = same or started[(td.name, pd.index)]
                err, base, msg = got if isinstance(got, tuple) else self._produce_wait(td.name, pd.index, got)
                self._count("produce", err)
                parts.append({"index": pd.index, "error_code": err, "base_offset": base, "log_start_offset": -1,
                              "record_errors": [], "error_message": msg})
            responses.append({"name": td.name, "partition_responses": parts})
        return {"responses": responses, "throttle_time": 0}

    def _produce_start(self, topic: str, pd, wait: bool):
        """The partition's answer (error, base offset, message), or its sends under way."""
        mq, err = self.queue(topic, pd.index)
        if mq is None:
            return err, -1, None
        try:
            batches = records.decode(bytes(pd.records or b""), self.config.max_request_bytes)
        except records.Unsupported as exc:
            return UNSUPPORTED_COMPRESSION_TYPE, -1, str(exc)
        except records.Corrupt as exc:
            return CORRUPT_MESSAGE, -1, str(exc)
        sends = []   # (send under way, its batch)
        try:
            for b in batches:
                if not b.records:
                    continue
                if self.idempotence.needs_tail(topic, pd.index, b):
                    self.idempotence.restore(topic, pd.index, b.producer_id, self._stored_sequences(topic, mq))
                err, dup = self.idempotence.check(topic, pd.index, b)
                if err:
                    return err, -1, f"producer {b.producer_id} epoch {b.producer_epoch} sequence {b.base_sequence}"
                if dup is not None:   # a retry of a batch already sent: answered with its offset
                    sends.append((dup, b))
                    continue
                born = b.records[0].timestamp
                msgs = [mapping.to_message(topic, r, born) for r in b.records]
                if b.producer_id >= 0:   # where a gateway without this producer's state finds it
                    msgs[0].properties[SEQ] = seq_property(b)
                sent = self.sender.submit(mq, msgs, born, wait)
                if sent is not None:
                    self.idempotence.record(topic, pd.index, b, sent)
                    sends.append((sent, b))
        except Exception as exc:
            return self._produce_failed(topic, pd.index, exc)
        return sends if sends else (NONE, -1, None)

    def _stored_sequences(self, topic: str, mq) -> list[tuple[int, str | None]]:
        """(queue offset, kafka.seq) of the partition's last TAIL_MESSAGES messages that have one."""
        out = []
        try:
            hi = self.admin.max_offset(mq)
            offset = max(0, hi - TAIL_MESSAGES)
            for _ in range(8):   # a few pulls: large messages fill one before the tail is read
                if offset >= hi:
                    break
                pulled = queue_puller.fetch(broker_access(self.admin), *self._pull_request(topic, mq, offset, 4 << 20))
                if pulled.status is queue_puller.OFFSET_ILLEGAL or pulled.next <= offset:
                    offset = pulled.next if pulled.next > offset else hi
                    continue
                for f in record.decode_fields(pulled.body) if pulled.body is not None else ():
                    if SEQ in f.props:
                        out.append((f.queue_offset, record.client_properties(f.props).get(SEQ)))
                offset = pulled.next
        except Exception as exc:   # the batch is taken as it comes, as before a restart
            log.warning("stored sequences of %s[%s] not read: %s", topic, mq.queue_id, exc)
        return out

    def _produce_wait(self, topic: str, partition: int, sends: list):
        try:
            offsets = [sent.offset() for sent, _ in sends]
            return NONE, offsets[0], None
        except Exception as exc:
            for _, b in sends:
                self.idempotence.forget(topic, partition, b)
            return self._produce_failed(topic, partition, exc)

    def _produce_failed(self, topic: str, partition: int, exc: Exception):
        if isinstance(exc, MessageIllegalError):
            return MESSAGE_TOO_LARGE if "limit" in str(exc) else INVALID_RECORD, -1, str(exc)
        log.info("produce to %s[%d] failed: %s", topic, partition, exc)
        return error_of(exc), -1, str(exc) or type(exc).__name__

    def fetch(self, body) -> dict:
        """Every partition pulled at once; with less than min bytes found, held at the brokers
        until records come or max wait is over (holding.py)."""
        wait_s = max(0, body.max_wait.total_seconds())
        deadline = time.monotonic() + wait_s
        standing: dict = {}   # (topic, partition) -> its standing pull, still held at its broker
        total, responses = self._fetch_round(body, standing)
        if total < max(1, body.min_bytes) and time.monotonic() < deadline:
            holding.hold(self, body, responses, deadline, max(1, body.min_bytes), total, standing)
        for (topic, partition), fut in standing.items():   # not waited for: the next Fetch's
            offset = next(p.fetch_offset for t in body.topics if t.topic == topic
                          for p in t.partitions if p.partition == partition)
            self.ahead.put(topic, partition, offset, holding.Held(fut))
        return {"throttle_time": 0, "error_code": NONE, "session_id": 0, "responses": responses}

    def _fetch_round(self, body, standing: dict | None = None):
        total, responses, budget = 0, [], body.max_bytes if body.max_bytes > 0 else 1 << 30
        suspend_ms = holding.standing_ms(body) if standing is not None else 0
        # every partition's pull leaves at once (the brokers work while earlier answers are converted);
        # the answers are then read in request order, the response's byte budget applied to each
        started = [[self._pull_start(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
                    for p in t.partitions] for t in body.topics]
        for t, pulls in zip(body.topics, started):
            parts = []
            for p, pull in zip(t.partitions, pulls):
                part = self._fetch_one(t.topic, p.partition, p.fetch_offset, min(p.partition_max_bytes, budget), pull,
                                       p.partition_max_bytes, standing, suspend_ms)
                size = len(part["records"] or b"")
                total, budget = total + size, max(0, budget - size)
                self._count("fetch", part["error_code"])
                parts.append(part)
            responses.append({"topic": t.topic, "partitions": parts})
        return total, responses

    def _pull_request(self, topic: str, mq, offset: int, max_bytes: int, suspend_ms: int = 0):
        self.tally("pulls", 1)
        access = broker_access(self.admin)
        addr = access.read_addr(topic, mq.broker) or access.broker_addr(mq.broker, topic)
        return addr, queue_puller.request(topic, mq.queue_id, offset, max_msgs=MAX_PULL_MSGS,
                                          max_bytes=max(1024, max_bytes), suspend_ms=suspend_ms)

    def _pull_start(self, topic: str, partition: int, offset: int, max_bytes: int, ahead: bool = True):
        """A partition's pull sent without waiting (its future) - the one sent ahead for this offset if
        there is one - or None when it cannot start so: _fetch_one then pulls the blocking way, which
        reports the error or reads from a slave."""
        if ahead:
            sent = self.ahead.take(topic, partition, offset)
            if isinstance(sent, holding.Held):
                return sent.future, HELD
            if sent is not None:
                return sent, AHEAD
        mq, _ = self.queue(topic, partition)
        if mq is None or offset < 0:
            return None
        try:
            addr, req = self._pull_request(topic, mq, offset, max_bytes)
            return self.admin._io().call_future(addr, req, None, (), self.admin.request_timeout), SENT
        except Exception:
            return None

    def _fetch_one(self, topic: str, partition: int, offset: int, max_bytes: int, pull=None,
                   ahead_bytes: int = 0, standing: dict | None = None, suspend_ms: int = 0) -> dict:
        """One partition's answer; `pull`: (its pull's future, SENT), (what was read ahead, AHEAD),
        (a standing pull, HELD) or None. With `ahead_bytes`, records stored behind those answered
        are read ahead (readahead.py); with `suspend_ms`, a partition read to its end gets a
        standing pull (holding.stand). A standing pull still held goes to `standing`: nothing is stored
        at `offset` yet, so the answer is empty and up to date."""
        out = {"partition_index": partition, "error_code": NONE, "high_watermark": -1, "last_stable_offset": -1,
               "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1,
               "records": b""}   # empty, not null: librdkafka refuses a null record set
        mq, err = self.queue(topic, partition)
        if mq is None:
            return {**out, "error_code": err}
        if offset < 0:
            return {**out, "error_code": OFFSET_OUT_OF_RANGE}
        pulled = ready = None
        if pull is not None and pull[1] is HELD and not pull[0].done():
            if standing is None:
                pull = None   # no one waits for it here: pulled now
            else:
                standing[(topic, partition)] = pull[0]
                return {**out, "high_watermark": offset, "last_stable_offset": offset,
                        "log_start_offset": self._log_start.get((topic, partition), -1)}
        if pull is not None:
            future, kind = pull
            try:
                got = future.result(self.admin.request_timeout + 1.0)
                pulled, ready = got if kind is AHEAD else (queue_puller.read(got), None)
            except Exception:
                pulled = None   # pulled again below: a slave may answer, else its error is the answer
            if kind is not SENT and pulled is not None and pulled.body is None:
                pulled = None   # sent earlier and found nothing: what was stored since is pulled now
        if pulled is None:
            try:
                request = self._pull_request(topic, mq, offset, max_bytes)
                pulled, ready = queue_puller.fetch(broker_access(self.admin), *request), None
            except Exception as exc:
                return {**out, "error_code": error_of(exc)}
        out.update(high_watermark=pulled.max, last_stable_offset=pulled.max, log_start_offset=pulled.min)
        self._log_start[(topic, partition)] = pulled.min
        if ready is None:
            self.tally_pulled(pulled, offset)
        if pulled.status is queue_puller.OFFSET_ILLEGAL or offset > pulled.max:
            return {**out, "error_code": OFFSET_OUT_OF_RANGE}
        data, used, last = ready or self._converted(pulled, offset, max_bytes)
        if used:
            if len(data) > max_bytes and used > 1:   # read ahead for a larger budget than this answer's
                data, used, last = self._converted(pulled, offset, max_bytes)   # the first goes whatever its size
            out["records"] = data
            self.tally("answered", used)
            following = last + 1
            if ahead_bytes and following < pulled.max:
                size = min(ahead_bytes, AHEAD_BYTES)
                sent = self._pull_start(topic, partition, following, size, ahead=False)
                if sent is not None:
                    self.ahead.put(topic, partition, following, sent[0], lambda f: self._read_ahead(f, following, size))
            elif suspend_ms and following >= pulled.max:
                holding.stand(self, topic, partition, following, ahead_bytes or max_bytes, suspend_ms)
        return out

    @staticmethod
    def _converted(pulled, offset: int, max_bytes: int) -> tuple:
        """(record batch, records in it, the last one's offset) of a pull answer from `offset`."""
        return mapping.pulled_batch(pulled.body, offset, max_bytes) if pulled.body is not None else (b"", 0, -1)

    def _read_ahead(self, future, offset: int, max_bytes: int):
        """(the answer, its conversion) of a pull sent ahead: on the read-ahead worker thread."""
        pulled = queue_puller.read(future.result(self.admin.request_timeout + 1.0))
        self.tally_pulled(pulled, offset)
        return pulled, self._converted(pulled, offset, max_bytes) if pulled.body is not None else None

    def list_offsets(self, body) -> dict:
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                err, offset, ts = self._offset(t.name, p.partition_index, p.timestamp)
                self._count("list_offsets", err)
                parts.append({"partition_index": p.partition_index, "error_code": err, "timestamp": ts,
                              "offset": offset, "old_style_offsets": [offset] if offset >= 0 else [],
                              "leader_epoch": 0})
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}

    def _offset(self, topic: str, partition: int, ts: int):
        mq, err = self.queue(topic, partition)
        if mq is None:
            return err, -1, -1
        try:
            if ts == EARLIEST:
                return NONE, self.admin.min_offset(mq), -1
            if ts == LATEST:
                return NONE, self.admin.max_offset(mq), -1
            if ts < 0:
                return INVALID_RECORD, -1, -1
            return NONE, self.admin.search_offset(mq, ts), ts
        except Exception as exc:
            return error_of(exc), -1, -1

    def tally(self, what: str, n: int) -> None:
        """Count Fetch's broker work: pull requests sent, records they brought, records answered."""
        with self._lock:
            self.fetched[what] += n

    def tally_pulled(self, pulled, offset: int) -> None:
        if pulled.body is not None and pulled.next > offset:
            self.tally("pulled", pulled.next - offset)

    def _count(self, api: str, err: int) -> None:
        with self._lock:
            self.counts[(api, err)] = self.counts.get((api, err), 0) + 1

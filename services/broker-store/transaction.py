"""Broker side of transactional messages (issue 5): half messages, END_TRANSACTION, checks.

Owns what a broker does for transactions; the txn-checker process
(services/txn-checker) owns scheduling and progress, the SDK's
TransactionProducer owns the local transaction.

- A prepared send (SEND_MESSAGE with sys flag TX_PREPARED; sending.py hands it
  to `prepare`) is stored in RMQ_SYS_TRANS_HALF_TOPIC queue 0 with REAL_TOPIC,
  REAL_QID and __transactionId__ (= UNIQ_KEY) added, as an ordinary record so
  it gets a ConsumeQueue entry in the half topic (nobody subscribes to it).
- END_TRANSACTION (37), one entry or a batch ``e = [[half_phys, half_qoff,
  state, txid], ...]`` with ``g`` = producer group and ``fc`` = from a check:
  COMMIT (8) appends the real message (sys flag TX_COMMIT, topic/queue
  restored, UNIQ_KEY kept, PREPARED_TX_OFFSET = the half's CommitLog offset)
  then an op record; ROLLBACK (12) only the op record; NOT (0) nothing. The
  half must exist, sit at the given queue offset and carry the same PGROUP and
  transaction id. A producer's (non-check) answer after its
  CHECK_IMMUNITY_TIME_IN_SECONDS window is ILLEGAL_OPERATION.
- Op records (RMQ_SYS_TRANS_OP_HALF_TOPIC queue 0, tag "d", body "<half
  offset>,") also carry __transactionId__ and TRAN_STATE (C, R or D). A
  transaction is resolved once per transaction id: `resolved` (resolutions.py,
  which forgets a transaction once retention deleted its half) is rebuilt from
  the op queue on first use after a restart, and a half stored before this
  process started is also looked up in the index of its real topic (a commit
  whose op record was lost is not committed twice).
- TRANSACTION_CHECK (txn-checker -> broker) ``e = [[half_phys, half_qoff,
  action], ...]``: "c" pushes CHECK_TRANSACTION_STATE to one live producer of
  the message's PGROUP (round-robin, over the producer's own connection; a
  dead connection is detected with ROUTER_MANDATORY and skipped) and re-puts
  the half with TRANSACTION_CHECK_TIMES + 1; with no live producer it re-puts
  it unchanged and answers "no_producer" (not counted). "r" re-puts unchanged
  (still immune), "d" copies it to TRANS_CHECK_MAX_TIME_TOPIC and writes a
  "D" op (never committed). Re-puts keep the first offset
  (TRAN_PREPARED_QUEUE_OFFSET) and birth time (TRAN_BORN_MS).
- TRANSACTION_LIST_OPEN: open transactions with age and check count.
- Properties with system meaning are read back through quiver.wire.properties
  (they were checked when the half was put): a malformed value
  (TRANSACTION_CHECK_TIMES=x, CHECK_IMMUNITY_TIME_IN_SECONDS=inf) is counted in
  `bad_system_properties`, logged, and its default used; a COMMIT whose
  REAL_TOPIC / REAL_QID is bad is rolled back and answered MESSAGE_ILLEGAL.
"""

import itertools
import logging
import time

from quiver.wire import protocol, record
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import InvalidParameterError, MessageIllegalError, NoPermissionError, QuiverError, error_for
from quiver.wire.access import PUB, topic_resource
from quiver.wire.names import CHECK_MAX_TOPIC, HALF_TOPIC, OP_HALF_TOPIC
from quiver.wire.replies import TransactionCheckReply, TransactionListReply
from quiver.wire.properties import (CHECK_IMMUNITY_TIME_IN_SECONDS as CHECK_IMMUNITY, DELAY, INT32_MAX, PGROUP,
                                    KEYS, REAL_QID, REAL_TOPIC, TAGS, TIMER_DELIVER_MS,
                                    TRANSACTION_CHECK_TIMES as CHECK_TIMES, TRANSACTION_ID, TRAN_BORN_MS as BORN_MS,
                                    TRAN_STATE, TRAN_MSG, TRAN_PREPARED_QUEUE_OFFSET as PREPARED_QOFF, UNIQ_KEY,
                                    read_int, read_topic)
from quiver.wire.transport import next_request_id
from quiver.wire.property_string import format_properties, get_property

from .status_codes import check_stored
from .resolutions import Resolutions
from .store import GetStatus

log = logging.getLogger(__name__)

OP_TAG = "d"
COMMIT, ROLLBACK, NOT = record.TX_COMMIT, record.TX_ROLLBACK, record.TX_NOT
_STATE_CODE = {COMMIT: "C", ROLLBACK: "R"}
_REAL_DROP = (REAL_TOPIC, REAL_QID, TRAN_MSG, CHECK_TIMES, PREPARED_QOFF, BORN_MS)
_ERRORS = {"not_found": (ResponseCode.SYSTEM_ERROR, "half message not found at that offset (expired or wrong offsets)"),
           "group_wrong": (ResponseCode.TRANSACTION_STATE_GROUP_WRONG, "producer group differs from the half message's PGROUP"),
           "txid_mismatch": (ResponseCode.SYSTEM_ERROR, "transaction id differs from the half message's"),
           "illegal": (ResponseCode.ILLEGAL_OPERATION, "answer came after the message's check immunity window; the checker resolves it"),
           "bad_real_queue": (ResponseCode.MESSAGE_ILLEGAL, f"the half message's {REAL_TOPIC} or {REAL_QID} is not a "
                              "valid topic name / queue id 0..1023: rolled back"),
           "bad_state": (ResponseCode.INVALID_PARAMETER, "state must be 8 (commit), 12 (rollback) or 0 (unknown)"),
           "no_permission": (ResponseCode.NO_PERMISSION, "this user lacks PUB on the half message's topic")}


def _denied(req, topic) -> str | None:
    """Auth on: why the sender may not PUB on the half message's real topic (END_TRANSACTION is
    declared so), or None if it may."""
    try:
        req.authorize(topic_resource(topic) if isinstance(topic, str) and topic else "topic:?", PUB)
        return None
    except NoPermissionError as exc:
        return exc.remark


def born_ms(rec, props: dict) -> int:
    # a half cannot be born after it was stored: a future TRAN_BORN_MS would hold it back forever
    return min(read_int(props, BORN_MS, rec.born_ts), rec.store_ts)


class Transactions:
    """END_TRANSACTION, TRANSACTION_CHECK, TRANSACTION_LIST_OPEN; `prepare` serves sending.py.

    `push(identity, frames) -> bool` sends to a producer only over a live connection
    (Service.send_if_connected); `commit` answers once what was written is visible."""

    def __init__(self, store, topics, metadata, clients, commit, counters, push, store_host: bytes):
        self.store = store
        self.topics = topics
        self.metadata = metadata
        self.clients = clients
        self.commit = commit              # group_commit.GroupCommit
        self.counters = counters
        self.push = push
        self.store_host = store_host
        self.resolved = Resolutions(store)  # transaction id -> C / R / D, forgotten with their halves
        self.loaded = False
        self.started_ms = int(time.time() * 1000)
        self._rr = itertools.count()

    def handlers(self) -> dict:
        return {RequestCode.END_TRANSACTION: self.end, RequestCode.TRANSACTION_CHECK: self.check,
                RequestCode.TRANSACTION_LIST_OPEN: self.list_open}

    # ---- half messages (called by sending.py) -------------------------------------

    def prepare(self, topic: str, queue_id: int, props: list[str], sys_flag: int, batch: bool):
        if batch or len(props) != 1:
            raise MessageIllegalError("transactional messages cannot be batched: send each with send_in_transaction")
        if sys_flag & record.TX_MASK != record.TX_PREPARED:
            raise MessageIllegalError("only prepared (half) messages can be sent; commit or roll back with END_TRANSACTION")
        p = props[0]
        if get_property(p, DELAY) or get_property(p, TIMER_DELIVER_MS):
            raise MessageIllegalError("transactional messages cannot be delayed: drop delay_level / deliver_at")
        txid = get_property(p, UNIQ_KEY)
        if not txid or not get_property(p, PGROUP):
            raise InvalidParameterError("a half message needs UNIQ_KEY and PGROUP properties")
        self.topics.config(HALF_TOPIC, create=True, system=True, queues=1)
        p += format_properties(((REAL_TOPIC, topic), (REAL_QID, queue_id), (TRANSACTION_ID, txid)))
        self.counters["txn_half"] += 1
        return HALF_TOPIC, 0, [p], sys_flag & ~record.TX_MASK

    # ---- resolution state ----------------------------------------------------------

    def load(self) -> None:
        """Rebuild the resolved set from the op queue (once, after the store opened)."""
        if self.loaded:
            return
        self.loaded = True
        off, n = self.store.min_offset(OP_HALF_TOPIC, 0), 0
        while True:
            res = self.store.get_messages(OP_HALF_TOPIC, 0, off, 1024)
            if res.status is not GetStatus.FOUND:
                break
            for rec in record.decode_many(res.data):
                txid = get_property(rec.props, TRANSACTION_ID)
                if txid:
                    self.resolved.add(txid, get_property(rec.props, TRAN_STATE) or "C")
                    n += 1
            off = res.next_offset
        if n:
            log.info("transactions: %d resolved transactions loaded from the op queue", n)

    def _already_committed(self, real_topic: str, txid: str) -> bool:
        """A commit written before a crash whose op record was lost."""
        for rec in self.store.query_by_key(real_topic, txid, 8):
            if rec.sys_flag & record.TX_MASK == record.TX_COMMIT and get_property(rec.props, UNIQ_KEY) == txid:
                return True
        return False

    def _half(self, phys, qoff):
        if type(phys) is not int or type(qoff) is not int:
            raise InvalidParameterError("half offsets must be integers")
        rec = self.store.lookup(phys)
        if rec is None or rec.topic != HALF_TOPIC or rec.queue_offset != qoff:
            return None
        return rec

    # ---- END_TRANSACTION ---------------------------------------------------------------

    def end(self, req) -> None:
        self.load()
        a = req.args  # quiver.wire.requests.EndTransaction: entries are (phys, qoff, state, txid)
        group, entries, from_check = a.group, a.entries, a.from_check
        now = int(time.time() * 1000)
        results, commits, ops, denials = [], [], [], []
        for phys, qoff, state, txid in entries:
            results.append(self._end_one(group, phys, qoff, state, txid, from_check, now, commits, ops, req, denials))
        touched = self._commit(commits) + self._write_ops(ops)
        c = self.counters
        c["txn_commit"] += len(commits)
        c["txn_rollback"] += sum(op[2] == "R" for op in ops)
        c["txn_end"] += len(entries)
        if len(entries) == 1 and results[0] in _ERRORS:
            code, remark = _ERRORS[results[0]]
            raise error_for(code, denials[0] if denials else remark)
        self.commit.answer(req, TransactionCheckReply(results=results), touched)

    def _end_one(self, group, phys, qoff, state, txid, from_check, now, commits, ops, req=None,
                 denials=None) -> str:
        if state == NOT:
            return "unknown"
        if state not in (COMMIT, ROLLBACK):
            return "bad_state"
        if txid in self.resolved:
            return "dup"
        rec = self._half(phys, qoff)
        if rec is None:
            return "not_found"
        props = rec.properties()
        if props.get(PGROUP) != group:
            return "group_wrong"
        if props.get(TRANSACTION_ID) != txid:
            return "txid_mismatch"
        denied = None if req is None else _denied(req, props.get(REAL_TOPIC))
        if denied is not None:
            if denials is not None:
                denials.append(denied)   # names the user, the action and the topic
            return "no_permission"
        immunity_s = read_int(props, CHECK_IMMUNITY, 0, self._bad_property)
        if not from_check and immunity_s and now - born_ms(rec, props) > immunity_s * 1000:
            return "illegal"
        code, result = _STATE_CODE[state], "ok"
        if state == COMMIT:
            problems: list[str] = []
            real = read_topic(props, REAL_TOPIC, problems.append)
            qid = read_int(props, REAL_QID, 0, problems.append)
            if real is None or problems:
                self._bad_property(f"commit of {txid} impossible ({'; '.join(problems) or 'no ' + REAL_TOPIC}): "
                                   "rolled back")
                code, result = "R", "bad_real_queue"
            elif born_ms(rec, props) < self.started_ms and self._already_committed(real, txid):
                log.info("transaction %s was committed before a restart: not committing again", txid)
            else:
                try:
                    conf = self.topics.config(real, create=True)
                    commits.append((real, qid % max(conf["write"], 1), rec, props))
                except QuiverError as exc:
                    log.warning("commit of %s impossible (%s): rolled back", txid, exc)
                    code = "R"
        self.resolved.add(txid, code)
        self.counters["txn_resolved"] += 1  # open half messages (/metrics): txn_half - txn_resolved
        ops.append((rec.queue_offset, txid, code))
        return result

    def _bad_property(self, remark: str) -> None:
        """A half message's property with system meaning is malformed: counted and logged; the
        caller uses its default (or rolls the transaction back)."""
        self.counters["bad_system_properties"] += 1
        log.warning("half message: %s", remark)

    def _commit(self, commits) -> list:
        touched = []
        for real, qid, rec, props in commits:
            for name in _REAL_DROP:
                props.pop(name, None)
            res = self.store.put_batch(real, qid, [rec.body], [format_properties(props)], [rec.flag],
                                       record.TX_COMMIT, rec.born_ts, rec.born_host, 0, rec.phys_offset,
                                       [rec.body_crc])
            check_stored(res, "transaction writes")
            touched.append((real, qid, res.end_offset))
        return touched

    def _write_ops(self, ops) -> list:
        if not ops:
            return []
        self.topics.config(OP_HALF_TOPIC, create=True, system=True, queues=1)
        bodies = [f"{qoff},".encode() for qoff, _, _ in ops]
        props = [format_properties(((TAGS, OP_TAG), (TRANSACTION_ID, txid), (TRAN_STATE, st)))
                 for _, txid, st in ops]
        res = self.store.put_batch(OP_HALF_TOPIC, 0, bodies, props, [0] * len(ops), 0, int(time.time() * 1000),
                                   self.store_host)
        check_stored(res, "transaction writes")
        return [(OP_HALF_TOPIC, 0, res.end_offset)]

    # ---- TRANSACTION_CHECK (from the txn-checker) ------------------------------------------

    def check(self, req) -> None:
        self.load()
        entries = req.args.entries  # quiver.wire.requests.TransactionCheck: (phys, qoff, "c" | "r" | "d")
        results: list = [None] * len(entries)
        reputs, discards, groups = [], [], {}
        for i, e in enumerate(entries):
            rec = self._half(e[0], e[1])
            if rec is None:
                results[i] = "missing"
                continue
            props = rec.properties()
            txid = props.get(TRANSACTION_ID, "")
            if txid in self.resolved or (born_ms(rec, props) < self.started_ms
                                         and self._resolve_if_committed(props, txid, rec)):
                results[i] = "resolved"
            elif e[2] == "d":
                discards.append((rec, props, txid))
                results[i] = "discarded"
            elif e[2] == "r":
                reputs.append((rec, props, 0))
                results[i] = "requeued"
            else:
                groups.setdefault(props.get(PGROUP, ""), []).append((i, rec, props))
        for group, items in groups.items():
            pushed = self._push_check(group, items)
            for i, rec, props in items:
                reputs.append((rec, props, 1 if pushed else 0))
                results[i] = "checked" if pushed else "no_producer"
        touched = self._reput(reputs) + self._discard(discards)
        c = self.counters
        c["txn_checked"] += sum(r == "checked" for r in results)
        c["txn_discarded"] += len(discards)
        self.commit.answer(req, TransactionCheckReply(results=results), touched)

    def _resolve_if_committed(self, props, txid, rec) -> bool:
        if not self._already_committed(props.get(REAL_TOPIC, ""), txid):
            return False
        self.resolved.add(txid, "C")
        self.counters["txn_resolved"] += 1
        self._write_ops([(rec.queue_offset, txid, "C")])
        return True

    def _push_check(self, group: str, items) -> bool:
        members = list(self.clients.producers.get(group, {}).values())
        if not members:
            return False
        ext = {"g": group, "e": [[rec.phys_offset, rec.queue_offset, props.get(TRANSACTION_ID, ""),
                                  props.get(REAL_TOPIC, ""), read_int(props, REAL_QID, 0), born_ms(rec, props),
                                  rec.store_ts, rec.flag, rec.props] for _, rec, props in items]}
        frames = protocol.request(RequestCode.CHECK_TRANSACTION_STATE, next_request_id(), ext,
                                  [rec.body for _, rec, _ in items])
        start = next(self._rr)
        for k in range(len(members)):
            info = members[(start + k) % len(members)]
            if self.push(info.identity, frames):
                return True
            log.info("producer %s of %s is gone: forgotten", info.client_id, group)
            self.clients.producers.get(group, {}).pop(info.client_id, None)
        return False

    def _reput(self, reputs) -> list:
        if not reputs:
            return []
        bodies, props_out, flags, crcs = [], [], [], []
        for rec, props, inc in reputs:
            props[CHECK_TIMES] = str(min(read_int(props, CHECK_TIMES, 0, self._bad_property) + inc, INT32_MAX))
            if read_int(props, PREPARED_QOFF, -1) < 0:  # absent (the first re-put) or malformed
                props[PREPARED_QOFF] = str(rec.queue_offset)
            if read_int(props, BORN_MS, -1) < 0:
                props[BORN_MS] = str(rec.born_ts)
            bodies.append(rec.body)
            props_out.append(format_properties(props))
            flags.append(rec.flag)
            crcs.append(rec.body_crc)
        res = self.store.put_batch(HALF_TOPIC, 0, bodies, props_out, flags, 0, int(time.time() * 1000),
                                   self.store_host, 0, 0, crcs)
        check_stored(res, "transaction writes")
        return [(HALF_TOPIC, 0, res.end_offset)]

    def _discard(self, discards) -> list:
        if not discards:
            return []
        self.topics.config(CHECK_MAX_TOPIC, create=True, system=True, queues=1)
        touched = []
        for rec, props, txid in discards:
            log.warning("transaction %s (topic %s, group %s) discarded to %s after %s checks", txid,
                        props.get(REAL_TOPIC), props.get(PGROUP), CHECK_MAX_TOPIC, props.get(CHECK_TIMES, "0"))
            res = self.store.put_batch(CHECK_MAX_TOPIC, 0, [rec.body], [rec.props], [rec.flag], 0, rec.born_ts,
                                       rec.born_host, 0, 0, [rec.body_crc])
            check_stored(res, "transaction writes")
            touched.append((CHECK_MAX_TOPIC, 0, res.end_offset))
            self.resolved.add(txid, "D")
            self.counters["txn_resolved"] += 1
        return touched + self._write_ops([(rec.queue_offset, txid, "D") for rec, _, txid in discards])

    # ---- admin ------------------------------------------------------------------------

    def list_open(self, req) -> None:
        self.load()
        limit = min(req.args.limit, 100_000)
        start = self.store.min_offset(HALF_TOPIC, 0)
        group_offs = [o for (g, t, q), o in self.metadata.offsets.items() if t == HALF_TOPIC and q == 0]
        if group_offs:
            start = max(start, min(group_offs))
        open_: dict[str, dict] = {}
        now = int(time.time() * 1000)
        off, scanned = start, 0
        while scanned < 200_000:
            res = self.store.get_messages(HALF_TOPIC, 0, off, 1024)
            if res.status is not GetStatus.FOUND:
                break
            for rec in record.decode_many(res.data):
                props = rec.properties()
                txid = props.get(TRANSACTION_ID, "")
                if txid in self.resolved:
                    continue
                born = born_ms(rec, props)
                open_[txid] = {"transaction_id": txid, "topic": props.get(REAL_TOPIC), "group": props.get(PGROUP),
                               "age_ms": now - born, "checks": read_int(props, CHECK_TIMES, 0, self._bad_property),
                               "half_offset": rec.queue_offset,
                               "first_offset": read_int(props, PREPARED_QOFF, rec.queue_offset, self._bad_property),
                               "keys": props.get(KEYS, "")}
            scanned += res.count
            off = res.next_offset
        rows = sorted(open_.values(), key=lambda r: -r["age_ms"])[:limit]
        req.reply(ResponseCode.SUCCESS, "", TransactionListReply(open=rows, count=len(open_), resolved=len(self.resolved)))


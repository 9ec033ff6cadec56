"""The broker's Prometheus metrics (RocketMQ 5's set where it has one, prefixed quiver_).

Two kinds of reads, neither on the send or pull path:
- counters (traffic.py, the Service's counters and request latency, the store's
  flush histogram) are copied at scrape time on the HTTP thread;
- gauges that need the store or the group tables (consumer lag, disk, offsets,
  replication) are computed by `sample_step`, a periodic step on the
  service thread like any other, every SAMPLE_INTERVAL_S; a scrape reads the
  last sample, replaced whole (one reference), so it is never half-built.

Lag follows `GET_CONSUME_STATS` (consume_stats.py): every read queue of every
topic a group has an offset for or subscribes to, lag = max offset - consumer
offset (0 when none). Lag in seconds is the age of the first unconsumed
message (now - its store time), read for at most LAG_READS_PER_SAMPLE queues.
"""

import time

from quiver.runtime.histogram import MAX_SERIES, Histogram, snapshot
from quiver.runtime.metrics import ServiceCollector, counter, gauge, histogram
from quiver.wire import record
from quiver.wire.codes import RequestCode

from .store import GetStatus

SAMPLE_INTERVAL_S = 2.0
LAG_READS_PER_SAMPLE = 1000
SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)


class BrokerMetrics(ServiceCollector):
    """`identity`: (broker name, cluster, advertised address); the rest are the App's parts."""

    def __init__(self, service, identity, store, topics, metadata, clients, puller, traffic, ha):
        super().__init__(service)
        self.identity = identity
        self.store = store
        self.topics = topics
        self.metadata = metadata
        self.clients = clients
        self.puller = puller
        self.traffic = traffic
        self.ha = ha
        self.sample: dict = {}

    def sections(self) -> list:
        return [self._traffic, self._latency, self._events, self._sampled]

    # ---- service thread --------------------------------------------------------------------

    def sample_step(self) -> dict:
        """Compute the gauges (service thread); returns the new sample."""
        st = self.store.stats()
        counts = self.service.counters
        sample = {"lag": self._lag_rows(), "store": st, "topics": len(self.topics), "ha": self.ha.status(),
                  "half_open": max(0, counts["txn_half"] - counts["txn_resolved"]), "at": time.time()}
        self.sample = sample
        return sample

    def _lag_rows(self) -> list[tuple]:
        """(group, topic, queue id, lag messages, lag seconds or None) per queue."""
        by_group: dict[str, dict[tuple[str, int], int]] = {}
        for (group, topic, qid), off in self.metadata.offsets.items():
            by_group.setdefault(group, {})[(topic, qid)] = off
        for group, members in self.clients.consumers.items():
            by_group.setdefault(group, {})
        rows, reads, now_ms = [], LAG_READS_PER_SAMPLE, int(time.time() * 1000)
        for group in sorted(by_group):
            offsets = by_group[group]
            topics = {t for t, _ in offsets}
            for info in self.clients.consumers.get(group, {}).values():
                topics.update(info.subscriptions)
            for topic in sorted(topics):
                conf = self.topics.get(topic)
                for qid in range(conf["read"] if conf else 0):
                    consumer = offsets.get((topic, qid)) or 0
                    lag = max(0, self.store.max_offset(topic, qid) - consumer)
                    age = 0.0 if not lag else None
                    if lag and reads > 0:
                        reads -= 1
                        age = self._age_s(topic, qid, consumer, now_ms)
                    rows.append((group, topic, qid, lag, age))
                    if len(rows) >= MAX_SERIES:
                        return rows
        return rows

    def _age_s(self, topic: str, qid: int, offset: int, now_ms: int) -> float | None:
        try:
            res = self.store.get_messages(topic, qid, offset, 1, None, 1 << 22)
            if res.status is not GetStatus.FOUND or not res.count:
                return None
            recs = record.decode_many(res.data)
        except Exception:  # an expired or unreadable slot: no age to show
            return None
        return max(0.0, (now_ms - recs[0].store_ts) / 1000) if recs else None

    # ---- scrape thread ---------------------------------------------------------------------

    def _traffic(self):
        t = self.traffic
        yield counter("quiver_messages_in_total", "messages stored, by topic (as stored: delayed messages under "
                      "the schedule topic)", ("topic",), sorted(snapshot(t.in_msgs).items()))
        yield counter("quiver_throughput_in_bytes_total", "message body bytes stored, by topic", ("topic",),
                      sorted(snapshot(t.in_bytes).items()))
        yield counter("quiver_messages_out_total", "messages pulled, by topic and consumer group",
                      ("topic", "consumer_group"), sorted(snapshot(t.out_msgs).items()))
        yield counter("quiver_throughput_out_bytes_total", "record bytes pulled, by topic and consumer group",
                      ("topic", "consumer_group"), sorted(snapshot(t.out_bytes).items()))

    def _latency(self):
        latency = snapshot(self.service.request_stats.latency)
        send = Histogram()
        for code in SEND_CODES:
            if code in latency:
                send = send.merged(latency[code])
        yield histogram("quiver_send_latency_seconds", "send request received -> SEND_OK reply (with sync flush "
                        "or a SYNC_MASTER: after the flush or the slave's ack)", rows=[((), send)])
        yield histogram("quiver_pull_latency_seconds", "pull request received -> reply, long-poll wait included",
                        rows=[((), latency.get(RequestCode.PULL_MESSAGE, Histogram()))])
        yield histogram("quiver_flush_latency_seconds", "CommitLog fsync time of a flush that synced new bytes",
                        rows=[((), self.store.flush_seconds)])

    def _events(self):
        c = snapshot(self.service.counters)
        for name, doc, key in (
                ("quiver_send_to_dlq_messages_total", "messages moved to a dead-letter topic", "dlq_messages"),
                ("quiver_retry_messages_total", "messages sent back for retry", "retry_messages"),
                ("quiver_transaction_half_total", "half (prepared) messages stored", "txn_half"),
                ("quiver_transaction_commit_total", "transactions committed", "txn_commit"),
                ("quiver_transaction_rollback_total", "transactions rolled back", "txn_rollback"),
                ("quiver_transaction_checks_total", "transaction checks pushed to producers", "txn_checked")):
            yield counter(name, doc, rows=[((), c.get(key, 0))])

    def _sampled(self):
        s = self.sample
        if not s:
            return
        name, cluster, addr = self.identity
        yield gauge("quiver_broker_info", "1, labelled with the broker's name, cluster and role",
                    ("broker", "cluster", "role"), [((name, cluster, _role(s["ha"])), 1)])
        lag = s["lag"]
        keys = ("consumer_group", "topic", "queue_id")
        yield gauge("quiver_consumer_lag_messages", "messages stored but not yet consumed by the group", keys,
                    [((g, t, q), n) for g, t, q, n, _ in lag])
        yield gauge("quiver_consumer_lag_seconds", "age of the group's first unconsumed message (0: none)", keys,
                    [((g, t, q), a) for g, t, q, _, a in lag if a is not None])
        st = s["store"]
        for metric, doc, value in (
                ("quiver_held_pulls", "pulls held (long polling) waiting for messages",
                 sum(map(len, snapshot(self.puller.held).values()))),  # now, not sampled: lists only grow or go
                ("quiver_topics", "topics on this broker", s["topics"]),
                ("quiver_storage_disk_ratio", "used fraction of the store's disk", st.get("disk_ratio", 0.0)),
                ("quiver_storage_free_bytes", "free bytes on the store's disk", st.get("disk_free_bytes", 0)),
                ("quiver_commitlog_max_offset", "CommitLog end (bytes)", st.get("max_phys_offset", 0)),
                ("quiver_commitlog_min_offset", "CommitLog start, after retention (bytes)",
                 st.get("min_phys_offset", 0)),
                ("quiver_commitlog_flush_behind_bytes", "CommitLog bytes written, not yet fsynced",
                 max(0, st.get("max_phys_offset", 0) - st.get("flushed_offset", 0))),
                ("quiver_half_messages", "half messages stored and not yet resolved since the broker started",
                 s["half_open"])):
            yield gauge(metric, doc, rows=[((), value)])
        yield from _ha_families(s["ha"], addr)


def _role(ha: dict) -> str:
    role = ha.get("role")
    if role in ("master", "slave", "none"):
        return role
    return "slave" if "master_ha" in ha else "master"


def _ha_families(ha: dict, addr: str):
    """Replication lag, per slave on a master (from its acks), of this broker on a slave."""
    lag_bytes, lag_s = [], []
    for link in ha.get("slaves") or []:
        lag_bytes.append((link.get("addr", "?"), link.get("lag_bytes", 0)))
        if link.get("lag_ms") is not None:
            lag_s.append((link.get("addr", "?"), link["lag_ms"] / 1000))
    if "master_ha" in ha and ha.get("lag_bytes") is not None:
        lag_bytes.append((addr, ha["lag_bytes"]))
    yield gauge("quiver_ha_lag_bytes", "CommitLog bytes a slave is behind its master", ("slave",), lag_bytes)
    yield gauge("quiver_ha_lag_seconds", "how long ago the master stored the oldest byte a slave has not acked",
                ("slave",), lag_s)


def collector(app) -> BrokerMetrics:
    """What `python -m quiver_broker --metrics-listen` serves; its sample step runs on the
    service thread from now on (call before the loop runs, or on that thread)."""
    c = app.config
    m = BrokerMetrics(app.service, (c.name, c.cluster, c.advertised), app.store, app.topics, app.metadata,
                      app.clients, app.puller, app.traffic, app.ha)
    app.service.every("metrics_sample", SAMPLE_INTERVAL_S, m.sample_step, first_delay_s=0.0)
    return m

"""The broker's Prometheus metrics (RocketMQ 5's and rocketmq-exporter's set where they have
one, prefixed quiver_).

Two kinds of reads, neither on the send or pull path:
- counters (traffic.py, the Service's counters and request latency, the store's
  flush histogram) are copied at scrape time on the HTTP thread;
- gauges that need the store or the group tables (consumer lag and offsets, topic
  offsets, DLQ depth, consumers online, disk, replication) are computed by `sample_step`
  (metrics_sample.py), a periodic step on the service thread like any other, every
  SAMPLE_INTERVAL_S; a scrape reads the last sample, replaced whole (one reference), so it
  is never half-built.

Series are per consumer group and topic (lag, consumer offset) or per topic (topic offsets);
`per_queue` (--metrics-per-queue) adds a queue_id label to those, one series per queue.
"""

import time

from quiver.runtime.histogram import Histogram, snapshot
from quiver.runtime.metrics import ServiceCollector, counter, gauge, histogram, named_counters
from quiver.wire.codes import RequestCode

from . import metrics_sample as ms
from .tiered import tiered_gauges

SAMPLE_INTERVAL_S = 2.0
SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)

# the broker's STATUS counters with a family of their own: (family, help, counter key)
EVENTS = (
    ("quiver_retry_messages_total", "messages sent back for retry", "retry_messages"),
    ("quiver_transaction_half_total", "half (prepared) messages stored", "txn_half"),
    ("quiver_transaction_commit_total", "transactions committed", "txn_commit"),
    ("quiver_transaction_rollback_total", "transactions rolled back", "txn_rollback"),
    ("quiver_transaction_checks_total", "transaction checks pushed to producers", "txn_checked"),
    ("quiver_pop_messages_total", "messages handed out by POP consumption", "popped_messages"),
    ("quiver_pop_acked_messages_total", "POP messages acked", "acked_messages"),
    ("quiver_held_pulls_denied_total", "pulls answered at once because too many were held", "held_pulls_denied"),
    ("quiver_ha_replicated_bytes_total", "CommitLog bytes this slave received from its master", "replicated_bytes"),
    ("quiver_ha_truncated_bytes_total", "CommitLog bytes this slave cut to follow a new master", "truncated_bytes"),
    ("quiver_trace_events_total", "trace events the broker recorded", "trace_events"),
    ("quiver_trace_put_failures_total", "trace event batches that could not be stored", "trace_put_failed"),
)
# names kept one release for dashboards built on them: (old name, new name)
DEPRECATED = (("quiver_commitlog_max_offset", "quiver_commitlog_max_offset_bytes"),
              ("quiver_commitlog_min_offset", "quiver_commitlog_min_offset_bytes"))


class BrokerMetrics(ServiceCollector):
    """`identity`: (broker name, cluster, advertised address); the rest are the App's parts."""

    claimed_events = frozenset({"trace_put_failed"})

    def __init__(self, service, identity, store, topics, metadata, clients, puller, traffic, ha,
                 per_queue: bool = False):
        super().__init__(service)
        self.identity = identity
        self.store = store
        self.topics = topics
        self.metadata = metadata
        self.clients = clients
        self.puller = puller
        self.traffic = traffic
        self.ha = ha
        self.per_queue = per_queue
        self.sample: dict = {}

    def sections(self) -> list:
        return [self._traffic, self._latency, self._events, self._sampled, self._groups]

    # ---- service thread --------------------------------------------------------------------

    def sample_step(self) -> dict:
        """Compute the gauges (service thread); returns the new sample."""
        st = self.store.stats()
        counts = self.service.counters
        by_group = ms.groups(self.metadata, self.clients)
        topic_rows = ms.topic_rows(self.store, self.topics)
        sample = {"queues": ms.queue_rows(self.store, self.topics, self.clients, by_group),
                  "online": ms.online(by_group, self.clients), "topic_queues": topic_rows,
                  "dlq": ms.dlq_depth(topic_rows), "store": st, "topics": len(self.topics),
                  "disk_full_ratio": getattr(getattr(self.store, "disk", None), "full_ratio", None),
                  "ha": self.ha.status(), "half_open": max(0, counts["txn_half"] - counts["txn_resolved"]),
                  "at": time.time()}
        self.sample = sample
        return sample

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
        yield from named_counters(EVENTS, c)
        dlq = snapshot(self.traffic.dlq)
        yield counter("quiver_send_to_dlq_messages_total", "messages moved to a dead-letter topic (%DLQ%group), "
                      "by consumer group", ("consumer_group",), sorted(dlq.items()))
        yield histogram("quiver_message_size_bytes", "body size of each message stored (every topic)",
                        rows=[((), self.traffic.sizes)])

    def _sampled(self):
        s = self.sample
        if not s:
            return
        name, cluster, addr = self.identity
        yield gauge("quiver_broker_info", "1, labelled with the broker's name, cluster and role",
                    ("broker", "cluster", "role"), [((name, cluster, _role(s["ha"])), 1)])
        st = s["store"]
        end, start = st.get("max_phys_offset", 0), st.get("min_phys_offset", 0)
        values = {"quiver_commitlog_max_offset_bytes": end, "quiver_commitlog_min_offset_bytes": start}
        for metric, doc, value in (
                ("quiver_held_pulls", "pulls held (long polling) waiting for messages",
                 sum(map(len, snapshot(self.puller.held).values()))),  # now, not sampled: lists only grow or go
                ("quiver_topics", "topics on this broker", s["topics"]),
                ("quiver_storage_disk_ratio", "used fraction of the store's disk", st.get("disk_ratio", 0.0)),
                ("quiver_storage_free_bytes", "free bytes on the store's disk", st.get("disk_free_bytes", 0)),
                ("quiver_storage_writes_refused", "1 while the disk guard refuses puts (disk full)",
                 int(bool(st.get("disk_full")))),
                ("quiver_commitlog_max_offset_bytes", "CommitLog end (its byte offset)", end),
                ("quiver_commitlog_min_offset_bytes", "CommitLog start after retention (its byte offset)", start),
                ("quiver_commitlog_flush_behind_bytes", "CommitLog bytes written, not yet fsynced",
                 max(0, end - st.get("flushed_offset", 0))),
                ("quiver_half_messages", "half messages stored and not yet resolved since the broker started",
                 s["half_open"])):
            yield gauge(metric, doc, rows=[((), value)])
        if s["disk_full_ratio"] is not None:
            yield gauge("quiver_storage_disk_full_ratio", "used fraction of the disk above which puts are refused "
                        "(--disk-full-ratio)", rows=[((), s["disk_full_ratio"])])
        for old, new in DEPRECATED:
            yield gauge(old, f"deprecated, removed in the next release: {new}", rows=[((), values[new])])
        yield from _ha_families(s["ha"], addr)
        for metric, doc, value in tiered_gauges(st.get("tiered")):
            yield gauge(metric, doc, rows=[((), value)])

    def _groups(self):
        """Consumer groups and topics: lag, offsets, consumers online, dead letters stored."""
        s = self.sample
        if not s:
            return
        pq, rows, topic_rows = self.per_queue, s["queues"], s["topic_queues"]
        keys = ("consumer_group", "topic", "queue_id") if pq else ("consumer_group", "topic")
        yield gauge("quiver_consumer_lag_messages", "messages stored but not yet consumed by the group", keys,
                    ms.fold(rows, 2, pq, 4))
        yield gauge("quiver_consumer_lag_seconds", "age of the group's oldest unconsumed message (0: none)", keys,
                    ms.fold(rows, 2, pq, 5, max))
        yield gauge("quiver_consumer_offset", "the group's committed consume offset (summed over queues)", keys,
                    ms.fold(rows, 2, pq, 3))
        tkeys = ("topic", "queue_id") if pq else ("topic",)
        yield gauge("quiver_topic_max_offset", "messages ever stored in the topic: its queues' max offsets "
                    "summed", tkeys, ms.fold(topic_rows, 1, pq, 3))
        yield gauge("quiver_topic_min_offset", "its queues' min offsets (after retention) summed", tkeys,
                    ms.fold(topic_rows, 1, pq, 2))
        yield gauge("quiver_consumers_online", "consumers of the group heartbeating to this broker "
                    "(rocketmq-exporter's countOfOnlineConsumers)", ("consumer_group",), s["online"])
        yield gauge("quiver_dlq_messages", "messages stored in the group's dead-letter topic %DLQ%group",
                    ("consumer_group",), s["dlq"])


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
                      app.clients, app.puller, app.traffic, app.ha, per_queue=c.metrics_per_queue)
    app.service.every("metrics_sample", SAMPLE_INTERVAL_S, m.sample_step, first_delay_s=0.0)
    return m

"""Routing state of one name server: which broker serves which topic.

Owns the four RocketMQ tables (topic -> queue data per broker name, broker
name -> addresses by id, cluster -> broker names, broker address -> liveness
and filter servers) and their rules: QueueData is rewritten only when a
broker's data version changes, only the master (id 0) writes it, and a broker
name with no address left disappears from every topic. A route carries the
filter servers of its brokers (`filter_servers`) and every live one of their
clusters (`cluster_filter_servers`, for brokers that have none of their own).

Does not own the shape of a registration: its schema,
`quiver.wire.requests.RegisterBroker` (and `UnregisterBroker`), checks the whole
request before a handler runs, so a bad one changes nothing and leaves no
ghost broker; the table methods take only those decoded objects. Invariant
kept by every method: each address in a broker name's `addrs` is in `live`
under that name and id, so the expiry scan can reach (and drop) everything
registered. No sockets here.
"""

import time
from dataclasses import dataclass, field

from quiver.wire import replies
from quiver.wire.replies import BrokerData, ClusterData, QueueData, RegisterBrokerReply, RouteData
from quiver.wire.requests import DataVersion, RegisterBroker, TopicConfig, UnregisterBroker


@dataclass
class LiveBroker:
    cluster: str
    broker_name: str
    broker_id: int
    last_update: float
    data_version: DataVersion | None    # None: the broker sent none
    ha_addr: str = ""
    filter_servers: list = field(default_factory=list)


class RouteTable:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.topics: dict[str, dict[str, dict]] = {}
        self.brokers: dict[str, dict] = {}          # broker name -> {cluster, broker_name, addrs{id: addr}}
        self.clusters: dict[str, set[str]] = {}
        self.live: dict[str, LiveBroker] = {}       # broker addr -> liveness

    def register(self, reg: RegisterBroker) -> RegisterBrokerReply:
        """Record a decoded registration; returns the master's addresses for a slave."""
        name, addr = reg.broker_name, reg.broker_addr
        prev = self.live.get(addr)
        if prev is not None and (prev.broker_name != name or prev.cluster != reg.cluster):
            self._remove(prev.broker_name, addr)  # the address now serves another broker name
        data = self.brokers.get(name)
        if data is not None and data["cluster"] != reg.cluster:  # the broker name moved to another cluster
            self._leave_cluster(data["cluster"], name)
            data["cluster"] = reg.cluster
        self.clusters.setdefault(reg.cluster, set()).add(name)
        data = self.brokers.setdefault(name, {"cluster": reg.cluster, "broker_name": name, "addrs": {}})
        for bid, a in list(data["addrs"].items()):
            if a == addr and bid != reg.broker_id:  # re-registered under a new id (promotion)
                del data["addrs"][bid]
        prev = self.live.get(addr)
        changed = prev is None or data["addrs"].get(reg.broker_id) != addr or prev.data_version != reg.data_version
        data["addrs"][reg.broker_id] = addr
        self.live[addr] = LiveBroker(reg.cluster, name, reg.broker_id, self.clock(), reg.data_version,
                                     reg.ha_addr or "", list(reg.filter_servers))
        master_writes = reg.broker_id == 0 or 0 not in data["addrs"]
        if changed and master_writes:
            self._replace_queue_data(name, reg.topics)
        master = data["addrs"].get(0, "")
        return RegisterBrokerReply(master_addr=master, ha_addr=self.live[master].ha_addr if master in self.live else "")

    def _replace_queue_data(self, broker_name: str, topics: dict[str, TopicConfig]) -> None:
        for name in list(self.topics):
            if name not in topics:
                self._drop_queue_data(name, broker_name)
        for name, conf in topics.items():
            self.topics.setdefault(name, {})[broker_name] = {
                "broker_name": broker_name, "read": conf.read, "write": conf.write, "perm": conf.perm,
                "sysflag": conf.sysflag, "order": conf.order}

    def _drop_queue_data(self, topic: str, broker_name: str) -> None:
        per = self.topics.get(topic)
        if per is not None:
            per.pop(broker_name, None)
            if not per:
                del self.topics[topic]

    def _leave_cluster(self, cluster: str, broker_name: str) -> None:
        names = self.clusters.get(cluster)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self.clusters[cluster]

    def unregister(self, unreg: UnregisterBroker) -> bool:
        """Drop a decoded unregistration's address; False if it was not registered so."""
        return self._remove(unreg.broker_name, unreg.broker_addr, unreg.broker_id)

    def _remove(self, broker_name: str, addr: str, broker_id: int | None = None) -> bool:
        live = self.live.get(addr)
        if live is None or live.broker_name != broker_name or broker_id not in (None, live.broker_id):
            return False  # not registered under that name (and id): another broker's entry stays
        del self.live[addr]
        data = self.brokers.get(broker_name)
        if data is not None:
            for bid, a in list(data["addrs"].items()):
                if a == addr:
                    del data["addrs"][bid]
            if not data["addrs"]:
                del self.brokers[broker_name]
                self._leave_cluster(data["cluster"], broker_name)
                for topic in list(self.topics):
                    self._drop_queue_data(topic, broker_name)
        return True

    def expire(self, expiry_s: float) -> list[str]:
        """Drop brokers silent longer than expiry; returns their addresses."""
        now = self.clock()
        gone = [addr for addr, lb in self.live.items() if now - lb.last_update > expiry_s]
        for addr in gone:
            self._remove(self.live[addr].broker_name, addr)
        return gone

    def route(self, topic: str) -> RouteData | None:
        per = self.topics.get(topic)
        if not per:
            return None
        names = sorted(per)
        brokers = [self._broker_view(n) for n in names if n in self.brokers]
        filters = {}
        for b in brokers:
            for addr in b.addrs.values():
                lb = self.live.get(addr)
                if lb and lb.filter_servers:
                    filters[addr] = lb.filter_servers
        queues = [QueueData(**per[n]) for n in names]
        return RouteData(topic=topic, queues=queues, brokers=brokers, filter_servers=filters,
                         cluster_filter_servers=self.cluster_filter_servers({b.cluster for b in brokers}))

    def cluster_filter_servers(self, clusters: set[str]) -> list[str]:
        """Every live filter server of these clusters: any of them serves any of their brokers, so a
        topic whose brokers have none of their own is still readable with SQL92."""
        return sorted({f for lb in self.live.values() if lb.cluster in clusters for f in lb.filter_servers})

    def _broker_view(self, name: str) -> BrokerData:
        data = self.brokers[name]
        return BrokerData(cluster=data["cluster"], broker_name=name, addrs=dict(sorted(data["addrs"].items())))

    def cluster_info(self) -> ClusterData:
        now = self.clock()
        return ClusterData(
            brokers={n: self._broker_view(n) for n in sorted(self.brokers)},
            clusters={c: sorted(names) for c, names in sorted(self.clusters.items())},
            live={addr: replies.LiveBroker(broker_name=lb.broker_name, broker_id=lb.broker_id,
                                           age_ms=int((now - lb.last_update) * 1000),
                                           filter_servers=lb.filter_servers)
                  for addr, lb in sorted(self.live.items())})

    def topic_list(self) -> list[str]:
        return sorted(self.topics)

"""Routing state of one name server: which broker serves which topic.

Owns the four RocketMQ tables (topic -> queue data per broker name, broker
name -> addresses by id, cluster -> broker names, broker address -> liveness
and filter servers) and their rules: QueueData is rewritten only when a
broker's data version changes, only the master (id 0) writes it, and a broker
name with no address left disappears from every topic. No sockets here.
"""

import time
from dataclasses import dataclass, field


@dataclass
class LiveBroker:
    cluster: str
    broker_name: str
    broker_id: int
    last_update: float
    data_version: dict
    ha_addr: str = ""
    filter_servers: list = field(default_factory=list)


class RouteTable:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.topics: dict[str, dict[str, dict]] = {}
        self.brokers: dict[str, dict] = {}          # broker name -> {cluster, broker_name, addrs{id: addr}}
        self.clusters: dict[str, set[str]] = {}
        self.live: dict[str, LiveBroker] = {}       # broker addr -> liveness

    def register(self, cluster: str, broker_name: str, addr: str, broker_id: int, data_version: dict,
                 topics: dict, filter_servers: list, ha_addr: str = "") -> dict:
        """Record a registration; returns the master's addresses for a slave."""
        self.clusters.setdefault(cluster, set()).add(broker_name)
        data = self.brokers.setdefault(broker_name, {"cluster": cluster, "broker_name": broker_name, "addrs": {}})
        for bid, a in list(data["addrs"].items()):
            if a == addr and bid != broker_id:  # re-registered under a new id (promotion)
                del data["addrs"][bid]
        first = addr not in self.live or data["addrs"].get(broker_id) != addr
        data["addrs"][broker_id] = addr
        prev = self.live.get(addr)
        changed = first or prev is None or prev.data_version != data_version
        self.live[addr] = LiveBroker(cluster, broker_name, broker_id, self.clock(), data_version,
                                     ha_addr, list(filter_servers or []))
        master_writes = broker_id == 0 or 0 not in data["addrs"]
        if changed and master_writes:
            self._replace_queue_data(broker_name, topics)
        master = data["addrs"].get(0, "")
        return {"master_addr": master, "ha_addr": self.live[master].ha_addr if master in self.live else ""}

    def _replace_queue_data(self, broker_name: str, topics: dict) -> None:
        for name in list(self.topics):
            if name not in topics:
                self._drop_queue_data(name, broker_name)
        for name, conf in topics.items():
            self.topics.setdefault(name, {})[broker_name] = {
                "broker_name": broker_name,
                "read": int(conf.get("read", 4)), "write": int(conf.get("write", 4)),
                "perm": int(conf.get("perm", 6)), "sysflag": int(conf.get("sysflag", 0)),
                "order": bool(conf.get("order", False)),
            }

    def _drop_queue_data(self, topic: str, broker_name: str) -> None:
        per = self.topics.get(topic)
        if per is not None:
            per.pop(broker_name, None)
            if not per:
                del self.topics[topic]

    def unregister(self, cluster: str, broker_name: str, addr: str, broker_id: int | None = None) -> bool:
        live = self.live.pop(addr, None)
        data = self.brokers.get(broker_name)
        if data is not None:
            for bid, a in list(data["addrs"].items()):
                if a == addr and (broker_id is None or bid == broker_id):
                    del data["addrs"][bid]
            if not data["addrs"]:
                del self.brokers[broker_name]
                names = self.clusters.get(data["cluster"])
                if names is not None:
                    names.discard(broker_name)
                    if not names:
                        del self.clusters[data["cluster"]]
                for topic in list(self.topics):
                    self._drop_queue_data(topic, broker_name)
        return live is not None

    def expire(self, expiry_s: float) -> list[str]:
        """Drop brokers silent longer than expiry; returns their addresses."""
        now = self.clock()
        gone = [addr for addr, lb in self.live.items() if now - lb.last_update > expiry_s]
        for addr in gone:
            lb = self.live[addr]
            self.unregister(lb.cluster, lb.broker_name, addr)
        return gone

    def route(self, topic: str) -> dict | None:
        per = self.topics.get(topic)
        if not per:
            return None
        names = sorted(per)
        brokers = [self._broker_view(n) for n in names if n in self.brokers]
        filters = {}
        for b in brokers:
            for addr in b["addrs"].values():
                lb = self.live.get(addr)
                if lb and lb.filter_servers:
                    filters[addr] = lb.filter_servers
        return {"topic": topic, "queues": [per[n] for n in names], "brokers": brokers, "filter_servers": filters}

    def _broker_view(self, name: str) -> dict:
        data = self.brokers[name]
        return {"cluster": data["cluster"], "broker_name": name,
                "addrs": {str(k): v for k, v in sorted(data["addrs"].items())}}

    def cluster_info(self) -> dict:
        now = self.clock()
        return {
            "brokers": {n: self._broker_view(n) for n in sorted(self.brokers)},
            "clusters": {c: sorted(names) for c, names in sorted(self.clusters.items())},
            "live": {addr: {"broker_name": lb.broker_name, "broker_id": lb.broker_id,
                            "age_ms": int((now - lb.last_update) * 1000),
                            "filter_servers": lb.filter_servers}
                     for addr, lb in sorted(self.live.items())},
        }

    def topic_list(self) -> list[str]:
        return sorted(self.topics)

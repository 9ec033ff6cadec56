"""Routing state of one name server: which broker serves which topic.

Owns the four RocketMQ tables (topic -> queue data per broker name, broker
name -> addresses by id, cluster -> broker names, broker address -> liveness
and filter servers) and their rules: QueueData is rewritten only when a
broker's data version changes, only the master (id 0) writes it, and a broker
name with no address left disappears from every topic.

It also owns the shape of a registration: `validate_registration` checks a
whole REGISTER_BROKER (and `validate_unregistration` an UNREGISTER_BROKER)
before any table is touched, so a bad one changes nothing and leaves no ghost
broker; the table methods take only the validated objects. Invariant kept by
every method: each address in a broker name's `addrs` is in `live` under that
name and id, so the expiry scan can reach (and drop) everything registered.
No sockets here.
"""

import reprlib
import time
from dataclasses import dataclass, field

from quiver.errors import InvalidParameterError
from quiver.names import is_valid_addr, is_valid_broker_name, is_valid_cluster, topic_problem

MAX_FILTER_SERVERS = 1024
MAX_BROKER_ID = 2 ** 31 - 1
MAX_QUEUES = 1024
MAX_INT64 = 2 ** 63 - 1
DATA_VERSION_KEYS = frozenset({"state", "ts", "counter"})
TOPIC_DEFAULTS = {"read": 4, "write": 4, "perm": 6, "sysflag": 0, "order": False}
_NAME_RULE = "1..127 ASCII letters, digits and '%|_-.' (not '.' or '..')"
_ADDR_RULE = "host:port (hostname, IPv4 or [IPv6]; port 1..65535)"
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 64, 64


@dataclass(frozen=True)
class Registration:
    """A REGISTER_BROKER whose every field has been checked (see validate_registration)."""
    cluster: str
    broker_name: str
    broker_addr: str
    broker_id: int
    data_version: dict              # a subset of DATA_VERSION_KEYS -> int
    topics: dict                    # topic -> {"read", "write", "perm", "sysflag", "order"}
    filter_servers: tuple = ()      # host:port strings
    ha_addr: str = ""               # host:port or ""


@dataclass(frozen=True)
class Unregistration:
    cluster: str
    broker_name: str
    broker_addr: str
    broker_id: int | None = None    # None: whatever id the address is registered under


def validate_registration(ext: dict) -> Registration:
    """The whole REGISTER_BROKER checked, or InvalidParameterError naming the field."""
    f = _Fields("REGISTER_BROKER", ext)
    return Registration(
        cluster=f.name("cluster", is_valid_cluster), broker_name=f.name("broker_name", is_valid_broker_name),
        broker_addr=f.addr("broker_addr"), broker_id=f.int("broker_id", 0, MAX_BROKER_ID, default=0),
        data_version=f.data_version("data_version"),
        topics=f.topics("topics"), filter_servers=f.addr_list("filter_servers", MAX_FILTER_SERVERS),
        ha_addr=f.addr("ha_addr", optional=True))


def validate_unregistration(ext: dict) -> Unregistration:
    f = _Fields("UNREGISTER_BROKER", ext)
    return Unregistration(cluster=f.name("cluster", is_valid_cluster),
                          broker_name=f.name("broker_name", is_valid_broker_name),
                          broker_addr=f.addr("broker_addr"),
                          broker_id=f.int("broker_id", 0, MAX_BROKER_ID, default=None))


def _show(value) -> str:
    # bounded (a 1000-deep list has no repr), ASCII only (no control or right-to-left characters)
    text = _REPR.repr(value).encode("ascii", "backslashreplace").decode()
    text = text if len(text) <= 64 else text[:61] + "..."
    return f"{text} ({type(value).__name__})"


class _Fields:
    """Reads one request's `ext`; every failure names the request, the field, what was expected and what came."""

    def __init__(self, request: str, ext: dict):
        self.request, self.ext = request, ext

    def fail(self, name: str, expected: str, got) -> InvalidParameterError:
        return InvalidParameterError(f"{self.request} field '{name}': expected {expected}, got {_show(got)}")

    def name(self, name: str, valid) -> str:
        value = self.ext.get(name)
        if not valid(value):
            raise self.fail(name, _NAME_RULE, value)
        return value

    def addr(self, name: str, optional: bool = False) -> str:
        value = self.ext.get(name)
        if optional and value in (None, ""):
            return ""
        if not is_valid_addr(value):
            raise self.fail(name, _ADDR_RULE, value)
        return value

    def int(self, name: str, lo: int, hi: int, default):
        value = self.ext.get(name)
        if value is None:
            return default
        if type(value) is not int or not lo <= value <= hi:
            raise self.fail(name, f"an integer {lo}..{hi}", value)
        return value

    def addr_list(self, name: str, cap: int) -> tuple:
        value = self.ext.get(name)
        if value is None:
            return ()
        if not isinstance(value, list) or len(value) > cap:
            raise self.fail(name, f"a list of at most {cap} host:port strings", value)
        for i, item in enumerate(value):
            if not is_valid_addr(item):
                raise self.fail(f"{name}[{i}]", _ADDR_RULE, item)
        return tuple(value)

    def data_version(self, name: str) -> dict:
        value = self.ext.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict) or not set(value) <= DATA_VERSION_KEYS:
            raise self.fail(name, f"a map with keys among {sorted(DATA_VERSION_KEYS)}", value)
        for key, v in value.items():
            if type(v) is not int or not 0 <= v <= MAX_INT64:
                raise self.fail(f"{name}.{key}", f"an integer 0..{MAX_INT64}", v)
        return dict(value)

    def topics(self, name: str) -> dict:
        value = self.ext.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(name, "a map of topic name -> config map", value)
        out = {}
        for topic, conf in value.items():
            problem = topic_problem(topic)
            if problem is not None:
                raise self.fail(name, f"topic names by the topic rules ({problem})", topic)
            out[topic] = self.topic_config(f"{name}.{topic}", conf)  # a checked name has no '.'
        return out

    def topic_config(self, name: str, conf) -> dict:
        if not isinstance(conf, dict):
            raise self.fail(name, "a config map {read, write, perm, sysflag, order}", conf)
        out = dict(TOPIC_DEFAULTS)
        for key, lo, hi in (("read", 1, MAX_QUEUES), ("write", 1, MAX_QUEUES), ("perm", 0, 15),
                            ("sysflag", 0, MAX_BROKER_ID)):
            v = conf.get(key, out[key])
            if type(v) is not int or not lo <= v <= hi:
                raise self.fail(f"{name}.{key}", f"an integer {lo}..{hi}", v)
            out[key] = v
        order = conf.get("order", False)
        if type(order) is not bool:
            raise self.fail(f"{name}.order", "true or false", order)
        out["order"] = order
        return out  # other keys are not stored, so not checked


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

    def register(self, reg: Registration) -> dict:
        """Record a validated registration; returns the master's addresses for a slave."""
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
                                     reg.ha_addr, list(reg.filter_servers))
        master_writes = reg.broker_id == 0 or 0 not in data["addrs"]
        if changed and master_writes:
            self._replace_queue_data(name, reg.topics)
        master = data["addrs"].get(0, "")
        return {"master_addr": master, "ha_addr": self.live[master].ha_addr if master in self.live else ""}

    def _replace_queue_data(self, broker_name: str, topics: dict) -> None:
        for name in list(self.topics):
            if name not in topics:
                self._drop_queue_data(name, broker_name)
        for name, conf in topics.items():
            self.topics.setdefault(name, {})[broker_name] = {"broker_name": broker_name, **conf}

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

    def unregister(self, unreg: Unregistration) -> bool:
        """Drop a validated unregistration's address; False if it was not registered so."""
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

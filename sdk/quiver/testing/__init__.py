"""An in-process Quiver for unit tests: the real services, no processes, no sockets.

Owns `stub_cluster()`, on the fake network of quiver.testing.network (address ->
in-process Service, identity -> client, and the transport clients use on it): a name server and brokers
running their real `App` (handler tables, `Service.handle`, a `MessageStore` in
a temp dir) on threads, only the ZeroMQ sockets replaced (dramatiq's StubBroker
pattern, with the real broker)::

    with stub_cluster(brokers=2) as cluster:
        cluster.admin().create_topic("Orders", queues=2)
        with cluster.client(Producer, "pg") as p:
            p.send(Message("Orders", b"o-1"))
        with cluster.client(PullConsumer, "cg", consume_from="first") as c:
            c.subscribe("Orders")
            assert wait_until(lambda: c.poll(0.1))

    Producer -> FakeTransport --frames--> _Router -> Service inbox -> Service.handle -> handler
             <- its IO thread <--frames--  send_multipart by identity  <- req.reply / push

Faults: `disconnect(addr)` (a dead peer: waiting requests fail, new ones fail
fast, late replies are lost), `hold`/`release(addr)` (requests wait: one
deterministically in flight), `fail(code, reply_code)` (answered before the
service sees it); `count(code, addr)` says what was sent. Not simulated: the
scheduler, txn-checker and filter (tests/e2e runs them), replication, socket limits.

A client made by `cluster.client(...)` or passed to `attach()` gets the
network's FakeTransport through its `_transport_factory`; a service gets its
router through `Service.use_socket`. No service package is imported until a
cluster is made.
"""

import contextlib
import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

from quiver.wire import requests as rq
from quiver.errors import QuiverError
from quiver.testing.network import (FAKE_HOST, FIRST_BROKER_PORT, NAMESRV_PORT, C, FakeNetwork, FakeTransport, Fault,
                                    attach, wait_until)

if TYPE_CHECKING:
    from quiver.client.admin import Admin

__all__ = ["FakeNetwork", "FakeTransport", "FakeCluster", "Fault", "stub_cluster", "attach", "wait_until"]


# ---- the cluster -------------------------------------------------------------------------------


class FakeCluster(contextlib.AbstractContextManager["FakeCluster"]):
    """A name server and brokers (their real Apps) on a FakeNetwork, data in a temp dir;
    `stub_cluster()` makes one. RuntimeError if the brokers do not register in time.

        with stub_cluster(brokers=2) as cluster:
            cluster.admin().create_topic("Orders")
            with cluster.client(Producer, "pg") as p:
                p.send(Message("Orders", b"o-1"))
    """

    def __init__(self, brokers: int = 1, data_dir: str | None = None, broker_options: dict[str, Any] | None = None,
                 namesrv_options: dict[str, Any] | None = None, ready_timeout_s: float = 10.0) -> None:
        self.network = FakeNetwork()
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="quiver-stub-")
        self.namesrv = f"{FAKE_HOST}:{NAMESRV_PORT}"
        self.brokers: dict[str, Any] = {}       # broker name -> its quiver_broker.app.App
        self.broker_addrs: dict[str, str] = {}  # broker name -> address
        try:
            self._start_namesrv(namesrv_options or {})
            for i in range(brokers):
                self._start_broker(f"broker-{chr(ord('a') + i)}", FIRST_BROKER_PORT + 2 * i, broker_options or {})
            self.wait_registered(ready_timeout_s)
        except BaseException:
            self.close()
            raise

    def _start_namesrv(self, options: dict[str, Any]) -> None:
        from quiver_namesrv.app import App
        from quiver_namesrv.config import Config
        app = App(Config(**{"listen": self.namesrv, **options}))
        self.network.plug(app.service, self.namesrv)
        self.network.run(app.run, app.shutdown, "fake-namesrv")

    def _start_broker(self, name: str, port: int, options: dict[str, Any]) -> None:
        from quiver_broker.app import App
        from quiver_broker.config import Config
        addr = f"{FAKE_HOST}:{port}"
        config = Config(**{"listen": addr, "advertise": addr, "namesrv": self.namesrv, "broker_name": name,
                           "data_dir": os.path.join(self.data_dir, "broker"), "segment_bytes": 64 << 20,
                           "index_slots": 1 << 16, "index_entries": 1 << 18, **options})
        if config.is_slave or config.ha_role == "SYNC_MASTER":
            raise ValueError("stub brokers are ASYNC_MASTERs: replication is not simulated")
        app = App(config, transport=self.network.transport(f"broker-{name}"))  # registrations go over the fake network
        app.ha.start = lambda: None  # no HA socket: there are no slaves
        self.network.plug(app.service, addr)
        self.network.run(app.run, app.service.stop, f"fake-{name}")
        self.brokers[name] = app
        self.broker_addrs[name] = addr

    def wait_registered(self, timeout_s: float = 10.0) -> None:
        """Until the name server lists every broker as live."""
        def registered() -> bool:
            try:
                env = self.network.call(self.namesrv, rq.GetClusterInfo())
            except QuiverError:
                return False
            return set(self.broker_addrs.values()) <= set(rq.ClusterReply.decode(env.ext).cluster.live)
        if not wait_until(registered, timeout_s):
            raise RuntimeError(f"stub brokers did not register with the name server in {timeout_s} s")

    def broker(self, name: str = "broker-a") -> Any:
        """The broker's App: `.store` (MessageStore), `.metadata`, `.service.counters` ..."""
        return self.brokers[name]

    def client(self, cls: type[C], *args: Any, **kw: Any) -> C:
        """`cls(*args, namesrv=<this cluster>, **kw)` attached to the network (Admin is started,
        as Admin always is; the others start on start() or `with`)."""
        kw.setdefault("namesrv", self.namesrv)
        obj = cls.__new__(cls)
        attach(obj, self.network)
        cls.__init__(obj, *args, **kw)
        return obj

    def attach(self, client: C) -> C:
        """`attach(client, cluster.network)`: `client` uses this cluster from its next start()."""
        return attach(client, self.network)

    def admin(self, **kw: Any) -> "Admin":
        """An Admin of this cluster (started, as Admin always is); `kw` as Admin's."""
        from quiver.client.admin import Admin
        return self.client(Admin, **kw)

    def close(self) -> None:
        """Stop the name server and brokers; the temp data dir (if this cluster made it) is removed."""
        self.network.close()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        self.close()


def stub_cluster(brokers: int = 1, data_dir: str | None = None, broker_options: dict[str, Any] | None = None,
                 namesrv_options: dict[str, Any] | None = None) -> FakeCluster:
    """A running FakeCluster; use it as `with stub_cluster() as cluster:` (stopped, its temp
    dir removed, after the block). `broker_options` / `namesrv_options` are Config fields of
    quiver_broker / quiver_namesrv, e.g. {"auto_create_topics": False, "flush": "sync"}."""
    return FakeCluster(brokers, data_dir, broker_options, namesrv_options)

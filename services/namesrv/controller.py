"""The failover controller inside a name server started with --controller.

Owns the Raft node (pysyncobj: a maintained Raft library from the registry,
pure Python, with a journal file and snapshots for restarts), the three
controller requests and the leader's scan for silent masters. The rules are
controller_state's; this module only decides when to propose them.

    broker --CONTROLLER_HEARTBEAT--> every controller: liveness (memory)
                                     the leader answers the assignment, the others
                                     SERVICE_NOT_AVAILABLE naming the leader
    leader scan (--controller-scan-interval-ms): master silent > timeout
        -> pick_master -> Raft elect(epoch CAS) -> the next heartbeats carry it
    master --CONTROLLER_ALTER_SYNC_STATE_SET--> leader -> Raft alter(epoch CAS)

pysyncobj ticks on the service thread (autoTick off): its callbacks and the
state it applies run where the handlers run, so nothing here needs a lock.
Its peers talk pysyncobj's own TCP protocol on --controller-peers, not
CURVE: with auth on, every Raft message is encrypted and authenticated with
a key derived from the cluster's server secret (raft_password); with auth
off it is plain, so bind it to a private network.

Leases: an assignment carries lease_ms (0.8 x the heartbeat timeout). A
master stops acknowledging writes lease_ms after it sent its last answered
heartbeat, which is before this controller may elect another (timeout after
it received that heartbeat), so two masters never acknowledge at once.
"""

import hashlib
import hmac
import logging
import os
import time

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated

from quiver.errors import ServiceNotAvailableError
from quiver.wire.curve import AuthDir
from quiver.wire.codes import RequestCode, ResponseCode

from .controller_state import Groups, Liveness, group_key, pick_master

log = logging.getLogger(__name__)

TICK_S = 0.01
LEASE_SHARE = 0.8


class ReplicatedGroups(SyncObjConsumer):
    """controller_state.Groups behind Raft: each method runs on every controller in log order."""

    def __init__(self):
        super().__init__()
        self.data = {}  # after super().__init__(): pysyncobj snapshots what is set from here on

    @property
    def groups(self) -> Groups:
        return Groups(self.data)

    @replicated
    def register(self, cluster, broker_name, addr, ha_addr):
        return self.groups.register(cluster, broker_name, addr, ha_addr)

    @replicated
    def elect(self, key, expect_epoch, new_master):
        return self.groups.elect(key, expect_epoch, new_master)

    @replicated
    def alter(self, key, master, epoch, sss):
        return self.groups.alter(key, master, epoch, sss)


def raft_password(auth_dir: str) -> str | None:
    """Auth on: the Raft traffic's key, derived from the cluster's server secret (shared by every
    service of the cluster, readable only by its owner); pysyncobj encrypts and authenticates
    every message with it (Fernet), so a peer without the auth dir can neither read the
    controller's state nor take part in it. None (auth off): plain Raft."""
    if not auth_dir:
        return None
    secret = AuthDir(auth_dir).server.secret_key.encode()
    return hmac.new(secret, b"quiver controller raft", hashlib.sha256).hexdigest()


def raft_node(self_addr: str, peers: list[str], data_dir: str, consumer, password: str | None = None) -> SyncObj:
    os.makedirs(data_dir, exist_ok=True)
    # bindAddress: pysyncobj binds 0.0.0.0 without it; the Raft port belongs on the peers' network only
    conf = SyncObjConf(autoTick=False, useFork=False, dynamicMembershipChange=False, bindAddress=self_addr,
                       password=password,
                       journalFile=os.path.join(data_dir, "raft.journal"),
                       fullDumpFile=os.path.join(data_dir, "raft.snapshot"),
                       raftMinTimeout=0.4, raftMaxTimeout=1.0, appendEntriesPeriod=0.05,
                       connectionRetryTime=0.5, connectionTimeout=1.5, commandsWaitLeader=False)
    return SyncObj(self_addr, [p for p in peers if p != self_addr], conf, consumers=[consumer])


class Controller:
    """The controller's requests and timers, on a name server's Service loop."""

    def __init__(self, config, service, node_factory=raft_node):
        self.config = config
        self.service = service
        self.timeout_s = config.controller_heartbeat_timeout_ms / 1000
        self.lease_ms = int(config.controller_heartbeat_timeout_ms * LEASE_SHARE)
        self.state = ReplicatedGroups()
        self.raft_self = config.raft_self
        self.node = node_factory(self.raft_self, config.raft_peers, os.path.join(config.data_dir, "controller"),
                                 self.state, raft_password(config.auth_dir))
        self.live = Liveness(self.timeout_s)
        self.started = time.monotonic()
        self.proposing: set[str] = set()   # group keys with an election in flight
        self.elections = 0                 # masters this controller elected as leader (STATUS, metrics)

    def start(self) -> None:
        self.service.every("raft_tick", TICK_S, self._tick, first_delay_s=0)
        self.service.every("controller_scan", self.config.controller_scan_interval_ms / 1000, self.scan_step)
        log.info("controller: Raft on %s, peers %s", self.raft_self, ";".join(self.config.raft_peers))

    def stop(self) -> None:
        try:
            self.node.destroy()
        except Exception:
            log.exception("stopping the Raft node failed")

    def _tick(self) -> None:
        self.node.doTick(0)

    # ---- leadership ---------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.node._isLeader() and self.node.isReady()

    def leader(self) -> str:
        node = self.node._getLeader()
        return "" if node is None else str(getattr(node, "address", node))

    def _not_leader(self) -> ServiceNotAvailableError:
        return ServiceNotAvailableError(f"not the controller leader (Raft {self.raft_self}); "
                                        f"leader: {self.leader() or 'none yet'}")

    # ---- requests -----------------------------------------------------------------------

    def handlers(self) -> dict:
        return {RequestCode.CONTROLLER_HEARTBEAT: self.heartbeat,
                RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self.alter_sync_state_set,
                RequestCode.CONTROLLER_REPLICA_INFO: self.replica_info}

    def heartbeat(self, req) -> None:
        a = req.args
        self.live.beat(a.addr, a.max_offset, a.epoch)
        if not self.is_leader:
            raise self._not_leader()
        key = group_key(a.cluster, a.broker_name)
        g = self.state.groups.get(key)
        m = g["members"].get(a.addr) if g else None
        if m is not None and m["ha"] == a.ha_addr:
            self._answer(req, key, a.addr)
            return

        def registered(result, error):
            if error != FAIL_REASON.SUCCESS:
                req.reply(ResponseCode.SERVICE_NOT_AVAILABLE, f"registration not committed (Raft: {error})")
                return
            log.info("controller: %s joined %s as member %d", a.addr, key, result)
            self.scan_step()  # a new group elects its first master at once
            self._answer(req, key, a.addr)
        self.state.register(a.cluster, a.broker_name, a.addr, a.ha_addr, callback=registered)

    def _answer(self, req, key: str, addr: str) -> None:
        req.reply(ResponseCode.SUCCESS, "", self.state.groups.assignment(key, addr, self.lease_ms))

    def alter_sync_state_set(self, req) -> None:
        a = req.args
        if not self.is_leader:
            raise self._not_leader()
        key = group_key(a.cluster, a.broker_name)

        def altered(ok, error):
            if error != FAIL_REASON.SUCCESS:
                req.reply(ResponseCode.SERVICE_NOT_AVAILABLE, f"not committed (Raft: {error})")
            elif not ok:
                g = self.state.groups.get(key) or {}
                req.reply(ResponseCode.ILLEGAL_OPERATION,
                          f"stale: {key} is at epoch {g.get('epoch')} with master {g.get('master')!r}")
            else:
                log.info("controller: %s SyncStateSet is now %s (epoch %d)", key, a.sync_state_set, a.epoch)
                self._answer(req, key, a.master_addr)
        self.state.alter(key, a.master_addr, a.epoch, a.sync_state_set, callback=altered)

    def replica_info(self, req) -> None:
        req.reply(ResponseCode.SUCCESS, "", {"leader": self.is_leader, "groups": self.groups_view(),
                                             "raft": self.raft_status()})

    def groups_view(self) -> list[dict]:
        out = []
        for key, g in sorted(self.state.data.items()):
            master_off = self.live.beats[g["master"]].max_offset if g["master"] in self.live.beats else None
            members = []
            for addr, m in sorted(g["members"].items(), key=lambda kv: kv[1]["id"]):
                b = self.live.beats.get(addr)
                members.append({"addr": addr, "id": m["id"], "ha": m["ha"], "alive": self.live.alive(addr),
                                "max_offset": b.max_offset if b else None,
                                "lag_bytes": max(0, master_off - b.max_offset) if b and master_off is not None
                                else None,
                                "in_sync": addr in g["sss"], "master": addr == g["master"]})
            out.append({"group": key, "cluster": g["cluster"], "broker_name": g["broker_name"], "epoch": g["epoch"],
                        "master": g["master"], "sync_state_set": list(g["sss"]), "members": members})
        return out

    def raft_status(self) -> dict:
        st = self.node.getStatus()
        return {"self": self.raft_self, "leader": self.leader(), "term": st.get("raft_term"),
                "commit_idx": st.get("commit_idx"), "ready": self.node.isReady(), "elections": self.elections}

    # ---- the leader's scan ------------------------------------------------------------

    def scan_step(self) -> list[tuple[str, str]]:
        """Elect where a group has no live master (leader only); returns the (group, master) proposed."""
        if not self.is_leader:
            return []
        # a controller that just started has heard no heartbeat yet: silence means nothing
        settled = time.monotonic() - self.started > self.timeout_s
        out = []
        for key, g in list(self.state.data.items()):
            if key in self.proposing or (g["master"] and not settled):
                continue
            new = pick_master(g, self.live)
            if new is None:
                continue
            self.proposing.add(key)
            old, epoch = g["master"], g["epoch"]
            silent = self.live.silent_s(old) if old else None
            log.warning("controller: %s master %s %s; electing %s for epoch %d", key, old or "(none)",
                        f"silent {silent:.1f} s" if silent is not None else "never seen", new, epoch + 1)
            self.state.elect(key, epoch, new, callback=lambda ok, err, k=key, n=new: self._elected(k, n, ok, err))
            out.append((key, new))
        return out

    def _elected(self, key: str, new: str, ok, error) -> None:
        self.proposing.discard(key)
        if error == FAIL_REASON.SUCCESS and ok:
            self.elections += 1
            log.warning("controller: %s master is %s at epoch %d", key, new, self.state.data[key]["epoch"])
        else:
            log.info("controller: election of %s in %s not applied (%s)", new, key,
                     "stale epoch" if error == FAIL_REASON.SUCCESS else f"Raft: {error}")

    def status(self) -> dict:
        """STATUS's "controller": `elections` counts per process (sum it over the controllers)."""
        return {"controller": {"leader": self.is_leader, "groups": len(self.state.data), **self.raft_status(),
                               "elections": self.elections}}

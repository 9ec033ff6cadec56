"""The failover controller inside a name server started with --controller.

Owns the Raft node (pysyncobj: a maintained Raft library from the registry,
pure Python, with a journal file and snapshots for restarts), the three
controller requests and the leader's scan for silent masters. The rules are
controller_state's; this module only decides when to propose them.

    broker --CONTROLLER_HEARTBEAT--> every controller: liveness (memory)
                                     the leader answers the assignment once a Raft entry
                                     proposed after the heartbeat arrived is committed;
                                     the others SERVICE_NOT_AVAILABLE naming the leader
    leader scan (--controller-scan-interval-ms): master silent > timeout
        -> pick_master -> Raft elect(epoch + SyncStateSet CAS) -> the next heartbeats carry it
    master --CONTROLLER_ALTER_SYNC_STATE_SET--> leader -> Raft alter(epoch CAS)

Threads: pysyncobj ticks on its own thread (a slow or hostile peer cannot stall the
name server's requests); it applies the replicated state under ReplicatedGroups.lock,
and every callback it makes is handed to the service thread, where the handlers,
Liveness and the scan run. Its peers talk pysyncobj's TCP protocol on
--controller-peers through raft_wire: always encrypted and authenticated with the
Raft key (--controller-key-file, or derived from the auth dir), frames capped, no
code-running unpickling.

Leases: an assignment carries lease_ms (0.8 x the heartbeat timeout); a master
stops acknowledging writes lease_ms after it SENT the heartbeat. The answer waits
for a Raft commit proposed after the heartbeat arrived, so a majority still
followed this leader after the master's lease began; a leader of a newer term
(elected after that) waits lease_ms before replacing any master, and the master
elected is a member of the SyncStateSet at the moment the entry applies. So an
isolated leader grants nothing and two masters never acknowledge at once.
pysyncobj's leader fallback (a leader without a majority steps down) is half the
lease; brokers ignore answers of an older Raft term than one they have seen.
"""

import copy
import functools
import logging
import os
import threading
import time

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated

from quiver.errors import ServiceNotAvailableError
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.replies import ReplicaInfoReply

from . import raft_wire
from .controller_state import Groups, Liveness, group_key, pick_master
from .raft_key import raft_password
from .raft_wire import SafeTransport

log = logging.getLogger(__name__)

TICK_S = 0.02
LEASE_SHARE = 0.8
WITNESS_STALE_S = 2.0     # a confirmation not committed by then is given up (its heartbeats refused)
MAX_WAITING = 10_000      # heartbeats waiting for one confirmation

raft_wire.install()


class ReplicatedGroups(SyncObjConsumer):
    """controller_state.Groups behind Raft: each method runs on every controller in log order, on
    the Raft thread, under `lock`; readers on other threads take `lock` too (`read`)."""

    def __init__(self):
        self.lock = threading.Lock()  # before super().__init__(): not part of the snapshots
        super().__init__()
        self.data = {}  # after super().__init__(): pysyncobj snapshots what is set from here on

    @property
    def groups(self) -> Groups:
        return Groups(self.data)

    def read(self, fn):
        """`fn(Groups)` under the lock (from any thread)."""
        with self.lock:
            return fn(self.groups)

    @replicated
    def register(self, cluster, broker_name, addr, ha_addr):
        with self.lock:
            return self.groups.register(cluster, broker_name, addr, ha_addr)

    @replicated
    def elect(self, key, expect_epoch, new_master, expect_sss=None):
        with self.lock:
            return self.groups.elect(key, expect_epoch, new_master, expect_sss)

    @replicated
    def alter(self, key, master, epoch, sss):
        with self.lock:
            return self.groups.alter(key, master, epoch, sss)

    @replicated
    def witness(self):
        """Changes nothing: its commit shows a majority followed this leader after it was proposed.
        (Named to sort after the others: pysyncobj numbers replicated methods by name.)"""
        return True


def raft_node(self_addr: str, peers: list[str], data_dir: str, consumer, password: str,
              fallback_s: float = 0.6, heard: dict | None = None) -> SyncObj:
    """A Raft node ticking on its own thread; `heard` (node address -> monotonic time) is kept
    up to date with when each peer was last heard."""
    if not password:
        raise ValueError("the controller's Raft traffic needs a key")
    os.makedirs(data_dir, exist_ok=True)
    # bindAddress: pysyncobj binds 0.0.0.0 without it; the Raft port belongs on the peers' network only
    conf = SyncObjConf(autoTick=True, autoTickPeriod=TICK_S, useFork=False, dynamicMembershipChange=False,
                       bindAddress=self_addr, password=password, leaderFallbackTimeout=fallback_s,
                       journalFile=os.path.join(data_dir, "raft.journal"),
                       fullDumpFile=os.path.join(data_dir, "raft.snapshot"),
                       raftMinTimeout=0.4, raftMaxTimeout=1.0, appendEntriesPeriod=0.05,
                       connectionRetryTime=0.5, connectionTimeout=1.5, commandsWaitLeader=False)
    others = [p for p in peers if p != self_addr]
    transport = functools.partial(SafeTransport, heard=heard)
    return SyncObj(self_addr, others, conf, consumers=[consumer], transportClass=transport)


class Controller:
    """The controller's requests and timers, on a name server's Service loop."""

    def __init__(self, config, service, node_factory=raft_node):
        self.config = config
        self.service = service
        self.timeout_s = config.controller_heartbeat_timeout_ms / 1000
        self.lease_ms = int(config.controller_heartbeat_timeout_ms * LEASE_SHARE)
        self.fallback_s = max(0.2, self.lease_ms / 2000)  # leader without a majority steps down
        self.state = ReplicatedGroups()
        self.raft_self = config.raft_self
        self.heard = {p: 0.0 for p in config.raft_peers if p != self.raft_self}
        self.node = node_factory(self.raft_self, config.raft_peers, os.path.join(config.data_dir, "controller"),
                                 self.state, raft_password(config), self.fallback_s, self.heard)
        self.live = Liveness(self.timeout_s)
        self.started = time.monotonic()
        self.proposing: set[str] = set()   # group keys with an election in flight
        self.elections = 0                 # masters this controller elected as leader (STATUS, metrics)
        self.waiting: list = []            # heartbeats to answer once a confirmation proposed after them commits
        self.confirming = None             # [proposed at, term, batch] of the confirmation in flight
        self.lead_term = None              # the Raft term this controller leads, as the scan saw it
        self.lead_since = 0.0

    def start(self) -> None:
        self.service.every("controller_scan", self.config.controller_scan_interval_ms / 1000, self.scan_step)
        log.info("controller: Raft on %s, peers %s", self.raft_self, ";".join(self.config.raft_peers))

    def stop(self) -> None:
        try:
            self.node.destroy_synchronous()
        except Exception:
            log.exception("stopping the Raft node failed")

    def _here(self, fn):
        """A pysyncobj callback (Raft thread) that runs `fn` on the service thread."""
        return lambda *args: self.service.call_soon_threadsafe(fn, *args)

    # ---- leadership ---------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.node._isLeader() and self.node.isReady() and self.majority_contact()

    def majority_contact(self) -> bool:
        """A majority (this node included) was heard within the leader fallback time."""
        now = time.monotonic()
        fresh = 1 + sum(now - t <= self.fallback_s for t in list(self.heard.values()))
        return fresh * 2 > len(self.heard) + 1

    @property
    def term(self) -> int:
        return self.node.raftCurrentTerm

    def leader(self) -> str:
        node = self.node._getLeader()
        return "" if node is None else str(getattr(node, "address", node))

    def _not_leader(self) -> ServiceNotAvailableError:
        if self.node._isLeader():
            return ServiceNotAvailableError(f"controller leader without a majority heard in {self.fallback_s:.1f} s "
                                            f"(Raft {self.raft_self}): deciding nothing")
        return ServiceNotAvailableError(f"not the controller leader (Raft {self.raft_self}); "
                                        f"leader: {self.leader() or 'none yet'}")

    # ---- requests -----------------------------------------------------------------------

    def handlers(self) -> dict:
        return {RequestCode.CONTROLLER_HEARTBEAT: self.heartbeat,
                RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self.alter_sync_state_set,
                RequestCode.CONTROLLER_REPLICA_INFO: self.replica_info}

    def heartbeat(self, req) -> None:
        a = req.args
        if a.resign:   # a broker stopping: a master is replaced now, not a heartbeat timeout later
            self.live.forget(a.addr)
            if not self.is_leader:
                raise self._not_leader()
            log.warning("controller: %s resigns (stopping)", a.addr)
            self.scan_step()
            req.reply(ResponseCode.SUCCESS)
            return
        self.live.beat(a.addr, a.max_offset, a.epoch)
        if not self.is_leader:
            raise self._not_leader()
        key = group_key(a.cluster, a.broker_name)
        known = self.state.read(lambda gs: (gs.get(key) or {}).get("members", {}).get(a.addr, {}).get("ha"))
        if known == a.ha_addr:
            self._confirm(req, key, a.addr)
            return
        term = self.term

        def registered(result, error):
            if error != FAIL_REASON.SUCCESS:
                req.reply(ResponseCode.SERVICE_NOT_AVAILABLE, f"registration not committed (Raft: {error})")
                return
            if self.term != term or not self.node._isLeader():  # committed, but by a leader of another term
                req.reply(ResponseCode.SERVICE_NOT_AVAILABLE, f"registered; leader now: {self.leader() or 'none'}")
                return
            log.info("controller: %s joined %s as member %d", a.addr, key, result)
            self.scan_step()  # a new group elects its first master at once
            self._answer(req, key, a.addr, term)  # the commit came after the heartbeat: a confirmation
        self.state.register(a.cluster, a.broker_name, a.addr, a.ha_addr, callback=self._here(registered))

    def _answer(self, req, key: str, addr: str, term: int) -> None:
        req.reply(ResponseCode.SUCCESS, "", self.state.read(lambda gs: gs.assignment(key, addr, self.lease_ms, term)))

    def _confirm(self, req, key: str, addr: str) -> None:
        """Answer once a Raft entry proposed after now is committed (a lease-granting read)."""
        if len(self.waiting) >= MAX_WAITING:
            req.reply(ResponseCode.SERVICE_NOT_AVAILABLE, "too many heartbeats waiting for the Raft majority")
            return
        self.waiting.append((req, key, addr))
        self._propose_confirmation()

    def _propose_confirmation(self) -> None:
        now = time.monotonic()
        if self.confirming is not None:
            if now - self.confirming[0] < WITNESS_STALE_S:
                return  # the one in flight was proposed before these arrived: the next covers them
            self._confirmed(self.confirming, "timed out")
        if not self.waiting:
            return
        entry = self.confirming = [now, self.term, self.waiting]
        self.waiting = []
        self.state.witness(callback=self._here(lambda ok, error: self._confirmed(entry, error)))

    def _confirmed(self, entry: list, error) -> None:
        if self.confirming is not entry:
            return  # given up already
        self.confirming = None
        _, term, batch = entry
        ok = error == FAIL_REASON.SUCCESS and self.term == term and self.node._isLeader()
        for req, key, addr in batch:
            if ok:
                self._answer(req, key, addr, term)
            else:
                req.reply(ResponseCode.SERVICE_NOT_AVAILABLE,
                          f"leadership not confirmed by a Raft majority (Raft: {error}); "
                          f"leader: {self.leader() or 'none yet'}")
        self._propose_confirmation()

    def alter_sync_state_set(self, req) -> None:
        a = req.args
        if not self.is_leader:
            raise self._not_leader()
        key = group_key(a.cluster, a.broker_name)
        term = self.term

        def altered(ok, error):
            if error != FAIL_REASON.SUCCESS:
                req.reply(ResponseCode.SERVICE_NOT_AVAILABLE, f"not committed (Raft: {error})")
            elif not ok:
                g = self.state.read(lambda gs: copy.deepcopy(gs.get(key))) or {}
                req.reply(ResponseCode.ILLEGAL_OPERATION,
                          f"stale: {key} is at epoch {g.get('epoch')} with master {g.get('master')!r}")
            else:
                log.info("controller: %s SyncStateSet is now %s (epoch %d)", key, a.sync_state_set, a.epoch)
                self._answer(req, key, a.master_addr, term)
        self.state.alter(key, a.master_addr, a.epoch, a.sync_state_set, callback=self._here(altered))

    def replica_info(self, req) -> None:
        req.reply(ResponseCode.SUCCESS, "", ReplicaInfoReply(leader=self.is_leader, groups=self.groups_view(),
                                                             raft=self.raft_status()))

    def _snapshot(self) -> dict:
        return self.state.read(lambda gs: copy.deepcopy(gs.data))

    def groups_view(self) -> list[dict]:
        out = []
        for key, g in sorted(self._snapshot().items()):
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
                "commit_idx": st.get("commit_idx"), "ready": self.node.isReady(), "elections": self.elections,
                "majority_contact": self.majority_contact()}

    # ---- the leader's scan ------------------------------------------------------------

    def scan_step(self) -> list[tuple[str, str]]:
        """Elect where a group has no live master (leader only); returns the (group, master) proposed."""
        now = time.monotonic()
        if self.confirming is not None and now - self.confirming[0] >= WITNESS_STALE_S:
            self._confirmed(self.confirming, "not committed in time")  # a leader that lost its majority
        if not self.is_leader:
            return []
        term = self.term
        if term != self.lead_term:
            self.lead_term, self.lead_since = term, now
        # a controller that just started has heard no heartbeat yet: silence means nothing; a new
        # leader waits out any lease its predecessor granted before replacing a master
        settled = now - self.started > self.timeout_s and now - self.lead_since > self.lease_ms / 1000
        out = []
        for key, g in self._snapshot().items():
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
            self.state.elect(key, epoch, new, list(g["sss"]),
                             callback=self._here(lambda ok, err, k=key, n=new: self._elected(k, n, ok, err)))
            out.append((key, new))
        return out

    def _elected(self, key: str, new: str, ok, error) -> None:
        self.proposing.discard(key)
        if error == FAIL_REASON.SUCCESS and ok:
            self.elections += 1
            epoch = self.state.read(lambda gs: gs.get(key)["epoch"])
            log.warning("controller: %s master is %s at epoch %d", key, new, epoch)
        else:
            log.info("controller: election of %s in %s not applied (%s)", new, key,
                     "stale epoch or SyncStateSet" if error == FAIL_REASON.SUCCESS else f"Raft: {error}")

    def status(self) -> dict:
        """STATUS's "controller": `elections` counts per process (sum it over the controllers)."""
        return {"controller": {"leader": self.is_leader, "groups": len(self.state.data), **self.raft_status(),
                               "elections": self.elections}}

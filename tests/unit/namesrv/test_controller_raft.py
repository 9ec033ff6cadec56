"""Three controller Raft nodes in one process on loopback (each ticking on its own thread): a
change made on the leader is applied everywhere, a restarted node gets its state back from disk,
a node with another key learns nothing, and no node starts without a key."""

import os
import shutil
import socket
import time
from types import SimpleNamespace

import pytest
from pysyncobj import FAIL_REASON

from quiver_namesrv.config import Config
from quiver_namesrv.controller import ReplicatedGroups, raft_node
from quiver_namesrv.controller_state import group_key
from quiver_namesrv.raft_key import raft_password

KEY = "11" * 32


def _ports(n):
    out = []
    for _ in range(n):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            out.append(f"127.0.0.1:{s.getsockname()[1]}")
    return out


def _wait(cond, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "Raft did not get there in time"
        time.sleep(0.01)


def _stop(nodes):
    for n in nodes:
        if n is not None:
            n.destroy_synchronous()


def _group(tmp_path, keys=(KEY,) * 3):
    peers = _ports(len(keys))
    states = [ReplicatedGroups() for _ in peers]
    return peers, states, [raft_node(p, peers, str(tmp_path / str(i)), s, k)
                           for i, (p, s, k) in enumerate(zip(peers, states, keys))]


def _leader(nodes) -> int:
    _wait(lambda: any(n is not None and n._isLeader() and n.isReady() for n in nodes))
    return next(i for i, n in enumerate(nodes) if n is not None and n._isLeader())


def test_three_nodes_agree_and_state_survives_a_restart(tmp_path):
    peers, states, nodes = _group(tmp_path)
    try:
        lead = _leader(nodes)
        done = []
        st = states[lead]
        st.register("C", "b", "h:1", "h:2", callback=lambda r, e: done.append((r, e)))
        st.elect(group_key("C", "b"), 0, "h:1", callback=lambda r, e: done.append((r, e)))
        st.elect(group_key("C", "b"), 0, "h:1", callback=lambda r, e: done.append((r, e)))  # a stale repeat
        st.witness(callback=lambda r, e: done.append((r, e)))
        _wait(lambda: len(done) == 4)
        assert done == [(1, FAIL_REASON.SUCCESS), (True, FAIL_REASON.SUCCESS), (False, FAIL_REASON.SUCCESS),
                        (True, FAIL_REASON.SUCCESS)]
        _wait(lambda: all(s.read(lambda gs: (gs.get("C/b") or {}).get("epoch")) == 1 for s in states))
        # a follower restarts from its journal and has the group back
        f = next(i for i in range(3) if i != lead)
        nodes[f].destroy_synchronous()
        nodes[f] = None
        states[f] = ReplicatedGroups()
        nodes[f] = raft_node(peers[f], peers, str(tmp_path / str(f)), states[f], KEY)
        _wait(lambda: states[f].read(lambda gs: (gs.get("C/b") or {}).get("master")) == "h:1")
    finally:
        _stop(nodes)


def test_a_node_with_another_key_learns_nothing(tmp_path):
    """Auth on: the key comes from the auth dir's server secret. Two nodes of the cluster agree; a
    third with another cluster's auth dir never joins, never leads, and never sees the groups."""
    from quiver.wire.curve import init_auth_dir
    init_auth_dir(str(tmp_path / "ours"))
    init_auth_dir(str(tmp_path / "theirs"))
    ours = raft_password(SimpleNamespace(controller_key_file="", auth_dir=str(tmp_path / "ours")))
    theirs = raft_password(SimpleNamespace(controller_key_file="", auth_dir=str(tmp_path / "theirs")))
    assert ours and theirs and ours != theirs
    peers, states, nodes = _group(tmp_path, (ours, ours, theirs))
    try:
        lead = _leader(nodes[:2])
        done = []
        states[lead].register("C", "b", "h:1", "h:2", callback=lambda r, e: done.append(r))
        _wait(lambda: done and all(s.read(lambda gs: gs.get("C/b")) for s in states[:2]))
        time.sleep(2.0)  # the outsider keeps ticking: still nothing
        assert states[2].data == {} and not nodes[2]._isLeader()
    finally:
        _stop(nodes)


def test_no_key_no_controller(tmp_path):
    with pytest.raises(ValueError, match="Raft key"):
        Config(controller=True, data_dir=str(tmp_path), controller_peers="127.0.0.1:1", controller_raft="127.0.0.1:1")
    with pytest.raises(ValueError, match="Raft key"):
        raft_password(SimpleNamespace(controller_key_file="", auth_dir=""))
    with pytest.raises(ValueError, match="needs a key"):
        raft_node("127.0.0.1:1", ["127.0.0.1:1"], str(tmp_path), ReplicatedGroups(), "")
    key = tmp_path / "controller.key"
    key.write_text(KEY + "\n")
    key.chmod(0o644)
    with pytest.raises(ValueError, match="readable by others"):
        raft_password(SimpleNamespace(controller_key_file=str(key), auth_dir=""))
    with pytest.raises(ValueError, match="readable by others"):   # refused at the door, like any bad flag
        Config(controller=True, data_dir=str(tmp_path), controller_peers="127.0.0.1:1", controller_raft="127.0.0.1:1",
               controller_key_file=str(key))
    key.chmod(0o600)
    assert raft_password(SimpleNamespace(controller_key_file=str(key), auth_dir="")) == KEY


def test_a_node_with_an_empty_disk_catches_up_from_a_snapshot(tmp_path):
    """Snapshots (a set of pysyncobj nodes and the groups) go through the restricted decoder too:
    the leader compacts its log, a follower that lost its disk gets the snapshot streamed."""
    peers, states, nodes = _group(tmp_path)
    try:
        lead = _leader(nodes)
        f = next(i for i in range(3) if i != lead)
        nodes[f].destroy_synchronous()
        nodes[f] = None
        done = []
        for i in range(20):
            states[lead].register("C", "b", f"h:{i}", "ha", callback=lambda r, e: done.append(e))
        _wait(lambda: len(done) == 20)
        for n in nodes:
            if n is not None:
                n.forceLogCompaction()
        _wait(lambda: os.path.exists(tmp_path / str(lead) / "raft.snapshot"))
        shutil.rmtree(tmp_path / str(f))
        states[f] = ReplicatedGroups()
        nodes[f] = raft_node(peers[f], peers, str(tmp_path / str(f)), states[f], KEY)
        _wait(lambda: len(states[f].read(lambda gs: (gs.get("C/b") or {}).get("members", {}))) == 20)
    finally:
        _stop(nodes)

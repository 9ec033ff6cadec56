"""Three controller Raft nodes in one process on loopback: a change made on the leader is applied
everywhere, a follower refuses to decide, and a restarted node gets its state back from disk."""

import socket
import time

from pysyncobj import FAIL_REASON

from quiver_namesrv.controller import ReplicatedGroups, raft_node
from quiver_namesrv.controller_state import group_key


def _ports(n):
    out = []
    for _ in range(n):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            out.append(f"127.0.0.1:{s.getsockname()[1]}")
    return out


def _tick_until(nodes, cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "Raft did not get there in time"
        for n in nodes:
            if n is not None:
                n.doTick(0)
        time.sleep(0.002)


def test_three_nodes_agree_and_state_survives_a_restart(tmp_path):
    peers = _ports(3)
    states = [ReplicatedGroups() for _ in peers]
    nodes = [raft_node(p, peers, str(tmp_path / str(i)), s) for i, (p, s) in enumerate(zip(peers, states))]
    try:
        _tick_until(nodes, lambda: any(n._isLeader() and n.isReady() for n in nodes))
        lead = next(i for i, n in enumerate(nodes) if n._isLeader())
        done = []
        st = states[lead]
        st.register("C", "b", "h:1", "h:2", callback=lambda r, e: done.append((r, e)))
        st.elect(group_key("C", "b"), 0, "h:1", callback=lambda r, e: done.append((r, e)))
        st.elect(group_key("C", "b"), 0, "h:1", callback=lambda r, e: done.append((r, e)))  # a stale repeat
        _tick_until(nodes, lambda: len(done) == 3)
        assert done == [(1, FAIL_REASON.SUCCESS), (True, FAIL_REASON.SUCCESS), (False, FAIL_REASON.SUCCESS)]
        _tick_until(nodes, lambda: all(s.data.get("C/b", {}).get("epoch") == 1 for s in states))
        # a follower restarts from its journal and has the group back
        f = next(i for i in range(3) if i != lead)
        nodes[f].destroy()
        nodes[f] = None
        states[f] = ReplicatedGroups()
        nodes[f] = raft_node(peers[f], peers, str(tmp_path / str(f)), states[f])
        _tick_until(nodes, lambda: states[f].data.get("C/b", {}).get("master") == "h:1")
    finally:
        for n in nodes:
            if n is not None:
                n.destroy()


def test_with_auth_on_raft_is_encrypted_and_a_node_without_the_key_learns_nothing(tmp_path):
    """The Raft key comes from the auth dir's server secret: two nodes of the cluster agree; a
    third with another cluster's auth dir never joins, never leads, and never sees the groups."""
    from quiver.wire.curve import init_auth_dir
    from quiver_namesrv.controller import raft_password
    init_auth_dir(str(tmp_path / "ours"))
    init_auth_dir(str(tmp_path / "theirs"))
    ours, theirs = raft_password(str(tmp_path / "ours")), raft_password(str(tmp_path / "theirs"))
    assert ours and theirs and ours != theirs and raft_password("") is None
    peers = _ports(3)
    states = [ReplicatedGroups() for _ in peers]
    keys = [ours, ours, theirs]
    nodes = [raft_node(p, peers, str(tmp_path / str(i)), s, k) for i, (p, s, k) in enumerate(zip(peers, states, keys))]
    try:
        _tick_until(nodes[:2], lambda: any(n._isLeader() and n.isReady() for n in nodes[:2]))
        lead = next(i for i in range(2) if nodes[i]._isLeader())
        done = []
        states[lead].register("C", "b", "h:1", "h:2", callback=lambda r, e: done.append(r))
        _tick_until(nodes, lambda: done and all(s.data.get("C/b") for s in states[:2]))
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:   # the outsider keeps ticking: still nothing
            for n in nodes:
                n.doTick(0)
            time.sleep(0.002)
        assert states[2].data == {} and not nodes[2]._isLeader()
    finally:
        for n in nodes:
            n.destroy()

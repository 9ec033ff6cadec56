"""The Kafka gateway's group coordinator: rounds, generations, leader, assignments, expiry (a fake clock)."""

import datetime
import threading
import types

from quiver_kafka import protocol as p
from quiver_kafka.groups import Coordinator
from support.waiting import wait_for

S = types.SimpleNamespace


def _join(c, member="", group="g", protocols=(("range", b"meta"),)):
    return c.join(S(group_id=group, session_timeout=datetime.timedelta(seconds=10),
                    rebalance_timeout=datetime.timedelta(seconds=30), member_id=member, protocol_type="consumer",
                    protocols=[S(name=n, metadata=m) for n, m in protocols]))


def _hb(c, member, generation, group="g"):
    return c.heartbeat(S(group_id=group, generation_id=generation, member_id=member))["error_code"]


def test_rounds_generations_assignments_and_expiry():
    now = [100.0]
    c = Coordinator(clock=lambda: now[0])
    a = _join(c)
    assert (a["error_code"], a["generation_id"], a["leader"]) == (0, 1, a["member_id"])
    assert [m["metadata"] for m in a["members"]] == [b"meta"]
    A = a["member_id"]
    assert _hb(c, A, 1) == p.NONE and _hb(c, A, 0) == p.ILLEGAL_GENERATION and _hb(c, "x", 1) == p.UNKNOWN_MEMBER_ID

    second = {}
    t = threading.Thread(target=lambda: second.update(_join(c, protocols=(("range", b"b-meta"),))))
    t.start()
    wait_for(lambda: _hb(c, A, 1) == p.REBALANCE_IN_PROGRESS, 10, "B's join opening a round")
    again = _join(c, A)                                               # A rejoins: the round completes
    t.join(10)
    B = second["member_id"]
    assert again["generation_id"] == second["generation_id"] == 2
    assert again["leader"] == A and sorted(m["metadata"] for m in again["members"]) == [b"b-meta", b"meta"]
    assert second["members"] == []                                    # only the leader gets the members

    got = {}
    t = threading.Thread(target=lambda: got.update(c.sync(S(group_id="g", generation_id=2, member_id=B,
                                                            assignments=[]))))
    t.start()
    lead = c.sync(S(group_id="g", generation_id=2, member_id=A,
                    assignments=[S(member_id=A, assignment=b"to-a"), S(member_id=B, assignment=b"to-b")]))
    t.join(10)
    assert lead == {"error_code": 0, "assignment": b"to-a"} and got == {"error_code": 0, "assignment": b"to-b"}
    assert c.check_commit("g", B, 2) == p.NONE and c.check_commit("g", B, 1) == p.ILLEGAL_GENERATION

    [desc] = c.describe(S(groups=["g"]))["groups"]
    assert desc["group_state"] == "Stable" and desc["protocol_data"] == "range"
    assert sorted(m["member_assignment"] for m in desc["members"]) == [b"to-a", b"to-b"]
    assert c.list(None)["groups"] == [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable"}]
    assert c.describe(S(groups=["other"]))["groups"][0]["group_state"] == "Dead"

    now[0] += 5
    assert _hb(c, A, 2) == p.NONE
    now[0] += 6                                                       # B silent 11 s > its 10 s session
    c.expire()
    assert _hb(c, B, 2) == p.UNKNOWN_MEMBER_ID and _hb(c, A, 2) == p.REBALANCE_IN_PROGRESS
    assert _join(c, A)["generation_id"] == 3


def test_bad_joins_and_leave():
    c = Coordinator()
    assert _join(c, group="bad group!")["error_code"] == p.INVALID_GROUP_ID
    assert _join(c, member="never-joined")["error_code"] == p.UNKNOWN_MEMBER_ID
    a = _join(c)
    assert _join(c, protocols=(("other", b""),))["error_code"] == p.INCONSISTENT_GROUP_PROTOCOL
    assert c.leave(S(group_id="g", member_id=a["member_id"]))["error_code"] == p.NONE
    assert c.leave(S(group_id="g", member_id=a["member_id"]))["error_code"] == p.UNKNOWN_MEMBER_ID
    assert c.check_commit("g", a["member_id"], 1) == p.ILLEGAL_GENERATION



def _static_join(c, instance, member=""):
    return c.join(S(group_id="g", session_timeout=datetime.timedelta(seconds=10),
                    rebalance_timeout=datetime.timedelta(seconds=30), member_id=member, group_instance_id=instance,
                    protocol_type="consumer", protocols=[S(name="range", metadata=b"m")]))


def test_a_static_member_back_under_a_new_id_takes_its_place_and_the_old_id_is_fenced():
    c = Coordinator()
    first = _static_join(c, "host-1")
    old = first["member_id"]
    assert first["error_code"] == p.NONE and first["members"][0]["group_instance_id"] == "host-1"
    back = _static_join(c, "host-1")                  # the process restarted: no member id, same instance id
    new = back["member_id"]
    assert back["error_code"] == p.NONE and new != old and back["leader"] == new
    assert [m["member_id"] for m in back["members"]] == [new]   # one member still, under its new id
    hb = lambda mid, gen: c.heartbeat(S(group_id="g", generation_id=gen, member_id=mid,  # noqa: E731
                                        group_instance_id="host-1"))["error_code"]
    assert hb(old, back["generation_id"]) == p.FENCED_INSTANCE_ID
    assert hb(new, back["generation_id"]) == p.NONE
    assert _static_join(c, "host-1", member=old)["error_code"] == p.FENCED_INSTANCE_ID
    assert c.check_commit("g", old, back["generation_id"], "host-1") == p.FENCED_INSTANCE_ID
    assert c.check_commit("g", new, back["generation_id"], "host-1") == p.NONE
    sync = c.sync(S(group_id="g", generation_id=back["generation_id"], member_id=old, group_instance_id="host-1",
                    assignments=[]))
    assert sync["error_code"] == p.FENCED_INSTANCE_ID
    [desc] = c.describe(S(groups=["g"]))["groups"]
    assert [(m["member_id"], m["group_instance_id"]) for m in desc["members"]] == [(new, "host-1")]
    left = c.leave(S(group_id="g", members=[S(member_id="", group_instance_id="host-1")]))
    assert left["members"] == [{"member_id": new, "group_instance_id": "host-1", "error_code": p.NONE}]
    assert _static_join(c, "host-1")["error_code"] == p.NONE   # gone: joins afresh

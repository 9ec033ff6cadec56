"""A follower service learns a user added a moment ago during that user's first handshake, and a
grant made a moment ago before it refuses a request."""

import threading

from quiver.runtime.acl import Acl, User
from quiver.runtime.acl_sync import AclFollower
from quiver.runtime.security import Security, _Keys
from quiver.wire import protocol
from quiver.wire.codes import ResponseCode
from quiver.wire.curve import KeyPair, init_auth_dir


class _Transport:
    """Answers an ACL snapshot request from another thread, after a short delay (the IO thread)."""

    def __init__(self, snapshot: dict | None):
        self.snapshot = snapshot
        self.asked = 0

    def send(self, addr, req, ext, bodies, callback, timeout):
        self.asked += 1
        env = protocol.Envelope(ResponseCode.SUCCESS, 1, self.snapshot or {"unchanged": True}, [], "")
        threading.Timer(0.05, callback, (env,)).start()


def _follower(tmp_path, snapshot, clock=None):
    init_auth_dir(str(tmp_path / "auth"))
    security = Security(str(tmp_path / "auth"), "scheduler")
    transport = _Transport(snapshot)
    kw = {"clock": clock} if clock else {}
    follower = AclFollower(security, transport, brokers=lambda: ["127.0.0.1:1"], **kw)
    return security, follower, transport


def test_a_new_users_first_handshake_waits_for_the_acl_and_passes(tmp_path):
    key = KeyPair.generate().public_key
    acl = Acl([User("newcomer", key)], version="v2")
    security, follower, transport = _follower(tmp_path, acl.snapshot())
    assert security.name_of(key) is None
    assert _Keys(security).callback("quiver", key.encode()) is True   # fetched during the handshake
    assert transport.asked == 1 and security.name_of(key) == key


def test_unknown_keys_start_at_most_two_fetches_a_second(tmp_path):
    now = [100.0]
    security, follower, transport = _follower(tmp_path, None, clock=lambda: now[0])
    keys = _Keys(security)
    stranger = KeyPair.generate().public_key.encode()
    assert keys.callback("quiver", stranger) is False
    for _ in range(20):                        # a flood of bad keys within the half second
        assert keys.callback("quiver", stranger) is False
    assert transport.asked == 1
    now[0] += 0.6
    assert keys.callback("quiver", stranger) is False and transport.asked == 2


def test_a_periodic_fetch_just_before_does_not_stop_the_handshakes_fetch(tmp_path):
    now = [100.0]
    key = KeyPair.generate().public_key
    security, follower, transport = _follower(tmp_path, Acl([User("newcomer", key)], version="v2").snapshot(),
                                              clock=lambda: now[0])
    follower.step()                            # the periodic fetch, before the user was added
    assert _Keys(security).callback("quiver", key.encode()) is True and transport.asked == 2


def test_no_broker_known_yet_does_not_hold_the_handshake(tmp_path):
    init_auth_dir(str(tmp_path / "auth"))
    security = Security(str(tmp_path / "auth"), "scheduler")
    follower = AclFollower(security, _Transport(None), brokers=lambda: [])
    assert follower.soon().is_set()


def test_a_refused_request_is_checked_again_after_one_fetch(tmp_path):
    now = [100.0]
    key = KeyPair.generate().public_key
    security, follower, transport = _follower(tmp_path, Acl([], version="v1").snapshot(), clock=lambda: now[0])
    first = threading.Event()
    follower.step(first.set)                   # the periodic fetch, before the change
    assert first.wait(2)
    transport.snapshot = Acl([User("newcomer", key)], version="v2").snapshot()
    done = [threading.Event() for _ in range(3)]
    assert follower.recheck(done[0].set) is True
    assert follower.recheck(done[1].set) is True   # refused while that fetch runs: joins it
    assert all(e.wait(2) for e in done[:2]) and transport.asked == 2
    assert security.name_of(key) == key            # checked again against the fresh ACL
    # under half a second after that fetch (which may predate a grant): held for the next one, due
    # half a second after it started, not refused on the copy it brought
    transport.snapshot = Acl([User("granted", key)], version="v3").snapshot()
    assert follower.recheck(done[2].set) is True
    assert follower.recheck(threading.Event().set) is True and transport.asked == 2   # joins it, no fetch yet
    assert done[2].wait(3) and transport.asked == 3 and security.acl.version == "v3"
    now[0] += 0.6
    last = threading.Event()
    assert follower.recheck(last.set) is True and last.wait(2) and transport.asked == 4


def test_held_refusals_are_capped(tmp_path):
    security, follower, transport = _follower(tmp_path, None, clock=lambda: 100.0)
    transport.send = lambda *a: None            # the fetch never answers: every refusal stays held
    from quiver.runtime.acl_sync import MAX_HELD
    assert all(follower.recheck(lambda: None) for _ in range(MAX_HELD))
    assert follower.recheck(lambda: None) is False

"""A request to a host this machine cannot resolve says why and what to do (compose hostnames)."""

import pytest

from quiver.wire.codes import RequestCode
from quiver.errors import ClientError
from quiver.wire.transport import Transport


@pytest.mark.parametrize("blocking", [True, False])
def test_unresolvable_host_names_the_compose_network(blocking):
    t = Transport("unresolvable")
    try:
        with pytest.raises(ClientError, match="does not resolve here.*compose network"):
            if blocking:
                t.call("no-such-host.invalid:10911", RequestCode.PING, timeout=3.0)
            else:
                t.call_future("no-such-host.invalid:10911", RequestCode.PING, timeout=3.0).result(5)
    finally:
        t.close()


def test_a_resolvable_host_that_is_down_just_says_unreachable():
    t = Transport("down")
    try:
        with pytest.raises(ClientError) as info:
            t.call("127.0.0.1:1", RequestCode.PING, timeout=2.0)
        assert "does not resolve" not in str(info.value)
    finally:
        t.close()

"""What a client's helpers and the project's own modules may use of a client: routes, broker
calls, heartbeats and the transport.

A client keeps this machinery under private names; its public names are what apps
call. The pull engine (queue_puller.py), the rebalancer, the offset store, the POP
engine and filter_route's checks are given the client's BrokerAccess, not the client:
they see these members and nothing of its state. Services, tools and tests reach it
through `broker_access(client)`. Any object with the same members serves (the tests'
fakes).
"""

from typing import Any

_BOUND = ("route", "cached_route", "call_broker", "broker_addr", "read_addr", "read_failed", "call_namesrv",
          "call_read", "cluster_info", "all_broker_addrs", "slave_addrs", "send_heartbeats", "heartbeat")


class BrokerAccess:
    """`client`'s routes (`route`, `cached_route`), name-server and broker calls (`call_namesrv`,
    `call_broker`, `call_read`, `cluster_info`, `broker_addr`, `all_broker_addrs`, `slave_addrs`,
    `read_addr`, `read_failed`), heartbeats (`heartbeat`, `send_heartbeats`), its `transport`
    (once started), `client_id` and `request_timeout`."""

    __slots__ = ("_client", *_BOUND)
    # the client's methods of these names (ClientBase's, underscored there), bound
    route: Any
    cached_route: Any
    call_broker: Any
    broker_addr: Any
    read_addr: Any
    read_failed: Any
    call_namesrv: Any
    call_read: Any
    cluster_info: Any
    all_broker_addrs: Any
    slave_addrs: Any
    send_heartbeats: Any
    heartbeat: Any

    def __init__(self, client: Any) -> None:
        self._client = client   # for its id, transport (start() builds it) and request timeout
        for name in _BOUND:
            setattr(self, name, getattr(client, "_" + name))

    @property
    def client_id(self) -> str:
        """The client's id (a service's client may set its own after construction)."""
        return str(self._client.client_id)

    @property
    def transport(self) -> Any:
        """The client's transport (None before start())."""
        return self._client._transport

    @property
    def request_timeout(self) -> float:
        """The client's timeout of a request, in seconds."""
        return float(self._client.request_timeout)


def broker_access(client: Any) -> BrokerAccess:
    """The routes, broker calls and heartbeats of `client` (any ClientBase, or the sync client
    a quiver.aio client wraps); any other object (a test's fake with these members) as it is."""
    client = getattr(client, "_sync", client)
    access: BrokerAccess = getattr(client, "_brokers", client)
    return access

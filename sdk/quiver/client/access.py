"""What a consumer's helpers may use of their client: routes, broker calls and the transport.

The pull engine (queue_puller.py), the rebalancer, the remote offset store, the
POP engine and filter_route's checks are given a client's `brokers` (a
BrokerAccess), not the consumer: they see these members and nothing of the
consumer's state. Any object with the same members serves (the tests' fakes).
"""

from typing import Any


class BrokerAccess:
    """`client`'s routes (`route`, `cached_route`), broker calls (`call_broker`, `broker_addr`,
    `read_addr`, `read_failed`), its `transport` (once started), `client_id` and `request_timeout`."""

    __slots__ = ("_client", "client_id", "route", "cached_route", "call_broker", "broker_addr", "read_addr",
                 "read_failed")

    def __init__(self, client: Any) -> None:
        self._client = client   # for its transport (start() builds it) and request timeout
        self.client_id: str = client.client_id
        self.route, self.cached_route = client.route, client.cached_route
        self.call_broker, self.broker_addr = client.call_broker, client.broker_addr
        self.read_addr, self.read_failed = client.read_addr, client.read_failed

    @property
    def transport(self) -> Any:
        """The client's transport (None before start())."""
        return self._client.transport

    @property
    def request_timeout(self) -> float:
        """The client's timeout of a request, in seconds."""
        return float(self._client.request_timeout)

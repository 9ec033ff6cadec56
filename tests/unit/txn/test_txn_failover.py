"""The checker follows a broker name to its new master (automatic failover) without processes."""

import collections
from types import SimpleNamespace

from quiver.client.base import MessageQueue
from quiver_txn.checking import HALF_TOPIC, Checker, _BrokerState
from quiver_txn.config import Config


def test_a_broker_at_a_new_address_is_read_again_from_its_committed_offsets():
    route = SimpleNamespace(read_queues=[MessageQueue(HALF_TOPIC, "fo", 0)], addrs={"fo": "10.0.0.1:1"})
    client = SimpleNamespace(route=lambda topic, refresh=False: route, client_id="me")
    ck = Checker(client, Config(), collections.Counter())
    ck.rebalancer = SimpleNamespace(client_ids=lambda r: ["me"])
    assert ck.rebalance() == {"fo": "10.0.0.1:1"}
    ck.brokers["fo"] = st = _BrokerState()
    assert ck.rebalance() == {"fo": "10.0.0.1:1"} and ck.brokers["fo"] is st  # same master: state kept
    route.addrs = {"fo": "10.0.0.2:1"}  # the new master after a failover
    assert ck.rebalance() == {"fo": "10.0.0.2:1"} and "fo" not in ck.brokers

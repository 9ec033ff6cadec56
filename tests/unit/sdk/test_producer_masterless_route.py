"""A producer's route cache while a broker group has no master (a failover under way): the
route is asked for again within about a second, not after the cache's 30 s, so sends resume
as soon as the name servers know the new master."""

import pytest

from quiver import Producer
from quiver.errors import TopicNotExistError
from quiver.testing import stub_cluster, wait_until
from quiver.wire import requests as rq


def _register(cluster, broker_id: int, addr: str) -> None:
    topics = {"Failing": rq.TopicConfig(read=4, write=4, perm=6)}
    cluster.network.call(cluster.namesrv, rq.RegisterBroker(cluster="DefaultCluster", broker_name="broker-x",
                                                            broker_addr=addr, broker_id=broker_id, topics=topics))


def test_a_route_without_a_master_is_asked_for_again_within_seconds():
    with stub_cluster(brokers=0) as cluster:
        _register(cluster, 1, "127.0.0.1:10921")          # only a slave left: readable, not writable
        with cluster.client(Producer, "pg") as p:
            with pytest.raises(TopicNotExistError):
                p._pick("Failing")
            _register(cluster, 0, "127.0.0.1:10911")      # the new master registers

            def picked():
                try:
                    return p._pick("Failing")
                except TopicNotExistError:
                    return None
            got = wait_until(picked, timeout=5.0)
            assert got and got[1] == "127.0.0.1:10911", got


class _Replies:
    """Name servers by address: a route ext, or the error that address raises."""

    def __init__(self, by_addr):
        self.by_addr, self.asked = by_addr, []

    def call(self, addr, code, ext, timeout):
        self.asked.append(addr)
        got = self.by_addr[addr]
        if isinstance(got, Exception):
            raise got
        return type("Reply", (), {"ext": got})()


def test_a_name_server_without_the_route_yet_is_not_the_last_word():
    # a name server restarted moments ago knows no topic until the brokers register again
    p = Producer("pg", namesrv="127.0.0.1:1;127.0.0.1:2")
    replies = _Replies({"127.0.0.1:1": TopicNotExistError("no route"), "127.0.0.1:2": {"route": "known"}})
    p._io = lambda: replies
    assert p._call_namesrv(rq.GetRouteInfo(topic="T")) == {"route": "known"}
    replies.by_addr["127.0.0.1:2"] = TopicNotExistError("no route")
    with pytest.raises(TopicNotExistError):   # every name server answered: the topic does not exist
        p._call_namesrv(rq.GetRouteInfo(topic="T"))
    assert replies.asked == ["127.0.0.1:1", "127.0.0.1:2"] * 2

"""Admin lookups against real brokers on quiver.testing's fake network."""

from quiver import Message, Producer
from quiver.client.message import host_bytes
from quiver.testing import stub_cluster


def test_offset_msgid_found_by_the_store_host_a_broker_reports_not_its_advertised_address():
    # under compose a broker advertises its container hostname but stores (and puts in
    # offset msgIds) its IPv4: the admin must map one to the other through STATUS
    with stub_cluster(brokers=1) as cluster:
        app = next(iter(cluster.brokers.values()))
        app.store_host = app.store.store_host = host_bytes("10.9.8.7", 10911)
        cluster.admin().create_topic("T", queues=1)
        with cluster.client(Producer, "pg") as p:
            p.send(Message("T", b"find me", keys=["k"]))
        admin = cluster.admin()
        stored = admin.query_by_key("T", "k")[0]   # its id carries the store host the broker wrote
        assert stored.offset_msg_id.startswith("0A090807")
        assert admin.view_message(stored.offset_msg_id).body == b"find me"

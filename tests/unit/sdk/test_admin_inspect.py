"""Admin's inspection commands (quiver.client.admin_inspect) against a stub cluster."""

import pytest

from quiver.client.base import MessageQueue
from quiver.client.message import Message
from quiver.client.producer import Producer
from quiver.errors import SubscriptionGroupNotExistError, TopicNotExistError
from quiver.testing import stub_cluster
from quiver.tools.cli_ingest import RowMeter, expected_rows
from quiver.tools.cli_common import Ctx


@pytest.fixture(scope="module")
def cluster():
    with stub_cluster() as c:
        admin = c.admin()
        admin.create_topic("Insp", queues=2)
        with c.client(Producer, "insp-pg") as p:
            for i in range(5):
                p.send(Message("Insp", f"m{i}".encode(), keys=[f"k{i}"]))
        yield c, admin
        admin.shutdown()


def test_topic_status_and_message_at(cluster):
    _, admin = cluster
    rows = admin.topic_status("Insp")
    assert [r["queue_id"] for r in rows] == [0, 1] and sum(r["max_offset"] for r in rows) == 5
    m = admin.message_at(MessageQueue("Insp", "broker-a", 0), 0)
    assert m.queue_offset == 0 and m.body.startswith(b"m")
    assert admin.message_at(MessageQueue("Insp", "broker-a", 0), 99) is None
    with pytest.raises(TopicNotExistError):
        admin.topic_status("NotATopic")


def test_groups_list_config_delete(cluster):
    c, admin = cluster
    assert admin.group_config("g-insp") == {"broker-a": None}
    admin.set_group_config("g-insp", 4)
    assert admin.group_config("g-insp") == {"broker-a": {"retry_max_times": 4, "consume_enable": True}}
    assert admin.group_list()["g-insp"]["config"]["retry_max_times"] == 4
    assert admin.delete_group("g-insp") == ["broker-a"]
    assert "g-insp" not in c.broker().metadata.groups
    with pytest.raises(SubscriptionGroupNotExistError):
        admin.delete_group("g-insp")


def test_purge_keeps_config_and_drops_messages(cluster):
    _, admin = cluster
    admin.create_topic("InspPurge", queues=3, order=True)
    admin.purge_topic("InspPurge")
    assert admin.topic_configs()["broker-a"]["InspPurge"]["read"] == 3
    assert admin.topic_configs()["broker-a"]["InspPurge"]["order"] is True
    with pytest.raises(TopicNotExistError):
        admin.purge_topic("NeverMade")


def test_broker_statuses_carry_config_and_clean_runs(cluster):
    _, admin = cluster
    st = admin.broker_statuses()["broker-a"]
    assert st["config"]["broker_name"] == "broker-a" and "groups" in st
    assert admin.clean_expired_all() == {"broker-a": 0}


def test_ingest_meter_counts_rows_against_the_backlog(cluster):
    c, _ = cluster
    obj = Ctx(connect=c.client, transport_factory=c.network.transport)
    assert expected_rows(obj, "Insp", "earliest") == 5
    assert expected_rows(obj, "Insp", "latest") is None
    meter = RowMeter(5)
    meter.tasks(1, 2)
    assert meter.progress.tasks[0].completed == 2
    meter.rows(8)   # a stream outgrew the backlog: the total follows
    task = meter.progress.tasks[0]
    assert task.completed == 8 and task.total == 8

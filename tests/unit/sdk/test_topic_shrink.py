"""Lowering a topic's read queues: the broker refuses it while a removed queue holds messages a
group has not consumed (whoever asks: CLI, console, Admin), and Admin.shrink_topic takes
RocketMQ's safe way. Real brokers on quiver.testing's fake network."""

import pytest

from quiver import Message, Producer
from quiver.errors import IllegalOperationError
from quiver.testing import stub_cluster


@pytest.fixture
def backlog():
    """A stub cluster and its Admin, with topic T of 4 queues holding 2 messages each."""
    with stub_cluster() as c:
        admin = c.admin()
        admin.create_topic("T", queues=4)
        with c.client(Producer, "shrink-pg") as p:
            for _ in range(8):
                p.send(Message("T", b"x"))
        yield admin


def _configs(admin, topic):
    return [(t[topic]["write"], t[topic]["read"]) for t in admin.topic_configs().values()]


def test_a_shrink_that_hides_a_backlog_is_refused_unless_forced(backlog):
    admin = backlog
    with pytest.raises(IllegalOperationError, match="queue 2: no group; queue 3: no group"):
        admin.create_topic("T", queues=2)
    assert _configs(admin, "T") == [(4, 4)]
    admin.create_topic("T", queues=4, write_queues=2)          # fewer write queues: always allowed
    assert _configs(admin, "T") == [(2, 4)]
    assert admin.create_topic("T", queues=2, force=True)["broker-a"]["read"] == 2


def test_shrink_topic_lowers_write_queues_first_and_read_queues_once_drained(backlog):
    admin = backlog
    admin.reset_offset("billing", "T", offset=0)
    held = admin.shrink_topic("T", 2)
    assert held["write_done"] and not held["read_done"] and "queue 3: billing" in held["behind"]
    assert _configs(admin, "T") == [(2, 4)]
    admin.reset_offset("billing", "T", offset=2)                # billing consumed queues 2 and 3
    done = admin.shrink_topic("T", 2)
    assert done["read_done"] and done["behind"] is None
    assert _configs(admin, "T") == [(2, 2)]
    assert admin.create_topic("T", queues=8)["broker-a"]["read"] == 8   # growing is never refused

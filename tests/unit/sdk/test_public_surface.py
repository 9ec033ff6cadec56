"""Each client class shows users its API and nothing else: dir() without underscores is exactly the
list below, so routing, broker calls and heartbeats (quiver.client.access.broker_access) cannot
become public names by accident; an instance adds only the settings it was built with (not its
transport, tracer factory or offset store). A new public name is added here on purpose, with its docs."""

import pytest

import quiver
from quiver import aio
from quiver.client.access import BrokerAccess, broker_access

LIFECYCLE = {"start", "shutdown", "on_connection"}
SENDS = {"send", "send_async", "send_batch", "send_oneway", "send_orderly", "cancel_scheduled", "request", "reply"}
PRODUCER = LIFECYCLE | SENDS | {"send_batch_async", "request_async", "requests", "tracer"}
SUBSCRIBING = LIFECYCLE | {"subscribe", "unsubscribe"}
PULL = SUBSCRIBING | {"assignment", "commit", "committed", "poll", "seek", "seek_to_begin", "seek_to_end",
                      "seek_to_timestamp", "stats"}
SIMPLE = SUBSCRIBING | {"ack", "change_invisible_duration", "receive"}
ADMIN_CALLS = {
    "acl_add_user", "acl_delete_user", "acl_grant", "acl_list", "acl_revoke", "backup", "broker_statuses",
    "clean_expired", "clean_expired_all", "cluster_info", "compact_topic", "consumer_offset", "consumer_progress",
    "consumer_stats", "create_topic", "delete_group", "delete_topic", "dlq_messages", "group_config", "group_list",
    "ha_status", "max_offset", "message_at", "messages_between", "min_offset", "open_transactions", "ping",
    "purge_topic", "query_by_key", "queues", "resend_dlq", "reset_offset", "scheduler_addrs", "scheduler_status",
    "search_offset", "set_group_config", "shrink_topic", "status", "subscription_conflicts", "topic_configs",
    "topic_list", "topic_route", "topic_status", "trace", "view_message"}
ASYNC = {"group", "sync"}   # the wrapped sync client, for what quiver.aio does not wrap

ALLOWED = {
    "Producer": PRODUCER,
    "TransactionProducer": PRODUCER | {"send_in_transaction"},
    "PushConsumer": SUBSCRIBING | {"assignment", "register", "stats", "tracer"},
    "PullConsumer": PULL | {"tracer"},
    "SimpleConsumer": SIMPLE | {"tracer"},
    "Admin": LIFECYCLE | ADMIN_CALLS | {"tracer"},
    "AsyncProducer": LIFECYCLE | SENDS | ASYNC,
    "AsyncTransactionProducer": LIFECYCLE | SENDS | ASYNC | {"send_in_transaction"},
    "AsyncPushConsumer": LIFECYCLE | ASYNC | {"assignment", "deliveries", "register", "stats", "subscribe"},
    "AsyncPullConsumer": PULL | ASYNC,
    "AsyncSimpleConsumer": SIMPLE | ASYNC | {"messages"},
    "AsyncAdmin": LIFECYCLE | ADMIN_CALLS | ASYNC - {"group"} | {"call"},
}


# what an instance adds: the settings it was built with (the class's names above are its API)
CLIENT = {"client_id", "credentials", "namesrvs", "request_timeout"}
SENDER = CLIENT | {"group", "max_message_bytes", "metrics", "retries", "send_timeout"}
SUBSCRIBER = CLIENT | {"group"}
SETTINGS = {
    "Producer": SENDER,
    "TransactionProducer": SENDER | {"checker"},
    "PushConsumer": SUBSCRIBER | {"broadcast", "metrics", "options"},
    "PullConsumer": SUBSCRIBER | {"options"},
    "SimpleConsumer": SUBSCRIBER,
    "Admin": CLIENT,
}


def _client(name):
    return getattr(aio, name) if name.startswith("Async") else getattr(quiver, name)


def public_names(cls):
    return {n for n in dir(cls) if not n.startswith("_")}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_a_client_class_shows_its_api_and_nothing_else(name):
    shown = public_names(_client(name))
    assert shown - ALLOWED[name] == set(), f"{name} shows internals as public names"
    assert ALLOWED[name] - shown == set(), f"{name} lost public names"


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_a_client_instance_shows_its_api_and_its_settings_and_nothing_else(name):
    cls = _client(name)
    client = cls(namesrv="127.0.0.1:1") if name.endswith("Admin") else cls("g", namesrv="127.0.0.1:1")
    shown, allowed = public_names(client), ALLOWED[name] | SETTINGS.get(name, set())
    assert shown - allowed == set(), f"a {name} shows internals as public names"
    assert allowed - shown == set(), f"a {name} lost public names"


def test_the_instance_check_sees_a_new_public_internal():
    p = quiver.Producer("g", namesrv="127.0.0.1:1")
    p.pending = []
    assert public_names(p) - ALLOWED["Producer"] - SETTINGS["Producer"] == {"pending"}


def test_the_check_sees_a_new_public_internal():
    class Leaky(quiver.Producer):
        def pick_broker(self) -> str:
            return "broker-a"
    assert public_names(Leaky) - ALLOWED["Producer"] == {"pick_broker"}


def test_the_project_reaches_routes_and_broker_calls_through_broker_access():
    from quiver.testing import stub_cluster
    with stub_cluster() as c:
        admin = c.client(quiver.Admin)
        try:
            admin.create_topic("Surface", queues=2)
            access = broker_access(admin)
            assert isinstance(access, BrokerAccess) and access.client_id == admin.client_id
            assert [q.queue_id for q in access.route("Surface").write_queues] == [0, 1]
            assert set(access.all_broker_addrs()) == {"broker-a"}
            assert access.transport is admin._transport
        finally:
            admin.shutdown()


def test_broker_access_of_an_async_client_is_its_sync_clients():
    p = aio.AsyncProducer("pg", namesrv="127.0.0.1:1")
    assert broker_access(p) is broker_access(p.sync)


def test_broker_access_names_the_clients_id_of_now():
    from quiver.client.base import ClientBase

    class Named(ClientBase):   # as the services' clients do: an id of their own, set after the base's
        def __init__(self) -> None:
            super().__init__("127.0.0.1:1")
            self.client_id = "txn@h:1#1#2"
    assert broker_access(Named()).client_id == "txn@h:1#1#2"

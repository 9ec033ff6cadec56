"""quiver.aio keeps up with the sync SDK: every Admin method is on AsyncAdmin, awaited, with the
same parameters, so a new Admin call cannot be forgotten there."""

import inspect

from quiver.aio import AsyncAdmin
from quiver.client.admin import Admin
from quiver.client.admin_types import QueueStatus

# Admin's own calls (ClientBase's plumbing — routes, raw calls, heartbeats — is not the admin API)
ADMIN_MODULES = ("quiver.client.admin", "quiver.client.admin_inspect", "quiver.client.acl_admin")


def admin_methods(cls=Admin):
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        fn = getattr(inspect.getattr_static(cls, name), "__func__", inspect.getattr_static(cls, name))
        if inspect.isfunction(fn) and fn.__module__ in ADMIN_MODULES:
            yield name, fn


def _params(fn):
    return [(p.name, p.kind, p.default) for p in list(inspect.signature(fn).parameters.values())[1:]]


def test_every_admin_method_is_awaited_on_async_admin_with_the_same_parameters():
    missing, differ, not_async = [], [], []
    for name, fn in admin_methods():
        twin = getattr(AsyncAdmin, name, None)
        if twin is None:
            missing.append(name)
        elif not inspect.iscoroutinefunction(twin):
            not_async.append(name)
        elif _params(twin) != _params(fn):
            differ.append(name)
    assert not missing and not differ and not not_async, (
        f"AsyncAdmin lacks {missing}, has other parameters for {differ}, does not await {not_async}")


def test_the_comparison_sees_a_missing_method():
    class Fewer(Admin):
        def brand_new_call(self, topic: str) -> None:
            """A call AsyncAdmin has not got."""
    Fewer.brand_new_call.__module__ = "quiver.client.admin"
    assert "brand_new_call" in dict(admin_methods(Fewer)) and not hasattr(AsyncAdmin, "brand_new_call")
    assert len(dict(admin_methods())) >= 40


def test_async_admin_calls_reach_the_cluster():
    import asyncio

    from quiver.testing import stub_cluster
    with stub_cluster() as c:
        async def main():
            admin = c.client(AsyncAdmin)
            try:
                await admin.create_topic("Surf", queues=2)
                rows = await admin.topic_status("Surf")
                configs = await admin.topic_configs()
                purged = await admin.purge_topic("Surf")
            finally:
                await admin.shutdown()
            return rows, configs, purged
        rows, configs, purged = asyncio.run(main())
    assert [r["queue_id"] for r in rows] == [0, 1]
    assert set(rows[0]) == set(QueueStatus.__annotations__)    # the typed row is what comes back
    assert "Surf" in configs["broker-a"] and "broker-a" in purged


def test_the_progress_row_type_holds_what_the_broker_reply_carries():
    import dataclasses

    from quiver.client.admin_types import ProgressRow
    from quiver.wire.replies import ConsumeStatsRow
    assert set(ProgressRow.__annotations__) == {"broker"} | {f.name for f in dataclasses.fields(ConsumeStatsRow)}

"""A cluster with auth on (an auth dir from `quiver auth init`), real processes on loopback:
a name server, a broker and the services asked for, each started with the auth dir; the
admin's SUPER key and an Admin on it. Shared by the auth and attack tests."""

import contextlib

from quiver import Admin
from quiver.tools.local import LocalCluster
from quiver.wire.curve import Credentials, init_auth_dir


@contextlib.contextmanager
def secure_cluster(root, services=(), topics=(), broker_args=(), controller=False, brokers=None):
    """Yield (cluster, admin, admin_creds); `services` are (role, module, *args) tuples, started
    after the topics are made; `controller`: the name server also runs the failover controller (a
    Raft group of one); `brokers`: fn(cluster) starting the brokers and returning them (default:
    one broker, broker-a, with `broker_args`). Setup waits until every broker is registered."""
    auth = str(root / "auth")
    admin_creds = init_auth_dir(auth)
    c = LocalCluster(str(root / "cluster"), auth_dir=auth)
    admin = None
    try:
        if controller:
            c.add_controllers(1)
        else:
            c.add_namesrv()
        c.wait()
        started = brokers(c) if brokers is not None else [c.add_broker(None, None, *broker_args)]
        c.wait()
        c.wait_registered(len(started))
        admin = Admin(c.namesrv, credentials=admin_creds)
        admin.start()
        for topic in topics:
            admin.create_topic(topic, queues=1)
        for role, module, *args in services:
            c.add_service(role, module, *args)
        c.wait()
        yield c, admin, admin_creds
    finally:
        if admin is not None:
            admin.shutdown()
        for svc in c.services:
            svc.kill()


def add_user(admin: Admin, name: str, *grants) -> Credentials:
    """A NORMAL user with exactly `grants` ((resource, [actions]) pairs)."""
    creds = admin.acl_add_user(name)
    for resource, actions in grants:
        admin.acl_grant(name, resource, actions)
    return creds

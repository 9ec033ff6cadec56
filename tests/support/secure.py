"""A cluster with auth on (an auth dir from `quiver auth init`), real processes on loopback:
a name server, a broker and the services asked for, each started with the auth dir; the
admin's SUPER key and an Admin on it. Shared by the auth tests that need more than
test_auth.py's name server and broker."""

import contextlib

from quiver import Admin
from quiver.tools.local import LocalCluster
from quiver.wire.curve import Credentials, init_auth_dir


@contextlib.contextmanager
def secure_cluster(root, services=(), topics=()):
    """Yield (cluster, admin, admin_creds); `services` are (role, module, *args) tuples."""
    auth = str(root / "auth")
    admin_creds = init_auth_dir(auth)
    c = LocalCluster(str(root / "cluster"), auth_dir=auth)
    admin = None
    try:
        c.add_namesrv()
        c.wait()
        c.add_broker(None, None)
        c.wait()
        c.wait_registered(1)
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

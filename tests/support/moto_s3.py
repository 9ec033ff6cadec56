"""An S3-compatible server for tests: moto in server mode, a process on loopback, stopped by PID."""

import contextlib
import subprocess
import sys

from quiver.tools.local import free_port

from .waiting import wait_for

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@contextlib.contextmanager
def moto_server(setenv, buckets=()):
    """Yields the endpoint URL, `buckets` created; `setenv(name, value)` (a test's
    monkeypatch.setenv) sets the AWS_* variables every process started meanwhile inherits
    (the broker's and the restorer's credentials)."""
    for k, v in CREDENTIALS.items():
        setenv(k, v)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        import boto3
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")

        def up():
            try:
                client.list_buckets()
                return True
            except Exception:
                return False
        wait_for(up, 60, "the moto server to answer", interval=0.2)
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        yield endpoint
    finally:
        proc.kill()
        proc.wait(10)

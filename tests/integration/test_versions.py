"""Format and protocol versions with real processes: a broker refuses a store of a newer
incompatible format (exit code and one line), writes FORMAT at first start, and answers a
request of another protocol version with VERSION_NOT_SUPPORTED to that very request."""

import json
import os
import subprocess
import sys

import orjson
import zmq

from quiver import __version__
from quiver.tools.local import free_port
from quiver.wire import protocol
from quiver.wire.codes import ResponseCode
from quiver_broker.data_format import CURRENT, EXIT_FORMAT


def test_a_broker_refuses_a_store_of_a_newer_incompatible_format(tmp_path):
    store = tmp_path / "data" / "broker-x"
    store.mkdir(parents=True)
    (store / "FORMAT").write_text(json.dumps({"format": CURRENT + 1, "oldest_reader": CURRENT + 1,
                                              "written_by": "9.0.0"}))
    proc = subprocess.run([sys.executable, "-m", "quiver_broker", "--listen", f"127.0.0.1:{free_port()}",
                           "--namesrv", "127.0.0.1:1", "--data-dir", str(tmp_path / "data"), "--broker-name",
                           "broker-x"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_FORMAT, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    for fragment in (f"format {CURRENT + 1}", "9.0.0", __version__, f"format {CURRENT})", "restore a backup"):
        assert fragment in last, (fragment, last)
    assert not os.path.exists(store / "commitlog")   # refused before anything was opened


def test_first_start_writes_format_and_a_request_of_another_version_is_refused_by_id(cluster):
    broker = next(s for s in cluster.services if s.role == "broker")
    store = os.path.join(cluster.data_dir, "broker", "broker-a")
    with open(os.path.join(store, "FORMAT")) as f:
        assert json.load(f) == {"format": CURRENT, "oldest_reader": 1, "written_by": __version__}
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 10_000)
    sock.connect(f"tcp://{broker.addr}")
    try:
        sock.send_multipart([b"QV2", orjson.dumps({"c": 9000, "id": 77, "ext": {"v": 2}})])
        env = protocol.decode(sock.recv_multipart())
    finally:
        sock.close(0)
    assert (env.code, env.id) == (ResponseCode.VERSION_NOT_SUPPORTED, 77)
    assert "QV2" in env.remark and "QV1" in env.remark

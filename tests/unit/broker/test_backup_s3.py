"""Backups uploaded to an S3-compatible server (moto's, on loopback) and restored from it: a broker
with a tiered store comes back reading its remote-only segments; a prefix without a manifest, an
object changed in the store and a prefix holding a backup already are refused, saying which."""

import json
import os
import types

import pytest

from quiver.wire.codes import ResponseCode
from quiver_broker import backup as backup_mod
from quiver_broker import backup_s3
from quiver_broker.backup import Backups
from quiver_broker.restore import RestoreError, restore
from quiver_broker.tiered_store import FileStore

from support.waiting import wait_for
from test_tiered_storage import fill, open_store, raw, upload_all

BUCKET = "quiver-backups"


@pytest.fixture(scope="module")
def moto_endpoint():
    from moto.server import ThreadedMotoServer
    mp = pytest.MonkeyPatch()
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        mp.setenv(k, v)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    endpoint = "http://127.0.0.1:%d" % server.get_host_and_port()[1]
    try:
        import boto3
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        server.stop()
        mp.undo()


def _backups(store, root, endpoint) -> Backups:
    meta = types.SimpleNamespace(topics={"T": {"read": 1, "write": 1, "perm": 6, "sysflag": 0, "order": False}},
                                 groups={}, offsets={("g", "T", 0): 5})
    return Backups(str(root), store, meta, None, {"broker": "broker", "cluster": "c", "broker_id": 0}, None,
                   s3=(endpoint, ""))


def _backup(store, root, url, endpoint) -> tuple:
    """A snapshot of `store` planned (then written out and uploaded by _upload, as the broker's worker does)."""
    b = _backups(store, root, endpoint)
    return b, b.start(url.split("/", 3)[-1], url)


def _upload(b, plan) -> int:
    backup_mod.write_out(plan)
    try:
        return b._upload(plan)
    finally:
        backup_mod._close(plan)


def test_tiered_broker_backed_up_to_s3_restores_reading_remote_only_segments(tmp_path, moto_endpoint):
    remote = FileStore(str(tmp_path / "tiered"))
    s, t = open_store(tmp_path / "src", remote, local_retention_bytes=0)
    fill(s)
    upload_all(t)
    assert s.clean_expired() > 0 and len(s.commit_log.segments) == 1
    before = raw(s)
    url = f"s3://{BUCKET}/brokers/a/one"
    b, plan = _backup(s, tmp_path / "backups", url, moto_endpoint)
    fill(s, 20)   # written after the cut: not in the backup
    assert _upload(b, plan) > 0
    taken = sorted(p.rel for p in plan.parts if p.rel.startswith("tiered/"))
    assert taken == [f"tiered/{n}" for n in sorted(os.listdir(t.dir)) if n.endswith(".json")] and taken
    assert plan.manifest["tiered"]["segments"] == len(taken) and plan.manifest["tiered"]["remote_min"] == 0
    assert os.listdir(tmp_path / "backups") == []   # the staged copy is gone once uploaded
    s.close()

    summary = restore(url, str(tmp_path / "data"), s3=(moto_endpoint, ""))
    assert summary["offsets"] == 1 and summary["broker"] == "broker"
    r, _ = open_store(tmp_path / "data", remote, local_retention_bytes=0)
    try:
        assert r.commit_log.min_offset > 0   # the older segments exist only in the tiered store
        assert raw(r) == before              # every record up to the cut, byte for byte, none after
    finally:
        r.close()


def test_s3_backup_without_manifest_or_with_a_changed_object_is_refused(tmp_path, moto_endpoint):
    remote = FileStore(str(tmp_path / "tiered"))
    s, _ = open_store(tmp_path / "src", remote)
    fill(s, 50)
    url = f"s3://{BUCKET}/brokers/b/two"
    b, plan = _backup(s, tmp_path / "backups", url, moto_endpoint)
    _upload(b, plan)
    with pytest.raises(backup_s3.BackupExists):   # a prefix holds one backup
        _upload(*_backup(s, tmp_path / "backups", url, moto_endpoint))
    s.close()
    objects = backup_s3.open_objects(url, moto_endpoint)
    manifest = backup_s3.read_manifest(objects)
    seg = next(rel for rel in manifest["objects"] if rel.startswith("commitlog/"))
    data = bytearray(objects.get_range(seg, 0, manifest["objects"][seg][0]))
    data[100] ^= 0x5A
    objects.put_bytes(seg, bytes(data))   # same size, other bytes

    with pytest.raises(RestoreError, match=f"{seg} holds .* SHA-256 .* the backup is damaged"):
        restore(url, str(tmp_path / "data"), s3=(moto_endpoint, ""))
    assert os.listdir(tmp_path / "data") == []   # nothing half-checked left behind

    objects.put_bytes(backup_s3.MANIFEST, json.dumps({"objects": {}}).encode())
    objects.client.delete_object(Bucket=BUCKET, Key="brokers/b/two/BACKUP.json")   # an upload cut short
    with pytest.raises(RestoreError, match="no BACKUP.json: not a finished backup"):
        restore(url, str(tmp_path / "data"), s3=(moto_endpoint, ""))


@pytest.mark.parametrize("rel", ["../x", "/abs", "a//b", "commitlog/..", "", "a/./b"])
def test_object_names_outside_the_layout_are_refused(rel):
    assert backup_s3.key_problem(rel)


def test_object_names_of_the_layout_pass():
    for rel in ("commitlog/00000000000000000000", "consumequeue/%RETRY%g1/0/00000000000000000000",
                "tiered/00000000000000008192.json", "index/20261129031500000", "checkpoint", "BACKUP.json"):
        assert backup_s3.key_problem(rel) is None


class _Req:
    def __init__(self, **args):
        self.args = types.SimpleNamespace(**args)
        self.replies = []

    def reply(self, code, remark, reply):
        self.replies.append((code, remark, reply))


def _request(b, **args):
    req = _Req(**{"endpoint": None, **args})
    b.reply_later = lambda fn, *a: fn(*a)
    b.backup(req)
    wait_for(lambda: req.replies, 60, "the backup's answer")
    return req.replies[0]


def test_the_broker_answers_where_it_uploaded_or_why_not(tmp_path, moto_endpoint):
    s, _ = open_store(tmp_path / "src", FileStore(str(tmp_path / "tiered")))
    fill(s, 30)
    b = _backups(s, tmp_path / "backups", moto_endpoint)
    try:
        url = f"s3://{BUCKET}/brokers/c/three"
        code, _, done = _request(b, name="brokers/c/three", url=url)
        assert code == ResponseCode.SUCCESS and done.path == url and done.copied_bytes > 0
        code, remark, _ = _request(b, name="brokers/c/three", url=url)
        assert code == ResponseCode.INVALID_PARAMETER and "holds a backup already" in remark
        b.s3 = ("http://127.0.0.1:9", "")   # nothing listens there
        code, remark, _ = _request(b, name="brokers/c/four", url=f"s3://{BUCKET}/brokers/c/four")
        assert code == ResponseCode.SYSTEM_ERROR and "have no BACKUP.json, so no restore takes them" in remark
        assert os.listdir(tmp_path / "backups") == [] and b.running is None
    finally:
        s.close()

"""Backup of a broker under load to an S3-compatible server (moto's, a process on loopback),
restore into a fresh data dir, start a broker on it: every message the snapshot covered reads back
byte for byte, nothing past it, offsets as snapshotted. The broker keeps its older segments in a
tiered store only, and the restored one reads them from there. A backup to a directory taken
right before holds the same CommitLog bytes (or the tiered store does) up to its own cut."""

import json
import os
import subprocess
import sys
import threading

import boto3
import pytest

from quiver import Admin, Message, PullConsumer, Producer
from quiver.tools.local import LocalCluster
from support.fuzz_cluster import status
from support.moto_s3 import moto_server
from support.waiting import wait_for

QUIVER = os.path.join(os.path.dirname(sys.executable), "quiver")
SMALL_FILES = ("--segment-bytes", "65536", "--cq-entries-per-file", "200", "--index-slots", "512",
               "--index-entries", "400")   # several sealed files of each kind: hard links are exercised
BUCKET = "quiver-backups"
PRE = 600   # sent before the load: segments enough to be uploaded and dropped locally


def _tiered(endpoint: str) -> tuple:
    return ("--tiered-store", f"s3://{BUCKET}/tiered/a", "--s3-endpoint", endpoint, "--local-retention-bytes", "0",
            "--clean-interval-ms", "300", "--flush-interval-ms", "100")


def _quiver(*args) -> dict:
    proc = subprocess.run([QUIVER, *args, "-o", "json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (args, proc.returncode, proc.stderr[-3000:])
    return json.loads(proc.stdout)


def _read_all(namesrv: str, group: str, topic: str, want: int) -> tuple[dict, list]:
    got: dict = {}

    def more():
        for m in c.poll(0.5):
            got[(m.queue_id, m.queue_offset)] = m.body
        return len(got) >= want
    with PullConsumer(group, namesrv=namesrv, consume_from="first") as c:
        c.subscribe(topic)
        wait_for(more, 60, f"{want} messages read back")
        extra = c.poll(1.0)   # nothing past the cut
    return got, extra


def _offsets(admin: Admin, group: str) -> dict:
    return {r["queue_id"]: r["consumer_offset"] for r in admin.consumer_progress(group)}


def _commit_logs(store: str) -> dict:
    d = os.path.join(store, "commitlog")
    return {n: open(os.path.join(d, n), "rb").read() for n in os.listdir(d)}


@pytest.mark.slow
def test_backup_under_load_to_s3_restores_every_covered_message_and_the_offsets(make_cluster, tmp_path,
                                                                                 monkeypatch):
    with moto_server(monkeypatch.setenv, [BUCKET]) as endpoint:
        _backup_and_restore(make_cluster, tmp_path, endpoint)


def _backup_and_restore(make_cluster, tmp_path, endpoint):
    backups = tmp_path / "backups"
    c = make_cluster(broker_args=("--backup-dir", str(backups), *SMALL_FILES, *_tiered(endpoint)))
    broker = next(s for s in c.services if s.role == "broker")
    admin = Admin(namesrv=c.namesrv)
    admin.create_topic("Bk", queues=4)
    acked, stop = [], threading.Event()   # (SendResult, body) of every acked send
    with Producer("bk-p", namesrv=c.namesrv) as p:
        def send(body: bytes, **kw) -> None:
            acked.append((p.send(Message("Bk", body, **kw)), body))
        for i in range(PRE):
            send(os.urandom(16) + f"pre-{i}".encode() * 20)
        wait_for(lambda: status(broker.addr, timeout=5)["store"]["min_phys_offset"] > 0, 60,
                 "the oldest segments uploaded and dropped locally")
        with PullConsumer("bk-cg", namesrv=c.namesrv, consume_from="first") as pc:
            pc.subscribe("Bk")
            seen = []
            wait_for(lambda: seen.extend(pc.poll(0.5)) or len(seen) >= 80, 30, "80 messages consumed")
            pc.commit()
            wait_for(lambda: sum(_offsets(admin, "bk-cg").values()) >= 80, 30, "the commit stored")
        committed = _offsets(admin, "bk-cg")

        def produce():
            i = 0
            while not stop.is_set():
                send(os.urandom(8) + f"load-{i}".encode() * 30, keys=[f"k{i}"])
                i += 1
        sender = threading.Thread(target=produce)
        sender.start()
        try:
            wait_for(lambda: len(acked) > PRE + 100, 30, "the load running")
            before = len(acked)   # acked before the backup was asked for: every one must be in it
            local = _quiver("--namesrv", c.namesrv, "broker", "backup", "--broker", broker.addr, "--to", "nightly/one")
            done = _quiver("--namesrv", c.namesrv, "broker", "backup", "--broker", broker.addr,
                           "--to", f"s3://{BUCKET}/backups/one", "--s3-endpoint", endpoint)
            after = len(acked)
            wait_for(lambda: len(acked) > after + 50, 30, "sends going on after the backup")
        finally:
            stop.set()
            sender.join(30)
    admin.shutdown()
    broker.kill()   # the restored broker replaces it (both would upload to the tiered store)
    cut = done["cut_offset"]
    assert done["path"] == f"s3://{BUCKET}/backups/one" and done["linked_files"] > 0
    assert os.listdir(backups) == ["nightly"]   # the staged copy of the upload is gone
    covered = {(r.queue_id, r.queue_offset): body for r, body in acked if r.commit_log_offset < cut}
    assert all(r.commit_log_offset < cut for r, _ in acked[:before])
    assert len(covered) < len(acked)   # the load went on past the cut

    fresh = LocalCluster(str(tmp_path / "fresh"))   # its broker's --data-dir is fresh/broker
    restored = _quiver("broker", "restore", "--from", done["path"], "--s3-endpoint", endpoint,
                       "--data-dir", os.path.join(fresh.data_dir, "broker"))
    assert restored["broker"] == "broker-a" and restored["offsets"] >= len(committed)
    # the directory backup, taken before: the same CommitLog bytes, those dropped since in the tiered store
    assert local["cut_offset"] <= cut and local["path"] == str(backups / "nightly" / "one")
    early, late = _commit_logs(local["path"]), _commit_logs(restored["store"])
    tiered = boto3.client("s3", endpoint_url=endpoint)
    for n, b in early.items():
        later = late.get(n) or tiered.get_object(Bucket=BUCKET, Key=f"tiered/a/commitlog/{n}")["Body"].read()
        assert later[:len(b)] == b, n
    try:
        fresh.add_namesrv()
        fresh.wait()
        fresh.add_broker(None, "broker-a", *SMALL_FILES, *_tiered(endpoint))
        fresh.wait()
        fresh.wait_registered(1)
        store = status(fresh.services[-1].addr, timeout=5)["store"]
        assert store["min_phys_offset"] > 0 and store["tiered"]["remote_segments"] > 0   # remote-only segments
        with Admin(namesrv=fresh.namesrv) as a2:
            assert _offsets(a2, "bk-cg") == committed
            # the index past the last full index file is rebuilt at the first start
            assert [m.body for m in a2.query_by_key("Bk", "k3")] == [acked[PRE + 3][1]]
        got, extra = _read_all(fresh.namesrv, "bk-verify", "Bk", len(covered))
        assert extra == []
        assert got == covered   # byte for byte, each at its queue offset, the oldest from the tiered store
        assert status(fresh.services[-1].addr, timeout=5)["store"]["tiered"]["background_fetches"] > 0
    finally:
        for s in fresh.services:
            s.kill()

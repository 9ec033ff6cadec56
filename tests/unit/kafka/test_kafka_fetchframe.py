"""A Fetch answer's frame packed by hand (fetchframe.py) is byte for byte what kio writes."""

import pytest

from quiver_kafka import fetchframe, protocol
from quiver_kafka.protocol import FETCH, Request

VALUES = {"throttle_time": 3, "error_code": 0, "session_id": 0, "responses": [
    {"topic": "orders", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 1 << 40, "last_stable_offset": 1 << 40,
         "log_start_offset": 2, "aborted_transactions": None, "preferred_read_replica": -1,
         "records": bytearray(b"batch-0" * 100)},
        {"partition_index": 1, "error_code": 1, "high_watermark": -1, "last_stable_offset": -1,
         "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1, "records": b""},
        {"partition_index": 2, "error_code": 0, "high_watermark": 7, "last_stable_offset": 7,
         "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1, "records": None}]},
    {"topic": "zażółć", "partitions": [
        {"partition_index": 5, "error_code": 0, "high_watermark": 9, "last_stable_offset": 9,
         "log_start_offset": 1, "aborted_transactions": None, "preferred_read_replica": -1,
         "records": memoryview(b"batch-5")}]},
    {"topic": "empty", "partitions": []}]}


@pytest.mark.parametrize("version", range(fetchframe.VERSIONS[0], fetchframe.VERSIONS[1] + 1))
def test_every_served_fetch_version_packs_as_kio_writes_it(version):
    req = Request(FETCH, version, 77, None, None, False)
    assert protocol.SUPPORTED[FETCH] == fetchframe.VERSIONS
    parts = fetchframe.frame(req, VALUES)
    assert b"".join(bytes(p) for p in parts) == bytes(protocol.response_frame(req, protocol.response(req, VALUES)))
    assert VALUES["responses"][0]["partitions"][0]["records"] in parts   # referenced, not copied


def test_what_it_does_not_pack_is_left_to_kio():
    req = Request(FETCH, 11, 1, None, None, False)
    assert fetchframe.frame(req, {"error_code": protocol.UNKNOWN_SERVER_ERROR}) is None
    aborted = {"responses": [{"topic": "t", "partitions": [{**VALUES["responses"][0]["partitions"][0],
                                                             "aborted_transactions": []}]}]}
    assert fetchframe.frame(req, aborted) is None
    assert fetchframe.frame(Request(FETCH, 12, 1, None, None, True), VALUES) is None

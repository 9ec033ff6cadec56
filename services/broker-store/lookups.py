"""Read-side lookups of the broker store: by CommitLog offset (msgId), by key, by time.

Pure functions over the store's parts (CommitLog, IndexFile service, a ConsumeQueue);
the store's façade calls them. Every record found is CRC-checked, and a key found in
the index is rechecked on the record (hashes only narrow the search).
"""

from quiver.wire import record
from quiver.wire.properties import KEYS, UNIQ_KEY
from quiver.wire.property_string import get_property

from .index_file import key_hash, prefix_crc


def lookup(commit_log, phys_offset: int) -> record.Record | None:
    raw = commit_log.read_record(phys_offset)
    if raw is None:
        return None
    try:
        rec = record.decode_at(raw, 0, check_crc=True)
    except record.BadRecord:
        return None
    rec.stored = raw  # VIEW_MESSAGE and QUERY_MESSAGE serve the stored bytes
    return rec if rec.phys_offset == phys_offset else None


def query_by_key(commit_log, index, topic: str, key: str, max_num: int, begin_ms: int,
                 end_ms: int) -> list[record.Record]:
    h = key_hash(prefix_crc(topic), key)
    out: list[record.Record] = []
    seen: set[int] = set()
    for phys in index.query(h, begin_ms, end_ms):
        if phys in seen:
            continue
        seen.add(phys)
        rec = lookup(commit_log, phys)
        # The hash only narrows the search: different keys share slots and hashes.
        if rec is None or rec.topic != topic or not begin_ms <= rec.store_ts <= end_ms:
            continue
        keys = get_property(rec.props, KEYS) or ""
        if get_property(rec.props, UNIQ_KEY) == key or key in keys.split(" "):
            out.append(rec)
            if len(out) >= max_num:
                break
    return out


def search_offset_by_time(commit_log, cq, visible_max: int, ts_ms: int) -> int:
    """First logical offset whose store time is >= ts_ms (binary search over the queue)."""
    lo, hi = cq.min_offset, visible_max
    while lo < hi:
        mid = (lo + hi) // 2
        e = cq.entry(mid)
        ts = commit_log.store_ts_at(e[0]) if e else None
        if ts is not None and ts >= ts_ms:
            hi = mid
        else:
            lo = mid + 1
    return lo

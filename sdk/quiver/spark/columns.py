"""Pull replies as Arrow record batches, column by column: the executor's hot path.

A pull reply body is split into one list per column in a single pass
(`record_columns`, with a compiled twin in quiver._speedups) and each list
becomes one Arrow array (`to_arrow`): no Python object per row survives, no
per-row conversion. The properties map and the keys list are built from flat
name / value lists plus offsets, never from dicts.

Owns the row shape the source reads (SCHEMA, ARROW_SCHEMA, their column order)
and that conversion. Does not own the record layout (quiver.wire.record: the
reference decodes through `record.decode_fields`), the pulls (reader.py) nor
Spark itself: this module imports pyarrow only, so it is testable without Spark.
"""

from collections.abc import Callable
from typing import cast

# pyarrow ships no type information (no py.typed, no stubs): its names are Any here
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from quiver.wire.ids import offset_msg_id
from quiver.wire import record
from quiver.wire.speedups import fast
from quiver.wire.properties import KEYS, TAGS, UNIQ_KEY
from quiver.wire.property_string import NAME_SEP, PROP_SEP

SCHEMA = ("topic string, broker string, queue_id int, queue_offset bigint, msg_id string, tags string, "
          "keys array<string>, properties map<string,string>, body binary, born_timestamp timestamp, "
          "store_timestamp timestamp")
_TS = pa.timestamp("us", tz="UTC")
_TS_MS = pa.timestamp("ms", tz="UTC")
ARROW_SCHEMA = pa.schema([("topic", pa.string()), ("broker", pa.string()), ("queue_id", pa.int32()),
                          ("queue_offset", pa.int64()), ("msg_id", pa.string()), ("tags", pa.string()),
                          ("keys", pa.list_(pa.string())), ("properties", pa.map_(pa.string(), pa.string())),
                          ("body", pa.binary()), ("born_timestamp", _TS), ("store_timestamp", _TS)])
# what record_columns returns, in order: per record, except prop_ends (properties counted so
# far after each record) and prop_names / prop_values (every property of every record, flat)
COLUMNS = ("topic", "queue_id", "queue_offset", "phys_offset", "born_ts", "store_ts", "store_host", "body",
           "tags", "uniq", "keys", "prop_ends", "prop_names", "prop_values")
Columns = tuple[list[str], list[int], list[int], list[int], list[int], list[int], list[bytes], list[bytes],
                list[str | None], list[str | None], list[str | None], list[int], list[str], list[str]]


@fast
def record_columns(buf: bytes) -> Columns:
    """Every record of a pull reply body as the lists COLUMNS names (one pass, BLANKs skipped).

    Properties lose the store's __CRC32# (record.strip_prop_crc); empty items are
    skipped; tags / uniq / keys are the last TAGS / UNIQ_KEY / KEYS property, None
    when absent. A malformed body raises record.BadRecord."""
    cols = cast(Columns, tuple([] for _ in COLUMNS))
    (topics, qids, qoffs, poffs, born, store, hosts, bodies, tags, uniqs, keys, ends, names, values) = cols
    strip: Callable[[str], str] = record.strip_prop_crc
    sep, name_sep = PROP_SEP, NAME_SEP
    for f in record.decode_fields(buf):
        topics.append(f.topic)
        qids.append(f.queue_id)
        qoffs.append(f.queue_offset)
        poffs.append(f.phys_offset)
        born.append(f.born_ts)
        store.append(f.store_ts)
        hosts.append(f.store_host)
        bodies.append(f.body)
        tag: str | None = None
        uniq: str | None = None
        key: str | None = None
        for item in strip(f.props).split(sep):
            if item:
                k, _, v = item.partition(name_sep)
                names.append(k)
                values.append(v)
                if k == TAGS:
                    tag = v
                elif k == UNIQ_KEY:
                    uniq = v
                elif k == KEYS:
                    key = v
        tags.append(tag)
        uniqs.append(uniq)
        keys.append(key)
        ends.append(len(names))
    return cols


def _offsets(ends: list[int]) -> pa.Array:
    return pa.array([0, *ends], pa.int32())


def _keys(keys: list[str | None], n: int) -> pa.Array:
    """list<string> from KEYS values (space-separated), as offsets + one flat list."""
    if not any(keys):
        return pa.ListArray.from_arrays(pa.array([0] * (n + 1), pa.int32()), pa.array([], pa.string()))
    flat: list[str] = []
    ends = []
    for k in keys:
        if k:
            flat.extend(k.split(" "))
        ends.append(len(flat))
    return pa.ListArray.from_arrays(_offsets(ends), pa.array(flat, pa.string()))


def _timestamps(ms: list[int]) -> pa.Array:
    return pa.array(ms, _TS_MS).cast(_TS)


def to_arrow(cols: Columns, broker: str) -> pa.RecordBatch:
    """One RecordBatch of ARROW_SCHEMA from record_columns' lists, the rows of `broker`."""
    (topics, qids, qoffs, poffs, born, store, hosts, bodies, tags, uniqs, keys, ends, names, values) = cols
    n = len(qoffs)
    msg_ids = uniqs if all(uniqs) else [u or offset_msg_id(h, p) for u, h, p in zip(uniqs, hosts, poffs)]
    arrays = [
        pa.array(topics, pa.string()),
        pa.repeat(pa.scalar(broker, pa.string()), n),
        pa.array(qids, pa.int32()),
        pa.array(qoffs, pa.int64()),
        pa.array(msg_ids, pa.string()),
        pa.array(tags, pa.string()),
        _keys(keys, n),
        pa.MapArray.from_arrays(_offsets(ends), pa.array(names, pa.string()), pa.array(values, pa.string())),
        pa.array(bodies, pa.binary()),
        _timestamps(born),
        _timestamps(store),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def select(batch: pa.RecordBatch, lo: int, end: int, wanted: frozenset[str] | None) -> pa.RecordBatch:
    """The rows of `batch` with a queue offset in [lo, end) and, unless `wanted` is None, a tag
    in it (the broker filtered by tag hash: a hash collision is dropped here by string)."""
    qoff = batch.column("queue_offset")
    keep = pc.and_(pc.greater_equal(qoff, lo), pc.less(qoff, end))
    if wanted is not None:
        keep = pc.and_(keep, pc.is_in(batch.column("tags"), pa.array(sorted(wanted), pa.string())))
    return batch.filter(pc.fill_null(keep, False))

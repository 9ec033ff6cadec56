"""What the socket fuzzer sends (tests/faults/test_fuzz_*.py): frames built from the requests
of fuzz_requests.py and the poison of fuzz_values.py. No sockets here (fuzz_pipe.py sends),
no processes (fuzz_cluster.py starts them).

A frame is what `quiver.wire.protocol.request` would build, or a broken version of it::

    [b"QV1", header {"c": code, "id": n, "ext": {...}}, body 0, body 1, ...]

`FrameSource(rng, ctx)` yields (frames, label, request_id) in phases:

- systematic(): every request code in codes.py x every field x every poison value (type
  confusion and out of range), every field dropped, nested fields (lists of entries, maps)
  poisoned node by node, bodies of the wrong number and size, properties with system
  meaning poisoned, then envelope-level garbage (version, JSON, c/id, "r", frame counts);
- random(): 1-3 mutations of a random code's request, until a budget;
- oversized(): frames past any sane cap (each sent on its own connection);
- paths(): every string field and map key of every request replaced by a path-shaped name;
- offset_poison(), heartbeat_poison(), reput_then_delete(): one poisoning class at a time,
  each followed by its control in the tests.
"""

import random
from dataclasses import dataclass

from quiver.wire.codes import RequestCode

from .fuzz_requests import Context, base_table, field_keys, props_string, schema_keys
from .fuzz_values import (MALFORMED_PROPERTIES, POISON, PROPERTY_VALUES, SQL_POISON, SYSTEM_PROPERTIES,
                          UNKNOWN_CODES, VERSION, Raw, dumps, label_of, path_names)

__all__ = ["FrameSource", "Context", "path_names"]

# ---- nested structure helpers -------------------------------------------------------------

def leaf_paths(value, prefix=()) -> list[tuple]:
    """Paths (tuples of index / key) to every node below a list or dict, leaves and inner nodes."""
    out = []
    if isinstance(value, list):
        for i, v in enumerate(value):
            out.append(prefix + (i,))
            out += leaf_paths(v, prefix + (i,))
    elif isinstance(value, dict):
        for k, v in value.items():
            out.append(prefix + (k,))
            out += leaf_paths(v, prefix + (k,))
    return out


def string_paths(value, prefix=()) -> list[tuple]:
    """Paths to string leaves, and ("<key>", k) markers for map keys (names live there too)."""
    out = []
    if isinstance(value, str):
        out.append(prefix)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += string_paths(v, prefix + (i,))
    elif isinstance(value, dict):
        for k, v in value.items():
            out.append(prefix + (KeyOf(k),))
            out += string_paths(v, prefix + (k,))
    return out


@dataclass(frozen=True)
class KeyOf:
    """A path step that renames a map key instead of replacing its value."""
    key: str


def replaced(value, path: tuple, new):
    """A copy of `value` with the node at `path` replaced by `new` (a KeyOf step renames the key)."""
    if not path:
        return new
    step, rest = path[0], path[1:]
    if isinstance(step, KeyOf):
        return {(new if k == step.key else k): v for k, v in value.items()}
    if isinstance(value, list):
        out = list(value)
        out[step] = replaced(value[step], rest, new)
        return out
    out = dict(value)
    out[step] = replaced(value[step], rest, new)
    return out


def _path_label(path) -> str:
    return ".".join(f"<{s.key}>" if isinstance(s, KeyOf) else str(s) for s in path)


# ---- frames ---------------------------------------------------------------------------------

class FrameSource:
    """Yields (frames, label, request_id or None); ids are unique per source."""

    def __init__(self, rng: random.Random, ctx: Context, sql_codes=(RequestCode.PULL_MESSAGE,
                                                                   RequestCode.CHECK_CLIENT_CONFIG)):
        self.rng = rng
        self.ctx = ctx
        self.table = base_table(ctx)
        self.schemas = schema_keys()
        self.keys = field_keys(self.table, self.schemas)
        self.sql_codes = {int(c) for c in sql_codes}
        self._next_id = 1000

    def invalid_bases(self) -> list[str]:
        """Codes whose base request the schema refuses (a fuzz of their fields would stop at the
        first field instead of reaching the handler): a harness problem, printed by the tests."""
        try:
            from quiver.wire.requests import SCHEMAS
        except ImportError:
            return []
        bad = []
        for code, schema in SCHEMAS.items():
            try:
                schema.decode(self.table.get(int(code), ({}, []))[0])
            except Exception as exc:  # whatever the schema raises names the field
                bad.append(f"{RequestCode(code).name}: {exc}")
        return bad

    def key_source(self) -> str:
        have = set(self.schemas)
        return f"schema keys for {len(have)} codes, grep table for {sum(int(c) not in have for c in RequestCode)}"

    def rid(self) -> int:
        self._next_id += 1
        return self._next_id

    def frame(self, code: int, ext, bodies, label: str, header_extra: dict | None = None):
        rid = self.rid()
        head = {"c": code, "id": rid}
        if ext is not None:
            head["ext"] = ext
        if header_extra:
            head.update(header_extra)
        return [VERSION, dumps(head), *bodies], label, rid

    def base(self, code: int) -> tuple[dict, list]:
        ext, bodies = self.table.get(code, ({}, []))
        return dict(ext), list(bodies)

    # ---- systematic ------------------------------------------------------------------------

    def systematic(self):
        for code in RequestCode:
            name = code.name
            code = int(code)
            ext, bodies = self.base(code)
            yield self.frame(code, ext, bodies, f"{name}:base")
            yield self.frame(code, None, bodies, f"{name}:no-ext")
            for key in self.keys[code]:
                for vlabel, value in POISON:
                    yield self.frame(code, {**ext, key: value}, bodies, f"{name}:{key}={vlabel}")
                if key in ext:
                    yield self.frame(code, {k: v for k, v in ext.items() if k != key}, bodies, f"{name}:-{key}")
                if code in self.sql_codes and key == "sub":
                    for expr in SQL_POISON:
                        yield self.frame(code, {**ext, key: expr}, bodies, f"{name}:sub=sql[{len(expr)}]")
            for key, value in ext.items():  # nested fields: every node, a sample of poisons each
                for path in leaf_paths(value):
                    for vlabel, poison in self.rng.sample(POISON, 12):
                        yield self.frame(code, {**ext, key: replaced(value, path, poison)}, bodies,
                                         f"{name}:{key}.{_path_label(path)}={vlabel}")
            yield from self._bodies(code, name, ext, bodies)
        yield from self.properties()
        yield from self.envelope()

    def _bodies(self, code, name, ext, bodies):
        for blabel, bs in (("0", []), ("empty", [b""]), ("3", [b"x"] * 3), ("64KiB", [b"\x00" * 65_536]),
                           ("200", [b"y"] * 200)):
            yield self.frame(code, ext, bs, f"{name}:bodies={blabel}")
        if "m" in ext:
            for llabel, lengths in (("ok", [len(b) for b in bodies]), ("neg", [-1, len(b"".join(bodies)) + 1]),
                                    ("short", [1]), ("huge", [2**40]), ("str", ["1"]), ("empty", [])):
                yield self.frame(code, {**ext, "l": lengths}, [b"".join(bodies)], f"{name}:l={llabel}")

    def properties(self):
        """Message properties with system meaning poisoned, on sends (plain and half) and re-puts."""
        ctx = self.ctx
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SCHEDULE_REPUT):
            ext, bodies = self.base(int(code))
            for sf in ((0, 4) if code == RequestCode.SEND_MESSAGE else (0,)):
                for prop in SYSTEM_PROPERTIES:
                    for value in PROPERTY_VALUES:
                        extra = {"UNIQ_KEY": f"{self.rng.getrandbits(128):032X}"}
                        if sf:
                            extra.update(TRAN_MSG="true", PGROUP=ctx.pgroup)
                        if code == RequestCode.SCHEDULE_REPUT:
                            extra.update(REAL_TOPIC=ctx.topic, REAL_QID="0")
                        extra[prop] = value
                        props = props_string(ctx, extra)
                        yield self._with_props(code, ext, bodies, props, sf,
                                               f"{code.name}:sf={sf}:{prop}={value[:12]!r}")
                for props in MALFORMED_PROPERTIES:
                    yield self._with_props(code, ext, bodies, props, sf,
                                           f"{code.name}:sf={sf}:props={props[:12]!r}")

    def _with_props(self, code, ext, bodies, props, sf, label):
        m = [list(e) for e in ext["m"]]
        m[0][1] = props
        new = {**ext, "m": m}
        if code == RequestCode.SEND_MESSAGE:
            new["sf"] = sf
        return self.frame(int(code), new, bodies, label)

    def envelope(self):
        """Garbage below the request level: version, JSON, c/id, "r", ext type, frame counts."""
        ping = int(RequestCode.PING)
        for version in (b"", b"QV0", b"QV2", b"qv1", b"QV1 ", b"QV1\x00", b"\xff\xfe\xfd", b"QV1" * 1000,
                        bytes(self.rng.getrandbits(8) for _ in range(16))):
            rid = self.rid()
            yield [version, dumps({"c": ping, "id": rid})], f"env:version={version[:8]!r}", rid
        for raw in (b"", b"{", b"}", b"null", b"[]", b"1", b'"x"', b"{garbage", b"\xff\xfe", b"\x00" * 64,
                    b'{"c":9000}', b"[" * 1100 + b"]" * 1100, bytes(self.rng.getrandbits(8) for _ in range(64))):
            yield [VERSION, raw], f"env:header={raw[:16]!r}", None
        for template in ('{"id":%d}', '{"c":9000,"id":%d}trailing', '\ufeff{"c":9000,"id":%d}', '{"c":NaN,"id":%d}',
                         '{"c":9000,"c":10,"id":%d}', '{"c":9000,"id":%d,"id":"x"}', '{"c":9000,"id":%d,"ext":'
                         + "[" * 1100 + "]" * 1100 + "}", '{"c":9000,"id":%d,"ext":{"a":' + "[" * 1100 + "]" * 1100
                         + "}}"):
            rid = self.rid()
            yield [VERSION, (template % rid).encode()], f"env:header={template[:20]!r}", rid
        rid = self.rid()
        yield [VERSION, ('{"c":9000,"id":%d}' % rid).encode("utf-16")], "env:header=utf-16", rid
        for c in ("9000", 9000.0, True, None, [9000], {"c": 9000}, 2**63, Raw(str(2**64)), -2**63):
            rid = self.rid()
            yield [VERSION, dumps({"c": c, "id": rid})], f"env:c={label_of(c)}", rid
        for i in ("1", 1.0, True, None, [1], Raw(str(2**64)), Raw("1e999"), 2**63 - 1, -2**63, 0):
            yield [VERSION, dumps({"c": ping, "id": i})], f"env:id={label_of(i)}", i if type(i) is int else None
        for ext in ("x", [], 1, True, 1.5, [{"t": "x"}], Raw("NaN")):
            yield self.frame(ping, ext, [], f"env:ext={label_of(ext)}")
        for r in ("", "x", 1, None, [], {}):
            yield self.frame(ping, {}, [], f"env:r={label_of(r)}", {"r": r})
            yield self.frame(int(RequestCode.SEND_MESSAGE), *self.base(int(RequestCode.SEND_MESSAGE)),
                             f"env:send-with-r={label_of(r)}", {"r": r})
        for extra in ({"x": 1}, {"c2": 9000}, {"ext2": {}}, {"id2": 1}, {"": ""}):
            yield self.frame(ping, {}, [], f"env:extra-head={list(extra)[0]!r}", extra)
        yield [VERSION], "env:frames=1", None
        yield [b""], "env:frames=empty", None
        yield [b"\x00"], "env:frames=nul", None
        rid = self.rid()
        yield [dumps({"c": ping, "id": rid}), VERSION], "env:frames=swapped", rid
        for n in (1, 10, 1000):
            frames, label, rid = self.frame(ping, {}, [b""] * n, f"env:bodies={n}-empty")
            yield frames, label, rid
        for code in UNKNOWN_CODES:
            yield self.frame(code, {"t": "x"}, [], f"env:unknown-code={code}")
        for code in RequestCode:  # every code with an empty map, a null and a 1 MiB - 64 ext
            yield self.frame(int(code), {}, [], f"{code.name}:ext={{}}")
            yield self.frame(int(code), Raw("null"), [], f"{code.name}:ext=null")
        yield self.frame(ping, {"x": "y" * ((1 << 20) - 64)}, [], "env:header=1MiB-64")

    def oversized(self):
        """Frames past any sane cap; sent on their own socket (a capped service drops the connection)."""
        ping = int(RequestCode.PING)
        yield self.frame(ping, {"x": "y" * (2 << 20)}, [], "big:header=2MiB")
        ext, _ = self.base(int(RequestCode.SEND_MESSAGE))
        yield self.frame(int(RequestCode.SEND_MESSAGE), ext, [b"z" * (5 << 20)], "big:body=5MiB")
        for i in range(4):
            yield self.frame(ping, {}, [b"w" * (16 << 20)], f"big:body=16MiB#{i}")

    # ---- random ------------------------------------------------------------------------------

    def random(self):
        rng = self.rng
        codes = [int(c) for c in RequestCode]
        while True:
            if rng.random() < 0.03:
                yield self.frame(rng.choice(UNKNOWN_CODES), {"t": "x"}, [], "rnd:unknown-code")
                continue
            code = rng.choice(codes)
            ext, bodies = self.base(code)
            keys = self.keys[code]
            parts = []
            for _ in range(rng.randint(1, 3)):
                roll = rng.random()
                if roll < 0.55:
                    key = rng.choice(keys)
                    vlabel, ext[key] = rng.choice(POISON)
                    parts.append(f"{key}={vlabel}")
                elif roll < 0.75 and ext:
                    key = rng.choice(list(ext))
                    paths = leaf_paths(ext[key])
                    if paths:
                        path = rng.choice(paths)
                        vlabel, poison = rng.choice(POISON)
                        ext[key] = replaced(ext[key], path, poison)
                        parts.append(f"{key}.{_path_label(path)}={vlabel}")
                elif roll < 0.85 and ext:
                    key = rng.choice(list(ext))
                    del ext[key]
                    parts.append(f"-{key}")
                elif roll < 0.93:
                    vlabel, ext[f"zz{rng.randint(0, 99)}"] = rng.choice(POISON)
                    parts.append(f"+key={vlabel}")
                else:
                    bodies = rng.choice([[], [b""], [b"r"] * rng.randint(2, 9), [rng.randbytes(rng.randint(1, 4096))]])
                    parts.append(f"bodies={len(bodies)}")
            yield self.frame(code, ext, bodies, f"{RequestCode(code).name}:rnd:" + ",".join(parts))

    # ---- path-shaped names ---------------------------------------------------------------------

    def paths(self, names: list[str]):
        """Every string field and map key of every request (and names inside properties) -> each name."""
        ctx = self.ctx
        for code in RequestCode:
            ext, bodies = self.base(int(code))
            for key, value in ext.items():
                for path in string_paths(value):
                    for name in names:
                        yield self.frame(int(code), {**ext, key: replaced(value, path, name)}, bodies,
                                         f"{code.name}:path:{key}.{_path_label(path)}={name[:24]!r}")
            for key in self.keys[int(code)]:
                if key not in ext:
                    for name in names:
                        yield self.frame(int(code), {**ext, key: name}, bodies, f"{code.name}:path:{key}={name[:24]!r}")
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SCHEDULE_REPUT):
            ext, bodies = self.base(int(code))
            for prop in ("REAL_TOPIC", "RETRY_TOPIC", "PGROUP", "DLQ_ORIGIN_TOPIC", "__SHARDINGKEY"):
                for name in names:
                    for sf, delay in ((0, "1"), (4, "")):
                        if code == RequestCode.SCHEDULE_REPUT and sf:
                            continue
                        extra = {"UNIQ_KEY": f"{self.rng.getrandbits(128):032X}"}
                        if code == RequestCode.SCHEDULE_REPUT:
                            extra.update(REAL_TOPIC=ctx.topic, REAL_QID="0")
                        if delay:
                            extra["DELAY"] = delay
                        if sf:
                            extra.update(TRAN_MSG="true", PGROUP=ctx.pgroup)
                        extra[prop] = name
                        props = props_string(ctx, extra)
                        yield self._with_props(code, ext, bodies, props, sf,
                                               f"{code.name}:path:props:{prop}={name[:24]!r}:sf={sf}")

    # ---- one poisoning class at a time (the controls follow each) ---------------------------------

    def offset_poison(self, groups: list[str], topic: str, queues: int):
        """Offsets of `groups` set to every integer-ish poison, through every code that stores one."""
        values = [(lbl, v) for lbl, v in POISON if not isinstance(v, (str, list, dict))]
        for group in groups:
            for q in range(queues):
                for vlabel, v in values:
                    yield self.frame(int(RequestCode.UPDATE_CONSUMER_OFFSET), {"g": group, "t": topic, "q": q, "o": v},
                                     [], f"UPDATE_CONSUMER_OFFSET:offsets:o={vlabel}")
                    yield self.frame(int(RequestCode.PULL_MESSAGE), {"g": group, "t": topic, "q": q, "o": 0, "co": v,
                                                                     "n": 1, "s": 0, "sub": "*", "tp": "TAG"},
                                     [], f"PULL_MESSAGE:offsets:co={vlabel}")
                    yield self.frame(int(RequestCode.HA_SYNC_METADATA), {"offsets": [[group, topic, q, v]]}, [],
                                     f"HA_SYNC_METADATA:offsets:o={vlabel}")
                for vlabel, v in values:  # queue ids out of the topic's range
                    yield self.frame(int(RequestCode.UPDATE_CONSUMER_OFFSET), {"g": group, "t": topic, "q": v, "o": 1},
                                     [], f"UPDATE_CONSUMER_OFFSET:offsets:q={vlabel}")

    def heartbeat_poison(self, group: str, topic: str):
        """Heartbeats for `group` whose consumer data and subscriptions are not what they should be."""
        subs = ([], "x", 1, None, True, [[topic]], {topic: "x"}, {topic: [1]}, {topic: None}, {topic: 1},
                {topic: {"type": 1, "expression": []}}, {topic: {"type": None}}, {topic: {"expression": {"a": 1}}},
                {"": {}}, {topic: {"type": "SQL92", "expression": "(" * 5000}}, {str(i): {} for i in range(5000)})
        for i, sub in enumerate(subs):
            consumer = {"group": group, "subscriptions": sub, "consume_type": "PULL", "model": "CLUSTERING",
                        "consume_from": "first"}
            yield self.frame(int(RequestCode.HEART_BEAT), {"client_id": f"fuzz-hb-{i}", "consumers": [consumer]}, [],
                             f"HEART_BEAT:hb:subscriptions={label_of(sub)}")
        for i, (key, value) in enumerate([(k, v) for k in ("queues", "orderly", "model", "consume_from", "consume_type")
                                          for _, v in self.rng.sample(POISON, 20)]):
            consumer = {"group": group, "subscriptions": {topic: {"type": "TAG", "expression": "*"}}, key: value}
            yield self.frame(int(RequestCode.HEART_BEAT), {"client_id": f"fuzz-hb2-{i}", "consumers": [consumer]},
                             [], f"HEART_BEAT:hb:{key}={label_of(value)}")
        for vlabel, v in POISON:
            yield self.frame(int(RequestCode.HEART_BEAT), {"client_id": "fuzz-hb3", "consumers": [v]}, [],
                             f"HEART_BEAT:hb:consumer={vlabel}")
            yield self.frame(int(RequestCode.HEART_BEAT), {"client_id": "fuzz-hb4", "producers": [v]}, [],
                             f"HEART_BEAT:hb:producer={vlabel}")

    def reput_then_delete(self, names: list[str]):
        """Topics named by REAL_TOPIC of a re-put (created by the broker if it trusts the name), then
        DELETE_TOPIC_IN_BROKER and UPDATE_AND_CREATE_TOPIC with the same names."""
        ext, bodies = self.base(int(RequestCode.SCHEDULE_REPUT))
        for name in names:
            props = props_string(self.ctx, UNIQ_KEY=f"{self.rng.getrandbits(128):032X}", REAL_TOPIC=name, REAL_QID="0")
            m = [[0, props, self.ctx.now_ms, 0, 0, self.ctx.now_ms]]
            yield self.frame(int(RequestCode.SCHEDULE_REPUT), {**ext, "m": m}, bodies,
                             f"SCHEDULE_REPUT:path:REAL_TOPIC={name[:24]!r}")
        for name in names:
            yield self.frame(int(RequestCode.UPDATE_AND_CREATE_TOPIC),
                             {"topic": name, "read": 1, "write": 1, "perm": 6}, [],
                             f"UPDATE_AND_CREATE_TOPIC:path:topic={name[:24]!r}")
        for name in names:
            yield self.frame(int(RequestCode.DELETE_TOPIC_IN_BROKER), {"topic": name}, [],
                             f"DELETE_TOPIC_IN_BROKER:path:topic={name[:24]!r}")

    def registration_poison(self):
        """Registrations of brokers that do not exist, each under a name of its own (a later frame
        must not overwrite what an earlier one left): addresses that are not host:port, and
        registrations that should fail as a whole (a field of the wrong shape after good ones).
        All claim the schedule topics, so a ghost among them reaches every scheduler."""
        code = int(RequestCode.REGISTER_BROKER)
        ext, _ = self.base(code)
        n = 0
        for vlabel, addr in POISON:
            n += 1
            yield self.frame(code, {**ext, "broker_name": f"fuzz-bad-addr-{n}", "broker_addr": addr}, [],
                             f"REGISTER_BROKER:reg:broker_addr={vlabel}")
        wrong = {"filter_servers": [5, "x", {"a": 1}, [5], [None], ["a:b:c"]],
                 "topics": ["x", 5, [1], {"FuzzT": "x"}, {"FuzzT": 5}, {"FuzzT": [1]}, {"FuzzT": {"read": "x"}},
                            {"FuzzT": {"read": 2**63}}],
                 "data_version": ["x", 5, [1], {"counter": "x"}],
                 "ha_addr": [5, ":", "a:b:c"],
                 "broker_id": ["x", -1, 2**63, 1.5]}
        for key, values in wrong.items():
            for value in values:
                n += 1
                topics = {**ext["topics"], **value} if key == "topics" and isinstance(value, dict) else None
                yield self.frame(code, {**ext, "broker_name": f"fuzz-half-{n}", key: topics or value}, [],
                                 f"REGISTER_BROKER:reg:{key}={label_of(value)}")

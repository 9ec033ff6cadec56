"""Poison values for the socket fuzzer (tests/faults/test_fuzz_*.py), and the JSON encoder that
can send them: integers past 64 bits, NaN, lone surrogates and deep nesting are not JSON
orjson will write, so `Raw` text is spliced in by hand. Also the path-shaped names.

Path-shaped names are built from the test's sandbox so that, whatever a service joins them
to, they resolve inside the test's tmp dir: the services run as root in CI and a topic named
"/" or "../../../../../.." given to `shutil.rmtree` must never reach the machine. "/etc" is
therefore spelled "<victim>/etc" (a directory made for the purpose, checked after the run).
"""

import json

import orjson

VERSION = b"QV1"

class Raw:
    """JSON text spliced into a header verbatim: NaN, 1e999, integers past 64 bits, lone surrogates."""
    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __repr__(self):
        return f"Raw({self.text[:40]!r})"


def dumps(obj) -> bytes:
    """orjson when it can; else a hand-written encoder (huge ints, NaN, Raw, invalid UTF-8)."""
    try:
        return orjson.dumps(obj)
    except (TypeError, orjson.JSONEncodeError):
        return _slow(obj).encode("utf-8", "surrogatepass")


def _slow(o) -> str:
    if isinstance(o, Raw):
        return o.text
    if o is None or isinstance(o, (bool, int, float)):
        return json.dumps(o)
    if isinstance(o, str):
        return json.dumps(o, ensure_ascii=False)
    if isinstance(o, (list, tuple)):
        return "[" + ",".join(_slow(v) for v in o) + "]"
    if isinstance(o, dict):
        return "{" + ",".join(json.dumps(str(k), ensure_ascii=False) + ":" + _slow(v) for k, v in o.items()) + "}"
    raise TypeError(f"cannot encode {type(o).__name__}")


# ---- poison values ----------------------------------------------------------------------------

KIB100 = 100 * 1024


def _deep_list(depth: int) -> Raw:
    return Raw("[" * depth + "]" * depth)


def _deep_map(depth: int) -> Raw:
    return Raw('{"a":' * depth + "1" + "}" * depth)


INTS = [0, 1, -1, 2, 3, 4, 7, 8, 12, 15, 16, 127, 128, 255, 256, 1023, 1024, 1025, 65535, 65536,
        2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**32, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1,
        -2**63, Raw(str(2**64)), Raw(str(2**65)), Raw(str(-2**63 - 1)), Raw(str(10**30)), Raw("9" * 400)]
FLOATS = [0.0, -0.0, 0.5, 1.5, -1.5, 3.0, 1e18, 9.3e18, 1.8446744073709552e19, 1e308, -1e308, 5e-324,
          Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1e999"), Raw("-1e999")]
STRINGS = ["", " ", "x", "0", "1", "-1", "1.5", "1e3", "NaN", "nan", "inf", "-inf", "Infinity", "1e999",
           "0x10", "9" * 30, "\u0661", "null", "true", "[]", "{}", "\x00", "a\x00b", "\x01", "\x02", "a\x01b\x02",
           "\n", "\t", "\u00fc", "\u65e5\u672c\u8a9e", "\u202e", "\U0001F642" * 10, "\ufeff",
           Raw('"\\ud800"'), Raw('"\\udfff"'), Raw('"\ud800"'),
           "127.0.0.1:1", ":", "host:", ":123", "a:b:c", "[::1]:1", "256.256.256.256:99999",
           "tcp://127.0.0.1:1", "host:-1", "host:65536", "localhost:0", "a" * 300 + ":1",
           "%RETRY%x", "%DLQ%x", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "TBW102", "*", "||",
           "a b", "x" * 128, "x" * 256, "x" * 4096,
           "x" * KIB100, "\u00e9" * (KIB100 // 2), "\U0001F600" * (KIB100 // 4)]
OTHERS = [True, False, None,
          [], [None], [0], [-1], ["x"], [[]], [{}], [[0, ""]], [[2**63, "x"]], ["x", 1, None, 1.5, True],
          [0] * 10_000, ["x"] * 2000, [[0, "a\x01b\x02"]] * 100,
          {}, {"": None}, {"a": 1}, {"x" * 1000: "y"}, {str(i): i for i in range(2000)}, {"group": None},
          {"t": {"t": {"t": 1}}},
          _deep_list(64), _deep_list(500), _deep_list(1000), _deep_list(1100), _deep_map(300), _deep_map(1000)]


def label_of(v) -> str:
    if isinstance(v, Raw):
        return f"raw[{len(v.text)}]:{v.text[:16]}"
    if isinstance(v, str):
        return f"str[{len(v)}]:{v[:16]!r}"
    if isinstance(v, (list, dict)):
        return f"{type(v).__name__}[{len(v)}]"
    return f"{type(v).__name__}:{v!r}"[:40]


POISON: list[tuple[str, object]] = [(label_of(v), v) for v in INTS + FLOATS + STRINGS + OTHERS]

# SQL92 expressions that stress a parser (filter server, broker relay)
SQL_POISON = ["(" * 10_000 + "a" + ")" * 10_000, "NOT " * 5000 + "a", "a > 1" + " AND a > 1" * 5000,
              "a IN (" + ",".join(f"'{i}'" for i in range(20_000)) + ")", "a = '" + "x" * KIB100 + "'",
              "a BETWEEN", "'", "a >", "a = 1e999", "a = 99999999999999999999999", "a IS", "a LIKE '%%%%%%%%%_'",
              "a = 'x' ESCAPE", "TAGS = 'x'", "\x00", "a = '\ud7ff'"]

# property names with system meaning, and values that are not what they should hold
SYSTEM_PROPERTIES = ["DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
                     "CHECK_IMMUNITY_TIME_IN_SECONDS", "TRANSACTION_CHECK_TIMES", "TRAN_BORN_MS",
                     "TRAN_PREPARED_QUEUE_OFFSET", "MAX_RECONSUME_TIMES", "RECONSUME_TIME", "REAL_TOPIC",
                     "REAL_QID", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "TRAN_MSG", "PGROUP", "UNIQ_KEY", "KEYS",
                     "TAGS", "WAIT", "MIN_OFFSET", "MAX_OFFSET", "__SHARDINGKEY", "__transactionId__",
                     "SCHEDULE_DUE_MS", "SCHEDULE_ORIGIN_ID", "DLQ_ORIGIN_TOPIC", "TRAN_STATE"]
PROPERTY_VALUES = ["", "x", "-1", "0", "1", "3", "18", "19", "99", "2147483648", "9223372036854775807",
                   "9223372036854775808", "18446744073709551616", "1e308", "1e999", "inf", "-inf", "nan",
                   "1.5", " 1", "0x10", "\u0661", "\U0001D7CF", "true", "%RETRY%", "SCHEDULE_TOPIC_XXXX",
                   "RMQ_SYS_TRANS_HALF_TOPIC", "a b", "x" * 300, "\u00e9" * 1000]
MALFORMED_PROPERTIES = ["no-separators", "\x01\x01\x02\x02", "k\x01v", "\x02" * 1000, "\x01" * 1000,
                        "k\x01" + "v" * 40_000 + "\x02", "\u00fc\x01\u00e9\x02", "k\x01v\x02k\x01w\x02",
                        "\x01v\x02", "k\x01\x02", "UNIQ_KEY\x01\x02", "KEYS\x01" + " " * 1000 + "\x02"]

UNKNOWN_CODES = [0, -1, 1, 13, 99, 104_000, 9003, 9999, 2**31, -2**31, 2**63 - 1]


def path_names(victim: str, depth: int = 10) -> list[str]:
    """Path-shaped names that stay inside the test's tmp dir whatever they are joined to
    (the data dir is nested deeper than `depth` below it; see fuzz_cluster.py)."""
    names = []
    for k in range(1, depth + 1):
        names.append("/".join([".."] * k))
        names.append("../" * k + f"qfz-up-{k}")
    names += ["qfz/../../../../qfz-mixed", "./qfz-dot", ".", "...", ".../qfz", "qfz//x", "qfz/x", "qfz/",
              "..\\..\\qfz-bs", "%2e%2e%2fqfz-enc", "qfz\x00nul", "\x00", "qfz\nnl", "~/qfz-tilde", "qfz:colon",
              victim, f"{victim}/", f"{victim}/etc", f"{victim}/qfz-abs", f"{victim}/../qfz-abs-up",
              f"{victim}/canary.txt"]
    return names

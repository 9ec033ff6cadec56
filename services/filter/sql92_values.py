"""Java value semantics behind RocketMQ's SQL92 evaluation, emulated in Python.

Owns how values compare and convert: the `ComparisonExpression.__compare`
rules, `Integer.valueOf` / `Long.valueOf` / `Double.valueOf` /
`Boolean.valueOf` on strings, `Double.compareTo` ordering and `-x`. It knows
nothing about syntax (sql92_parser.py) or closures (sql92_compiler.py).

Java values are represented as:
  String -> str, Boolean -> bool, Integer -> int, Long -> JLong (an int
  subclass), Double -> float, null -> None; anything else is an opaque,
  non-Comparable object. A plain Python int outside the 32-bit range counts as
  a Long (typed property maps may carry Python numbers).

A Java exception during evaluation is `EvaluationError`; the broker logs it
and treats the message as not matching.
"""

import math
import re
import unicodedata

INT, LONG, DOUBLE, BOOL, STR, OTHER = "Integer", "Long", "Double", "Boolean", "String", "Object"

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

_COMPARABLE = frozenset((INT, LONG, DOUBLE, BOOL, STR))


class EvaluationError(Exception):
    """The Java evaluator would throw here (bad number, bad cast): no match."""


class JLong(int):
    """An integer that is a Java Long (a literal beyond 32 bits, or its negation)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}L"


def jclass(v) -> str:
    """The Java class a Python value stands for."""
    t = type(v)
    if t is str:
        return STR
    if t is bool:
        return BOOL
    if t is int:
        return INT if INT_MIN <= v <= INT_MAX else LONG
    if t is JLong:
        return LONG
    if t is float:
        return DOUBLE
    return OTHER


def is_comparable(v) -> bool:
    return jclass(v) in _COMPARABLE


# ---------------------------------------------------------------- string -> value


def java_integer(s: str) -> int:
    """Integer.valueOf(s): optional sign, decimal digits, 32-bit range; no spaces."""
    if s.isascii() and s.isdigit() and len(s) < 10:  # the common case, fast
        return int(s)
    return _java_integral(s, INT_MIN, INT_MAX)


def java_long(s: str) -> int:
    """Long.valueOf(s), as a JLong so later comparisons know its class."""
    if s.isascii() and s.isdigit() and len(s) < 19:
        return JLong(s)
    return JLong(_java_integral(s, LONG_MIN, LONG_MAX))


def _java_integral(s: str, lo: int, hi: int) -> int:
    body, negative = s, False
    if body[:1] in ("+", "-"):
        negative, body = body[0] == "-", body[1:]
    if not body:
        raise EvaluationError(f"not a number: {s!r}")
    if not (body.isascii() and body.isdigit()):
        # Java's Character.digit accepts any BMP decimal digit ('٣', '３').
        digits = []
        for ch in body:
            d = unicodedata.decimal(ch, None) if ord(ch) < 0x10000 else None
            if d is None:
                raise EvaluationError(f"not a number: {s!r}")
            digits.append(str(d))
        body = "".join(digits)
    body = body.lstrip("0") or "0"
    if len(body) > 19:  # also keeps int() clear of its digit-count limit
        raise EvaluationError(f"out of range: {s!r}")
    value = -int(body) if negative else int(body)
    if not lo <= value <= hi:
        raise EvaluationError(f"out of range: {s!r}")
    return value


_DIGITS = "[0-9]+"
_DECIMAL = rf"(?:{_DIGITS}\.?[0-9]*|\.{_DIGITS})(?:[eE][+-]?{_DIGITS})?"
_HEX = r"0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+"
# NaN and Infinity take no f/d suffix; decimal and hex forms may have one.
_DOUBLE_RE = re.compile(
    rf"(?P<sign>[+-]?)(?:(?P<special>NaN|Infinity)|(?P<dec>{_DECIMAL})[fFdD]?|(?P<hex>{_HEX})[fFdD]?)\Z"
)


def java_double(s: str) -> float:
    """Double.valueOf(s): trims chars <= ' ', accepts NaN, Infinity, hex, f/d suffix."""
    if s.isascii() and s.isdigit():  # the common case, fast
        return float(s)
    m = _DOUBLE_RE.match(_java_trim(s))
    if m is None:
        raise EvaluationError(f"not a double: {s!r}")
    if m.group("special"):
        value = math.nan if m.group("special") == "NaN" else math.inf
    elif m.group("dec"):
        value = float(m.group("dec"))
    else:
        try:
            value = float.fromhex(m.group("hex"))
        except OverflowError:
            value = math.inf
    return -value if m.group("sign") == "-" else value


def _java_trim(s: str) -> str:
    """String.trim(): strips every char <= U+0020 from both ends."""
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


def java_boolean(s: str) -> bool:
    """Boolean.valueOf(s): 'true' in any letter case; anything else is false."""
    return len(s) == 4 and s.lower() == "true"


# ------------------------------------------------------------------- comparison


def compare_doubles(x: float, y: float) -> int:
    """Double.compareTo: NaN equals NaN and sorts above +Infinity; -0.0 < 0.0."""
    if x < y:
        return -1
    if x > y:
        return 1
    if x == y:
        if x == 0.0:
            sx, sy = math.copysign(1.0, x), math.copysign(1.0, y)
            return (sx > sy) - (sx < sy)
        return 0
    x_nan, y_nan = x != x, y != y
    return 0 if x_nan and y_nan else (1 if x_nan else -1)


def _compare_same(lv, rv, cls: str) -> int:
    if cls == DOUBLE:
        return compare_doubles(lv, rv)
    # Integer, Long, Boolean and String all order naturally in Python. String
    # order differs from Java's UTF-16 order only in sign for astral chars,
    # and string-vs-string order is only ever used to test equality.
    return (lv > rv) - (lv < rv)


def compare(lv, rv) -> int:
    """ComparisonExpression.__compare with string conversion on (always, for parsed selectors).

    Both values are non-null and Comparable. Unlike classes are converted
    towards each other; a String facing a number is parsed as that number's
    class; pairs with no rule compare as -1 (never equal).
    """
    lc, rc = jclass(lv), jclass(rv)
    if lc == rc:
        return _compare_same(lv, rv, lc)
    if lc == BOOL:
        if rc == STR:
            # Java casts the Boolean to String here: ClassCastException.
            raise EvaluationError("a boolean on the left cannot be compared with a string")
        return -1
    if lc == STR:
        if rc == BOOL:
            return _compare_same(java_boolean(lv), rv, BOOL)
        if rc == INT:
            return _compare_same(java_integer(lv), rv, INT)
        if rc == LONG:
            return _compare_same(java_long(lv), rv, LONG)
        if rc == DOUBLE:
            return compare_doubles(java_double(lv), rv)
        return -1
    if rc == STR:
        if lc == INT:
            return _compare_same(lv, java_integer(rv), INT)
        if lc == LONG:
            return _compare_same(lv, java_long(rv), LONG)
        if lc == DOUBLE:
            return compare_doubles(lv, java_double(rv))
        return -1
    if DOUBLE in (lc, rc) and lc in (INT, LONG, DOUBLE) and rc in (INT, LONG, DOUBLE):
        return compare_doubles(float(lv), float(rv))
    if lc in (INT, LONG) and rc in (INT, LONG):
        return _compare_same(lv, rv, LONG)
    return -1


def compare_ordered(lv, rv) -> int:
    """The ordering behind >, >=, <, <= once both sides are known non-null.

    Two strings are both read as doubles (Java throws if either is not a
    number); a non-Comparable value is a ClassCastException.
    """
    if type(lv) is str and type(rv) is str:
        return compare_doubles(java_double(lv), java_double(rv))
    if not (is_comparable(lv) and is_comparable(rv)):
        raise EvaluationError("value is not comparable")
    return compare(lv, rv)


def equal(lv, rv) -> bool:
    """`=` for two non-null values: equals(), else Comparable compare == 0."""
    if is_comparable(lv) and is_comparable(rv):
        return compare(lv, rv) == 0
    return lv is rv


def negate(v):
    """Unary minus: numbers keep their class (with Java's wrap-around); others -> null."""
    cls = jclass(v)
    if cls == INT:
        return _wrap(-v, 32)
    if cls == LONG:
        return JLong(_wrap(-v, 64))
    if cls == DOUBLE:
        return -v
    return None


def _wrap(value: int, bits: int) -> int:
    half = 1 << (bits - 1)
    return (value + half) % (1 << bits) - half

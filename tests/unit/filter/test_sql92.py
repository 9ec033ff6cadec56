"""SQL92 selectors: the RocketMQ conformance corpus, every rule, parse errors and the API.

The corpus (sql92_cases.json next to this file, a copy of the shared
conformance file; point QUIVER_SQL92_CORPUS at another copy to run a larger
one) is checked twice: `compile(expr, ignore_trailing=True)` must reproduce
RocketMQ exactly, and plain `compile(expr)` may differ only by rejecting
trailing tokens (the deliberate divergence, see SQL92_DIVERGENCES.md).
"""

import json
import os
import pathlib

import pytest

from quiver.errors import SubscriptionParseError
from quiver_filter.sql92 import EvaluationError, Selector, compile, compile_cached

CORPUS_PATH = pathlib.Path(
    os.environ.get("QUIVER_SQL92_CORPUS", pathlib.Path(__file__).with_name("sql92_cases.json"))
)
CORPUS = json.loads(CORPUS_PATH.read_text(encoding="utf-8"))
TRAILING_HINT = "already complete"


def raw(selector: Selector, props) -> object:
    """The corpus' `raw` column: True / False / None, or "eval_error"."""
    try:
        return selector.evaluate(props)
    except EvaluationError:
        return "eval_error"


def typed(props: dict) -> dict:
    """The corpus' typed map in Python: {"$object": true} is an opaque Java Object."""
    return {k: object() if isinstance(v, dict) else v for k, v in props.items()}


def outcome(expr, props, **kw):
    """raw() of compiling and evaluating, or "error" if compile rejects it."""
    try:
        selector = compile(expr, **kw)
    except SubscriptionParseError:
        return "error"
    return raw(selector, props)


def parse_error(expr: str) -> SubscriptionParseError:
    with pytest.raises(SubscriptionParseError) as info:
        compile(expr)
    return info.value


# ---------------------------------------------------------------- corpus


def _case_id(case: dict) -> str:
    return case.get("id") or case["expr"][:40]


@pytest.mark.parametrize("case", CORPUS["cases"], ids=_case_id)
def test_corpus_case_rocketmq_compatible(case):
    try:
        selector = compile(case["expr"], ignore_trailing=True)
    except SubscriptionParseError:
        assert case["expect"] == "error"
        return
    assert case["expect"] != "error", "RocketMQ rejects this expression"
    assert selector.matches(case["props"]) is case["expect"]
    assert raw(selector, case["props"]) == case["raw"]
    if "typed" in case:
        assert selector.matches(typed(case["typed"])) is case["expect_typed"]
        assert raw(selector, typed(case["typed"])) == case["raw_typed"]


@pytest.mark.parametrize("case", CORPUS["cases"], ids=_case_id)
def test_corpus_case_quiver(case):
    try:
        selector = compile(case["expr"])
    except SubscriptionParseError:
        if case["expect"] != "error":
            # The one accepted difference (SQL92_DIVERGENCES.md): RocketMQ ignores
            # trailing tokens and accepts this; we reject it. Nothing else may differ,
            # so RocketMQ mode, which only stops rejecting trailing tokens, must accept.
            compile(case["expr"], ignore_trailing=True)
        return
    assert case["expect"] != "error", "RocketMQ rejects this expression"
    assert selector.matches(case["props"]) is case["expect"]
    assert raw(selector, case["props"]) == case["raw"]
    if "typed" in case:
        assert raw(selector, typed(case["typed"])) == case["raw_typed"]


@pytest.mark.parametrize("case", CORPUS["parse_reject"], ids=_case_id)
def test_corpus_parse_reject(case):
    with pytest.raises(SubscriptionParseError):
        compile(case["expr"], ignore_trailing=True)
    with pytest.raises(SubscriptionParseError):
        compile(case["expr"])


@pytest.mark.parametrize("case", CORPUS["parse_accept"], ids=_case_id)
def test_corpus_parse_accept(case):
    assert compile(case["expr"]).expression == case["expr"]


# ------------------------------------------------------------ rule table
# (expr, props, three-valued result or "eval_error"), one row per rule.

T, F, N, ERR = True, False, None, "eval_error"

RULES = [
    # literals
    ("s = 'it''s'", {"s": "it's"}, T),
    ("s = '\\n'", {"s": "\\n"}, T),                # no backslash escapes
    ("s = ''", {"s": ""}, T),
    ("s = 'ünï'", {"s": "ünï"}, T),
    ("i = 0", {"i": "0"}, T),
    ("i = 2147483647", {"i": "2147483647"}, T),
    ("i = 5L", {"i": "5"}, T),                     # L suffix; still an Integer
    ("i = 3000000000", {"i": "3000000000"}, T),    # beyond 32 bits: a Long
    ("i = 9223372036854775807", {"i": "9223372036854775807"}, T),
    ("d = 5.5", {"d": "5.5"}, T),
    ("d = 5.", {"d": "5"}, T),
    ("d = .5", {"d": "0.5"}, T),
    ("d = 5E1", {"d": "50"}, T),
    ("d = 5.5e-3", {"d": "0.0055"}, T),
    ("TRUE", {}, T),
    ("FALSE", {}, F),
    ("NULL", {}, N),
    # comparison operators, string property vs int literal
    ("a = 3", {"a": "3"}, T),
    ("a <> 3", {"a": "3"}, F),
    ("a <> 3", {"a": "4"}, T),
    ("a > 3", {"a": "4"}, T),
    ("a > 3", {"a": "3"}, F),
    ("a >= 3", {"a": "3"}, T),
    ("a < 3", {"a": "2"}, T),
    ("a < 3", {"a": "3"}, F),
    ("a <= 3", {"a": "3"}, T),
    ("a <= 3", {"a": "4"}, F),
    ("3 < a", {"a": "4"}, T),                       # literal on the left
    ("a > -3", {"a": "-2"}, T),                     # unary minus
    ("a > +3", {"a": "4"}, T),                      # unary plus
    ("a > - -3", {"a": "4"}, T),
    # BETWEEN / NOT BETWEEN (inclusive)
    ("a BETWEEN 1 AND 3", {"a": "1"}, T),
    ("a BETWEEN 1 AND 3", {"a": "3"}, T),
    ("a BETWEEN 1 AND 3", {"a": "4"}, F),
    ("a NOT BETWEEN 1 AND 3", {"a": "4"}, T),
    ("a NOT BETWEEN 1 AND 3", {"a": "2"}, F),
    ("a BETWEEN 1 AND 3", {}, N),
    ("a BETWEEN 1.5 AND 2.5", {"a": "2"}, T),
    ("a BETWEEN -5 AND 5", {"a": "0"}, T),
    ("a BETWEEN b AND c", {"a": "2", "b": "1", "c": "3"}, T),  # all strings: read as doubles
    ("a BETWEEN 1 AND 2.5", {"a": "0"}, F),         # first bound decides: 2.5's rule never runs
    ("a BETWEEN 1 AND 2.5", {"a": "1.5"}, ERR),     # Integer.valueOf('1.5') for the bound 1
    ("a BETWEEN 5 AND -5", {"a": "0"}, F),          # -5 is not a literal: no bound check (quirk)
    ("a NOT BETWEEN 3 AND 1", {"a": "2"}, T),       # NOT BETWEEN never checks its bounds (quirk)
    # IN / NOT IN
    ("a IN ('x', 'y')", {"a": "y"}, T),
    ("a IN ('x', 'y')", {"a": "z"}, F),
    ("a NOT IN ('x', 'y')", {"a": "z"}, T),
    ("a NOT IN ('x', 'y')", {"a": "x"}, F),
    ("a IN ('x')", {}, N),
    ("a NOT IN ('x')", {}, N),
    ("a IN ('1')", {"a": 1}, N),                    # non-string value: NULL
    ("a IN ('a', 'b', 'c', 'd', 'e', 'f')", {"a": "f"}, T),
    ("(a) IN ('x')", {"a": "x"}, T),
    # IS [NOT] NULL
    ("a IS NULL", {}, T),
    ("a IS NULL", {"a": ""}, F),
    ("a IS NOT NULL", {"a": ""}, T),
    ("a IS NOT NULL", {}, F),
    ("NULL IS NULL", {}, T),
    ("5 IS NULL", {}, F),
    # CONTAINS / STARTSWITH / ENDSWITH
    ("a CONTAINS 'b'", {"a": "abc"}, T),
    ("a STARTSWITH 'ab'", {"a": "abc"}, T),
    ("a ENDSWITH 'bc'", {"a": "abc"}, T),
    ("a ENDSWITH 'ab'", {"a": "abc"}, F),
    ("a NOT CONTAINS 'z'", {"a": "abc"}, T),
    ("a NOT STARTSWITH 'b'", {"a": "abc"}, T),
    ("a NOT ENDSWITH 'c'", {"a": "abc"}, F),
    ("a CONTAINS 'B'", {"a": "abc"}, F),            # case-sensitive
    ("a CONTAINS '%'", {"a": "abc"}, F),            # no wildcards
    ("a NOT CONTAINS 'x'", {}, F),                  # missing: FALSE even for the NOT form
    ("a CONTAINS ''", {"a": "abc"}, F),             # empty search string: FALSE
    ("a NOT CONTAINS ''", {"a": "abc"}, F),
    ("a NOT CONTAINS 'x'", {"a": 5}, F),            # non-string: FALSE
    ("(a = 1) CONTAINS 'x'", {"a": "1"}, F),
    # equality and NULL
    ("a = 1", {}, N),                               # left NULL, right not: NULL
    ("1 = a", {}, F),                               # right NULL, left not: FALSE
    ("1 <> a", {}, T),
    ("a <> 1", {}, N),
    ("a = b", {}, T),                               # both NULL: TRUE
    ("a = b", {"a": "x"}, F),
    ("a = b", {"b": "x"}, N),
    ("a > 1", {}, N),
    ("1 < a", {}, N),
    ("a > b", {"a": "2"}, N),
    # string vs string
    ("a = b", {"a": "3.14", "b": "3.14"}, T),
    ("a = b", {"a": "1", "b": "1.0"}, F),           # = compares the strings exactly
    ("a = 'x'", {"a": "x"}, T),
    ("a = 'x'", {"a": "X"}, F),
    ("a > b", {"a": "10", "b": "9"}, T),            # > reads both as doubles
    ("a > b", {"a": "10", "b": "x"}, ERR),
    ("a < b", {"a": "-0.0", "b": "0.0"}, T),        # Double.compareTo: -0.0 < 0.0
    # string vs int literal: Integer.valueOf
    ("a = 3", {"a": "+3"}, T),
    ("a = 3", {"a": "03"}, T),
    ("a = 3", {"a": "\u0663"}, T),                  # Java accepts Unicode decimal digits
    ("a = 3", {"a": " 3"}, ERR),
    ("a = 3", {"a": "3.0"}, ERR),
    ("a = 3", {"a": "3L"}, ERR),
    ("a = 3", {"a": ""}, ERR),
    ("a = 3", {"a": "-"}, ERR),
    ("a > 3", {"a": "3000000000"}, ERR),            # not a 32-bit int
    ("a > 3000000000", {"a": "3000000001"}, T),     # long literal: Long.valueOf
    ("a > 3000000000", {"a": "9223372036854775808"}, ERR),
    ("a > -2147483648", {"a": "3000000000"}, T),    # 2147483648 is a Long, so is its negation
    # string vs float literal: Double.valueOf
    ("a > 2.0", {"a": "2.5"}, T),
    ("a > 2.0", {"a": " 2.5 "}, T),                 # trimmed
    ("a > 2.0", {"a": "2.5f"}, T),
    ("a > 2.0", {"a": "2.5D"}, T),
    ("a > 2.0", {"a": "3e0"}, T),
    ("a > 2.0", {"a": "0x1.8p1"}, T),               # hex floating point, 3.0
    ("a > 2.0", {"a": "Infinity"}, T),
    ("a < 2.0", {"a": "-Infinity"}, T),
    ("a > 2.0", {"a": "NaN"}, T),                   # Double.compareTo puts NaN above all
    ("a = 2.0", {"a": "NaN"}, F),
    ("a > 2.0", {"a": "nan"}, ERR),
    ("a > 2.0", {"a": "inf"}, ERR),
    ("a > 2.0", {"a": "1_0"}, ERR),
    ("a > 2.0", {"a": "NaNd"}, ERR),
    ("a = 2.5", {"a": "2.50"}, T),
    # string vs boolean literal: Boolean.valueOf
    ("a = TRUE", {"a": "true"}, T),
    ("a = TRUE", {"a": "TrUe"}, T),
    ("a = TRUE", {"a": "yes"}, F),
    ("a = FALSE", {"a": "anything"}, T),
    ("a <> TRUE", {"a": "1"}, T),
    ("TRUE = a", {"a": "true"}, ERR),               # boolean literal on the left: Java throws
    ("TRUE = a", {}, F),
    ("'x' = TRUE", {}, F),
    ("1 = TRUE", {}, F),
    ("TRUE = TRUE", {}, T),
    ("TRUE = FALSE", {}, F),
    ("(a = 1) = TRUE", {"a": "1"}, T),
    ("(a = 1) = b", {"a": "1", "b": "true"}, ERR),  # Boolean vs String, Boolean on the left
    ("b = (a = 1)", {"a": "1", "b": "true"}, T),
    # a bare property as a condition
    ("a", {"a": "true"}, F),                        # strings are never Java Booleans
    ("a", {}, N),
    ("a", {"a": True}, T),                          # a typed boolean is
    ("NOT a", {"a": "true"}, T),
    ("a AND b = 1", {"a": "true", "b": "1"}, F),
    # three-valued AND (t = TRUE, f = FALSE, missing x = NULL)
    ("t = 1 AND t = 1", {"t": "1"}, T),
    ("t = 1 AND f = 1", {"t": "1", "f": "0"}, F),
    ("t = 1 AND x = 1", {"t": "1"}, N),
    ("f = 1 AND t = 1", {"t": "1", "f": "0"}, F),
    ("f = 1 AND f = 1", {"f": "0"}, F),
    ("f = 1 AND x = 1", {"f": "0"}, F),
    ("x = 1 AND t = 1", {"t": "1"}, N),
    ("x = 1 AND f = 1", {"f": "0"}, F),
    ("x = 1 AND y = 1", {}, N),
    # three-valued OR
    ("t = 1 OR t = 1", {"t": "1"}, T),
    ("t = 1 OR f = 1", {"t": "1", "f": "0"}, T),
    ("t = 1 OR x = 1", {"t": "1"}, T),
    ("f = 1 OR t = 1", {"t": "1", "f": "0"}, T),
    ("f = 1 OR f = 1", {"f": "0"}, F),
    ("f = 1 OR x = 1", {"f": "0"}, N),
    ("x = 1 OR t = 1", {"t": "1"}, T),
    ("x = 1 OR f = 1", {"f": "0"}, N),
    ("x = 1 OR y = 1", {}, N),
    # three-valued NOT
    ("NOT t = 1", {"t": "1"}, F),                   # (NOT t) = 1: Boolean vs Integer
    ("NOT (t = 1)", {"t": "1"}, F),
    ("NOT (f = 1)", {"f": "0"}, T),
    ("NOT (x = 1)", {}, N),
    ("NOT NOT (t = 1)", {"t": "1"}, T),
    # evaluation errors abort the whole expression; AND/OR stop at the decider
    ("a > 1 OR b = 'x'", {"a": "zz", "b": "x"}, ERR),
    ("b = 'x' OR a > 1", {"a": "zz", "b": "x"}, T),
    ("b = 'y' AND a > 1", {"a": "zz", "b": "x"}, F),
    ("NOT (a > 1)", {"a": "zz"}, ERR),
    # precedence: unary > relational > equality > AND > OR
    ("NOT a = 1", {}, N),                           # (NOT a) = 1, a missing
    ("a = 1 OR b = 1 AND c = 1", {"a": "1"}, T),
    ("(a = 1 OR b = 1) AND c = 1", {"a": "1", "c": "2"}, F),
    ("a > 1 = TRUE", {"a": "2"}, T),                # (a > 1) = TRUE
    ("a IS NULL = TRUE", {}, T),
    ("a = 1 = TRUE", {"a": "1"}, T),                # left-associative
    ("a CONTAINS 'x' = TRUE", {"a": "x"}, T),
    # negation of non-numbers gives NULL
    ("-a > 3", {"a": "5"}, N),
    ("-'x' = a", {"a": "x"}, N),
    # comments, whitespace and keyword case
    ("a = 1 -- the rest of the line\n AND b = 2", {"a": "1", "b": "2"}, T),
    ("a = 1 /* inline */ AND /* ** */ b = 2", {"a": "1", "b": "2"}, T),
    ("a = 1 -- a trailing comment", {"a": "1"}, T),
    ("a > --5", {"a": "6"}, T),                     # no newline follows: two minus signs
    ("a\t=\r\n1\f", {"a": "1"}, T),
    ("a between 1 and 3 and b is not null", {"a": "2", "b": ""}, T),
    ("a NoT iN ('x')", {"a": "y"}, T),
    ("A = 1", {"a": "1"}, N),                       # property names are case-sensitive
    ("$x_1 = 1", {"$x_1": "1"}, T),
    ("now = 1", {"now": "1"}, T),                   # not a keyword
    # typed values (Java objects in the evaluation context)
    ("a = 3", {"a": 3}, T),
    ("a > 2.5", {"a": 3}, T),
    ("a = 3", {"a": 3.0}, T),
    ("a > 3", {"a": 2**40}, T),
    ("a = TRUE", {"a": True}, T),
    ("a > 1", {"a": True}, F),                      # Boolean vs Integer: never equal, -1
    ("a > 1", {"a": object()}, ERR),                # not Comparable
    ("a = 1", {"a": object()}, F),
    ("-a = -3", {"a": 3}, T),
    ("a = 1", {"a": None}, N),                      # a null entry is a missing property
]


@pytest.mark.parametrize(("expr", "props", "expected"), RULES, ids=[r[0] for r in RULES])
def test_rule(expr, props, expected):
    selector = compile(expr)
    assert raw(selector, props) == expected
    assert selector.matches(props) is (expected is True)
    assert outcome(expr, props, ignore_trailing=True) == expected  # same as RocketMQ


# ---------------------------------------------------------- parse errors
# (expr, 0-based position of the problem, fragment of the message)

ERRORS = [
    ("", 0, "empty expression"),
    ("   ", 3, "empty expression"),
    ("-- only a comment\n", 18, "empty expression"),
    ("a >", 3, "unexpected end of expression"),
    ("a = 1 AND", 9, "unexpected end"),
    ("a = 1 AND AND b = 2", 10, "unexpected token 'AND'"),
    ("(a = 1", 6, "expected ')'"),
    ("a = 1)", 5, "unexpected token ')'"),
    ("a = 1 b", 6, TRAILING_HINT),                  # the deliberate divergence
    ("a > 0x10", 5, TRAILING_HINT),
    ("a > 0L AND b = 1", 5, TRAILING_HINT),         # RocketMQ would read just 'a > 0'
    ("a = 1 NOT b", 10, "after NOT"),
    ("a NOT LIKE 'x'", 6, "after NOT"),
    ("a IS 5", 5, "expected NULL or NOT NULL"),
    ("a == 1", 3, "unexpected token '='"),
    ("a != 1", 2, "unexpected character '!'"),
    ('a = "x"', 4, "unexpected character '\"'"),
    ("a.b = 1", 1, "unexpected character '.'"),
    ("my-prop = 1", 2, TRAILING_HINT),
    ("1a = 1", 1, TRAILING_HINT),
    ("ünï = 1", 0, "unexpected character"),
    ("a = 'open", 4, "unterminated string"),
    ("a = 1 /* open", 6, "unterminated comment"),
    ("a > 'x'", 4, "cannot be compared with '>'"),
    ("'x' <= a", 0, "cannot be compared with '<='"),
    ("a > TRUE", 4, "cannot be compared"),
    ("a >= NULL", 5, "cannot be compared"),
    ("NOT a > 1", 0, "cannot be compared with '>'"),  # (NOT a) > 1
    ("(a = 1) < 2", 1, "cannot be compared"),
    ("a = NULL", 4, "NULL cannot be compared"),
    ("NULL <> a", 0, "NULL cannot be compared"),
    ("TRUE = 'x'", 7, "cannot be compared with"),
    ("FALSE = 1", 8, "cannot be compared with"),
    ("'a' IN ('x')", 0, "IN needs a property"),
    ("-a IN ('x')", 0, "IN needs a property"),
    ("a IN ()", 6, "quoted strings"),
    ("a IN (1)", 6, "quoted strings"),
    ("a IN ('x',)", 10, "quoted strings"),
    ("a IN 'x'", 5, "expected '('"),
    ("a BETWEEN 10 AND 0", 10, "greater than upper bound"),
    ("a BETWEEN 2.5 AND 1", 10, "greater than upper bound"),
    ("a BETWEEN NULL AND 1", 10, "cannot be NULL"),
    ("a BETWEEN 1 AND 'x'", 16, "cannot be compared"),
    ("a BETWEEN 'a' AND 'b'", 10, "cannot be compared"),
    ("a BETWEEN 1, 2", 11, "expected AND"),
    ("a CONTAINS x", 11, "quoted string"),
    ("a NOT STARTSWITH 1", 17, "quoted string"),
    ("'abc'", 0, "is not a condition"),
    ("5", 0, "is not a condition"),
    ("-a", 0, "is not a condition"),
    ("a = 1 AND 'x'", 10, "is not a condition"),
    ("5 OR a = 1", 0, "is not a condition"),
    ("NOT 5", 4, "is not a condition"),
    ("a > 100000000000000000000", 4, "out of range"),
    ("a > 9223372036854775808", 4, "out of range"),
    ("a > 1e400", 4, "too large"),
    ("a > 0.0", 4, "zero or too small"),
    ("a > 1e-400", 4, "zero or too small"),
    ("a = 1 AND\nb >", 13, "unexpected end"),
]


@pytest.mark.parametrize(("expr", "position", "fragment"), ERRORS, ids=[e[0] or "<empty>" for e in ERRORS])
def test_parse_error_points_at_problem(expr, position, fragment):
    err = parse_error(expr)
    assert fragment in str(err)
    assert err.position == position
    if "\n" not in expr:
        assert f"at column {position + 1}" in str(err)


def test_parse_error_on_a_later_line_names_line_and_column():
    err = parse_error("a = 1 AND\n  b >")
    assert err.position == 15 and "at line 2, column 6" in str(err)


def test_parse_error_is_a_subscription_parse_error_with_its_code():
    err = parse_error("a >")
    assert type(err) is SubscriptionParseError
    assert err.code.name == "SUBSCRIPTION_PARSE_FAILED"
    assert err.expression == "a >"


@pytest.mark.parametrize("bad", [None, 5, b"a = 1", ["a = 1"]])
def test_compile_rejects_non_strings(bad):
    with pytest.raises(SubscriptionParseError):
        compile(bad)
    with pytest.raises(SubscriptionParseError):
        compile_cached(bad)


@pytest.mark.parametrize("expr", ["(" * 49 + "a" + ")" * 49, "NOT " * 200 + "a", "(" * 100_000])
def test_too_deep_nesting_is_a_parse_error(expr):
    assert "nested too deeply" in str(parse_error(expr))


def test_long_flat_and_or_chains_are_fine():
    many = " AND ".join(f"a{i} = {i}" for i in range(3000))
    assert compile(many).matches({f"a{i}": str(i) for i in range(3000)})
    alternatives = " OR ".join(f"a = {i}" for i in range(3000))
    assert compile(alternatives).matches({"a": "2999"})


# -------------------------------------------- the deliberate divergence


@pytest.mark.parametrize(
    ("expr", "props", "rocketmq"),
    [
        ("a = 1 b", {"a": "1"}, True),                       # b ignored
        ("a > 0x10", {"a": "5"}, True),                      # means a > 0
        ("a > 0L AND b = 1", {"a": "5", "b": "2"}, True),    # AND b = 1 ignored
        ("a = 1 b !", {"a": "1"}, True),                     # never lexed past 'b'
    ],
)
def test_trailing_tokens_are_an_error_unlike_rocketmq(expr, props, rocketmq):
    assert TRAILING_HINT in str(parse_error(expr))
    assert compile(expr, ignore_trailing=True).evaluate(props) is rocketmq


def test_rocketmq_mode_still_rejects_a_bad_next_token():
    # RocketMQ peeks one token after the expression, so a lexical error there counts.
    with pytest.raises(SubscriptionParseError):
        compile("a = 1 !", ignore_trailing=True)
    with pytest.raises(SubscriptionParseError):
        compile("a = 1 NOT b", ignore_trailing=True)


# ------------------------------------------------------------------- API


def test_selector_keeps_expression_and_property_names():
    selector = compile("a > 5 AND b = 'x' OR c BETWEEN 1 AND 10 OR TAGS IN ('t')")
    assert selector.expression == "a > 5 AND b = 'x' OR c BETWEEN 1 AND 10 OR TAGS IN ('t')"
    assert selector.property_names == {"a", "b", "c", "TAGS"}
    assert "a > 5" in repr(selector)


def test_matches_never_raises_even_on_bad_input():
    selector = compile("a > 5")
    assert selector.matches({"a": "not a number"}) is False
    assert selector.matches(None) is False
    assert selector.matches({"a": ["list"]}) is False


def test_benchmark_expression_cases():
    selector = compile("a > 5 AND b = 'x' OR c BETWEEN 1 AND 10")
    assert selector.matches({"a": "7", "b": "x"})
    assert selector.matches({"c": "10"})
    assert not selector.matches({"a": "7", "b": "y", "c": "11"})
    assert selector.evaluate({"b": "x"}) is None


def test_compile_cached_returns_the_same_selector():
    compile_cached.cache_clear()
    first = compile_cached("a = 1")
    assert compile_cached("a = 1") is first
    assert compile_cached.cache_info().hits == 1
    with pytest.raises(SubscriptionParseError):
        compile_cached("a =")

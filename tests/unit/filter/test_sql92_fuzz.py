"""Fuzzing the SQL92 engine: token soups, generated selectors, mutated corpus expressions.

Seeded and bounded (runs in about a second). Properties checked:
- compile() raises nothing but SubscriptionParseError, always with a position
  inside the text;
- matches() never raises, and agrees with evaluate() when that does not raise;
- whatever strict mode accepts, RocketMQ-compatible mode accepts with the same
  results (strict mode only ever rejects more).
"""

import json
import pathlib
import random

from quiver.errors import SubscriptionParseError
from quiver_filter.sql92 import EvaluationError, compile

SEED = 92
CORPUS = json.loads(pathlib.Path(__file__).with_name("sql92_cases.json").read_text(encoding="utf-8"))
CORPUS_EXPRS = [c["expr"] for c in CORPUS["cases"]] + [c["expr"] for c in CORPUS["parse_accept"]]

VOCABULARY = (
    "a b c TAGS $x _y now NOT AND OR BETWEEN IN TRUE FALSE NULL IS CONTAINS STARTSWITH "
    "ENDSWITH not and or between in is contains = <> > >= < <= ( ) ( ) , + - "
    "0 1 7 10 -3 5L 0L 2147483648 9223372036854775807 9223372036854775808 5.5 5. .5 1e3 "
    "1e400 0.0 0x10 'x' '' 'it''s' 'a' '3' ' ' 'true' ' ! . \" /* */ -- \n \t ü"
).split(" ")
VALUES = ["1", "3", "-3", "+3", "03", " 4", "2.5", "3000000000", "NaN", "Infinity", "-0.0",
          "true", "TRUE", "x", "", "a", "it's", "\u0663", "0x1p3", "1e999", "9" * 40]
TYPED = [True, False, 0, 7, 2**40, 2.5, float("nan"), None, object()]


def _random_props(rng: random.Random) -> dict:
    props = {}
    for name in ("a", "b", "c", "TAGS", "$x", "_y", "now"):
        roll = rng.random()
        if roll < 0.6:
            props[name] = rng.choice(VALUES)
        elif roll < 0.7:
            props[name] = rng.choice(TYPED)
    return props


def _token_soup(rng: random.Random) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(1, 12)))


def _mutation(rng: random.Random) -> str:
    expr = rng.choice(CORPUS_EXPRS)[:200]
    for _ in range(rng.randint(1, 3)):
        i = rng.randint(0, len(expr))
        roll = rng.random()
        if roll < 0.4:
            expr = expr[:i] + rng.choice(VOCABULARY) + expr[i:]
        elif roll < 0.7:
            expr = expr[:i] + expr[i + rng.randint(1, 4):]
        else:
            expr = expr[:i] + rng.choice("()',=<>-+*/!.0123456789 \n") + expr[i:]
    return expr


def _operand(rng: random.Random, depth: int) -> str:
    roll = rng.random()
    if roll < 0.45 or depth > 3:
        return rng.choice(["a", "b", "c", "TAGS", "now"])
    if roll < 0.8:
        return rng.choice(["0", "3", "-3", "5L", "2147483648", "2.5", "-1e3", "'x'", "'3'", "TRUE", "NULL"])
    if roll < 0.9:
        return "-" + _operand(rng, depth + 1)
    return "(" + _operand(rng, depth + 1) + ")"


def _condition(rng: random.Random, depth: int = 0) -> str:
    """A mostly well-formed random selector, so that evaluation gets exercised."""
    roll = rng.random()
    if depth < 3 and roll < 0.25:
        op = rng.choice([" AND ", " OR "])
        return _condition(rng, depth + 1) + op + _condition(rng, depth + 1)
    if depth < 3 and roll < 0.32:
        return rng.choice(["NOT ", "NOT (", "("]) + _condition(rng, depth + 1) + ("" if roll < 0.27 else ")")
    left = _operand(rng, depth)
    kind = rng.randrange(6)
    if kind == 0:
        return f"{left} {rng.choice(['=', '<>', '>', '>=', '<', '<='])} {_operand(rng, depth)}"
    if kind == 1:
        return f"{left} {rng.choice(['', 'NOT '])}BETWEEN {_operand(rng, depth)} AND {_operand(rng, depth)}"
    if kind == 2:
        items = ", ".join(rng.choice(["'x'", "'3'", "''", "'a b'"]) for _ in range(rng.randint(1, 6)))
        return f"{left} {rng.choice(['', 'NOT '])}IN ({items})"
    if kind == 3:
        return f"{left} IS {rng.choice(['', 'NOT '])}NULL"
    if kind == 4:
        op = rng.choice(["CONTAINS", "STARTSWITH", "ENDSWITH"])
        return f"{left} {rng.choice(['', 'NOT '])}{op} {rng.choice(['x', '', '3', ' '])!r}"
    return left


def _check(expr: str, rng: random.Random) -> bool:
    """Exercise one expression; returns whether strict mode accepted it."""
    try:
        strict = compile(expr)
    except SubscriptionParseError as err:
        assert 0 <= err.position <= len(expr), (expr, err.position)
        try:
            compile(expr, ignore_trailing=True)
        except SubscriptionParseError:
            pass
        return False
    lenient = compile(expr, ignore_trailing=True)
    for _ in range(4):
        props = _random_props(rng)
        matched = strict.matches(props)
        assert isinstance(matched, bool)
        assert lenient.matches(props) is matched, expr
        try:
            result = strict.evaluate(props)
        except EvaluationError:
            assert matched is False
        else:
            assert result in (True, False, None)
            assert matched is (result is True), expr
    return True


def test_fuzz_token_soup_and_corpus_mutations():
    rng = random.Random(SEED)
    accepted = 0
    for i in range(6000):
        expr = _token_soup(rng) if i % 2 else _mutation(rng)
        accepted += _check(expr, rng)
    # The generator must reach the evaluator often enough to mean something.
    assert accepted > 300


def test_fuzz_generated_expressions_and_their_mutations():
    rng = random.Random(SEED + 2)
    accepted = 0
    for i in range(3000):
        expr = _condition(rng)
        if i % 3 == 0:
            at = rng.randint(0, len(expr))
            expr = expr[:at] + rng.choice(VOCABULARY) + expr[at:]
        accepted += _check(expr, rng)
    assert accepted > 1000


def test_fuzz_random_characters():
    rng = random.Random(SEED + 1)
    alphabet = "ab1 0.e'()=<>-+*/,!\"\n\tLxNOTANDIS"
    for _ in range(3000):
        expr = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))
        _check(expr, rng)

"""SQL92 message selectors, with RocketMQ's grammar and semantics.

Owns the public face of the engine: `compile(expr) -> Selector`,
`compile_cached(expr)` for servers, and `Selector.matches(props)`. A bad
expression raises `quiver.errors.SubscriptionParseError` whose message names
the column and whose `.position` is the 0-based offset of the problem.

The work is split by concern:
  sql92_lexer.py     tokens, comments, literal syntax, the parse-error helper
  sql92_parser.py    grammar, precedence, RocketMQ's parse-time rejections
  sql92_compiler.py  the tree -> closures, evaluation order, three-valued logic
  sql92_values.py    Java conversions and comparisons (Integer.valueOf, ...)

Semantics in one paragraph: a message matches only when the expression is
TRUE; FALSE, NULL (unknown, e.g. a missing property) and an evaluation error
(e.g. `a > 5` when a is 'abc') all filter it out. Property values are strings;
comparing one with a number literal parses it the way Java would for that
literal's type. Where Quiver differs from RocketMQ on purpose, see
SQL92_DIVERGENCES.md next to this file (mainly: trailing tokens are an error).

Tag subscriptions (`TagA || TagB`) are not SQL92 and are not handled here.
"""

import functools
from collections.abc import Mapping

from . import sql92_compiler, sql92_parser
from .sql92_values import EvaluationError

__all__ = ["Selector", "EvaluationError", "compile", "compile_cached"]

CACHE_SIZE = 1024


class Selector:
    """A compiled selector; immutable and safe to share between threads."""

    __slots__ = ("expression", "property_names", "_evaluate")

    def __init__(self, expression: str, evaluate, property_names: frozenset):
        self.expression = expression
        self.property_names = property_names  # every property the expression reads
        self._evaluate = evaluate

    def matches(self, props: Mapping[str, str]) -> bool:
        """True only if the expression is TRUE for these properties; never raises."""
        try:
            return self._evaluate(props) is True
        except Exception:  # an evaluation error is "no match", as on RocketMQ's broker
            return False

    def evaluate(self, props: Mapping[str, str]) -> bool | None:
        """The three-valued result (None = NULL/unknown); raises EvaluationError where Java throws.

        Values are normally strings. Typed values are accepted too and stand
        for Java's: bool -> Boolean, int -> Integer (Long beyond 32 bits),
        float -> Double, None -> absent, anything else -> an opaque Object.
        """
        return self._evaluate(props)

    def __repr__(self) -> str:
        return f"Selector({self.expression!r})"


def compile(expr: str, *, ignore_trailing: bool = False) -> Selector:  # noqa: A001 - the API name
    """Parse and compile `expr` once; raise SubscriptionParseError if it is not valid.

    `ignore_trailing=True` reproduces RocketMQ exactly, including its quirk of
    ignoring whatever follows a complete expression (`a = 1 b` means `a = 1`).
    """
    tree = sql92_parser.parse(expr, ignore_trailing=ignore_trailing)
    return Selector(expr, sql92_compiler.build(tree), sql92_compiler.property_names(tree))


def compile_cached(expr: str) -> Selector:
    """`compile(expr)` memoised in a bounded LRU, for servers that see the same expressions.

    Failures are not cached; a bad expression is parsed again each time.
    `compile_cached.cache_clear()` empties it.
    """
    if not isinstance(expr, str):
        return compile(expr)  # raises SubscriptionParseError, and keeps the cache hashable
    return _compile_lru(expr)


_compile_lru = functools.lru_cache(maxsize=CACHE_SIZE)(compile)
compile_cached.cache_clear = _compile_lru.cache_clear
compile_cached.cache_info = _compile_lru.cache_info

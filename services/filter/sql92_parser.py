"""Grammar of RocketMQ's SQL92 selectors and the checks RocketMQ makes while parsing.

Owns the syntax tree (`Node`) and the recursive-descent parser that mirrors
`SelectorParser.jj` production by production, including the parse-time
rejections RocketMQ's `ComparisonExpression.createXxx` factories make (string
or boolean operands of `>`, `= NULL`, reversed BETWEEN bounds, IN on a
non-property, ...). Evaluation lives in sql92_compiler.py / sql92_values.py.

Precedence, tightest first (so `NOT a = 1` is `(NOT a) = 1`):
    unary + - NOT  >  relational (> >= < <= [NOT] BETWEEN/IN/CONTAINS/
    STARTSWITH/ENDSWITH)  >  equality (= <> IS [NOT] NULL)  >  AND  >  OR

The one deliberate difference from RocketMQ: tokens left after a complete
expression are an error (RocketMQ silently ignores them, so `a > 0L AND b = 1`
would mean `a > 0`). `ignore_trailing=True` restores RocketMQ's behaviour.
"""

import math

from quiver.errors import SubscriptionParseError

from .sql92_lexer import EOF, FLOAT, ID, INT, STRING, Lexer, Token, parse_error, show
from .sql92_values import LONG_MAX, EvaluationError, JLong, compare

# Node kinds.
CONST, PROP, NEG, NOT, CAST = "const", "prop", "neg", "not", "cast"
REL, EQ, ISNULL, BETWEEN, IN, STROP, AND, OR = "rel", "eq", "isnull", "between", "in", "strop", "and", "or"
_CONDITIONS = frozenset((NOT, CAST, REL, EQ, ISNULL, BETWEEN, IN, STROP, AND, OR))

# Deeper expressions are refused rather than risking Python's recursion limit
# (RocketMQ's own limit is its thread stack). Parentheses cost the most stack.
MAX_PAREN_DEPTH = 48
MAX_TREE_DEPTH = 160

_REL_OPS = frozenset((">", ">=", "<", "<="))
_STR_OPS = {"CONTAINS": "contains", "STARTSWITH": "startswith", "ENDSWITH": "endswith"}
_AFTER_NOT = frozenset(("BETWEEN", "IN", *_STR_OPS))
_OPERAND_HINT = "expected a literal, a property name, '(', '+', '-' or NOT"


class Node:
    """One syntax-tree node: kind, source span [pos, end) and kind-specific args.

    args by kind: CONST (value,)  PROP (name,)  NEG/NOT/CAST (operand,)
    REL (op, left, right)  EQ (left, right, negated)  ISNULL (operand, negated)
    BETWEEN (value, low, high, negated)  IN (prop, values, negated)
    STROP (op, operand, search, negated)  AND/OR (left, right)
    """

    __slots__ = ("kind", "pos", "end", "args", "depth")

    def __init__(self, kind: str, pos: int, end: int, args: tuple, children=()):
        self.kind = kind
        self.pos = pos
        self.end = end
        self.args = args
        # A chain of one AND/OR is evaluated flat, so it adds no depth.
        flat = kind in (AND, OR)
        self.depth = max((c.depth + (not (flat and c.kind == kind)) for c in children), default=1)

    def __repr__(self) -> str:
        return f"Node({self.kind}, {self.args!r})"


def is_condition(node: Node) -> bool:
    """A Java BooleanExpression: a condition, or the TRUE/FALSE/NULL literal."""
    if node.kind == CONST:
        return node.args[0] is None or type(node.args[0]) is bool
    return node.kind in _CONDITIONS


def parse(source: str, ignore_trailing: bool = False) -> Node:
    """Parse a selector into a tree whose root is a condition, or raise SubscriptionParseError."""
    if not isinstance(source, str):
        raise parse_error("", 0, f"a selector must be a string, not {type(source).__name__}")
    try:
        return _parse_once(source, eof_comments=False, ignore_trailing=ignore_trailing)
    except SubscriptionParseError:
        if ignore_trailing or not _has_open_line_comment(source):
            raise
    # RocketMQ reads a `--` with no newline after it as two minus signs and
    # then ignores them as trailing tokens; read it as a comment instead,
    # which gives the same meaning without accepting other trailing tokens.
    return _parse_once(source, eof_comments=True, ignore_trailing=False)


def _parse_once(source: str, eof_comments: bool, ignore_trailing: bool) -> Node:
    try:
        return _Parser(source, eof_comments, ignore_trailing).parse()
    except RecursionError:  # the depth limits should make this unreachable
        raise parse_error(source, 0, "expression is nested too deeply") from None


def _has_open_line_comment(source: str) -> bool:
    last_line = source[max(source.rfind("\n"), source.rfind("\r")) + 1 :]
    return "--" in last_line


class _Parser:
    def __init__(self, source: str, eof_comments: bool, ignore_trailing: bool):
        self.source = source
        self.lexer = Lexer(source, eof_comments)
        self.ignore_trailing = ignore_trailing
        self.buffer: list[Token] = []
        self.prev_end = 0  # end offset of the last consumed token
        self.paren_depth = 0

    # -------------------------------------------------------------- tokens

    def peek(self, ahead: int = 0) -> Token:
        while len(self.buffer) <= ahead:
            self.buffer.append(self.lexer.next_token())
        return self.buffer[ahead]

    def advance(self) -> Token:
        tok = self.peek()
        self.buffer.pop(0)
        self.prev_end = tok.pos + len(tok.text)
        return tok

    def expect(self, kind: str, hint: str) -> Token:
        if self.peek().kind != kind:
            raise self.unexpected(hint)
        return self.advance()

    def unexpected(self, hint: str):
        tok = self.peek()
        if tok.kind == EOF:
            return parse_error(self.source, tok.pos, "unexpected end of expression", hint)
        return parse_error(self.source, tok.pos, f"unexpected token {show(tok.text)}", hint)

    def fail(self, node: Node, problem: str, hint: str = ""):
        return parse_error(self.source, node.pos, problem, hint)

    def text_of(self, node: Node) -> str:
        return show(self.source[node.pos : node.end])

    def make(self, kind: str, start: int, args: tuple, children=()) -> Node:
        node = Node(kind, start, self.prev_end, args, children)
        if node.depth > MAX_TREE_DEPTH:
            raise self.fail(node, "expression is nested too deeply", f"at most {MAX_TREE_DEPTH} levels")
        return node

    # ------------------------------------------------------------- grammar

    def parse(self) -> Node:
        if self.peek().kind == EOF:
            raise parse_error(self.source, self.peek().pos, "empty expression")
        node = self.or_expr()
        if not self.ignore_trailing and self.peek().kind != EOF:
            raise parse_error(
                self.source, self.peek().pos, f"unexpected token {show(self.peek().text)}",
                "the expression is already complete (join conditions with AND / OR)",
            )
        return self.as_condition(node)

    def or_expr(self) -> Node:
        left = self.and_expr()
        while self.peek().kind == "OR":
            self.advance()
            right = self.and_expr()
            operands = (self.as_condition(left), self.as_condition(right))
            left = self.make(OR, left.pos, operands, (left, right))
        return left

    def and_expr(self) -> Node:
        left = self.equality_expr()
        while self.peek().kind == "AND":
            self.advance()
            right = self.equality_expr()
            operands = (self.as_condition(left), self.as_condition(right))
            left = self.make(AND, left.pos, operands, (left, right))
        return left

    def equality_expr(self) -> Node:
        left = self.comparison_expr()
        while True:
            kind = self.peek().kind
            if kind in ("=", "<>"):
                self.advance()
                right = self.comparison_expr()
                left = self.make_equal(left, right, kind)
            elif kind == "IS":
                self.advance()
                negated = self.peek().kind == "NOT"
                if negated:
                    self.advance()
                self.expect("NULL", "expected NULL or NOT NULL after IS")
                left = self.make(ISNULL, left.pos, (left, negated), (left,))
            else:
                return left

    def comparison_expr(self) -> Node:
        left = self.unary_expr()
        while True:
            kind = self.peek().kind
            negated = kind == "NOT"
            if negated:
                # RocketMQ enters this loop on NOT and throws unless one of
                # BETWEEN / IN / CONTAINS / STARTSWITH / ENDSWITH follows.
                if self.peek(1).kind not in _AFTER_NOT:
                    self.advance()
                    raise self.unexpected("expected BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH after NOT")
                self.advance()
                kind = self.peek().kind
            if kind in _REL_OPS and not negated:
                self.advance()
                left = self.make_relational(kind, left, self.unary_expr())
            elif kind in _STR_OPS:
                self.advance()
                search = self.string_literal("expected a quoted string after " + kind)
                left = self.make(STROP, left.pos, (_STR_OPS[kind], left, search, negated), (left,))
            elif kind == "BETWEEN":
                self.advance()
                low = self.unary_expr()
                self.expect("AND", "expected AND between the BETWEEN bounds")
                left = self.make_between(left, low, self.unary_expr(), negated)
            elif kind == "IN":
                self.advance()
                left = self.make_in(left, self.string_list(), negated)
            else:
                return left

    def unary_expr(self) -> Node:
        # Prefix operators are collected in a loop, not by recursion, so a
        # long run of them cannot exhaust the stack.
        prefixes = []
        while self.peek().kind in ("+", "-", "NOT"):
            prefixes.append(self.advance())
        node = self.primary_expr()
        for tok in reversed(prefixes):
            if tok.kind == "-":
                node = self.make(NEG, tok.pos, (node,), (node,))
            elif tok.kind == "NOT":
                node = self.make(NOT, tok.pos, (self.as_condition(node),), (node,))
            # unary '+' is the identity, even on a string (RocketMQ does the same)
        return node

    def primary_expr(self) -> Node:
        tok = self.peek()
        kind = tok.kind
        if kind == ID:
            self.advance()
            return self.make(PROP, tok.pos, (tok.text,))
        if kind == "(":
            self.advance()
            self.paren_depth += 1
            if self.paren_depth > MAX_PAREN_DEPTH:
                raise parse_error(self.source, tok.pos, "expression is nested too deeply",
                                  f"at most {MAX_PAREN_DEPTH} levels of parentheses")
            node = self.or_expr()
            self.expect(")", "expected ')'")
            self.paren_depth -= 1
            return node  # parentheses leave the node as it is, as in RocketMQ
        if kind in (STRING, INT, FLOAT, "TRUE", "FALSE", "NULL"):
            return self.literal()
        raise self.unexpected(_OPERAND_HINT)

    def literal(self) -> Node:
        tok = self.peek()
        if tok.kind == STRING:
            value = self.string_literal("")
        else:
            self.advance()
            if tok.kind == INT:
                value = self.decimal_value(tok)
            elif tok.kind == FLOAT:
                value = self.float_value(tok)
            else:
                value = {"TRUE": True, "FALSE": False, "NULL": None}[tok.kind]
        return self.make(CONST, tok.pos, (value,))

    def string_literal(self, hint: str) -> str:
        tok = self.expect(STRING, hint)
        return tok.text[1:-1].replace("''", "'")

    def string_list(self) -> frozenset:
        self.expect("(", "expected '(' after IN")
        values = [self.string_literal("IN takes a list of quoted strings")]
        while self.peek().kind == ",":
            self.advance()
            values.append(self.string_literal("IN takes a list of quoted strings"))
        self.expect(")", "expected ',' or ')' in the IN list")
        return frozenset(values)

    def decimal_value(self, tok: Token) -> int:
        digits = tok.text.rstrip("lL")
        # Java: new Long(text), then Integer if it fits in 32 bits.
        if len(digits) > 19 or int(digits) > LONG_MAX:
            raise parse_error(self.source, tok.pos, f"integer {show(tok.text)} is out of range",
                              "literals must fit in a signed 64-bit long")
        value = int(digits)
        return value if value <= 2**31 - 1 else JLong(value)

    def float_value(self, tok: Token) -> float:
        value = float(tok.text)
        if math.isinf(value):
            raise parse_error(self.source, tok.pos, f"number {show(tok.text)} is too large for a double")
        if value == 0.0:
            # RocketMQ checks value < Double.MIN_VALUE, which rejects 0.0 itself.
            raise parse_error(self.source, tok.pos,
                              f"number {show(tok.text)} is zero or too small for a double",
                              "RocketMQ rejects float literals equal to 0; write 0")
        return value

    # ------------------------------------- RocketMQ's parse-time checks

    def as_condition(self, node: Node) -> Node:
        """SelectorParser.asBooleanExpression: a bare property becomes a boolean cast."""
        if is_condition(node):
            return node
        if node.kind == PROP:
            return Node(CAST, node.pos, node.end, (node,), (node,))
        raise self.fail(node, f"{self.text_of(node)} is not a condition",
                        "it must compare something, e.g. a = 1, or be a property name")

    def check_ordered_operand(self, node: Node, op: str) -> None:
        """ComparisonExpression.checkLessThanOperand."""
        if node.kind == CONST:
            if type(node.args[0]) in (int, JLong, float):
                return
            raise self.fail(node, f"{self.text_of(node)} cannot be compared with '{op}'",
                            "only numbers and properties can be")
        if is_condition(node):
            raise self.fail(node, f"the condition {self.text_of(node)} cannot be compared with '{op}'")

    def make_relational(self, op: str, left: Node, right: Node) -> Node:
        self.check_ordered_operand(left, op)
        self.check_ordered_operand(right, op)
        return self.make(REL, left.pos, (op, left, right), (left, right))

    def make_equal(self, left: Node, right: Node, op: str) -> Node:
        for side in (left, right):  # checkEqualOperand
            if side.kind == CONST and side.args[0] is None:
                raise self.fail(side, f"NULL cannot be compared with '{op}'", "use IS NULL / IS NOT NULL")
        # checkEqualOperandCompatability: TRUE/FALSE literal vs a non-boolean literal.
        if left.kind == CONST and right.kind == CONST and is_condition(left) and not is_condition(right):
            raise self.fail(right, f"{self.text_of(left)} cannot be compared with {self.text_of(right)}")
        return self.make(EQ, left.pos, (left, right, op == "<>"), (left, right))

    def make_between(self, value: Node, low: Node, high: Node, negated: bool) -> Node:
        # Only BETWEEN (not NOT BETWEEN) checks its bounds, and only when both
        # are literals: `-5` is a negation, not a literal, so it escapes.
        if not negated and low.kind == CONST and high.kind == CONST:
            lv, hv = low.args[0], high.args[0]
            if lv is None or hv is None:
                raise self.fail(low if lv is None else high, "BETWEEN bounds cannot be NULL")
            try:
                reversed_bounds = compare(hv, lv) < 0
            except EvaluationError:
                raise self.fail(high, f"BETWEEN bounds {self.text_of(low)} and {self.text_of(high)} "
                                      "cannot be compared") from None
            if reversed_bounds:
                raise self.fail(low, f"BETWEEN lower bound {self.text_of(low)} is greater than "
                                     f"upper bound {self.text_of(high)}")
        ops = ("<", ">") if negated else (">=", "<=")
        for op, bound in zip(ops, (low, high)):
            self.check_ordered_operand(value, op)
            self.check_ordered_operand(bound, op)
        return self.make(BETWEEN, value.pos, (value, low, high, negated), (value, low, high))

    def make_in(self, left: Node, values: frozenset, negated: bool) -> Node:
        if left.kind != PROP:
            raise self.fail(left, f"IN needs a property name on its left, not {self.text_of(left)}")
        return self.make(IN, left.pos, (left, values, negated), (left,))

"""Turns a parsed SQL92 selector into nested Python closures, built once per expression.

Owns evaluation order and three-valued logic: each closure takes the property
map and returns True, False or None (SQL NULL / unknown), or raises
`EvaluationError` where RocketMQ's Java evaluator throws. How two values
compare and convert is sql92_values.py's business; syntax is sql92_parser.py's.

Order matters because a Java exception aborts the whole evaluation: AND/OR
evaluate left to right and stop at the first deciding operand, exactly as
RocketMQ's LogicExpression does, so `b = 'x' OR a > 1` matches when b is 'x'
even if a is not a number, while `a > 1 OR b = 'x'` does not.

The common shapes (property op literal, property BETWEEN literals, IN, the
string operators) get closures that read the property once and convert it
inline; anything else falls back to generic closures with the same semantics.
"""

import operator

from .sql92_parser import (
    AND, BETWEEN, CAST, CONST, EQ, IN, ISNULL, NEG, NOT, OR, PROP, REL, STROP, Node,
)
from .sql92_values import (
    BOOL, DOUBLE, INT, LONG, STR, EvaluationError, compare_doubles, compare_ordered, equal,
    is_comparable, java_boolean, java_double, java_integer, java_long, jclass, negate,
)

_SIGN_TESTS = {
    ">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0,
}
_INT_TESTS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
_FLIPPED = {">": "<", ">=": "<=", "<": ">", "<=": ">="}
_STRING_TO = {INT: java_integer, LONG: java_long, DOUBLE: java_double}


def build(node: Node):
    """The closure evaluating `node`: props -> True / False / None / a value."""
    return _BUILDERS[node.kind](node)


def property_names(node: Node) -> frozenset:
    """Every property the expression reads."""
    names, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n.kind == PROP:
            names.add(n.args[0])
        stack.extend(a for a in n.args if isinstance(a, Node))
    return frozenset(names)


def _folded(node: Node):
    """(True, value) if `node` is a literal or a negated literal, else (False, None)."""
    if node.kind == CONST:
        return True, node.args[0]
    if node.kind == NEG:
        known, value = _folded(node.args[0])
        return (True, negate(value)) if known else (False, None)
    return False, None


# ------------------------------------------------------------- leaves


def _const(node: Node):
    value = node.args[0]
    return lambda p: value


def _prop(node: Node):
    name = node.args[0]
    return lambda p: p.get(name)


def _neg(node: Node):
    known, value = _folded(node)
    if known:
        return lambda p: value
    inner = build(node.args[0])
    return lambda p: negate(inner(p))


# --------------------------------------------------------- conditions


def _not(node: Node):
    inner = build(node.args[0])

    def not_(p):
        r = inner(p)
        return None if r is None else not r

    return not_


def _cast(node: Node):
    """A bare property as a condition: TRUE only for a real boolean value."""
    name = node.args[0].args[0]

    def cast(p):
        v = p.get(name)
        if v is None:
            return None
        return v if type(v) is bool else False

    return cast


def _isnull(node: Node):
    operand, negated = node.args
    if operand.kind == PROP:
        name = operand.args[0]
        return lambda p: (p.get(name) is None) is not negated
    inner = build(operand)
    return lambda p: (inner(p) is None) is not negated


def _eq(node: Node):
    left, right, neg = node.args
    l_known, lc = _folded(left)
    r_known, rc = _folded(right)
    if left.kind == PROP and r_known and rc is not None:
        return _eq_prop_value(left.args[0], rc, neg)
    if right.kind == PROP and l_known and lc is not None:
        return _eq_value_prop(lc, right.args[0], neg)
    lf, rf = build(left), build(right)

    def eq(p):
        lv, rv = lf(p), rf(p)
        if lv is None:
            return (not neg) if rv is None else None
        if rv is None:
            return neg
        return equal(lv, rv) is not neg

    return eq


def _eq_prop_value(name: str, c, neg: bool):
    """`prop = literal`: a missing property gives NULL."""
    cls = jclass(c)
    if cls == STR:
        def eq(p):
            v = p.get(name)
            if v is None:
                return None
            if type(v) is str:
                return (v == c) is not neg
            return equal(v, c) is not neg
        return eq
    convert = _string_equals(c)

    def eq_converted(p):
        v = p.get(name)
        if v is None:
            return None
        if type(v) is str:
            return convert(v) is not neg
        return equal(v, c) is not neg

    return eq_converted


def _eq_value_prop(c, name: str, neg: bool):
    """`literal = prop`: a missing property gives FALSE (RocketMQ's asymmetry)."""
    def eq(p):
        v = p.get(name)
        if v is None:
            return neg
        return equal(c, v) is not neg
    return eq


def _string_equals(c):
    """s -> (s converted to c's Java class) == c, raising where Java would."""
    cls = jclass(c)
    if cls == BOOL:
        return lambda s: java_boolean(s) is c
    if cls == DOUBLE and c == c and c != 0.0:
        # Plain == equals Double.compareTo() == 0 for a non-NaN, non-zero constant.
        return lambda s: java_double(s) == c
    if cls in (INT, LONG):
        to_number = _STRING_TO[cls]
        return lambda s: to_number(s) == c
    return lambda s: equal(s, c)


def _rel(node: Node):
    op, left, right = node.args
    generic = _rel_generic(op, build(left), build(right))
    l_known, lc = _folded(left)
    r_known, rc = _folded(right)
    if left.kind == PROP and r_known and rc is not None and jclass(rc) in _STRING_TO:
        return _rel_prop_number(left.args[0], op, rc, generic)
    if right.kind == PROP and l_known and lc is not None and jclass(lc) in _STRING_TO:
        # For a string property `5 < a` converts exactly like `a > 5`; other
        # value types keep the written order (Java's -1 fallback is one-sided).
        return _rel_prop_number(right.args[0], _FLIPPED[op], lc, generic)
    return generic


def _rel_generic(op: str, lf, rf):
    test = _SIGN_TESTS[op]

    def rel(p):
        lv = lf(p)
        if lv is None:
            return None
        if not is_comparable(lv):  # Java casts to Comparable before reading the right side
            raise EvaluationError("value is not comparable")
        rv = rf(p)
        if rv is None:
            return None
        return test(compare_ordered(lv, rv))

    return rel


def _string_test(op: str, c):
    """s -> `s op c` with s read as c's Java number class (raises if it is not one)."""
    cls = jclass(c)
    to_number = _STRING_TO[cls]
    if cls == DOUBLE:
        test = _SIGN_TESTS[op]
        return lambda s: test(compare_doubles(java_double(s), c))
    int_test = _INT_TESTS[op]
    return lambda s: int_test(to_number(s), c)


def _rel_prop_number(name: str, op: str, c, generic):
    """`prop op number`: a string is converted inline, anything else goes to `generic`."""
    if jclass(c) == INT:
        test = _INT_TESTS[op]

        def rel_int(p):
            v = p.get(name)
            if v is None:
                return None
            if type(v) is str:
                return test(java_integer(v), c)
            return generic(p)

        return rel_int
    str_test = _string_test(op, c)

    def rel(p):
        v = p.get(name)
        if v is None:
            return None
        if type(v) is str:
            return str_test(v)
        return generic(p)

    return rel


def _between(node: Node):
    """BETWEEN is `v >= lo AND v <= hi`; NOT BETWEEN is `v < lo OR v > hi` (RocketMQ's rewrite)."""
    value, low, high, negated = node.args
    ops = ("<", ">") if negated else (">=", "<=")
    first, second = (Node(REL, node.pos, node.end, (op, value, b)) for op, b in zip(ops, (low, high)))
    generic = _logic([build(first), build(second)], is_and=not negated)
    lo_known, lo = _folded(low)
    hi_known, hi = _folded(high)
    if not (value.kind == PROP and lo_known and hi_known):
        return generic
    if lo is None or hi is None or jclass(lo) not in _STRING_TO or jclass(hi) not in _STRING_TO:
        return generic
    name = value.args[0]
    if jclass(lo) == jclass(hi) == INT:
        def between_int(p):
            v = p.get(name)
            if v is None:
                return None
            if type(v) is str:
                x = java_integer(v)
                return (x < lo or x > hi) if negated else (lo <= x <= hi)
            return generic(p)
        return between_int
    test_lo, test_hi = _string_test(ops[0], lo), _string_test(ops[1], hi)

    def between(p):
        v = p.get(name)
        if v is None:
            return None
        if type(v) is str:
            # FALSE decides an AND, TRUE an OR; the second bound is only
            # converted (and can only fail) when the first does not decide.
            if test_lo(v) is negated:
                return negated
            return test_hi(v)
        return generic(p)

    return between


def _in(node: Node):
    prop, values, negated = node.args
    name = prop.args[0]

    def in_(p):
        v = p.get(name)
        if type(v) is not str:  # missing or not a string: NULL
            return None
        return (v in values) is not negated

    return in_


def _strop(node: Node):
    op, operand, search, negated = node.args
    if not search:
        return lambda p: False  # RocketMQ answers FALSE without reading the operand
    test = {"contains": lambda s: search in s, "startswith": lambda s: s.startswith(search),
            "endswith": lambda s: s.endswith(search)}[op]
    read = build(operand)

    def strop(p):
        v = read(p)
        if type(v) is not str:  # missing or not a string: FALSE, also for the NOT forms
            return False
        return test(v) is not negated

    return strop


def _and(node: Node):
    return _logic([build(n) for n in _flatten(node)], is_and=True)


def _or(node: Node):
    return _logic([build(n) for n in _flatten(node)], is_and=False)


def _flatten(node: Node) -> list:
    """Operands of a chain of the same AND/OR, in evaluation order (it is associative)."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if n.kind == node.kind:
            stack.extend(reversed(n.args))
        else:
            out.append(n)
    return out


def _logic(fns: list, is_and: bool):
    """Three-valued AND/OR: stop at the first deciding operand, else NULL if any was NULL."""
    decides = not is_and  # FALSE decides an AND, TRUE decides an OR
    if len(fns) == 2:
        f1, f2 = fns

        def logic2(p):
            r1 = f1(p)
            if r1 is decides:
                return decides
            r2 = f2(p)
            if r2 is decides:
                return decides
            return None if r1 is None or r2 is None else not decides

        return logic2

    def logic(p):
        unknown = False
        for f in fns:
            r = f(p)
            if r is decides:
                return decides
            if r is None:
                unknown = True
        return None if unknown else not decides

    return logic


_BUILDERS = {
    CONST: _const, PROP: _prop, NEG: _neg, NOT: _not, CAST: _cast, ISNULL: _isnull, EQ: _eq,
    REL: _rel, BETWEEN: _between, IN: _in, STROP: _strop, AND: _and, OR: _or,
}

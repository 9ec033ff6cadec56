"""`python -m quiver_filter check EXPR --props K=V ...`: evaluate a SQL92 selector locally.

The SDK's `quiver filter check` runs this as a process, so the SDK never imports the engine.
"""

import argparse
import sys

from quiver.errors import SubscriptionParseError

from . import sql92


def caret_lines(expr: str, position: int | None) -> list[str]:
    """The line of `expr` holding `position` and a caret under it."""
    if position is None:
        return [f"  {expr}"]
    position = max(0, min(position, len(expr)))
    start = expr.rfind("\n", 0, position) + 1
    end = expr.find("\n", position)
    line = expr[start:end if end >= 0 else len(expr)]
    return [f"  {line}", "  " + " " * (position - start) + "^"]


def check(args) -> int:
    """Evaluate a SQL92 selector against properties: exit 0 match, 1 no match, 2 bad input."""
    props = {}
    for item in args.props or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"error: --props takes KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        props[key] = value
    try:
        sel = sql92.compile(args.expression)
    except SubscriptionParseError as exc:
        print(f"error: {exc.remark}", file=sys.stderr)
        print("\n".join(caret_lines(args.expression, getattr(exc, "position", None))), file=sys.stderr)
        return 2
    try:
        value = sel.evaluate(props)
        shown = {True: "TRUE", False: "FALSE", None: "NULL"}.get(value, repr(value))
    except sql92.EvaluationError as exc:
        value, shown = None, f"evaluation error ({exc})"
    matched = value is True
    print(f"{shown} -> {'match' if matched else 'no match'}")
    if args.verbose:
        print(f"properties read: {', '.join(sorted(sel.property_names)) or '(none)'}")
    return 0 if matched else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m quiver_filter check",
                                description="SQL92 selectors: check an expression against properties")
    p.add_argument("expression")
    p.add_argument("--props", nargs="*", metavar="KEY=VALUE", help="message properties (TAGS, KEYS too)")
    p.add_argument("-v", "--verbose", action="store_true")
    return check(p.parse_args(argv))

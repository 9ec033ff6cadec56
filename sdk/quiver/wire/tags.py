"""Tag subscription expressions ("*", "TagA || TagB"): parsed once, used by broker and SDK."""

from functools import lru_cache

from quiver.wire.properties import tag_hash


@lru_cache(maxsize=1024)
def parse(expression: str | None) -> frozenset[str] | None:
    """The tag set, or None for "everything"."""
    if expression is None:
        return None
    expr = expression.strip()
    if expr in ("", "*"):
        return None
    tags = frozenset(t.strip() for t in expr.split("||") if t.strip())
    return tags or None


@lru_cache(maxsize=1024)
def hashes(expression: str | None) -> frozenset[int] | None:
    tags = parse(expression)
    return None if tags is None else frozenset(tag_hash(t) for t in tags)

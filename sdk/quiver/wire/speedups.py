"""Which implementation of the per-message hot functions runs: compiled or Python.

The Python functions are the reference. `quiver._speedups` (sdk/quiver/_speedups.c, an
optional extension pip builds at install) holds a twin of some of them under the same
name; `@fast` on a reference swaps in its twin when the extension is importable and
QUIVER_NO_SPEEDUPS is unset (or "0"). A twin returns either exactly what its reference
returns or NotImplemented, and then the reference runs with the same arguments: so a
malformed input raises the reference's own exception, and keyword calls go to the
reference. `ACTIVE` and `IMPLEMENTATION` say what runs in this process (what STATUS and
`quiver status` can report; neither does yet); `REASON` why the Python one, when it is.

The twins know no byte position of their own: each module that owns a binary layout hands
it over with `layout` (record.py its fixed fields, consume_queue.py its entry, index_file.py
its header and entry), so the positions have one description, the Python table. A twin
whose layout was not handed over, or was refused (a field it does not know or of another
width: the C code needs the change too), declines every call; `REFUSED` says which.

Owns the choice only: not the functions (quiver.wire's record, record_checks,
property_string and properties, the broker's queue_entries, consume_queue, index_file).
"""

import functools
import os
import struct
from typing import Any, Callable, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

REASON = ""
if os.environ.get("QUIVER_NO_SPEEDUPS", "") not in ("", "0"):
    _ext = None
    REASON = "QUIVER_NO_SPEEDUPS is set"
else:
    try:
        import quiver._speedups as _ext
    except ImportError as exc:  # installed without a compiler: the Python references run
        _ext = None
        REASON = f"quiver._speedups not built at install ({exc})"
    if _ext is not None and not hasattr(_ext, "Either"):  # built from an older _speedups.c
        _ext = None
        REASON = "quiver._speedups is older than this code (pip install -e . builds it again)"

ACTIVE = _ext is not None
IMPLEMENTATION = "c" if ACTIVE else "python"
LAYOUTS: dict[str, tuple] = {}  # layout name -> (table, extra) as its owner handed it over
REFUSED: dict[str, str] = {}  # layout name -> why the compiled twins refused it


def positions(table) -> tuple[int, tuple[tuple[str, int, int], ...]]:
    """(total size, ((name, offset, size), ...)) of a big-endian struct given as
    ((name, struct format), ...) in order."""
    out, at = [], 0
    for name, fmt in table:
        size = struct.calcsize(">" + fmt)
        out.append((name, at, size))
        at += size
    return at, tuple(out)


def layout(name: str, table, /, **extra) -> None:
    """Hand the compiled twins the layout `name`: `table` is ((field, struct format), ...) in
    order, `extra` what else they need (the NamedTuples they take or build, sizes). Refused,
    its twins decline (`REFUSED` says why)."""
    LAYOUTS[name] = (table, extra)
    if _ext is not None:
        hand_over(_ext, name)


def hand_over(ext, *names: str) -> None:
    """Hand the layouts `names` (default: all so far) to the extension module `ext`; the tests
    use it for the twins of a process that runs the references (QUIVER_NO_SPEEDUPS)."""
    for name in names or tuple(LAYOUTS):
        table, extra = LAYOUTS[name]
        try:
            ext.layout(name, *positions(table), extra)
            REFUSED.pop(name, None)
        except (ValueError, TypeError) as exc:
            REFUSED[name] = str(exc)


def fast(reference: _F) -> _F:
    """`reference`, or its compiled twin falling back to it (a keyword call, or the twin's
    NotImplemented, runs the reference): the choice is `_speedups.Either`, made in C without a
    Python frame per call. `.reference` is always the Python function (the tests compare the two)."""
    twin = getattr(_ext, reference.__name__, None)
    if twin is None:
        reference.reference = reference
        return reference
    either = functools.update_wrapper(_ext.Either(twin, reference), reference)
    either.reference = reference
    return either

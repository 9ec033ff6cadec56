"""Which implementation of the per-message hot functions runs: compiled or Python.

The Python functions are the reference. `quiver._speedups` (sdk/quiver/_speedups.c, an
optional extension pip builds at install) holds a twin of some of them under the same
name; `@fast` on a reference swaps in its twin when the extension is importable and
QUIVER_NO_SPEEDUPS is unset (or "0"). A twin returns either exactly what its reference
returns or NotImplemented, and then the reference runs with the same arguments: so a
malformed input raises the reference's own exception, and keyword calls go to the
reference. `ACTIVE` and `IMPLEMENTATION` say what runs in this process (what STATUS and
`quiver status` can report; neither does yet); `REASON` why the Python one, when it is.

Owns the choice only: not the functions (quiver.wire.record, quiver.client.message and
the broker's store, consume_queue, index_file).
"""

import functools
import os
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

ACTIVE = _ext is not None
IMPLEMENTATION = "c" if ACTIVE else "python"


def fast(reference: _F) -> _F:
    """`reference`, or its compiled twin falling back to it; `.reference` is always the
    Python function (the tests compare the two)."""
    twin = getattr(_ext, reference.__name__, None)
    if twin is None:
        reference.reference = reference
        return reference

    @functools.wraps(reference)
    def either(*args, **kwargs):
        if not kwargs:
            out = twin(*args)
            if out is not NotImplemented:
                return out
        return reference(*args, **kwargs)

    either.reference = reference
    return either

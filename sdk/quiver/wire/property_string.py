"""The properties string: "name\\x01value\\x02" repeated, RocketMQ's propertiesString.

A record stores its properties this way (record.py frames it, PROPLEN 2 bytes), a send
request carries it, and every layer writes it through `format_properties` and reads it
through `parse_properties` or, for one property on a hot path, `get_property`. Owns the
separators and nothing else: the names and what their values may hold are properties.py's,
the record's own __CRC32# property is record.py's.
"""

from quiver.wire.speedups import fast

NAME_SEP = "\x01"
PROP_SEP = "\x02"


def format_properties(props) -> str:
    """The properties string of a map or of (name, value) pairs, values as str() writes them:
    the one place it is assembled (clients, broker and services append what this returns)."""
    out = ""   # += in place, no comprehension frame, NAME_SEP and PROP_SEP as literals: per message sent
    for k, v in (props.items() if isinstance(props, dict) else props):
        out += f"{k}\x01{v}\x02"
    return out


@fast
def parse_properties(s: str) -> dict[str, str]:
    out = {}
    if not s:
        return out
    for item in s.split(PROP_SEP):
        if item:
            k, _, v = item.partition(NAME_SEP)
            out[k] = v
    return out


def get_property(s: str, name: str) -> str | None:
    """One property without building the whole map (hot path on the broker)."""
    key = name + NAME_SEP
    i = 0 if s.startswith(key) else s.find(PROP_SEP + key)
    if i < 0:
        return None
    start = i + len(key) + (0 if i == 0 and s.startswith(key) else 1)
    end = s.find(PROP_SEP, start)
    return s[start:end if end >= 0 else len(s)]


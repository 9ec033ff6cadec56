"""`quiver status`: every service's health, or with -v its whole STATUS, or with --json all of it
as one JSON document (for scripts and monitors).

The services are those `quiver up` started (its state file in --data-dir), else
the name servers and the brokers they know. A STATUS reply comes from a peer:
-v prints its strings with control characters escaped and its nesting cut at
MAX_DEPTH, so a reply cannot rewrite the terminal or run the printer out of stack.
"""

import json
import sys

MAX_DEPTH = 8


def targets(obj, state: dict | None) -> list[tuple[str, str, str]]:
    """(name, role, address) of each service to ask (`obj`: cli_common.Ctx)."""
    from quiver.client.access import broker_access
    from quiver.client.admin import Admin
    from quiver.errors import QuiverError
    if state and state.get("services"):
        return [(str(s.get("name")), str(s.get("role")), str(s.get("addr"))) for s in state["services"]]
    admin = obj.client(Admin)
    addrs = [("namesrv", "namesrv", a) for a in admin.namesrvs]
    try:
        addrs += [(n, "broker", a) for n, a in broker_access(admin).all_broker_addrs().items()]
    except QuiverError as exc:  # the name servers are still asked (and shown DOWN)
        print(f"name server unreachable: {exc}", file=sys.stderr)
    finally:
        admin.shutdown()
    return addrs


def ask(obj, addrs) -> list[dict]:
    """One row per service: name, role, addr, up, and status (up) or error (down)."""
    from quiver.errors import QuiverError
    from quiver.wire import requests as rq
    t = obj.transport("status")
    rows = []
    try:
        for name, role, addr in addrs:
            row = {"name": name, "role": role, "addr": addr}
            try:
                row["status"] = rq.StatusReply.decode(t.call(addr, rq.Status(), timeout=2.0).ext).status
                row["up"] = True
            except QuiverError as exc:
                row.update(up=False, error=str(exc))
            rows.append(row)
    finally:
        t.close()
    return rows


def cmd_status(obj, state: dict | None, verbose: bool = False, as_json: bool = False) -> int:
    rows = ask(obj, targets(obj, state))
    if as_json:
        print(json.dumps({"services": rows}, indent=2, default=str, sort_keys=True))
    else:
        for row in rows:
            print(summary(row))
            if verbose and row["up"]:
                for line in pretty(row["status"], 1):
                    print(line)
    return 0 if all(r["up"] for r in rows) else 1


def summary(row: dict) -> str:
    head = f"{_safe(row['name']):<16} {_safe(row['role']):<12} {_safe(row['addr']):<22}"
    if not row["up"]:
        return f"{head} DOWN {_safe(row['error'])}"
    st = row["status"]
    ha = f" {_safe(st['ha_role'])} id {_safe(st.get('broker_id'))}" if st.get("ha_role") else ""
    metrics = f" metrics http://{_safe(st['metrics'])}/metrics" if st.get("metrics") else ""
    version = f" version {_safe(st['version'])}" if st.get("version") else ""
    return f"{head} UP   pid {_safe(st.get('pid'))} uptime {_safe(st.get('uptime_s'))}s{version}{ha}{metrics}"


def pretty(obj, depth: int = 0) -> list[str]:
    """`obj` as indented `key: value` lines (lists of scalars on one line)."""
    pad = "  " * depth
    if depth > MAX_DEPTH:
        return [f"{pad}..."]
    lines = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj)
    for key, value in items:
        label = f"{pad}{_safe(key)}:" if isinstance(obj, dict) else f"{pad}-"
        if isinstance(value, (dict, list)) and value and not _flat(value):
            lines.append(label)
            lines.extend(pretty(value, depth + 1))
        else:
            lines.append(f"{label} {_scalar(value)}")
    return lines


def _flat(value) -> bool:
    return isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value)


def _scalar(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{}"
    return _safe(value)


def _safe(value) -> str:
    """A peer's value for a terminal: control characters (ESC, CR ...) escaped."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


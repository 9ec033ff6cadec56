"""What the cluster, scheduler and transactions pages show, read through `quiver.Admin` only.

Each function returns plain data for a template. A service or broker that does not answer
becomes a row with its error; the page still renders. Services are found the way the CLI
finds them: name servers from the settings, brokers and filter servers from the name
server's cluster info, schedulers and txn-checkers from the client ids their groups
register with the brokers (they carry the service's address). Not owned: HTML (templates)."""

import json
import logging

from quiver.errors import QuiverError

log = logging.getLogger(__name__)

TXN_GROUP = "CID_RMQ_SYS_TRANS"      # the txn-checkers' consumer group (quiver_txn's default)
MAX_STATUS_CHARS = 20_000            # a STATUS shown raw is cut here (it comes from a peer)


DENIED = "NoPermissionError: "   # how `attempt` words the cluster's refusal of this user's key


def denied(error: str | None) -> bool:
    """The error is the ACL's refusal (with auth on, the user looking lacks the right)."""
    return bool(error) and error.startswith(DENIED)


def attempt(fn, *args, **kw):
    """(value, None) or (None, error text): a down broker is a row, not a failed page."""
    try:
        return fn(*args, **kw), None
    except QuiverError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    except (ValueError, TypeError, KeyError) as exc:   # a peer's reply shaped unexpectedly
        log.warning("unexpected reply: %r", exc)
        return None, f"unexpected reply: {exc}"


def _status_row(admin, name: str, role: str, addr: str) -> dict:
    status, error = attempt(admin.status, addr)
    row = {"name": name, "role": role, "addr": addr, "up": status is not None, "error": error,
           "status": status or {}}
    if status:
        raw = json.dumps(status, indent=1, sort_keys=True, default=str)
        row["raw"] = raw if len(raw) <= MAX_STATUS_CHARS else raw[:MAX_STATUS_CHARS] + "\n..."
    return row


def _txn_checker_addrs(admin) -> list[str]:
    """txn-checker client ids are `txn@HOST:PORT#pid#nonce`."""
    stats = admin.consumer_stats(TXN_GROUP)
    return sorted({c.split("@", 1)[1].split("#", 1)[0] for c in stats["clients"]
                   if c.startswith("txn@") and "#" in c})


def services(admin) -> tuple[list[dict], list[str]]:
    """Every service found (name, role, addr, up, status or error), and what could not be listed."""
    problems = []
    rows = [_status_row(admin, f"namesrv-{i}", "namesrv", a) for i, a in enumerate(admin.namesrvs)]
    info, error = attempt(admin.cluster_info)
    if error:
        problems.append(f"cluster info: {error}")
        info = {"brokers": {}, "live": {}}
    for name, entry in sorted(info["brokers"].items()):
        for bid, addr in sorted(entry["addrs"].items(), key=lambda kv: int(kv[0])):
            row = _status_row(admin, name if bid == "0" else f"{name}-s{bid}", "broker", addr)
            row["broker_id"] = int(bid)
            rows.append(row)
    filters = sorted({f for live in info["live"].values() for f in (live.get("filter_servers") or [])})
    rows += [_status_row(admin, f"filter-{i}", "filter", a) for i, a in enumerate(filters)]
    for role, finder in (("scheduler", admin.scheduler_addrs), ("txn-checker", lambda: _txn_checker_addrs(admin))):
        addrs, error = attempt(finder)
        if error:
            problems.append(f"{role}s: {error}")
        rows += [_status_row(admin, f"{role}-{i}", role, a) for i, a in enumerate(addrs or [])]
    return rows, problems


def brokers(rows: list[dict]) -> list[dict]:
    """The broker rows of `services()` with their store figures pulled out of STATUS."""
    out = []
    for row in rows:
        if row["role"] != "broker":
            continue
        st = row["status"]
        store = st.get("store") or {}
        out.append({"name": row["name"], "addr": row["addr"], "up": row["up"], "error": row["error"],
                    "broker_id": row.get("broker_id"), "role": st.get("ha_role", "?"),
                    "cluster": st.get("cluster", ""), "topics": st.get("topics"),
                    "disk_ratio": store.get("disk_ratio"), "disk_free_bytes": store.get("disk_free_bytes"),
                    "disk_full": store.get("disk_full"), "min_offset": store.get("min_phys_offset"),
                    "max_offset": store.get("max_phys_offset"), "flushed_offset": store.get("flushed_offset"),
                    "held_pulls": st.get("held_pulls")})
    return out


def cluster(admin) -> dict:
    rows, problems = services(admin)
    ha, error = attempt(admin.ha_status)
    if error:
        problems.append(f"HA status: {error}")
    return {"services": rows, "brokers": brokers(rows), "ha": ha or [], "problems": problems}


def scheduler(admin) -> dict:
    """Pending delayed messages per level and delivery lateness of every scheduler."""
    found, error = attempt(admin.scheduler_status)
    rows, levels = [], set()
    for addr, st in sorted((found or {}).items()):
        pending = (st.get("pending") or {}) if "error" not in st else {}
        by_level = {str(k): v for k, v in (pending.get("levels") or {}).items()}
        levels.update(by_level)
        rows.append({"addr": addr, "error": st.get("error"), "levels": by_level, "timers": pending.get("timers", 0),
                     "total": sum(v for v in by_level.values() if isinstance(v, int)),
                     "delivered": st.get("delivered"), "early": st.get("early"), "lag": st.get("lag_ms") or {},
                     "owned": st.get("owned") or []})
    return {"schedulers": rows, "levels": sorted(levels, key=lambda s: (len(s), s)), "error": error}


def transactions(admin, limit: int) -> dict:
    """Open half messages per broker, oldest first."""
    found, error = attempt(admin.open_transactions, limit)
    rows = [{"broker": broker, **t} for broker, open_ in sorted((found or {}).items()) for t in open_]
    return {"rows": rows, "error": error, "limit": limit,
            "brokers": sorted(found or {}), "columns": _columns(rows)}


def _columns(rows: list[dict]) -> list[str]:
    """Column order of free-form rows: the well-known first, then the rest as they come."""
    known = ["broker", "transaction_id", "topic", "group", "age_ms", "checks", "half_offset", "first_offset", "keys"]
    seen = [c for c in known if any(c in r for r in rows)]
    for r in rows:
        seen += [c for c in r if c not in seen]
    return seen[:12]

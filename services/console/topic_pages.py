"""What the topics and consumer-groups pages show, read through `quiver.Admin` only.

Topics: every queue's min and max offset, and rates from successive page loads (`Rates`):
in = growth of the summed max offsets, out = growth of the summed consumer offsets of the
groups the console knows. Groups are those the brokers report (the list `quiver consumer list`
prints, read from each broker's STATUS so a down one leaves the others' listed) and --groups; each is asked for its offsets and members with
the user's key, and one the cluster refuses her is not listed. A broker that fails once is skipped for the rest of the page (one timeout,
not one per queue). What the cluster refuses the user looking (auth on: her key lacks the
right) is left out, counted, not shown as an error: a topic or group she may not read is not
listed. Not owned: HTML, input checks (inputs.py)."""

from quiver.client.access import broker_access
from quiver.wire.names import is_system_topic

from .cluster_pages import attempt, denied

MAX_GROUPS = 64     # groups asked for their offsets on one page


def broker_statuses(admin) -> tuple[dict[str, dict], str | None]:
    """broker name -> its master's STATUS (any user may read it), and what did not answer: a down
    broker leaves the others' groups and producers listed (Admin.group_list fails whole)."""
    addrs, error = attempt(broker_access(admin).all_broker_addrs)
    out, down = {}, []
    for name, addr in sorted((addrs or {}).items()):
        st, serror = attempt(admin.status, addr)
        if serror:
            down.append(f"{name}: {serror}")
        else:
            out[name] = st
    return out, error or ("; ".join(down) if down else None)


def known_groups(admin, configured: list[str], statuses=None) -> tuple[list[str], dict, str | None]:
    """(names, {group: {"brokers": [...]}}, error): every group a broker reports in its STATUS (what
    `quiver consumer list` lists, from Admin.group_list) and --groups."""
    statuses, error = statuses if statuses is not None else broker_statuses(admin)
    listed: dict[str, dict] = {}
    for broker, st in statuses.items():
        for g in st.get("groups") or {}:
            listed.setdefault(g, {"brokers": []})["brokers"].append(broker)
    return sorted(set(listed) | set(configured)), listed, error


def group_rows(admin, configured: list[str], statuses=None) -> tuple[list[dict], str | None, int]:
    """The groups page's list: (rows of name, brokers, online members, lag, topics; error; how many
    were left out: refused to this user, or past MAX_GROUPS). Members and lag are every broker's view
    (consumer_stats, with the user's rights), so what is listed is what she may read."""
    names, listed, error = known_groups(admin, configured, statuses)
    rows, left_out = [], max(0, len(names) - MAX_GROUPS)
    for g in names[:MAX_GROUPS]:
        stats, serror = attempt(admin.consumer_stats, g)
        if denied(serror):
            left_out += 1
            continue
        info = listed.get(g) or {}
        stats = stats or {"rows": [], "clients": []}
        rows.append({"name": g, "brokers": info.get("brokers", []), "error": serror,
                     "online": len(stats["clients"]), "clients": stats["clients"],
                     "lag": sum(r["lag"] or 0 for r in stats["rows"]),
                     "topics": sorted({r["topic"] for r in stats["rows"]})})
    return rows, error, left_out


def queue_rows(admin, topic: str, down: set[str]) -> tuple[list[dict], str | None]:
    """One row per read queue: broker, queue id, min and max offset, `local`: the first offset on
    the broker's disk (those below are served from its tiered store), and `compacted`: the first one
    not compacted (a compacted topic keeps the latest message of each key below it) (None where
    the broker failed)."""
    queues, error = attempt(admin.queues, topic)
    if error:
        return [], error
    rows = []
    for mq in queues:
        row = {"broker": mq.broker, "queue_id": mq.queue_id, "min": None, "max": None, "local": None, "compacted": None,
               "error": None}
        if mq.broker in down:
            row["error"] = "broker unreachable"
        else:
            row["min"], row["error"] = attempt(admin.min_offset, mq)
            if row["error"] is None:
                row["max"], row["error"] = attempt(admin.max_offset, mq)
            if row["error"] is None:
                row["local"], row["error"] = attempt(admin.min_offset, mq, local=True)
            if row["error"] is None:
                row["compacted"], row["error"] = attempt(admin.min_offset, mq, compacted=True)
            if row["error"] is not None:
                down.add(mq.broker)
        rows.append(row)
    return rows, None


def group_offsets(admin, groups: list[str], down_errors: list[str], refused: set | None = None) -> dict[str, dict]:
    """group -> consumer_stats rows (only groups that answered; refused ones go to `refused`, unnamed)."""
    out = {}
    for g in groups[:MAX_GROUPS]:
        stats, error = attempt(admin.consumer_stats, g)
        if denied(error):
            if refused is not None:
                refused.add(g)
            continue
        if error:
            down_errors.append(f"group {g}: {error}")
            continue
        out[g] = stats["rows"]
    return out


def topics(admin, rates, configured_groups: list[str], show_system: bool) -> dict:
    names, error = attempt(admin.topic_list)
    if error:
        return {"topics": [], "error": error, "groups": [], "problems": []}
    groups, _, gerror = known_groups(admin, configured_groups)
    problems: list[str] = [f"group list: {gerror}"] if gerror else []
    refused: set[str] = set()
    consumed = group_offsets(admin, groups, problems, refused)
    groups = [g for g in groups if g not in refused]
    down: set[str] = set()
    rows, hidden = [], 0
    for name in sorted(names):
        if is_system_topic(name) and not show_system:
            continue
        queues, qerror = queue_rows(admin, name, down)
        if denied(qerror) or (queues and all(denied(q["error"]) for q in queues)):
            hidden += 1
            continue
        ok = [q for q in queues if q["error"] is None]
        total_max = sum(q["max"] for q in ok)
        out_total = sum(r["consumer_offset"] or 0 for rows_ in consumed.values() for r in rows_ if r["topic"] == name)
        rows.append({"name": name, "queues": len(queues), "error": qerror,
                     "broken": len(queues) - len(ok), "min": sum(q["min"] for q in ok), "max": total_max,
                     "messages": sum(q["max"] - q["min"] for q in ok),
                     "in_rate": rates.sample(("in", name), total_max) if not qerror else None,
                     "out_rate": rates.sample(("out", name), out_total) if consumed else None,
                     "brokers": sorted({q["broker"] for q in queues})})
    return {"topics": rows, "error": None, "groups": groups, "problems": problems, "hidden": hidden}


def producer_rows(statuses: dict[str, dict]) -> list[dict]:
    """Producers online: rows of producer group, brokers, client ids, from the brokers' STATUS
    (`broker_statuses`), which any user may read (a producer group is no ACL resource)."""
    merged: dict[str, dict] = {}
    for broker, st in sorted(statuses.items()):
        for grp, clients in (st.get("producers") or {}).items():
            row = merged.setdefault(grp, {"name": grp, "brokers": [], "clients": set()})
            row["brokers"].append(broker)
            row["clients"].update(clients)
    return [{**r, "clients": sorted(r["clients"])} for _, r in sorted(merged.items())]


def readable_groups(admin, groups: list[str]) -> list[str]:
    """`groups` less those whose offsets the cluster refuses this user (group GET)."""
    return [g for g in groups[:MAX_GROUPS] if not denied(attempt(admin.consumer_stats, g)[1])]


def topic(admin, rates, name: str, configured_groups: list[str]) -> dict:
    queues, error = queue_rows(admin, name, set())
    groups, _, gerror = known_groups(admin, configured_groups)
    problems: list[str] = [f"group list: {gerror}"] if gerror else []
    consumed = group_offsets(admin, groups, problems)
    by_group = []
    for g, rows in sorted(consumed.items()):
        mine = [r for r in rows if r["topic"] == name]
        if mine:
            total = sum(r["consumer_offset"] or 0 for r in mine)
            by_group.append({"group": g, "consumer_offset": total, "lag": sum(r["lag"] or 0 for r in mine),
                             "out_rate": rates.sample(("out", name, g), total)})
    for q in queues:
        q["in_rate"] = rates.sample(("in", name, q["broker"], q["queue_id"]), q["max"]) if q["max"] is not None else None
    route, route_error = attempt(admin.topic_route, name)
    return {"name": name, "queues": queues, "error": error or route_error, "groups": by_group,
            "problems": problems, "route": route}


def group(admin, name: str) -> dict:
    """Members, lag per queue and subscription conflicts of one group (every broker's view)."""
    stats, error = attempt(admin.consumer_stats, name)
    if error:
        return {"name": name, "error": error, "rows": [], "clients": [], "conflicts": {}, "topics": [], "lag": 0}
    rows = stats["rows"]
    return {"name": name, "error": None, "rows": rows, "clients": stats["clients"], "conflicts": stats["conflicts"],
            "topics": sorted({r["topic"] for r in rows}), "lag": sum(r["lag"] or 0 for r in rows)}

"""Charts drawn on the server: the history of a topic's in and out rates and its groups' lag, and
the coordinates of an inline SVG (macros.html draws it: no script, so the CSP stays script-free).

`History` keeps the last `MAX_POINTS` samples per series (a topic's in rate, a group's out rate
or lag on it), taken when its page is loaded (`<meta refresh>` on the topic page keeps them
coming while it is open); bounded in series too, the oldest go first. `chart` turns series into
polyline points, pure and unit-tested. Not owned: where the values come from (topic_pages)."""

import math
import threading
import time
from collections import OrderedDict, deque

MAX_POINTS = 120       # samples kept per series
MAX_SERIES = 2_000     # series kept; the least recently sampled go first
WIDTH, HEIGHT, PAD = 560, 160, 36
COLORS = ("#2f6fde", "#d9480f", "#2b8a3e", "#862e9c", "#c2255c", "#5c940d", "#1098ad", "#e67700")
MAX_LINES = len(COLORS)


class History:
    def __init__(self, clock=time.time):
        self._clock = clock
        self._lock = threading.Lock()   # pages run on several HTTP threads
        self._series: OrderedDict = OrderedDict()

    def add(self, key, value) -> None:
        """Record `value` (None: nothing measured this time, skipped) for series `key` now."""
        if value is None:
            return
        now_ms = int(self._clock() * 1000)
        with self._lock:
            points = self._series.pop(key, None) or deque(maxlen=MAX_POINTS)
            points.append((now_ms, float(value)))
            self._series[key] = points
            while len(self._series) > MAX_SERIES:
                self._series.popitem(last=False)

    def points(self, key) -> list[tuple[int, float]]:
        with self._lock:
            return list(self._series.get(key, ()))


def nice_max(value: float) -> float:
    """The axis top: 1, 2 or 5 times a power of ten at or above `value` (1 for nothing)."""
    if value <= 0:
        return 1.0
    base = 10.0 ** math.floor(math.log10(value))
    return next(step * base for step in (1, 2, 5, 10) if step * base >= value)


def chart(title: str, unit: str, series: dict[str, list[tuple[int, float]]]) -> dict:
    """What macros.html's `chart` draws: lines (label, color, "x,y ..." points, last value), the
    y axis top, the time span (epoch ms) and the box; `empty` when no line has 2 points yet."""
    named = [(label, pts) for label, pts in series.items() if pts][:MAX_LINES]
    all_pts = [p for _, pts in named for p in pts]
    out = {"title": title, "unit": unit, "width": WIDTH, "height": HEIGHT, "pad": PAD, "lines": [],
           "empty": not any(len(pts) >= 2 for _, pts in named)}
    if not all_pts:
        return {**out, "ymax": 1.0, "t0": 0, "t1": 0}
    t0, t1 = min(t for t, _ in all_pts), max(t for t, _ in all_pts)
    ymax = nice_max(max(v for _, v in all_pts))
    span_x, span_y = WIDTH - 2 * PAD, HEIGHT - 2 * PAD

    def xy(t: int, v: float) -> str:
        x = PAD + (span_x * (t - t0) / (t1 - t0) if t1 > t0 else span_x)
        y = HEIGHT - PAD - span_y * min(v, ymax) / ymax
        return f"{x:.1f},{y:.1f}"
    for i, (label, pts) in enumerate(named):
        out["lines"].append({"label": label, "color": COLORS[i], "points": " ".join(xy(t, v) for t, v in pts),
                             "last": pts[-1][1]})
    return {**out, "ymax": ymax, "t0": t0, "t1": t1}


def topic_charts(history: History, data: dict) -> list[dict]:
    """Record the topic page's figures (`topic_pages.topic`'s data) and chart their history: in and
    out rates (messages/s), then the lag of each group consuming it (messages)."""
    name = data["name"]
    ins = [q["in_rate"] for q in data["queues"] if q.get("error") is None]
    history.add(("in", name), sum(ins) if ins and None not in ins else None)
    rates = {"in": history.points(("in", name))}
    lags = {}
    for g in data["groups"]:
        history.add(("out", name, g["group"]), g["out_rate"])
        history.add(("lag", name, g["group"]), g["lag"])
        rates[f"out {g['group']}"] = history.points(("out", name, g["group"]))
        lags[g["group"]] = history.points(("lag", name, g["group"]))
    return [chart("in and out", "msg/s", rates), chart("lag", "messages", lags)]


def group_charts(history: History, data: dict) -> list[dict]:
    """Record a group's total lag (`topic_pages.group`'s data) and chart its history."""
    if data["error"]:
        return []
    history.add(("group-lag", data["name"]), data["lag"])
    return [chart("total lag", "messages", {data["name"]: history.points(("group-lag", data["name"]))})]

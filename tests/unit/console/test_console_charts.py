"""The console's charts: history bounded per series and in series, and the SVG coordinates."""

from quiver_console import charts
from quiver_console.charts import History, chart, nice_max


def test_axis_top_is_1_2_or_5_times_a_power_of_ten():
    assert [nice_max(v) for v in (0, 0.3, 1, 3, 7, 11, 999, 1001)] == [1, 0.5, 1, 5, 10, 20, 1000, 2000]


def test_points_span_the_box_and_are_clipped_to_the_axis():
    c = chart("lag", "messages", {"billing": [(1000, 0.0), (2000, 5.0), (3000, 10.0)], "idle": []})
    assert not c["empty"] and c["ymax"] == 10 and (c["t0"], c["t1"]) == (1000, 3000)
    (line,) = c["lines"]   # a series without points draws no line
    xs = [float(p.split(",")[0]) for p in line["points"].split()]
    ys = [float(p.split(",")[1]) for p in line["points"].split()]
    assert xs[0] == charts.PAD and xs[-1] == charts.WIDTH - charts.PAD
    assert ys[0] == charts.HEIGHT - charts.PAD and ys[-1] == charts.PAD and line["last"] == 10
    assert chart("x", "u", {"a": [(5, 1.0)]})["empty"]                              # one sample: no line yet
    assert chart("x", "u", {})["empty"]


def test_history_keeps_the_last_points_and_forgets_old_series(monkeypatch):
    monkeypatch.setattr(charts, "MAX_SERIES", 3)
    now = [100.0]
    h = History(clock=lambda: now[0])
    for i in range(charts.MAX_POINTS + 5):
        now[0] += 1
        h.add("a", i)
    h.add("a", None)   # nothing measured: no point
    pts = h.points("a")
    assert len(pts) == charts.MAX_POINTS and pts[-1] == (int(now[0] * 1000), charts.MAX_POINTS + 4)
    for key in ("b", "c", "d"):
        h.add(key, 1)
    assert h.points("a") == [] and h.points("d") == [(int(now[0] * 1000), 1.0)]

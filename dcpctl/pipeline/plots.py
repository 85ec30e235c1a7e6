"""PNG plots of ``analyze`` (matplotlib, no display): seqno progress, throughput, unacknowledged bytes, and
an overview with the three as panels of one figure, for a case note.

Every x axis is the time since the capture's first message, in seconds (milliseconds for a capture shorter
than a second), never below zero: the per-second rows are whole seconds of the clock, so the first one
starts before the capture does, and is drawn from the capture's start. Few points get markers, so that a
short capture's plot is not an empty frame; a window far above the unacknowledged bytes is named rather than
drawn, so that it does not flatten them.
"""

from __future__ import annotations

import datetime
import itertools
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

# The files write() makes, in this order; a --plots directory inside a dataset that holds only these is the
# dataset's own (job.replace deletes them with it).
NAMES: Final = ("seqno-progress.png", "throughput.png", "unacked-bytes.png", "overview.png")
# A series with at most this many points is drawn with markers: a single point, or a few, is then visible.
MARKER_POINTS: Final = 50
LEGEND_ENTRIES: Final = 16  # more series than this get no legend (it would hide the plot)
# Buckets of the throughput plot at most: a long capture's seconds are summed in buckets of whole seconds.
THROUGHPUT_POINTS: Final = 2000
# A window more than this many times the most unacknowledged bytes is named, not drawn (it would flatten them)
WINDOW_SCALE: Final = 4
DPI: Final = 100


@dataclass(frozen=True)
class Clock:
    """The plots' time axis: seconds since ``start`` (the capture's first message), shown in ``unit``."""

    start: float
    length: float  # seconds from the first message to the last

    @property
    def scale(self) -> float:
        return 1000.0 if self.length < 1 else 1.0

    @property
    def unit(self) -> str:
        return "ms" if self.scale == 1000.0 else "s"

    def at(self, ts: float) -> float:
        """``ts`` on the axis; never before the start."""
        return max(ts - self.start, 0.0) * self.scale

    @property
    def end(self) -> float:
        return self.length * self.scale

    def described(self) -> str:
        """The capture's length, as the axis counts it."""
        return f"{self.end:,.1f} {self.unit}" if self.end >= 10 else f"{self.end:.3g} {self.unit}"

    def label(self) -> str:
        start = datetime.datetime.fromtimestamp(self.start, datetime.UTC).isoformat().replace("+00:00", "Z")
        return f"time since the capture's start, {start} ({self.unit})"


def _marker(points: int) -> str:
    return "o" if points <= MARKER_POINTS else ""


def _frame(axes: Any, clock: Clock, title: str, ylabel: str, series: int) -> None:
    """Title, units, plain numbers (no offset, no exponent), the axis from 0 to the capture's end, a legend."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator, StrMethodFormatter  # noqa: PLC0415

    axes.set(title=title, xlabel=clock.label(), ylabel=ylabel)
    # plain numbers: no offset ("+1.7e9"), no exponent
    axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _position: f"{x:,g}"))
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))  # seqnos, items and bytes are whole numbers
    axes.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    margin = clock.end * 0.02 or 0.001
    axes.set_xlim(0 - margin, clock.end + margin)  # a capture of one point still gets an axis around it
    axes.set_ylim(bottom=0)
    axes.grid(visible=True, alpha=0.3)
    if 0 < series <= LEGEND_ENTRIES:
        axes.legend(fontsize=7, loc="best")
    if series == 0:
        axes.text(0.5, 0.5, "nothing to show", transform=axes.transAxes, ha="center", va="center", color="grey")


def _progress(axes: Any, clock: Clock, progress: list[dict[str, Any]], rollbacks: list[dict[str, Any]]) -> None:
    series: dict[Any, list[tuple[float, int]]] = defaultdict(list)
    for point in progress:
        series[point["vb"]].append((clock.at(point["ts"]), point["seqno"]))
    ordered = sorted(series.items(), key=lambda kv: (kv[0] is None, kv[0]))
    crowded = len(series) > LEGEND_ENTRIES
    if crowded:  # a thin line per vbucket shows the spread; one collection draws a thousand of them at once
        from matplotlib.collections import LineCollection  # noqa: PLC0415

        axes.add_collection(LineCollection([points for _, points in ordered], linewidths=0.6, alpha=0.5,
                                           colors=[f"C{index % 10}" for index in range(len(ordered))]))
        axes.autoscale_view()
    else:
        for vb, points in ordered:
            axes.plot([p[0] for p in points], [p[1] for p in points], label=f"vbucket {vb}", linewidth=1,
                      marker=_marker(len(points)), markersize=4)
    for rollback in rollbacks:
        at = clock.at(rollback["ts"])
        axes.axvline(at, color="red", linestyle="--", linewidth=1)
        axes.annotate(f"rollback vbucket {rollback['vb']} to {rollback['rollback_seqno']}", (at, 0.02),
                      xycoords=("data", "axes fraction"), rotation=90, fontsize=7, color="red", va="bottom",
                      ha="right")
    title = f"highest seqno of each of {len(series)} vbuckets" if crowded else "highest seqno per vbucket"
    _frame(axes, clock, f"{title} (red: rollbacks)", "by_seqno", len(series))
    if series:  # seqnos start far from zero: the axis follows them
        axes.set_ylim(auto=True)
        axes.autoscale(axis="y")


def _throughput(axes: Any, clock: Clock, per_second: list[dict[str, Any]]) -> None:
    per_connection: dict[str, dict[int, int]] = defaultdict(dict)
    for row in per_second:
        per_connection[row["connection"]][row["second"]] = row["items"]
    first = math.floor(clock.start)
    seconds = max(1, math.floor(clock.start + clock.length) - first + 1)
    width = max(1, math.ceil(seconds / THROUGHPUT_POINTS))  # whole seconds per bucket
    buckets = math.ceil(seconds / width)
    for connection, counts in sorted(per_connection.items()):
        totals = [0] * buckets
        for second, items in counts.items():
            totals[(second - first) // width] += items
        rates = [total / width for total in totals]
        edges = [clock.at(first + i * width) for i in range(buckets)] + [clock.end]
        steps = axes.stairs(rates, edges, label=connection, linewidth=1.5, baseline=0)
        if buckets <= MARKER_POINTS:
            middles = [(a + b) / 2 for a, b in itertools.pairwise(edges)]
            axes.plot(middles, rates, linestyle="", marker="o", markersize=4, color=steps.get_edgecolor())
    unit = "items/s" if width == 1 else f"items/s (mean over {width} s)"
    _frame(axes, clock, "items pushed per second per connection", unit, len(per_connection))
    if per_connection and clock.length < 1:
        axes.text(0.5, 0.03, "a capture shorter than a second: its items in the second it falls in", fontsize=8,
                  transform=axes.transAxes, ha="center", va="bottom", color="grey")


def _unacked(axes: Any, clock: Clock, levels: list[dict[str, Any]], windows: dict[str, int | None]) -> None:
    series: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for row in levels:
        series[row["connection"]].append((clock.at(row["ts"]), row["unacked"]))
    for connection, points in sorted(series.items()):
        window = windows.get(connection)
        drawn = window is not None and 0 < window <= WINDOW_SCALE * max(*(p[1] for p in points), 1)
        label = connection if drawn or not window else f"{connection} (window {window} bytes, off the scale)"
        line = axes.plot([p[0] for p in points], [p[1] for p in points], label=label, linewidth=1,
                         drawstyle="steps-post", marker=_marker(len(points)), markersize=4)
        if drawn:
            axes.axhline(window, color=line[0].get_color(), linestyle="--", linewidth=1)
    _frame(axes, clock, "unacknowledged bytes per connection (dashed: its window)", "bytes", len(series))


def figures(span: tuple[float, float] | None, progress: list[dict[str, Any]], rollbacks: list[dict[str, Any]],
            per_second: list[dict[str, Any]], unacked: list[dict[str, Any]],
            windows: dict[str, int | None]) -> list[tuple[str, Any]]:
    """The figures of ``NAMES``, by name (matplotlib's, to save and close); ``span``: the times of the
    capture's first and last message (None: no message), ``unacked``: the most unacknowledged bytes per
    connection per time bucket, ``windows``: each connection's window."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    from matplotlib import pyplot  # noqa: PLC0415

    first, last = span or (0.0, 0.0)
    clock = Clock(first, last - first)
    panels: list[Callable[[Any], None]] = [
        lambda axes: _progress(axes, clock, progress, rollbacks),
        lambda axes: _throughput(axes, clock, per_second),
        lambda axes: _unacked(axes, clock, unacked, windows),
    ]
    made = []
    for name, draw in zip(NAMES, panels, strict=False):
        figure, axes = pyplot.subplots(figsize=(10, 4.5))
        draw(axes)
        made.append((name, figure))
    figure, grid = pyplot.subplots(len(panels), 1, figsize=(10, 12), sharex=True)
    for axes, draw in zip(grid, panels, strict=True):
        draw(axes)
    for axes in grid[:-1]:  # one time axis, named at the bottom
        axes.set_xlabel("")
    connections = len({row["connection"] for row in per_second})
    figure.suptitle(f"dcpctl analyze: {connections} connection{'s' * (connections != 1)}, "
                    f"{clock.described()} of capture", fontsize=11)
    made.append((NAMES[-1], figure))
    return made


def write(directory: Path, span: tuple[float, float] | None, progress: list[dict[str, Any]],
          rollbacks: list[dict[str, Any]], per_second: list[dict[str, Any]], unacked: list[dict[str, Any]],
          windows: dict[str, int | None]) -> list[Path]:
    """The plots of :func:`figures` as PNG files in ``directory``."""
    from matplotlib import pyplot  # noqa: PLC0415

    made = figures(span, progress, rollbacks, per_second, unacked, windows)
    written = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, figure in made:
            path = directory / name
            figure.tight_layout()
            figure.savefig(path, dpi=DPI)
            written.append(path)
    finally:
        for _, figure in made:
            pyplot.close(figure)
    return written

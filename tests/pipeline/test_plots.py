"""The plots a support engineer puts in a case note: relative time from the capture's start, never negative,
markers on few points, titles and units on every axis, one overview figure; bounded on long captures.
(The sample's plots, through Spark, are checked in test_analyze.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dcpctl.pipeline import plots

pytest.importorskip("matplotlib")
START = 1_700_000_000.25


def drawn(made: list[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """Each axes of each figure, drawn (tick labels and offsets exist only once drawn)."""
    for name, figure in made:
        figure.canvas.draw()
        for axes in figure.axes:
            yield name, axes


def x_values(axes: Any) -> list[float]:
    values = [float(x) for line in axes.get_lines() for x in line.get_xdata()]
    values += [float(x) for patch in axes.patches for x in patch.get_data().edges]  # stairs
    values += [float(x) for lines in axes.collections for segment in lines.get_segments() for x in segment[:, 0]]
    return values


def close(made: list[tuple[str, Any]]) -> None:
    from matplotlib import pyplot  # noqa: PLC0415

    for _, figure in made:
        pyplot.close(figure)


def hours(length: int, connections: int = 3) -> dict[str, Any]:
    """A capture of ``length`` seconds: per-second rows, 1024 vbuckets' progress, unacknowledged bytes."""
    names = [f"127.0.0.1:{50200 + c} > 127.0.0.1:11210" for c in range(connections)]
    per_second = [{"connection": name, "second": int(START) + s, "items": 1000 + s % 7, "unacked": 500}
                  for s in range(length) for name in names]
    progress = [{"vb": vb, "ts": START + length * b / 10, "seqno": 100 * b + vb} for vb in range(1024)
                for b in range(10)]
    unacked = [{"connection": name, "ts": START + length * b / 2000, "unacked": (b * 997) % 20_000}
               for name in names for b in range(2000)]
    return {"span": (START, START + length - 0.5), "progress": progress, "rollbacks": [], "per_second": per_second,
            "unacked": unacked, "windows": dict.fromkeys(names, 20_000)}


def test_a_long_capture_reads_in_seconds_from_its_start_and_stays_bounded() -> None:
    data = hours(6 * 3600)
    made = plots.figures(**data)
    try:
        assert [name for name, _ in made] == list(plots.NAMES)
        for name, axes in drawn(made):
            assert axes.get_title(), name
            assert axes.get_ylabel(), name
            if name != "overview.png" or axes is axes.figure.axes[-1]:
                assert axes.get_xlabel() == "time since the capture's start, 2023-11-14T22:13:20.250000Z (s)"
            assert axes.xaxis.get_offset_text().get_text() == ""  # no "+1.7e9" offset
            assert axes.yaxis.get_offset_text().get_text() == ""
            assert min(x_values(axes)) >= 0
            assert axes.get_xlim()[0] > -0.05 * 6 * 3600
        throughput = dict(made)["throughput.png"].axes[0]
        assert all(len(patch.get_data().values) <= plots.THROUGHPUT_POINTS for patch in throughput.patches)
        assert throughput.get_ylabel() == "items/s (mean over 11 s)"
        progress = dict(made)["seqno-progress.png"].axes[0]
        [vbuckets] = progress.collections  # 1024 thin lines, without markers
        assert len(vbuckets.get_segments()) == 1024
        assert progress.get_legend() is None
        unacked = dict(made)["unacked-bytes.png"].axes[0]
        assert len([line for line in unacked.get_lines() if line.get_linestyle() == "--"]) == 3  # the windows
    finally:
        close(made)


def test_no_message_is_an_empty_plot_that_says_so() -> None:
    made = plots.figures(None, [], [], [], [], {})
    try:
        for name, axes in drawn(made):
            assert "nothing to show" in [text.get_text() for text in axes.texts], name
    finally:
        close(made)

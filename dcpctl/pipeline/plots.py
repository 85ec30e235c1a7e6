"""PNG plots of ``analyze`` (matplotlib, no display): seqno progress, throughput, unacknowledged bytes."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Final

# The files write() makes, in this order; a --plots directory inside a dataset that holds only these is the
# dataset's own (job.replace deletes them with it).
NAMES: Final = ("seqno-progress.png", "throughput.png", "unacked-bytes.png")


def write(directory: Path, progress: list[dict[str, Any]], rollbacks: list[dict[str, Any]],
          per_second: list[dict[str, Any]], windows: dict[str, int]) -> list[Path]:
    """seqno-progress.png, throughput.png and unacked-bytes.png (with each connection's window dashed)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    from matplotlib import pyplot  # noqa: PLC0415

    directory.mkdir(parents=True, exist_ok=True)
    written = []

    def save(figure: Any, name: str) -> None:
        path = directory / name
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        pyplot.close(figure)
        written.append(path)

    figure, axes = pyplot.subplots(figsize=(10, 5))
    series: dict[Any, list[tuple[float, int]]] = defaultdict(list)
    for point in progress:
        series[point["vb"]].append((point["ts"], point["seqno"]))
    for vb, points in sorted(series.items(), key=lambda kv: (kv[0] is None, kv[0])):
        axes.plot([p[0] for p in points], [p[1] for p in points], label=f"vb {vb}", linewidth=1)
    for rollback in rollbacks:
        axes.axvline(rollback["ts"], color="red", linestyle="--", linewidth=1)
        axes.annotate(f"rollback vb {rollback['vb']} to {rollback['rollback_seqno']}", (rollback["ts"], 0),
                      rotation=90, fontsize=7, color="red", va="bottom")
    axes.set(title="seqno progress per vbucket (red: rollbacks)", xlabel="capture time (s)", ylabel="by_seqno")
    if 0 < len(series) <= 16:
        axes.legend(fontsize=7)
    save(figure, NAMES[0])

    figure, axes = pyplot.subplots(figsize=(10, 4))
    per_connection: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for row in per_second:
        per_connection[row["connection"]].append((row["second"], row["items"]))
    for connection, counts in per_connection.items():
        axes.plot([p[0] for p in counts], [p[1] for p in counts], label=connection, linewidth=1)
    axes.set(title="items per second per connection", xlabel="capture time (s)", ylabel="items/s")
    if 0 < len(per_connection) <= 16:
        axes.legend(fontsize=7)
    save(figure, NAMES[1])

    figure, axes = pyplot.subplots(figsize=(10, 4))
    per_connection_unacked: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for row in per_second:
        if row["unacked"] is not None:
            per_connection_unacked[row["connection"]].append((row["second"], row["unacked"]))
    for connection, levels in per_connection_unacked.items():
        line = axes.plot([p[0] for p in levels], [p[1] for p in levels], label=connection, linewidth=1)
        if windows.get(connection):
            axes.axhline(windows[connection], color=line[0].get_color(), linestyle="--", linewidth=1)
    axes.set(title="unacknowledged bytes per connection (dashed: its window)", xlabel="capture time (s)",
             ylabel="bytes")
    if 0 < len(per_connection_unacked) <= 16:
        axes.legend(fontsize=7)
    save(figure, NAMES[2])
    return written

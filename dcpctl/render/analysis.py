"""``dcpctl analyze``'s report as tables for a person (``--format json`` is the report itself).

A cell shows what a person expects, not Python's spelling: nothing is ``-``, a flag is ``yes``/``no``, a list is
comma-separated and a time is ISO-8601 UTC. The per-second rows are shown one per second for a short
capture and in buckets of whole seconds for a long one, so the table stays a screen's worth whatever the
capture's length.
"""

from __future__ import annotations

import datetime
import math
from typing import Any, Final

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dcpctl.render.tables import print_table
from dcpctl.safetext import shown

# (title, report key, columns) of the tables, in the report's order
SECTIONS: Final = (
    ("per vbucket", "vbuckets", ["connection", "vb", "items", "first_seqno", "last_seqno", "gaps", "repeated",
                                 "backwards", "outside_snapshot", "before_marker"]),
    ("seqno gaps", "gaps", ["connection", "vb", "previous", "by_seqno", "missing", "kind"]),
    ("duplicates", "duplicates", ["vb", "by_seqno", "times", "key", "connections"]),
    ("rollbacks", "rollbacks", ["connection", "vb", "start_seqno", "rollback_seqno", "explanation"]),
    ("stream request latency (ms)", "latency", ["connection", "responses", "mean_ms", "p99_ms", "max_ms"]),
    ("flow control", "flow_control", ["connection", "buffer_size", "max_unacked", "acks", "exceeded", "stalls",
                                      "longest_stall_ms", "stuck_at_end"]),
    ("flow-control stalls", "stalls", ["connection", "ts", "stalled_ms", "unacked_bytes", "buffer_size"]),
)
TABLE_ROWS: Final = 200  # rows of a section shown as a table (--format json has more, up to its limit)
# Rows of the per-second table per connection: a minute of a capture shows second by second, a longer one
# in as many buckets of whole seconds (--format json has every second).
PER_SECOND_ROWS: Final = 60
BUSIEST: Final = 3  # the busiest seconds named under the per-second table
TIME_COLUMNS: Final = frozenset({"ts"})  # epoch seconds in the report, shown as ISO-8601 UTC
NOTHING: Final = "-"


def utc(epoch: float) -> str:
    """``epoch`` as ISO-8601 UTC, to the microsecond when it has a fraction."""
    moment = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    spec = "seconds" if moment.microsecond == 0 else "microseconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def cell(value: Any, column: str = "") -> str:
    """One value of the report as a person reads it (see the module docstring); text from the wire goes
    through safetext, and ``[...]`` is text, not rich markup."""
    if value is None:
        text = NOTHING
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, list | tuple):
        text = ", ".join(cell(v) for v in value) or NOTHING
    elif column in TIME_COLUMNS and isinstance(value, int | float) and math.isfinite(value):
        text = utc(value)
    elif isinstance(value, float):
        text = f"{value:g}"
    else:
        text = str(value)
    return escape(shown(text))


def _per_second_table(rows: list[dict[str, Any]]) -> tuple[Table, list[str]]:
    """The per-second rows bucketed (``PER_SECOND_ROWS`` per connection at most), and the lines that name
    the busiest seconds."""
    first = min(r["second"] for r in rows)
    last = max(r["second"] for r in rows)
    width = max(1, math.ceil((last - first + 1) / PER_SECOND_ROWS))
    buckets: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        start = first + (row["second"] - first) // width * width
        bucket = buckets.setdefault((row["connection"], start), {
            "messages": 0, "items": 0, "bytes": 0, "acks": 0, "stalls": 0, "peak": 0, "unacked": None})
        for name in ("messages", "items", "bytes", "acks", "stalls"):
            bucket[name] += row[name]
        bucket["peak"] = max(bucket["peak"], row["items"])
        if row["unacked"] is not None:
            bucket["unacked"] = max(bucket["unacked"] or 0, row["unacked"])
    label = "per second" if width == 1 else f"per {width} seconds"
    peak = ["peak items/s"] if width > 1 else []
    columns = ["connection", "from (UTC)", "since start (s)", "messages", "items", *peak, "bytes", "acks",
               "max unacked", "stalls"]
    table = Table(*columns, title=f"{label} (items the producer pushed, bytes the server sent)")
    for (connection, start), bucket in sorted(buckets.items()):
        table.add_row(cell(connection), cell(utc(start)), cell(start - first), cell(bucket["messages"]),
                      cell(bucket["items"]), *([cell(bucket["peak"])] if width > 1 else []), cell(bucket["bytes"]),
                      cell(bucket["acks"]), cell(bucket["unacked"]), cell(bucket["stalls"]))
    busiest = sorted((r for r in rows if r["items"]), key=lambda r: (-r["items"], r["second"]))[:BUSIEST]
    lines = [f"busiest second: {utc(r['second'])} (+{r['second'] - first} s) {r['items']} items, {r['bytes']} bytes"
             f" on {r['connection']}" for r in busiest]
    return table, lines


def print_report(console: Console, report: dict[str, Any]) -> None:
    """The report's tables, each cut at ``TABLE_ROWS`` rows (saying how many more ``--format json`` has, and
    when the report's own limit may have cut a list)."""
    console.print(escape(shown(f"{report['messages']} messages in {report['dataset']}")))
    for title, key, columns in SECTIONS:
        if key == "flow_control":  # the per-second table goes with the other rates, before flow control
            _print_per_second(console, report["per_second"])
        rows = report[key]
        if not rows:
            console.print(f"{title}: none")
            continue
        table = Table(*columns, title=title)
        for row in rows[:TABLE_ROWS]:
            table.add_row(*[cell(row.get(c), c) for c in columns])
        print_table(console, table)
        cut = key in report.get("lists_at_limit", ())
        if len(rows) > TABLE_ROWS:
            console.print(f"... {len(rows) - TABLE_ROWS} more in --format json" + (
                f", which keeps the first {report['rows_limit']}: there may be more (the dataset has every "
                "message)" if cut else ""))
        elif cut:
            console.print(f"the report keeps the first {report['rows_limit']}: there may be more (the dataset "
                          "has every message)")
    for path in report.get("plots", []):
        console.print(escape(shown(f"plot: {path}")))


def _print_per_second(console: Console, rows: list[dict[str, Any]]) -> None:
    if not rows:
        console.print("per second: none")
        return
    table, lines = _per_second_table(rows)
    if table.row_count > TABLE_ROWS:
        console.print(f"per second: {table.row_count} rows, too many connections for a table "
                      "(--format json has them all)")
    else:
        print_table(console, table)
    for line in lines:
        console.print(escape(shown(line)))

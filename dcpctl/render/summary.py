"""The ``--summary`` tables (rich) or JSON: decode's per connection and vbucket, stream's per vbucket."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dcpctl.dcp.summary import Row, Summary
from dcpctl.render.tables import print_table


def print_summary(summary: Summary, console: Console, as_json: bool = False) -> None:
    rows = summary.sorted_rows()
    if as_json:
        console.file.write(json.dumps([r.to_json() for r in rows]) + "\n")
        return
    timed = summary.first_ts is not None  # captures and live streams; hex packets have no times
    table = Table("connection", "vbucket", "messages", "bytes", "items", "seqno range", "snapshots",
                  "rollbacks", "errors", "diagnostics", *(("first", "last") if timed else ()), title="dcpctl summary",
                  caption="first, last: seconds since the first message" if timed else None)

    def cells(r: Row, vbucket: str, seqnos: str) -> list[str]:
        times = [_seconds(summary.since_first(r.first_ts)), _seconds(summary.since_first(r.last_ts))]
        # text, not rich markup: an IPv6 connection's [fe80::1] would be read as a style tag and dropped
        return [escape(r.connection), vbucket, str(r.messages), str(r.bytes),
                str(r.items), seqnos, str(r.snapshots), str(r.rollbacks), str(r.errors), str(r.diagnostics),
                *(times if timed else ())]

    for r in rows:
        seqnos = "" if r.first_seqno is None else f"{r.first_seqno}-{r.last_seqno}"
        table.add_row(*cells(r, "-" if r.vbucket is None else str(r.vbucket), seqnos),
                      style="red" if r.errors or r.rollbacks else None)
    if len(rows) > 1:
        table.add_section()
        table.add_row(*cells(summary.total(), "", ""), style="bold")
    print_table(console, table)


def _seconds(offset: float | None) -> str:
    """Seconds to the microsecond, as ts has them: messages of a burst can be microseconds apart."""
    return "" if offset is None else f"{offset:.6f}"


def print_stream_summary(rows: Sequence[Mapping[str, Any]], total: Mapping[str, Any], console: Console) -> None:
    """``stream --summary``: a row per vbucket, then the total; when each vbucket's first and last items
    came, in seconds since the first stream message (so a slow or late vbucket stands out)."""
    table = Table("vbucket", "items", "seqno range", "items/s", "first item", "last item",
                  title="dcpctl stream summary", caption="times: seconds since the first stream message")
    for row in rows:
        seqnos = "" if row["first_seqno"] is None else f"{row['first_seqno']}-{row['last_seqno']}"
        table.add_row(str(row["vbucket"]), str(row["items"]), seqnos, f"{row['rate']:,.1f}",
                      _seconds(row["first_offset"]), _seconds(row["last_offset"]))
    table.add_section()
    table.add_row("total", str(total["items"]), "", f"{total['rate']:,.1f}", _seconds(total["first_offset"]),
                  _seconds(total["last_offset"]), style="bold")
    print_table(console, table)

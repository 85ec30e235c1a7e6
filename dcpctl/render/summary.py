"""The ``--summary`` tables (rich) or JSON: decode's per connection and vbucket, stream's per vbucket."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from dcpctl.dcp.summary import Summary


def print_summary(summary: Summary, console: Console, as_json: bool = False) -> None:
    rows = summary.sorted_rows()
    if as_json:
        console.file.write(json.dumps([r.to_json() for r in rows]) + "\n")
        return
    table = Table("connection", "vbucket", "messages", "bytes", "items", "seqno range", "snapshots",
                  "rollbacks", "errors", "diagnostics", title="dcpctl summary")
    for r in rows:
        seqnos = "" if r.first_seqno is None else f"{r.first_seqno}-{r.last_seqno}"
        table.add_row(r.connection, "-" if r.vbucket is None else str(r.vbucket), str(r.messages),
                      str(r.bytes), str(r.items), seqnos, str(r.snapshots), str(r.rollbacks), str(r.errors),
                      str(r.diagnostics), style="red" if r.errors or r.rollbacks else None)
    console.print(table)


def _seconds(offset: float | None) -> str:
    return "" if offset is None else f"{offset:.3f}"


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
    console.print(table)

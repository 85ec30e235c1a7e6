"""The ``--summary`` table (rich) or JSON."""

from __future__ import annotations

import json

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

"""``dcpctl fields``: every JSON field with its type and meaning (like ``tshark -G fields``)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from dcpctl.commands._options import env_of
from dcpctl.protocol.diagnostic import CATALOGUE
from dcpctl.protocol.fields import catalogue
from dcpctl.render import jsonl
from dcpctl.render.tables import print_table


class FieldsFormat(StrEnum):
    TABLE = "table"
    TSV = "tsv"
    JSONL = "jsonl"


def fields(
    ctx: typer.Context,
    fmt: Annotated[FieldsFormat | None, typer.Option("--format", "-F", help="table on a terminal, jsonl when "
                                                     "piped; tsv for grep and cut.")] = None,
    diagnostics: Annotated[bool, typer.Option(
        "--diagnostics", help="List the named diagnostics instead of the fields.")] = False,
) -> None:
    """List every field of the JSON output (or every diagnostic), derived from the grammars."""
    env = env_of(ctx)
    if diagnostics:
        rows: list[dict[str, object]] = [{"name": name, "severity": sev, "meaning": text}
                                         for name, (sev, text) in CATALOGUE.items()]
        columns = ["name", "severity", "meaning"]
    else:
        rows = [{"name": f.name, "type": f.type, "meaning": f.meaning, "messages": list(f.messages)}
                for f in catalogue()]
        columns = ["name", "type", "meaning", "messages"]
    fmt = env.output_format(fmt, FieldsFormat.TABLE, FieldsFormat.JSONL)
    if fmt is FieldsFormat.JSONL:
        jsonl.write_jsonl(rows, env.stdout)
    elif fmt is FieldsFormat.TSV:
        for row in rows:
            env.stdout.write("\t".join(", ".join(v) if isinstance(v, list) else str(v)
                                       for v in (row[c] for c in columns)) + "\n")
    else:
        table = Table(*columns, show_lines=False)
        for row in rows:
            # cells are text, not rich markup: [int] of list[int] was read as a style tag and dropped
            table.add_row(*(escape(", ".join(v) if isinstance(v, list) else str(v)) for v in (row[c] for c in columns)))
        print_table(env.console(), table)

"""Tables keep every cell whole at any terminal width: rich's own fitting cut a seqno range to ``201…`` and a
time to ``0.0…``, which read as other numbers."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment

PCAP = Path(__file__).resolve().parents[2] / "samples" / "dcp-session.pcap"


def run(args: list[str], width: int) -> str:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=True, stderr_isatty=False,
                      color=False, width=width)
    assert main(args, env) == ExitCode.OK, err.getvalue()
    return out.getvalue()


def cells(table: str) -> list[str]:
    """The cells of a table printed with room to spare, each on one line."""
    return [cell.strip() for line in table.splitlines() if line.startswith("│") for cell in line.split("│")[1:-1]]


@pytest.mark.parametrize("width", [40, 80, 100, 120, 135, 136, 160])
def test_the_summary_table_keeps_every_number_whole(width: int) -> None:
    wide = cells(run(["decode", "--summary", str(PCAP)], width=400))
    assert {"201-203", "0.000230"} <= set(wide)
    shown = run(["decode", "--summary", str(PCAP)], width=width)
    assert "…" not in shown
    for cell in wide:
        for word in cell.split():
            assert word in shown, (word, shown)
    least = max(len(line) for line in run(["decode", "--summary", str(PCAP)], width=1).splitlines())
    natural = max(len(line) for line in run(["decode", "--summary", str(PCAP)], width=400).splitlines())
    # the terminal's width when the table fits in it, else the table's least width (the terminal wraps it)
    assert max(len(line) for line in shown.splitlines()) == min(max(least, width), natural)


@pytest.mark.parametrize("width", [60, 80, 120])
def test_the_fields_table_keeps_every_name_whole(width: int) -> None:
    names = [json.loads(line)["name"] for line in run(["fields", "-F", "jsonl"], width=400).splitlines()]
    shown = run(["fields"], width=width)
    assert "…" not in shown
    words = {word for line in shown.splitlines() for cell in line.split("│") for word in cell.split()}
    assert set(names) <= words

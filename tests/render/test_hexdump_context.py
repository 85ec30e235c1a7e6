"""decode -F hexdump heads each message of a capture with its time, connection and direction (as pretty
does), so that the connections a capture interleaves can be told apart; bytes given to ``dcpctl hexdump``
have no connection and keep the bare heading."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from dcpctl.cli import main
from dcpctl.render.env import Environment
from dcpctl.render.pretty import iso_time

ROOT = Path(__file__).resolve().parents[2]
# A message's heading: its opcode, request or response, then where (and when) it was seen, its offset and size.
HEADING = re.compile(r"^(\S+(?: \(\S+\))?) (request|response)  (.*)@(\d+), (\d+) bytes$", re.MULTILINE)


def _run(args: list[str]) -> str:
    out = io.StringIO()
    env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False, width=200)
    assert main(args, env) == 0, args
    return out.getvalue()


def test_capture_headings_name_time_connection_and_direction(tmp_path: Path) -> None:
    capture = tmp_path / "c.pcap"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_capture.py"), str(capture), "--messages",
                    "300"], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120,
                   capture_output=True)
    headings = HEADING.findall(_run(["decode", "-F", "hexdump", str(capture)]))
    records = [json.loads(line) for line in _run(["decode", "-F", "jsonl", str(capture)]).splitlines()]
    assert len(headings) == len(records) > 300
    for (opcode, _, where, offset, _), record in zip(headings, records, strict=True):
        assert (opcode.split()[0], int(offset)) == (record["opcode"], record["offset"])
        assert where == f"{iso_time(record['ts'])} {record['connection']} {record['direction']} ", record
    assert len({where.split(" ", 1)[1] for _, _, where, _, _ in headings}) >= 8  # 4 connections, both ways


def test_raw_packet_headings_have_no_connection() -> None:
    headings = HEADING.findall(_run(["hexdump", str(ROOT / "samples" / "dcp-session.bin")]))
    assert headings
    assert {where for _, _, where, _, _ in headings} == {""}

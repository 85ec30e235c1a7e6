"""``dcpctl analyze``'s tables: cells as a person reads them, and the per-second rows bounded."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from dcpctl.render.analysis import PER_SECOND_ROWS, TABLE_ROWS, print_report

CONNECTION = "127.0.0.1:50123 > 127.0.0.1:11210"


def second(at: int, items: int, connection: str = CONNECTION, unacked: int | None = 100) -> dict[str, Any]:
    return {"connection": connection, "second": at, "messages": items + 1, "items": items, "bytes": 100 * items,
            "acks": 1, "exceeded": 0, "stalls": 0, "unacked": unacked, "unacked_last": unacked,
            "window_last": None, "longest_stall_ms": None}


def report(per_second: list[dict[str, Any]]) -> dict[str, Any]:
    return {"dataset": "ds", "messages": sum(r["messages"] for r in per_second), "vbuckets": [], "gaps": [],
            "duplicates": [{"vb": 12, "by_seqno": 202, "times": 2, "key": "[bold]k\x1b", "connections": ["a", "b"]}],
            "rollbacks": [], "latency": [], "per_second": per_second,
            "flow_control": [{"connection": CONNECTION, "buffer_size": None, "max_unacked": None, "acks": 0,
                              "exceeded": 0, "stalls": 0, "longest_stall_ms": None, "stuck_at_end": False}],
            "stalls": [{"connection": CONNECTION, "ts": 1700000000.25, "stalled_ms": 1500.0, "unacked_bytes": 500,
                        "buffer_size": 500}]}


def printed(value: dict[str, Any]) -> str:
    out = io.StringIO()
    print_report(Console(file=out, width=250, color_system=None), value)
    return out.getvalue()


def test_cells_read_as_a_person_expects() -> None:
    text = printed(report([second(1700000000, 3)]))
    assert "None" not in text
    assert "False" not in text
    flow = next(line for line in text.splitlines() if line.startswith("│ 127.0.0.1:50123") and "│ no " in line)
    assert flow.count("│ - ") == 3  # no window, no unacked bytes, no stall
    assert "2023-11-14T22:13:20.250000Z" in text  # the stall's time, not an epoch float
    assert "[bold]k\\x1b" in text  # wire text: escaped, and no markup
    assert "a, b" in text


def test_per_second_rows_in_the_pretty_output() -> None:
    text = printed(report([second(1700000000, 3), second(1700000002, 7)]))
    assert "per second" in text
    rows = [line for line in text.splitlines() if "2023-11-14T22:13:2" in line and "│" in line][:2]
    assert [row.split("│")[3].strip() for row in rows] == ["0", "2"]  # seconds since the capture's start
    assert "busiest second: 2023-11-14T22:13:22Z (+2 s) 7 items, 700 bytes" in text


def test_a_long_capture_is_bucketed() -> None:
    hours = [second(1700000000 + s, s % 97, connection) for s in range(3 * 3600) for connection in ("c1", "c2")]
    text = printed(report(hours))
    assert "per 180 seconds" in text
    rows = [line for line in text.splitlines() if line.startswith(("│ c1", "│ c2"))]
    assert len(rows) == 2 * PER_SECOND_ROWS <= TABLE_ROWS
    assert sum(int(row.split("│")[5]) for row in rows) == sum(r["items"] for r in hours)
    assert {row.split("│")[6].strip() for row in rows} == {"96"}  # the busiest second of each bucket

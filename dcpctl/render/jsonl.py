"""JSON renderers: one object per line (``jsonl``) or one array (``json``), streaming either way."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any, TextIO

import orjson

_BINARY_FIELDS = ("value", "key")


def to_base64(record: dict[str, Any]) -> dict[str, Any]:
    """Re-express hex binary fields as base64 (``--binary base64``)."""
    out = dict(record)
    for name in _BINARY_FIELDS:
        if out.get(f"{name}_encoding") == "hex":
            out[name] = base64.b64encode(bytes.fromhex(out[name])).decode()
            out[f"{name}_encoding"] = "base64"
    return out


def dumps(record: dict[str, Any]) -> str:
    # orjson: several times faster than the json module on records (benchmarks/README.md); u64 safe
    return orjson.dumps(record).decode()


def write_jsonl(records: Iterable[dict[str, Any] | bytes], out: TextIO, *, flush: bool = False) -> int:
    """One line per record; ``flush`` after each (live sources, so a reader sees lines as they come).
    A bytes item is lines already written (a fast path's), copied as they are; it counts as one."""
    count = 0
    binary = getattr(out, "buffer", None)
    if binary is not None:  # a real stream: orjson's bytes go straight to its buffer, no str round trip
        out.flush()
        write = binary.write
        for record in records:
            write(record if type(record) is bytes else orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
            count += 1
            if flush:
                binary.flush()
        return count
    for record in records:
        if isinstance(record, bytes):
            out.write(record.decode())
        else:
            out.write(dumps(record))
            out.write("\n")
        count += 1
        if flush:
            out.flush()
    return count


def write_json(records: Iterable[dict[str, Any]], out: TextIO) -> int:
    """One array; closed however the records end (Ctrl-C on a live stream too), so it is always valid JSON."""
    count = 0
    out.write("[")
    try:
        for record in records:
            out.write(",\n" if count else "\n")
            out.write(orjson.dumps(record, option=orjson.OPT_INDENT_2).decode())
            count += 1
    finally:
        out.write("\n]\n" if count else "]\n")
    return count

"""Choosing and driving a renderer for a stream of decoded messages; counting what was seen."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, cast

from dcpctl.dcp.observed import Observed, packet_of
from dcpctl.protocol.diagnostic import Diagnostic
from dcpctl.protocol.framer import Skipped
from dcpctl.protocol.message import Message
from dcpctl.render import hexdump, jsonl, pretty
from dcpctl.render.env import Environment
from dcpctl.render.record import record as record_of
from dcpctl.render.template import Template
from dcpctl.safetext import shown

# pretty and hexdump show a longer field (key, value, xattr, a value's declared fields) as its head, its
# tail and its size: 1 KiB is 64 hexdump rows, and holds whole what a server sends in normal operation (a
# failover log of 25 entries, HELLO's features, a key of 250 bytes), while a 20 MiB value costs a screen.
# JSON output always carries every byte.
MAX_FIELD_BYTES: Final = 1024


class Format(StrEnum):
    PRETTY = "pretty"
    JSONL = "jsonl"
    JSON = "json"
    HEXDUMP = "hexdump"


@dataclass
class Stats:
    messages: int = 0
    error_diagnostics: int = 0
    skipped_bytes: int = 0
    notices: int = 0

    @property
    def clean(self) -> bool:
        return not self.error_diagnostics and not self.skipped_bytes


def notice_text(item: Skipped | Diagnostic) -> str:
    """One line for what is not a message: a connection-level diagnostic, or bytes skipped."""
    if isinstance(item, Diagnostic):
        return f"{item.name}: {shown(item.message)}"
    what = "a packet cut short at the end of the input" if item.reason == "truncated" else (
        "a header whose body length exceeds --max-body-length"
        if item.reason == "body_too_long" else "bytes that do not start a plausible header")
    return f"skipped_bytes: {item.length} bytes at offset {item.offset}: {what}"


def as_written(record: dict[str, Any], base64: bool) -> dict[str, Any]:
    """The record as JSON output and templates write it; a template fits this one (a key's base64 is not as
    long as its hex, so '{key[9]}' may reach in one and not the other)."""
    return jsonl.to_base64(record) if base64 else record


def emit(items: Iterable[Observed | Message | Skipped | Diagnostic | bytes], fmt: Format, env: Environment, *,
         base64: bool = False, live: bool = False, max_field_bytes: int = MAX_FIELD_BYTES,
         local_time: bool = False, template: Template | None = None) -> Stats:
    """Render every message in ``fmt``; skipped bytes go to standard error as ``skipped_bytes``.

    ``live``: the items come from the network, so each JSON line is flushed as soon as it is written.
    Items may be bytes only in JSONL: JSON lines already written out (a source's fast path for plain items),
    passed through as they are. ``max_field_bytes``: pretty's and hexdump's bound (:data:`MAX_FIELD_BYTES`).
    ``local_time``: pretty shows times in the local zone instead of UTC (JSON keeps ts as epoch seconds).
    ``template``: each message that fits it is written as its line instead, whatever ``fmt``.
    """
    stats = Stats()
    errors = env.error_console()

    def notice(item: Skipped | Diagnostic) -> None:
        if isinstance(item, Diagnostic):
            stats.notices += 1
            if item.severity == "error":
                stats.error_diagnostics += 1
        else:
            stats.skipped_bytes += item.length
        errors.print(f"dcpctl: {notice_text(item)}", style="yellow", markup=False)

    def count_errors(item: Observed | Message) -> None:
        diagnostics = item.diagnostics
        if diagnostics:
            stats.error_diagnostics += sum(1 for d in diagnostics if d.severity == "error")

    def messages() -> Iterator[Observed | Message]:
        for item in items:
            assert not isinstance(item, bytes), "JSON lines are for the JSONL format only"
            if isinstance(item, Observed | Message):
                stats.messages += 1
                yield item
            else:
                notice(item)

    def records() -> Iterator[dict[str, Any] | bytes]:  # the JSON hot path: one loop, no nested generator
        for item in items:
            if isinstance(item, bytes):
                assert fmt is Format.JSONL, "JSON lines are for the JSONL format only"
                stats.messages += item.count(b"\n")
                yield item
                continue
            if not isinstance(item, Observed | Message):
                notice(item)
                continue
            stats.messages += 1
            record = record_of(item)
            if item.diagnostics:
                count_errors(item)
            yield jsonl.to_base64(record) if base64 else record

    if template is not None:
        for item in messages():
            record = as_written(record_of(item), base64)
            if template.fits(record):
                env.stdout.write(template.line(record) + "\n")
                if live:
                    env.stdout.flush()
            count_errors(item)
    elif fmt is Format.JSONL:
        jsonl.write_jsonl(records(), env.stdout, flush=live)
    elif fmt is Format.JSON:
        jsonl.write_json(cast(Iterator[dict[str, Any]], records()), env.stdout)
    elif fmt is Format.HEXDUMP:
        console = env.console()
        for item in messages():
            console.print(hexdump.render(item, max_field_bytes, local_time=local_time))
            count_errors(item)
    else:
        console = env.console()
        for item in messages():
            console.print(pretty.render(packet_of(item), record_of(item), max_field_bytes, local_time=local_time))
            count_errors(item)
    return stats

"""Annotated hexdump in the protocol documents' style: the bytes, then ``Field (offset) : value (meaning)``.

Each field gets a colour used both in the byte rows and in its annotation line; diagnostics are printed
under the field whose bytes they concern. A field longer than the bound (``--max-field-bytes``) shows the
rows of its first and last bytes and a line saying how many were left out, so a 20 MiB packet costs a few
screens. A SASL client message's bytes are masked unless ``--show-secrets``. Text from the wire (keys,
values, xattrs, diagnostics) is escaped (``safetext``). A message from a capture or a live stream is headed
with its time, connection and direction as pretty's headline has them: a capture interleaves connections.
"""

from __future__ import annotations

from typing import Final

from rich.text import Text

from dcpctl.dcp.observed import Observed, packet_of
from dcpctl.protocol.layout import FieldSpan, spans
from dcpctl.protocol.message import Message
from dcpctl.render.pretty import iso_time
from dcpctl.render.record import CUT_OPCODE
from dcpctl.render.record import record as record_of
from dcpctl.safetext import shown

PALETTE: Final = ("cyan", "green", "yellow", "magenta", "blue", "red", "bright_cyan", "bright_green",
                  "bright_yellow", "bright_magenta", "bright_blue")
ROW: Final = 16
SEVERITY_STYLE: Final = {"error": "bold red", "warning": "yellow", "note": "cyan"}
SHOWN_CHARS: Final = 60  # of a decoded text value on its field line: the line stays one terminal line


def _offsets(span: FieldSpan) -> str:
    if span.length <= 1:
        return f"({span.offset})"
    return f"({span.offset}-{span.offset + span.length - 1})"


def _raw(span: FieldSpan, raw: bytes) -> str:
    data = raw[span.offset:span.offset + min(span.length, 17)]
    if span.secret:
        return "**" * min(span.length, 16) + (f"… ({span.length} bytes)" if span.length > 16 else "")
    if isinstance(span.value, int) and span.length <= 8:
        # hex with its prefix reads as the number, true only of big-endian bytes: a FlatBuffers slot's show as is
        return "0x" + data.hex() if int.from_bytes(data) == span.value else data.hex()
    if span.length > 16:
        return data[:16].hex() + f"… ({span.length} bytes)"
    return data.hex() or "(empty)"


def _decoded(span: FieldSpan) -> str:
    value = span.value
    parts = []
    if isinstance(value, int):
        parts.append(str(value))
    elif isinstance(value, str):
        cut = value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "…"
        parts.append(f"'{shown(cut)}'")
    if span.meaning:
        parts.append(shown(span.meaning))
    return " ".join(parts)


def _hidden(fields: list[FieldSpan], max_field_bytes: int) -> list[tuple[int, int]]:
    """Row-aligned byte ranges left out of the dump: the middle of every field longer than the bound."""
    keep = max(ROW, max_field_bytes // 2 // ROW * ROW)  # rows of the field's head, and of its tail
    out = []
    for span in fields:
        if span.length <= max_field_bytes:
            continue
        first = -(-(span.offset + keep) // ROW) * ROW
        last = (span.offset + span.length - keep) // ROW * ROW
        if last - first >= 2 * ROW:
            out.append((first, last))
    return out


def _rows(text: Text, raw: bytes, fields: list[FieldSpan], start: int, end: int) -> None:
    """The byte rows of ``raw[start:end]`` (row-aligned), each run of one field's bytes in its colour."""
    index = 0
    for row in range(start, end, ROW):
        text.append(f"  {row:04x}  ", style="dim")
        stop = min(row + ROW, len(raw))
        i = row
        while i < stop:
            while index < len(fields) and fields[index].offset + fields[index].length <= i:
                index += 1
            span = fields[index] if index < len(fields) and fields[index].offset <= i else None
            run_end = min(stop, span.offset + span.length) if span is not None else stop
            if span is None and index < len(fields):
                run_end = min(run_end, fields[index].offset)
            cells = "".join(("**" if span is not None and span.secret else f"{raw[j]:02x}")
                            + (" " if j % 4 != 3 else "  ") for j in range(i, run_end))
            text.append(cells, style=PALETTE[index % len(PALETTE)] if span is not None else "")
            i = run_end
        text.append("\n")


def _context(record: dict[str, object], local_time: bool) -> str:
    """Where and when the message was seen, as pretty's headline says it; empty for bytes without a
    connection (``dcpctl hexdump`` of a packet)."""
    parts = []
    ts = record.get("ts")
    if isinstance(ts, float | int):
        parts.append(iso_time(ts, local=local_time))
    if "connection" in record:
        parts.append(shown(str(record["connection"])))
    if "direction" in record:
        parts.append(shown(str(record["direction"])))
    return " ".join(parts)


def render(item: Message | Observed, max_field_bytes: int, *, local_time: bool = False) -> Text:
    """The heading, the byte rows and one line per field; ``local_time``: the heading's time in the local zone."""
    msg = packet_of(item)
    raw = msg.raw
    fields = spans(msg, walk_limit=max_field_bytes)
    text = Text()
    record = record_of(item)
    title = record.get("opcode", CUT_OPCODE) + (f" ({record['request_type_name']})" if "request_type_name" in record
                                else "")
    text.append(f"{title} {'response' if msg.is_response else 'request'}", style="bold")
    context = _context(record, local_time)
    where = f"{context} @{msg.offset}" if context else f"@{msg.offset}"
    text.append(f"  {where}, {len(raw)} bytes\n", style="dim")
    shown_from = 0
    for first, last in sorted(_hidden(fields, max_field_bytes)):
        if first < shown_from:  # fields that overlap (a packet at odds with its lengths): shown, not hidden
            continue
        _rows(text, raw, fields, shown_from, first)
        text.append(f"  ....  ({last - first} bytes not shown: --max-field-bytes {max_field_bytes})\n",
                    style="dim")
        shown_from = last
    _rows(text, raw, fields, shown_from, len(raw))
    width = max((len(f.label) for f in fields), default=10) + 4
    diagnostics = list(item.diagnostics)
    text.append(f"  {'Field':<{width}}{'(offset)':<10} (value)\n", style="dim")
    for index, span in enumerate(fields):
        style = PALETTE[index % len(PALETTE)]
        indent = "  " if span.section == "header" else "    "
        text.append(indent)
        text.append(f"{span.label:<{width - len(indent) + 2}}", style=style)
        text.append(f"{_offsets(span):<10}: {_raw(span, raw)}")
        decoded = _decoded(span)
        if decoded:
            text.append(f" ({decoded})", style="dim")
        text.append("\n")
        under = [d for d in diagnostics
                 if d.offset is not None and span.offset <= d.offset < span.offset + max(span.length, 1)]
        for diag in under:
            diagnostics.remove(diag)
            text.append(f"{indent}  ^ {diag.severity} {diag.name}: ", style=SEVERITY_STYLE[diag.severity])
            text.append(shown(diag.message) + "\n")
    for diag in diagnostics:
        text.append(f"  ! {diag.severity} {diag.name}: ", style=SEVERITY_STYLE[diag.severity])
        text.append(shown(diag.message) + "\n")
    return text

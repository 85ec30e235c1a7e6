"""Annotated hexdump in the protocol documents' style: the bytes, then ``Field (offset) : value (meaning)``.

Each field gets a colour used both in the byte rows and in its annotation line; diagnostics are printed
under the field whose bytes they concern.
"""

from __future__ import annotations

from typing import Final

from rich.text import Text

from dcpctl.protocol.layout import FieldSpan, spans
from dcpctl.protocol.message import Message

PALETTE: Final = ("cyan", "green", "yellow", "magenta", "blue", "red", "bright_cyan", "bright_green",
                  "bright_yellow", "bright_magenta", "bright_blue")
ROW: Final = 16
SEVERITY_STYLE: Final = {"error": "bold red", "warning": "yellow", "note": "cyan"}


def _offsets(span: FieldSpan) -> str:
    if span.length <= 1:
        return f"({span.offset})"
    return f"({span.offset}-{span.offset + span.length - 1})"


def _raw(span: FieldSpan, raw: bytes) -> str:
    data = raw[span.offset:span.offset + span.length]
    if isinstance(span.value, int) and span.length <= 8:
        return "0x" + data.hex()
    if len(data) > 16:
        return data[:16].hex() + f"… ({len(data)} bytes)"
    return data.hex() or "(empty)"


def _decoded(span: FieldSpan) -> str:
    value = span.value
    parts = []
    if isinstance(value, int):
        parts.append(str(value))
    elif isinstance(value, str):
        shown = value if len(value) <= 60 else value[:60] + "…"
        parts.append(repr(shown))
    if span.meaning:
        parts.append(span.meaning)
    return " ".join(parts)


def render(msg: Message) -> Text:
    raw = msg.raw
    fields = spans(msg)
    colour = [""] * len(raw)
    for index, span in enumerate(fields):
        style = PALETTE[index % len(PALETTE)]
        for i in range(span.offset, min(span.offset + span.length, len(raw))):
            colour[i] = style
    text = Text()
    record = msg.record()
    title = record["opcode"] + (f" ({record['request_type_name']})" if "request_type_name" in record
                                else "")
    text.append(f"{title} {'response' if msg.is_response else 'request'}", style="bold")
    text.append(f"  @{msg.offset}, {len(raw)} bytes\n", style="dim")
    for row in range(0, len(raw), ROW):
        text.append(f"  {row:04x}  ", style="dim")
        for i in range(row, min(row + ROW, len(raw))):
            text.append(f"{raw[i]:02x}", style=colour[i])
            text.append(" " if i % 4 != 3 else "  ")
        text.append("\n")
    width = max((len(f.label) for f in fields), default=10) + 4
    diagnostics = list(msg.diagnostics)
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
        for diag in list(diagnostics):
            if diag.offset is not None and span.offset <= diag.offset < span.offset + max(span.length, 1):
                diagnostics.remove(diag)
                text.append(f"{indent}  ^ {diag.severity} {diag.name}: ", style=SEVERITY_STYLE[diag.severity])
                text.append(diag.message + "\n")
    for diag in diagnostics:
        text.append(f"  ! {diag.severity} {diag.name}: ", style=SEVERITY_STYLE[diag.severity])
        text.append(diag.message + "\n")
    return text

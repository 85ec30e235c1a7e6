"""Packets written as text: plain hex, ``xxd``, ``hexdump -C`` and protocol-document byte tables.

Pure functions from ``bytes``/``str`` to values. Detection, in order: input that is not UTF-8 text
or holds control characters other than whitespace is binary; text with at least one byte-table row
(``  4| 0x28 | 0x00 | ...``) is a document of diagrams, each diagram one packet; text whose every
non-blank line carries an ``xxd`` or ``hexdump -C`` offset is a dump; text whose every line starts
with a shorter offset column (``od -Ax -tx1``, ``tshark -x``, the reference's worked examples), the
first one zero, followed by two-digit bytes is a dump too; anything else is plain hex. In a dump each
offset must follow on from the bytes before it, so a text column read as bytes is refused, not decoded.
No regular expression here can backtrack: the only one is a single character class.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

_HEX: Final = "0123456789abcdefABCDEF"
_CONTROL: Final = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
_OFFSET_DIGITS: Final = range(8, 17)  # xxd and hexdump -C print offsets as 8 (or more) hex digits
# tshark -x and Wireshark print 4 digits, od -Ax 6; fewer would be a byte, not an offset.
_SHORT_OFFSET_DIGITS: Final = range(4, 17)
# The text column of tshark -x, Wireshark and the reference's examples follows 3 or more spaces;
# hexdump -C puts only 2 in the middle of the bytes, so 2 cannot end them.
_TEXT_COLUMN_GAP: Final = "   "
# A '*' line stands for any number of repeats: bound what a few lines of text may expand to, in all.
MAX_REPEAT: Final = 64 * 1024 * 1024


class HexTextError(ValueError):
    """Text that claims to be hex but is not; the message names the 1-based line."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass(frozen=True)
class Chunk:
    """Bytes read from one part of the input.

    ``line`` is the 1-based line where the chunk starts (0 for binary input); ``boundary`` is True
    when the chunk is exactly one packet (a diagram), False when it is a byte stream to be framed.
    """

    data: bytes
    line: int
    boundary: bool


def parse_packets(data: bytes) -> list[Chunk]:
    """Detect the input form and return its chunks (see the module docstring for the rules)."""
    if not data:
        return []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return [Chunk(data, 0, boundary=False)]
    if _CONTROL.search(text):
        return [Chunk(data, 0, boundary=False)]
    lines = [line.rstrip("\r") for line in text.removeprefix("\ufeff").split("\n")]
    if any(_table_row(line, number) is not None
           for number, line in enumerate(lines, 1) if "|" in line):
        return _diagrams(lines)
    content = [line.strip() for line in lines if line.strip()]
    if content and all(_is_xxd(line) or line == "*" for line in content):
        return _dumps(lines, _xxd_bytes)
    if content and all(_is_hexdump(line) or line == "*" for line in content) and any(
            "|" in line for line in content):
        return _dumps(lines, _hexdump_bytes)
    # tshark -x titles each data source ("Frame (80 bytes):", "Reassembled TCP (126 bytes):"): each is a dump
    titled = ["" if _is_source_title(line) else line for line in lines]
    dump = [line.strip() for line in titled if line.strip()]
    if dump and _is_offset_dump(dump):
        return _dumps(titled, _offset_line_bytes)
    payload, first = _plain(lines)
    return [Chunk(payload, first, boundary=False)] if payload else []


def parse_hex(text: str) -> bytes:
    """Plain hex (whitespace, `,`, `:`, `0x`, `#` comments ignored); errors name the line."""
    return _plain(text.split("\n"))[0]


def _is_hex(text: str) -> bool:
    return bool(text) and not text.strip(_HEX)


def _hex_words(words: list[str], number: int) -> bytes:
    """Bytes from hex words that each hold whole bytes."""
    out = bytearray()
    for word in words:
        digits = word[2:] if word[:2] in ("0x", "0X") else word
        if not _is_hex(digits):
            raise HexTextError(f"not hex: {word[:40]!r}", number)
        if len(digits) % 2:
            raise HexTextError(f"odd number of hex digits in {word[:40]!r}", number)
        out += bytes.fromhex(digits)
    return bytes(out)


def _plain(lines: list[str]) -> tuple[bytes, int]:
    """Plain hex bytes of ``lines`` and the 1-based line where they start (0 if there are none)."""
    out = bytearray()
    first = 0
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].replace(",", " ").replace(":", " ").split()
        if words:
            out += _hex_words(words, number)
            first = first or number
    return bytes(out), first


# -- byte tables ----------------------------------------------------------------------------------

def _cell_byte(cell: str) -> int | None:
    """The byte in a table cell (``0x48``, ``48``, ``0x48 ('H')``), or None for any other text."""
    word, *rest = cell.split(None, 1)
    if rest and not rest[0].startswith("("):
        return None
    if word[:2] in ("0x", "0X") and 1 <= len(word) - 2 <= 2 and _is_hex(word[2:]):
        return int(word[2:], 16)
    if len(word) == 2 and _is_hex(word):
        return int(word, 16)
    return None


def _table_row(line: str, number: int) -> tuple[int, bytes] | None:
    """``(offset, bytes)`` of a byte-table row; None for any other line, a layout row included.

    A row whose cells mix bytes and other text is an error: it looks meant as bytes but is not.
    """
    head, bar, tail = line.partition("|")
    head = head.lstrip()  # digits right before the bar: "0 | a | b" is a markdown table, not a row
    if not bar or len(head) > 9 or not (head.isascii() and head.isdigit()):
        return None
    cells = [cell for cell in tail.split("|") if cell.strip()]
    values = [_cell_byte(cell) for cell in cells]
    found = [value for value in values if value is not None]
    if not found:
        return None
    if len(found) != len(values):
        bad = next(cell.strip() for cell, value in zip(cells, values, strict=True) if value is None)
        raise HexTextError(f"byte-table row mixes bytes with {bad[:40]!r}", number)
    return int(head), bytes(found)


def _diagrams(lines: list[str]) -> list[Chunk]:
    """One boundary chunk per diagram; a row at offset 0 starts a diagram, others must follow on."""
    chunks: list[Chunk] = []
    current: bytearray | None = None
    start = 0
    for number, line in enumerate(lines, 1):
        row = _table_row(line, number) if "|" in line else None
        if row is None:
            continue
        offset, values = row
        if offset == 0:
            if current:
                chunks.append(Chunk(bytes(current), start, boundary=True))
            current, start = bytearray(), number
        elif current is None:
            raise HexTextError(f"byte-table row at offset {offset} before any row at offset 0",
                               number)
        elif offset != len(current):
            raise HexTextError(f"byte-table row at offset {offset}, expected {len(current)}",
                               number)
        current += values
    if current:
        chunks.append(Chunk(bytes(current), start, boundary=True))
    return chunks


# -- xxd and hexdump -C ----------------------------------------------------------------------------

def _offset_of(line: str) -> str:
    """The leading run of hex digits of ``line`` (the dump offset, if it is one)."""
    return line[:len(line) - len(line.lstrip(_HEX))]


def _is_xxd(line: str) -> bool:
    offset = _offset_of(line)
    return len(offset) in _OFFSET_DIGITS and line[len(offset):len(offset) + 2] == ": "


def _is_hexdump(line: str) -> bool:
    offset = _offset_of(line)
    rest = line[len(offset):]
    return len(offset) in _OFFSET_DIGITS and (not rest or (rest[:2] == "  " and "|" in rest))


def _xxd_bytes(line: str, number: int) -> bytes:
    """Bytes of an xxd line: after ``offset:``, up to the two spaces before the text column."""
    return _hex_words(line.partition(": ")[2].partition("  ")[0].split(), number)


def _hexdump_bytes(line: str, number: int) -> bytes:
    """Bytes of a hexdump -C line: two-digit words after the offset, up to the text column."""
    words = line.partition("|")[0].split()[1:]
    wide = next((word for word in words if len(word) != 2), None)
    if wide is not None:
        raise HexTextError(f"hexdump -C byte is not two hex digits: {wide[:40]!r}", number)
    return _hex_words(words, number)


def _byte_column(line: str) -> str:
    """What follows an offset up to its text column: ``|...|``, od's ``>...<`` or 3 spaces and text."""
    rest = line[len(_offset_of(line)):].removeprefix(":").partition("|")[0].partition("  >")[0]
    return rest.strip().partition(_TEXT_COLUMN_GAP)[0]


def _is_offset_line(line: str) -> bool:
    """An offset of 4-16 digits, then two-digit bytes (or nothing, od's closing offset line)."""
    offset = _offset_of(line)
    rest = line[len(offset):].removeprefix(":")
    return (len(offset) in _SHORT_OFFSET_DIGITS and (not rest or rest[0] in " \t")
            and all(len(word) == 2 and _is_hex(word) for word in _byte_column(line).split()))


def _is_offset_dump(content: list[str]) -> bool:
    """Every line an offset line or ``*``, the first at offset 0, some line holding bytes.

    Offset 0 keeps a plain line such as ``8053 00 00`` plain; ``_dumps`` then checks that every
    offset follows on, which refuses plain hex that only looks like a dump.
    """
    return (_is_offset_line(content[0]) and int(_offset_of(content[0]), 16) == 0
            and all(line == "*" or _is_offset_line(line) for line in content)
            and any(line != "*" and _byte_column(line) for line in content))


def _is_source_title(line: str) -> bool:
    name, bracket, size = line.strip().partition(" (")
    return bool(name) and bool(bracket) and size.endswith(" bytes):") and size[:-8].isdigit()


def _offset_line_bytes(line: str, number: int) -> bytes:
    return _hex_words(_byte_column(line).split(), number)


def _dumps(lines: list[str], line_bytes: Callable[[str, int], bytes]) -> list[Chunk]:
    """Chunks of a dump (xxd, hexdump -C, an offset column): a blank line or an offset back to 0 starts
    a new one.

    Offsets must follow on from the first line's; ``*`` repeats the previous line up to the next
    offset, as ``hexdump -C`` and ``xxd -a`` write runs of identical lines.
    """
    chunks: list[Chunk] = []
    out = bytearray()
    base = start = 0
    previous = b""
    star = 0  # line number of a pending '*'
    repeated = 0

    def flush() -> None:
        if star:
            raise HexTextError("'*' is not followed by an offset line", star)
        if out:
            chunks.append(Chunk(bytes(out), start, boundary=False))

    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            flush()
            out, start, previous = bytearray(), 0, b""
            continue
        if line == "*":
            if not previous or star:
                raise HexTextError("'*' does not follow a line of bytes", number)
            star = number
            continue
        offset = int(_offset_of(line), 16)
        if start and offset == 0 and not star:
            flush()
            out, start = bytearray(), 0
        if not start:
            base, start = offset, number
        gap = offset - base - len(out)
        if star:
            if gap > MAX_REPEAT - repeated:
                raise HexTextError(f"'*' lines repeat more than {MAX_REPEAT} bytes in all", star)
            if gap < 0 or gap % len(previous):
                raise HexTextError(f"offset {offset:#x} does not end whole repeats of the line "
                                   "before '*'", number)
            out += previous * (gap // len(previous))
            repeated, star = repeated + gap, 0
        elif gap:
            raise HexTextError(f"offset {offset:#x}, expected {base + len(out):#x}", number)
        previous = line_bytes(line, number)
        out += previous
    flush()
    return chunks

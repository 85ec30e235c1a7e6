"""Value and key codecs: unsigned LEB128 collection prefixes, the xattr blob, snappy, text (reference 6)."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any, Final

import cramjam
from construct import Construct, ExplicitError, IntegerError, SizeofError, stream_read, stream_write

# Largest valid collection id prefix: a u32 takes at most 5 LEB128 bytes.
MAX_LEB128_BYTES: Final = 5
# A snappy block declares its uncompressed size up front; refuse to inflate more than the largest value a
# server stores (20 MiB items plus 1 MiB of system xattrs), so a hostile header cannot ask for gigabytes.
MAX_DECOMPRESSED_LENGTH: Final = 21 * 1024 * 1024


def leb128_decode(buf: bytes, start: int = 0, end: int = -1) -> tuple[int, int] | None:
    """``(value, bytes used)`` of the unsigned LEB128 prefix of ``buf[start:end]`` (``end`` -1: the end of
    ``buf``), or None if it is not valid: a value above 32 bits, or a longer form than the shortest (a last
    byte of 0 after others), which would not encode back to the same bytes."""
    if end < 0:
        end = len(buf)
    if start < end and buf[start] < 0x80:  # one byte, the common collection id: no loop to set up
        return buf[start], 1
    value = 0
    for i in range(min(end - start, MAX_LEB128_BYTES)):
        byte = buf[start + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if value > 0xFFFFFFFF or (i and not byte):
                return None
            return value, i + 1
    return None


def leb128_encode(value: int) -> bytes:
    if value < 0:  # its shifts never reach 0: a negative number would loop for ever
        raise ValueError(f"LEB128 encodes non-negative integers, not {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class Leb128Error(ExplicitError):  # type: ignore[misc]  # construct is untyped
    """An LEB128 length that is not a u32 in its shortest form. Explicit: a list of them stops parsing
    instead of ending quietly at the bad one, so the value is shown as its bytes with the reason."""


class Leb128(Construct):  # type: ignore[misc]  # construct is untyped
    """An unsigned LEB128 u32 in its shortest form (range scan lengths), as :func:`leb128_decode` reads a
    collection-id prefix: a longer form would not encode back to its bytes, and reading stops at 5 bytes,
    so a hostile run of continuation bytes is not turned into a number of millions of digits."""

    def _parse(self, stream: Any, context: Any, path: str) -> int:
        data = b""
        while len(data) < MAX_LEB128_BYTES and (not data or data[-1] & 0x80):
            data += stream_read(stream, 1, path)
        decoded = leb128_decode(data)
        if decoded is None:
            raise Leb128Error(f"{path.rpartition(' -> ')[2]} {data.hex()} is not a 32-bit number in its "
                              f"shortest LEB128 form")
        return decoded[0]

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> int:
        if not isinstance(obj, int) or not 0 <= obj <= 0xFFFFFFFF:
            raise IntegerError(f"{path.rpartition(' -> ')[2]} {obj!r} is not a 32-bit unsigned number", path=path)
        data = leb128_encode(obj)
        stream_write(stream, data, len(data), path)
        return obj

    def _sizeof(self, context: Any, path: str) -> int:
        raise SizeofError("an LEB128 number's size depends on its value", path=path)


@dataclass(frozen=True, slots=True)
class Xattr:
    key: str
    value: str


def parse_xattrs(value: bytes) -> tuple[list[Xattr], int] | str:
    """``(pairs, body offset)`` or an error string describing what is wrong with the blob."""
    if len(value) < 4:
        return "xattr blob shorter than its 4-byte length"
    (total,) = struct.unpack_from(">I", value, 0)
    if 4 + total > len(value):
        return f"xattr length {total} exceeds the value ({len(value) - 4} bytes after the length)"
    pairs: list[Xattr] = []
    pos, end = 4, 4 + total
    while pos < end:
        if pos + 4 > end:
            return "xattr pair length runs past the blob"
        (pair_length,) = struct.unpack_from(">I", value, pos)
        pos += 4
        if pair_length < 2 or pos + pair_length > end:
            return f"xattr pair length {pair_length} runs past the blob"
        pair = value[pos:pos + pair_length]
        pos += pair_length
        key_end = pair.find(b"\x00")
        if key_end < 0 or pair[-1] != 0 or key_end == len(pair) - 1:
            return "xattr pair is not key NUL value NUL"
        try:
            pairs.append(Xattr(pair[:key_end].decode("utf-8"), pair[key_end + 1:-1].decode("utf-8")))
        except UnicodeDecodeError:
            return "xattr key or value is not UTF-8"
    return pairs, end


def build_xattrs(pairs: list[Xattr]) -> bytes:
    blob = bytearray()
    for pair in pairs:
        item = pair.key.encode() + b"\x00" + pair.value.encode() + b"\x00"
        blob += struct.pack(">I", len(item)) + item
    return struct.pack(">I", len(blob)) + bytes(blob)


def snappy_length(data: bytes) -> int | None:
    """The uncompressed length a raw snappy block declares (a varint), or None if unreadable."""
    decoded = leb128_decode(data)
    return decoded[0] if decoded else None


def snappy_decompress(data: bytes) -> bytes | str:
    """Decompressed bytes, or an error string (never raises)."""
    declared = snappy_length(data)
    if declared is None:
        return "snappy length prefix is unreadable"
    if declared > MAX_DECOMPRESSED_LENGTH:
        return f"snappy block declares {declared} bytes, above the {MAX_DECOMPRESSED_LENGTH} limit"
    try:
        return bytes(cramjam.snappy.decompress_raw(data))
    except Exception as exc:  # noqa: BLE001 - cramjam raises its own error types for corrupt input
        return f"snappy data does not decompress: {str(exc).splitlines()[0] if str(exc) else exc!r}"


def snappy_compress(data: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(data))


def text_or_hex(data: bytes) -> tuple[str, bool]:
    """``(text, False)`` when ``data`` is UTF-8 without control characters, else ``(hex, True)``."""
    text = as_text(data)
    return (data.hex(), True) if text is None else (text, False)


def as_text(data: bytes) -> str | None:
    """``data`` as text when it is UTF-8 without control characters, else None (it is shown as hex)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() or printable(text) else None


# The C0 and C1 controls but tab, line feed and carriage return: bytes that make a value binary, not text; and
# the line and paragraph separators, which readers of JSON lines that split on every line end (Python's
# splitlines, older JavaScript) would cut a record at
_CONTROLS: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> bool:
    """Text shown as text: no control characters but tabs and line breaks (``isprintable`` is the fast
    test). A no-break space, a zero-width joiner in an emoji or a bidi mark is a document's text: JSON
    holds it as it is, and pretty output and templates show it escaped."""
    return _CONTROLS.search(text) is None

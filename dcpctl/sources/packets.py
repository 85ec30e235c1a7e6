"""Packets from a file or standard input: raw binary streams, hex text or document diagrams.

Binary input is framed incrementally (constant memory); text input is read whole up to
``MAX_TEXT_INPUT`` bytes, because hex text is for packets and protocol documents, not for captures.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO, Final

from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.protocol.constants import MAGIC_CLASS
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH, Framer, Skipped
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.sources.hextext import HexTextError, parse_packets

# Hex text expands every byte to 2-3 characters plus layout; 64 MiB of text is far more than any document
# or pasted packet, and reading it whole keeps diagram parsing simple.
MAX_TEXT_INPUT: Final = 64 * 1024 * 1024
# Binary input is read and framed in chunks of this size.
READ_CHUNK: Final = 1024 * 1024
_SNIFF: Final = 4096


Item = Message | Skipped


def _looks_binary(head: bytes) -> bool:
    """Binary unless it is UTF-8 text without C0 control characters other than whitespace."""
    if not head:
        return False
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        # a multi-byte character cut at the sniff boundary is still text
        try:
            text = head[:-3].decode("utf-8")
        except UnicodeDecodeError:
            return True
    return any((ord(c) < 0x20 and c not in "\t\r\n\f\v") or c == "\x7f" for c in text)


def read_items(stream: BinaryIO, options: DecodeOptions,
               max_body_length: int = DEFAULT_MAX_BODY_LENGTH) -> Iterator[Item]:
    """Messages (and :class:`Skipped` notices for bytes that start no packet) in input order."""
    head = stream.read(_SNIFF)
    if _looks_binary(head):
        yield from _binary(head, stream, options, max_body_length)
        return
    text = head + stream.read(MAX_TEXT_INPUT + 1 - len(head))
    if len(text) > MAX_TEXT_INPUT:
        raise CommandError(f"hex text input larger than {MAX_TEXT_INPUT} bytes; give binary instead",
                           ExitCode.INPUT)
    try:
        chunks = parse_packets(text)
    except HexTextError as exc:
        raise CommandError(f"input is not hex, a hex dump or a byte table: {exc}",
                           ExitCode.INPUT) from None
    base = 0
    for chunk in chunks:
        if chunk.boundary:
            yield decode(chunk.data, base, DecodeOptions(options.dialect, options.collections,
                                                         options.show_secrets, lenient=True))
            base += len(chunk.data)
        else:
            yield from _frames(_framer(options, max_body_length), [chunk.data], options, base)
            base += len(chunk.data)


def _framer(options: DecodeOptions, max_body_length: int) -> Framer:
    """While resynchronising, only opcodes the dialect declares start a header."""
    return Framer(max_body_length, frozenset(opcode for _, opcode in options.dialect.table))


def _binary(head: bytes, stream: BinaryIO, options: DecodeOptions,
            max_body_length: int) -> Iterator[Item]:
    def chunks() -> Iterator[bytes]:
        yield head
        while True:
            data = stream.read(READ_CHUNK)
            if not data:
                return
            yield data

    yield from _frames(_framer(options, max_body_length), chunks(), options, 0)


def _frames(framer: Framer, chunks: Iterator[bytes] | list[bytes], options: DecodeOptions,
            base: int) -> Iterator[Item]:
    def decoder(data: bytes, offset: int) -> Message:
        return decode(data, base + offset, options)

    for data in chunks:
        framer.feed(data)
        for item in framer.decoded(decoder):
            if isinstance(item, Skipped) and base:
                item = Skipped(base + item.offset, item.length, item.reason)  # noqa: PLW2901
            yield item
    offset, tail = framer.remainder()
    if tail and tail[0] in MAGIC_CLASS:
        yield decode(tail, base + offset, options)  # a packet cut short: "truncated" diagnostic
    elif tail:  # no magic byte first: not a packet's start, cut or whole
        yield Skipped(base + offset, len(tail), "garbage")

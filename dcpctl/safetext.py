"""Text from the wire, files or a server, made safe to show a person.

Keys, values, xattrs, server error texts and file names reach a terminal; raw, an ESC sequence there can
retitle the window, clear the screen or move the cursor, and a newline can forge a whole output line. Every
renderer and every error message passes such text through :func:`shown`. It sits outside the layers (like
``exitcode``) because the pure core, the edges and the renderers all need it.
"""

from __future__ import annotations

import reprlib
from typing import Final

_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def _escape(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, carried by surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def shown(text: str) -> str:
    """``text`` with every character Python does not call printable (controls, line and paragraph
    separators, bidi and other format characters, unassigned code points) written as a backslash escape,
    and backslashes doubled, so an escape in the input cannot pass for one we wrote."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(char if char.isprintable() and char != "\\" else _escape(char) for char in text)


def shown_bytes(data: bytes) -> str:
    """Bytes as text for a person: UTF-8 where they decode, ``\\xNN`` for the bytes that do not."""
    return shown(data.decode("utf-8", errors="surrogateescape"))


QUOTED_CHARS: Final = 48  # of a bad value quoted in an error or diagnostic: enough to recognise it, one line


class _JsonWords(reprlib.Repr):
    """The values quoted come from JSON (records to encode, state files, failover dumps): its null, true and
    false, not Python's None, True and False."""

    def repr_NoneType(self, _value: None, _level: int) -> str:  # noqa: N802 - reprlib's dispatch by type name
        return "null"

    def repr_bool(self, value: bool, _level: int) -> str:
        return "true" if value else "false"


def _bounded_repr() -> reprlib.Repr:
    # depth and size bounded: a value from the wire may nest 1024 levels (orjson's limit), past repr's own
    bounded = _JsonWords()
    bounded.maxlevel = 3
    bounded.maxlist = bounded.maxtuple = bounded.maxdict = bounded.maxset = 4
    bounded.maxstring = bounded.maxother = bounded.maxlong = QUOTED_CHARS
    return bounded


_REPR: Final = _bounded_repr()


def brief(value: object) -> str:
    """A bad value as an error or diagnostic quotes it: a repr bounded in depth and size, cut to
    :data:`QUOTED_CHARS`, with a long text's length said, so a hostile value still makes a one-line message."""
    text = _REPR.repr(value)
    if isinstance(value, (str, bytes)) and len(value) > QUOTED_CHARS:
        return f"{text[:QUOTED_CHARS]}… ({len(value)} chars)"
    return text if len(text) <= QUOTED_CHARS else f"{text[:QUOTED_CHARS]}…"

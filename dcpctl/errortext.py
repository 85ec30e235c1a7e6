"""Errors every layer words the same way: a file that cannot be read, a document that is not JSON.

The parsers' own messages ("unexpected character, expected a string key: line 1 column 2 (char 1)") name
neither the file nor the option; these say what was read, that it is not valid JSON and where. Like
``safetext``, it sits outside the layers: commands, edges and the core all need it.
"""

from __future__ import annotations

import errno
import json
from typing import Final

_OS_REASONS: Final = {errno.ENOENT: "no such file", errno.EISDIR: "is a directory",
                      errno.EACCES: "permission denied", errno.ENOTDIR: "a part of the path is not a directory"}

# orjson's and the stdlib's wording, by prefix, said in plain words
_JSON_REASONS: Final = (
    ("unexpected end of data", "it ends early"),
    ("Unterminated string", "it ends early"),
    ("depth limit exceeded", "nested more than 1024 levels deep"),
    ("number is infinity", "a number too large for a double"),
    ("no low surrogate", "a lone surrogate escape"),
    ("lone leading surrogate", "a lone surrogate escape"),
    ("unexpected content after document", "more after the first value"),
    ("Extra data", "more after the first value"),
)


def os_reason(exc: OSError) -> str:
    """Why a file could not be opened or read, in the lower case of an error line."""
    known = _OS_REASONS.get(exc.errno or 0)
    return known or (exc.strerror or str(exc)).lower()


def file_error(what: str, exc: OSError) -> str:
    """``what`` (a file, or an option and its file) and why it could not be read."""
    return f"{what}: {os_reason(exc)}"


def ssl_reason(exc: Exception) -> str:
    """OpenSSL's name for why a PEM file would not load (KEY_VALUES_MISMATCH), in words and brackets, or
    nothing: its message ("[SSL] PEM lib (_ssl.c:3926)") names neither the file nor the cause."""
    why = getattr(exc, "reason", None)
    return f" ({why.lower().replace('_', ' ')})" if isinstance(why, str) else ""


def json_error(what: str, exc: ValueError) -> str:
    """``what`` is not valid JSON, where, and why in plain words. ``exc`` is the parser's error (orjson's
    and the stdlib's JSONDecodeError carry the position); any other ValueError (a hook that refused a
    value) has its own words."""
    if not isinstance(exc, json.JSONDecodeError):  # orjson's JSONDecodeError is a subclass
        return f"{what} is not valid JSON ({exc})"
    if exc.msg.startswith("str is not valid UTF-8"):  # (orjson gives no position, and an empty doc)
        return f"{what} is not valid JSON: it is not UTF-8 text"
    if not str(exc.doc).strip():
        return f"{what} is empty, not JSON"
    reason = next((words for prefix, words in _JSON_REASONS if exc.msg.startswith(prefix)), None)
    if reason is None:  # orjson says "unexpected character" of the end when only white space is left
        reason = "unexpected character" if str(exc.doc)[exc.pos:].strip() else "it ends early"
    return f"{what} is not valid JSON: {reason} at line {exc.lineno}, column {exc.colno}"

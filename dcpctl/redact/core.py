"""Redaction of one decoded message (pure: a message and a salt in, bytes out), same length where it can.

Theory of operation. Every byte of a message keeps its place: the header, frame infos and extras (opcodes,
vbuckets, seqnos, uuids, CAS, flags, datatypes, statuses) are copied; what the registry row says is customer
data is overwritten by a placeholder of the same length, so every length field and offset stays true. Two
things change a message's length, its header's total body length then rewritten: a snappy value, redacted
inside and compressed again, and ``--values drop`` (``Policy.drop_values``); the capture's TCP stream is
made to agree by ``sources/redaction.py``. What
is data is read from the declarations, never restated: the row's key and value kinds and contents (a name,
a secret, free text: ``registry.Content``), the value grammar's leaf fields (a subdocument spec's ``key`` and
``value``), the datatype (xattrs, JSON, snappy). A new row is redacted by what it declares.

Placeholders are derived from HMAC-SHA256 keyed by the salt over the original bytes, so the same key gives the
same placeholder in every file and connection redacted with one salt, and ``decode`` of the output still shows
which messages concern one document. JSON keeps its structure and names: strings and numbers are replaced
token by token, each by one of the same length. Secrets (SASL exchanges, the HELLO user agent's text) are
not hashed but overwritten with ``*``: nothing to correlate, nothing to guess.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

import orjson

from dcpctl.protocol import walk
from dcpctl.protocol.constants import DATATYPE_JSON, DATATYPE_SNAPPY, DATATYPE_XATTR
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH, Framer, Skipped
from dcpctl.protocol.grammar import HEADER_LENGTH
from dcpctl.protocol.message import DecodeOptions, Message, decode, value_grammar
from dcpctl.protocol.registry import (
    HEADER_LAYOUT,
    SUBDOC_LOOKUPS,
    SUBDOC_MUTATIONS,
    Content,
    KeyKind,
    Presence,
    ValueKind,
)
from dcpctl.protocol.value import (
    Xattr,
    build_xattrs,
    leb128_decode,
    parse_xattrs,
    snappy_compress,
    snappy_decompress,
)

# Subdocument commands: a request's text value is the path (a JSON name: kept, its length in the extras'
# path_length) then the fragment (replaced); a response's value is the fragment found, unless it is an error.
SUBDOC_OPCODES: Final = frozenset(SUBDOC_LOOKUPS + SUBDOC_MUTATIONS)
# The JSON name whose string values are names of buckets, scopes and collections.
NAME_FIELD: Final = b'"name"'
# Leaf fields of a value grammar that hold documents' keys or values (observe keys, subdocument values).
DATA_FIELDS: Final = frozenset({"key", "value"})
# Placeholder alphabet: letters and digits, so a placeholder shows as text and needs no JSON escape.
_ALPHABET: Final = b"abcdefghijklmnopqrstuvwxyz0123456789"
_TO_ALPHABET: Final = bytes(_ALPHABET[i % len(_ALPHABET)] for i in range(256))
_TO_DIGIT: Final = bytes(b"0123456789"[i % 10] for i in range(256))
_TO_NONZERO: Final = bytes(b"123456789"[i % 9] for i in range(256))
# JSON tokens: strings (with their escapes) and numbers; ``true``, ``false``, ``null`` and the punctuation
# are structure and stay. Only applied to text that parsed as JSON, scanned from its start, so a match
# never begins inside a string.
# A JSON string, its text in a group; unrolled, so the matcher steps once per run of plain characters.
_STRING: Final = rb'"([^"\\]*(?:\\.[^"\\]*)*)"'
_JSON_TOKEN: Final = re.compile(_STRING + rb'|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?')
# The tokens replaced, in groups: a string value's text (a string followed by a colon is a name, kept whole),
# a number's integer digits and its fraction's digits.
_JSON_VALUE: Final = re.compile(_STRING + rb'(?![ \t\r\n]*:)|"[^"\\]*(?:\\.[^"\\]*)*"|-?(\d+)(?:\.(\d+))?'
                                rb'(?:[eE][+-]?\d+)?')
_WHITESPACE: Final = b" \t\r\n"
_STAR: Final = ord("*")
_QUOTE, _COLON, _ZERO = (ord(c) for c in '":0')


@dataclass(frozen=True, slots=True)
class Policy:
    """What the user asked to keep: xattrs by name, names in clear or hashed."""

    keep_xattrs: frozenset[str] = frozenset()
    hash_names: bool = False
    drop_values: bool = False  # documents' values emptied (xattrs included): the message's length changes


@dataclass
class Redactor:
    """Redacts messages with one salt; ``counts`` says what it changed (the summary's figures)."""

    salt: bytes
    policy: Policy = field(default_factory=Policy)
    counts: Counter[str] = field(default_factory=Counter)

    # --- placeholders ---------------------------------------------------------------------------------
    def _stream(self, domain: bytes, data: bytes, length: int) -> bytes:
        """``length`` pseudo-random bytes determined by the salt, a domain and the original bytes."""
        seed = hmac.digest(self.salt, domain + b"\x00" + data, "sha256")  # one-shot: no HMAC object
        return hashlib.shake_256(seed).digest(length)

    def placeholder(self, domain: bytes, data: bytes) -> bytes:
        """Letters and digits, as long as ``data``, the same for the same bytes under one salt."""
        return self._stream(domain, data, len(data)).translate(_TO_ALPHABET)

    def json(self, data: bytes, parsed: bool = False) -> bytes | None:
        """JSON with its structure and names kept, strings and numbers replaced (same length); None when
        ``data`` is not JSON (``parsed``: the caller's orjson already found it is). The replacement bytes come
        from one keyed stream per document: a value's strings do not give away which of them are equal."""
        if not parsed:
            try:
                orjson.loads(data)
            except ValueError:
                return None
        stream = self._stream(b"json", data, len(data))
        letters, digits, nonzero = (stream.translate(table) for table in (_TO_ALPHABET, _TO_DIGIT, _TO_NONZERO))
        out = bytearray(data)
        for match in _JSON_VALUE.finditer(data):
            start, end = match.span(1)
            if start >= 0:  # a string value: its text between the quotes
                out[start:end] = letters[start:end]
                continue
            start, end = match.span(2)  # a number's integer digits: a lone 0 stays, else no leading zero
            if start < 0:
                continue  # a name
            if end - start > 1 or data[start] != _ZERO:
                out[start:end] = nonzero[start:start + 1] + digits[start + 1:end]
            start, end = match.span(3)  # its fraction's digits; the exponent stays (1e999 is not JSON)
            if start >= 0:
                out[start:end] = digits[start:end]
        return bytes(out)

    def json_names(self, data: bytes) -> bytes:
        """JSON with the string values of its "name" fields hashed as names (a manifest's scopes and
        collections, a cluster map's bucket), the rest as it is."""
        try:
            orjson.loads(data)
        except ValueError:
            return data
        out = bytearray(data)
        named = False
        for match in _JSON_TOKEN.finditer(data):
            start, end = match.span()
            token = data[start:end]
            after = end
            while after < len(data) and data[after] in _WHITESPACE:
                after += 1
            if after < len(data) and data[after] == _COLON:
                named = token == NAME_FIELD
                continue
            if named and data[start] == _QUOTE:
                self.counts["names"] += 1
                out[start + 1:end - 1] = self.placeholder(b"name", data[start + 1:end - 1])
            named = False
        return bytes(out)

    def body(self, data: bytes, is_json: bool, parsed: bool = False) -> bytes:
        """A document body: JSON with names kept when it is JSON, else a placeholder."""
        if is_json or data[:1] in (b"{", b"["):
            found = self.json(data, parsed)
            if found is not None:
                return found
        return self.placeholder(b"value", data)

    # --- parts of a message ---------------------------------------------------------------------------
    def _key(self, msg: Message, kind: KeyKind | None, content: Content | None) -> bytes:
        key = msg.key
        if content is Content.FREE_TEXT:
            self.counts["user_agents"] += 1
            found = self.json(key)
            if found is not None:  # the JSON agent's names stay; its text goes
                return bytes(byte if found[i] == byte else _STAR for i, byte in enumerate(key))
            return b"*" * len(key)
        if content is Content.NAME or (kind is KeyKind.TEXT and content is None):
            if content is Content.NAME and self.policy.hash_names:
                self.counts["names"] += 1
                # scope.collection: each name on its own, as a manifest's "name" fields are hashed
                return b".".join(self.placeholder(b"name", part) for part in key.split(b"."))
            return key
        self.counts["keys"] += 1
        if kind is KeyKind.DOCUMENT and msg.options.collections:
            prefix = leb128_decode(key)
            if prefix is not None:
                return key[:prefix[1]] + self.placeholder(b"key", key[prefix[1]:])
        return self.placeholder(b"key", key)

    def _xattrs(self, data: bytes) -> bytes:
        """An xattr blob and its body: names kept, values replaced (JSON with names kept) unless kept."""
        parsed = parse_xattrs(data)
        if isinstance(parsed, str):
            return self.placeholder(b"value", data)
        pairs, body_offset = parsed
        out = []
        for pair in pairs:
            if pair.key in self.policy.keep_xattrs:
                out.append(pair)
                continue
            self.counts["xattrs"] += 1
            raw = pair.value.encode()
            out.append(Xattr(pair.key, self.body(raw, is_json=False).decode("ascii", "replace")))
        blob = build_xattrs(out)
        if len(blob) != body_offset:  # a placeholder always encodes to as many bytes; guard anyway
            return self.placeholder(b"value", data)
        return blob + self.body(data[body_offset:], is_json=False)

    def _document(self, value: bytes, datatype: int) -> bytes:
        if datatype & DATATYPE_SNAPPY:
            inflated = snappy_decompress(value)
            if isinstance(inflated, str):
                return self.placeholder(b"value", value)
            inner = self._document(inflated, datatype & ~DATATYPE_SNAPPY)
            compressed = snappy_compress(inner)
            # a placeholder compresses worse than text: the value then changes length, and the capture's
            # lengths and TCP stream are rewritten to match (sources/redaction.py)
            self.counts["snappy_resized"] += len(compressed) != len(value)
            return compressed
        if datatype & DATATYPE_XATTR:
            return self._xattrs(value)
        return self.body(value, bool(datatype & DATATYPE_JSON))

    def _grammar(self, msg: Message, value: bytes) -> bytes:
        variant = msg.variant
        assert variant is not None
        found = value_grammar(variant, msg.extras, len(value))
        if found is None:
            return self.placeholder(b"value", value)
        out = bytearray(value)
        try:
            spans = list(walk.spans(found, value))
        except Exception:  # noqa: BLE001 - a value that does not fit its grammar is replaced whole
            return self.placeholder(b"value", value)
        changed = False
        for span in spans:
            if span.path.rsplit(".", 1)[-1] in DATA_FIELDS and span.length:
                part = value[span.offset:span.offset + span.length]
                out[span.offset:span.offset + span.length] = self.body(part, is_json=False)
                changed = True
        self.counts["values"] += changed
        return bytes(out)

    def _value(self, msg: Message, kind: ValueKind | None, content: Content | None, row: str | None) -> bytes:
        value = msg.value
        if kind is ValueKind.SECRET or content is Content.SECRET:
            self.counts["sasl_values"] += 1
            return b"*" * len(value)
        datatype = msg.datatype if msg.spec is None or msg.spec.type_field == "datatype" else 0
        if kind is None or kind is ValueKind.RAW:
            self.counts["values"] += 1
            return self.placeholder(b"value", value)
        if kind is ValueKind.GRAMMAR:
            return self._grammar(msg, value)
        if content is Content.DATA:
            self.counts["values"] += 1
            return self.body(value, is_json=True)
        spec = msg.spec
        if spec is not None and spec.name in SUBDOC_OPCODES and row != "error" and kind is not ValueKind.NONE:
            self.counts["values"] += 1
            path_length = msg.field("path_length") or 0
            if msg.is_response or not 0 < path_length <= len(value):
                return self.body(value, is_json=False)
            return value[:path_length] + self.body(value[path_length:], is_json=False)
        if kind is ValueKind.DOCUMENT:
            self.counts["values"] += 1
            return self._document(value, datatype)
        if self.policy.hash_names and content is Content.NAMES and not datatype & DATATYPE_SNAPPY:
            return self.json_names(value)
        # protocol text, compressed or not (HELLO SnappyEverywhere): a control value, a manifest, an error body
        return value

    def plain_item(self, data: bytes, key_at: int, value_at: int, datatype: int, prefixed: bool) -> bytes:
        """A plain stream item as :meth:`message` redacts it, without a :class:`Message`: ``data`` is the packet a
        compiled item reader (``protocol.itemreader``) read in place (a document key, after a one-byte collection
        id when ``prefixed``; a raw or JSON value, no snappy, no xattrs), ``key_at`` and ``value_at`` where its
        key and value start. A test holds it to :meth:`message` on every plain item of the suite's captures."""
        out = bytearray(data)
        if value_at > key_at:
            self.counts["keys"] += 1
            key_at += prefixed
            out[key_at:value_at] = self.placeholder(b"key", data[key_at:value_at])
        if len(data) > value_at:
            self.counts["values"] += 1
            if self.policy.drop_values:
                return _with_body_length(out[:value_at])
            is_json = bool(datatype & DATATYPE_JSON)  # then the item reader parsed it
            out[value_at:] = self.body(data[value_at:], is_json, parsed=is_json)
        return bytes(out)

    def message(self, msg: Message) -> bytes:
        """The message's bytes with its keys, values and secrets replaced: the same length and header, unless
        a snappy value compressed again or a dropped value changed its total body length."""
        raw = msg.raw
        if len(raw) < HEADER_LENGTH or len(raw) < HEADER_LENGTH + msg.total_body_length:
            # cut short (the capture ended inside it): its body cannot be read by its layout, so none of it stays
            self.counts["truncated"] += 1
            return raw[:HEADER_LENGTH] + bytes(max(0, len(raw) - HEADER_LENGTH))
        key_at, value_at, end = msg.key_offset, msg.value_offset, msg.body_end
        if key_at == end == len(raw):  # no key, no value (an ack, a marker, a noop): nothing to replace
            return raw
        variant = msg.variant
        row = variant.name if variant is not None else None
        out = bytearray(raw)
        if value_at > key_at:
            out[key_at:value_at] = self._key(msg, variant.key if variant is not None else None,
                                             variant.key_content if variant is not None else None)
        tail = len(raw) - end  # bytes past the declared body (never in a framed stream): not the protocol's
        if end > value_at:
            kind = variant.value if variant is not None else None
            value = self._value(msg, kind, variant.value_content if variant is not None else None, row)
            if self.policy.drop_values and kind is ValueKind.DOCUMENT:
                assert variant is not None
                value = least_value(msg.datatype) if variant.value_presence is Presence.REQUIRED else b""
            out[value_at:end] = value
        if tail:
            out[len(out) - tail:] = bytes(tail)
        return bytes(out) if len(out) == len(raw) else _with_body_length(out)


def least_value(datatype: int) -> bytes:
    """The shortest document value a message that must have one can carry under its datatype: ``0`` (JSON, and
    one byte of anything else), an empty xattr section before it, snappy around it."""
    value = (b"\x00\x00\x00\x00" if datatype & DATATYPE_XATTR else b"") + b"0"
    return snappy_compress(value) if datatype & DATATYPE_SNAPPY else value


def _with_body_length(packet: bytearray) -> bytes:
    """A packet whose body changed length, its header's total body length made true again."""
    HEADER_LAYOUT.field("total_body_length").pack_into(packet, HEADER_LAYOUT.offset("total_body_length"),
                                                        len(packet) - HEADER_LENGTH)
    return bytes(packet)


class ByteStreamRedactor:
    """One direction of a live connection redacted as it goes (``stream --write --redact``): bytes in, the
    redacted bytes of every message completed so far out (a message is held until it is whole, at most
    ``max_body_length``); bytes that frame no message come out zeroed."""

    def __init__(self, redactor: Redactor, max_body_length: int = DEFAULT_MAX_BODY_LENGTH) -> None:
        self.redactor = redactor
        self.framer = Framer(max_body_length)

    def feed(self, data: bytes, options: DecodeOptions) -> bytes:
        self.framer.feed(data)
        out = bytearray()
        for event in self.framer.events():
            if isinstance(event, Skipped):
                out += bytes(event.length)
            else:
                out += self.redactor.message(decode(event.data, event.offset, options))
        return bytes(out)

    def finish(self, options: DecodeOptions) -> bytes:
        """What is left at the end: a message cut short keeps its header only."""
        offset, tail = self.framer.remainder()
        return self.redactor.message(decode(tail, offset, options)) if len(tail) >= HEADER_LENGTH else bytes(len(tail))

"""Redaction of one decoded message (pure: a message and a salt in, bytes out), same length where it can.

Theory of operation. Every byte of a message keeps its place: the header, frame infos and extras (opcodes,
vbuckets, seqnos, uuids, CAS, flags, datatypes, statuses) are copied; what the registry row says is customer
data is overwritten by a placeholder of the same length, so every length field and offset stays true. Three
things change a message's length, its header's lengths then rewritten: a snappy value, redacted inside and
compressed again, ``--values drop`` (``Policy.drop_values``), and an address written as text, mapped
(``--map-addresses``); the capture's TCP stream is made to agree by ``sources/redaction.py``. Names
(``--hash-names``) are hashed word by word and remembered, so the protocol's text that mentions them again (a
map's URIs, stats) gets the same placeholders. What
is data is read from the declarations, never restated: the row's key and value kinds and contents (a name,
a secret, free text: ``registry.Content``), the value grammar's leaf fields (a subdocument spec's ``key`` and
``value``), the datatype (xattrs, JSON, snappy). A new row is redacted by what it declares.

Placeholders are derived from SHAKE-256 keyed by the salt (the salt, its length and a domain absorbed before the
original bytes, as KMAC keys SHAKE: one native hash call a placeholder), so the same key gives the same
placeholder in every file and connection redacted with one salt, and ``decode`` of the output still shows
which messages concern one document. JSON keeps its structure and names: strings and numbers are replaced
token by token, each by one of the same length. Secrets (SASL exchanges, the HELLO user agent's text) are
not hashed but overwritten with ``*``: nothing to correlate, nothing to guess.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import orjson

from dcpctl.protocol import frameinfo, walk
from dcpctl.protocol.constants import DATATYPE_JSON, DATATYPE_SNAPPY, DATATYPE_XATTR, Status, SubdocPathFlag
from dcpctl.protocol.encode import set_key_length
from dcpctl.protocol.frameinfo import IMPERSONATE_USER
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH, Framer, Skipped
from dcpctl.protocol.grammar import HEADER_LENGTH
from dcpctl.protocol.message import DecodeOptions, Message, decode, value_grammar
from dcpctl.protocol.registry import (
    DOCUMENT_KEY_STATS,
    ERROR_ROWS,
    HEADER_LAYOUT,
    SUBDOC_LOOKUPS,
    SUBDOC_MUTATIONS,
    Content,
    KeyKind,
    Presence,
    ValueKind,
    Variant,
)
from dcpctl.protocol.value import (
    Xattr,
    build_xattrs,
    leb128_decode,
    parse_xattrs,
    snappy_compress,
    snappy_decompress,
)
from dcpctl.redact.address import AddressMap

# Subdocument commands: a request's text value is the path (a JSON name: kept, its length in the extras'
# path_length) then the fragment (replaced); a response's value is the fragment found, unless it is an error.
SUBDOC_OPCODES: Final = frozenset(SUBDOC_LOOKUPS + SUBDOC_MUTATIONS)
# The JSON names whose string values are names of buckets, scopes and collections, and of users.
NAME_FIELD: Final = b'"name"'
USER_FIELD: Final = b'"user"'
# The JSON name whose string values are a cluster map's host names (maybe with a port), or its nodes' addresses.
HOSTNAME_FIELD: Final = b'"hostname"'
# Leaf fields of a value grammar that hold documents' keys or values (observe keys, subdocument values, a
# counter's value after INCREMENT or DECREMENT).
DATA_FIELDS: Final = frozenset({"key", "value", "counter"})
# Extras fields that hold a document's value: the counter INCREMENT and DECREMENT create when it is missing.
DATA_EXTRAS: Final = ("initial",)
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
# A number between strings, in groups: its integer digits, its fraction's and its exponent's digits.
_JSON_NUMBER: Final = re.compile(rb'-?(\d+)(?:\.(\d+))?(?:[eE][+-]?(\d+))?')
_WHITESPACE: Final = b" \t\r\n"
# The keyed hash's domains: what a placeholder stands for, so equal bytes of two kinds get unrelated ones.
_DOMAINS: Final = (b"key", b"value", b"json", b"name", b"field")
_QUOTE, _COLON, _ZERO, _BACKSLASH = (ord(c) for c in '":0\\')
_DIGITS: Final = b"0123456789"
# JSON names whose placeholders are kept: a bucket's documents share a vocabulary far smaller than this, and
# a hostile stream of fresh names costs a hash each, never memory.
FIELDS_KEPT: Final = 4096
# Bucket, scope, collection, user and connection names are hashed word by word: runs of the characters a
# bucket's name is made of but its dots and percent signs (a hyphen inside a word only: a replication's
# "ns_1@A->ns_1@B" has an arrow), so "scope.collection" and "eventing:BUCKET:fn" keep their separators and one
# word gets one placeholder in every name, stats key and URI that holds it.
# Bytes above ASCII are word characters: an external (LDAP) user's name may be any UTF-8 (josé, 李雷).
_NAME_WORD: Final = re.compile(rb"[A-Za-z0-9_\x80-\xff]+(?:-[A-Za-z0-9_\x80-\xff]+)*")
# The same in text that percent-encodes (a map's URIs): an escape is a separator, not the start of a word.
_ENCODED_WORD: Final = re.compile(rb"%[0-9A-Fa-f]{2}|([A-Za-z0-9_\x80-\xff]+(?:-[A-Za-z0-9_\x80-\xff]+)*)")
# Name words remembered, for the text that mentions them (stats, a map's URIs): a cluster has far fewer; a
# hostile stream of fresh names costs a hash each, and memory up to this many words.
NAME_WORDS_KEPT: Final = 1 << 16
# Addresses written as text inside messages (a cluster map's nodes, a replication's connection name, a stat):
# IPv6 groups (maybe ending in a dotted quad) or IPv4 dotted quads, each maybe with its port (``[v6]:port``,
# ``v4:port``); ipaddress decides which are addresses.
_ADDRESS_TEXT: Final = re.compile(
    rb"(?<![0-9A-Fa-f:.])(?P<v6>(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9]{1,3}(?:\.[0-9]{1,3}){3}|[0-9A-Fa-f]{1,4})?)"
    rb"(?![0-9A-Fa-f:.])(?:\]:(?P<p6>[0-9]{1,5})(?![0-9]))?"
    rb"|(?<![0-9.])(?P<v4>[0-9]{1,3}(?:\.[0-9]{1,3}){3})(?![0-9.])(?::(?P<p4>[0-9]{1,5})(?![0-9]))?")
# Contents whose text may hold names and addresses (what --hash-names and --map-addresses read).
_NAMED: Final = frozenset({Content.NAME, Content.NAMES, Content.MENTIONS})
_JSON_KINDS: Final = frozenset({ValueKind.JSON, ValueKind.STREAM_REQUEST_JSON})
_DOCUMENT_KEYS: Final = frozenset({KeyKind.NONE, KeyKind.DOCUMENT})
_DOCUMENT_VALUES: Final = frozenset({ValueKind.NONE, ValueKind.DOCUMENT})
# Statuses whose value is data (a document, a scan's keys), whatever row decode found for them (reference 5)
DATA_STATUSES: Final = frozenset({Status.SUCCESS, Status.RANGE_SCAN_MORE, Status.RANGE_SCAN_COMPLETE})
# What separates a subdocument path's names (``a.b[2].c``): dots and array indexes. An index holds no bracket,
# so a hostile path of brackets is split in one pass. A backquoted name may hold dots: it is hashed in
# pieces, still the same length.
_PATH_SEPARATOR: Final = re.compile(rb"(\[[^\[\]]*\]|\.)")


@dataclass(frozen=True, slots=True)
class Policy:
    """What the user asked to keep: xattrs by name, names in clear or hashed."""

    keep_xattrs: frozenset[str] = frozenset()
    hash_names: bool = False
    drop_values: bool = False  # documents' values emptied (xattrs included): the message's length changes
    # JSON names (and the subdocument paths that name them) in clear; else hashed, the same name to the same
    # placeholder everywhere: a map keyed by customers' ids or addresses leaks them through its names
    keep_json_names: bool = True


@dataclass
class Redactor:
    """Redacts messages with one salt; ``counts`` says what it changed (the summary's figures)."""

    salt: bytes
    policy: Policy = field(default_factory=Policy)
    counts: Counter[str] = field(default_factory=Counter)
    # --map-addresses: the frames' IP headers are mapped by the capture's writer, addresses written inside
    # messages here, by the same map
    addresses: AddressMap | None = None
    _keys: dict[bytes, bytes] = field(default_factory=dict, init=False, repr=False)
    _fields: dict[bytes, bytes] = field(default_factory=dict, init=False, repr=False)
    _words: dict[bytes, bytes] = field(default_factory=dict, init=False, repr=False)  # name words' placeholders
    _address_texts: dict[bytes, bytes] = field(default_factory=dict, init=False, repr=False)  # text -> mapped text

    def __post_init__(self) -> None:
        # the keyed hash's prefix per domain: the salt's length, the salt, the domain, a separator
        self._keys = {domain: len(self.salt).to_bytes(4, "big") + self.salt + domain + b"\x00"
                      for domain in _DOMAINS}

    # --- placeholders ---------------------------------------------------------------------------------
    def _stream(self, domain: bytes, data: bytes, length: int) -> bytes:
        """``length`` pseudo-random bytes determined by the salt, a domain and the original bytes: SHAKE-256
        over a prefix that holds the salt (not open to length extension, so a keyed hash as KMAC is)."""
        return hashlib.shake_256(self._keys[domain] + data).digest(length)

    def placeholder(self, domain: bytes, data: bytes) -> bytes:
        """Letters and digits, as long as ``data``, the same for the same bytes under one salt."""
        return self._stream(domain, data, len(data)).translate(_TO_ALPHABET)

    def json(self, data: bytes, parsed: bool = False, keep_names: bool | None = None,
             stars: bool = False) -> bytes | None:
        """JSON with its structure kept, strings and numbers replaced (same length); None when ``data`` is not
        JSON (``parsed``: the caller's orjson already found it is). The replacement bytes come from one keyed
        stream per document: a value's strings do not give away which of them are equal. Names are kept, or
        hashed each on its own as :meth:`field` does (``keep_names``, by default the policy's). ``stars``:
        strings and numbers are overwritten by ``*``, nothing derived from them (free text)."""
        if keep_names is None:
            keep_names = self.policy.keep_json_names
        if not parsed:
            try:
                orjson.loads(data)
            except ValueError:
                return None
        if stars:
            stream = letters = b"*" * len(data)
        else:
            stream = self._stream(b"json", data, len(data))
            letters = stream.translate(_TO_ALPHABET)  # digits are made per number: most documents are mostly text
        out = bytearray(data)
        # Strings are found by bytes.find (a C scan), not by a regular expression stepping through their
        # text; numbers only between them. A string followed by a colon is a name, kept whole.
        find, size, at = data.find, len(data), 0
        while True:
            start = find(b'"', at)
            stop = size if start < 0 else start
            if stop - at > 1 or (stop > at and data[at] in _DIGITS):  # a number can be between strings
                for match in _JSON_NUMBER.finditer(data, at, stop):
                    self._number(out, data, stream, match, stars)
            if start < 0:
                break
            end = find(b'"', start + 1)
            while end > 0 and _escaped(data, end):
                end = find(b'"', end + 1)
            if end < 0:  # not JSON after all (the caller said it parsed)
                return None
            at = end + 1
            while at < size and data[at] in _WHITESPACE:
                at += 1
            if at >= size or data[at] != _COLON:
                out[start + 1:end] = letters[start + 1:end]
            elif not keep_names and end > start + 1:
                out[start + 1:end] = self.field(data[start + 1:end])
        return bytes(out)

    def field(self, name: bytes) -> bytes:
        """A JSON name's placeholder: the same for the same name in every document and subdocument path.
        Documents repeat a few names, so placeholders are kept (at most FIELDS_KEPT, then forgotten)."""
        self.counts["json_names"] += 1
        return self._kept(self._fields, FIELDS_KEPT, b"field", name)

    def _kept(self, kept: dict[bytes, bytes], limit: int, domain: bytes, data: bytes) -> bytes:
        """The placeholder of ``data`` in ``domain``, from ``kept`` (at most ``limit``, then forgotten)."""
        found = kept.get(data)
        if found is None:
            if len(kept) >= limit:
                kept.clear()
            found = kept[data] = self.placeholder(domain, data)
        return found

    def path(self, path: bytes, flags: int) -> bytes:
        """A subdocument path with its names hashed as :meth:`field` hashes them in documents (dots and array
        indexes kept; an xattr path's first name is the xattr's, kept as every xattr name is), or as it is
        when JSON names are kept. ``flags``: the path's subdocument flags."""
        if self.policy.keep_json_names:
            return path
        parts = _PATH_SEPARATOR.split(path)  # names at even places, the separators between them
        first = 2 if flags & SubdocPathFlag.XATTR_PATH else 0
        return b"".join(self.field(part) if place >= first and not place % 2 and part else part
                        for place, part in enumerate(parts))

    @staticmethod
    def _number(out: bytearray, data: bytes, stream: bytes, match: re.Match[bytes], stars: bool = False) -> None:
        """A number's digits replaced from the stream: a lone 0 stays, else no leading zero (``stars``: all
        its digits overwritten by the stream's stars)."""
        start, end = match.span(1)
        if stars:
            out[start:end] = stream[start:end]
        elif end - start > 1 or data[start] != _ZERO:
            out[start:end] = stream[start:start + 1].translate(_TO_NONZERO) + stream[start + 1:end].translate(_TO_DIGIT)
        for group in (2, 3):  # its fraction's and its exponent's digits (an exponent can hold data too)
            start, end = match.span(group)
            if start >= 0:
                out[start:end] = stream[start:end] if stars else stream[start:end].translate(_TO_DIGIT)

    def addresses_in(self, data: bytes) -> bytes:
        """Text with the IPv4 and IPv6 addresses written in it mapped as the frames' addresses are (their
        text's length may change), a port written with one as the frames' ports are, or as it is without
        --map-addresses."""
        if self.addresses is None:
            return data
        return _ADDRESS_TEXT.sub(self._mapped_text, data)

    def _mapped_text(self, match: re.Match[bytes]) -> bytes:
        text = match.group()
        found = self._address_texts.get(text)
        if found is None:
            v6, v6_port, v4, v4_port = match.group("v6", "p6", "v4", "p4")
            port = v6_port or v4_port
            try:
                address = ipaddress.ip_address((v6 or v4).decode("ascii"))
            except ValueError:  # a time, a MAC address, a version: not an address
                found = text
            else:
                assert self.addresses is not None
                found = str(ipaddress.ip_address(self.addresses(address.packed))).encode()
                if port is not None:  # a client's port as the frames' headers have it
                    number = int(port)
                    mapped = str(self.addresses.port(number)).encode() if number <= 0xFFFF else port
                    found += (b"]:" if v6_port else b":") + mapped
            if len(self._address_texts) >= NAME_WORDS_KEPT:
                self._address_texts.clear()
            self._address_texts[text] = found
        return found

    def name(self, data: bytes) -> bytes:
        """A bucket, scope, collection, user or connection name hashed word by word (its dots, colons and the
        like kept: ``scope.collection`` stays two names), each word to the one placeholder it gets everywhere.
        The words are remembered, so that :meth:`mentions` finds them in text that names them again."""
        self.counts["names"] += 1
        return self._hashed_words(data)

    def _hashed_words(self, data: bytes) -> bytes:
        out = bytearray(data)
        for match in _NAME_WORD.finditer(data):
            start, end = match.span()
            out[start:end] = self._kept(self._words, NAME_WORDS_KEPT, b"name", data[start:end])
        return bytes(out)

    def mentions(self, data: bytes, spans: list[tuple[int, int]] | None = None) -> bytes:
        """Protocol text (a stat's name and value, a cluster map's URIs) with every word of the names hashed so
        far replaced where it stands as a word of its own, in its percent-encoded form too; in ``spans`` of
        ``data`` only, when given. A word that is also a name (a collection named "dcp") is replaced in
        the text's own vocabulary too: the price of not leaving a name in clear."""
        words = self._words
        if not words:
            return data
        out = bytearray(data)
        for start, end in spans if spans is not None else [(0, len(data))]:
            patterns = (_NAME_WORD, _ENCODED_WORD) if data.find(b"%", start, end) >= 0 else (_NAME_WORD,)
            for pattern in patterns:
                for match in pattern.finditer(data, start, end):
                    word = match.group(pattern.groups)
                    found = words.get(word) if word is not None else None
                    if found is not None:
                        self.counts["names"] += 1
                        at = match.start(pattern.groups)
                        out[at:at + len(found)] = found
        return bytes(out)

    def json_names(self, data: bytes) -> bytes:
        """JSON of the protocol's (a manifest, a cluster map, a stats filter) with the string values of its
        "name" and "user" fields hashed as names under --hash-names (scopes, collections, the bucket, a user) and
        the host names of its "hostname" fields under --map-addresses, then its other strings' mentions of them
        replaced: a cluster map names its bucket again in its URIs (``/pools/default/buckets/NAME?bucket_uuid=...``)
        and its hosts in its server list. Numbers, JSON names and the rest of the text stay as they are."""
        fields: dict[bytes, Callable[[bytes], bytes]] = {}
        if self.policy.hash_names:
            fields[NAME_FIELD] = fields[USER_FIELD] = self.name
        if self.addresses is not None:
            fields[HOSTNAME_FIELD] = self._host
        try:
            orjson.loads(data)
        except ValueError:
            return data
        out = bytearray(data)
        hashed: Callable[[bytes], bytes] | None = None
        others: list[tuple[int, int]] = []  # the other strings' text
        for match in _JSON_TOKEN.finditer(data):
            start, end = match.span()
            token = data[start:end]
            after = end
            while after < len(data) and data[after] in _WHITESPACE:
                after += 1
            if after < len(data) and data[after] == _COLON:
                hashed = fields.get(token)
                continue
            if data[start] == _QUOTE:
                if hashed is not None:
                    out[start + 1:end - 1] = hashed(data[start + 1:end - 1])
                else:
                    others.append((start + 1, end - 1))
            hashed = None
        mentioned = self.mentions(data, others)
        for start, end in others:
            out[start:end] = mentioned[start:end]
        return bytes(out)

    def _host(self, value: bytes) -> bytes:
        """A "hostname" field's host name hashed word by word as names are (dots kept), its port kept; the
        ``$HOST`` placeholder and addresses (mapped already) as they are."""
        host, colon, port = value.rpartition(b":")
        if not colon or not port.isdigit() or b":" in host:
            host, colon, port = value, b"", b""
        if host == b"$HOST" or host.startswith(b"["):
            return value
        try:
            ipaddress.ip_address(host.decode("ascii"))
        except ValueError:
            self.counts["host_names"] += 1
            return self._hashed_words(host) + colon + port
        return value

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
            found = self.json(key, keep_names=True, stars=True)  # a JSON agent's names and structure stay
            return found if found is not None else b"*" * len(key)
        spec = msg.spec
        if spec is not None and spec.name == "STAT" and not msg.is_response \
                and key.split(b" ", 1)[0] in DOCUMENT_KEY_STATS:
            key = self._stat_document_key(key)
        if content in _NAMED:
            return self._named(key, content)
        if kind is KeyKind.TEXT and content is None:
            return key
        prefix = leb128_decode(key) if kind is KeyKind.DOCUMENT and msg.options.collections else None
        return self.document_key(key, prefix[1] if prefix is not None else 0)

    def _stat_document_key(self, key: bytes) -> bytes:
        """A STAT group's key that names a document (``key KEY VBUCKET [COLLECTION]``, ``key-byid KEY VBUCKET
        CID``): the document's key replaced as it is in the messages that carry it (the same placeholder), the
        group, the vbucket and what follows kept. No vbucket found: everything after the group replaced."""
        words = key.split(b" ")
        if len(words) < 2:
            return key
        vbucket = next((at for at in (len(words) - 2, len(words) - 1) if at >= 2 and words[at].isdigit()),
                       len(words))
        return b" ".join((words[0], self.document_key(b" ".join(words[1:vbucket]), 0), *words[vbucket:]))

    def document_key(self, key: bytes, prefix: int) -> bytes:
        """A document's key (and any other key that is data): its ``prefix`` bytes (the collection id) kept,
        the rest a placeholder."""
        self.counts["keys"] += 1
        return key[:prefix] + self.placeholder(b"key", key[prefix:])

    def document_value(self, value: bytes, datatype: int, required: bool, parsed: bool = False) -> bytes:
        """A document's value redacted inside (snappy, xattrs, JSON with names kept), or emptied under
        ``--values drop``: to nothing, or to the least its datatype allows when its message must carry one
        (``required``). ``parsed``: a JSON value the caller's orjson already parsed."""
        self.counts["values"] += 1
        if self.policy.drop_values:
            return least_value(datatype) if required else b""
        return self._document(value, datatype, parsed)

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

    def _document(self, value: bytes, datatype: int, parsed: bool = False) -> bytes:
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
        return self.body(value, bool(datatype & DATATYPE_JSON), parsed)

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
        flags = 0
        covered = 0  # where the last record read ends
        for span in spans:
            covered = max(covered, span.offset + span.length)
            name = span.path.rsplit(".", 1)[-1]
            if name == "flags":  # a multi-path spec's flags come before its path
                flags = span.value
            if name in DATA_FIELDS and span.length:
                part = value[span.offset:span.offset + span.length]
                if name == "key":  # a document's key, never read as JSON (a key may look like some)
                    prefix = leb128_decode(part) if msg.options.collections else None
                    out[span.offset:span.offset + span.length] = self.document_key(
                        part, prefix[1] if prefix is not None else 0)
                else:
                    out[span.offset:span.offset + span.length] = self.body(part, is_json=False)
                changed = True
            elif name == "name" and span.length and (self.policy.hash_names or self.addresses is not None):
                # a version-2 system event's collection or scope name, as its key is, in place: the table's
                # offsets hold only for the same length (a mapped address in a name could change it)
                part = value[span.offset:span.offset + span.length]
                named = self._named(part, Content.NAME)
                out[span.offset:span.offset + span.length] = named if len(named) == len(part) \
                    else self.placeholder(b"name", part)
            elif name == "path" and span.length:  # a multi-path spec's path: the JSON names it holds
                out[span.offset:span.offset + span.length] = self.path(value[span.offset:span.offset + span.length],
                                                                       flags)
        if covered < len(value):  # a list stops at its first record that does not parse: the rest was not read
            out[covered:] = self.placeholder(b"value", value[covered:])
            changed = True
        self.counts["values"] += changed
        return bytes(out)

    def _value(self, msg: Message, variant: Variant | None) -> bytes:
        datatype = msg.datatype if msg.spec is None or msg.spec.type_field == "datatype" else 0
        return self._value_of(msg, variant, msg.value, datatype)

    def _value_of(self, msg: Message, variant: Variant | None, value: bytes, datatype: int) -> bytes:
        kind, content = (variant.value, variant.value_content) if variant is not None else (None, None)
        if variant is not None and variant.name in ERROR_ROWS and msg.status == Status.NOT_MY_VBUCKET:
            content = Content.NAMES  # kv_engine answers with the bucket's cluster map (reference 5): its names
        if kind is ValueKind.SECRET or content is Content.SECRET:
            self.counts["sasl_values"] += 1
            return b"*" * len(value)
        if kind is None or kind is ValueKind.RAW or kind is ValueKind.NONE or (
                variant is not None and variant.name in ERROR_ROWS and msg.status in DATA_STATUSES):
            # undeclared: no row, a row that declares no value, or a status that carries data (a success,
            # a range scan's) read as a failure's words
            self.counts["values"] += 1
            return self.placeholder(b"value", value)
        if datatype & DATATYPE_SNAPPY and kind is not ValueKind.DOCUMENT:
            # HELLO SnappyEverywhere compresses any response value: redacted inside, compressed again if changed
            inflated = snappy_decompress(value)
            if isinstance(inflated, str):
                self.counts["values"] += 1
                return self.placeholder(b"value", value)
            inner = self._value_of(msg, variant, inflated, datatype & ~DATATYPE_SNAPPY)
            return value if inner == inflated else snappy_compress(inner)
        if kind is ValueKind.GRAMMAR:
            return self._grammar(msg, value)
        if content is Content.DATA:
            self.counts["values"] += 1
            return self.body(value, is_json=True)
        spec = msg.spec
        if (spec is not None and spec.name in SUBDOC_OPCODES
                and variant is not None and variant.name not in ERROR_ROWS):
            self.counts["values"] += 1
            path_length = msg.field("path_length") or 0
            if msg.is_response or not 0 < path_length <= len(value):
                return self.body(value, is_json=False)
            path = self.path(value[:path_length], msg.field("subdoc_flags") or 0)
            return path + self.body(value[path_length:], is_json=False)
        if kind is ValueKind.DOCUMENT:
            assert variant is not None
            return self.document_value(value, datatype, variant.value_presence is Presence.REQUIRED)
        if kind in _JSON_KINDS and not _parses(value):
            # JSON the protocol's (a stream request's filter, a manifest) that is not JSON: not its words
            self.counts["values"] += 1
            return self.placeholder(b"value", value)
        if content in _NAMED and (self.policy.hash_names or self.addresses is not None):
            return self._named(value, content)
        # protocol text: a version, an error map; names and the text mentioning them too without --hash-names
        # and --map-addresses
        return value

    def _named(self, text: bytes, content: Content | None) -> bytes:
        """Protocol text that holds names (NAME: is one, or a list; NAMES: JSON of "name" and "hostname"
        fields; MENTIONS: may name them): its addresses mapped under --map-addresses, then its names hashed
        under --hash-names, and the words of the names and host names hashed so far replaced."""
        text = self.addresses_in(text)
        if content is Content.NAMES:
            return self.json_names(text)
        if content is Content.NAME and self.policy.hash_names:
            return self.name(text)
        return self.mentions(text)

    def _frame_infos(self, msg: Message, out: bytearray, every: bool = False, names: bool = True) -> None:
        """A message's frame infos: data that is not the protocol's own (``frameinfo.protocol_data``: an
        undeclared id, a length its id does not take, free text; of all, ``every``), and bytes that frame no
        element, replaced; the user a request impersonates hashed under --hash-names (a name,
        kept otherwise)."""
        response = msg.is_response
        parsed_end = HEADER_LENGTH
        for info in msg.frame_infos:
            start = info.offset + info.length - len(info.data)  # the data ends the element
            parsed_end = info.offset + info.length
            if every or not frameinfo.protocol_data(info, response, names=names):
                out[start:parsed_end] = self.placeholder(b"value", info.data)
            elif info.id == IMPERSONATE_USER and not response and self.policy.hash_names:
                out[start:parsed_end] = self.name(info.data)
        if parsed_end < msg.extras_offset:  # an element that runs past the framing extras: not read
            out[parsed_end:msg.extras_offset] = self.placeholder(b"value", msg.raw[parsed_end:msg.extras_offset])

    def _before_key(self, msg: Message, out: bytearray, *, odd_extras: bool, names: bool,
                    every: bool = False) -> None:
        """The frame infos and extras of ``out`` (the message's bytes), as :meth:`message` redacts them: the
        protocol's numbers kept, data and names replaced (every frame info's data: ``every``)."""
        raw, key_at = msg.raw, msg.key_offset
        if msg.framing_extras_length:
            self._frame_infos(msg, out, every=every, names=names)
        variant = msg.variant
        layout = variant.layout if variant is not None else None
        if odd_extras:  # extras no row declares at this length (an unknown opcode's, a malformed one's): nothing
            # says they are the protocol's numbers
            extras_at = msg.extras_offset
            out[extras_at:key_at] = self.placeholder(b"value", raw[extras_at:key_at])
        elif layout is not None and msg.extras_length == layout.size:
            for name in DATA_EXTRAS:
                if name in layout.names:
                    self.counts["values"] += 1
                    at = msg.extras_offset + layout.offset(name)
                    stop = at + layout.field(name).size
                    out[at:stop] = self.placeholder(b"value", raw[at:stop])

    def _cut_short(self, msg: Message, *, names: bool, trusted: bool = True) -> bytes:
        """A message the capture ended inside: its value cannot be read whole, so it is zeroed; its frame infos
        (when all there), its extras (the numbers a declared row reads, as far as they go) and its key (when
        whole) are redacted as a whole message's, so that its seqnos, flags and times stay (zeroed, they read as
        a by_seqno 0 going backwards, a diagnosis the capture never held) and its key has its placeholder and
        collection (a part of a key has none: zeroed). Not ``trusted`` (:meth:`untrusted`): every frame info's
        data is replaced too, and the key as a document key."""
        self.counts["truncated"] += 1
        raw = msg.raw
        if len(raw) <= HEADER_LENGTH:
            return raw
        out = bytearray(raw[:HEADER_LENGTH]) + bytes(len(raw) - HEADER_LENGTH)
        # where the header puts them (a cut message's own offsets stop at its end)
        key_at = HEADER_LENGTH + msg.framing_extras_length + msg.extras_length
        value_at = key_at + msg.key_length
        variant = msg.variant
        layout = variant.layout if variant is not None else None
        declared = _row_reads_extras(msg) and not any(d.name == "lengths_exceed_body" for d in msg.diagnostics)
        extras_at = HEADER_LENGTH + msg.framing_extras_length
        if len(raw) < extras_at or not declared:  # frame infos cut, or extras no row reads as numbers: zeroed too
            return bytes(out)
        out[HEADER_LENGTH:key_at] = raw[HEADER_LENGTH:key_at]
        if len(raw) >= key_at:
            self._before_key(msg, out, odd_extras=False, names=names, every=not trusted)
            return self._cut_key(msg, out, key_at, value_at, trusted=trusted)
        if msg.framing_extras_length:
            self._frame_infos(msg, out, every=not trusted, names=names)
        for name in DATA_EXTRAS:  # a document's number, cut: zeroed
            if layout is not None and name in layout.names:
                at = extras_at + layout.offset(name)
                stop = min(at + layout.field(name).size, len(out))
                out[at:stop] = bytes(max(0, stop - at))
        return bytes(out)

    def _cut_key(self, msg: Message, out: bytearray, key_at: int, value_at: int, *, trusted: bool) -> bytes:
        """A cut message's key replaced when it is whole (else left zeroed)."""
        variant = msg.variant
        if key_at < value_at <= len(msg.raw):
            row = variant if trusted else None
            key = self._key(msg, row.key if row is not None else None, row.key_content if row is not None else None)
            if len(key) == value_at - key_at:  # else an address in it mapped to other text: zeroed, as a part
                out[key_at:value_at] = key
        return bytes(out)

    def untrusted(self, msg: Message) -> bytes:
        """A message found after skipped bytes (a capture begun inside a connection, a gap): it may be a
        document's bytes that look like a message, so only its header and extras (numbers) stay. Its frame
        infos' data, key and value are replaced whatever its row says, at their lengths (a document key as
        everywhere, so it still matches; a document's value emptied under --values drop)."""
        raw = msg.raw
        if len(raw) < HEADER_LENGTH + msg.total_body_length:
            return self._cut_short(msg, names=True, trusted=False)
        self.counts["untrusted"] += 1
        key_at, value_at, end = msg.key_offset, msg.value_offset, msg.body_end
        out = bytearray(raw)
        self._frame_infos(msg, out, every=True)
        variant = msg.variant
        if _odd_extras(msg):  # extras no row reads as numbers at this length: a document's bytes, maybe
            out[msg.extras_offset:key_at] = self.placeholder(b"value", raw[msg.extras_offset:key_at])
        if value_at > key_at:
            if variant is not None and variant.key is KeyKind.DOCUMENT:
                out[key_at:value_at] = self._key(msg, KeyKind.DOCUMENT, None)
            else:
                self.counts["keys"] += 1
                out[key_at:value_at] = self.placeholder(b"key", raw[key_at:value_at])
        out[end:] = bytes(len(raw) - end)
        if end > value_at:
            value = raw[value_at:end]
            if self.policy.drop_values and variant is not None and variant.value is ValueKind.DOCUMENT:
                out[value_at:end] = self.document_value(value, msg.datatype,
                                                        variant.value_presence is Presence.REQUIRED)
            else:
                self.counts["values"] += 1
                out[value_at:end] = self.placeholder(b"value", value)
        return bytes(out) if len(out) == len(raw) else _with_body_length(out)

    def distrusted(self, msg: Message) -> bytes:
        """A message of a direction whose framer skipped bytes before it (after the first, :meth:`untrusted`):
        from a skip on, a header may be a document's bytes framed as a message, whose length swallows the real
        messages after it, and whose row would keep them as the protocol's words (an error body, a stat). So
        only a message whose key and value are a document's (or absent) is redacted by its row; any other as
        untrusted, its text replaced."""
        variant = msg.variant
        if (variant is not None and not msg.diagnostics and variant.key in _DOCUMENT_KEYS
                and variant.value in _DOCUMENT_VALUES and variant.name not in ERROR_ROWS):
            return self.message(msg, names=False)
        return self.untrusted(msg)

    def stat_dump(self, msg: Message) -> bytes:
        """A STAT answer whose group may print documents (``_hash-dump``: keys and the first bytes of values)
        or is not known (its request not seen): its value replaced whole, its stat name as usual."""
        out = bytearray(self.message(msg))
        value_at, end = msg.value_offset, msg.body_end
        if end > value_at and len(out) == len(msg.raw):
            self.counts["values"] += 1
            out[value_at:end] = self.placeholder(b"value", msg.raw[value_at:end])
        return bytes(out)

    def plain_item(self, msg: Message) -> bytes:
        """A plain stream item (the message a compiled plain reader, ``protocol.reader``, gave: a document
        key, after a one-byte collection id when collections are on; a raw or JSON value that parses, no snappy,
        no xattrs) as :meth:`message` redacts it, through the same :meth:`document_key` and
        :meth:`document_value` without the general path's checks. A test holds it to :meth:`message` on every
        plain item of the suite's captures."""
        data, key_at, value_at, datatype = msg.raw, msg.key_offset, msg.value_offset, msg.header[4]
        out = bytearray(data)
        if value_at > key_at:
            out[key_at:value_at] = self.document_key(data[key_at:value_at], int(msg.collection_id is not None))
        if len(data) > value_at:
            variant = msg.variant
            assert variant is not None  # a plain item's plan has its row
            out[value_at:] = self.document_value(data[value_at:], datatype,
                                                 variant.value_presence is Presence.REQUIRED,
                                                 parsed=bool(datatype & DATATYPE_JSON))
        return bytes(out) if len(out) == len(data) else _with_body_length(out)

    def message(self, msg: Message, *, names: bool = True) -> bytes:
        """The message's bytes with its keys, values and secrets replaced: the same length and header, unless
        a snappy value compressed again or a dropped value changed its total body length. ``names`` false:
        the names frame infos carry (a user, a privilege) are replaced too."""
        raw = msg.raw
        if len(raw) < HEADER_LENGTH or len(raw) < HEADER_LENGTH + msg.total_body_length:
            return self._cut_short(msg, names=names)
        key_at, value_at, end = msg.key_offset, msg.value_offset, msg.body_end
        variant = msg.variant
        odd_extras = _odd_extras(msg)
        if key_at == end == len(raw) and not msg.framing_extras_length and not odd_extras:
            return raw  # no key, no value (an ack, a noop): nothing to replace
        out = bytearray(raw)
        self._before_key(msg, out, odd_extras=odd_extras, names=names)
        shift = 0  # how far a key of another length moved the value
        if value_at > key_at:
            key = self._key(msg, variant.key if variant is not None else None,
                            variant.key_content if variant is not None else None)
            if len(key) != value_at - key_at:  # an address in it mapped to longer or shorter text
                key = _with_key_length(out, key, value_at - key_at)
                shift = len(key) - (value_at - key_at)
            out[key_at:value_at] = key
        tail = len(raw) - end  # bytes past the declared body (never in a framed stream): not the protocol's
        if end > value_at:
            out[value_at + shift:end + shift] = self._value(msg, variant)
        if tail:
            out[len(out) - tail:] = bytes(tail)
        return bytes(out) if len(out) == len(raw) else _with_body_length(out)


def _row_reads_extras(msg: Message) -> bool:
    """Whether the extras its header gives (none included) are the numbers its row declares at that length."""
    variant = msg.variant
    layout = variant.layout if variant is not None else None
    return (layout.size if layout is not None else 0) == msg.extras_length and not any(
        d.name == "extras_length_mismatch" for d in msg.diagnostics)


def _odd_extras(msg: Message) -> bool:
    """Whether a whole message has extras that no row of its opcode declares at their length, or that its row
    reads at a length its header does not give (the UPR draft's stream messages: then they are the header's
    key and value), some of them in the body: the bytes before its key are then not known numbers."""
    return msg.key_offset > msg.extras_offset and not _row_reads_extras(msg)


def _parses(value: bytes) -> bool:
    try:
        orjson.loads(value)
    except ValueError:
        return False
    return True


def _escaped(data: bytes, quote: int) -> bool:
    """Whether the quote at ``quote`` is escaped: an odd run of backslashes before it."""
    before = quote - 1
    while data[before] == _BACKSLASH:
        before -= 1
    return (quote - 1 - before) % 2 == 1


def least_value(datatype: int) -> bytes:
    """The shortest document value a message that must have one can carry under its datatype: ``0`` (JSON, and
    one byte of anything else), an empty xattr section before it, snappy around it."""
    value = (b"\x00\x00\x00\x00" if datatype & DATATYPE_XATTR else b"") + b"0"
    return snappy_compress(value) if datatype & DATATYPE_SNAPPY else value


def _with_key_length(packet: bytearray, key: bytes, was: int) -> bytes:
    """``key`` (of another length than the ``was`` bytes it replaces) with the header's key length made true;
    a key too long for the field becomes zeros of the old length (nothing of it kept, the lengths still true)."""
    return key if set_key_length(packet, len(key)) else bytes(was)


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
        self.skipped = False  # bytes were skipped: the next message is not trusted (Redactor.untrusted)
        self.distrust = False  # bytes were skipped before: later messages neither (Redactor.distrusted)

    def feed(self, data: bytes, options: DecodeOptions) -> bytes:
        self.framer.feed(data)
        out = bytearray()
        for event in self.framer.events():
            if isinstance(event, Skipped):
                out += bytes(event.length)
                self.skipped = self.distrust = True
                continue
            msg = decode(event.data, event.offset, options)
            if self.skipped:
                # the first header after a skip that does not decode cleanly: a document's bytes, zeroed (as a
                # capture's are, sources/redaction.py)
                out += bytes(len(event.data)) if msg.variant is None or msg.diagnostics \
                    else self.redactor.untrusted(msg)
            else:
                out += self.redactor.distrusted(msg) if self.distrust else self.redactor.message(msg)
            self.skipped = False
        return bytes(out)

    def finish(self, options: DecodeOptions) -> bytes:
        """What is left at the end: a message cut short keeps its header only."""
        offset, tail = self.framer.remainder()
        return self.redactor.message(decode(tail, offset, options)) if len(tail) >= HEADER_LENGTH else bytes(len(tail))

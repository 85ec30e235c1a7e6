"""Decoding one framed packet into a :class:`Message`: read, checked, returned as typed views.

Theory of operation. ``decode`` does the cheap, always-needed work: the 24-byte header (one ``struct``
unpack), the registry lookup (cached per header shape), frame infos, and the extras through the variant's
fixed layout, which is derived from its construct declaration. Then the key and value checks (LEB128
collection id, snappy, xattrs, JSON, value grammars, secrets, a stream request's value), one check pass run
before ``decode`` returns: every diagnostic of the packet is found by then, in one fixed order (header, frame
infos, extras, key, value; what a source adds from the packet's context comes after them, in
``dcp.observed``), and nothing a reader asks later finds more. Nothing changes a message afterwards but the
views' own first-use caches. The pass keeps what it read as the key and value views
(:attr:`Message.collection_id`, :attr:`Message.document_key`, :attr:`Message.value_reading`,
:attr:`Message.document`, :attr:`Message.xattrs`, :attr:`Message.grammar_reading`...): the inflated document,
the xattr pairs and the body after them, the path's length, the parsed GRAMMAR value and the bytes it took,
so whoever shows the message computes none of it again. (:func:`decode` reads a packet through the reader
compiled for its header shape, ``reader``, which runs this same pass, and reads the plain stream items that
are most of a capture inline, checking their JSON anyway: an eager pass costs a filter on ``opcode`` or
``by_seqno`` nothing there.)

Nothing here builds the JSON record: ``dcpctl.render.record`` turns a message and its context into the
documented object (``tests/test_no_rendering_below.py`` keeps it so). Code that acts on a message reads it
typed (``status``, :meth:`Message.field`, :attr:`Message.value_fields`, :attr:`Message.stream_request_value`).
Nothing here raises on bad input: every departure from the declared layout becomes a named
:class:`Diagnostic` and the bytes are kept, so encode can give them back exactly.

Two framing modes exist. From a byte stream the framer hands over exactly ``24 + total_body_length`` bytes.
A single packet given on its own (a hexdump, a document's diagram) may disagree with its own length fields;
then ``lenient`` decoding takes the bytes present as the body and says so in a diagnostic.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

import orjson
from construct import Container, FormatField, ListContainer, Struct

from dcpctl.protocol import frameinfo, walk
from dcpctl.protocol import stream_request_value as srv
from dcpctl.protocol.codegen import compiled
from dcpctl.protocol.constants import (
    ALT_MAGICS,
    DATATYPE_JSON,
    DATATYPE_SNAPPY,
    DATATYPE_XATTR,
    MAGIC_CLASS,
    MAGICS,
    RESPONSE_MAGICS,
    STATUSES,
    Magic,
    Opcode,
)
from dcpctl.protocol.diagnostic import Diagnostic, diagnostic
from dcpctl.protocol.flat import FlatError
from dcpctl.protocol.grammar import HEADER_LENGTH
from dcpctl.protocol.registry import (
    CHANGE_OPCODES,
    DATATYPE_VALUE_KINDS,
    DCP,
    DIALECTS,
    DOCUMENT_ITEM_OPCODES,
    HEADER_LAYOUT,
    Dialect,
    KeyKind,
    MessageSpec,
    Presence,
    ValueKind,
    Variant,
    fixed_layout,
)
from dcpctl.protocol.value import (
    Leb128Error,
    Xattr,
    as_text,
    leb128_decode,
    parse_xattrs,
    snappy_decompress,
)

# Enum members as module constants: attribute access on an Enum class is slow on the per-message path.
_VALUE_AUTO: Final = ValueKind.AUTO
_VALUE_DOCUMENT: Final = ValueKind.DOCUMENT
_SNAPPY_OR_XATTR: Final = DATATYPE_SNAPPY | DATATYPE_XATTR
_VALUE_GRAMMAR: Final = ValueKind.GRAMMAR
_VALUE_JSON: Final = ValueKind.JSON
_VALUE_RAW: Final = ValueKind.RAW
_VALUE_SECRET: Final = ValueKind.SECRET
_VALUE_STREAM_REQUEST_JSON: Final = ValueKind.STREAM_REQUEST_JSON
_KEY_DOCUMENT: Final = KeyKind.DOCUMENT

HEADER: Final = HEADER_LAYOUT.codec
# Datatypes a deletion may carry (reference 3.10, valid_dcp_delete_datatype).
DELETION_DATATYPES: Final = frozenset({0, 2, 4, 6, 5, 7})
# Plain ints: the per-message path compares with them (an enum class's attribute is slow to look up).
_REQUEST: Final = int(Magic.CLIENT_REQUEST)
_DELETION: Final = int(Opcode.DCP_DELETION)
FLAG_FIELDS: Final = frozenset({"flags", "snapshot_flags", "oso_flags"})


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    """How to read packets: the dialect, negotiated state known from outside, secrecy."""

    dialect: Dialect = DCP
    collections: bool | None = None  # None: not known (the key prefix is not split)
    show_secrets: bool = False
    lenient: bool = False  # a standalone packet: the bytes present are the body


DEFAULT_OPTIONS: Final = DecodeOptions()


class ValueReading(IntEnum):
    """How the check pass read a value, so a renderer knows which views describe it."""

    NONE = 0  # no value
    TEXT = 1  # the value as it is (text, or hex when it is not text)
    HEX = 2  # the value as hex: a GRAMMAR value that does not fit its declaration
    DOCUMENT = 3  # document, document_text, inflated, xattrs (plain_document when neither of the last two)
    BAD_SNAPPY = 4  # a snappy value that does not inflate: kept raw
    PATH = 5  # path_length bytes of path, then the value
    FIELDS = 6  # grammar_reading: the declared fields, maybe trailing bytes
    SECRET = 7  # hidden: only its length is shown


# Module constants: the per-message path reads no enum class attributes.
_READ_TEXT: Final = ValueReading.TEXT
_READ_DOCUMENT: Final = ValueReading.DOCUMENT


# What a message holds when its reader read nothing into it: every slot but the eight each reader sets (raw,
# offset, options, header, key_length, key_offset, value_offset, body_end). One table for the interpreted
# decoder's blank message (_blank) and the compiled readers' generated code.
MESSAGE_DEFAULTS: Final[dict[str, Any]] = {
    "_found": (), "_value_fields": None, "_plain_document": None, "_collection_id": None, "_key_start": -1,
    "_reading": ValueReading.NONE, "_document": b"", "_document_text": None, "_text_found": False,
    "_inflated": False, "_xattrs": None, "_path_length": -1, "_grammar": None, "_fields": None, "_consumed": 0,
    "frame_infos": (), "plan": None, "framing_extras_length": 0, "_extras": None, "_extras_values": None,
    "_partial_extras": False,
}


class Message:
    """One decoded packet; ``raw`` holds its exact bytes and ``offset`` where they started. Made by
    :func:`decode` only; nothing changes it afterwards but its views' first-use caches."""

    # Slots: a fixed record, every slot set when it is made, and nothing can be added beside them (context
    # lives in dcp.observed).
    __slots__ = ("body_end", "header", "key_length", "key_offset", "offset", "options", "raw", "value_offset",
                 *MESSAGE_DEFAULTS)
    raw: bytes
    offset: int
    options: DecodeOptions
    header: tuple[int, ...]
    key_length: int
    key_offset: int
    value_offset: int
    body_end: int
    # Diagnostics in one fixed order: what decode found (header, frame infos, extras, then the key and value
    # checks).
    _found: list[Diagnostic] | tuple[()]
    _value_fields: Any  # the GRAMMAR value parsed by its declaration: by the check pass, else once asked
    # What the check pass keeps for whoever shows the key and value (read through the views below).
    _plain_document: tuple[int | None, bytes, str | None, bytes] | None  # the views in one, once asked
    _collection_id: int | None
    _key_start: int  # where the key after its collection id starts (-1: where the key starts)
    _reading: ValueReading
    _document: bytes  # a DOCUMENT's body: inflated, after its xattrs
    _document_text: str | None  # that body as text (None: it is shown as hex), once found
    _text_found: bool  # (found when first shown: a check needs it only for JSON that does not parse)
    _inflated: bool
    _xattrs: list[Xattr] | None
    _path_length: int
    _grammar: Any  # FIELDS: the declaration the value was read with, what it read, its bytes
    _fields: Any
    _consumed: int
    frame_infos: list[frameinfo.FrameInfo] | tuple[()]
    plan: _Plan | None  # the registry row and layout this header shape resolved to
    framing_extras_length: int
    _extras: dict[str, int] | None
    _extras_values: tuple[int, ...] | None
    _partial_extras: bool  # extras cut short: the record keeps them raw as well

    # --- header views ---------------------------------------------------------------------------
    # ``header`` is the 24-byte header as one unpacked tuple; these name its fields.
    @property
    def magic(self) -> int:
        return int(self.header[0])

    @property
    def opcode(self) -> int:
        return int(self.header[1])

    @property
    def extras_length(self) -> int:
        return int(self.header[3])

    @property
    def datatype(self) -> int:
        return int(self.header[4])

    @property
    def vbucket_or_status(self) -> int:
        return int(self.header[5])

    @property
    def total_body_length(self) -> int:
        return int(self.header[6])

    @property
    def opaque(self) -> int:
        return int(self.header[7])

    @property
    def cas(self) -> int:
        return int(self.header[8])

    @property
    def spec(self) -> MessageSpec | None:
        return self.plan.spec if self.plan is not None else None

    @property
    def variant(self) -> Variant | None:
        return self.plan.variant if self.plan is not None else None

    @property
    def extras_offset(self) -> int:
        return HEADER_LENGTH + self.framing_extras_length

    @property
    def extras(self) -> dict[str, int] | None:
        """Extras fields by name (built on first use from the unpacked tuple)."""
        if self._extras is None and self._extras_values is not None:
            assert self.plan is not None
            self._extras = dict(zip(self.plan.names, self._extras_values, strict=True))
        return self._extras

    @property
    def by_seqno(self) -> int | None:
        """The extras' by_seqno, when the layout has one (without building the extras dict)."""
        values = self._extras_values
        if values is not None:
            at = self.plan.seqno_at  # type: ignore[union-attr]
            return values[at] if at >= 0 else None
        extras = self._extras
        return extras.get("by_seqno") if extras else None

    @property
    def is_response(self) -> bool:
        return self.magic in RESPONSE_MAGICS

    @property
    def has_status(self) -> bool:
        return self.is_response and (self.spec is None or self.spec.has_status)

    @property
    def vbucket(self) -> int | None:
        return None if self.has_status else self.vbucket_or_status

    @property
    def status(self) -> int | None:
        return self.vbucket_or_status if self.has_status else None

    @property
    def status_name(self) -> str | None:
        """The status as the record names it (the kv_engine name, or ``0x....``), None on a request."""
        status = self.status
        return None if status is None else STATUSES.name_of.get(status) or STATUSES.name(status, 4)

    @property
    def value_fields(self) -> Any:
        """The GRAMMAR value parsed by its declaration (once): a construct ``Container`` named as the grammar
        names its fields (``.failover_log[0].vbucket_uuid``, ``.vbucket_seqnos``, ``.features``,
        ``.error_map_version``, ``.rollback_seqno``...). None when the variant's value is not a GRAMMAR
        value or does not fit its layout (the record then shows it raw, with a diagnostic)."""
        if self._value_fields is None:
            variant = self.variant
            if variant is None or variant.value is not _VALUE_GRAMMAR:
                return None
            self._value_fields = _parse_grammar_value(self, variant)[1]
        return self._value_fields or None

    def field(self, name: str) -> Any:
        """A field by its declared name wherever the variant puts it, the extras or the GRAMMAR value (a
        rollback's ``rollback_seqno``, a marker's ``snap_start_seqno``); None when it has none."""
        extras = self.extras
        if extras is not None and name in extras:
            return extras[name]
        fields = self.value_fields
        return fields[name] if fields is not None and name in fields else None

    @property
    def hello_features(self) -> list[int]:
        """A HELLO's feature codes (compare with :class:`~dcpctl.protocol.constants.HelloFeature`)."""
        return [int(code) for code in self.field("features") or ()]

    @property
    def stream_request_value(self) -> srv.StreamRequestValue | None:
        """A stream request's JSON value as the server reads it; None without one, or when it is not an
        object (see :func:`~dcpctl.protocol.stream_request_value.parse`)."""
        variant = self.variant
        if variant is None or variant.value is not _VALUE_STREAM_REQUEST_JSON or not self.body_end > self.value_offset:
            return None
        return srv.parse(self.value)

    @property
    def opcode_name(self) -> str:
        spec = self.spec
        return spec.name if spec is not None else self.options.dialect.opcode_name(MAGIC_CLASS.get(self.magic),
                                                                                   self.opcode)

    @property
    def key(self) -> bytes:
        return self.raw[self.key_offset:self.value_offset]

    @property
    def value(self) -> bytes:
        return self.raw[self.value_offset:self.body_end]

    @property
    def stream_id(self) -> int | None:
        if self.is_response:
            return None
        for info in self.frame_infos:
            if info.id == frameinfo.DCP_STREAM_ID and len(info.data) == 2:
                return int.from_bytes(info.data, "big")
        return None

    def add(self, name: str, message: str, offset: int | None = None, length: int = 0) -> None:
        self.extend([diagnostic(name, message, offset, length)])

    def extend(self, diagnostics: list[Diagnostic]) -> None:
        """Diagnostics of the packet itself (decode's and the key and value checks'), in the order found."""
        if diagnostics:
            if isinstance(self._found, tuple):
                self._found = []
            self._found.extend(diagnostics)

    @property
    def diagnostics(self) -> list[Diagnostic] | tuple[()]:
        """Every diagnostic of the packet, in one order: header, frame infos, extras, key, value (all found by
        :func:`decode`)."""
        return self._found

    def _check(self) -> None:
        """The key and value checks, run once by :func:`decode`: their diagnostics go after the header's and
        the extras', and what they read is kept for the views below (the collection id, the inflated
        document, its xattrs, a path's length, a GRAMMAR value's reading), so whoever shows the message
        computes none of it again."""
        plan = self.plan
        variant = plan.variant if plan is not None else None
        if variant is None:
            _check_value(self, None)
            return
        # the key, then the value; a stream's items (a DOCUMENT value) in this one frame, as there are millions
        key_offset, value_offset = self.key_offset, self.value_offset
        if variant.key is _KEY_DOCUMENT and key_offset != value_offset and self.options.collections:
            prefix = leb128_decode(self.raw, key_offset, value_offset)
            if prefix is None:
                self.add("bad_leb128", "key does not start with a valid LEB128 collection id", key_offset,
                         min(value_offset - key_offset, 5))
            else:
                self._collection_id = prefix[0]
                self._key_start = key_offset + prefix[1]
        if variant.value is not _VALUE_DOCUMENT:
            _check_value(self, variant)
        elif value_offset < self.body_end:
            spec = plan.spec  # type: ignore[union-attr]  # (a variant comes with its plan)
            _check_document(self, self.raw[value_offset:self.body_end],
                            self.header[4] if spec is None or spec.type_field == "datatype" else 0)
        else:
            self._reading = _READ_DOCUMENT

    # --- the key and value as the check pass read them ----------------------------------------------
    @property
    def plain_document(self) -> tuple[int | None, bytes, str | None, bytes] | None:
        """(:attr:`collection_id`, :attr:`document_key`, :attr:`document_text`, :attr:`document`) in one look,
        when the value reads as a DOCUMENT neither inflated nor with xattrs (what a stream's items mostly
        are: the record's per-item path); None otherwise."""
        found = self._plain_document
        if found is not None:
            return found
        if self._reading is not _READ_DOCUMENT or self._inflated or self._xattrs is not None:
            return None
        start = self._key_start
        found = self._plain_document = (self._collection_id,
                                        self.raw[self.key_offset if start < 0 else start:self.value_offset],
                                        self.document_text, self._document)
        return found

    @property
    def collection_id(self) -> int | None:
        """The key's collection id (collections negotiated, a document key), None without one."""
        return self._collection_id

    @property
    def document_key(self) -> bytes:
        """The key after its collection id (the whole key when it has none)."""
        start = self._key_start
        return self.raw[self.key_offset if start < 0 else start:self.value_offset]

    @property
    def value_reading(self) -> ValueReading:
        """How the value reads (which of the views below describe it)."""
        return self._reading

    @property
    def document(self) -> bytes:
        """A DOCUMENT value's body: inflated when it was snappy, after its xattrs."""
        return self._document

    @property
    def document_text(self) -> str | None:
        """:attr:`document` as text, None when it is not UTF-8 without control characters (or the value
        does not read as a DOCUMENT)."""
        if not self._text_found and self._reading is _READ_DOCUMENT:
            self._document_text = as_text(self._document)
            self._text_found = True
        return self._document_text

    @property
    def inflated(self) -> bool:
        """The DOCUMENT value was snappy and inflated."""
        return self._inflated

    @property
    def xattrs(self) -> list[Xattr] | None:
        """A DOCUMENT value's xattr pairs, None without xattrs or when the blob is bad."""
        return self._xattrs

    @property
    def path_length(self) -> int:
        """PATH: how many of the value's bytes are the path (the rest is the value)."""
        return self._path_length

    @property
    def grammar_reading(self) -> tuple[Any, Any, int]:
        """FIELDS: (the declaration the value was read with, what it read, how many value bytes that is)."""
        return self._grammar, self._fields, self._consumed

    @property
    def extras_values(self) -> tuple[int, ...] | None:
        """The extras as the declared layout's tuple (in its field order), None when not read that way."""
        return self._extras_values

    @property
    def partial_extras(self) -> bool:
        """The extras were cut short: :attr:`extras` holds the fields that fit."""
        return self._partial_extras


def _cond(name: str, magic: int, extlen: int, word: int, type_byte: int, byte0: int, has_value: int,
          spec: MessageSpec) -> int | None:
    if name == "extras_length":
        return extlen
    if name == "status":
        return word if magic in RESPONSE_MAGICS and spec.has_status else None
    if name == spec.type_field:
        return type_byte
    if name == "extras_byte0":
        return byte0
    if name == "has_value":
        return has_value
    return None


def select_variant(spec: MessageSpec, magic: int, extlen: int, word: int, type_byte: int, byte0: int,
                   has_value: int) -> Variant | None:
    """The first variant row whose conditions hold (shared by decode and encode)."""
    for variant in spec.variants:
        for name, wanted in variant.when:
            got = _cond(name, magic, extlen, word, type_byte, byte0, has_value, spec)
            if got is None or (got not in wanted if isinstance(wanted, tuple) else got != wanted):
                break
        else:
            return variant
    return None


@dataclass(frozen=True, slots=True)
class _Plan:
    """What decoding needs to know about one header shape, computed once (the hot path's table)."""

    spec: MessageSpec | None
    variant: Variant | None
    extras_size: int  # bytes the extras occupy (the documented layout's size when there is one)
    unpack: Any  # the layout's struct.Struct.unpack_from, or None
    names: tuple[str, ...]
    # stateless rules, decided once per shape: key/value presence, datatype, nmeta, by_seqno, flags
    key_rule: Presence
    value_rule: Presence
    check_datatype: bool
    nmeta_index: int  # position of nmeta in the extras tuple, or -1
    by_seqno_index: int
    flag_checks: tuple[tuple[str, int], ...]  # (field, mask of defined bits)
    simple: bool  # declared layout, size equal to the header's extras length, no note
    item_checks: bool  # nmeta, by_seqno or flags to check
    # (magic name, opcode name) when this shape is a stream item's: a request with the plain magic, a
    # datatype byte, a declared layout and a document value (what item_key and the plain readers read)
    item_names: tuple[str, str] | None = None
    seqno_at: int = -1  # position of by_seqno in the extras tuple, whatever the opcode, or -1
    rev_seqno_at: int = -1  # position of rev_seqno in the extras tuple, or -1


_PLANS: dict[tuple[str, int, int, int, int, int, int, int], _Plan] = {}
_PLAN_LIMIT: Final = 4096  # distinct header shapes kept; more only means recomputing


def _plan(dialect: Dialect, magic: int, opcode: int, extlen: int, word: int, type_byte: int, byte0: int,
          has_value: int) -> _Plan:
    key = (dialect.name, magic, opcode, extlen, word, type_byte, byte0, has_value)
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    magic_class = MAGIC_CLASS.get(magic)
    spec = dialect.spec(magic_class, opcode) if magic_class is not None else None
    variant = select_variant(spec, magic, extlen, word, type_byte, byte0, has_value) if spec else None
    layout = variant.layout if variant else None
    names = layout.names if layout else ()
    flag_checks = []
    if variant is not None:
        for name, vocab in variant.vocabularies.items():
            if name in FLAG_FIELDS and name in names:
                mask = 0
                for code in vocab.name_of:
                    mask |= code
                flag_checks.append((name, mask))
    document = variant is not None and magic not in RESPONSE_MAGICS and opcode in \
        DOCUMENT_ITEM_OPCODES and spec is not None and spec.type_field == "datatype"
    plan = _Plan(spec, variant, layout.size if layout else (0 if variant else extlen),
                 layout.codec.unpack_from if layout else None, names,
                 variant.key_presence if variant else Presence.OPTIONAL,
                 variant.value_presence if variant else Presence.OPTIONAL,
                 spec is not None and spec.type_field == "datatype",
                 names.index("nmeta") if "nmeta" in names else -1,
                 names.index("by_seqno") if document and "by_seqno" in names else -1,
                 tuple(flag_checks),
                 layout is not None and variant is not None and variant.note is None and layout.size == extlen,
                 bool(flag_checks) or "nmeta" in names or (document and "by_seqno" in names))
    if "by_seqno" in names:
        plan = dataclasses.replace(plan, seqno_at=names.index("by_seqno"))
    if "rev_seqno" in names:
        plan = dataclasses.replace(plan, rev_seqno_at=names.index("rev_seqno"))
    if plan.simple and spec is not None and variant is not None and magic not in RESPONSE_MAGICS \
            and magic not in ALT_MAGICS and spec.type_field == "datatype" and variant.value is _VALUE_DOCUMENT:
        plan = dataclasses.replace(plan, item_names=(MAGICS.name_of.get(magic) or MAGICS.name(magic), spec.name))
    if len(_PLANS) < _PLAN_LIMIT:
        _PLANS[key] = plan
    return plan


def _blank_maker() -> Callable[[], Message]:
    """The blank message: every slot of MESSAGE_DEFAULTS set, in one generated function."""
    names = {f"d{at}": value for at, value in enumerate(MESSAGE_DEFAULTS.values())}
    lines = ["def blank():", "    msg = new(Message)",
             *(f"    msg.{name} = d{at}" for at, name in enumerate(MESSAGE_DEFAULTS)), "    return msg"]
    made: Callable[[], Message] = compiled(lines, "blank message", {"new": object.__new__, "Message": Message,
                                                                    **names}, "blank")
    return made


_blank: Final = _blank_maker()
_OPTIONAL: Final = Presence.OPTIONAL  # module constants: the hot path reads no enum attributes
_REQUIRED: Final = Presence.REQUIRED


# Where the header's fields are, from its declaration: the plan key is read from the bytes before any unpack.
_KEY_LENGTH_AT: Final = HEADER_LAYOUT.offset("key_length")
_EXTRAS_LENGTH_AT: Final = HEADER_LAYOUT.offset("extras_length")
_WORD_AT: Final = HEADER_LAYOUT.offset("vbucket")
_TOTAL_AT: Final = HEADER_LAYOUT.offset("total_body_length")
_DATATYPE_AT: Final = HEADER_LAYOUT.offset("datatype")
# The plan key: (dialect, magic, opcode, extras length, status word, type byte, first extras byte, has value).
PlanKey = tuple[str, int, int, int, int, int, int, int]


def shape_key(raw: bytes, options: DecodeOptions) -> PlanKey:
    """The plan key of the packet ``raw`` (at least a header): what of its header can change its registry row.
    The status word of responses, the first extras byte of 1-byte extras, and in the UPR draft (whose rows
    are selected by them) the type byte and whether a value is there. Requests' vbuckets and datatypes would
    otherwise multiply the shapes. An unknown magic resolves to a plan without a spec."""
    magic, opcode, extlen, n = raw[0], raw[1], raw[_EXTRAS_LENGTH_AT], len(raw)
    fe = raw[_KEY_LENGTH_AT] if magic in ALT_MAGICS else 0
    word = int.from_bytes(raw[_WORD_AT:_WORD_AT + 2], "big") if magic in RESPONSE_MAGICS else 0
    pos = HEADER_LENGTH + fe
    byte0 = raw[pos] if extlen == 1 and pos < n else -1
    dialect = options.dialect
    if not dialect.layout_authoritative:
        return (dialect.name, magic, opcode, extlen, word, 0, byte0, 0)
    keylen = raw[_KEY_LENGTH_AT + 1] if magic in ALT_MAGICS else \
        int.from_bytes(raw[_KEY_LENGTH_AT:_KEY_LENGTH_AT + 2], "big")
    total = int.from_bytes(raw[_TOTAL_AT:_TOTAL_AT + 4], "big")
    body_end = n if options.lenient or n < HEADER_LENGTH + total else HEADER_LENGTH + total
    has_value = 1 if total - fe - extlen - keylen > 0 or (options.lenient and body_end > pos + extlen + keylen) \
        else 0
    return (dialect.name, magic, opcode, extlen, word, raw[_DATATYPE_AT], byte0, has_value)


def plan_of(key: PlanKey) -> _Plan:
    """The plan of a header shape (:func:`shape_key`), made once."""
    return _PLANS.get(key) or _plan(DIALECTS[key[0]], *key[1:])


def decode(raw: bytes, offset: int = 0, options: DecodeOptions = DEFAULT_OPTIONS) -> Message:
    """Decode one packet (header and body), every check run; never raises.

    The packet is read by the function compiled for its header shape from this module's plan (``reader``),
    which returns the message :func:`interpret` would, or None when the header or the extras have something
    to say: those packets, any not exactly one packet long, and the first packet of a shape (its reader is
    compiled when the shape comes again) are interpreted."""
    if len(raw) >= HEADER_LENGTH:
        key = shape_key(raw, options)
        reader = _reader(key, options.collections)
        if reader is not None:
            msg: Message | None = reader(raw, 0, len(raw), offset, options)
            if msg is not None and msg.body_end == len(raw):  # (bytes after the packet: interpret says so)
                return msg
        return interpret(raw, offset, options, key)
    return interpret(raw, offset, options)


def _reader(key: PlanKey, collections: bool | None) -> Any:
    """The compiled reader of a header shape, or None (see :func:`decode`). ``reader`` builds on this module,
    so it is imported on first use; this name is then rebound to its lookup."""
    global _reader  # noqa: PLW0603  # rebound once, to the real lookup
    from dcpctl.protocol.reader import reader_of  # noqa: PLC0415  # it imports this module

    _reader = reader_of
    return reader_of(key, collections)


def interpret(raw: bytes, offset: int = 0, options: DecodeOptions = DEFAULT_OPTIONS,
              key: PlanKey | None = None) -> Message:
    """:func:`decode` by the declarations alone, every packet the general way (the compiled readers are
    held to it); ``key``: the packet's :func:`shape_key`, when known."""
    msg = _blank()
    msg.raw = raw
    msg.offset = offset
    msg.options = options
    n = len(raw)
    if n < HEADER_LENGTH:
        _header(msg, raw + bytes(HEADER_LENGTH - n))
        msg.add("truncated", f"packet has {n} byte{'s' if n != 1 else ''}, shorter than the 24-byte header", 0, n)
        msg.key_offset = msg.value_offset = msg.body_end = n
        msg._check()
        return msg
    magic, opcode, keylen, extlen, datatype, _, total, _, _ = msg.header = HEADER.unpack_from(raw)
    fe = 0
    if magic in ALT_MAGICS:
        fe = msg.framing_extras_length = keylen >> 8
        keylen &= 0xFF
    msg.key_length = keylen
    body_end = HEADER_LENGTH + total
    exact = body_end == n
    if not exact:
        _length_mismatch(msg, n, body_end)
        if options.lenient or n < body_end:
            body_end = n
    msg.body_end = body_end
    pos = HEADER_LENGTH
    if fe:
        msg.frame_infos, diags = frameinfo.parse(raw, pos, min(pos + fe, body_end), magic in RESPONSE_MAGICS)
        msg.extend(diags)
        if fe > total:  # (the key offset is then the body's end, so the key's check cannot see it)
            msg.add("lengths_exceed_body", f"framing extras length {fe} runs past the {total}-byte body", 2, 1)
        pos += fe
    if key is None:
        key = shape_key(raw, options)
    plan = plan_of(key)
    if not exact and options.lenient and plan.spec is not None:
        plan = _surplus_plan(msg, plan, key, n - HEADER_LENGTH - total)
    msg.plan = plan
    variant = plan.variant
    size = plan.extras_size
    if plan.simple and pos + size <= body_end:
        # the common case: a declared layout matching the header, nothing else to say about it
        values = msg._extras_values = plan.unpack(raw, pos)
        if plan.item_checks:
            nmeta, by_seqno = plan.nmeta_index, plan.by_seqno_index
            if (nmeta >= 0 and values[nmeta]) or (by_seqno >= 0 and not values[by_seqno]) or plan.flag_checks:
                _item_checks(msg, plan, values, pos)
    elif variant is None:
        _unplanned(msg, plan.spec, extlen)
    else:
        _extras(msg, plan, variant, raw, pos, body_end)
    key_offset = pos + size
    key_offset = min(key_offset, body_end)
    value_offset = key_offset + keylen
    cut_short = not exact and body_end < HEADER_LENGTH + total  # already said: truncated / mismatch
    if value_offset > body_end:
        if not cut_short:
            msg.add("lengths_exceed_body", f"key length {keylen} runs past the body", 2, 2)
        value_offset = body_end
    msg.key_offset = key_offset
    msg.value_offset = value_offset
    if variant is None or cut_short:
        msg._check()
        return msg
    rule = plan.key_rule
    if rule is not _OPTIONAL and (rule is _REQUIRED) != (value_offset > key_offset):
        _presence(msg, "key", rule, key_offset, value_offset - key_offset)
    rule = plan.value_rule
    if rule is not _OPTIONAL and (rule is _REQUIRED) != (body_end > value_offset):
        _presence(msg, "value", rule, value_offset, body_end - value_offset)
    if plan.check_datatype and datatype > 0x07:
        msg.add("invalid_datatype", f"datatype 0x{datatype:02x} has bits above 0x07", 5, 1)
    if opcode == _DELETION and plan.by_seqno_index >= 0 and datatype not in DELETION_DATATYPES:
        msg.add("invalid_deletion_datatype", f"datatype 0x{datatype:02x} is not allowed on a deletion",
                5, 1)
    msg._check()
    return msg


def _surplus_plan(msg: Message, plan: _Plan, key: tuple[Any, ...], surplus: int) -> _Plan:
    """A standalone packet with more bytes than its lengths say: if the extras length plus the surplus is
    a documented layout, the header's extras length is the error (seed 000's 48-byte stream request says
    0x28), so decode that layout; the mismatch becomes an extras_length_mismatch diagnostic."""
    if surplus <= 0:
        return plan
    dialect = msg.options.dialect
    other = _plan(dialect, key[1], key[2], key[3] + surplus, key[4], key[5], key[6], key[7])
    if other.variant is None or other.unpack is None:
        return plan
    return dataclasses.replace(other, simple=False)  # the header's length differs: the general path


def _item_checks(msg: Message, plan: _Plan, values: tuple[int, ...], pos: int) -> None:
    if plan.nmeta_index >= 0 and values[plan.nmeta_index]:
        msg.add("nmeta_not_zero", f"nmeta is {values[plan.nmeta_index]}; servers reject extended meta",
                pos + (plan.variant.layout.offset("nmeta") if plan.variant and plan.variant.layout else 0), 2)
    if plan.by_seqno_index >= 0 and not values[plan.by_seqno_index]:
        msg.add("by_seqno_zero", "by_seqno 0 is invalid", pos, 8)
    for name, mask in plan.flag_checks:
        flags = values[plan.names.index(name)]
        if flags & ~mask:
            msg.add("unknown_flags", f"{name} 0x{flags:x} has undefined bits 0x{flags & ~mask:x}", pos, 4)


def _extras(msg: Message, plan: _Plan, variant: Variant, raw: bytes, pos: int, body_end: int) -> None:
    """The general path: documented size differs from the header's, notes, extras cut short."""
    size, extlen = plan.extras_size, msg.extras_length
    if size != extlen:
        msg.add("extras_length_mismatch", f"header extras length {extlen}, the documented "
                f"{variant.name} layout has {size} bytes; decoded as documented", 4, 1)
    if plan.unpack is not None:
        if pos + size <= body_end:
            values = msg._extras_values = plan.unpack(raw, pos)
            _item_checks(msg, plan, values, pos)
        else:
            present = max(body_end - pos, 0)
            msg.add("truncated", f"extras need {size} bytes, {present} present; the fields that fit are "
                    "shown", pos, present)
            layout = variant.layout
            assert layout is not None
            fields = {}
            for span in walk.spans(layout.grammar, raw[pos:pos + size] + bytes(size - present)):
                if span.offset + span.length <= present:
                    fields[span.path] = span.value
            msg._extras = fields
            msg._partial_extras = True
    if variant.note is not None:
        msg.add(*variant.note)


def _presence(msg: Message, part: str, rule: Presence, offset: int, length: int) -> None:
    if rule is Presence.FORBIDDEN:
        msg.add(f"must_not_have_{part}", f"{msg.opcode_name} must not have a {part}", offset, length)
    else:
        msg.add(f"must_have_{part}", f"{msg.opcode_name} must have a {part}", 2 if part == "key" else 8,
                2 if part == "key" else 4)


def _length_mismatch(msg: Message, n: int, body_end: int) -> None:
    present = n - HEADER_LENGTH
    name = "truncated" if n < body_end and not msg.options.lenient else "body_length_mismatch"
    msg.add(name, f"total body length says {msg.total_body_length} bytes, {present} present", 8, 4)


def _unplanned(msg: Message, spec: MessageSpec | None, extlen: int) -> None:
    if spec is not None and spec.type_field != "datatype":
        defined = ", ".join(f"{w[1]} {v.label}" for v in spec.variants for w in v.when if w[0] == spec.type_field)
        msg.add("unknown_request_type", f"{spec.name} {spec.type_field} {msg.datatype} is not defined "
                f"(the draft defines {defined})", 5, 1)
    elif spec is not None:
        allowed = sorted({v.extras_length for v in spec.variants})
        msg.add("illegal_extras_length", f"{spec.name} with extras length {extlen}; the layouts allow "
                + ", ".join(str(a) for a in allowed), 4, 1)
    elif msg.magic not in MAGIC_CLASS:
        msg.add("unknown_magic", f"magic 0x{msg.magic:02x} is not a known magic", 0, 1)
    else:
        msg.add("unknown_opcode", f"opcode 0x{msg.opcode:02x} is not in the {msg.options.dialect.name} "
                "registry; body kept raw", 1, 1)


def _header(msg: Message, raw: bytes) -> None:
    msg.header = header = HEADER.unpack_from(raw)
    if header[0] in ALT_MAGICS:
        msg.framing_extras_length = header[2] >> 8
        msg.key_length = header[2] & 0xFF
    else:
        msg.framing_extras_length = 0
        msg.key_length = header[2]


# --- the key and value checks -------------------------------------------------------------------------
def _check_value(msg: Message, variant: Variant | None) -> None:
    """The checks of every value but a DOCUMENT (:meth:`Message._check` reads those)."""
    kind = variant.value if variant is not None else _VALUE_RAW
    value = msg.value
    if not value:
        if kind is _VALUE_GRAMMAR and variant is not None and variant.value_grammar is not None \
                and grammar_sizes(variant.value_grammar)[1] is not None:
            msg._reading = ValueReading.FIELDS
            msg._grammar = variant.value_grammar
            msg._fields = variant.value_grammar.parse(b"")
        return
    start = msg.value_offset
    if kind in DATATYPE_VALUE_KINDS and msg.datatype & _SNAPPY_OR_XATTR \
            and (msg.spec is None or msg.spec.type_field == "datatype"):
        _check_document(msg, value, msg.datatype)
        return
    msg._reading = _READ_TEXT
    if variant is not None and variant.value_path is not None:
        _check_path(msg, variant.value_path, value)
    elif kind is _VALUE_GRAMMAR and variant is not None:
        _check_grammar(msg, variant, value)
    elif kind is _VALUE_SECRET and not msg.options.show_secrets:
        msg._reading = ValueReading.SECRET
        msg.add("redacted", f"{len(value)} bytes of SASL data hidden", start, len(value))
    elif kind is _VALUE_STREAM_REQUEST_JSON:
        _, diags = srv.validate(value, start)
        msg.extend(diags)
        if msg.options.collections is False:
            msg.add("stream_request_value_without_collections",
                    "a stream-request value without HELLO Collections: the server answers Einval",
                    start, len(value))
    elif kind is _VALUE_JSON or (kind is _VALUE_AUTO and value[:1] in (b"{", b"[")):
        try:
            _json_check(value)
        except ValueError:
            msg.add("bad_json", "value is not valid JSON", start, len(value))


def _check_path(msg: Message, length_field: str, value: bytes) -> None:
    """A value that starts with a path its extras give the length of (single-path subdocument commands): a
    length past the value keeps path and value together, as TEXT."""
    length = (msg.extras or {}).get(length_field)
    if length is None or length > len(value):
        msg.add("illegal_value_length", f"{length_field} {length} exceeds the {len(value)} value bytes; "
                "path and value kept together", msg.value_offset, len(value))
        return
    msg._reading = ValueReading.PATH
    msg._path_length = length


def _check_document(msg: Message, value: bytes, datatype: int) -> None:
    """A datatype-driven value: snappy inflated, xattrs split off, the body checked as JSON when marked so
    and shown as text (a body shown as hex is not checked, as the record has always had it)."""
    msg._reading = _READ_DOCUMENT
    data = value
    if datatype & DATATYPE_SNAPPY:
        inflated = snappy_decompress(value)
        if isinstance(inflated, str):
            msg.add("bad_snappy", inflated, msg.value_offset, len(value))
            msg._reading = ValueReading.BAD_SNAPPY
            return
        msg._inflated = True
        data = inflated
    if datatype & DATATYPE_XATTR:
        parsed = parse_xattrs(data)
        if isinstance(parsed, str):
            msg.add("bad_xattr", parsed, msg.value_offset, len(value))
        else:
            msg._xattrs, body_offset = parsed
            data = data[body_offset:]
    msg._document = data
    if datatype & DATATYPE_JSON:  # a body shown as hex is checked too: JSON is UTF-8 text (RFC 8259)
        try:
            _json_check(data)
        except ValueError:
            what = "valid JSON" if msg.document_text is not None else "UTF-8 JSON text"
            msg.add("bad_json", f"value marked JSON is not {what}", msg.value_offset, len(value))


def _check_grammar(msg: Message, variant: Variant, value: bytes) -> None:
    grammar, parsed, problem = _parse_grammar_value(msg, variant)
    msg._value_fields = parsed
    if problem is not None:
        msg.extend([problem])
        msg._reading = ValueReading.HEX
        return
    consumed = _consumed(grammar, parsed)
    msg._reading = ValueReading.FIELDS
    msg._grammar, msg._fields, msg._consumed = grammar, parsed, consumed
    if consumed != len(value):
        msg.add("illegal_value_length", f"{len(value) - consumed} trailing value bytes after {variant.name}",
                msg.value_offset + consumed, len(value) - consumed)


def redacted(raw: bytes, options: DecodeOptions = DEFAULT_OPTIONS) -> bytes:
    """The packet with a secret value (SASL client messages: the password itself with PLAIN) overwritten by
    '*' bytes of the same length: the same framing and header, nothing to learn. Other packets unchanged."""
    msg = decode(raw, 0, options)
    variant = msg.variant
    if variant is None or variant.value is not _VALUE_SECRET or msg.body_end <= msg.value_offset:
        return raw
    return raw[:msg.value_offset] + b"*" * (msg.body_end - msg.value_offset) + raw[msg.body_end:]


def item_key(msg: Message) -> tuple[str, str, int | None, str | None, int, int] | None:
    """A stream item's (magic, opcode, collection_id, key, by_seqno, rev_seqno) exactly as the record
    (``dcpctl.render.record``) would give them, without building the record: for consumers that need a few
    fields of millions of items (``analyze``'s rows). Read from the check pass's views, as the record
    reads them. None when only the record can tell:
    another shape, frame infos, a key that is not plain text."""
    plan = msg.plan
    values = msg._extras_values
    if plan is None or plan.item_names is None or msg.frame_infos or values is None or plan.rev_seqno_at < 0:
        return None
    text = None
    if msg.key_offset != msg.value_offset:
        try:
            text = msg.document_key.decode()
        except UnicodeDecodeError:
            return None
        if not text.isprintable():
            return None
    magic, opcode = plan.item_names
    return magic, opcode, msg._collection_id, text, values[plan.seqno_at], values[plan.rev_seqno_at]


def item_plan(dialect: Dialect, opcode: int, extlen: int) -> _Plan | None:
    """decode()'s plan for a plain item shape: a producer's mutation, deletion or expiration with a declared
    layout of that extras length, a by_seqno and a rev_seqno (None: not a plain item's shape). For these
    opcodes nothing of the header but the extras length changes the plan (see :func:`shape_key`; their
    extras are never 1 byte long)."""
    if opcode not in CHANGE_OPCODES or dialect.layout_authoritative or extlen == 1:
        return None
    plan = plan_of((dialect.name, _REQUEST, opcode, extlen, 0, 0, -1, 0))
    return plan if plan.item_names is not None and plan.rev_seqno_at >= 0 else None


# orjson: strict RFC 8259 like the server's checker (no NaN or Infinity), and faster than json
_json_check = orjson.loads


def value_grammar(variant: Variant, extras: dict[str, int] | None, value_length: int) -> Any:
    """The construct declaration of a GRAMMAR value, chosen by the variant's selector."""
    if variant.value_grammar is not None:
        return variant.value_grammar
    if not variant.value_select:
        return None
    values = {**(extras or {}), "value_length": value_length}
    key = tuple(values.get(name, -1) for name in variant.value_select)
    return variant.value_grammars.get(key)


# What is known of a GRAMMAR declaration, found once per declaration (construct's sizeof raises, slowly, for a
# variable one): the declaration, its sizes and its list's name (see grammar_sizes), and its list reader. The
# declarations are the registry's, so few.
_GRAMMARS: dict[int, tuple[Any, int | None, int | None, str, Callable[[bytes], Any] | None]] = {}


def _grammar(grammar: Any) -> tuple[Any, int | None, int | None, str, Callable[[bytes], Any] | None]:
    found = _GRAMMARS.get(id(grammar))
    if found is None or found[0] is not grammar:
        item = walk.item_size(grammar)
        name = walk.unwrap(grammar).subcons[0].name if item is not None else ""
        found = _GRAMMARS[id(grammar)] = (grammar, walk.fixed_size(grammar), item, name,
                                          _list_reader(grammar, name) if item is not None else None)
    return found


def grammar_sizes(grammar: Any) -> tuple[int | None, int | None, str]:
    """(its fixed size, the size of one item of its lone GreedyRange of fixed-size items, that list's name):
    None and "" where the declaration has none."""
    found = _grammar(grammar)
    return found[1], found[2], found[3]


def _list_reader(grammar: Any, name: str) -> Callable[[bytes], Any] | None:
    """A lone list of integer items (a failover log, HELLO's features, vbucket seqnos) read as construct reads
    it, from one ``struct`` derived from the item's declaration as the extras' layouts are: the containers
    construct gives, in one ``iter_unpack``. None for any other item (construct reads those)."""
    item = walk.unwrap(walk.unwrap(grammar).subcons[0]).subcon
    inner = walk.unwrap(item)
    if isinstance(inner, FormatField):
        unpack = struct.Struct(inner.fmtstr).iter_unpack
        return lambda value: Container({name: ListContainer([number for (number,) in unpack(value)])})
    if not isinstance(inner, Struct):
        return None
    try:
        found = fixed_layout(inner)
    except TypeError:  # an item with a field that is not a plain integer (an enum, a constant, bytes)
        return None
    names, items = found.names, found.codec.iter_unpack
    return lambda value: Container({name: ListContainer([Container(zip(names, fields, strict=True))
                                                         for fields in items(value)])})


def _consumed(grammar: Any, parsed: Any) -> int:
    """How many value bytes ``grammar`` read to give ``parsed``: a fixed-size declaration all of its size, a
    list of fixed-size items each item's size (it stops at the first item that does not parse); only a
    variable declaration is built again to count them."""
    _, size, item, name, _ = _grammar(grammar)
    if size is not None:
        return size
    if item is not None:
        return item * len(parsed[name])
    return len(grammar.build(parsed))


def _parse_grammar_value(msg: Message, variant: Variant) -> tuple[Any, Any, Diagnostic | None]:
    """(grammar, parsed value or False, why it does not fit or None): the one reading of a GRAMMAR value,
    for the record and for :attr:`Message.value_fields`. An empty value parses only as a list."""
    value = msg.value
    start = msg.value_offset
    grammar = value_grammar(variant, msg.extras, len(value))
    if not value:
        fits = grammar is not None and grammar_sizes(grammar)[1] is not None
        return grammar, grammar.parse(b"") if fits else False, None
    if grammar is None:
        if msg.opcode == Opcode.DCP_SYSTEM_EVENT:
            return None, False, diagnostic("unknown_system_event", "system event id/version without a declared "
                                           "value layout; value kept raw", start,
                                           len(value))
        return None, False, diagnostic("illegal_value_length", f"no value layout of {variant.name} has "
                                       f"{len(value)} bytes", start, len(value))
    _, size, item, _, read_list = _grammar(grammar)
    if (size is not None and size != len(value)) or (item is not None and len(value) % item):
        expected = f"{size} bytes" if size is not None else f"a multiple of {item} bytes"
        name = "odd_feature_list" if msg.opcode == Opcode.HELLO else "illegal_value_length"
        return grammar, False, diagnostic(name, f"{variant.name} value has {len(value)} bytes, expected "
                                          f"{expected}", start, len(value))
    if read_list is not None:
        return grammar, read_list(value), None  # (its length is a multiple of the item's: every item reads)
    try:
        return grammar, grammar.parse(value), None
    except FlatError as exc:
        return grammar, False, diagnostic("flatbuffers_table_invalid", f"{variant.name} value: {exc}", start,
                                          len(value))
    except Leb128Error as exc:
        return grammar, False, diagnostic("bad_leb128", f"{variant.name} value: {exc}", start, len(value))
    except Exception as exc:  # noqa: BLE001 - construct's errors are many; any means "does not fit"
        return grammar, False, diagnostic("illegal_value_length", f"{variant.name} value does not parse: {exc}",
                                          start, len(value))

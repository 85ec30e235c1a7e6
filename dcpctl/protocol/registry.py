"""Registry tables: ``(magic class, opcode) -> MessageSpec``, each spec a list of explicit variant rows.

A variant is chosen by matching its ``when`` conditions (header fields, the first extras byte, the value
length) in order; the first row that matches wins. The UPR transport draft is an overlay: it replaces the rows
for opcodes 0x01-0x05 and shares every other row with the DCP registry.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from construct import Construct, FormatField, Struct

from dcpctl.protocol import grammar as g
from dcpctl.protocol.constants import (
    DATATYPE_SNAPPY,
    DATATYPE_XATTR,
    DCP_OPEN_FLAGS,
    DURABILITY_LEVELS,
    OPCODES,
    OSO_FLAGS,
    SERVER_MAGICS,
    SERVER_OPCODES,
    SNAPSHOT_FLAGS,
    STREAM_END_STATUSES,
    STREAM_FLAGS,
    SYSTEM_EVENTS,
    UPR_OPCODES,
    VBUCKET_STATES,
    Magic,
    Status,
    Vocabulary,
)


class KeyKind(Enum):
    NONE = "none"  # must not have a key
    DOCUMENT = "document"  # document key, LEB128 collection prefix when collections are on
    TEXT = "text"  # a name: connection name, control key, mechanism, bucket, group id
    RAW = "raw"  # unknown: kept as bytes


class ValueKind(Enum):
    NONE = "none"  # must not have a value
    DOCUMENT = "document"  # datatype-driven: snappy, xattrs, JSON
    JSON = "json"  # JSON text
    TEXT = "text"  # text (control value, mechanism list, stats)
    SECRET = "secret"  # noqa: S105 - a kind of value, not a password; SASL client messages: redacted unless asked
    GRAMMAR = "grammar"  # a construct declaration (value_grammars)
    STREAM_REQUEST_JSON = "stream_request_json"  # JSON validated per reference 3.4.4
    AUTO = "auto"  # error bodies and unknowns: JSON if it parses, else text, else hex
    RAW = "raw"


class Content(Enum):
    """Whose words a key or value holds where its kind does not say it (``dcpctl redact`` reads it): DOCUMENT
    and RAW kinds hold customer data, TEXT, JSON and AUTO the protocol's own, unless the row says otherwise."""

    DATA = "data"  # customer data or credentials, whatever the kind
    SECRET = "secret"  # noqa: S105 - a kind of content, not a password; a credential exchange (SASL server)
    NAME = "name"  # a bucket, scope, collection, user or connection name (or a JSON list of user names)
    NAMES = "names"  # JSON whose "name" or "user" fields are such names (manifests, cluster maps, a stats filter)
    MENTIONS = "mentions"  # the protocol's text that may name them (stats: a connection's, a collection's)
    FREE_TEXT = "free_text"  # text a person or program chose (HELLO's user agent)


# Values a server sends compressed, or with xattrs first, when its datatype says so: HELLO SnappyEverywhere
# compresses any response value (a cluster map, an error body), not only documents; such a value is read as a
# document body is (decompressed, xattrs split off), whatever its row's kind.
DATATYPE_VALUE_KINDS: Final = frozenset({ValueKind.JSON, ValueKind.TEXT, ValueKind.AUTO})


def reads_as_document(kind: ValueKind, datatype: int) -> bool:
    """A value of ``kind`` with this datatype is a document body: DOCUMENT rows, and any text-like value the
    datatype marks SNAPPY or XATTR."""
    return kind is ValueKind.DOCUMENT or (
        kind in DATATYPE_VALUE_KINDS and bool(datatype & (DATATYPE_SNAPPY | DATATYPE_XATTR)))


class Presence(Enum):
    FORBIDDEN = "forbidden"
    OPTIONAL = "optional"
    REQUIRED = "required"


class Pushed(Enum):
    """Whether a producer sends this request on a DCP connection, and what it belongs to (reference 3)."""

    NO = "no"  # sent by the consumer, or not a DCP message
    CONNECTION = "connection"  # pushed, not tied to a stream: its opaque is the producer's own (DCP_NOOP)
    STREAM = "stream"  # pushed on a stream the consumer opened: its opaque is the stream request's


class Item(Enum):
    """What a stream item is: pushed messages that take a seqno of their own inside the snapshot."""

    NONE = "none"
    CHANGE = "change"  # a committed document change: mutation, deletion, expiration
    PREPARE = "prepare"  # a durable write not yet committed (sync replication)
    EVENT = "event"  # a collection or scope event


@dataclass(frozen=True)
class FixedLayout:
    """A fixed-size all-integer construct Struct compiled to one ``struct.Struct`` (the fast path).

    Derived from the declaration, never written by hand: a Struct whose every field is a construct
    ``FormatField`` maps one to one onto a ``struct`` format string.
    """

    grammar: Struct
    names: tuple[str, ...]
    codec: struct.Struct

    @property
    def size(self) -> int:
        return self.codec.size

    def _formats(self) -> list[str]:
        return [code for code in self.codec.format if code not in "<>=!@"]

    def offset(self, name: str) -> int:
        """Where field ``name`` starts, in bytes from the start of the layout."""
        return struct.calcsize(">" + "".join(self._formats()[:self.names.index(name)]))

    def prefix(self, name: str) -> struct.Struct:
        """The fields from the first up to and including ``name``, as one codec (a partial read)."""
        return struct.Struct(">" + "".join(self._formats()[:self.names.index(name) + 1]))

    def field(self, name: str) -> struct.Struct:
        """Field ``name`` alone; read it at :meth:`offset`."""
        return struct.Struct(">" + self._formats()[self.names.index(name)])

    def unpack(self, buf: bytes, offset: int = 0) -> dict[str, int]:
        return dict(zip(self.names, self.codec.unpack_from(buf, offset), strict=True))

    def pack(self, values: Mapping[str, Any]) -> bytes:
        return self.codec.pack(*(int(values.get(name, 0)) for name in self.names))


def fixed_layout(grammar: Struct) -> FixedLayout:
    fmt = ">"
    names = []
    for sub in grammar.subcons:
        inner = sub.subcon if hasattr(sub, "subcon") and not isinstance(sub, FormatField) else sub
        if not isinstance(inner, FormatField):
            raise TypeError(f"{sub.name} is not a fixed integer field")
        fmt += inner.fmtstr.lstrip("<>=!")
        names.append(sub.name)
    return FixedLayout(grammar, tuple(names), struct.Struct(fmt))


def layout(grammar: Struct) -> FixedLayout:
    """The fixed layout of ``grammar``, compiled once (every row sharing a declaration shares its layout)."""
    key = id(grammar)
    if key not in _LAYOUTS:
        _LAYOUTS[key] = fixed_layout(grammar)
    return _LAYOUTS[key]


@dataclass(frozen=True)
class Variant:
    """One explicit row of a message: its extras layout, key, value and the conditions that select it."""

    name: str
    extras: Struct | None = None
    when: tuple[tuple[str, int | tuple[int, ...]], ...] = ()
    key: KeyKind = KeyKind.NONE
    key_presence: Presence = Presence.FORBIDDEN
    value: ValueKind = ValueKind.NONE
    value_presence: Presence = Presence.FORBIDDEN
    # value grammar selection: field names (extras fields, "value_length") -> grammar per key tuple
    value_grammar: Construct | None = None
    value_select: tuple[str, ...] = ()
    value_grammars: Mapping[tuple[int, ...], Construct] = field(default_factory=dict)
    key_content: Content | None = None  # None: as its kind says (see Content)
    value_content: Content | None = None
    # a diagnostic every message of this row gets (legacy layout, documentation errata)
    note: tuple[str, str] | None = None
    # vocabularies for fields of this row (pretty names; ``features`` is also named in JSON)
    vocabularies: Mapping[str, Vocabulary] = field(default_factory=dict)
    label: str | None = None  # UPR draft: the type's own name
    # the extras field that gives the length of the value's first part, shown as ``path`` (single-path
    # subdocument commands: the path, then the operation's value)
    value_path: str | None = None
    # a record field set to true on the success response with neither key nor value that ends a
    # multi-response answer (STAT's "stat_end")
    terminator: str | None = None
    layout: FixedLayout | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "layout", _layout_of(self.extras))

    @property
    def grammars(self) -> list[Construct]:
        """Every value declaration of the row: the one it always has, or those its selector chooses among."""
        return [*([self.value_grammar] if self.value_grammar is not None else []), *self.value_grammars.values()]

    @property
    def extras_length(self) -> int:
        layout = self.layout
        return layout.size if layout else 0


_LAYOUTS: dict[int, FixedLayout] = {}


def _layout_of(grammar: Struct | None) -> FixedLayout | None:
    return None if grammar is None else layout(grammar)


# The 24-byte header (reference 1), compiled from its declaration. Every header grammar has the same field
# sizes (the response's status and the alternative encoding's split key length share a request's bytes), so
# one codec reads them all; field offsets (``HEADER_LAYOUT.offset("opaque")``) come from the request's names.
HEADER_LAYOUT: Final = layout(g.request_header)
OPCODE_MAX: Final = (1 << 8 * HEADER_LAYOUT.field("opcode").size) - 1  # the largest opcode the header holds


@dataclass(frozen=True)
class MessageSpec:
    """Everything declared about one (magic class, opcode): its kv_engine name and its variant rows."""

    name: str
    opcode: int
    magic_class: int
    variants: tuple[Variant, ...]
    summary: str = ""
    type_field: str = "datatype"  # UPR draft: "request_type"
    has_status: bool = True  # response header carries a status (UPR draft: a vbucket)
    vocabulary: Vocabulary = OPCODES
    pushed: Pushed = Pushed.NO  # requests: does a producer send it on a DCP connection
    item: Item = Item.NONE  # pushed on a stream: a stream item, and which kind
    answered: bool = False  # pushed, and the consumer answers it (so a response is matched to it)
    before_auth: bool = False  # a server runs it before SASL authentication succeeds (kv_engine)
    per_vbucket: bool = False  # requests: about the vbucket its header names, not the connection (stream setup)

    @property
    def by_seqno(self) -> bool:
        """Some row's extras carry a ``by_seqno``."""
        return any(v.layout is not None and "by_seqno" in v.layout.names for v in self.variants)

    @property
    def seqno_field(self) -> str | None:
        """Pushed on a stream, the extras field holding the seqno the message takes in its vbucket's history:
        an item's or a seqno advance's by_seqno, a commit's commit_seqno, an abort's abort_seqno (reference
        3.17: a commit and an abort carry their own seqno beside the prepare's)."""
        declared = {name for v in self.variants if v.layout is not None for name in v.layout.names}
        return next((name for name in _SEQNO_FIELDS if name in declared), None) if self.on_stream else None

    @property
    def document_key(self) -> bool:
        """Some row's key is a document key (a collection prefix when collections are on)."""
        return any(v.key is KeyKind.DOCUMENT for v in self.variants)

    @property
    def needs_key(self) -> bool:
        """Every row requires a key."""
        return all(v.key_presence is Presence.REQUIRED for v in self.variants)

    @property
    def on_stream(self) -> bool:
        """Pushed on a stream the consumer opened (items, markers, stream ends...)."""
        return self.pushed is Pushed.STREAM

    @property
    def addresses_vbucket(self) -> bool:
        """A request about the vbucket its header names: stream setup, or an operation on a document."""
        return self.per_vbucket or (self.document_key and self.pushed is Pushed.NO)

    @property
    def document_item(self) -> bool:
        """A stream item about a document, with its seqno: mutation, deletion, expiration, prepare."""
        return self.item is not Item.NONE and self.document_key and self.by_seqno


_SEQNO_FIELDS: Final = ("by_seqno", "commit_seqno", "abort_seqno")


def _x(**kwargs: Any) -> Variant:
    return Variant(**kwargs)


def _when_ext(n: int) -> tuple[tuple[str, int | tuple[int, ...]], ...]:
    return (("extras_length", n),)


EMPTY = _x(name="empty", when=_when_ext(0))
SUCCESS = (("status", int(Status.SUCCESS)),)
ROLLBACK = (("status", int(Status.ROLLBACK)),)
# The server's words about a failed request ({"error":{"context":...}}): they may name what the request named
ERROR_BODY = _x(name="error", when=_when_ext(0), value=ValueKind.AUTO, value_presence=Presence.OPTIONAL,
                value_content=Content.MENTIONS)

REQ: Final = int(Magic.CLIENT_REQUEST)
RES: Final = int(Magic.CLIENT_RESPONSE)
SREQ: Final = int(Magic.SERVER_REQUEST)
SRES: Final = int(Magic.SERVER_RESPONSE)


def opcode_vocabulary(magic_class: int | None) -> Vocabulary:
    """The kv_engine opcode table a magic class addresses: server requests and their responses have their own."""
    return SERVER_OPCODES if magic_class in SERVER_MAGICS else OPCODES


def _spec(magic_class: int, name: str, *variants: Variant, summary: str = "", pushed: Pushed = Pushed.NO,
          item: Item = Item.NONE, answered: bool = False, before_auth: bool = False,
          per_vbucket: bool = False) -> MessageSpec:
    vocabulary = opcode_vocabulary(magic_class)
    opcode = vocabulary.code_of[name]
    return MessageSpec(name, opcode, magic_class, variants, summary or vocabulary.meaning_of[opcode],
                       pushed=pushed, item=item, answered=answered, before_auth=before_auth,
                       per_vbucket=per_vbucket)


def _response(name: str, *success: Variant) -> MessageSpec:
    """A response: the success rows given, then any status with an optional error body."""
    return _spec(RES, name, *success, ERROR_BODY)


_STREAM_FLAGS = {"flags": STREAM_FLAGS}
_DOC_KEY = {"key": KeyKind.DOCUMENT, "key_presence": Presence.REQUIRED}

DCP_REQUESTS: Final[list[MessageSpec]] = [
    _spec(REQ, "DCP_OPEN", _x(name="dcp_open", extras=g.dcp_open_extras, when=_when_ext(8),
                              key=KeyKind.TEXT, key_presence=Presence.REQUIRED, key_content=Content.NAME,
                              # {"consumer_name": ...}: a replication's names its nodes and bucket again
                              value=ValueKind.JSON, value_presence=Presence.OPTIONAL, value_content=Content.MENTIONS,
                              vocabularies={"flags": DCP_OPEN_FLAGS})),
    _spec(REQ, "DCP_ADD_STREAM", _x(name="add_stream", extras=g.add_stream_extras, when=_when_ext(4),
                                    vocabularies=_STREAM_FLAGS), per_vbucket=True),
    _spec(REQ, "DCP_CLOSE_STREAM", EMPTY, per_vbucket=True),
    _spec(REQ, "DCP_STREAM_REQ",
          _x(name="stream_req", extras=g.stream_req_extras, when=_when_ext(48),
             value=ValueKind.STREAM_REQUEST_JSON, value_presence=Presence.OPTIONAL,
             vocabularies=_STREAM_FLAGS),
          _x(name="stream_req_v0", extras=g.stream_req_v0_extras, when=_when_ext(40),
             note=("legacy_stream_request_layout",
                   "40-byte extras: the Oct 2013 - Apr 2014 layout, whose last field is the high seqno "
                   "at the time the vbucket uuid was generated (MB-10640 replaced it by the snapshot "
                   "range); current servers accept only 48 bytes"),
             vocabularies=_STREAM_FLAGS), per_vbucket=True),
    _spec(REQ, "DCP_GET_FAILOVER_LOG", EMPTY, per_vbucket=True),
    _spec(REQ, "DCP_STREAM_END", _x(name="stream_end", extras=g.stream_end_extras, when=_when_ext(4),
                                    vocabularies={"stream_end_status": STREAM_END_STATUSES}), pushed=Pushed.STREAM),
    _spec(REQ, "DCP_SNAPSHOT_MARKER",
          _x(name="snapshot_marker_v1", extras=g.snapshot_marker_v1_extras, when=_when_ext(20),
             vocabularies={"snapshot_flags": SNAPSHOT_FLAGS}),
          _x(name="snapshot_marker_v2_0", extras=g.snapshot_marker_v2_extras,
             when=(("extras_length", 1), ("extras_byte0", 0)),
             value=ValueKind.GRAMMAR, value_presence=Presence.REQUIRED,
             value_grammar=g.snapshot_marker_v2_0_value, vocabularies={"snapshot_flags": SNAPSHOT_FLAGS}),
          _x(name="snapshot_marker_v2_1", extras=g.snapshot_marker_v2_extras,
             when=(("extras_length", 1), ("extras_byte0", 1)),
             value=ValueKind.GRAMMAR, value_presence=Presence.REQUIRED,
             value_grammar=g.snapshot_marker_v2_1_value,
             note=("marker_v2_1_retired", "snapshot marker v2.1 (PiTR timestamp) was removed in 2024 "
                   "(KV 19d8135d6); only old captures carry it"),
             vocabularies={"snapshot_flags": SNAPSHOT_FLAGS}),
          _x(name="snapshot_marker_v2_2", extras=g.snapshot_marker_v2_extras,
             when=(("extras_length", 1), ("extras_byte0", 2)),
             value=ValueKind.GRAMMAR, value_presence=Presence.REQUIRED,
             value_grammar=g.snapshot_marker_v2_2_value, vocabularies={"snapshot_flags": SNAPSHOT_FLAGS}),
          pushed=Pushed.STREAM, answered=True),
    _spec(REQ, "DCP_MUTATION", _x(name="mutation", extras=g.mutation_extras, when=_when_ext(31),
                                  value=ValueKind.DOCUMENT, value_presence=Presence.OPTIONAL, **_DOC_KEY),
          pushed=Pushed.STREAM, item=Item.CHANGE),
    _spec(REQ, "DCP_DELETION",
          _x(name="deletion_v1", extras=g.deletion_v1_extras, when=_when_ext(18),
             value=ValueKind.DOCUMENT, value_presence=Presence.OPTIONAL, **_DOC_KEY),
          _x(name="deletion_v2", extras=g.deletion_v2_extras, when=_when_ext(21),
             value=ValueKind.DOCUMENT, value_presence=Presence.OPTIONAL, **_DOC_KEY),
          pushed=Pushed.STREAM, item=Item.CHANGE),
    _spec(REQ, "DCP_EXPIRATION", _x(name="expiration", extras=g.expiration_extras, when=_when_ext(20),
                                    value=ValueKind.DOCUMENT, value_presence=Presence.OPTIONAL,
                                    **_DOC_KEY),
          _x(name="expiration_v1", extras=g.deletion_v1_extras, when=_when_ext(18),
             value=ValueKind.DOCUMENT, value_presence=Presence.OPTIONAL,
             note=("legacy_expiration_layout",
                   "18-byte expiration extras (by_seqno, rev_seqno, nmeta: the deletion v1 layout), as servers "
                   "before delete times (5.5) sent them; current servers send 20 bytes ending in the expiry "
                   "time"), **_DOC_KEY),
          pushed=Pushed.STREAM, item=Item.CHANGE),
    _spec(REQ, "DCP_FLUSH", _x(name="flush", when=_when_ext(0),
                               note=("obsolete_opcode", "DCP_FLUSH is obsolete; current servers answer "
                                     "NotSupported (DcpFlush_Unsupported)")), pushed=Pushed.STREAM),
    _spec(REQ, "DCP_SET_VBUCKET_STATE", _x(name="set_vbucket_state", extras=g.set_vbucket_state_extras,
                                           when=_when_ext(1),
                                           vocabularies={"vbucket_state": VBUCKET_STATES}),
          pushed=Pushed.STREAM, answered=True),
    _spec(REQ, "DCP_NOOP", EMPTY, pushed=Pushed.CONNECTION, answered=True),
    _spec(REQ, "DCP_BUFFER_ACKNOWLEDGEMENT", _x(name="buffer_ack", extras=g.buffer_ack_extras,
                                                when=_when_ext(4))),
    # the value of "consumer_name" names the connection again
    _spec(REQ, "DCP_CONTROL", _x(name="control", when=_when_ext(0), key=KeyKind.TEXT,
                                 key_presence=Presence.REQUIRED, value=ValueKind.TEXT,
                                 value_presence=Presence.REQUIRED, value_content=Content.MENTIONS)),
    _spec(REQ, "DCP_SYSTEM_EVENT", _x(
        name="system_event", extras=g.system_event_extras, when=_when_ext(13),
        key=KeyKind.TEXT, key_presence=Presence.OPTIONAL, value=ValueKind.GRAMMAR, key_content=Content.NAME,
        value_presence=Presence.OPTIONAL, value_select=("event_id", "event_version"),
        value_grammars={
            (0, 0): g.begin_collection_v0_value,
            (0, 1): g.begin_collection_v1_value,
            (1, 0): g.end_collection_value,
            (3, 0): g.create_scope_value,
            (4, 0): g.drop_scope_value,
            (0, 2): g.collection_v2_value,
            (1, 2): g.dropped_collection_v2_value,
            (3, 2): g.scope_v2_value,
            (4, 2): g.dropped_scope_v2_value,
            (5, 2): g.collection_v2_value,
        },
        vocabularies={"event_id": SYSTEM_EVENTS}), pushed=Pushed.STREAM, item=Item.EVENT),
    _spec(REQ, "DCP_PREPARE", _x(name="prepare", extras=g.prepare_extras, when=_when_ext(31),
                                 value=ValueKind.DOCUMENT, value_presence=Presence.OPTIONAL,
                                 vocabularies={"durability_level": DURABILITY_LEVELS}, **_DOC_KEY),
          pushed=Pushed.STREAM, item=Item.PREPARE),
    _spec(REQ, "DCP_SEQNO_ACKNOWLEDGED", _x(name="seqno_acknowledged", extras=g.seqno_acknowledged_extras,
                                            when=_when_ext(8))),
    _spec(REQ, "DCP_COMMIT", _x(name="commit", extras=g.commit_extras, when=_when_ext(16), **_DOC_KEY),
          pushed=Pushed.STREAM),
    _spec(REQ, "DCP_ABORT", _x(name="abort", extras=g.abort_extras, when=_when_ext(16), **_DOC_KEY),
          pushed=Pushed.STREAM),
    _spec(REQ, "DCP_SEQNO_ADVANCED", _x(name="seqno_advanced", extras=g.seqno_advanced_extras,
                                        when=_when_ext(8)), pushed=Pushed.STREAM),
    _spec(REQ, "DCP_OSO_SNAPSHOT", _x(name="oso_snapshot", extras=g.oso_snapshot_extras, when=_when_ext(4),
                                      vocabularies={"oso_flags": OSO_FLAGS}), pushed=Pushed.STREAM),
    _spec(REQ, "DCP_CACHE_TRANSFER", _x(name="cache_transfer", when=_when_ext(0), value=ValueKind.GRAMMAR,
                                        value_presence=Presence.REQUIRED,
                                        value_grammar=g.cache_transfer_value), pushed=Pushed.STREAM, answered=True),
    _spec(REQ, "DCP_CACHE_TRANSFER_END", EMPTY, pushed=Pushed.STREAM),
]

# STAT groups whose first argument is a document's key (cbstats key and vkey: "key KEY VBUCKET [COLLECTION]",
# "key-byid KEY VBUCKET CID"): the rest of a STAT key is the protocol's text
DOCUMENT_KEY_STATS: Final = frozenset({b"key", b"key-byid", b"vkey", b"vkey-byid"})
# STAT groups whose answers are the protocol's words (counters, states, seqnos, uuids, and names, which
# --hash-names hashes): the default group (no key) and those a DCP diagnosis reads (reference 4.8). Others may
# print documents' keys and values (_hash-dump, _checkpoint-dump, range-scans), a HELLO agent and the packets in
# flight (connections) or a key in a task's description (tasks): their answers' values are replaced.
PUBLIC_STATS: Final = frozenset({
    b"", b"vbucket-seqno", b"failovers", b"vbucket-details", b"vbucket", b"prev-vbucket", b"dcp", b"dcpagg",
    b"dcp-vbtakeover", b"checkpoint", b"collections", b"scopes", b"collections-details", b"scopes-details",
    b"memory", b"timings", b"warmup", b"uuid", b"config", b"kvstore", b"disk", b"key", b"key-byid", b"vkey",
    b"vkey-byid"})

OTHER_REQUESTS: Final[list[MessageSpec]] = [
    _spec(REQ, "HELLO", _x(name="hello", when=_when_ext(0), key=KeyKind.TEXT, key_content=Content.FREE_TEXT,
                           key_presence=Presence.OPTIONAL, value=ValueKind.GRAMMAR,
                           value_presence=Presence.OPTIONAL, value_grammar=g.hello_value), before_auth=True),
    _spec(REQ, "SASL_LIST_MECHS", EMPTY, before_auth=True),
    _spec(REQ, "SASL_AUTH", _x(name="sasl_auth", when=_when_ext(0), key=KeyKind.TEXT,
                               key_presence=Presence.REQUIRED, value=ValueKind.SECRET,
                               value_presence=Presence.OPTIONAL), before_auth=True),
    _spec(REQ, "SASL_STEP", _x(name="sasl_step", when=_when_ext(0), key=KeyKind.TEXT,
                               key_presence=Presence.REQUIRED, value=ValueKind.SECRET,
                               value_presence=Presence.OPTIONAL), before_auth=True),
    _spec(REQ, "SELECT_BUCKET", _x(name="select_bucket", when=_when_ext(0), key=KeyKind.TEXT,
                                   key_presence=Presence.REQUIRED, key_content=Content.NAME)),
    _spec(REQ, "GET_ERROR_MAP", _x(name="get_error_map", when=_when_ext(0), value=ValueKind.GRAMMAR,
                                   value_presence=Presence.REQUIRED,
                                   value_grammar=g.error_map_request_value), before_auth=True),
    _spec(REQ, "GET_CLUSTER_CONFIG", EMPTY,
          _x(name="get_cluster_config_known_version", extras=g.cluster_config_extras,
             when=_when_ext(16))),
    _spec(REQ, "GET_ALL_VB_SEQNOS", EMPTY,
          _x(name="get_all_vb_seqnos_state", extras=g.get_all_vb_seqnos_state_extras, when=_when_ext(4)),
          _x(name="get_all_vb_seqnos_collection", extras=g.get_all_vb_seqnos_extras, when=_when_ext(8))),
    _spec(REQ, "OBSERVE_SEQNO", _x(name="observe_seqno", when=_when_ext(0), value=ValueKind.GRAMMAR,
                                   value_presence=Presence.REQUIRED,
                                   value_grammar=g.observe_seqno_request_value), per_vbucket=True),
    _spec(REQ, "GET_FAILOVER_LOG", EMPTY, per_vbucket=True),
    # the key is the group and its arguments ("dcp-vbtakeover 5 NAME", "collections SCOPE.COLLECTION"); the
    # value a filter ({"filter": {"user": NAME, "port": ...}})
    _spec(REQ, "STAT", _x(name="stat", when=_when_ext(0), key=KeyKind.TEXT, key_presence=Presence.OPTIONAL,
                          key_content=Content.MENTIONS, value=ValueKind.JSON, value_presence=Presence.OPTIONAL,
                          value_content=Content.NAMES)),
    # not before authentication: kv_engine's Cookie::validateClientRequest lets five commands through, those
    # of the HELLO, SASL and GET_ERROR_MAP rows
    _spec(REQ, "VERSION", EMPTY),
    _spec(REQ, "NOOP", EMPTY),
]

_FAILOVER_LOG = _x(name="failover_log", when=SUCCESS + _when_ext(0), value=ValueKind.GRAMMAR,
                   value_presence=Presence.OPTIONAL, value_grammar=g.failover_log_value)
_EMPTY_OK = _x(name="ok", when=SUCCESS + _when_ext(0))

# --- KV commands (kv_engine docs/BinaryProtocol.md): the document operations an SDK sends --------------
_DOC_VALUE = {"value": ValueKind.DOCUMENT, "value_presence": Presence.OPTIONAL}
_GET = _x(name="get", when=_when_ext(0), **_DOC_KEY)
_TOUCH = _x(name="touch", extras=g.expiration_request_extras, when=_when_ext(4), **_DOC_KEY)
_STORE = _x(name="store", extras=g.store_extras, when=_when_ext(8), **_DOC_VALUE, **_DOC_KEY)
_DELETE = _x(name="delete", when=_when_ext(0), **_DOC_KEY)
_ARITHMETIC = _x(name="arithmetic", extras=g.arithmetic_extras, when=_when_ext(20), **_DOC_KEY)
_CONCAT = _x(name="concat", when=_when_ext(0), value=ValueKind.DOCUMENT, value_presence=Presence.REQUIRED,
             **_DOC_KEY)
_GET_META = (_x(name="get_meta", when=_when_ext(0), **_DOC_KEY),
             _x(name="get_meta_versioned", extras=g.get_meta_request_extras, when=_when_ext(1), **_DOC_KEY))

KV_REQUESTS: Final[list[MessageSpec]] = [
    *(_spec(REQ, name, _GET) for name in ("GET", "GETQ", "GETK", "GETKQ", "GET_REPLICA")),
    *(_spec(REQ, name, _TOUCH) for name in ("GAT", "GATQ", "TOUCH")),
    _spec(REQ, "GET_LOCKED", _GET, _x(name="get_locked_timeout", extras=g.expiration_request_extras,
                                      when=_when_ext(4), **_DOC_KEY)),
    _spec(REQ, "UNLOCK_KEY", _x(name="unlock_key", when=_when_ext(0), **_DOC_KEY)),
    _spec(REQ, "GET_RANDOM_KEY", EMPTY,
          _x(name="get_random_key_collection", extras=g.random_key_extras, when=_when_ext(4)),
          _x(name="get_random_key_xattrs", extras=g.random_key_xattr_extras, when=_when_ext(5))),
    *(_spec(REQ, name, _STORE) for name in ("SET", "SETQ", "ADD", "ADDQ", "REPLACE", "REPLACEQ")),
    *(_spec(REQ, name, _DELETE) for name in ("DELETE", "DELETEQ")),
    *(_spec(REQ, name, _ARITHMETIC) for name in ("INCREMENT", "INCREMENTQ", "DECREMENT", "DECREMENTQ")),
    *(_spec(REQ, name, _CONCAT) for name in ("APPEND", "APPENDQ", "PREPEND", "PREPENDQ")),
    *(_spec(REQ, name, *_GET_META) for name in ("GET_META", "GETQ_META")),
    # the path (scope.collection) is the key in 7.0's first form, the value since (MB-42701)
    *(_spec(REQ, name, _x(name="collections_path", when=_when_ext(0), key=KeyKind.TEXT, key_content=Content.NAME,
                          key_presence=Presence.OPTIONAL, value=ValueKind.TEXT, value_presence=Presence.OPTIONAL,
                          value_content=Content.NAME))
      for name in ("COLLECTIONS_GET_ID", "COLLECTIONS_GET_SCOPE_ID")),
    _spec(REQ, "COLLECTIONS_GET_MANIFEST", EMPTY),
]

# --- subdocument commands (kv_engine docs/SubDocument.md) --------------------------------------------
# the path (path_length bytes), then the operation's value
_SUBDOC_VALUE: Final[dict[str, Any]] = {"value": ValueKind.TEXT, "value_presence": Presence.OPTIONAL,
                                        "value_path": "path_length"}
_SUBDOC_LOOKUP = (_x(name="subdoc", extras=g.subdoc_extras, when=_when_ext(3), **_SUBDOC_VALUE, **_DOC_KEY),
                  _x(name="subdoc_doc_flags", extras=g.subdoc_doc_flags_extras, when=_when_ext(4), **_SUBDOC_VALUE,
                     **_DOC_KEY))
_SUBDOC_MUTATION = (*_SUBDOC_LOOKUP,
                    _x(name="subdoc_expiry", extras=g.subdoc_expiry_extras, when=_when_ext(7), **_SUBDOC_VALUE,
                       **_DOC_KEY),
                    _x(name="subdoc_expiry_doc_flags", extras=g.subdoc_expiry_doc_flags_extras, when=_when_ext(8),
                       **_SUBDOC_VALUE, **_DOC_KEY))
_MULTI = {"value": ValueKind.GRAMMAR, "value_presence": Presence.REQUIRED, **_DOC_KEY}
SUBDOC_LOOKUPS: Final = ("SUBDOC_GET", "SUBDOC_EXISTS", "SUBDOC_GET_COUNT")
SUBDOC_MUTATIONS: Final = ("SUBDOC_DICT_ADD", "SUBDOC_DICT_UPSERT", "SUBDOC_DELETE", "SUBDOC_REPLACE",
                           "SUBDOC_ARRAY_PUSH_LAST", "SUBDOC_ARRAY_PUSH_FIRST", "SUBDOC_ARRAY_INSERT",
                           "SUBDOC_ARRAY_ADD_UNIQUE", "SUBDOC_COUNTER", "SUBDOC_REPLACE_BODY_WITH_XATTR")

SUBDOC_REQUESTS: Final[list[MessageSpec]] = [
    *(_spec(REQ, name, *_SUBDOC_LOOKUP) for name in SUBDOC_LOOKUPS),
    *(_spec(REQ, name, *_SUBDOC_MUTATION) for name in SUBDOC_MUTATIONS),
    _spec(REQ, "SUBDOC_MULTI_LOOKUP",
          _x(name="multi_lookup", when=_when_ext(0), value_grammar=g.multi_lookup_value, **_MULTI),
          _x(name="multi_lookup_doc_flags", extras=g.multi_doc_flags_extras, when=_when_ext(1),
             value_grammar=g.multi_lookup_value, **_MULTI)),
    _spec(REQ, "SUBDOC_MULTI_MUTATION",
          _x(name="multi_mutation", when=_when_ext(0), value_grammar=g.multi_mutation_value, **_MULTI),
          _x(name="multi_mutation_doc_flags", extras=g.multi_doc_flags_extras, when=_when_ext(1),
             value_grammar=g.multi_mutation_value, **_MULTI),
          _x(name="multi_mutation_expiry", extras=g.multi_expiry_extras, when=_when_ext(4),
             value_grammar=g.multi_mutation_value, **_MULTI),
          _x(name="multi_mutation_expiry_doc_flags", extras=g.multi_expiry_doc_flags_extras, when=_when_ext(5),
             value_grammar=g.multi_mutation_value, **_MULTI)),
]

# the statuses whose body is the per-path results: success, on a deleted document, and some paths failed
_RESULTS = (int(Status.SUCCESS), int(Status.SUBDOC_SUCCESS_DELETED), int(Status.SUBDOC_MULTI_PATH_FAILURE),
            int(Status.SUBDOC_MULTI_PATH_FAILURE_DELETED))
_DONE = (int(Status.SUCCESS), int(Status.SUBDOC_SUCCESS_DELETED))
_FAILED = (int(Status.SUBDOC_MULTI_PATH_FAILURE), int(Status.SUBDOC_MULTI_PATH_FAILURE_DELETED))
_FRAGMENT = {"value": ValueKind.AUTO, "value_presence": Presence.OPTIONAL}  # a JSON fragment, a count

SUBDOC_RESPONSES: Final[list[MessageSpec]] = [
    *(_response(name, _x(name="subdoc_result", when=(("status", _DONE), ("extras_length", 0)), **_FRAGMENT))
      for name in SUBDOC_LOOKUPS),
    *(_response(name, _x(name="subdoc_mutated", when=(("status", _DONE), ("extras_length", 0)), **_FRAGMENT),
                _x(name="subdoc_mutation_token", extras=g.mutation_token_extras,
                   when=(("status", _DONE), ("extras_length", 16)), **_FRAGMENT))
      for name in SUBDOC_MUTATIONS),
    _response("SUBDOC_MULTI_LOOKUP", _x(name="lookup_results", when=(("status", _RESULTS), ("extras_length", 0)),
                                        value=ValueKind.GRAMMAR, value_presence=Presence.OPTIONAL,
                                        value_grammar=g.multi_lookup_response_value)),
    _response("SUBDOC_MULTI_MUTATION",
              _x(name="mutation_results", when=(("status", _DONE), ("extras_length", 0)), value=ValueKind.GRAMMAR,
                 value_presence=Presence.OPTIONAL, value_grammar=g.multi_mutation_response_value),
              _x(name="mutation_results_token", extras=g.mutation_token_extras,
                 when=(("status", _DONE), ("extras_length", 16)), value=ValueKind.GRAMMAR,
                 value_presence=Presence.OPTIONAL, value_grammar=g.multi_mutation_response_value),
              _x(name="mutation_failure", when=(("status", _FAILED), ("extras_length", 0)), value=ValueKind.GRAMMAR,
                 value_presence=Presence.REQUIRED, value_grammar=g.multi_mutation_failure_value)),
]

# Range scans (kv_engine docs/range_scans/): the create's JSON and the scan uuid it answers with; each
# continue response says in its extras whether its value holds keys or documents, so one packet is enough.
RANGE_SCAN_REQUESTS: Final[list[MessageSpec]] = [
    # its JSON names the keys the scan starts and ends at: customer data
    _spec(REQ, "RANGE_SCAN_CREATE", _x(name="range_scan_create", when=_when_ext(0), value=ValueKind.JSON,
                                       value_presence=Presence.REQUIRED, value_content=Content.DATA)),
    _spec(REQ, "RANGE_SCAN_CONTINUE", _x(name="range_scan_continue", extras=g.range_scan_continue_extras,
                                         when=_when_ext(28))),
    _spec(REQ, "RANGE_SCAN_CANCEL", _x(name="range_scan_cancel", extras=g.range_scan_cancel_extras,
                                       when=_when_ext(16))),
]
_SCAN_DATA = (int(Status.SUCCESS), int(Status.RANGE_SCAN_MORE), int(Status.RANGE_SCAN_COMPLETE))
RANGE_SCAN_RESPONSES: Final[list[MessageSpec]] = [
    _response("RANGE_SCAN_CREATE", _x(name="range_scan_created", when=SUCCESS + _when_ext(0),
                                      value=ValueKind.GRAMMAR, value_presence=Presence.REQUIRED,
                                      value_grammar=g.range_scan_create_response_value)),
    _response("RANGE_SCAN_CONTINUE",
              _x(name="range_scan_data", extras=g.range_scan_continue_response_extras,
                 when=(("status", _SCAN_DATA), ("extras_length", 4)), value=ValueKind.GRAMMAR,
                 value_presence=Presence.OPTIONAL, value_select=("scan_flags",),
                 value_grammars={(0,): g.range_scan_keys_value, (1,): g.range_scan_documents_value})),
    _response("RANGE_SCAN_CANCEL", _x(name="range_scan_cancelled", when=SUCCESS + _when_ext(0))),
]

_WITH_META = tuple(_x(name=name, extras=extras, when=_when_ext(extras.sizeof()), **_DOC_VALUE, **_DOC_KEY)
                   for name, extras in (("with_meta", g.with_meta_extras),
                                        ("with_meta_nmeta", g.with_meta_nmeta_extras),
                                        ("with_meta_options", g.with_meta_options_extras),
                                        ("with_meta_options_nmeta", g.with_meta_options_nmeta_extras)))
WITH_META: Final = ("SET_WITH_META", "SETQ_WITH_META", "ADD_WITH_META", "ADDQ_WITH_META", "DEL_WITH_META",
                    "DELQ_WITH_META")
META_REQUESTS: Final[list[MessageSpec]] = [
    *(_spec(REQ, name, *_WITH_META) for name in WITH_META),
    _spec(REQ, "OBSERVE", _x(name="observe", when=_when_ext(0), value=ValueKind.GRAMMAR,
                             value_presence=Presence.REQUIRED, value_grammar=g.observe_request_value)),
]

_FOUND = _x(name="found", extras=g.get_response_extras, when=SUCCESS + _when_ext(4), **_DOC_VALUE)
_FOUND_KEY = _x(name="found_key", extras=g.get_response_extras, when=SUCCESS + _when_ext(4), **_DOC_VALUE,
                **_DOC_KEY)
# GETK and GETKQ send the key back with a miss too
_MISS_KEY = _x(name="error_key", when=_when_ext(0), key=KeyKind.DOCUMENT, key_presence=Presence.OPTIONAL,
               value=ValueKind.AUTO, value_presence=Presence.OPTIONAL)
# The rows of a failed request's answer: their text is the server's words only when the status is a failure
# (a success that fits no success row carries what it answers, a document's value as often as not)
ERROR_ROWS: Final = frozenset({ERROR_BODY.name, _MISS_KEY.name})
# a mutation's success: empty, or the mutation token when HELLO MutationSeqno is on
_MUTATED = (_x(name="mutated", when=SUCCESS + _when_ext(0)),
            _x(name="mutation_token", extras=g.mutation_token_extras, when=SUCCESS + _when_ext(16)))
_COUNTED = (_x(name="counter", when=SUCCESS + _when_ext(0), value=ValueKind.GRAMMAR,
               value_presence=Presence.REQUIRED, value_grammar=g.arithmetic_response_value),
            _x(name="counter_token", extras=g.mutation_token_extras, when=SUCCESS + _when_ext(16),
               value=ValueKind.GRAMMAR, value_presence=Presence.REQUIRED,
               value_grammar=g.arithmetic_response_value))
_META = (_x(name="meta", extras=g.get_meta_response_extras, when=SUCCESS + _when_ext(20)),
         _x(name="meta_v2", extras=g.get_meta_v2_response_extras, when=SUCCESS + _when_ext(21)))

KV_RESPONSES: Final[list[MessageSpec]] = [
    *(_response(name, _FOUND) for name in ("GET", "GETQ", "GAT", "GATQ", "GET_LOCKED", "GET_REPLICA")),
    *(_spec(RES, name, _FOUND_KEY, _MISS_KEY) for name in ("GETK", "GETKQ")),
    _response("TOUCH", _EMPTY_OK),
    _response("UNLOCK_KEY", _EMPTY_OK),
    _response("GET_RANDOM_KEY", _FOUND_KEY),
    *(_response(name, *_MUTATED) for name in ("SET", "SETQ", "ADD", "ADDQ", "REPLACE", "REPLACEQ", "DELETE",
                                              "DELETEQ", "APPEND", "APPENDQ", "PREPEND", "PREPENDQ")),
    *(_response(name, *_COUNTED) for name in ("INCREMENT", "INCREMENTQ", "DECREMENT", "DECREMENTQ")),
    *(_response(name, *_META) for name in ("GET_META", "GETQ_META")),
    _response("COLLECTIONS_GET_ID", _x(name="collection_id", extras=g.collections_get_id_response_extras,
                                       when=SUCCESS + _when_ext(12))),
    _response("COLLECTIONS_GET_SCOPE_ID", _x(name="scope_id", extras=g.collections_get_scope_id_response_extras,
                                             when=SUCCESS + _when_ext(12))),
    _response("COLLECTIONS_GET_MANIFEST", _x(name="manifest", when=SUCCESS + _when_ext(0), value=ValueKind.JSON,
                                             value_presence=Presence.REQUIRED, value_content=Content.NAMES)),
]

RESPONSES: Final[list[MessageSpec]] = [
    _response("DCP_OPEN", _EMPTY_OK),
    _response("DCP_ADD_STREAM", _x(name="add_stream_response", extras=g.add_stream_response_extras,
                                   when=SUCCESS + _when_ext(4))),
    _response("DCP_CLOSE_STREAM", _EMPTY_OK),
    _response("DCP_STREAM_REQ", _FAILOVER_LOG,
              _x(name="rollback", when=ROLLBACK + _when_ext(0), value=ValueKind.GRAMMAR,
                 value_presence=Presence.REQUIRED, value_grammar=g.rollback_value),
              _x(name="rollback_in_extras", extras=g.rollback_extras,
                 when=ROLLBACK + _when_ext(8),
                 note=("rollback_seqno_in_extras",
                       "the rollback seqno is in the extras (extras length 8): the early stream-request "
                       "page shows it so, but servers send it as an 8-byte value with extras length 0"))),
    _response("DCP_GET_FAILOVER_LOG", _FAILOVER_LOG),
    _response("DCP_SNAPSHOT_MARKER", _EMPTY_OK),
    _response("DCP_SET_VBUCKET_STATE", _EMPTY_OK),
    _response("DCP_NOOP", _EMPTY_OK),
    _response("DCP_CONTROL", _EMPTY_OK),
    _response("DCP_BUFFER_ACKNOWLEDGEMENT", _EMPTY_OK),
    _response("DCP_SYSTEM_EVENT", _EMPTY_OK),
    _response("DCP_CACHE_TRANSFER", _EMPTY_OK),
    _response("DCP_STREAM_END", _EMPTY_OK),
    _response("DCP_MUTATION", _EMPTY_OK),
    _response("DCP_DELETION", _EMPTY_OK),
    _response("DCP_EXPIRATION", _EMPTY_OK),
    _response("DCP_SEQNO_ACKNOWLEDGED", _EMPTY_OK),
    _response("HELLO", _x(name="hello_response", when=SUCCESS + _when_ext(0), value=ValueKind.GRAMMAR,
                          value_presence=Presence.OPTIONAL, value_grammar=g.hello_value)),
    _response("SASL_LIST_MECHS", _x(name="mechanisms", when=SUCCESS + _when_ext(0), value=ValueKind.TEXT,
                                    value_presence=Presence.OPTIONAL)),
    _spec(RES, "SASL_AUTH", _x(name="sasl_response", when=_when_ext(0), value=ValueKind.TEXT,
                               value_presence=Presence.OPTIONAL, value_content=Content.SECRET)),
    _spec(RES, "SASL_STEP", _x(name="sasl_response", when=_when_ext(0), value=ValueKind.TEXT,
                               value_presence=Presence.OPTIONAL, value_content=Content.SECRET)),
    _response("SELECT_BUCKET", _EMPTY_OK),
    _response("GET_ERROR_MAP", _x(name="error_map", when=SUCCESS + _when_ext(0), value=ValueKind.JSON,
                                  value_presence=Presence.REQUIRED)),
    _response("GET_CLUSTER_CONFIG", _x(name="cluster_config", when=SUCCESS + _when_ext(0),
                                       value=ValueKind.JSON, value_presence=Presence.OPTIONAL,
                                       value_content=Content.NAMES)),
    _response("GET_ALL_VB_SEQNOS", _x(name="vbucket_seqnos", when=SUCCESS + _when_ext(0),
                                      value=ValueKind.GRAMMAR, value_presence=Presence.OPTIONAL,
                                      value_grammar=g.get_all_vb_seqnos_value)),
    _response("OBSERVE_SEQNO", _x(name="observe_seqno_response", when=SUCCESS + _when_ext(0),
                                  value=ValueKind.GRAMMAR, value_presence=Presence.REQUIRED,
                                  value_select=("value_length",),
                                  value_grammars={(27,): g.observe_seqno_v0_value,
                                                  (43,): g.observe_seqno_v1_value})),
    _response("GET_FAILOVER_LOG", _FAILOVER_LOG),
    # one response per stat (key its name, value its text), then an empty one ending the group
    _spec(RES, "STAT", _x(name="stat_response", when=_when_ext(0), key=KeyKind.TEXT,
                          key_presence=Presence.OPTIONAL, value=ValueKind.AUTO, key_content=Content.MENTIONS,
                          value_presence=Presence.OPTIONAL, value_content=Content.MENTIONS, terminator="stat_end")),
    _response("VERSION", _x(name="version", when=SUCCESS + _when_ext(0), value=ValueKind.TEXT,
                            value_presence=Presence.OPTIONAL)),
    _response("NOOP", _EMPTY_OK),
]

META_RESPONSES: Final[list[MessageSpec]] = [
    *(_response(name, *_MUTATED) for name in WITH_META),
    _response("OBSERVE", _x(name="observe_response", when=SUCCESS + _when_ext(0), value=ValueKind.GRAMMAR,
                            value_presence=Presence.OPTIONAL, value_grammar=g.observe_response_value)),
]

SERVER_REQUESTS: Final[list[MessageSpec]] = [
    # the key is the bucket's name (reference 4.9)
    _spec(SREQ, "ClustermapChangeNotification",
          _x(name="clustermap_notification", extras=g.clustermap_notification_extras, when=_when_ext(4),
             key=KeyKind.TEXT, key_presence=Presence.OPTIONAL, key_content=Content.NAME, value=ValueKind.JSON,
             value_presence=Presence.OPTIONAL, value_content=Content.NAMES),
          _x(name="clustermap_notification_epoch", extras=g.clustermap_notification_epoch_extras,
             when=_when_ext(16), key=KeyKind.TEXT, key_presence=Presence.OPTIONAL, key_content=Content.NAME,
             value=ValueKind.JSON, value_presence=Presence.OPTIONAL, value_content=Content.NAMES)),
    # kv_engine docs/ExternalAuthProvider.md: a JSON request to the provider (its challenge is the client's SASL
    # message, a password in PLAIN's: a secret as SASL_AUTH's is), and the users it should refresh
    _spec(SREQ, "Authenticate", _x(name="authenticate", when=_when_ext(0), value=ValueKind.SECRET,
                                   value_presence=Presence.REQUIRED, value_content=Content.SECRET)),
    _spec(SREQ, "ActiveExternalUsers", _x(name="active_external_users", when=_when_ext(0), value=ValueKind.JSON,
                                          value_presence=Presence.REQUIRED, value_content=Content.NAME)),
    _spec(SREQ, "GetAuthorization", _x(name="get_authorization", when=_when_ext(0), key=KeyKind.TEXT,
                                       key_presence=Presence.REQUIRED, key_content=Content.NAME)),
]

# The client's answers to them (magic 0x83): a status, and for the provider's requests a JSON body.
SERVER_RESPONSES: Final[list[MessageSpec]] = [
    _spec(SRES, name, _x(name="server_request_answer", when=_when_ext(0), value=ValueKind.AUTO,
                         value_presence=Presence.OPTIONAL, value_content=Content.DATA))
    for name in ("ClustermapChangeNotification", "Authenticate", "ActiveExternalUsers", "GetAuthorization")
]


# --- UPR transport draft overlay (seed 001) ------------------------------------------------------------
def _upr(magic_class: int, name: str, *variants: Variant) -> MessageSpec:
    opcode = UPR_OPCODES.code_of[name]
    return MessageSpec(name, opcode, magic_class, variants, UPR_OPCODES.meaning_of[opcode],
                       type_field="request_type", has_status=False, vocabulary=UPR_OPCODES)


def _type(n: int) -> tuple[tuple[str, int | tuple[int, ...]], ...]:
    return (("request_type", n),)


_UPR_KEY = {"key": KeyKind.TEXT, "key_presence": Presence.REQUIRED, "key_content": Content.DATA}  # documents' keys

UPR_DRAFT_ROWS: Final[list[MessageSpec]] = [
    _upr(REQ, "UPR_REQUEST",
         _x(name="upr_stream_request", label="Stream Request", extras=g.upr_stream_req_extras,
            when=_type(1), **_UPR_KEY),
         _x(name="upr_failover_log_request", label="Failover Log Request", when=_type(2))),
    _upr(RES, "UPR_RESPONSE",
         _x(name="upr_ok", label="OK", when=_type(1)),
         _x(name="upr_failover_log_response", label="Failover Log Response",
            when=(("request_type", 2), ("has_value", 1)),
            value=ValueKind.GRAMMAR, value_presence=Presence.REQUIRED,
            value_grammar=g.upr_failover_log_value,
            note=("response_type_conflict", "the draft labels this failover-log response type 2, which "
                  "its own response-type table defines as Not My VBucket")),
         _x(name="upr_not_my_vbucket", label="Not My VBucket", when=_type(2)),
         _x(name="upr_rollback", label="Rollback", when=_type(3), value=ValueKind.GRAMMAR,
            value_presence=Presence.REQUIRED, value_grammar=g.rollback_value)),
    _upr(RES, "UPR_STREAM_BEGIN", _x(name="upr_stream_begin", label="Stream Begin")),
    _upr(RES, "UPR_STREAM_MESSAGE",
         _x(name="upr_snapshot_start", label="Snapshot Start", when=_type(1)),
         _x(name="upr_snapshot_end", label="Snapshot End", when=_type(2)),
         _x(name="upr_mutation", label="Mutation", when=_type(3), extras=g.upr_mutation_extras,
            value=ValueKind.DOCUMENT, value_presence=Presence.OPTIONAL, **_UPR_KEY),
         _x(name="upr_deletion", label="Deletion", when=_type(4), extras=g.upr_mutation_extras, **_UPR_KEY),
         _x(name="upr_expiration", label="Expiration", when=_type(5), extras=g.upr_mutation_extras,
            **_UPR_KEY),
         _x(name="upr_flush", label="Flush", when=_type(6))),
    _upr(RES, "UPR_STREAM_CLOSE",
         _x(name="upr_stream_end_ok", label="OK", when=_type(1)),
         _x(name="upr_stream_end_state_changed", label="State Changed", when=_type(2))),
]


@dataclass(frozen=True)
class Dialect:
    """A registry: which spec describes (magic class, opcode), and the one table of opcode names both
    directions use: :meth:`opcode_name` is what decode calls an opcode, :meth:`resolve` reads it back."""

    name: str
    table: Mapping[tuple[int, int], MessageSpec]
    # documented layouts are authoritative over the header's extras length (the draft's field tables)
    layout_authoritative: bool = False
    _codes: Mapping[tuple[int, str], int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_codes", {(cls, spec.name): code for (cls, code), spec in self.table.items()})

    def spec(self, magic_class: int, opcode: int) -> MessageSpec | None:
        return self.table.get((magic_class, opcode))

    def opcode_name(self, magic_class: int | None, opcode: int) -> str:
        """The row's name, else the kv_engine name of the magic class's table, else ``0x..``."""
        spec = self.table.get((magic_class, opcode)) if magic_class is not None else None
        return spec.name if spec is not None else opcode_vocabulary(magic_class).name(opcode)

    def resolve(self, magic_class: int | None, opcode: int | str) -> tuple[int, MessageSpec | None]:
        """The number and row of an opcode given as a number or as any name :meth:`opcode_name` gives
        (``0x..`` and decimal strings too); a name that is not this dialect's row name for its number (another
        dialect's name, a number as text) has no row, as decode gave it none. KeyError for an unknown name."""
        if isinstance(opcode, int):
            return opcode, self.table.get((magic_class, opcode)) if magic_class is not None else None
        if magic_class is not None:
            code = self._codes.get((magic_class, opcode))
            if code is not None:
                return code, self.table[(magic_class, code)]
        return opcode_vocabulary(magic_class).code(opcode), None


def _table(*groups: list[MessageSpec]) -> dict[tuple[int, int], MessageSpec]:
    table: dict[tuple[int, int], MessageSpec] = {}
    for group in groups:
        for spec in group:
            key = (spec.magic_class, spec.opcode)
            if key in table:
                raise ValueError(f"duplicate registry row {spec.name}")
            table[key] = spec
    return table


DCP: Final = Dialect("dcp", _table(DCP_REQUESTS, OTHER_REQUESTS, KV_REQUESTS, SUBDOC_REQUESTS, META_REQUESTS,
                                   RANGE_SCAN_REQUESTS, RESPONSES, KV_RESPONSES, SUBDOC_RESPONSES, META_RESPONSES,
                                   RANGE_SCAN_RESPONSES, SERVER_REQUESTS,
                                   SERVER_RESPONSES))
_UPR_TABLE = dict(DCP.table)
_UPR_TABLE.update({(s.magic_class, s.opcode): s for s in UPR_DRAFT_ROWS})
UPR_DRAFT: Final = Dialect("upr-draft", _UPR_TABLE, layout_authoritative=True)
DIALECTS: Final[dict[str, Dialect]] = {d.name: d for d in (DCP, UPR_DRAFT)}


def request_opcodes(test: Callable[[MessageSpec], bool]) -> frozenset[int]:
    """The opcodes of the DCP dialect's client requests (magic 0x80) whose row passes ``test``: the opcode
    sets code branches on, derived from the rows (plain ints, for the per-message path)."""
    return frozenset(spec.opcode for (magic, _), spec in DCP.table.items() if magic == REQ and test(spec))


def names(opcodes: frozenset[int]) -> frozenset[str]:
    """The kv_engine names of request opcodes (what a record's ``opcode`` holds)."""
    return frozenset(DCP.table[REQ, code].name for code in opcodes)


# Sent by the producer on a DCP connection.
PUSHED_OPCODES: Final = request_opcodes(lambda spec: spec.pushed is not Pushed.NO)
# Pushed on a stream the consumer opened: carry the stream request's opaque.
STREAM_OPCODES: Final = request_opcodes(lambda spec: spec.on_stream)
# Stream items: each takes a by_seqno inside the current snapshot.
ITEM_OPCODES: Final = request_opcodes(lambda spec: spec.item is not Item.NONE)
# Committed document changes: mutation, deletion, expiration (what `stream` counts as items).
CHANGE_OPCODES: Final = request_opcodes(lambda spec: spec.item is Item.CHANGE)
# Stream items about a document, with their seqno (changes and prepares).
DOCUMENT_ITEM_OPCODES: Final = request_opcodes(lambda spec: spec.document_item)
# Pushed on a stream with a by_seqno: the items and DCP_SEQNO_ADVANCED, which move a stream's position.
BY_SEQNO_OPCODES: Final = request_opcodes(lambda spec: spec.on_stream and spec.by_seqno)
# Pushed on a stream, taking a seqno of the vbucket's history: opcode -> the extras field that holds it
# (the items, DCP_SEQNO_ADVANCED, DCP_COMMIT and DCP_ABORT). A stream's seqnos run through all of them.
SEQNO_FIELDS: Final = {spec.opcode: spec.seqno_field for (magic, _), spec in DCP.table.items()
                       if magic == REQ and spec.seqno_field is not None}
# Pushed messages the consumer answers, so their response can be matched.
ANSWERED_OPCODES: Final = request_opcodes(lambda spec: spec.answered)
# Requests a server runs before SASL authentication succeeds.
BEFORE_AUTH_OPCODES: Final = request_opcodes(lambda spec: spec.before_auth)
# Client requests about one vbucket (stream setup, document operations), not about the connection.
VBUCKET_OPCODES: Final = request_opcodes(lambda spec: spec.addresses_vbucket)


_OPCODE_VOCABULARIES: Final = (OPCODES, SERVER_OPCODES, UPR_OPCODES)


def opcode_names(code: int | None = None) -> frozenset[str]:
    """Every name a record's ``opcode`` can have in any dialect, or those of one opcode number (with the
    ``0x..`` a record shows for a number no table knows)."""
    specs = {spec.name for dialect in DIALECTS.values() for spec in dialect.table.values()
             if code is None or spec.opcode == code}
    if code is None:
        return frozenset(specs.union(*(vocabulary.code_of for vocabulary in _OPCODE_VOCABULARIES)))
    return frozenset(specs.union(vocabulary.name(code) for vocabulary in _OPCODE_VOCABULARIES))


def all_variants() -> list[tuple[Dialect, MessageSpec, Variant]]:
    """Every (dialect, spec, variant) row once; UPR rows are listed under the UPR dialect only."""
    rows = [(DCP, spec, variant) for spec in DCP.table.values() for variant in spec.variants]
    rows += [(UPR_DRAFT, spec, variant) for spec in UPR_DRAFT_ROWS for variant in spec.variants]
    return rows

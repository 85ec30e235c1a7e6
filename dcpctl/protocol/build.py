"""Wire bytes from typed values: the requests and replies the client, the producer and the tests send.

A builder takes the opcode (an :class:`~dcpctl.protocol.constants.Opcode` member or its number), the header
fields, the key and value as bytes, and the fields of one declared variant as keywords: its extras fields,
and for a value the registry declares with a grammar, that grammar's fields (lists of entries as tuples in
wire order). The variant is the registry row of that opcode whose declared fields are exactly the ones given
(and, for a reply, whose status condition the status meets); its extras are packed by the row's own layout
and its value built by the row's grammar, so nothing here restates the wire format. No record dict is made on
the way: :mod:`dcpctl.protocol.encode` is the JSON boundary, and these builders give the bytes it gives for
the same message (the tests hold them together).

A value is sent as given: a builder does not compress or add xattrs (the caller's datatype says what the
value is). A field that does not fit its declared width, or a set of fields no row declares, is a
``ValueError``: the callers are the program itself, not the user.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from construct import Const, Construct, Container, GreedyRange

from dcpctl.protocol import frameinfo, walk
from dcpctl.protocol import grammar as g
from dcpctl.protocol.constants import Magic, Status
from dcpctl.protocol.message import HEADER
from dcpctl.protocol.registry import DCP, Dialect, KeyKind, MessageSpec, Variant
from dcpctl.protocol.value import leb128_encode

# The largest key and framing-extras lengths the alternative encoding's one byte each can say.
MAX_ALT_LENGTH: Final = 0xFF
_STREAM_ID: Final = struct.Struct(">H")

FieldValue = int | Sequence[Any]


@dataclass(frozen=True, slots=True)
class FrameInfo:
    """One flexible-framing element: its id and its data, as on the wire."""

    id: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Shape:
    """One declared shape, planned once: the registry row that the given field names select, and the header
    with that row's extras packed by one ``struct`` made of the header's format and the row's layout.

    :meth:`pack` is the fast path a producer sends items with; :func:`request` and :func:`response` go
    through it too, so there is one way to lay a message out.
    """

    opcode: int
    name: str  # the opcode's name, for messages
    variant: Variant | None
    names: tuple[str, ...]  # the extras fields, in wire order
    extras: struct.Struct | None
    fixed: struct.Struct  # header and extras in one call (no frame infos)
    grammar: Construct | None
    document_key: bool

    def pack(self, magic: int, word: int, opaque: int, cas: int, datatype: int, key: bytes, value: bytes,
             extras: Sequence[int] = ()) -> bytes:
        """The message without frame infos: ``extras`` are the values of :attr:`names`, in that order."""
        size = self.fixed.size - HEADER.size
        return b"".join((self.fixed.pack(magic, self.opcode, len(key), size, datatype, word,
                                         size + len(key) + len(value), opaque, cas, *extras), key, value))

    def pack_framed(self, magic: int, word: int, opaque: int, cas: int, datatype: int, key: bytes, value: bytes,
                    extras: Sequence[int], framing: bytes) -> bytes:
        """The message with frame infos (the alternative encoding: one byte each for their length and the key's)."""
        if len(framing) > MAX_ALT_LENGTH or len(key) > MAX_ALT_LENGTH:
            raise ValueError("the alternative encoding allows at most 255 bytes of frame infos and key")
        packed = self.extras.pack(*extras) if self.extras is not None else b""
        header = HEADER.pack(magic, self.opcode, len(framing) << 8 | len(key), len(packed), datatype, word,
                             len(framing) + len(packed) + len(key) + len(value), opaque, cas)
        return b"".join((header, framing, packed, key, value))


def shape(opcode: int, *names: str, response: bool = False, status: int | None = None,
          dialect: Dialect = DCP) -> Shape:
    """The shape of ``opcode`` whose row declares exactly the fields ``names`` (extras and value grammar)."""
    magic_class = Magic.CLIENT_RESPONSE if response else Magic.CLIENT_REQUEST
    return _plan(dialect, magic_class, int(opcode), status if response else None, tuple(sorted(names)))


def request(opcode: int, *, vbucket: int = 0, opaque: int = 0, cas: int = 0, datatype: int = 0,
            key: bytes = b"", value: bytes = b"", collection_id: int | None = None, stream_id: int | None = None,
            frame_infos: Sequence[FrameInfo] = (), dialect: Dialect = DCP, **fields: FieldValue) -> bytes:
    """A request (magic 0x80, or 0x08 with frame infos): ``stream_id`` adds the DCP stream-id frame info,
    ``collection_id`` the LEB128 prefix of a document key, or the extras or value field of that name of a
    request without one (GET_RANDOM_KEY, DCP_SYSTEM_EVENT), as decode names both."""
    spec = dialect.spec(Magic.CLIENT_REQUEST, int(opcode))
    if collection_id is not None and spec is not None and not spec.document_key and any(
            "collection_id" in _field_names(v) for v in spec.variants):
        fields = {**fields, "collection_id": collection_id}
        collection_id = None
    plan = _plan(dialect, Magic.CLIENT_REQUEST, int(opcode), None, tuple(sorted(fields)))
    framing = _framing(frame_infos, stream_id)
    return _build(plan, Magic.ALT_CLIENT_REQUEST if framing else Magic.CLIENT_REQUEST, vbucket, opaque, cas,
                  datatype, key, value, collection_id, framing, fields)


def response(opcode: int, *, status: int = Status.SUCCESS, opaque: int = 0, cas: int = 0, datatype: int = 0,
             key: bytes = b"", value: bytes = b"", frame_infos: Sequence[FrameInfo] = (), dialect: Dialect = DCP,
             **fields: FieldValue) -> bytes:
    """A response (magic 0x81, or 0x18 with frame infos) with its status."""
    plan = _plan(dialect, Magic.CLIENT_RESPONSE, int(opcode), int(status), tuple(sorted(fields)))
    framing = _framing(frame_infos, None)
    return _build(plan, Magic.ALT_CLIENT_RESPONSE if framing else Magic.CLIENT_RESPONSE, status, opaque, cas,
                  datatype, key, value, None, framing, fields)


def server_request(opcode: int, *, opaque: int = 0, cas: int = 0, datatype: int = 0, key: bytes = b"",
                   value: bytes = b"", dialect: Dialect = DCP, **fields: FieldValue) -> bytes:
    """A server-initiated request (magic 0x82, HELLO Duplex): ``opcode`` is a
    :class:`~dcpctl.protocol.constants.ServerOpcode`, its variant chosen by the fields given as for
    :func:`request` (ClustermapChangeNotification: ``revision`` alone, or ``epoch`` and ``revision``). The
    vbucket field is reserved and sent as 0, as kv_engine's RequestBuilder leaves it."""
    plan = _plan(dialect, Magic.SERVER_REQUEST, int(opcode), None, tuple(sorted(fields)))
    return _build(plan, Magic.SERVER_REQUEST, 0, opaque, cas, datatype, key, value, None, b"", fields)


def server_response(opcode: int, *, status: int = Status.SUCCESS, opaque: int = 0, cas: int = 0,
                    datatype: int = 0, key: bytes = b"", value: bytes = b"", dialect: Dialect = DCP) -> bytes:
    """The client's answer to a server-initiated request (magic 0x83): a status, and for the external
    authentication provider's requests a JSON value; a notification is answered empty."""
    plan = _plan(dialect, Magic.SERVER_RESPONSE, int(opcode), int(status), ())
    return _build(plan, Magic.SERVER_RESPONSE, status, opaque, cas, datatype, key, value, None, b"", {})


def stream_id_frame(stream_id: int) -> bytes:
    """The frame info that carries a DCP stream id, encoded."""
    return frameinfo.encode_element(frameinfo.DCP_STREAM_ID, _STREAM_ID.pack(stream_id))


def server_duration_frame(micros: int) -> FrameInfo:
    """A response's frame info with the server's receive-to-send time (HELLO Tracing, reference 2.3), its
    data built by its declared grammar from the duration encoded as kv_engine encodes it."""
    data = g.server_duration_frame.build({"server_duration_encoded": frameinfo.encode_micros(micros)})
    return FrameInfo(frameinfo.SERVER_DURATION, data)


def _framing(frame_infos: Sequence[FrameInfo], stream_id: int | None) -> bytes:
    if stream_id is None and not frame_infos:
        return b""
    framing = b"".join(frameinfo.encode_element(info.id, info.data) for info in frame_infos)
    return framing + stream_id_frame(stream_id) if stream_id is not None else framing


def _build(plan: Shape, magic: int, word: int, opaque: int, cas: int, datatype: int, key: bytes, value: bytes,
           collection_id: int | None, framing: bytes, fields: Mapping[str, FieldValue]) -> bytes:
    if plan.grammar is not None:
        value = bytes(plan.grammar.build(_grammar_input(plan.grammar, fields))) + value
    if collection_id is not None:
        if not plan.document_key:
            raise ValueError(f"{plan.name} has no document key for a collection id")
        key = leb128_encode(collection_id) + key
    extras: list[Any] = [fields[name] for name in plan.names]
    try:
        if framing:
            return plan.pack_framed(magic, word, opaque, cas, datatype, key, value, extras, framing)
        return plan.pack(magic, word, opaque, cas, datatype, key, value, extras)
    except struct.error as exc:
        raise ValueError(f"{plan.name}: {exc}") from None


_PLANS: dict[tuple[str, int, int, int | None, tuple[str, ...]], Shape] = {}
# Shapes kept: one per (dialect, opcode, status, field names) a program builds, a few dozen; the bound only
# keeps a caller that builds from arbitrary names from growing the cache without end.
MAX_PLANS: Final = 4096


def _plan(dialect: Dialect, magic_class: int, opcode: int, status: int | None, names: tuple[str, ...]) -> Shape:
    key = (dialect.name, magic_class, opcode, status, names)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _new_plan(dialect, magic_class, opcode, status, names)
        if len(_PLANS) < MAX_PLANS:
            _PLANS[key] = plan
    return plan


def _new_plan(dialect: Dialect, magic_class: int, opcode: int, status: int | None, names: tuple[str, ...]) -> Shape:
    spec = dialect.spec(magic_class, opcode)
    if spec is None:
        if names:
            raise ValueError(f"{dialect.opcode_name(magic_class, opcode)} has no declared fields, "
                             f"not {', '.join(names)}")
        return Shape(opcode, dialect.opcode_name(magic_class, opcode), None, (), None, HEADER, None,
                     document_key=False)
    for variant in spec.variants:
        if not _status_fits(variant, status):
            continue
        layout = variant.layout
        layout_names = layout.names if layout is not None else ()
        rest = set(names) - set(layout_names)
        if not set(layout_names) <= set(names):
            continue
        grammar = _grammar_for(variant, rest)
        if rest and grammar is None:
            continue
        fixed = struct.Struct(HEADER.format + layout.codec.format.lstrip("<>=!")) if layout is not None else HEADER
        return Shape(opcode, spec.name, variant, layout_names, layout.codec if layout is not None else None, fixed,
                     grammar, variant.key is KeyKind.DOCUMENT)
    raise ValueError(_no_row(spec, names))


def _status_fits(variant: Variant, status: int | None) -> bool:
    return all(status is None or status in (wanted if isinstance(wanted, tuple) else (wanted,))
               for name, wanted in variant.when if name == "status")


def _field_names(variant: Variant) -> set[str]:
    """The names of a row's extras fields and of its value grammars' fields."""
    names = set(variant.layout.names) if variant.layout is not None else set()
    for grammar in variant.grammars:
        names.update(name for name, _ in walk.top_fields(grammar))
    return names


def _grammar_for(variant: Variant, names: set[str]) -> Construct | None:
    """The row's value grammar whose fields are exactly ``names`` (Const fields are the grammar's own)."""
    if not names:
        return None
    for grammar in variant.grammars:
        if {name for name, sub in walk.top_fields(grammar) if not isinstance(sub, Const)} == names:
            return grammar
    return None


def _grammar_input(grammar: Construct, fields: Mapping[str, Any]) -> Container:
    """The given fields as the grammar builds them: Const fields filled by the grammar, entries by position."""
    out = Container()
    for name, sub in walk.top_fields(grammar):
        if isinstance(sub, Const):
            out[name] = None
        elif isinstance(sub, GreedyRange) and (entry := walk.top_fields(sub.subcon)):
            entry_names = [entry_name for entry_name, _ in entry]
            out[name] = [Container(zip(entry_names, row, strict=True)) for row in fields[name]]
        else:
            out[name] = fields[name]
    return out


def _no_row(spec: MessageSpec, names: tuple[str, ...]) -> str:
    declared = [f"{v.name}: {', '.join(v.layout.names) if v.layout else '-'}" for v in spec.variants]
    return f"no {spec.name} row declares exactly {', '.join(names) or 'no fields'} ({'; '.join(declared)})"

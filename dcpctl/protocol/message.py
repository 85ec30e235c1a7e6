"""Decoding one framed packet into a :class:`Message`, and a message into its JSON record.

Theory of operation. ``decode`` does the cheap, always-needed work: the 24-byte header (one ``struct``
unpack), the registry lookup (cached per header shape), frame infos, and the extras through the variant's
fixed layout, which is derived from its construct declaration. Anything more expensive (snappy, xattrs,
JSON, value grammars) waits until a renderer asks for :meth:`Message.record`, so a filter on ``opcode`` or
``by_seqno`` never touches values. Nothing here raises on bad input: every departure from the declared
layout becomes a named :class:`Diagnostic` and the bytes are kept, so encode can give them back exactly.

Two framing modes exist. From a byte stream the framer hands over exactly ``24 + total_body_length`` bytes.
A single packet given on its own (a hexdump, a document's diagram) may disagree with its own length fields;
then ``lenient`` decoding takes the bytes present as the body and says so in a diagnostic.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, Final

from dcpctl.protocol import frameinfo
from dcpctl.protocol import stream_request_value as srv
from dcpctl.protocol import walk
from dcpctl.protocol.constants import (
    ALT_MAGICS,
    DATATYPE_JSON,
    DATATYPE_SNAPPY,
    DATATYPE_XATTR,
    MAGIC_CLASS,
    MAGICS,
    OPCODES,
    RESPONSE_MAGICS,
    SERVER_OPCODES,
    STATUSES,
)
from dcpctl.protocol.diagnostic import Diagnostic, diagnostic
from dcpctl.protocol.grammar import HEADER_LENGTH
from dcpctl.protocol.registry import (
    DCP,
    Dialect,
    KeyKind,
    MessageSpec,
    Presence,
    ValueKind,
    Variant,
)
from dcpctl.protocol.value import (
    leb128_decode,
    parse_xattrs,
    snappy_decompress,
    text_or_hex,
)

HEADER: Final = struct.Struct(">BBHBBHIIQ")
# Datatypes a deletion may carry (reference 3.10, valid_dcp_delete_datatype).
DELETION_DATATYPES: Final = frozenset({0, 2, 4, 6, 5, 7})
DOCUMENT_OPCODES_WITH_SEQNO: Final = frozenset({0x57, 0x58, 0x59, 0x60})


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    """How to read packets: the dialect, negotiated state known from outside, secrecy."""

    dialect: Dialect = DCP
    collections: bool | None = None  # None: not known (the key prefix is not split)
    show_secrets: bool = False
    lenient: bool = False  # a standalone packet: the bytes present are the body


DEFAULT_OPTIONS: Final = DecodeOptions()


class Message:
    """One decoded packet; ``raw`` holds its exact bytes and ``offset`` where they started."""

    __slots__ = (
        "_record",
        "body_end",
        "cas",
        "datatype",
        "diagnostics",
        "extras",
        "extras_length",
        "extras_offset",
        "frame_infos",
        "framing_extras_length",
        "key_length",
        "key_offset",
        "magic",
        "offset",
        "opaque",
        "opcode",
        "options",
        "raw",
        "spec",
        "total_body_length",
        "value_offset",
        "variant",
        "vbucket_or_status",
    )

    def __init__(self, raw: bytes, offset: int, options: DecodeOptions) -> None:
        self.raw = raw
        self.offset = offset
        self.options = options
        self.diagnostics: list[Diagnostic] = []
        self.frame_infos: list[frameinfo.FrameInfo] = []
        self.extras: dict[str, int] | None = None
        self.spec: MessageSpec | None = None
        self.variant: Variant | None = None
        self._record: dict[str, Any] | None = None

    # --- header views ---------------------------------------------------------------------------
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
    def opcode_name(self) -> str:
        if self.spec is not None:
            return self.spec.name
        vocab = SERVER_OPCODES if MAGIC_CLASS.get(self.magic) in (0x82, 0x83) else OPCODES
        return vocab.name(self.opcode)

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
        self.diagnostics.append(diagnostic(name, message, offset, length))

    # --- the JSON record --------------------------------------------------------------------------
    def record(self) -> dict[str, Any]:
        """The JSON contract's object for this message (computed once, values decoded here)."""
        if self._record is None:
            self._record = _record(self)
        return self._record


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


_CACHE: dict[tuple[str, int, int, int, int, int, int, int],
             tuple[MessageSpec | None, Variant | None]] = {}
_CACHE_LIMIT: Final = 4096  # distinct header shapes; more only means recomputing


def _resolve(dialect: Dialect, magic: int, opcode: int, extlen: int, word: int, type_byte: int,
             byte0: int, has_value: int) -> tuple[MessageSpec | None, Variant | None]:
    key = (dialect.name, magic, opcode, extlen, word, type_byte, byte0, has_value)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    magic_class = MAGIC_CLASS.get(magic)
    spec = dialect.spec(magic_class, opcode) if magic_class is not None else None
    variant = select_variant(spec, magic, extlen, word, type_byte, byte0, has_value) if spec else None
    if len(_CACHE) < _CACHE_LIMIT:
        _CACHE[key] = (spec, variant)
    return spec, variant


def decode(raw: bytes, offset: int = 0, options: DecodeOptions = DEFAULT_OPTIONS) -> Message:
    """Decode one packet (header and body); never raises."""
    msg = Message(raw, offset, options)
    n = len(raw)
    if n < HEADER_LENGTH:
        padded = raw + bytes(HEADER_LENGTH - n)
        _header(msg, padded)
        msg.add("truncated", f"packet has {n} bytes, shorter than the 24-byte header", 0, n)
        msg.key_offset = msg.value_offset = msg.body_end = msg.extras_offset = n
        return msg
    _header(msg, raw)
    magic = msg.magic
    if magic not in MAGIC_CLASS:
        msg.add("unknown_magic", f"magic 0x{magic:02x} is not a known magic", 0, 1)
    body_end = HEADER_LENGTH + msg.total_body_length
    if body_end != n:
        if n < body_end:
            msg.add("truncated" if not options.lenient else "body_length_mismatch",
                    f"total body length says {msg.total_body_length} bytes, {n - HEADER_LENGTH} present",
                    8, 4)
        else:
            msg.add("body_length_mismatch",
                    f"total body length says {msg.total_body_length} bytes, {n - HEADER_LENGTH} present",
                    8, 4)
        body_end = n if options.lenient or n < body_end else body_end
    msg.body_end = body_end
    fe = msg.framing_extras_length
    pos = HEADER_LENGTH
    if fe:
        msg.frame_infos, diags = frameinfo.parse(raw, pos, min(pos + fe, body_end), msg.is_response)
        msg.diagnostics.extend(diags)
        pos += fe
    extlen = msg.extras_length
    declared_value = msg.total_body_length - fe - extlen - msg.key_length
    byte0 = raw[pos] if extlen and pos < n else -1
    spec, variant = _resolve(options.dialect, magic, msg.opcode, extlen, msg.vbucket_or_status,
                             msg.datatype, byte0, 1 if declared_value > 0 or (options.lenient and body_end > pos + extlen
                                                                + msg.key_length) else 0)
    if msg.spec is None:
        msg.spec = spec
    msg.variant = variant
    msg.extras_offset = pos
    if spec is not None and variant is None:
        allowed = sorted({v.extras_length for v in spec.variants})
        msg.add("illegal_extras_length", f"{spec.name} with extras length {extlen}; the layouts allow "
                + ", ".join(str(a) for a in allowed), 4, 1)
    elif spec is None and magic in MAGIC_CLASS:
        msg.add("unknown_opcode", f"opcode 0x{msg.opcode:02x} is not in the {options.dialect.name} "
                "registry; body kept raw", 1, 1)
    size = extlen
    if variant is not None:
        layout = variant.layout
        size = layout.size if layout else 0
        if size != extlen:
            msg.add("extras_length_mismatch", f"header extras length {extlen}, the documented "
                    f"{variant.name} layout has {size} bytes; decoded as documented", 4, 1)
        if layout is not None:
            if pos + size <= body_end:
                msg.extras = layout.unpack(raw, pos)
            else:
                msg.add("truncated", f"extras need {size} bytes, {max(body_end - pos, 0)} present", pos,
                        max(body_end - pos, 0))
        if variant.note is not None:
            msg.add(*variant.note)
    key_offset = min(pos + size, body_end)
    value_offset = key_offset + msg.key_length
    if value_offset > body_end:
        msg.add("lengths_exceed_body", f"key length {msg.key_length} runs past the body", 2, 2)
        value_offset = body_end
    msg.key_offset = key_offset
    msg.value_offset = value_offset
    if variant is not None:
        _check(msg, variant)
    return msg


def _header(msg: Message, raw: bytes) -> None:
    (magic, opcode, key_length, extlen, datatype, vbucket_or_status, total, opaque,
     cas) = HEADER.unpack_from(raw)
    msg.magic = magic
    msg.opcode = opcode
    if magic in ALT_MAGICS:
        msg.framing_extras_length = key_length >> 8
        msg.key_length = key_length & 0xFF
    else:
        msg.framing_extras_length = 0
        msg.key_length = key_length
    msg.extras_length = extlen
    msg.datatype = datatype
    msg.vbucket_or_status = vbucket_or_status
    msg.total_body_length = total
    msg.opaque = opaque
    msg.cas = cas


def _check(msg: Message, variant: Variant) -> None:
    """Rules a decoder can check on one packet without state."""
    key_length = msg.value_offset - msg.key_offset
    if variant.key_presence is Presence.FORBIDDEN and key_length:
        msg.add("must_not_have_key", f"{msg.opcode_name} must not have a key", msg.key_offset, key_length)
    elif variant.key_presence is Presence.REQUIRED and not key_length:
        msg.add("must_have_key", f"{msg.opcode_name} must have a key", 2, 2)
    value_length = msg.body_end - msg.value_offset
    if variant.value_presence is Presence.FORBIDDEN and value_length:
        msg.add("must_not_have_value", f"{msg.opcode_name} must not have a value", msg.value_offset,
                value_length)
    elif variant.value_presence is Presence.REQUIRED and not value_length:
        msg.add("must_have_value", f"{msg.opcode_name} must have a value", 8, 4)
    spec = msg.spec
    if spec is not None and spec.type_field == "datatype" and msg.datatype > 0x07:
        msg.add("invalid_datatype", f"datatype 0x{msg.datatype:02x} has bits above 0x07", 5, 1)
    extras = msg.extras
    if extras is None:
        return
    if extras.get("nmeta"):
        msg.add("nmeta_not_zero", f"nmeta is {extras['nmeta']}; servers reject extended meta",
                msg.extras_offset + (16 if msg.opcode == 0x58 else 28), 2)
    if msg.opcode in DOCUMENT_OPCODES_WITH_SEQNO and extras.get("by_seqno") == 0 and not msg.is_response:
        msg.add("by_seqno_zero", "by_seqno 0 is invalid", msg.extras_offset, 8)
    if msg.opcode == 0x58 and not msg.is_response and msg.datatype not in DELETION_DATATYPES:
        msg.add("invalid_deletion_datatype", f"datatype 0x{msg.datatype:02x} is not allowed on a deletion",
                5, 1)
    for name, vocab in variant.vocabularies.items():
        value = extras.get(name)
        if value is None or name not in ("flags", "snapshot_flags", "oso_flags"):
            continue
        known = 0
        for code in vocab.name_of:
            known |= code
        if value & ~known:
            msg.add("unknown_flags", f"{name} 0x{value:x} has undefined bits 0x{value & ~known:x}",
                    msg.extras_offset, 4)


# --- records ----------------------------------------------------------------------------------------
def _record(msg: Message) -> dict[str, Any]:
    spec = msg.spec
    rec: dict[str, Any] = {"offset": msg.offset, "magic": MAGICS.name(msg.magic), "opcode": msg.opcode_name}
    if spec is not None and spec.type_field != "datatype":
        rec[spec.type_field] = msg.datatype
        if msg.variant is not None and msg.variant.label:
            rec[f"{spec.type_field}_name"] = msg.variant.label
    if msg.has_status:
        rec["status"] = STATUSES.name(msg.vbucket_or_status, 4)
    else:
        rec["vbucket"] = msg.vbucket_or_status
    rec["opaque"] = msg.opaque
    rec["cas"] = msg.cas
    if spec is None or spec.type_field == "datatype":
        rec["datatype"] = msg.datatype
    rec["key_length"] = msg.key_length
    rec["extras_length"] = msg.extras_length
    if msg.magic in ALT_MAGICS:
        rec["framing_extras_length"] = msg.framing_extras_length
    rec["total_body_length"] = msg.total_body_length
    if msg.frame_infos:
        vocab = frameinfo.vocabulary(msg.is_response)
        infos = []
        for info in msg.frame_infos:
            item: dict[str, Any] = {"id": info.id, "name": vocab.name(info.id)}
            item.update(info.fields(msg.is_response))
            item["data"] = info.data.hex()
            infos.append(item)
        rec["frame_infos"] = infos
        fe_end = HEADER_LENGTH + msg.framing_extras_length
        canonical = b"".join(frameinfo.encode_element(i.id, i.data) for i in msg.frame_infos)
        if canonical != msg.raw[HEADER_LENGTH:fe_end]:
            rec["framing_extras"] = msg.raw[HEADER_LENGTH:fe_end].hex()
    elif msg.framing_extras_length:
        rec["framing_extras"] = msg.raw[HEADER_LENGTH:HEADER_LENGTH + msg.framing_extras_length].hex()
    stream_id = msg.stream_id
    if stream_id is not None:
        rec["stream_id"] = stream_id
    if msg.extras is not None:
        rec.update(msg.extras)
    elif msg.key_offset > msg.extras_offset:
        rec["extras"] = msg.raw[msg.extras_offset:msg.key_offset].hex()
    variant = msg.variant
    key_kind = variant.key if variant else KeyKind.RAW
    _key(msg, rec, key_kind)
    _value(msg, rec, variant)
    rec["diagnostics"] = [d.to_json() for d in msg.diagnostics]
    return rec


def _key(msg: Message, rec: dict[str, Any], kind: KeyKind) -> None:
    key = msg.key
    if not key and kind in (KeyKind.NONE, KeyKind.TEXT, KeyKind.DOCUMENT):
        return
    if kind is KeyKind.DOCUMENT and msg.options.collections:
        prefix = leb128_decode(key)
        if prefix is None:
            msg.add("bad_leb128", "key does not start with a valid LEB128 collection id", msg.key_offset,
                    min(len(key), 5))
        else:
            rec["collection_id"] = prefix[0]
            key = key[prefix[1]:]
    text, is_hex = text_or_hex(key)
    rec["key"] = text
    if is_hex:
        rec["key_encoding"] = "hex"


def _set_text(rec: dict[str, Any], name: str, data: bytes) -> None:
    text, is_hex = text_or_hex(data)
    rec[name] = text
    if is_hex:
        rec[f"{name}_encoding"] = "hex"


def _value(msg: Message, rec: dict[str, Any], variant: Variant | None) -> None:
    value = msg.value
    kind = variant.value if variant else ValueKind.RAW
    if not value:
        if kind is ValueKind.DOCUMENT:
            rec["value"] = ""
        elif kind is ValueKind.GRAMMAR and variant is not None and variant.value_grammar is not None \
                and walk.item_size(variant.value_grammar) is not None:
            rec.update(walk.to_json(variant.value_grammar, variant.value_grammar.parse(b"")))
        return
    start = msg.value_offset
    if kind is ValueKind.DOCUMENT:
        _document(msg, rec, value)
    elif kind is ValueKind.GRAMMAR and variant is not None:
        _grammar_value(msg, rec, variant, value)
    elif kind is ValueKind.SECRET and not msg.options.show_secrets:
        rec["value"] = None
        rec["value_redacted"] = len(value)
        msg.add("redacted", f"{len(value)} bytes of SASL data hidden", start, len(value))
    elif kind is ValueKind.STREAM_REQUEST_JSON:
        _set_text(rec, "value", value)
        _, diags = srv.validate(value, start)
        msg.diagnostics.extend(diags)
        if msg.options.collections is False:
            msg.add("stream_request_value_without_collections",
                    "a stream-request value without HELLO Collections: the server answers Einval",
                    start, len(value))
    elif kind is ValueKind.JSON or (kind is ValueKind.AUTO and value[:1] in (b"{", b"[")):
        _set_text(rec, "value", value)
        try:
            json.loads(value)
        except (ValueError, UnicodeDecodeError):
            msg.add("bad_json", "value is not valid JSON", start, len(value))
    else:
        _set_text(rec, "value", value)


def _document(msg: Message, rec: dict[str, Any], value: bytes) -> None:
    start = msg.value_offset
    datatype = msg.datatype if msg.spec is None or msg.spec.type_field == "datatype" else 0
    data = value
    if datatype & DATATYPE_SNAPPY:
        inflated = snappy_decompress(value)
        if isinstance(inflated, str):
            msg.add("bad_snappy", inflated, start, len(value))
            rec["value"] = value.hex()
            rec["value_encoding"] = "hex"
            return
        rec["value_compressed"] = value.hex()
        data = inflated
    if datatype & DATATYPE_XATTR:
        parsed = parse_xattrs(data)
        if isinstance(parsed, str):
            msg.add("bad_xattr", parsed, start, len(value))
        else:
            pairs, body_offset = parsed
            rec["xattrs"] = [{"key": p.key, "value": p.value} for p in pairs]
            data = data[body_offset:]
    _set_text(rec, "value", data)
    if datatype & DATATYPE_JSON and "value_encoding" not in rec:
        try:
            json.loads(data)
        except (ValueError, UnicodeDecodeError):
            msg.add("bad_json", "value marked JSON is not valid JSON", start, len(value))


def value_grammar(variant: Variant, extras: dict[str, int] | None, value_length: int) -> Any:
    """The construct declaration of a GRAMMAR value, chosen by the variant's selector."""
    if variant.value_grammar is not None:
        return variant.value_grammar
    if not variant.value_select:
        return None
    values = {**(extras or {}), "value_length": value_length}
    key = tuple(values.get(name, -1) for name in variant.value_select)
    return variant.value_grammars.get(key)


def _grammar_value(msg: Message, rec: dict[str, Any], variant: Variant, value: bytes) -> None:
    start = msg.value_offset
    grammar = value_grammar(variant, msg.extras, len(value))
    if grammar is None:
        if msg.opcode == 0x5f:
            msg.add("unknown_system_event", "system event id/version without a declared value layout "
                    "(version 2 is FlatBuffers); value kept raw", start, len(value))
        else:
            msg.add("illegal_value_length", f"no value layout of {variant.name} has {len(value)} bytes",
                    start, len(value))
        rec["value"] = value.hex()
        rec["value_encoding"] = "hex"
        return
    size = walk.fixed_size(grammar)
    item = walk.item_size(grammar)
    bad = (size is not None and size != len(value)) or (item is not None and len(value) % item)
    if bad:
        expected = f"{size} bytes" if size is not None else f"a multiple of {item} bytes"
        name = "odd_feature_list" if msg.opcode == 0x1f else "illegal_value_length"
        msg.add(name, f"{variant.name} value has {len(value)} bytes, expected {expected}", start,
                len(value))
        rec["value"] = value.hex()
        rec["value_encoding"] = "hex"
        return
    try:
        parsed = grammar.parse(value)
    except Exception as exc:  # noqa: BLE001 - construct's errors are many; any means "does not fit"
        msg.add("illegal_value_length", f"{variant.name} value does not parse: {exc}", start, len(value))
        rec["value"] = value.hex()
        rec["value_encoding"] = "hex"
        return
    fields = walk.to_json(grammar, parsed)
    consumed = len(grammar.build(parsed))
    rec.update(fields)
    if consumed != len(value):
        rec["value_trailing"] = value[consumed:].hex()
        msg.add("illegal_value_length", f"{len(value) - consumed} trailing value bytes after "
                f"{variant.name}", start + consumed, len(value) - consumed)

"""Encoding a JSON record (what ``--format json`` prints) back into wire bytes.

The record's own length fields are honoured when present, so a malformed packet re-encodes to the same
malformed bytes; ``fix_lengths`` recomputes them from the content instead (for hand-edited records).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

from construct import ConstructError

from dcpctl.protocol import frameinfo, walk
from dcpctl.protocol.constants import (
    ALT_MAGICS,
    DATATYPE_SNAPPY,
    DATATYPE_XATTR,
    MAGIC_CLASS,
    MAGICS,
    RESPONSE_MAGICS,
    STATUSES,
    Vocabulary,
)
from dcpctl.protocol.grammar import HEADER_LENGTH
from dcpctl.protocol.message import HEADER, select_variant, value_grammar
from dcpctl.protocol.registry import (
    DCP,
    HEADER_LAYOUT,
    Dialect,
    KeyKind,
    MessageSpec,
    ValueKind,
    Variant,
    reads_as_document,
)
from dcpctl.protocol.value import Xattr, build_xattrs, leb128_encode, snappy_compress
from dcpctl.safetext import brief

# A frame info's id and length are a nibble each, 15 escaping to one more byte holding value - 15.
MAX_FRAME_ID: Final = 15 + 255
MAX_FRAME_DATA: Final = 15 + 255


def key_length_word(magic: int, framing_length: int, key_length: int) -> int | None:
    """The header's key length field: with the alternative magics the framing extras' length and the key's,
    a byte each; None when they do not fit it."""
    if magic in ALT_MAGICS:
        return (framing_length << 8) | key_length if framing_length <= 0xFF and key_length <= 0xFF else None
    return key_length if key_length <= 0xFFFF else None


def set_key_length(packet: bytearray, key_length: int) -> bool:
    """Make an encoded packet's header give its key ``key_length`` bytes (the framing extras' length kept);
    False, the packet unchanged, when that does not fit the field."""
    magic, _, word = HEADER.unpack_from(packet)[:3]
    found = key_length_word(magic, word >> 8 if magic in ALT_MAGICS else 0, key_length)
    if found is None:
        return False
    HEADER_LAYOUT.field("key_length").pack_into(packet, HEADER_LAYOUT.offset("key_length"), found)
    return True


class EncodeError(ValueError):
    """The record cannot be turned into bytes (a missing or mistyped field); one line, names the field."""




def _text(value: str, name: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise EncodeError(f"{name} is not valid Unicode (a lone surrogate)") from None


def _hex(value: Any, name: str) -> bytes:
    if not isinstance(value, str):
        raise EncodeError(f"{name} must be a hex string, got {brief(value)}")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise EncodeError(f"{name} is not hex") from None


def _base64(value: str) -> bytes:
    return base64.b64decode(value, validate=True)


# What a record's ``*_encoding`` may say: hex (the JSON output's) or base64 (``--base64``'s). Absent means
# text; any other word is refused, as reading it as text would write the encoded form as the bytes.
BINARY_ENCODINGS: Final[Mapping[str, Callable[[str], bytes]]] = {"hex": bytes.fromhex, "base64": _base64}


def _bytes(rec: Mapping[str, Any], name: str) -> bytes:
    value = rec.get(name)
    if value is None:
        return b""
    if not isinstance(value, str):
        raise EncodeError(f"{name} must be a string")
    encoding = rec.get(f"{name}_encoding")
    if encoding is None:
        return _text(value, name)
    decoder = BINARY_ENCODINGS.get(encoding) if isinstance(encoding, str) else None
    if decoder is None:
        raise EncodeError(f"{name}_encoding {brief(encoding)} is not one of {', '.join(BINARY_ENCODINGS)}")
    try:
        return decoder(value)
    except ValueError:  # binascii.Error is one
        raise EncodeError(f"{name} is marked {encoding} but is not {encoding}") from None


def _code(vocab: Vocabulary, value: Any, what: str, bits: int) -> int:
    if isinstance(value, bool):
        raise EncodeError(f"unknown {what} {brief(value)}")
    if not isinstance(value, int):
        if not isinstance(value, str):
            raise EncodeError(f"unknown {what} {brief(value)}")
        try:
            value = vocab.code(value)
        except KeyError:
            raise EncodeError(f"unknown {what} {brief(value)}") from None
    return _in_range(value, what, bits)


def _in_range(value: int, name: str, bits: int) -> int:
    if not 0 <= value < 1 << bits:
        raise EncodeError(f"{name} {brief(value)} does not fit {bits} bits")
    return value


def _int(rec: Mapping[str, Any], name: str, default: int = 0, bits: int = 64) -> int:
    value = rec.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise EncodeError(f"{name} must be an integer, got {brief(value)}")
    if value == default:  # a default outside the range (-1: absent) is the caller's sentinel
        return value
    return _in_range(value, name, bits)


def encode(rec: Mapping[str, Any], dialect: Dialect = DCP, fix_lengths: bool = False) -> bytes:
    """Wire bytes for one record; raises :class:`EncodeError` with a one-line reason, and nothing else."""
    if not isinstance(rec, Mapping):
        raise EncodeError("a record is a JSON object")
    try:
        return _encode(rec, dialect, fix_lengths)
    except EncodeError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, struct.error, ConstructError) as exc:
        # a field of a type or size the declarations do not expect, met below the checks above
        first = str(exc).strip().splitlines()
        raise EncodeError(f"the record does not encode: {first[0] if first else type(exc).__name__}") from None


def _encode(rec: Mapping[str, Any], dialect: Dialect, fix_lengths: bool) -> bytes:
    if "header_length" in rec:
        return _cut_header(rec, dialect)
    if "opcode" not in rec or "magic" not in rec:
        raise EncodeError("a record needs at least magic and opcode")
    magic = _code(MAGICS, rec["magic"], "magic", 8)
    opcode, spec = _opcode(dialect, MAGIC_CLASS.get(magic), rec["opcode"])
    response = magic in RESPONSE_MAGICS
    has_status = response and (spec is None or spec.has_status)
    type_field = spec.type_field if spec else "datatype"
    type_byte = _int(rec, type_field, bits=8)
    word = _code(STATUSES, rec.get("status", 0), "status", 16) if has_status else _int(rec, "vbucket", bits=16)

    framing = _framing(rec, response)
    rec = _path_length(rec, spec)
    variant = _variant(spec, rec, magic, word, type_byte)
    if spec is not None and variant is None and "extras" not in rec and "extras_length" not in rec:
        needed = [n for n in (spec.variants[0].layout.names if spec.variants[0].layout else ()) if n not in rec]
        raise EncodeError(f"no {spec.name} layout fits the record"
                          + (f"; {spec.variants[0].name} needs {', '.join(needed)}" if needed else "")
                          + " (or give the raw extras as hex in 'extras')")
    extras = _extras(rec, variant)
    key = _key(rec, variant)
    value = _value(rec, variant, type_byte if type_field == "datatype" else 0, extras)

    keylen = len(key) if fix_lengths or "key_length" not in rec else _int(rec, "key_length", bits=16)
    extlen = len(extras) if fix_lengths or "extras_length" not in rec else _int(rec, "extras_length", bits=8)
    felen = len(framing) if fix_lengths or "framing_extras_length" not in rec else _int(
        rec, "framing_extras_length", bits=8)
    body = framing + extras + key + value
    total = len(body) if fix_lengths or "total_body_length" not in rec else _int(rec, "total_body_length",
                                                                                  bits=32)
    if magic not in ALT_MAGICS and framing:
        raise EncodeError(f"frame infos need magic 0x08 or 0x18, not {MAGICS.name(magic)}")
    key_word = key_length_word(magic, felen, keylen)
    if key_word is None:
        raise EncodeError("alternative encoding allows at most 255 bytes of framing extras and key"
                          if magic in ALT_MAGICS else "a length does not fit its header field")
    if extlen > 0xFF or total > 0xFFFFFFFF:
        raise EncodeError("a length does not fit its header field")
    header = HEADER.pack(magic, opcode, key_word, extlen, type_byte, word, total,
                         _int(rec, "opaque", bits=32), _int(rec, "cas", bits=64))
    return header + body


def _cut_header(rec: Mapping[str, Any], dialect: Dialect) -> bytes:
    """A packet cut short inside its header (decode's header_length): its header fields, as many bytes of
    them as it had, the last one's part in header_trailing when it ends inside a field. The fields past its
    end are absent from its record; the extras are given as raw (none): there is no layout to look for."""
    length = _int(rec, "header_length")
    if not 0 <= length < HEADER_LENGTH:
        raise EncodeError(f"header_length {length} is not that of a packet cut short inside its header "
                          f"(0 to {HEADER_LENGTH - 1} bytes)")
    if length == 0:
        return b""
    if "magic" not in rec or ("opcode" not in rec and length > 1):
        raise EncodeError("a record needs at least magic and opcode (magic alone with header_length 1)")
    tail = _hex(rec.get("header_trailing", ""), "header_trailing")
    if len(tail) >= length:
        raise EncodeError(f"header_trailing has {len(tail)} bytes, more than a field cut short of a "
                          f"{length}-byte header_length")
    header = {name: value for name, value in rec.items() if name not in {"header_length", "header_trailing"}}
    return _encode({"opcode": 0, **header, "extras": ""}, dialect, fix_lengths=False)[:length - len(tail)] + tail


def _path_length(rec: Mapping[str, Any], spec: MessageSpec | None) -> Mapping[str, Any]:
    """A record that gives a single-path subdocument ``path`` without its length gets the path's length."""
    if spec is None or "path" not in rec:
        return rec
    names = {v.value_path for v in spec.variants if v.value_path is not None and v.value_path not in rec}
    return {**rec, **{name: len(_bytes(rec, "path")) for name in names}} if names else rec


def _opcode(dialect: Dialect, magic_class: int | None, value: Any) -> tuple[int, MessageSpec | None]:
    """The opcode's number and row, read back through the dialect's one name table (the one decode names by)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise EncodeError(f"unknown opcode {brief(value)}")
    try:
        code, spec = dialect.resolve(magic_class, value)
    except KeyError:
        raise EncodeError(f"unknown opcode {brief(value)}") from None
    return _in_range(code, "opcode", 8), spec


def _variant(spec: MessageSpec | None, rec: Mapping[str, Any], magic: int, word: int,
             type_byte: int) -> Variant | None:
    if spec is None or "extras" in rec:
        return None
    has_value = 1 if (rec.get("value") or any(
        name in rec for v in spec.variants if v.value is ValueKind.GRAMMAR
        for name in _grammar_fields(v))) else 0
    if "extras_length" in rec:
        byte0 = _int(rec, "marker_version", -1)
        chosen = select_variant(spec, magic, _int(rec, "extras_length", bits=8), word, type_byte, byte0, has_value)
        if chosen is None or chosen.layout is None or all(n in rec for n in chosen.layout.names):
            return chosen
        # the header's extras length disagrees with the fields given (a document's erratum decoded as
        # documented): the fields decide, the header keeps its own length
    # A hand-written record: the row that explains most of the given fields, all its extras given.
    best: tuple[int, Variant] | None = None
    for variant in spec.variants:
        layout = variant.layout
        names = layout.names if layout else ()
        if not all(n in rec for n in names):
            continue
        byte0 = _int(rec, names[0], -1) if names else -1
        size = layout.size if layout else 0
        if select_variant(spec, magic, size, word, type_byte, byte0, has_value) is not variant:
            continue
        score = len(names) + sum(1 for n in _grammar_fields(variant) if n in rec)
        if best is None or score > best[0]:
            best = (score, variant)
    return best[1] if best else None


def _grammar_fields(variant: Variant) -> list[str]:
    return [name for grammar in variant.grammars for name, _ in walk.field_names(grammar)]


def _framing(rec: Mapping[str, Any], response: bool) -> bytes:
    if "framing_extras" in rec:
        return _hex(rec["framing_extras"], "framing_extras")
    out = b""
    infos = rec.get("frame_infos", [])
    if not isinstance(infos, list) or not all(isinstance(info, dict) for info in infos):
        raise EncodeError("frame_infos must be a list of objects")
    for info in infos:
        frame_id = info.get("id")
        if isinstance(frame_id, bool) or not isinstance(frame_id, int) or not 0 <= frame_id <= MAX_FRAME_ID:
            raise EncodeError(f"a frame info needs an id from 0 to {MAX_FRAME_ID}, got {brief(frame_id)}")
        if "data" in info:
            data = _hex(info["data"], "frame info data")
            if len(data) > MAX_FRAME_DATA:
                raise EncodeError(f"frame info {frame_id} data of {len(data)} bytes: at most {MAX_FRAME_DATA}")
        else:
            grammars = frameinfo.RESPONSE_FRAME_GRAMMARS if response else frameinfo.REQUEST_FRAME_GRAMMARS
            # the layout with the most fields the object gives (a durability level with its timeout: 3 bytes)
            options = sorted(grammars.get(frame_id, {}).values(), key=lambda g: -len(walk.field_names(g)))
            for grammar in options:
                names = [n for n, _ in walk.field_names(grammar)]
                if all(n in info for n in names):
                    try:
                        data = grammar.build(walk.from_json(grammar, info))
                    except walk.ShapeError as exc:
                        raise EncodeError(f"frame info {frame_id}: {exc}") from None
                    break
            else:
                if not response and frame_id in frameinfo.TEXT_FRAMES and isinstance(info.get("text"), str):
                    data = _text(info["text"], "frame info text")
                elif not response and frame_id in frameinfo.EMPTY_FRAMES:
                    data = b""
                else:
                    raise EncodeError(f"frame info {info.get('id')} needs its data")
        out += frameinfo.encode_element(frame_id, data)
    if not out and "stream_id" in rec and not response:
        out = frameinfo.encode_element(frameinfo.DCP_STREAM_ID, struct.pack(">H", _int(rec, "stream_id", bits=16)))
    return out


def _extras(rec: Mapping[str, Any], variant: Variant | None) -> bytes:
    if "extras" in rec:
        return _hex(rec["extras"], "extras")
    if variant is None or variant.layout is None:
        return b""
    layout = variant.layout
    missing = [n for n in layout.names if n not in rec]
    if missing:
        raise EncodeError(f"{variant.name} needs {', '.join(missing)}")
    for name in layout.names:
        _int(rec, name)
    try:
        return layout.pack(rec)
    except struct.error as exc:
        raise EncodeError(f"{variant.name}: {exc}") from None


def _key(rec: Mapping[str, Any], variant: Variant | None) -> bytes:
    key = _bytes(rec, "key")
    if variant is not None and variant.key is KeyKind.DOCUMENT and "collection_id" in rec:
        key = leb128_encode(_int(rec, "collection_id", bits=32)) + key
    return key


def _value(rec: Mapping[str, Any], variant: Variant | None, datatype: int,
           extras: bytes) -> bytes:
    kind = variant.value if variant else ValueKind.RAW
    # a value given in an encoding is its raw bytes (a grammar that did not parse); fields build the rest
    if kind is ValueKind.GRAMMAR and variant is not None and rec.get("value_encoding") is None:
        extras_fields = variant.layout.unpack(extras) if variant.layout and extras else {}
        length = _grammar_length_hint(rec, variant)
        grammar = value_grammar(variant, extras_fields, length)
        if grammar is None:
            return _bytes(rec, "value")
        names = [n for n, _ in walk.field_names(grammar)]
        if not any(n in rec for n in names):
            return b""
        try:
            built = bytes(grammar.build(walk.from_json(grammar, rec)))
        except walk.ShapeError as exc:  # the field's path says where
            raise EncodeError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - construct build errors name the field
            first = str(exc).strip().splitlines()
            raise EncodeError(f"{variant.name} value: {first[0] if first else type(exc).__name__}") from None
        return built + _hex(rec.get("value_trailing", ""), "value_trailing")
    if kind is ValueKind.SECRET and rec.get("value_redacted"):
        raise EncodeError("the SASL value was redacted; decode with --show-secrets to re-encode it")
    if reads_as_document(kind, datatype):
        if "value_compressed" in rec:
            return _hex(rec["value_compressed"], "value_compressed")
        body = _bytes(rec, "value")
        if "xattrs" in rec and datatype & DATATYPE_XATTR:
            body = _xattrs(rec["xattrs"]) + body
        if datatype & DATATYPE_SNAPPY and body:
            # an empty value stays empty: decode shows a snappy-flagged empty value without value_compressed,
            # and compressing it would add the one byte of an empty block
            body = snappy_compress(body)
        return body
    if variant is not None and variant.value_path is not None and "path" in rec:
        return _bytes(rec, "path") + _bytes(rec, "value")
    return _bytes(rec, "value")


def _xattrs(pairs: Any) -> bytes:
    if not isinstance(pairs, list) or not all(
            isinstance(p, dict) and isinstance(p.get("key"), str) and isinstance(p.get("value"), str) for p in pairs):
        raise EncodeError("xattrs must be a list of {key, value} strings")
    for pair in pairs:
        _text(pair["key"] + pair["value"], "an xattr")
    return build_xattrs([Xattr(p["key"], p["value"]) for p in pairs])


def _grammar_length_hint(rec: Mapping[str, Any], variant: Variant) -> int:
    if variant.value_select == ("value_length",):
        return 43 if "old_vbucket_uuid" in rec else 27
    return 0

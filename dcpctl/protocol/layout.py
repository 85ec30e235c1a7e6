"""Field spans of a decoded message, for the annotated hexdump: every byte belongs to one labelled field.

Derived from the declarations: header fields from the header grammar, extras from the variant's layout,
value fields from the value grammar's walk. Bytes nothing claims are reported as ``unclaimed`` so the dump
always accounts for the whole packet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dcpctl.protocol import frameinfo, grammar, walk
from dcpctl.protocol.constants import ALT_MAGICS, DATATYPE_SNAPPY, DATATYPE_XATTR
from dcpctl.protocol.message import Message, value_grammar
from dcpctl.protocol.naming import value_names
from dcpctl.protocol.registry import KeyKind, ValueKind, reads_as_document
from dcpctl.protocol.value import leb128_decode, parse_xattrs

HEADER_LABELS: Final = {
    "magic": "Magic",
    "opcode": "Opcode",
    "key_length": "Key length",
    "framing_extras_length": "Framing extras length",
    "extras_length": "Extras length",
    "datatype": "Data type",
    "request_type": "Request type",
    "vbucket": "VBucket",
    "status": "Status",
    "total_body_length": "Total body",
    "opaque": "Opaque",
    "cas": "CAS",
}


XATTRS_NAMED: Final = 8  # xattr pairs written out in the span's value; a renderer shows a line of it at most
TEXT_HEAD_BYTES: Final = 256  # of a key or value carried as its span's text: a renderer shows a line of it


@dataclass(frozen=True, slots=True)
class FieldSpan:
    section: str  # header, framing, extras, key, value, unclaimed
    name: str  # JSON field name (dotted for nested values)
    label: str  # what the documents call it
    offset: int
    length: int
    value: object  # decoded value
    meaning: str = ""
    secret: bool = False  # its bytes are a SASL client message: shown masked unless --show-secrets


def _header_grammar(msg: Message) -> object:
    spec = msg.spec
    if spec is not None and spec.type_field == "request_type":
        return grammar.upr_draft_header
    if msg.magic in ALT_MAGICS:
        return grammar.alt_response_header if msg.has_status else grammar.alt_request_header
    return grammar.response_header if msg.has_status else grammar.request_header


def header_spans(msg: Message) -> list[FieldSpan]:
    """The header's fields, those of a packet cut short inside its header included: only the fields whose
    every byte is present (a 12-byte fragment has its lengths, but no opaque and no CAS)."""
    raw = msg.raw[:grammar.HEADER_LENGTH]
    present = len(raw)
    return [FieldSpan("header", span.path, HEADER_LABELS.get(span.path, span.path), span.offset, span.length,
                      span.value, _meaning(msg, span.path, span.value))
            for span in walk.spans(_header_grammar(msg), raw.ljust(grammar.HEADER_LENGTH, b"\0"))
            if span.offset + span.length <= present]


def _meaning(msg: Message, name: str, value: object) -> str:
    return ",".join(value_names(msg, name, value))


def spans(msg: Message, walk_limit: int | None = None) -> list[FieldSpan]:
    """Every field of ``msg`` with its byte range, in wire order. A value of declared fields longer than
    ``walk_limit`` bytes is one span: its fields are not listed (a hostile one has millions)."""
    out: list[FieldSpan] = header_spans(msg)
    raw = msg.raw
    for info in msg.frame_infos:
        vocab = frameinfo.vocabulary(msg.is_response)
        fields = info.fields(msg.is_response)
        shown = ", ".join(f"{k}={v}" for k, v in fields.items()) or info.data.hex()
        out.append(FieldSpan("framing", f"frame_info.{info.id}", f"Frame info {vocab.name(info.id)}",
                             info.offset, info.length, shown))
    variant = msg.variant
    pos = msg.extras_offset
    layout = variant.layout if variant else None
    if layout is not None and msg.extras is not None:
        present = max(0, min(layout.size, msg.body_end - pos))
        padded = raw[pos:pos + present] + bytes(layout.size - present)  # extras cut short: fields that fit
        out.extend(FieldSpan("extras", span.path, span.path, span.offset, span.length, span.value,
                             _meaning(msg, span.path, span.value))
                   for span in walk.spans(layout.grammar, padded, base=pos)
                   if span.offset + span.length <= pos + present)
    elif msg.key_offset > pos:
        out.append(FieldSpan("extras", "extras", "extras (raw)", pos, msg.key_offset - pos,
                             raw[pos:msg.key_offset].hex()))
    key = msg.key
    if key:
        start = msg.key_offset
        if variant is not None and variant.key is KeyKind.DOCUMENT and msg.options.collections:
            prefix = leb128_decode(key)
            if prefix is not None:
                out.append(FieldSpan("key", "collection_id", "collection id (LEB128)", start, prefix[1],
                                     prefix[0]))
                start += prefix[1]
        out.append(FieldSpan("key", "key", "key", start, msg.value_offset - start,
                             _text_head(raw, start, msg.value_offset)))
    value = msg.value
    if value:
        out.extend(_value_spans(msg, walk_limit))
    claimed = msg.value_offset if value else max(msg.key_offset, msg.value_offset)
    end = max(claimed, msg.body_end if value else claimed)
    if end < len(raw):
        out.append(FieldSpan("unclaimed", "unclaimed", "bytes beyond the declared body", end,
                             len(raw) - end, raw[end:].hex()))
    return out


def _value_spans(msg: Message, walk_limit: int | None) -> list[FieldSpan]:
    variant = msg.variant
    value = msg.value
    start = msg.value_offset
    kind = variant.value if variant else ValueKind.RAW
    if kind is ValueKind.GRAMMAR and variant is not None and walk_limit is not None and len(value) > walk_limit:
        return [FieldSpan("value", "value", f"value ({variant.name} fields not listed)", start, len(value),
                          f"{len(value)} bytes")]
    if kind is ValueKind.GRAMMAR and variant is not None:
        found = value_grammar(variant, msg.extras, len(value))
        if found is not None:
            try:
                out = [FieldSpan("value", s.path, s.path, s.offset, s.length, s.value,
                                 _meaning(msg, s.path, s.value))
                       for s in walk.spans(found, value, base=start)]
            except Exception:  # noqa: BLE001 - a value that does not fit is shown raw
                out = []
            if out:
                end = out[-1].offset + out[-1].length
                if end < start + len(value):
                    out.append(FieldSpan("value", "value_trailing", "trailing value bytes", end,
                                         start + len(value) - end, value[end - start:].hex()))
                return out
    if kind is ValueKind.SECRET and not msg.options.show_secrets:
        return [FieldSpan("value", "value", "value (redacted)", start, len(value), "<redacted>", secret=True)]
    datatype = msg.datatype if msg.spec is None or msg.spec.type_field == "datatype" else 0
    document = reads_as_document(kind, datatype)
    if document and datatype & DATATYPE_XATTR and not datatype & DATATYPE_SNAPPY:
        parsed = parse_xattrs(value)
        if not isinstance(parsed, str):
            pairs, body = parsed
            shown = ", ".join(f"{p.key}={p.value}" for p in pairs[:XATTRS_NAMED])
            if len(pairs) > XATTRS_NAMED:
                shown += f", … ({len(pairs)} pairs)"
            return [FieldSpan("value", "xattrs", "xattrs", start, body, shown),
                    FieldSpan("value", "value", "value", start + body, len(value) - body,
                              _text_head(msg.raw, start + body, msg.body_end))]
    if not document and variant is not None and variant.value_path is not None:
        length = (msg.extras or {}).get(variant.value_path)
        if length is not None and length <= len(value):
            end = start + length
            return [FieldSpan("value", "path", "path", start, length, _text_head(msg.raw, start, end)),
                    *([FieldSpan("value", "value", "value", end, len(value) - length,
                                 _text_head(msg.raw, end, msg.body_end))] if length < len(value) else [])]
    label = "value (snappy)" if document and datatype & DATATYPE_SNAPPY else "value"
    return [FieldSpan("value", "value", label, start, len(value), _text_head(msg.raw, start, msg.body_end))]


def _text_head(raw: bytes, start: int, end: int) -> str:
    """The first bytes of ``raw[start:end]`` as text: a 20 MiB value is not copied to show a line of it, and
    bytes that are not UTF-8 stay bytes (surrogateescape) for the renderer to escape once."""
    return raw[start:min(end, start + TEXT_HEAD_BYTES)].decode("utf-8", "surrogateescape")

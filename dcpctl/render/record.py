"""A decoded message with its context as the JSON contract's object (``--format json/jsonl``, pretty, -f).

The message has already read and checked everything (``protocol.message``: the header, the extras, and on
first use the key and value checks, which keep what they read as typed views); this module only names and
formats it: text or hex, the key order of the contract, the context :meth:`Message.annotate` added (its
``first`` keys before the packet's own, its ``last`` keys after them, its diagnostics last). The record is
built once and kept on the message (:attr:`Message.rendered`), so a filter, a summary and the output share
one.
"""

from __future__ import annotations

from typing import Any, Final

from dcpctl.protocol import frameinfo, walk
from dcpctl.protocol.constants import ALT_MAGICS, MAGICS, RESPONSE_MAGICS, Status
from dcpctl.protocol.grammar import HEADER_LENGTH
from dcpctl.protocol.message import Message, ValueReading
from dcpctl.protocol.value import printable, text_or_hex

# Enum members as module constants: attribute access on an Enum class is slow on the per-message path.
_NONE: Final = ValueReading.NONE
_TEXT: Final = ValueReading.TEXT
_HEX: Final = ValueReading.HEX
_DOCUMENT: Final = ValueReading.DOCUMENT
_BAD_SNAPPY: Final = ValueReading.BAD_SNAPPY
_PATH: Final = ValueReading.PATH
_FIELDS: Final = ValueReading.FIELDS
_SUCCESS: Final = int(Status.SUCCESS)


def record(msg: Message) -> dict[str, Any]:
    """The JSON contract's object for ``msg`` (built once; later calls give the same dict)."""
    context = msg.take_context()
    built = msg.rendered
    if context is None:
        if built is None:
            built = msg.rendered = _record(msg, {})
        return built
    first, last = context
    if built is None:  # the usual case: build the record once, in ``first``'s dict
        plan = msg.plan
        values = msg.extras_values
        if plan is not None and plan.fast is not None and values is not None and not msg.frame_infos:
            merged = _fast_record(msg, plan.fast, plan.names, values, first)
        else:
            merged = _record(msg, first)
    else:
        merged = first
        merged.update(built)
    del merged["diagnostics"]  # they go last, after ``last``'s keys
    if last:
        merged.update(last)
    diagnostics = msg.diagnostics
    merged["diagnostics"] = [d.to_json() for d in diagnostics] if diagnostics else []
    msg.rendered = merged
    return merged


def _record(msg: Message, rec: dict[str, Any]) -> dict[str, Any]:
    """The record; ``rec`` (a fresh dict the caller gives up) holds keys that go first."""
    plan = msg.plan
    values = msg.extras_values
    if plan is not None and plan.fast is not None and values is not None and not msg.frame_infos:
        return _fast_record(msg, plan.fast, plan.names, values, rec)
    spec = msg.spec
    magic, _, _, extlen, datatype, word, total, opaque, cas = msg.header
    rec["offset"] = msg.offset
    rec["magic"] = MAGICS.name_of.get(magic) or MAGICS.name(magic)
    rec["opcode"] = msg.opcode_name
    type_field = spec.type_field if spec is not None else "datatype"
    if type_field != "datatype":
        rec[type_field] = datatype
        if msg.variant is not None and msg.variant.label:
            rec[f"{type_field}_name"] = msg.variant.label
    if magic in RESPONSE_MAGICS and (spec is None or spec.has_status):
        rec["status"] = msg.status_name
    else:
        rec["vbucket"] = word
    rec["opaque"] = opaque
    rec["cas"] = cas
    if type_field == "datatype":
        rec["datatype"] = datatype
    rec["key_length"] = msg.key_length
    rec["extras_length"] = extlen
    if magic in ALT_MAGICS:
        rec["framing_extras_length"] = msg.framing_extras_length
    rec["total_body_length"] = total
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
        stream_id = msg.stream_id
        if stream_id is not None:
            rec["stream_id"] = stream_id
    elif msg.framing_extras_length:
        rec["framing_extras"] = msg.raw[HEADER_LENGTH:HEADER_LENGTH + msg.framing_extras_length].hex()
    if values is not None:
        rec.update(zip(plan.names, values, strict=True))  # type: ignore[union-attr]
    elif msg.partial_extras and msg.extras is not None:
        rec.update(msg.extras)
        rec["extras"] = msg.raw[msg.extras_offset:msg.key_offset].hex()
    elif msg.key_offset > msg.extras_offset:
        rec["extras"] = msg.raw[msg.extras_offset:msg.key_offset].hex()
    _key(msg, rec)
    _value(msg, rec)
    variant = msg.variant
    if variant is not None and variant.terminator is not None and msg.key_length == 0 and not msg.value \
            and msg.status == _SUCCESS:
        rec[variant.terminator] = True
    diagnostics = msg.diagnostics
    rec["diagnostics"] = [d.to_json() for d in diagnostics] if diagnostics else []
    return rec


def _fast_record(msg: Message, names: tuple[str, str], fields: tuple[str, ...], values: tuple[int, ...],
                 rec: dict[str, Any]) -> dict[str, Any]:
    """``_record`` for the shapes a DCP stream is made of (``_Plan.fast``: a request with the plain magic,
    a datatype byte, a declared layout and a document value): the same keys in the same order (the vectors
    and a hypothesis test hold both paths to that), with every per-shape decision made once."""
    _, _, _, extlen, datatype, word, total, opaque, cas = msg.header
    header = {"offset": msg.offset, "magic": names[0], "opcode": names[1], "vbucket": word, "opaque": opaque,
              "cas": cas, "datatype": datatype, "key_length": msg.key_length, "extras_length": extlen,
              "total_body_length": total}  # one dict display: cheaper than ten stores
    if rec:
        rec.update(header)
    else:
        rec = header
    rec.update(zip(fields, values, strict=True))
    plain = msg.plain_document
    if plain is None:
        _key(msg, rec)
        _value(msg, rec)
    else:  # _key and _value, written out: the per-item path
        collection_id, key, text, document = plain
        if msg.value_offset != msg.key_offset:
            if collection_id is not None:
                rec["collection_id"] = collection_id
            try:
                key_text: str | None = key.decode()
            except UnicodeDecodeError:
                key_text = None
            if key_text is not None and (key_text.isprintable() or printable(key_text)):
                rec["key"] = key_text
            else:
                rec["key"] = key.hex()
                rec["key_encoding"] = "hex"
        if text is None:
            rec["value"] = document.hex()
            rec["value_encoding"] = "hex"
        else:
            rec["value"] = text
    diagnostics = msg.diagnostics
    rec["diagnostics"] = [d.to_json() for d in diagnostics] if diagnostics else []
    return rec


def _key(msg: Message, rec: dict[str, Any]) -> None:
    if msg.value_offset == msg.key_offset:
        return
    collection_id = msg.collection_id
    if collection_id is not None:
        rec["collection_id"] = collection_id
    _set_text(rec, "key", msg.document_key)


def _set_text(rec: dict[str, Any], name: str, data: bytes) -> None:
    text, is_hex = text_or_hex(data)
    rec[name] = text
    if is_hex:
        rec[f"{name}_encoding"] = "hex"


def _value(msg: Message, rec: dict[str, Any]) -> None:
    reading = msg.value_reading
    if reading is _NONE:
        return
    if reading is _TEXT:
        _set_text(rec, "value", msg.value)
    elif reading is _DOCUMENT:
        if msg.inflated:
            rec["value_compressed"] = msg.value.hex()
        xattrs = msg.xattrs
        if xattrs is not None:
            rec["xattrs"] = [{"key": p.key, "value": p.value} for p in xattrs]
        text = msg.document_text
        if text is None:
            rec["value"] = msg.document.hex()
            rec["value_encoding"] = "hex"
        else:
            rec["value"] = text
    elif reading is _FIELDS:
        grammar, fields, consumed = msg.grammar_reading
        rec.update(walk.to_json(grammar, fields))
        value = msg.value
        if consumed != len(value):
            rec["value_trailing"] = value[consumed:].hex()
    elif reading is _PATH:
        value, length = msg.value, msg.path_length
        _set_text(rec, "path", value[:length])
        if length < len(value):
            _set_text(rec, "value", value[length:])
    elif reading is _HEX:
        rec["value"] = msg.value.hex()
        rec["value_encoding"] = "hex"
    elif reading is _BAD_SNAPPY:
        rec["value_compressed"] = rec["value"] = msg.value.hex()
        rec["value_encoding"] = "hex"
    else:  # SECRET
        rec["value"] = None
        rec["value_redacted"] = len(msg.value)

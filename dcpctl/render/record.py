"""A decoded message with its context as the JSON contract's object (``--format json/jsonl``, pretty, -f).

The message has already read and checked everything (``protocol.message``: the header, the extras, and the
key and value checks, which keep what they read as typed views); this module only names and formats it:
text or hex, the key order of the contract, the context a source observed it in (``dcp.observed``: its
``first`` keys before the packet's own, its ``last`` keys after them, its diagnostics last). An observed
packet's record is built once and kept with it (:attr:`Observed.rendered`), so a filter, a summary and the
output share one.

Theory of operation. The record's header part is the same per message shape but for its values: the magic
and opcode names, the type field and its label, status or vbucket (a response's status word is part of its
shape), framing extras present, the extras' names. So each shape gets one builder, generated when the shape
is first seen (:func:`builder_of`, as ``render.lines``' JSON line templates and ``pipeline.schema``'s item rows
are), whose every key is a constant and which only stores values. What differs per message within a shape is
left to the builder at run time: frame infos, extras cut short, the key and value (one shared path,
:func:`_key_value`, that takes a plain document in one look), a terminator's empty key and value. Builders are
cached per plan and per shape with decode's plan-cache bound (more shapes only means generating again).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from dcpctl.dcp.observed import Observed
from dcpctl.protocol import frameinfo, walk
from dcpctl.protocol.codegen import compiled
from dcpctl.protocol.constants import ALT_MAGICS, MAGICS, RESPONSE_MAGICS, Status
from dcpctl.protocol.diagnostic import Diagnostic
from dcpctl.protocol.grammar import HEADER_FIELDS, HEADER_LENGTH
from dcpctl.protocol.layout import header_spans
from dcpctl.protocol.message import _PLAN_LIMIT, Message, ValueReading
from dcpctl.protocol.value import as_text

# Enum members as module constants: attribute access on an Enum class is slow on the per-message path.
_NONE: Final = ValueReading.NONE
_TEXT: Final = ValueReading.TEXT
_HEX: Final = ValueReading.HEX
_DOCUMENT: Final = ValueReading.DOCUMENT
_BAD_SNAPPY: Final = ValueReading.BAD_SNAPPY
_PATH: Final = ValueReading.PATH
_FIELDS: Final = ValueReading.FIELDS
_SUCCESS: Final = int(Status.SUCCESS)

# A shape's record builder: (message, the context's leading keys) -> a new dict with those keys, then the
# packet's own in the contract's order (no diagnostics: record() adds them after the trailing keys)
Builder = Callable[[Message, dict[str, Any]], dict[str, Any]]
# What a builder depends on: magic name, opcode name, type field (None: the datatype byte) and its label,
# status name (None: a vbucket), alt magic (framing extras), extras names, terminator (None: none)
Shape = tuple[str, str, str | None, str | None, str | None, bool, tuple[str, ...], str | None]
# Builders kept, by plan and by shape: decode's plan-cache bound, for the same reason (a few dozen shapes
# occur in practice; past the bound a builder is generated again, never wrong, only slower)
BUILDER_LIMIT: Final = _PLAN_LIMIT
_BY_PLAN: dict[int, tuple[object, Builder]] = {}  # id(plan) -> (plan, kept so that its id is not reused)
_BY_SHAPE: dict[Shape, Builder] = {}
_NO_CONTEXT: Final[dict[str, Any]] = {}
# What pretty output and hexdump call a packet cut short before its opcode byte (its record has no opcode)
CUT_OPCODE: Final = "(cut short)"


def record(item: Message | Observed) -> dict[str, Any]:
    """The JSON contract's object for a packet, or for a packet with its context (an observed one's is built
    once and kept: later calls give the same dict)."""
    if type(item) is Message:
        rec = builder_of(item)(item, _NO_CONTEXT)
        if len(item.raw) < HEADER_LENGTH:
            _cut_header(item, rec)
        diagnostics: list[Diagnostic] | tuple[()] = item.diagnostics
    else:
        assert isinstance(item, Observed)
        built = item.rendered
        if built is not None:
            return built
        msg = item.packet
        rec = builder_of(msg)(msg, item.first)
        if len(msg.raw) < HEADER_LENGTH:
            _cut_header(msg, rec)
        if item.last:
            rec.update(item.last)
        diagnostics = item.diagnostics
        item.rendered = rec
    rec["diagnostics"] = [d.to_json() for d in diagnostics] if diagnostics else []
    return rec


def _cut_header(msg: Message, rec: dict[str, Any]) -> None:
    """A packet cut short inside its header: the header fields past its bytes are not in it (the builder read
    them as zeros), header_length says where it stops and header_trailing holds the bytes of a field it
    stops inside, so that encoding the record gives its bytes."""
    spans = header_spans(msg)
    present = {span.name for span in spans}
    for name in [name for name in HEADER_FIELDS if name not in present]:
        rec.pop(name, None)
        rec.pop(f"{name}_name", None)
    rec["header_length"] = len(msg.raw)
    whole = max((span.offset + span.length for span in spans), default=0)
    if whole < len(msg.raw):
        rec["header_trailing"] = msg.raw[whole:].hex()


def builder_of(msg: Message) -> Builder:
    """The record builder of ``msg``'s shape (generated on first sight of the shape)."""
    plan = msg.plan
    held = _BY_PLAN.get(id(plan))
    if held is not None and held[0] is plan:
        return held[1]
    shape = shape_of(msg)
    made = _BY_SHAPE.get(shape)
    if made is None:
        made = _generate(shape)
        if len(_BY_SHAPE) < BUILDER_LIMIT:
            _BY_SHAPE[shape] = made
    # A plan's key holds everything a shape is made of (a response's status word included), so every message
    # of one plan has one shape; a message without a plan (a cut header) is looked up by its shape each time.
    if plan is not None and len(_BY_PLAN) < BUILDER_LIMIT:
        _BY_PLAN[id(plan)] = (plan, made)
    return made


def shape_of(msg: Message) -> Shape:
    """Every per-shape decision of ``msg``'s record, as the names the builder writes."""
    magic = msg.magic
    spec, variant = msg.spec, msg.variant
    type_field = spec.type_field if spec is not None else "datatype"
    status = msg.status_name if magic in RESPONSE_MAGICS and (spec is None or spec.has_status) else None
    terminator = variant.terminator if variant is not None and msg.status == _SUCCESS else None
    return (MAGICS.name_of.get(magic) or MAGICS.name(magic), msg.opcode_name,
            None if type_field == "datatype" else type_field,
            variant.label or None if variant is not None and type_field != "datatype" else None,
            status, magic in ALT_MAGICS, msg.plan.names if msg.plan is not None else (), terminator)


def _generate(shape: Shape) -> Builder:
    """The builder of one shape: the header's keys as constants in one dict display, the values read from the
    message; the extras in it too when nothing comes between (no framing extras)."""
    magic, opcode, type_field, label, status, alt, names, terminator = shape
    head = ["'offset': msg.offset", f"'magic': {magic!r}", f"'opcode': {opcode!r}"]
    if type_field is not None:
        head.append(f"{type_field!r}: datatype")
        if label is not None:
            head.append(f"{f'{type_field}_name'!r}: {label!r}")
    head.append(f"'status': {status!r}" if status is not None else "'vbucket': word")
    head += ["'opaque': opaque", "'cas': cas"]
    if type_field is None:
        head.append("'datatype': datatype")
    head += ["'key_length': msg.key_length", "'extras_length': extlen"]
    if alt:
        head.append("'framing_extras_length': msg.framing_extras_length")
    head.append("'total_body_length': total")
    extras = [f"{name!r}: values[{at}]" for at, name in enumerate(names)]
    lines = ["def read(msg, first):",
             "    _, _, _, extlen, datatype, word, total, opaque, cas = msg.header"]
    if names:
        lines.append("    values = msg.extras_values")
    if names and not alt:
        lines += ["    if values is not None:",
                  f"        rec = {{**first, {', '.join(head + extras)}}}",
                  "    else:",
                  f"        rec = {{**first, {', '.join(head)}}}",
                  "        raw_extras(msg, rec)"]
    else:
        lines.append(f"    rec = {{**first, {', '.join(head)}}}")
        if alt:
            lines += ["    if msg.framing_extras_length:",
                      "        framing(msg, rec)"]
        if names:
            lines += ["    if values is not None:",
                      *(f"        rec[{name!r}] = values[{at}]" for at, name in enumerate(names)),
                      "    else:",
                      "        raw_extras(msg, rec)"]
        else:
            lines.append("    raw_extras(msg, rec)")
    lines.append("    key_value(msg, rec)")
    if terminator is not None:
        lines += ["    if msg.key_length == 0 and not msg.value:",
                  f"        rec[{terminator!r}] = True"]
    lines.append("    return rec")
    made: Builder = compiled(lines, f"record builder {opcode}/{len(names)}",
                             {"raw_extras": _raw_extras, "framing": _framing, "key_value": _key_value})
    return made


def _framing(msg: Message, rec: dict[str, Any]) -> None:
    """Framing extras: the frame infos read from them, or raw when none could be read."""
    fe_end = HEADER_LENGTH + msg.framing_extras_length
    if not msg.frame_infos:
        rec["framing_extras"] = msg.raw[HEADER_LENGTH:fe_end].hex()
        return
    vocab = frameinfo.vocabulary(msg.is_response)
    infos = []
    for info in msg.frame_infos:
        item: dict[str, Any] = {"id": info.id, "name": vocab.name(info.id)}
        item.update(info.fields(msg.is_response))
        item["data"] = info.data.hex()
        infos.append(item)
    rec["frame_infos"] = infos
    canonical = b"".join(frameinfo.encode_element(i.id, i.data) for i in msg.frame_infos)
    if canonical != msg.raw[HEADER_LENGTH:fe_end]:
        rec["framing_extras"] = msg.raw[HEADER_LENGTH:fe_end].hex()
    stream_id = msg.stream_id
    if stream_id is not None:
        rec["stream_id"] = stream_id


def _raw_extras(msg: Message, rec: dict[str, Any]) -> None:
    """Extras not read as a whole layout: the fields that fit and the bytes, or only the bytes."""
    if msg.partial_extras and msg.extras is not None:
        rec.update(msg.extras)
        rec["extras"] = msg.raw[msg.extras_offset:msg.key_offset].hex()
    elif msg.key_offset > msg.extras_offset:
        rec["extras"] = msg.raw[msg.extras_offset:msg.key_offset].hex()


def _key_value(msg: Message, rec: dict[str, Any]) -> None:
    """The key and the value, as the check pass read them; a plain document (most of a stream) in one look."""
    plain = msg.plain_document
    if plain is None:
        if msg.value_offset != msg.key_offset:
            _key(rec, msg.collection_id, msg.document_key)
        _value(msg, rec)
    else:
        if msg.value_offset != msg.key_offset:
            _key(rec, plain[0], plain[1])
        _document(rec, plain[2], plain[3])


def _key(rec: dict[str, Any], collection_id: int | None, key: bytes) -> None:
    if collection_id is not None:
        rec["collection_id"] = collection_id
    _set_text(rec, "key", key)


def _document(rec: dict[str, Any], text: str | None, document: bytes) -> None:
    if text is None:
        rec["value"] = document.hex()
        rec["value_encoding"] = "hex"
    else:
        rec["value"] = text


def _set_text(rec: dict[str, Any], name: str, data: bytes) -> None:
    text = as_text(data)
    if text is None:
        rec[name] = data.hex()
        rec[f"{name}_encoding"] = "hex"
    else:
        rec[name] = text


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
        _document(rec, msg.document_text, msg.document)
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

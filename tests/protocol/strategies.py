"""Hypothesis strategies derived from the declarations: a message of every registry variant."""

from __future__ import annotations

from typing import Any

from construct import Bytes, Const, Construct, Flag, FormatField, GreedyRange, StringEncoded, Struct
from hypothesis import strategies as st

from dcpctl.protocol.constants import MAGICS, RESPONSE_MAGICS, STATUSES
from dcpctl.protocol.registry import KeyKind, MessageSpec, ValueKind, Variant, all_variants
from dcpctl.protocol.walk import unwrap


def grammar_values(grammar: Construct) -> st.SearchStrategy[Any]:
    """Random values for a declaration, as the JSON form (hex for bytes)."""
    inner = unwrap(grammar)
    if isinstance(inner, Struct):
        parts = {}
        names = [s.name for s in inner.subcons]
        # subdoc specs and results: text of a length field's length (the path, the value)
        texts = [(length, text) for length, text in (("path_length", "path"), ("value_length", "value"))
                 if length in names and text in names and isinstance(unwrap(inner.subcons[names.index(text)]),
                                                                      StringEncoded)]
        skipped = {name for pair in texts for name in pair}
        for sub in inner.subcons:
            if not sub.name or sub.name in skipped:
                continue
            if isinstance(unwrap(sub), Const):
                continue
            if "key_length" in names and sub.name in ("key_length", "value_length", "key", "value"):
                continue
            parts[sub.name] = grammar_values(sub)
        if texts:
            return st.fixed_dictionaries({**parts, **{text: st.text(max_size=12) for _, text in texts}}).map(
                lambda d: {**d, **{length: len(d[text].encode()) for length, text in texts}})
        base = st.fixed_dictionaries(parts)
        if "key_length" in names:
            return base.flatmap(lambda d: st.tuples(st.binary(max_size=12), st.binary(max_size=20)).map(
                lambda kv: {**d, "key_length": len(kv[0]), "value_length": len(kv[1]),
                            "key": kv[0].hex(), "value": kv[1].hex()}))
        return base
    if isinstance(inner, GreedyRange):
        return st.lists(grammar_values(inner.subcon), max_size=5)
    if isinstance(inner, FormatField):
        return st.integers(min_value=0, max_value=(1 << (8 * inner.length)) - 1)
    if isinstance(inner, Bytes):
        return st.binary(min_size=inner.sizeof(), max_size=inner.sizeof()).map(bytes.hex)
    if inner is Flag:
        return st.booleans()
    if isinstance(inner, StringEncoded):  # a FlatBuffers string slot: left out (None) or any text
        return st.none() | st.text(max_size=20)
    raise TypeError(f"no strategy for {inner!r}")


PRINTABLE = st.characters(min_codepoint=33, max_codepoint=0x2FF,
                          exclude_categories=("Cc", "Cs", "Cf", "Co", "Cn", "Zs", "Zl", "Zp"))


def _named_lists(grammar: Construct, value: Any) -> Any:
    if isinstance(value, dict) and "features" in value:
        value = {**value, "features": [f & 0xFFFF for f in value["features"]]}
    return value


def variant_records(spec: MessageSpec, variant: Variant) -> st.SearchStrategy[dict[str, Any]]:
    """Records of one variant, encodable with fix_lengths."""
    magic_options = [spec.magic_class]
    if spec.magic_class in (0x80, 0x81) and spec.has_status is True and spec.type_field == "datatype":
        magic_options.append(0x08 if spec.magic_class == 0x80 else 0x18)
    response = spec.magic_class in RESPONSE_MAGICS

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        magic = draw(st.sampled_from(magic_options))
        rec: dict[str, Any] = {"magic": MAGICS.name(magic), "opcode": spec.name,
                               "opaque": draw(st.integers(0, 0xFFFFFFFF)),
                               "cas": draw(st.integers(0, (1 << 64) - 1))}
        conditions = dict(variant.when)
        if spec.type_field != "datatype":
            rec[spec.type_field] = conditions.get(spec.type_field, draw(st.integers(0, 255)))
        if response and spec.has_status:
            status = conditions.get("status")
            if isinstance(status, tuple):  # a row for several statuses (subdoc results)
                status = draw(st.sampled_from(status))
            rec["status"] = STATUSES.name(status if isinstance(status, int) else draw(
                st.sampled_from([0x01, 0x04, 0x07, 0x86])), 4)
        elif not response or not spec.has_status:
            rec["vbucket"] = draw(st.integers(0, 0xFFFF))
        if magic in (0x08, 0x18) and not response:
            rec["stream_id"] = draw(st.integers(1, 0xFFFF))
        if variant.note is not None:
            # errata rows share field names with the canonical row; only the length tells them apart
            rec["extras_length"] = variant.extras_length
        layout = variant.layout
        if layout is not None:
            for name in layout.names:
                size = layout.grammar.subcons[layout.names.index(name)].sizeof()
                rec[name] = draw(st.integers(0, (1 << (8 * size)) - 1))
            if "extras_byte0" in conditions:
                rec[layout.names[0]] = conditions["extras_byte0"]
        if variant.key is KeyKind.DOCUMENT or variant.key is KeyKind.TEXT:
            rec["key"] = draw(st.text(alphabet=PRINTABLE,
                                      min_size=1 if variant.key_presence.value == "required" else 0,
                                      max_size=30))
        datatype = 0
        if variant.value is ValueKind.GRAMMAR:
            grammars = variant.grammars
            if grammars and (variant.value_presence.value == "required" or draw(st.booleans())):
                grammar = draw(st.sampled_from(grammars))
                if variant.value_select and variant.value_select != ("value_length",):
                    key = next(k for k, g in variant.value_grammars.items() if g is grammar)
                    rec.update(dict(zip(variant.value_select, key, strict=True)))
                values = grammar_values(grammar)
                if variant.value_presence.value == "required":
                    values = values.filter(lambda d: all(v != [] for v in d.values()))
                rec.update(_named_lists(grammar, draw(values)))
        elif variant.value in (ValueKind.TEXT, ValueKind.SECRET, ValueKind.JSON, ValueKind.AUTO,
                               ValueKind.STREAM_REQUEST_JSON):
            if variant.value_presence.value != "forbidden":
                rec["value"] = draw(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126),
                                            min_size=1 if variant.value_presence.value == "required"
                                            else 0, max_size=40))
        elif variant.value is ValueKind.DOCUMENT:
            datatypes = [0, 1, 2, 4, 5, 6, 7] if spec.type_field == "datatype" else [0]
            datatype = draw(st.sampled_from(datatypes))
            rec["value"] = draw(st.text(max_size=60))
            if datatype & 4:
                rec["xattrs"] = draw(st.lists(st.fixed_dictionaries({
                    "key": st.text(alphabet="abc_xyz", min_size=1, max_size=8),
                    "value": st.sampled_from(['{"a":1}', '"s"', "true", "[1,2]"])}),
                    max_size=3, unique_by=lambda p: p["key"]))
        if spec.type_field == "datatype":
            rec["datatype"] = datatype
        return rec

    return build()


def every_variant() -> list[tuple[str, MessageSpec, Variant]]:
    return [(f"{d.name}:{s.name}:{v.name}", s, v) for d, s, v in all_variants()]

"""Walks over construct declarations: JSON conversion both ways, field spans, and the field catalogue.

These are the derivations house rule 1 asks for: given a declaration, produce what a renderer or an encoder
needs without restating the layout. Supported building blocks are the ones ``grammar.py`` uses: Struct,
GreedyRange, FormatField integers, value.Leb128 (unsigned LEB128), Bytes, StringEncoded (UTF-8 text of a given length)
and Const (through Renamed wrappers), and ``flat.FlatTable`` (a Struct read through offsets, not in order).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from construct import (
    Bytes,
    Const,
    Construct,
    Container,
    Flag,
    FormatField,
    GreedyRange,
    Renamed,
    StringEncoded,
    Struct,
)

from dcpctl.protocol.constants import HELLO_FEATURES, STATUSES, Vocabulary
from dcpctl.protocol.flat import FlatTable
from dcpctl.protocol.value import Leb128
from dcpctl.safetext import brief

# Grammar fields whose JSON form is a list of names rather than numbers.
NAMED_LIST_FIELDS: dict[str, Vocabulary] = {"features": HELLO_FEATURES}
# Grammar fields (inside a value: a subdocument result's status) named in JSON as the header's are.
NAMED_FIELDS: dict[str, Vocabulary] = {"status": STATUSES, "failed_status": STATUSES}


def list_item_name(field: str, value: int) -> str | None:
    """The name an item of a named list field has in JSON (a HELLO feature's), or None for other fields."""
    vocab = NAMED_LIST_FIELDS.get(field)
    return vocab.name(int(value), 4) if vocab is not None else None


def unwrap(sub: Construct) -> Construct:
    """The construct a name wraps (``"name" / subcon``)."""
    while isinstance(sub, Renamed):
        sub = sub.subcon
    return sub


def to_json(grammar: Construct, obj: Any, name: str = "") -> Any:
    """A parsed construct value as JSON-ready data: containers -> dicts, bytes -> hex."""
    inner = unwrap(grammar)
    if isinstance(inner, Struct):
        out: dict[str, Any] = {}
        for sub in inner.subcons:
            if sub.name and not sub.name.startswith("_"):
                out[sub.name] = to_json(sub, obj[sub.name], sub.name)
        return out
    if isinstance(inner, GreedyRange):
        if name in NAMED_LIST_FIELDS:
            return [list_item_name(name, v) for v in obj]
        return [to_json(inner.subcon, item) for item in obj]
    if isinstance(obj, bytes | bytearray):
        return bytes(obj).hex()
    if name in NAMED_FIELDS and isinstance(obj, int):
        return NAMED_FIELDS[name].name(obj, 4)
    return obj


class ShapeError(ValueError):
    """A JSON value that does not fit its declaration, said with the field's path (``failover_log[1].seqno``)."""


def from_json(grammar: Construct, data: Any, name: str = "", where: str = "") -> Any:
    """The inverse of :func:`to_json`, ready for ``grammar.build``. A length a later field's size is read by
    (a spec's path_length) is computed when absent, as the header's lengths are. Raises :class:`ShapeError`
    for a missing field, a value of another type or one out of its field's range."""
    where = where or name
    inner = unwrap(grammar)
    if isinstance(inner, Struct):
        if not isinstance(data, dict):
            raise ShapeError(f"{where or 'the value'} must be an object, got {brief(data)}")
        subs = [sub for sub in inner.subcons if sub.name]
        lengths = {length: sub for sub in subs if (length := _length_of(sub)) is not None}
        out = Container()
        for sub in subs:
            at = f"{where}.{sub.name}" if where else str(sub.name)
            if isinstance(unwrap(sub), Const):
                out[sub.name] = None
            elif isinstance(inner, FlatTable) and data.get(sub.name) is None:
                out[sub.name] = None  # a slot left out takes its default
            elif sub.name in data:
                out[sub.name] = from_json(sub, data[sub.name], sub.name, at)
            elif sub.name in lengths and lengths[sub.name].name in data:
                sized = lengths[sub.name]
                given = from_json(sized, data[sized.name], sized.name, f"{where}.{sized.name}" if where
                                  else str(sized.name))
                text = unwrap(sized)
                out[sub.name] = len(given.encode(text.encoding) if isinstance(text, StringEncoded) else given)
            else:
                raise ShapeError(f"{at} is missing")
        return out
    if isinstance(inner, GreedyRange):
        if not isinstance(data, list):
            raise ShapeError(f"{where} must be a list, got {brief(data)}")
        vocab = NAMED_LIST_FIELDS.get(name)
        if vocab is not None:
            return [from_json(inner.subcon, _named(vocab, item, at), "", at)
                    for index, item in enumerate(data) if (at := f"{where}[{index}]")]
        return [from_json(inner.subcon, item, "", f"{where}[{index}]") for index, item in enumerate(data)]
    if isinstance(inner, Bytes):
        try:
            return bytes.fromhex(data)
        except (TypeError, ValueError):
            raise ShapeError(f"{where} must be hex, got {brief(data)}") from None
    if isinstance(inner, StringEncoded):
        if not isinstance(data, str):
            raise ShapeError(f"{where} must be text, got {brief(data)}")
        return data
    if name in NAMED_FIELDS and isinstance(data, str) and isinstance(inner, FormatField):
        return _named(NAMED_FIELDS[name], data, where)
    if inner is Flag:
        if not isinstance(data, bool):
            raise ShapeError(f"{where} must be true or false, got {brief(data)}")
        return data
    if isinstance(inner, FormatField | Leb128):
        if isinstance(data, bool) or not isinstance(data, int):
            raise ShapeError(f"{where} must be an integer, got {brief(data)}")
        bits = 8 * inner.length if isinstance(inner, FormatField) else 32
        signed = isinstance(inner, FormatField) and inner.fmtstr[-1] in "bhilq"
        low, high = (-(1 << (bits - 1)), 1 << (bits - 1)) if signed else (0, 1 << bits)
        if not low <= data < high:
            raise ShapeError(f"{where} {brief(data)} does not fit {bits} bits")
        return data
    return data


def _named(vocab: Vocabulary, value: Any, where: str) -> int:
    """A code given by its name or its number."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise ShapeError(f"{where} must be a name or a number, got {brief(value)}")
    try:
        return vocab.code(value)
    except KeyError:
        raise ShapeError(f"{where}: unknown name {brief(value)}") from None


class _Lookups(dict[str, Any]):
    """A context that notes the names an expression reads."""

    def __init__(self) -> None:
        super().__init__()
        self.read: list[str] = []

    def __getitem__(self, key: str) -> Any:
        self.read.append(key)
        return key

    __getattr__ = __getitem__  # construct's ``this.name`` reads attributes


def _length_of(sub: Construct) -> str | None:
    """The field whose value is ``sub``'s size (``Bytes(this.path_length)``), or None."""
    inner = unwrap(sub)
    if isinstance(inner, StringEncoded):
        inner = unwrap(inner.subcon)
    if not isinstance(inner, Bytes) or not callable(inner.length):
        return None
    context = _Lookups()
    try:
        named = inner.length(context)
    except Exception:  # noqa: BLE001 - an expression of arithmetic on the names: not a plain length
        return None
    return named if context.read == [named] else None


def fixed_size(grammar: Construct) -> int | None:
    try:
        return int(grammar.sizeof())
    except Exception:  # noqa: BLE001 - construct raises SizeofError for variable layouts
        return None


def item_size(grammar: Construct) -> int | None:
    """Size of one repeated item when the grammar is a single GreedyRange of fixed-size items."""
    inner = unwrap(grammar)
    if isinstance(inner, Struct) and len(inner.subcons) == 1:
        only = unwrap(inner.subcons[0])
        if isinstance(only, GreedyRange):
            return fixed_size(only.subcon)
    return None


@dataclass(frozen=True, slots=True)
class Span:
    path: str  # dotted field path: "failover_log.0.vbucket_uuid"
    offset: int
    length: int
    value: Any


def spans(grammar: Construct, data: bytes, base: int = 0, prefix: str = "") -> Iterator[Span]:
    """Leaf fields of ``grammar`` over ``data`` with their byte offsets (``base`` added)."""
    stream = io.BytesIO(data)
    yield from _spans(grammar, stream, Container(), base, prefix)


def _spans(grammar: Construct, stream: io.BytesIO, context: Container, base: int,
           prefix: str) -> Iterator[Span]:
    inner = unwrap(grammar)
    if isinstance(inner, FlatTable):  # read through offsets: its slots and structure in the order of the bytes
        start = stream.tell()
        yield from (Span(f"{prefix}.{name}" if prefix else name, base + start + at, size, value)
                    for at, size, name, value in inner.parts(stream.read()))
        return
    if isinstance(inner, Struct):
        ctx = Container(_=context)
        for sub in inner.subcons:
            path = f"{prefix}.{sub.name}" if prefix else str(sub.name)
            start = stream.tell()
            sub_inner = unwrap(sub)
            if isinstance(sub_inner, Struct | GreedyRange):
                yield from _spans(sub_inner, stream, ctx, base, path)
                continue
            value = sub._parsereport(stream, ctx, path)
            ctx[sub.name] = value
            end = stream.tell()
            yield Span(path, base + start, end - start, bytes(value).hex()
                       if isinstance(value, bytes | bytearray) else value)
        return
    if isinstance(inner, GreedyRange):
        index = 0
        while True:
            start = stream.tell()
            try:
                items = list(_spans(inner.subcon, stream, context, base, f"{prefix}.{index}"))
            except Exception:  # noqa: BLE001 - GreedyRange stops at the first item that does not parse
                stream.seek(start)
                return
            if stream.tell() == start:
                return
            yield from items
            index += 1
    start = stream.tell()
    value = inner._parsereport(stream, context, prefix)
    yield Span(prefix, base + start, stream.tell() - start, value)


def top_fields(grammar: Construct) -> list[tuple[str, Construct]]:
    """The named top-level fields of a Struct declaration with their constructs, Renamed wrappers taken off."""
    inner = unwrap(grammar)
    if not isinstance(inner, Struct):
        return []
    return [(sub.name, unwrap(sub)) for sub in inner.subcons if sub.name and not sub.name.startswith("_")]


def field_names(grammar: Construct) -> list[tuple[str, str]]:
    """``(name, type)`` of the named fields of a declaration, nested lists as ``name[]``."""
    out: list[tuple[str, str]] = []
    inner = unwrap(grammar)
    if not isinstance(inner, Struct):
        return out
    for sub in inner.subcons:
        if not sub.name or sub.name.startswith("_"):
            continue
        leaf = unwrap(sub)
        if isinstance(leaf, GreedyRange):
            item = unwrap(leaf.subcon)
            if isinstance(item, Struct):
                out.append((sub.name, "list[object]"))
                out.extend((f"{sub.name}[].{n}", t) for n, t in field_names(item))
            else:
                out.append((sub.name, "list[str]" if sub.name in NAMED_LIST_FIELDS else "list[int]"))
        elif isinstance(leaf, FormatField):
            out.append((sub.name, "str" if sub.name in NAMED_FIELDS else f"u{8 * leaf.length}"))
        elif isinstance(leaf, Const):
            out.append((sub.name, f"u{8 * int(leaf.sizeof())}"))
        elif leaf is Flag:
            out.append((sub.name, "bool"))
        elif isinstance(leaf, StringEncoded):
            out.append((sub.name, "str"))
        elif isinstance(leaf, Leb128):
            out.append((sub.name, "int"))  # an unsigned LEB128 length (range scan keys and documents)
        else:
            out.append((sub.name, "hex"))
    return out

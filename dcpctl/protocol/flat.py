"""FlatBuffers tables as construct declarations (the version-2 values of DCP_SYSTEM_EVENT, reference 3.16).

A :class:`FlatTable` is a Struct whose subcons are the table's fields in schema order, so a field's place in the
declaration is its FlatBuffers slot; everything that walks a Struct (JSON both ways, the field catalogue, the
Spark schema, build's choice of a declaration by its field names) reads it unchanged, and only the wire form
differs: reading follows the root offset and the vtable (the ``flatbuffers`` runtime's :class:`Table`), writing
is the ``flatbuffers`` Builder's. A slot is ``Int64ul`` (ulong), ``Int32ul`` (uint), ``Flag`` (bool) or
:data:`FlatString` (string). Every default is zero, false or absent, as in kv_engine's ``events.fbs``; an absent
string reads as None.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, NoReturn

from construct import Construct, Container, Flag, FormatField, GreedyString, SizeofError, Struct, stream_read_entire
from construct import stream_write as _stream_write

if TYPE_CHECKING:
    from flatbuffers.table import Table

FlatString: Final = GreedyString("utf8")  # a string slot: an offset to a length-prefixed UTF-8 string
_VTABLE_HEADER: Final = 4  # a vtable's own size and its table's, two u16, before one u16 offset per slot
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")


class FlatError(ValueError):
    """Bytes that are not a table of this declaration (an offset outside them, a string past their end)."""


class FlatTable(Struct):  # type: ignore[misc]  # construct is untyped
    """A FlatBuffers table, its fields in slot order (see the module docstring)."""

    def __init__(self, *subcons: Construct) -> None:
        super().__init__(*subcons)
        self.slots: list[tuple[str, str, int]] = []  # (name, kind, bytes in the table) per slot
        for sub in self.subcons:
            kind = _kind(sub)
            if kind is None:
                raise TypeError(f"{sub.name}: not a FlatBuffers slot type")
            self.slots.append((sub.name, kind, 4 if kind == "string" else int(sub.sizeof())))

    def _parse(self, stream: Any, context: Any, path: str) -> Container:
        data = stream_read_entire(stream, path)
        table = Container((name, value) for name, _, _, _, value in self._slots(data))
        if self.encode(table) != data:
            # its fields alone could not give its bytes back (the record is the packet, reference 12): a valid
            # table laid out otherwise (an offset moved, bytes added) is named, with what it reads, and kept raw
            read = ", ".join(f"{name}={value!r}" for name, value in table.items())
            raise FlatError(f"a table laid out otherwise than kv_engine's FlatBuffers builder lays it out "
                            f"({read}); kept raw so that it re-encodes byte for byte")
        return table

    def _slots(self, data: bytes) -> Iterator[tuple[str, int, int, int, Any]]:
        """``(name, pointer, offset, length, value)`` of every slot: where a string slot's offset to its
        characters is (0 for the others), then the offset and length of its bytes (a string's characters), or
        ``(0, 0)`` where the table leaves it out and the default stands."""
        table, _, vsize = _frame(data)
        for slot, (name, kind, size) in enumerate(self.slots):
            field = _VTABLE_HEADER + 2 * slot
            at = table.Offset(field) if field + 2 <= vsize else 0
            if not at:
                yield name, 0, 0, 0, _DEFAULTS[kind]
                continue
            pos = table.Pos + at
            if kind == "string":
                start = pos + _offset(data, pos, 4, _U32) + 4
                length = _offset(data, start - 4, 4, _U32)
                _offset(data, start, length, None)
                yield name, pos, start, length, bytes(data[start:start + length]).decode("utf8")
                continue
            _offset(data, pos, size, None)
            value = table.Get(_runtime().flags[kind], pos)
            yield name, 0, pos, size, bool(value) if kind == "bool" else value

    def parts(self, data: bytes) -> list[tuple[int, int, str, Any]]:
        """``(offset, length, name, value)`` of every byte range, in the order of the bytes: the slots the
        table holds, and the structure between them named with a leading ``_`` (the root offset, the vtable
        and the table's offset to it, each string's offset and length, the alignment padding), as a hexdump
        shows them."""
        table, vtable, vsize = _frame(data)
        root = table.Pos
        slots = " ".join(str(_offset(data, vtable + at, 2, _U16)) for at in range(_VTABLE_HEADER, vsize - 1, 2))
        out: list[tuple[int, int, str, Any]] = [
            (0, 4, "_root_offset", root), (root, 4, "_vtable_offset", root - vtable),
            (vtable, vsize, "_vtable", f"{vsize} bytes, table {_offset(data, vtable + 2, 2, _U16)} bytes, slot "
                                       f"offsets {slots or 'none'}")]
        for name, pointer, at, size, value in self._slots(data):
            if pointer:
                out += [(pointer, 4, f"_{name}_offset", at - 4 - pointer), (at - 4, 4, f"_{name}_length", size)]
            if size:
                out.append((at, size, name, value))
        out.sort()
        gaps, end = [], 0
        for at, size, _, _ in [*out, (len(data), 0, "", None)]:
            if at > end:
                gaps.append((end, at - end, "_padding", bytes(data[end:at])))
            end = max(end, at + size)
        return sorted(out + gaps)

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        data = self.encode(obj)
        _stream_write(stream, data, len(data), path)
        return obj

    def encode(self, obj: Any) -> bytes:
        """The table as flatc lays it out from the same fields (the tests compare the bytes): strings first,
        then the fields largest first, the later slot first within a size; a field at its default is left
        out."""
        runtime = _runtime()
        builder = runtime.Builder(64)
        strings = {name: builder.CreateString(obj[name]) for name, kind, _ in self.slots
                   if kind == "string" and obj.get(name) is not None}
        builder.StartObject(len(self.slots))
        for slot, (name, kind, _) in sorted(enumerate(self.slots), key=lambda s: (-s[1][2], -s[0])):
            if kind != "string":
                value = obj.get(name) or _DEFAULTS[kind]
                builder.PrependSlot(runtime.flags[kind], slot, bool(value) if kind == "bool" else int(value),
                                    _DEFAULTS[kind])
            elif name in strings:
                builder.PrependUOffsetTRelativeSlot(slot, strings[name], 0)
        builder.Finish(builder.EndObject())
        return bytes(builder.Output())

    def _sizeof(self, context: Any, path: str) -> int:
        raise SizeofError("a FlatBuffers table has no fixed size", path=path)

    # construct's compiler would emit a Struct's in-order reads: a compiled declaration calls these methods
    def _emitparse(self, code: Any) -> str:
        raise NotImplementedError

    def _emitbuild(self, code: Any) -> str:
        raise NotImplementedError


class _Runtime:
    """The ``flatbuffers`` runtime, imported on the first FlatBuffers value: it imports numpy, when installed,
    for an API dcpctl does not use (much of every command's start, and most never see a FlatBuffers value)."""

    def __init__(self) -> None:
        from flatbuffers import number_types  # noqa: PLC0415
        from flatbuffers.builder import Builder  # noqa: PLC0415
        from flatbuffers.table import Table  # noqa: PLC0415

        self.Builder, self.Table = Builder, Table
        self.flags = {"u64": number_types.Uint64Flags, "u32": number_types.Uint32Flags,
                      "bool": number_types.BoolFlags}


@functools.cache
def _runtime() -> _Runtime:
    return _Runtime()


_DEFAULTS: Final[dict[str, Any]] = {"u64": 0, "u32": 0, "bool": False, "string": None}


def _frame(data: bytes) -> tuple[Table, int, int]:
    """The table at the root offset, where its vtable is and the vtable's size, all found inside ``data``."""
    table = _runtime().Table(data, _offset(data, 0, 4, _U32))
    vtable = table.Pos - _offset(data, table.Pos, 4, _I32)
    vsize = _offset(data, vtable, 2, _U16)
    _offset(data, vtable, vsize, None)
    return table, vtable, vsize


def _kind(sub: Construct) -> str | None:
    inner = sub.subcon if hasattr(sub, "subcon") else sub
    if inner is FlatString:
        return "string"
    if inner is Flag:
        return "bool"
    if isinstance(inner, FormatField) and inner.fmtstr in ("<Q", "<L"):
        return "u64" if inner.fmtstr == "<Q" else "u32"
    return None


def _short(data: bytes, at: int, size: int) -> NoReturn:
    raise FlatError(f"{size} bytes wanted at {at}, {len(data)} there")


def _offset(data: bytes, at: int, size: int, codec: struct.Struct | None) -> int:
    """The number ``codec`` reads at ``at`` (or, without one, 0), once ``at .. at + size`` is found inside
    ``data``: the runtime reads without bounds, and Python's negative indexes would read from the end."""
    if at < 0 or size < 0 or at + size > len(data):
        _short(data, at, size)
    return int(codec.unpack_from(data, at)[0]) if codec is not None else 0

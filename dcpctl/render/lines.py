"""Plain stream items as JSON lines: per-shape templates (a rendering cache) and the writers that fill them.

Theory of operation. A DCP stream is millions of plain items (a producer's mutation, deletion or
expiration that decoding finds clean), and ``--format jsonl`` prints each as ``orjson.dumps(record)`` and a
newline. Building each record to dump it is most of that cost, yet per item shape (plan, collection id and
key present or not, stream vbucket known or not) the line is the same bytes but for a few values. So the
line is kept per shape as a bytes %-template (:func:`item_line_template`) and filled from the item's reading:

- :class:`ItemLines` / :func:`plain_item_lines` / :class:`PlainLines`: from the item readers' reading
  (``protocol.itemreader``), for ``decode`` and ``capture``:
  :class:`PlainLines` is the capture decoder's item sink that gathers the lines in capture order.
- :class:`LineReaders`: ``read(buf, pos, n, lead, base, accept)`` reads the item and writes its line in one
  function compiled per shape, for ``stream``. It is None unless a whole plain item of its shape is framed at
  ``buf[pos:n]`` (within the connection's body limit), the record shows its value as text, and
  ``accept(opaque, by_seqno, length)`` (the connection tracker's ``plain_item``: its say, and the item's
  stream vbucket) takes it; else ``(end, opaque, by_seqno, line)``, the line being the template filled with
  ``lead`` (the slots' JSON values), ``base + pos`` as its offset and the stream vbucket when there is one.
  ``accept`` is asked last, once every stateless check has passed, so a None leaves the caller's state as
  it was. Its checks are the item readers' (``protocol.itemreader.reader_head``), generated from the same
  plan.

The wire format is read in ``protocol/``; only the line is made here. Tests hold every line to
``orjson.dumps(record)`` of the message decoded and annotated the usual way, on the golden vectors and on
generated items of every item layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import orjson

from dcpctl.protocol.grammar import HEADER_LENGTH
from dcpctl.protocol.itemreader import ShapeReaders, compiled, item_codec, reader_head
from dcpctl.protocol.message import DecodeOptions, PlainItem, decode, item_plan
from dcpctl.protocol.value import printable
from dcpctl.render.record import record as record_of

if TYPE_CHECKING:
    from dcpctl.protocol.message import _Plan

# A line reader's answer: end of the item, its opaque and by_seqno, its JSON line
LineItem = tuple[int, int, int, bytes]
# The caller's say on an item that passed every stateless check (opaque, by_seqno, length): taken or not, and
# its stream's vbucket (ConnectionTracker.plain_item)
Accept = Callable[[int, int, int], tuple[bool, int | None]]
LineReader = Callable[[bytes, int, int, tuple[bytes, ...], int, Accept], LineItem | None]
# The capture decoder's view of a plain item handed to a sink (sources.capture.ItemSink): the reading, its
# stream offset, ts, connection label, frames, stream vbucket, the connection's tracker (its ``options()``
# are those the item was read with) and the buffer it was read from (valid only during the call).
ItemSink = Callable[[PlainItem, int, float, str, list[int], int | None, Any, bytes], None]
# A plain item's JSON line, from the item reader's reading, its stream offset, ts, frames, stream vbucket,
# the options it was read with and the buffer it was read from.
LineMaker = Callable[[PlainItem, int, float, list[int], int | None, DecodeOptions, bytes], bytes]
_SERVER = "server>client"  # a capture's direction of the producer's items, as the record names it


def item_line_template(first: dict[str, Any], plan: _Plan, *, collection_id: bool, key: bool,
                       last: tuple[str, ...], slots: tuple[str, ...] = ("ts",)) -> bytes:
    """The JSON line (``orjson.dumps(record)`` plus a newline) of a plain stream item's record as a bytes
    %-template, for consumers that print millions of them: the keys :func:`~dcpctl.render.record.record` gives, in its
    order. ``first`` are the annotation's leading keys with their values, except those named in ``slots``
    (per item: ``ts``, a capture's ``frames``), which become the template's first slots, in ``first``'s
    order; ``last`` names the annotation's trailing integer keys (``stream_vbucket``). The slots, in order:
    ``slots``' values (JSON bytes), offset, vbucket, opaque, cas, datatype, key_length, total_body_length,
    every extras value, then collection_id, the key (JSON bytes) and the value (JSON bytes) as present, then
    ``last``'s values. A test holds it to the record on every shape it is used for."""
    assert plan.item_names is not None
    magic, opcode = plan.item_names
    parts = [b"," + orjson.dumps(name) + b":" + (b"%b" if name in slots else orjson.dumps(value).replace(b"%", b"%%"))
             for name, value in first.items()]
    parts[0] = b"{" + parts[0][1:]
    parts.append(b',"offset":%d,"magic":' + orjson.dumps(magic) + b',"opcode":' + orjson.dumps(opcode)
                 + b',"vbucket":%d,"opaque":%d,"cas":%d,"datatype":%d,"key_length":%d,"extras_length":'
                 + str(plan.extras_size).encode() + b',"total_body_length":%d')
    parts += [b"," + orjson.dumps(name) + b":%d" for name in plan.names]
    if collection_id:
        parts.append(b',"collection_id":%d')
    if key:
        parts.append(b',"key":%b')
    parts.append(b',"value":%b')
    parts += [b"," + orjson.dumps(name) + b":%d" for name in last]
    parts.append(b',"diagnostics":[]}\n')
    return b"".join(parts)


def plain_line(template: bytes, item: PlainItem, lead: tuple[bytes, ...], offset: int, value: bytes,
               last: tuple[int, ...]) -> bytes:
    """A plain item's JSON line: ``template`` (:func:`item_line_template`) filled from the item reader's
    reading, the values of the template's ``slots`` (``lead``: JSON bytes), the item's stream ``offset``, its
    :func:`plain_value` and the values of the template's ``last`` keys."""
    _, (_, _, keylen, _, datatype, vbucket, total, opaque, cas), _, values, _, _, collection_id, key, _, _, _ = item
    head = (*lead, offset, vbucket, opaque, cas, datatype, keylen, total)
    if collection_id is not None:
        tail: tuple[Any, ...] = (collection_id, orjson.dumps(key), value) if key is not None else (collection_id, value)
    else:
        tail = (orjson.dumps(key), value) if key is not None else (value,)
    return template % (head + values + tail + last)


class ItemLines:
    """One connection's plain items as JSON lines: an :func:`item_line_template` per item shape (plan,
    collection id, key and stream vbucket present or not), made when the shape is first seen; the last
    shape's is kept at hand, as items come in long runs of one shape. ``first`` and ``slots`` as
    :func:`item_line_template` takes them."""

    def __init__(self, first: dict[str, Any], slots: tuple[str, ...] = ("ts",)) -> None:
        self.first, self.slots = first, slots
        self.templates: dict[tuple[int, bool, bool, bool], bytes] = {}
        self.shape: tuple[int, bool, bool, bool] | None = None
        self.template = b""

    def line(self, item: PlainItem, lead: tuple[bytes, ...], offset: int, value: bytes,
             stream_vbucket: int | None) -> bytes:
        """:func:`plain_line` of ``item`` with its shape's template; ``lead``: the slots' JSON values."""
        plan = item[2]
        shape = (id(plan), item[6] is not None, item[7] is not None, stream_vbucket is not None)
        if shape != self.shape:
            template = self.templates.get(shape)
            if template is None:
                template = self.templates[shape] = item_line_template(
                    self.first, plan, collection_id=shape[1], key=shape[2],
                    last=("stream_vbucket",) if shape[3] else (), slots=self.slots)
            self.shape, self.template = shape, template
        return plain_line(self.template, item, lead, offset, value, () if stream_vbucket is None else (stream_vbucket,))


def plain_value(raw: bytes, value_offset: int, end: int) -> bytes | None:
    """A plain item's value as the record's JSON string (bytes), when the record shows it as text; None when
    the record shows it otherwise (hex: not UTF-8, or not printable)."""
    try:
        text = raw[value_offset:end].decode()
    except UnicodeDecodeError:
        return None
    if not (text.isprintable() or printable(text)):
        return None
    return orjson.dumps(text)


class LineReaders(ShapeReaders):
    """Line readers. ``first`` and ``slots`` are :func:`item_line_template`'s; ``max_body`` is the
    connection's body limit (a longer item goes the usual way, where the framer says what is wrong with it)."""

    def __init__(self, first: dict[str, Any], slots: tuple[str, ...], max_body: int) -> None:
        super().__init__()
        self.first, self.slots, self.max_body = first, slots, max_body

    def _make(self, options: DecodeOptions, opcode: int, extlen: int) -> LineReader | None:
        return compile_reader(options, opcode, extlen, self.first, self.slots, self.max_body)

    def at(self, buf: bytes, pos: int, n: int, options: DecodeOptions) -> LineReader | None:
        """The reader for the shape of the packet at ``buf[pos:n]``, None when that shape is not a plain
        item's (or too little is there to tell)."""
        reader: LineReader | None = self.shaped(buf, pos, n, options)
        return reader


def compile_reader(options: DecodeOptions, opcode: int, extlen: int, first: dict[str, Any],
                   slots: tuple[str, ...], max_body: int) -> LineReader | None:
    """The line reader of one shape (see the module docstring), or None when the shape is not a plain item's."""
    found = item_plan(options.dialect, opcode, extlen)
    if found is None:
        return None
    plan, seqno_at = found[0], found[7]
    lines, extras, document_key = reader_head(options, opcode, extlen, found, "buf, pos, n, lead, base, accept",
                                          max_body)

    def templates(key: bool) -> tuple[bytes, bytes]:
        made = [item_line_template(first, plan, collection_id=key and document_key, key=key, last=last,
                                   slots=slots) for last in ((), ("stream_vbucket",))]
        return made[0], made[1]

    lead = "".join(f"lead[{i}], " for i in range(len(slots)))
    head = f"{lead}base + pos, vbucket, opaque, cas, datatype, keylen, total, {extras}, "
    keyed_tail = "collection_id, " if document_key else ""
    lines += [
        "    try:",
        "        text = buf[vo:end].decode()",
        "    except UnicodeDecodeError:",
        "        return None",
        "    if datatype and text:",
        "        try:",
        "            loads(text)",
        "        except ValueError:",
        "            return None",
        "    if not (text.isprintable() or printable(text)):",
        "        return None",
        f"    handled, stream_vbucket = accept(opaque, x{seqno_at}, end - pos)",
        "    if not handled:",
        "        return None",
        "    if keylen:",
        "        key = dumps(key)",
        "        if stream_vbucket is None:",
        f"            return end, opaque, x{seqno_at}, keyed % ({head}{keyed_tail}key, dumps(text))",
        f"        return end, opaque, x{seqno_at}, keyed_stream % ({head}{keyed_tail}key, dumps(text), stream_vbucket)",
        "    if stream_vbucket is None:",
        f"        return end, opaque, x{seqno_at}, keyless % ({head}dumps(text),)",
        f"    return end, opaque, x{seqno_at}, keyless_stream % ({head}dumps(text), stream_vbucket)",
    ]
    keyed, keyless = templates(key=True), templates(key=False)
    reader: LineReader = compiled(lines, f"line reader {opcode:#04x}/{extlen}", {
        "unpack": item_codec(plan), "loads": orjson.loads, "dumps": orjson.dumps, "printable": printable,
        "keyed": keyed[0], "keyed_stream": keyed[1], "keyless": keyless[0], "keyless_stream": keyless[1]})
    return reader


class PlainLines:
    """Item sinks (the capture decoder's ``items``) that write each plain item as its JSON line, the bytes
    ``orjson.dumps(record)`` and a newline would give for the message decoded and annotated the usual way
    (a test holds them equal): ``decode --format jsonl``'s fast path. The lines gather in one buffer in
    capture order; :meth:`between` hands them over in their place among the messages that come out of the
    decoder."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def between(self, events: Iterable[Any]) -> Iterator[Any]:
        """``events`` (from feed() or finish()), each after the lines written before it, and then the rest."""
        parts = self.parts
        for event in events:
            if parts:
                yield self.take()
            yield event
        if parts:
            yield self.take()

    def take(self) -> bytes:
        out = b"".join(self.parts)
        self.parts.clear()
        return out

    def sink(self, label: str) -> ItemSink:
        """A connection's sink."""
        line, parts = plain_item_lines(label), self.parts

        def add(item: PlainItem, offset: int, ts: float, _label: str, frames: list[int], stream_vbucket: int | None,
                tracker: Any, buf: bytes) -> None:
            parts.append(line(item, offset, ts, frames, stream_vbucket, tracker.options(), buf))

        return add


def plain_item_lines(label: str) -> LineMaker:
    """A connection's plain items (server to client) as their JSON lines: the bytes ``orjson.dumps(record)``
    and a newline give for the message decoded and annotated as the capture decoder does. ts and frames are
    written once while they stay the same (frames are compared by identity: one list per capture span, held
    here so that its identity is not reused)."""
    lines = ItemLines({"ts": None, "connection": label, "direction": _SERVER, "frames": None}, ("ts", "frames"))
    seen: list[Any] = [None, b"", None, b""]  # ts, its JSON, frames, its JSON

    def line(item: PlainItem, offset: int, ts: float, frames: list[int], stream_vbucket: int | None,
             options: DecodeOptions, buf: bytes) -> bytes:
        end, header, value_offset = item[0], item[1], item[10]
        value = plain_value(buf, value_offset, end)
        if value is None:  # shown as hex: the record, the usual way
            msg = decode(bytes(buf[end - HEADER_LENGTH - header[6]:end]), offset, options)
            msg.annotate({"ts": ts, "connection": label, "direction": _SERVER, "frames": frames},
                         {} if stream_vbucket is None else {"stream_vbucket": stream_vbucket}, [])
            return orjson.dumps(record_of(msg), option=orjson.OPT_APPEND_NEWLINE)
        if ts != seen[0]:
            seen[0], seen[1] = ts, orjson.dumps(ts)
        if frames is not seen[2]:
            seen[2], seen[3] = frames, orjson.dumps(frames)
        return lines.line(item, (seen[1], seen[3]), offset, value, stream_vbucket)

    return line

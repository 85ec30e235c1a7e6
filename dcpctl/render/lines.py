"""Plain stream items as JSON lines: per-shape templates (a rendering cache) and the writers that fill them.

Theory of operation. A DCP stream is millions of plain items (a producer's mutation, deletion or
expiration that decoding finds clean), and ``--format jsonl`` prints each as ``orjson.dumps(record)`` and a
newline. Building each record to dump it is most of that cost, yet per item shape (plan, collection id and
key present or not, stream vbucket known or not) the line is the same bytes but for a few values. So the
line is kept per shape as a bytes %-template (:func:`item_line_template`) and filled from the item's
message, as the compiled plain reader (``protocol.reader``) gives it, by a filler generated per plan
from the same field list (:func:`line_filler`): the wire format is read in ``protocol/``, and only the
line is made here.

- :class:`ItemLines`: a connection's fillers. :meth:`ItemLines.line` is None when the record shows the
  value otherwise than as text (hex); with ``accept`` (``stream``'s way: the connection tracker's
  ``plain_item``, its say and the item's stream vbucket), ``accept`` is asked last, once the value is
  known to be text, so a None leaves the caller's state as it was.
- :func:`plain_item_lines` / :class:`PlainLines`: the capture decoder's item sinks for ``decode`` and
  ``capture``, which gather the lines in capture order.

Tests hold every line to ``orjson.dumps(record)`` of the message decoded and observed the usual way, on
the golden vectors and on generated items of every item layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

import orjson

from dcpctl.dcp.observed import Observed
from dcpctl.protocol.codegen import compiled
from dcpctl.protocol.message import Message
from dcpctl.protocol.value import printable
from dcpctl.render.record import record as record_of

if TYPE_CHECKING:
    from dcpctl.protocol.codegen import compiled
from dcpctl.protocol.message import _Plan

# The caller's say on an item whose line can be written: taken or not, and its stream's vbucket
# (ConnectionTracker.plain_item)
Accept = Callable[[Message], tuple[bool, int | None]]
# A plan's filler: (message, the slots' JSON values, stream vbucket, accept or None) -> the line, or None.
LineFiller = Callable[[Message, tuple[bytes, ...], int | None, Accept | None], bytes | None]
# The capture decoder's view of a plain item handed to a sink (sources.capture.ItemSink): the plain reader's
# message, ts, connection label, frames, stream vbucket, the connection's tracker.
ItemSink = Callable[[Message, float, str, list[int], int | None, Any], None]
# A plain item's JSON line, from the plain reader's message, ts, frames and stream vbucket.
LineMaker = Callable[[Message, float, list[int], int | None], bytes]
_SERVER = "server>client"  # a capture's direction of the producer's items, as the record names it
FILLERS_KEPT: Final = 256  # plans a connection keeps fillers for: a stream has a handful; more is a hostile mix
# Fillers' code kept by the process (plans x slot sets): a capture's connections share it, each binding its
# own templates, so thousands of short connections compile nothing after the first.
FILLER_MAKERS_KEPT: Final = 1024
_FILLER_MAKERS: dict[tuple[int, tuple[str, ...]], tuple[_Plan, Callable[..., LineFiller]]] = {}


def item_line_template(first: dict[str, Any], plan: _Plan, *, collection_id: bool, key: bool,
                       last: tuple[str, ...], slots: tuple[str, ...] = ("ts",)) -> bytes:
    """The JSON line (``orjson.dumps(record)`` plus a newline) of a plain stream item's record as a bytes
    %-template, for consumers that print millions of them: the keys :func:`~dcpctl.render.record.record` gives, in its
    order. ``first`` are the context's leading keys with their values, except those named in ``slots``
    (per item: ``ts``, a capture's ``frames``), which become the template's first slots, in ``first``'s
    order; ``last`` names the context's trailing integer keys (``stream_vbucket``). The slots, in order:
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


def line_filler(first: dict[str, Any], plan: _Plan, slots: tuple[str, ...]) -> LineFiller:
    """The filler of one plan's :func:`item_line_template`\\ s (key and collection id present or not, stream
    vbucket known or not): the value as text (None when the record shows it as hex), ``accept``'s say when
    given, then the template filled. Its code is generated once per plan and slots, as one function so that
    a line costs one call; a connection's templates (its label is in them) are bound to it here."""
    templates = {f"{name}{'_stream' if stream else ''}": item_line_template(
        first, plan, collection_id=name == "prefixed", key=name != "keyless",
        last=("stream_vbucket",) if stream else (), slots=slots)
        for name in ("keyed", "prefixed", "keyless") for stream in (False, True)}
    key = (id(plan), slots)
    found = _FILLER_MAKERS.get(key)
    if found is None or found[0] is not plan:
        if len(_FILLER_MAKERS) >= FILLER_MAKERS_KEPT:
            _FILLER_MAKERS.clear()
        found = _FILLER_MAKERS[key] = (plan, _filler_maker(plan, slots))
    filler: LineFiller = found[1](**templates)
    return filler


def _filler_maker(plan: _Plan, slots: tuple[str, ...]) -> Callable[..., LineFiller]:
    extras = "".join(f"x{i}, " for i in range(len(plan.names)))
    head = "".join(f"lead[{i}], " for i in range(len(slots))) + \
        f"msg.offset, vbucket, opaque, cas, datatype, keylen, total, {extras}"
    lines = [
        "def make(keyed, keyed_stream, prefixed, prefixed_stream, keyless, keyless_stream):",
        "  def read(msg, lead, stream_vbucket, accept):",
        "    raw = msg.raw",
        "    try:",
        "        text = raw[msg.value_offset:msg.body_end].decode()",
        "    except UnicodeDecodeError:",
        "        return None",
        "    if not (text.isprintable() or printable(text)):",
        "        return None",
        "    if accept is not None:",
        "        handled, stream_vbucket = accept(msg)",
        "        if not handled:",
        "            return None",
        "    _, _, keylen, _, datatype, vbucket, total, opaque, cas = msg.header",
    ]
    if extras:
        lines.append(f"    {extras}= msg.extras_values")
    lines += [
        "    if keylen:",
        "        key = dumps(msg.document_key.decode())",
        "        collection_id = msg.collection_id",
        "        if collection_id is None:",
        "            if stream_vbucket is None:",
        f"                return keyed % ({head}key, dumps(text))",
        f"            return keyed_stream % ({head}key, dumps(text), stream_vbucket)",
        "        if stream_vbucket is None:",
        f"            return prefixed % ({head}collection_id, key, dumps(text))",
        f"        return prefixed_stream % ({head}collection_id, key, dumps(text), stream_vbucket)",
        "    if stream_vbucket is None:",
        f"        return keyless % ({head}dumps(text),)",
        f"    return keyless_stream % ({head}dumps(text), stream_vbucket)",
        "  return read",
    ]
    assert plan.item_names is not None
    maker: Callable[..., LineFiller] = compiled(lines, f"line filler {plan.item_names[1]}/{plan.extras_size}",
                                                {"dumps": orjson.dumps, "printable": printable}, "make")
    return maker


class ItemLines:
    """One connection's plain items as JSON lines: a :func:`line_filler` per plan, made when the plan is
    first seen; the last plan's is kept at hand, as items come in long runs of one shape. ``first`` and
    ``slots`` as :func:`item_line_template` takes them."""

    def __init__(self, first: dict[str, Any], slots: tuple[str, ...] = ("ts",)) -> None:
        self.first, self.slots = first, slots
        self.fillers: dict[int, tuple[_Plan, LineFiller]] = {}  # id(plan) -> the plan (kept alive), its filler
        self.plan: _Plan | None = None
        self.filler: LineFiller | None = None

    def line(self, msg: Message, lead: tuple[bytes, ...], stream_vbucket: int | None,
             accept: Accept | None = None) -> bytes | None:
        """``msg``'s JSON line (a plain reader's message; ``lead``: the slots' JSON values), None when the
        record shows its value as hex; with ``accept``, also None when it does not take the item, and its
        stream vbucket is the line's."""
        plan = msg.plan
        filler = self.filler
        if plan is not self.plan or filler is None:
            assert plan is not None  # a plain reader's message has its plan
            found = self.fillers.get(id(plan))
            if found is None or found[0] is not plan:
                if len(self.fillers) >= FILLERS_KEPT:
                    self.fillers.clear()
                found = self.fillers[id(plan)] = (plan, line_filler(self.first, plan, self.slots))
            self.plan, self.filler = plan, found[1]
            filler = found[1]
        return filler(msg, lead, stream_vbucket, accept)


class PlainLines:
    """Item sinks (the capture decoder's ``items``) that write each plain item as its JSON line, the bytes
    ``orjson.dumps(record)`` and a newline would give for the message decoded and observed the usual way
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

        def add(msg: Message, ts: float, _label: str, frames: list[int], stream_vbucket: int | None,
                _tracker: Any) -> None:
            parts.append(line(msg, ts, frames, stream_vbucket))

        return add


def plain_item_lines(label: str) -> LineMaker:
    """A connection's plain items (server to client) as their JSON lines: the bytes ``orjson.dumps(record)``
    and a newline give for the message observed as the capture decoder does. ts and frames are written once
    while they stay the same (frames are compared by identity: one list per capture span, held here so that
    its identity is not reused)."""
    lines = ItemLines({"ts": None, "connection": label, "direction": _SERVER, "frames": None}, ("ts", "frames"))
    seen: list[Any] = [None, b"", None, b""]  # ts, its JSON, frames, its JSON

    def line(msg: Message, ts: float, frames: list[int], stream_vbucket: int | None) -> bytes:
        if ts != seen[0]:
            seen[0], seen[1] = ts, orjson.dumps(ts)
        if frames is not seen[2]:
            seen[2], seen[3] = frames, orjson.dumps(frames)
        got = lines.line(msg, (seen[1], seen[3]), stream_vbucket)
        if got is not None:
            return got
        # shown as hex: the record, the usual way
        observed = Observed(msg, {"ts": ts, "connection": label, "direction": _SERVER, "frames": frames},
                            {} if stream_vbucket is None else {"stream_vbucket": stream_vbucket})
        return orjson.dumps(record_of(observed), option=orjson.OPT_APPEND_NEWLINE)

    return line

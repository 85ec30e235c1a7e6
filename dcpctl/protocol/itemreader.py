"""Plain stream items read by functions compiled per item shape: as items, or straight to JSON lines.

Theory of operation. :func:`~dcpctl.protocol.message.plain_item_at` reads a plain item (a producer's
mutation, deletion or expiration that decoding would find clean) in place, interpreting the item's plan:
it looks the plan up, unpacks the header and then the extras, loops over the plan's flag checks and calls a
helper for the key and value. Consumers of millions of items spend much of their time there, and more
between it and their output. So, per item shape (opcode and extras length, under one set of decode
options), a function is generated from the same plan, as construct compiles a declaration: the header and
the extras in one ``struct`` unpack, only the checks that shape's plan has, with its constants folded in,
the key and value read inline. Two kinds are made:

- :class:`ItemReaders`: ``read(buf, pos, n)`` is exactly ``plain_item_at(buf, pos, n, options)`` for
  items of its shape (the same :data:`~dcpctl.protocol.message.PlainItem`, or None), for the capture
  decoder (``decode`` and ``analyze``).
- :class:`LineReaders`: ``read(buf, pos, n, lead, base, accept)`` goes on to the item's JSON line, for
  ``stream``. It is None unless a whole plain item of its shape is framed at ``buf[pos:n]`` (within the
  connection's body limit), the record shows its value as text, and ``accept(opaque, by_seqno, length)``
  (the connection tracker's ``plain_item``: its say, and the item's stream vbucket) takes it; else
  ``(end, opaque, by_seqno, line)``, the line being :func:`item_line_template`'s template filled with
  ``lead`` (the slots' JSON values), ``base + pos`` as its offset and the stream vbucket when there is one.
  ``accept`` is asked last, once every stateless check has passed, so a None leaves the caller's state as
  it was.

Tests hold every reader to ``plain_item_at`` (and ``plain_value`` and ``plain_line`` for lines), None for
None, on the golden vectors and on generated items of every item layout.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

import orjson

from dcpctl.protocol.constants import Magic
from dcpctl.protocol.grammar import HEADER_LENGTH
from dcpctl.protocol.message import HEADER, DecodeOptions, ItemPlan, PlainItem, item_line_template, item_plan
from dcpctl.protocol.registry import KeyKind
from dcpctl.protocol.value import printable

# A reader's answer: end of the item, its opaque and by_seqno, its JSON line
LineItem = tuple[int, int, int, bytes]
# The caller's say on an item that passed every stateless check (opaque, by_seqno, length): taken or not, and
# its stream's vbucket (ConnectionTracker.plain_item)
Accept = Callable[[int, int, int], tuple[bool, int | None]]
LineReader = Callable[[bytes, int, int, tuple[bytes, ...], int, Accept], LineItem | None]
ItemReader = Callable[[bytes, int, int], PlainItem | None]
READERS_KEPT: Final = 64  # shapes compiled per connection: a stream has a handful; more means a hostile mix
ITEM_READERS_KEPT: Final = 1024  # item readers kept by the process (dialects x collections x the item shapes)
_ITEM_READERS: dict[tuple[str, bool, int, int], ItemReader | None] = {}
_UNSEEN: Final = object()  # a shape no reader was asked for yet (None is cached: not a plain item's shape)


class _Readers:
    """A connection's compiled readers, made when a shape is first seen (None for a shape that is not a
    plain item's), forgotten when the decode options change (collections negotiated)."""

    def __init__(self) -> None:
        self._options: DecodeOptions | None = None
        self._readers: dict[tuple[int, int], Any] = {}

    def _make(self, options: DecodeOptions, opcode: int, extlen: int) -> Any:
        raise NotImplementedError

    def _at(self, buf: bytes, pos: int, n: int, options: DecodeOptions) -> Any:
        if n - pos < HEADER_LENGTH:
            return None
        if options is not self._options:
            self._options, self._readers = options, {}
        shape = (buf[pos + 1], buf[pos + 4])
        reader = self._readers.get(shape, _UNSEEN)
        if reader is not _UNSEEN:
            return reader
        if len(self._readers) >= READERS_KEPT:
            self._readers.clear()
        reader = self._readers[shape] = self._make(options, *shape)
        return reader


class ItemReaders(_Readers):
    """Item readers: ``at(...)(buf, pos, n)`` is ``plain_item_at(buf, pos, n, options)``."""

    def _make(self, options: DecodeOptions, opcode: int, extlen: int) -> ItemReader | None:
        return compile_item_reader(options, opcode, extlen)

    def at(self, buf: bytes, pos: int, n: int, options: DecodeOptions) -> ItemReader | None:
        """The reader for the shape of the packet at ``buf[pos:n]``, None when that shape is not a plain
        item's (or too little is there to tell)."""
        reader: ItemReader | None = self._at(buf, pos, n, options)
        return reader


class LineReaders(_Readers):
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
        reader: LineReader | None = self._at(buf, pos, n, options)
        return reader


def _checks(options: DecodeOptions, opcode: int, extlen: int, found: ItemPlan, signature: str,
            max_body: int | None) -> tuple[list[str], str, bool]:
    """The generated function's head, shared by both kinds: the unpack and every stateless check of the
    shape's plan as plain_item_at makes them, up to and including the key's (the value's checks differ by
    kind and follow). Returns (source lines, the extras' variable names, whether the key has a collection
    prefix)."""
    (plan, _, nmeta_at, zero_seqno_at, flag_checks, key_rule, value_rule, _, _, _, datatypes) = found
    extras = ", ".join(f"x{i}" for i in range(len(plan.names)))
    document_key = bool(options.collections) and plan.variant is not None and plan.variant.key is KeyKind.DOCUMENT
    allowed = tuple(sorted(set(datatypes) & {0, 1}))  # plain: raw or JSON (and what the opcode allows)
    limit = f" or total > {max_body}" if max_body is not None else ""
    lines = [
        f"def read({signature}):",
        f"    if n - pos < {HEADER_LENGTH + extlen}:",
        "        return None",
        f"    magic, opcode, keylen, extlen, datatype, vbucket, total, opaque, cas, {extras}, = unpack(buf, pos)",
        f"    end = pos + {HEADER_LENGTH} + total",
        f"    if magic != {Magic.CLIENT_REQUEST:#04x} or opcode != {opcode} or extlen != {extlen} or end > n{limit} "
        f"or datatype not in {allowed!r} or keylen > total - {extlen}:",
        "        return None",
        f"    ko = pos + {HEADER_LENGTH + extlen}",
        "    vo = ko + keylen",
    ]
    checks = [f"x{nmeta_at}"] if nmeta_at >= 0 else []
    if zero_seqno_at >= 0:
        checks.append(f"not x{zero_seqno_at}")
    checks += [f"x{at} & {~mask & 0xFFFFFFFFFFFFFFFF}" for at, mask in flag_checks]
    # presence rules as decode's: 0 optional, 1 required, 2 forbidden
    checks += {0: [], 1: ["not keylen"], 2: ["keylen"]}[key_rule]
    checks += {0: [], 1: ["end == vo"], 2: ["end > vo"]}[value_rule]
    if checks:
        lines += [f"    if {' or '.join(checks)}:", "        return None"]
    lines += ["    if keylen:"]
    if document_key:
        lines += ["        collection_id = buf[ko]", "        if collection_id >= 0x80 or keylen == 1:",
                  "            return None", "        ko += 1"]
    lines += ["        try:", "            key = buf[ko:vo].decode()", "        except UnicodeDecodeError:",
              "            return None", "        if not key.isprintable():", "            return None"]
    return lines, extras, document_key


def _compiled(lines: list[str], name: str, namespace: dict[str, Any]) -> Any:
    exec(compile("\n".join(lines), f"<dcpctl {name}>", "exec"), namespace)  # noqa: S102
    return namespace["read"]


def _codec(plan: Any) -> Any:
    """The header and the extras as one ``struct`` (what the generated function unpacks)."""
    extras_format = plan.unpack.__self__.format
    assert extras_format.startswith(">"), extras_format  # the wire is big-endian throughout
    return struct.Struct(HEADER.format + extras_format[1:]).unpack_from


def compile_item_reader(options: DecodeOptions, opcode: int, extlen: int) -> ItemReader | None:
    """The item reader of one shape (see the module docstring), or None when the shape is not a plain item's.
    Item readers are pure functions of the dialect, the collections option and the shape, so each is compiled
    once per process (a capture may hold many connections)."""
    key = (options.dialect.name, bool(options.collections), opcode, extlen)
    if key in _ITEM_READERS:
        return _ITEM_READERS[key]
    if len(_ITEM_READERS) >= ITEM_READERS_KEPT:
        _ITEM_READERS.clear()
    reader = _ITEM_READERS[key] = _compile_item_reader(options, opcode, extlen)
    return reader


def _compile_item_reader(options: DecodeOptions, opcode: int, extlen: int) -> ItemReader | None:
    found = item_plan(options.dialect, opcode, extlen)
    if found is None:
        return None
    plan, seqno_at, rev_seqno_at, names = found[0], found[7], found[8], found[9]
    lines, extras, document_key = _checks(options, opcode, extlen, found, "buf, pos, n", None)
    # plain_item_at's (collection_id, key): None where the item has no key, or its key no collection prefix
    lines += ["    if not keylen:", "        collection_id = key = None"] if document_key else \
        ["    collection_id = None", "    if not keylen:", "        key = None"]
    lines += [
        "    if datatype and end > vo:",
        "        try:",
        "            loads(buf[vo:end])",
        "        except ValueError:",
        "            return None",
        "    return (end, (magic, opcode, keylen, extlen, datatype, vbucket, total, opaque, cas), plan, "
        f"({extras},), magic_name, opcode_name, collection_id, key, x{seqno_at}, x{rev_seqno_at}, vo)",
    ]
    reader: ItemReader = _compiled(lines, f"item reader {opcode:#04x}/{extlen}", {
        "unpack": _codec(plan), "loads": orjson.loads, "plan": plan, "magic_name": names[0],
        "opcode_name": names[1]})
    return reader


def compile_reader(options: DecodeOptions, opcode: int, extlen: int, first: dict[str, Any],
                   slots: tuple[str, ...], max_body: int) -> LineReader | None:
    """The line reader of one shape (see the module docstring), or None when the shape is not a plain item's."""
    found = item_plan(options.dialect, opcode, extlen)
    if found is None:
        return None
    plan, seqno_at = found[0], found[7]
    lines, extras, document_key = _checks(options, opcode, extlen, found, "buf, pos, n, lead, base, accept",
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
    reader: LineReader = _compiled(lines, f"line reader {opcode:#04x}/{extlen}", {
        "unpack": _codec(plan), "loads": orjson.loads, "dumps": orjson.dumps, "printable": printable,
        "keyed": keyed[0], "keyed_stream": keyed[1], "keyless": keyless[0], "keyless_stream": keyless[1]})
    return reader

"""Plain stream items straight to their JSON lines: one compiled reader per item shape.

Theory of operation. :func:`~dcpctl.protocol.message.plain_item_at` reads a plain item in place and
:class:`~dcpctl.protocol.message.ItemLines` fills its line's template; between them an item passes through
six calls and three tuples. A consumer that prints millions of items (``dcpctl stream --format jsonl``)
spends a third of its time there. :class:`LineReaders` compiles, per item shape (opcode and extras length,
under one set of decode options), a single function that does what those calls do for that shape: the
header and the extras in one ``struct`` unpack, the shape's checks with its constants folded in (only the
checks the plan has are written out), the key and value as the record shows them, and the template's
arguments in order. It is generated from the same plan :func:`plain_item_at` uses, as construct compiles
a declaration, and tests hold every reader to ``plain_item_at`` plus ``plain_line``, line for line and
``None`` for ``None``, on the golden vectors and on generated items of every shape.

Contract of a reader ``read(buf, pos, n, lead, base, accept)``: ``None`` unless a whole plain item of its
shape is framed at ``buf[pos:n]`` (within the connection's body limit), the record shows its value as text
and ``accept(opaque, by_seqno, length)`` (the connection tracker's ``plain_item``: its say, and the item's
stream vbucket) takes it; else ``(end, opaque, by_seqno, line)``, the line being the template filled with
``lead`` (the slots' JSON values), ``base + pos`` as its offset and the stream vbucket when there is one.
``accept`` is asked last, once every stateless check has passed, so a ``None`` leaves the caller's state as
it was.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

import orjson

from dcpctl.protocol.grammar import HEADER_LENGTH
from dcpctl.protocol.message import HEADER, DecodeOptions, item_line_template, item_plan
from dcpctl.protocol.registry import KeyKind
from dcpctl.protocol.value import printable

# A reader's answer: end of the item, its opaque and by_seqno, its JSON line
LineItem = tuple[int, int, int, bytes]
# The caller's say on an item that passed every stateless check (opaque, by_seqno, length): taken or not, and
# its stream's vbucket (ConnectionTracker.plain_item)
Accept = Callable[[int, int, int], tuple[bool, int | None]]
LineReader = Callable[[bytes, int, int, tuple[bytes, ...], int, Accept], LineItem | None]
READERS_KEPT: Final = 64  # shapes compiled per connection: a stream has a handful; more means a hostile mix


class LineReaders:
    """One connection's compiled readers, made when a shape is first seen. ``first`` and ``slots`` are
    :func:`item_line_template`'s; ``max_body`` is the connection's body limit (a longer item goes the usual
    way, where the framer says what is wrong with it)."""

    def __init__(self, first: dict[str, Any], slots: tuple[str, ...], max_body: int) -> None:
        self.first, self.slots, self.max_body = first, slots, max_body
        self._options: DecodeOptions | None = None
        self._readers: dict[tuple[int, int], LineReader | None] = {}

    def at(self, buf: bytes, pos: int, n: int, options: DecodeOptions) -> LineReader | None:
        """The reader for the shape of the packet at ``buf[pos:n]``, None when that shape is not a plain
        item's (or too little is there to tell)."""
        if n - pos < HEADER_LENGTH:
            return None
        if options is not self._options:
            self._options, self._readers = options, {}
        shape = (buf[pos + 1], buf[pos + 4])
        if shape in self._readers:
            return self._readers[shape]
        if len(self._readers) >= READERS_KEPT:
            self._readers.clear()
        reader = self._readers[shape] = compile_reader(options, shape[0], shape[1], self.first, self.slots,
                                                       self.max_body)
        return reader


def compile_reader(options: DecodeOptions, opcode: int, extlen: int, first: dict[str, Any],
                   slots: tuple[str, ...], max_body: int) -> LineReader | None:
    """The reader of one item shape (see the module docstring), or None when the shape is not a plain item's."""
    found = item_plan(options.dialect, opcode, extlen)
    if found is None:
        return None
    (plan, _, nmeta_at, zero_seqno_at, flag_checks, key_rule, value_rule, seqno_at, _, _, datatypes) = found
    extras = len(plan.names)
    extras_format = plan.unpack.__self__.format
    assert extras_format.startswith(">"), extras_format  # the wire is big-endian throughout
    codec = struct.Struct(HEADER.format + extras_format[1:])
    document_key = bool(options.collections) and plan.variant is not None and plan.variant.key is KeyKind.DOCUMENT

    def templates(key: bool) -> tuple[bytes, bytes]:
        made = [item_line_template(first, plan, collection_id=key and document_key, key=key, last=last,
                                   slots=slots) for last in ((), ("stream_vbucket",))]
        return made[0], made[1]

    x = [f"x{i}" for i in range(extras)]
    lead = "".join(f"lead[{i}], " for i in range(len(slots)))
    head = f"{lead}base + pos, vbucket, opaque, cas, datatype, keylen, total, {''.join(v + ', ' for v in x)}"
    keyed_tail = "collection_id, " if document_key else ""
    allowed = sorted(set(datatypes) & {0, 1})
    lines = [
        "def read(buf, pos, n, lead, base, accept):",
        f"    if n - pos < {HEADER_LENGTH + extlen}:",
        "        return None",
        f"    magic, opcode, keylen, extlen, datatype, vbucket, total, opaque, cas, {''.join(v + ', ' for v in x)}"
        "= unpack(buf, pos)",
        f"    end = pos + {HEADER_LENGTH} + total",
        f"    if magic != 0x80 or opcode != {opcode} or extlen != {extlen} or end > n or total > {max_body} "
        f"or datatype not in {tuple(allowed)!r} or keylen > total - {extlen}:",
        "        return None",
    ]
    checks = [f"x{nmeta_at}"] if nmeta_at >= 0 else []
    if zero_seqno_at >= 0:
        checks.append(f"not x{zero_seqno_at}")
    checks += [f"x{at} & {~mask & 0xFFFFFFFFFFFFFFFF}" for at, mask in flag_checks]
    # presence rules as decode's: 0 optional, 1 required, 2 forbidden
    checks += {0: [], 1: ["not keylen"], 2: ["keylen"]}[key_rule]
    checks += {0: [], 1: ["end == vo"], 2: ["end > vo"]}[value_rule]
    lines += [f"    ko = pos + {HEADER_LENGTH + extlen}", "    vo = ko + keylen"]
    if checks:
        lines += [f"    if {' or '.join(checks)}:", "        return None"]
    key_lines = ["    if keylen:"]
    if document_key:
        key_lines += ["        collection_id = buf[ko]", "        if collection_id >= 0x80 or keylen == 1:",
                      "            return None", "        ko += 1"]
    key_lines += ["        try:", "            key = buf[ko:vo].decode()", "        except UnicodeDecodeError:",
                  "            return None", "        if not key.isprintable():", "            return None"]
    lines += key_lines
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
    namespace: dict[str, Any] = {"unpack": codec.unpack_from, "loads": orjson.loads, "dumps": orjson.dumps,
                                 "printable": printable, "keyed": keyed[0], "keyed_stream": keyed[1],
                                 "keyless": keyless[0], "keyless_stream": keyless[1]}
    exec(compile("\n".join(lines), f"<dcpctl line reader {opcode:#04x}/{extlen}>", "exec"), namespace)  # noqa: S102
    reader: LineReader = namespace["read"]
    return reader

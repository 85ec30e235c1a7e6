"""Framing plus decode of DCP mutations with 100-byte values (and of the other messages), on one core.

    python benchmarks/bench_decode.py [--messages N] [--repeat R]

Measures, on the same generated stream (built with dcpctl's own encoder):
  frame            Framer only
  frame+decode     Framer + decode(): header, frame infos, extras, key and value, every check (the JSON
                   value parsed), through the mutation shape's compiled reader
  frame+interpret  the same through interpret(), the declarations' general path (what the compiled
                   reader saves)
  frame+record     ... + the JSON record (value decoded as text)
  frame+jsonl      ... + serialised as a JSON line
  items            the compiled plain reader over the whole stream: each item's Message, as decode() gives
                   it, every check run (no framer: the reader walks the bytes itself)
  items+lines      the compiled plain reader over the whole stream (each item's Message) and each item's
                   JSON line filled from it: what decode and stream do per plain item (no framer: the
                   reader walks the bytes itself)
  others+decode    decode() of the other messages a connection carries (markers, noops, acknowledgements,
                   a stream's end, GET and SET), a tenth as many, each through its shape's compiled reader
  others+interpret the same through interpret()
Reports the best of R runs in messages per second (CPU time of this process).
"""

from __future__ import annotations

import argparse
import io
import resource
import struct
import time
from collections.abc import Callable

from dcpctl.protocol.encode import encode
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH, Framer
from dcpctl.protocol.message import DecodeOptions, decode, interpret
from dcpctl.protocol.reader import ItemReaders
from dcpctl.render.jsonl import dumps
from dcpctl.render.lines import ItemLines
from dcpctl.render.record import record as record_of

CHUNK = 1 << 20


def make_stream(messages: int) -> bytes:
    template = encode({
        "magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 7, "opaque": 4096, "cas": 1 << 60,
        "datatype": 1, "by_seqno": 1, "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0,
        "nru": 0, "key": "document-000000", "value": '{"payload":"' + "x" * 86 + '"}',
    })
    head, tail = template[:24], template[32:]
    return b"".join(head + struct.pack(">Q", seqno) + tail for seqno in range(1, messages + 1))


# What else a DCP connection and an SDK's carry, one of each: a snapshot marker, noops both ways, a buffer
# acknowledgement, a stream's end, a GET both ways and a SET's response with its mutation token.
OTHERS = [
    {"magic": "ClientRequest", "opcode": "DCP_SNAPSHOT_MARKER", "vbucket": 7, "opaque": 4096, "cas": 0,
     "snap_start_seqno": 1, "snap_end_seqno": 100, "snapshot_flags": 1},
    {"magic": "ClientRequest", "opcode": "DCP_NOOP", "vbucket": 0, "opaque": 9, "cas": 0},
    {"magic": "ClientResponse", "opcode": "DCP_NOOP", "status": "Success", "opaque": 9, "cas": 0},
    {"magic": "ClientRequest", "opcode": "DCP_BUFFER_ACKNOWLEDGEMENT", "vbucket": 0, "opaque": 10, "cas": 0,
     "bytes_to_ack": 1048576},
    {"magic": "ClientRequest", "opcode": "DCP_STREAM_END", "vbucket": 7, "opaque": 4096, "cas": 0,
     "stream_end_status": 0},
    {"magic": "ClientRequest", "opcode": "GET", "vbucket": 7, "opaque": 11, "cas": 0, "key": "document-000001"},
    {"magic": "ClientResponse", "opcode": "GET", "status": "Success", "opaque": 11, "cas": 5, "datatype": 1,
     "flags": 0, "value": '{"a":1}'},
    {"magic": "ClientResponse", "opcode": "SET", "status": "Success", "opaque": 12, "cas": 6, "vbucket_uuid": 77,
     "seqno": 5},
]


def make_others(messages: int) -> bytes:
    one_of_each = b"".join(encode(record, fix_lengths=True) for record in OTHERS)
    return one_of_each * (messages // len(OTHERS))


def run(data: bytes, per_message: Callable[[object], object] | None, decoder: Callable[..., object] = decode) -> int:
    """Frame (and, with ``per_message``, decode with ``decoder`` and handle) the whole stream; returns the
    count."""
    framer = Framer()
    count = 0
    for start in range(0, len(data), CHUNK):
        framer.feed(data[start:start + CHUNK])
        if per_message is None:
            for _ in framer.events():
                count += 1
        else:
            for message in framer.decoded(decoder):
                per_message(message)
                count += 1
    return count


def items(data: bytes, lines: bool) -> int:
    """Every item through the plain reader of its shape, and with ``lines`` its JSON line (as stream writes
    it, with a stream vbucket); returns the count."""
    read = ItemReaders(DEFAULT_MAX_BODY_LENGTH).read
    line = ItemLines({"ts": None, "connection": "c", "direction": "server>client"}).line
    options, lead, n, pos, count = DecodeOptions(), (b"1795458637.25",), len(data), 0, 0
    while (msg := read(data, pos, n, 0, options)) is not None:
        if lines:
            line(msg, lead, 7)
        pos += msg.body_end
        count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    data = make_stream(args.messages)
    sink = io.StringIO()
    stages: dict[str, Callable[[object], object] | None] = {
        "frame": None,
        "frame+decode": lambda message: None,
        "frame+interpret": lambda message: None,
        "frame+record": record_of,
        "frame+jsonl": lambda message: sink.write(dumps(record_of(message))),
    }
    print(f"{args.messages} DCP_MUTATION messages, {len(data) // args.messages} bytes each "
          f"(100-byte JSON values), {len(data) / 1e6:.1f} MB")
    others = make_others(args.messages // 10)
    print(f"and {args.messages // 10 // len(OTHERS) * len(OTHERS)} other messages ({len(OTHERS)} kinds, "
          f"{len(others) / 1e6:.1f} MB) for the others+ stages")
    for name, stage in [*stages.items(), ("items", None), ("items+lines", None), ("others+decode", None),
                        ("others+interpret", None)]:
        best = 0.0
        for _ in range(args.repeat):
            sink.seek(0)
            sink.truncate()
            start = time.process_time()
            if name.startswith("others"):
                count = run(others, lambda message: None, interpret if name.endswith("interpret") else decode)
            elif name.startswith("items"):
                count = items(data, name == "items+lines")
            else:
                count = run(data, stage, interpret if name == "frame+interpret" else decode)
            elapsed = time.process_time() - start
            best = max(best, count / elapsed)
        print(f"{name:15} {best:12,.0f} messages/s")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB "
          "(includes the generated stream held in memory)")


if __name__ == "__main__":
    main()

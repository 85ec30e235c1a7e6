"""Write a capture of N DCP mutations (~100-byte values), with dcpctl's encoder and writer.

    python benchmarks/make_capture.py OUT.pcap [--messages N] [--connections K] [--sessions]

With K connections (one per emulated node, each its own vbucket) the bursts alternate between them, as a
capture on a consumer that streams from several nodes does. ``--sessions`` makes each connection a whole
DCP session, as a consumer's capture has them: HELLO with collections, DCP_OPEN, the controls (a 10 MiB
window), a stream request per vbucket answered with its failover log, a snapshot marker every 1,000 items,
a buffer acknowledgement from the client whenever half the window is used, and a noop exchange every
100,000 items. Without it the capture is bare mutations (the decode benchmarks' shape).
"""

from __future__ import annotations

import argparse
import struct
from typing import Any

from dcpctl.protocol.encode import encode
from dcpctl.sources.pcapwriter import PcapWriter, TcpConversation

BATCH = 64  # mutations per TCP segment burst: what a producer pushes at once
WINDOW = 10 * 1024 * 1024  # connection_buffer_size of --sessions
SNAPSHOT = 1000  # items per snapshot marker in --sessions
NOOP_EVERY = 100_000  # items between noops in --sessions
VBUCKETS_PER_CONNECTION = 4


def packet(record: dict[str, Any]) -> bytes:
    return encode(record, fix_lengths=True)


def bootstrap(vbuckets: list[int]) -> list[tuple[bool, bytes]]:
    """A consumer's bootstrap and stream requests, with the server's answers."""
    out = [(True, packet({"magic": "ClientRequest", "opcode": "HELLO", "opaque": 1, "key": "bench",
                          "features": ["Xerror", "Collections", "JSON", "Snappy"]})),
           (False, packet({"magic": "ClientResponse", "opcode": "HELLO", "status": "Success", "opaque": 1,
                           "features": ["Xerror", "Collections", "JSON", "Snappy"]})),
           (True, packet({"magic": "ClientRequest", "opcode": "DCP_OPEN", "opaque": 2, "key": "bench", "seqno": 0,
                          "flags": 0x21})),
           (False, packet({"magic": "ClientResponse", "opcode": "DCP_OPEN", "status": "Success", "opaque": 2}))]
    controls = {"enable_noop": "true", "set_noop_interval": "60", "connection_buffer_size": str(WINDOW)}
    for opaque, (key, value) in enumerate(controls.items(), start=3):
        out += [(True, packet({"magic": "ClientRequest", "opcode": "DCP_CONTROL", "opaque": opaque, "key": key,
                               "value": value})),
                (False, packet({"magic": "ClientResponse", "opcode": "DCP_CONTROL", "status": "Success",
                                "opaque": opaque}))]
    for vbucket in vbuckets:
        out += [(True, packet({"magic": "ClientRequest", "opcode": "DCP_STREAM_REQ", "vbucket": vbucket,
                               "opaque": 0x1000 + vbucket, "flags": 0, "reserved": 0, "start_seqno": 0,
                               "end_seqno": 2**64 - 1, "vbucket_uuid": 0, "snap_start_seqno": 0,
                               "snap_end_seqno": 0})),
                (False, packet({"magic": "ClientResponse", "opcode": "DCP_STREAM_REQ", "status": "Success",
                                "opaque": 0x1000 + vbucket,
                                "failover_log": [{"vbucket_uuid": 0xBEEF00 + vbucket, "seqno": 0}]}))]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--sessions", action="store_true")
    args = parser.parse_args()
    key = b"\x00document-000000" if args.sessions else b"document-000000"  # the default collection's prefix
    template = encode({
        "magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 7, "opaque": 4096, "cas": 1 << 60,
        "datatype": 1, "by_seqno": 1, "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0,
        "nru": 0, "key": key.hex(), "key_encoding": "hex", "value": '{"payload":"' + "x" * 86 + '"}',
    })
    head, tail = template[:24], template[32:]
    with open(args.out, "wb") as handle:
        writer = PcapWriter(handle)
        conversations = []
        for index in range(args.connections):
            conversation = TcpConversation(writer, ("127.0.0.1", 50123 + index), ("127.0.0.1", 11210))
            conversation.handshake()
            conversations.append(conversation)
        if args.sessions:
            generate_sessions(args.messages, conversations, head, tail)
        else:
            heads = [head[:6] + struct.pack(">H", 7 + index) + head[8:] for index in range(args.connections)]
            for number, start in enumerate(range(1, args.messages + 1, BATCH)):
                index = number % args.connections
                burst = b"".join(heads[index] + struct.pack(">Q", seqno) + tail
                                 for seqno in range(start, min(start + BATCH, args.messages + 1)))
                conversations[index].send(False, burst)  # noqa: FBT003 - from the server
        for conversation in conversations:
            conversation.close()


def generate_sessions(messages: int, conversations: list[TcpConversation], head: bytes, tail: bytes) -> None:
    """``messages`` items over the connections' vbuckets (4 each), round robin, in bursts of :data:`BATCH`."""
    streams = []  # (conversation, vbucket, opaque)
    for index, conversation in enumerate(conversations):
        vbuckets = [index * VBUCKETS_PER_CONNECTION + v for v in range(VBUCKETS_PER_CONNECTION)]
        for from_client, data in bootstrap(vbuckets):
            conversation.send(from_client, data)
        streams += [(conversation, vb, 0x1000 + vb) for vb in vbuckets]
    seqnos = {vb: 0 for _, vb, _ in streams}
    unacked = {id(c): 0 for c in conversations}
    items = {id(c): 0 for c in conversations}
    sent = 0
    turn = 0
    while sent < messages:
        conversation, vbucket, opaque = streams[turn % len(streams)]
        turn += 1
        count = min(BATCH, messages - sent)
        item_head = head[:6] + struct.pack(">H", vbucket) + head[8:12] + struct.pack(">I", opaque) + head[16:]
        burst = []
        for _ in range(count):
            seqno = seqnos[vbucket] = seqnos[vbucket] + 1
            if seqno % SNAPSHOT == 1:
                burst.append(packet({"magic": "ClientRequest", "opcode": "DCP_SNAPSHOT_MARKER", "vbucket": vbucket,
                                     "opaque": opaque, "snap_start_seqno": seqno,
                                     "snap_end_seqno": seqno + SNAPSHOT - 1, "snapshot_flags": 1}))
            burst.append(item_head + struct.pack(">Q", seqno) + tail)
        data = b"".join(burst)
        conversation.send(False, data)  # noqa: FBT003 - from the server
        sent += count
        key = id(conversation)
        unacked[key] += len(data)
        if unacked[key] >= WINDOW // 2:
            conversation.send(True, packet({"magic": "ClientRequest",  # noqa: FBT003 - from the client
                                            "opcode": "DCP_BUFFER_ACKNOWLEDGEMENT", "vbucket": 0, "opaque": 9,
                                            "bytes_to_ack": unacked[key]}))
            unacked[key] = 0
        before, items[key] = items[key], items[key] + count
        if before // NOOP_EVERY != items[key] // NOOP_EVERY:
            conversation.send(False, packet({"magic": "ClientRequest", "opcode": "DCP_NOOP",  # noqa: FBT003
                                             "opaque": 77}))
            conversation.send(True, packet({"magic": "ClientResponse", "opcode": "DCP_NOOP",  # noqa: FBT003
                                            "status": "Success", "opaque": 77}))


if __name__ == "__main__":
    main()

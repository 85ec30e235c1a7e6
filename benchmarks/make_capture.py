"""Write a benchmark capture with dcpctl's encoder and pcap writer.

    python benchmarks/make_capture.py OUT.pcap [--messages N] [--shape realistic|sessions|bare] [--connections K]

``realistic`` (the default) is shaped like a capture taken on a data node's port: see
:func:`generate_realistic`. The other two shapes are kept as labelled extras, for comparison with figures
measured on them before; neither has the receiver's ACKs.

``bare``: N DCP mutations (~100-byte values). With K connections (one per emulated node, each its own
vbucket) the bursts alternate between them, as a
capture on a consumer that streams from several nodes does. ``--sessions`` makes each connection a whole
DCP session, as a consumer's capture has them: HELLO with collections, DCP_OPEN, the controls (a 10 MiB
window), a stream request per vbucket answered with its failover log, a snapshot marker every 1,000 items,
a buffer acknowledgement from the client whenever half the window is used, and a noop exchange every
100,000 items (``--shape sessions``, or ``--sessions``).
"""

from __future__ import annotations

import argparse
import random
import struct
from typing import Any

from dcpctl.protocol.encode import encode
from dcpctl.sources.pcapwriter import ACK, LINKTYPE_ETHERNET, LINKTYPE_RAW, MSS, PcapWriter, TcpConversation

LINKTYPES = {"ethernet": LINKTYPE_ETHERNET, "raw": LINKTYPE_RAW}
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
    parser.add_argument("--shape", choices=["realistic", "sessions", "bare"], default="realistic")
    parser.add_argument("--sessions", action="store_true", help="the same as --shape sessions")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--linktype", choices=sorted(LINKTYPES), default="ethernet",
                        help="realistic: the frames' link layer (raw: IP, as a BSD or Linux tunnel captures)")
    parser.add_argument("--host", default="127.0.0.1", help="realistic: the address of the node and its clients")
    args = parser.parse_args()
    if args.shape == "realistic" and not args.sessions:
        with open(args.out, "wb") as handle:
            generate_realistic(args.messages, PcapWriter(handle, LINKTYPES[args.linktype]), random.Random(args.seed),
                               args.host)
        return
    args.sessions = args.sessions or args.shape == "sessions"
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


# --- the realistic shape --------------------------------------------------------------------------------
DCP_CONNECTIONS = 4  # a consumer streaming a bucket from a four-node cluster, one connection per node
REALISTIC_VBUCKETS = 64  # streams per connection
KV_SHARE = 0.05  # of the messages, an SDK's GETs and upserts on a fifth connection, with their replies
ITEM_MIX = ((0.92, "DCP_MUTATION"), (0.06, "DCP_DELETION"), (1.0, "DCP_EXPIRATION"))
NOOP_ITEMS = 20_000  # items per connection between the producer's noops
SEGMENTS_PER_ACK = 2  # Linux acknowledges every second full-sized segment


class Clock:
    """One time line for every connection, so the capture's frames are in time order as on a wire."""

    def __init__(self) -> None:
        self.ts = 1_700_000_000.0

    def __call__(self) -> float:
        self.ts += 0.000_005
        return self.ts


def send_acked(conversation: TcpConversation, from_client: bool, data: bytes, clock: Clock) -> None:
    """``data`` in MSS segments, with the receiver's pure ACK after every second one and after the last."""
    unacked = 0
    for start in range(0, len(data), MSS):
        conversation.segment(from_client, data[start:start + MSS], ts=clock())
        unacked += 1
        if unacked == SEGMENTS_PER_ACK or start + MSS >= len(data):
            conversation.segment(not from_client, b"", flags=ACK, ts=clock())
            unacked = 0


def _item(opcode: str, vbucket: int, opaque: int, seqno: int, key: bytes, value: str) -> bytes:
    record: dict[str, Any] = {"magic": "ClientRequest", "opcode": opcode, "vbucket": vbucket, "opaque": opaque,
                              "cas": (1_700_000_000 << 30) + seqno, "by_seqno": seqno, "rev_seqno": 1 + seqno % 5,
                              "key": key.hex(), "key_encoding": "hex"}
    if opcode == "DCP_MUTATION":
        record.update(datatype=1, flags=0, expiration=0, lock_time=0, nmeta=0, nru=0, value=value)
    else:
        record.update(delete_time=1_700_000_000, **({"unused": 0} if opcode == "DCP_DELETION" else {}))
    return packet(record)


def generate_realistic(messages: int, writer: PcapWriter, rng: random.Random, host: str = "127.0.0.1") -> None:
    """About ``messages`` protocol messages on five connections to port 11210, as a data node sees them.

    Four DCP connections (one per node of a cluster) each bootstrap, stream 64 vbuckets in snapshots of 1 to
    40 items (mutations, deletions, expirations; keys in the default collection and in collection 8, JSON
    values of 100 B to 2 KB), answer the producer's noops and acknowledge the flow-control window; a fifth
    connection carries an SDK's GETs and upserts with their replies. The server's segments are MSS-sized and
    the receiver sends a pure ACK for every second one, as Linux does.
    """
    clock = Clock()
    sizes = [int(100 * 20.48 ** (i / 63)) for i in range(64)]  # 100 B to 2 KB, spread evenly on a log scale
    values = [f'{{"id":{i},"body":"{"x" * max(0, size - 20)}"}}' for i, size in enumerate(sizes)]
    dcp = []
    for index in range(DCP_CONNECTIONS):
        conversation = TcpConversation(writer, (host, 50200 + index), (host, 11210))
        conversation.handshake()
        vbuckets = [index * REALISTIC_VBUCKETS + v for v in range(REALISTIC_VBUCKETS)]
        for from_client, data in bootstrap(vbuckets):
            send_acked(conversation, from_client, data, clock)
        dcp.append({"conversation": conversation, "vbuckets": vbuckets, "unacked": 0, "items": 0})
    kv = TcpConversation(writer, (host, 50300), (host, 11210))
    kv.handshake()
    seqnos: dict[int, int] = {}
    sent = 0
    opaque = 0
    while sent < messages:
        if rng.random() < KV_SHARE:
            opaque += 1
            key = b"\x00" + b"user::%08d" % rng.randrange(10**6)
            value = rng.choice(values)
            if rng.random() < 0.5:  # a GET and its reply
                request = encode({"magic": "ClientRequest", "opcode": "0x00", "opaque": opaque, "vbucket": 3,
                                  "key": key.hex(), "key_encoding": "hex"})
                reply = encode({"magic": "ClientResponse", "opcode": "0x00", "opaque": opaque, "status": "Success",
                                "cas": opaque, "datatype": 1, "extras": "02000000", "value": value})
            else:  # an upsert (SET) and its reply
                request = encode({"magic": "ClientRequest", "opcode": "0x01", "opaque": opaque, "vbucket": 3,
                                  "datatype": 1, "extras": "0200000000000000", "key": key.hex(),
                                  "key_encoding": "hex", "value": value})
                reply = encode({"magic": "ClientResponse", "opcode": "0x01", "opaque": opaque, "status": "Success",
                                "cas": opaque})
            send_acked(kv, True, request, clock)  # noqa: FBT003 - from the client
            send_acked(kv, False, reply, clock)  # noqa: FBT003 - from the server
            sent += 2
            continue
        connection = rng.choice(dcp)
        conversation = connection["conversation"]
        vbucket = rng.choice(connection["vbuckets"])
        opaque_of_stream = 0x1000 + vbucket
        count = rng.randint(1, 40)
        start = seqnos.get(vbucket, 0) + 1
        burst = [packet({"magic": "ClientRequest", "opcode": "DCP_SNAPSHOT_MARKER", "vbucket": vbucket,
                         "opaque": opaque_of_stream, "snap_start_seqno": start, "snap_end_seqno": start + count - 1,
                         "snapshot_flags": 1})]
        for seqno in range(start, start + count):
            draw = rng.random()
            opcode = next(name for share, name in ITEM_MIX if draw < share)
            collection = b"\x08" if rng.random() < 0.3 else b"\x00"
            key = collection + b"user::%08d" % rng.randrange(10**6)
            burst.append(_item(opcode, vbucket, opaque_of_stream, seqno, key, rng.choice(values)))
        seqnos[vbucket] = start + count - 1
        data = b"".join(burst)
        send_acked(conversation, False, data, clock)  # noqa: FBT003 - from the server
        sent += len(burst)
        connection["unacked"] += len(data)
        if connection["unacked"] >= WINDOW // 2:
            send_acked(conversation, True, packet({  # noqa: FBT003 - from the client
                "magic": "ClientRequest", "opcode": "DCP_BUFFER_ACKNOWLEDGEMENT", "vbucket": 0, "opaque": 9,
                "bytes_to_ack": connection["unacked"]}), clock)
            connection["unacked"] = 0
            sent += 1
        before, connection["items"] = connection["items"], connection["items"] + count
        if before // NOOP_ITEMS != connection["items"] // NOOP_ITEMS:
            send_acked(conversation, False, packet({"magic": "ClientRequest", "opcode": "DCP_NOOP",  # noqa: FBT003
                                                    "opaque": 77}), clock)
            send_acked(conversation, True, packet({"magic": "ClientResponse", "opcode": "DCP_NOOP",  # noqa: FBT003
                                                   "status": "Success", "opaque": 77}), clock)
            sent += 2
    for conversation in [*(c["conversation"] for c in dcp), kv]:
        conversation.close()


if __name__ == "__main__":
    main()

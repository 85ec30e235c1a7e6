"""Write a capture of N DCP mutations (~100-byte values), with dcpctl's encoder and writer.

    python benchmarks/make_capture.py OUT.pcap [--messages N] [--connections K]

With K connections (one per emulated node, each its own vbucket) the bursts alternate between them, as a
capture on a consumer that streams from several nodes does.
"""

from __future__ import annotations

import argparse
import struct

from dcpctl.protocol.encode import encode
from dcpctl.sources.pcapwriter import PcapWriter, TcpConversation

BATCH = 64  # mutations per TCP segment burst: what a producer pushes at once


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--connections", type=int, default=1)
    args = parser.parse_args()
    template = encode({
        "magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 7, "opaque": 4096, "cas": 1 << 60,
        "datatype": 1, "by_seqno": 1, "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0,
        "nru": 0, "key": "document-000000", "value": '{"payload":"' + "x" * 86 + '"}',
    })
    head, tail = template[:24], template[32:]
    with open(args.out, "wb") as handle:
        writer = PcapWriter(handle)
        conversations = []
        for index in range(args.connections):
            conversation = TcpConversation(writer, ("127.0.0.1", 50123 + index), ("127.0.0.1", 11210))
            conversation.handshake()
            conversations.append(conversation)
        heads = [head[:6] + struct.pack(">H", 7 + index) + head[8:] for index in range(args.connections)]
        for number, start in enumerate(range(1, args.messages + 1, BATCH)):
            index = number % args.connections
            burst = b"".join(heads[index] + struct.pack(">Q", seqno) + tail
                             for seqno in range(start, min(start + BATCH, args.messages + 1)))
            conversations[index].send(False, burst)  # noqa: FBT003 - from the server
        for conversation in conversations:
            conversation.close()

if __name__ == "__main__":
    main()

"""A minimal DCP client for the producer's tests: blocking sockets, dcpctl's own encoder and decoder.

Deliberately small (the live connector is a separate piece): it sends records and reads decoded records,
so each test reads as the conversation it checks.
"""

from __future__ import annotations

import itertools
import socket
import ssl
from typing import Any

from dcpctl.dcp.sasl import ScramClient, plain_message
from dcpctl.protocol.encode import encode
from dcpctl.protocol.framer import Frame, Framer
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.render.record import record as record_of

END: int = (1 << 64) - 1
OPEN: list[Client] = []  # closed after each test (conftest)
_NAMES = itertools.count(1)  # DCP_OPEN names, one per connection


def close_all() -> None:
    while OPEN:
        OPEN.pop().close()


class Client:
    def __init__(self, port: int, *, tls: ssl.SSLContext | None = None, timeout: float = 10.0) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock: socket.socket = tls.wrap_socket(sock, server_hostname="localhost") if tls else sock
        self.framer = Framer()
        self.opaque = 0
        self.collections = False
        self.raw: list[bytes] = []  # every packet received, as bytes
        self.backlog: list[dict[str, Any]] = []  # records read while waiting for a reply, in order
        self.transcript: list[tuple[bool, bytes]] = []  # (from client, packet) in the order they passed
        OPEN.append(self)

    def close(self) -> None:
        self.sock.close()

    def send(self, **record: Any) -> int:
        record.setdefault("magic", "ClientRequest")
        if "opaque" not in record:
            self.opaque += 1
            record["opaque"] = self.opaque
        data = encode(record, fix_lengths=True)
        self.transcript.append((True, data))
        self.sock.sendall(data)
        return int(record["opaque"])

    def read(self) -> dict[str, Any]:
        """The next packet's record; raises ConnectionError when the server closed the connection."""
        if self.backlog:
            return self.backlog.pop(0)
        return record_of(self.read_message())

    def read_message(self) -> Message:
        while True:
            for event in self.framer.events():
                assert isinstance(event, Frame)
                self.raw.append(event.data)
                self.transcript.append((False, event.data))
                return decode(event.data, event.offset, DecodeOptions(collections=self.collections))
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("closed by the server")
            self.framer.feed(data)

    def call(self, **record: Any) -> dict[str, Any]:
        opaque = self.send(**record)
        while True:
            reply = record_of(self.read_message())
            if reply.get("opaque") == opaque and reply["magic"] in ("ClientResponse", "AltClientResponse"):
                return reply
            self.backlog.append(reply)

    # --- bootstrap -------------------------------------------------------------------------------
    def hello(self, *features: str) -> dict[str, Any]:
        reply = self.call(opcode="HELLO", key="tests", features=list(features))
        self.collections = "Collections" in reply.get("features", [])
        return reply

    def plain(self, user: str = "Administrator", password: str = "password") -> dict[str, Any]:
        return self.call(opcode="SASL_AUTH", key="PLAIN", value=plain_message(user, password).hex(),
                         value_encoding="hex")

    def scram(self, mechanism: str = "SCRAM-SHA512", user: str = "Administrator",
              password: str = "password") -> dict[str, Any]:
        scram = ScramClient(mechanism, user, password)
        first = self.call(opcode="SASL_AUTH", key=mechanism, value=scram.first().decode())
        if first["status"] != "AuthContinue":
            return first
        final = self.call(opcode="SASL_STEP", key=mechanism, value=scram.final(first["value"].encode()).decode())
        if final["status"] == "Success":
            scram.verify(final["value"].encode())
        return final

    def dcp(self, *features: str, flags: int = 1, controls: dict[str, str] | None = None,
            bucket: str = "default") -> None:
        """HELLO, PLAIN, SELECT_BUCKET, DCP_OPEN and controls, each asserted to succeed."""
        assert self.hello("Xerror", *features)["status"] == "Success"
        assert self.plain()["status"] == "Success"
        assert self.call(opcode="SELECT_BUCKET", key=bucket)["status"] == "Success"
        # a name of its own: a second open of a name disconnects the first connection (reference 3.2)
        name = f"tests-{next(_NAMES)}"
        assert self.call(opcode="DCP_OPEN", key=name, seqno=0, flags=flags)["status"] == "Success"
        for key, value in (controls if controls is not None else {"enable_noop": "true"}).items():
            assert self.call(opcode="DCP_CONTROL", key=key, value=value)["status"] == "Success", key

    def stream_request(self, vbucket: int, start: int = 0, end: int = END, uuid: int = 0,
                       snap: tuple[int, int] | None = None, flags: int = 0, value: str | None = None,
                       **extra: Any) -> dict[str, Any]:
        snap_start, snap_end = snap if snap is not None else (start, start)
        record: dict[str, Any] = {"opcode": "DCP_STREAM_REQ", "vbucket": vbucket, "flags": flags, "reserved": 0,
                                  "start_seqno": start, "end_seqno": end, "vbucket_uuid": uuid,
                                  "snap_start_seqno": snap_start, "snap_end_seqno": snap_end, **extra}
        if value is not None:
            record["value"] = value
        return self.call(**record)

    def until(self, opcode: str, *, answer_noops: bool = True) -> list[dict[str, Any]]:
        """Records up to and including the first ``opcode`` (noops answered as a client must)."""
        out = []
        while True:
            record = self.read()
            out.append(record)
            if answer_noops and record["opcode"] == "DCP_NOOP" and record["magic"] == "ClientRequest":
                self.send(magic="ClientResponse", opcode="DCP_NOOP", status="Success", opaque=record["opaque"])
            if record["opcode"] == opcode:
                return out

"""A hostile data node for the live connector's tests and benchmark: a small socket server on 127.0.0.1 that
answers the bootstrap as a data node does until the step a test makes it lie at (a flood, a SCRAM challenge
no client should run, a cluster map that is not one)."""

from __future__ import annotations

import base64
import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from dcpctl.protocol.encode import encode
from dcpctl.protocol.framer import Frame, Framer
from dcpctl.protocol.message import DecodeOptions, Message, decode

# (the request, the socket) -> the bytes to answer with, or None for the usual answer
Script = Callable[[Message, socket.socket], bytes | None]


def response(request: Message, status: str = "Success", **fields: Any) -> bytes:
    record = {"magic": "ClientResponse", "opcode": request.opcode_name, "status": status,
              "opaque": request.opaque, **fields}
    return encode(record, fix_lengths=True)


NOOP = encode({"magic": "ClientRequest", "opcode": "DCP_NOOP", "opaque": 7}, fix_lengths=True)


def usual(request: Message, mechanisms: str = "PLAIN") -> bytes:
    """What a friendly data node answers (PLAIN accepted whatever the password)."""
    name = request.opcode_name
    if name == "SASL_LIST_MECHS":
        return response(request, value=mechanisms)
    if name == "HELLO":
        return response(request, features=[])
    if name == "GET_CLUSTER_CONFIG":
        return response(request, "KeyEnoent")
    return response(request)


def flood(_request: Message, sock: socket.socket) -> None:
    """Noops as fast as the client takes them, never the answer, until the client goes."""
    burst = NOOP * 4096
    with contextlib.suppress(OSError):
        while True:
            sock.sendall(burst)


def scram_challenge(iterations: str, salt: str = base64.b64encode(b"salt").decode()) -> Script:
    """A server offering SCRAM-SHA512 whose server-first message names ``iterations`` and ``salt``."""

    def script(request: Message, _sock: socket.socket) -> bytes | None:
        if request.opcode_name == "SASL_LIST_MECHS":
            return response(request, value="SCRAM-SHA512")
        if request.opcode_name == "SASL_AUTH":
            nonce = dict(p.split("=", 1) for p in request.value.decode()[3:].split(","))["r"]
            return response(request, "AuthContinue", value=f"r={nonce}server,s={salt},i={iterations}")
        return None

    return script


def cluster_config(value: bytes) -> Script:
    def script(request: Message, _sock: socket.socket) -> bytes | None:
        if request.opcode_name == "GET_CLUSTER_CONFIG":
            return response(request, value=value.hex(), value_encoding="hex")
        return None

    return script


def rollback_then_flood(request: Message, sock: socket.socket) -> bytes | None:
    """One vbucket; its stream request is answered Rollback, and the failover log the client then asks for,
    to explain it, with a flood."""
    name = request.opcode_name
    if name == "GET_ALL_VB_SEQNOS":
        return response(request, vbucket_seqnos=[{"vbucket": 0, "seqno": 5}])
    if name == "DCP_STREAM_REQ":
        return response(request, "Rollback", rollback_seqno=0)
    if name == "GET_FAILOVER_LOG":
        flood(request, sock)
        return b""
    return None


def noops_never_reading(request: Message, sock: socket.socket) -> bytes | None:
    """One vbucket, whose stream opens; then noops as fast as the client takes them, and nothing the client
    sends (the answers to the noops) is read any more."""
    name = request.opcode_name
    if name == "GET_ALL_VB_SEQNOS":
        return response(request, vbucket_seqnos=[{"vbucket": 0, "seqno": 5}])
    if name == "DCP_STREAM_REQ":
        # No smaller SO_RCVBUF here: shrunk after the handshake, it makes the kernel drop the client's segments,
        # and the retransmission backoff stalls the connection instead of filling the client's send buffer
        sock.sendall(response(request, failover_log=[{"vbucket_uuid": 1, "seqno": 0}]))
        flood(request, sock)
        return b""
    return None


class HostileServer:
    """Listens on 127.0.0.1 (an ephemeral port); every connection is served by ``script``, falling back to
    :func:`usual` where it returns None (b"" leaves the request unanswered)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.threads: list[threading.Thread] = []
        self.sockets: list[socket.socket] = []
        self.accepting = threading.Thread(target=self._accept, daemon=True)
        self.accepting.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                sock, _ = self.listener.accept()
                self.sockets.append(sock)
                thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
                thread.start()
                self.threads.append(thread)

    def _serve(self, sock: socket.socket) -> None:
        framer = Framer()
        options = DecodeOptions(collections=False)
        with sock, contextlib.suppress(OSError):
            while data := sock.recv(65536):
                framer.feed(data)
                for event in framer.events():
                    if not isinstance(event, Frame):
                        return
                    request = decode(event.data, 0, options)
                    answer = self.script(request, sock)
                    sock.sendall(usual(request) if answer is None else answer)

    def close(self) -> None:
        self.listener.close()
        for sock in self.sockets:  # wakes a thread blocked sending to a client that no longer reads
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in self.threads:
            thread.join(timeout=10)


@contextlib.contextmanager
def hostile(script: Script) -> Iterator[HostileServer]:
    server = HostileServer(script)
    try:
        yield server
    finally:
        server.close()

"""One connection to a data node: TCP or TLS, requests with deadlines, the client's bootstrap.

Theory of operation. :class:`Connection` owns a blocking socket with a timeout, a framer and a decoder
whose options follow what HELLO negotiated. :meth:`Connection.call` sends a request and reads until the
response with its opaque arrives; anything else read meanwhile (stream data, the server's noops) is kept,
in order, for :meth:`Connection.next`. Every wait has a deadline: a server that never answers is a
:class:`ClientTimeoutError` naming what it did not answer, never a hang. Failures are one-line exceptions with
the exit code they map to; the password is never part of any message. ``tap`` sees every packet in both
directions (``--write``).

Bootstrap (reference 4.10, JDCP's order): SASL first (LIST_MECHS, then the strongest SCRAM the server
offers, or PLAIN; a server that wants one more empty step after the final message, as memcached does,
gets it), then HELLO, SELECT_BUCKET, and for DCP: DCP_OPEN and the controls.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from dcpctl.dcp.sasl import MAX_SCRAM_ITERATIONS, MECHANISMS, PLAIN, SaslError, ScramClient, canonical, plain_message
from dcpctl.exitcode import ExitCode
from dcpctl.protocol import build
from dcpctl.protocol.constants import HELLO_FEATURES, OPCODES, HelloFeature, Opcode, Status
from dcpctl.protocol.diagnostic import ERROR, Diagnostic
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH, HEADER_LENGTH, Frame, Framer
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.protocol.value import text_or_hex

DEFAULT_TIMEOUT: Final = 10.0  # seconds for connecting and for each request
RECV_SIZE: Final = 1 << 20
DEFAULT_WINDOW: Final = 10 * 1024 * 1024  # connection_buffer_size: dcpdrain's order of magnitude
# What a server may send unasked while a request waits for its answer: stream data, at most the flow-control
# window unacknowledged (acknowledgements wait for the answer) plus the packet that crosses it, and a noop
# now and then. Each message held costs its bytes and its decoded objects; the window is counted in the
# smallest stream messages a server sends (a stream end), as a bound on their number.
SMALLEST_STREAM_MESSAGE: Final = 28  # DCP_STREAM_END: header and a 4-byte status
MESSAGE_OVERHEAD: Final = 512  # a decoded Message's own objects, beyond its bytes: room to spare


# Before a stream is asked for, a data node sends nothing unasked (noops only once DCP_CONTROL enables them):
# a little room for a server's own notifications, and far below what a flood would take.
BOOTSTRAP_QUEUE_LIMIT: Final = 1024 * 1024


def queue_limit(window: int, max_body_length: int = DEFAULT_MAX_BODY_LENGTH) -> int:
    """Bytes (each message counted as its length plus MESSAGE_OVERHEAD) a connection holds at most while it
    waits for an answer, for a flow-control window of ``window`` bytes (0, no flow control: the default's)."""
    window = window or DEFAULT_WINDOW
    return (window // SMALLEST_STREAM_MESSAGE + 2) * (SMALLEST_STREAM_MESSAGE + MESSAGE_OVERHEAD) + \
        max_body_length + HEADER_LENGTH
# HELLO features a DCP client asks for (reference 4.1 and 4.10: dcpdrain's set plus Collections).
DCP_FEATURES: Final = ("TcpNoDelay", "MutationSeqno", "Xerror", "SelectBucket", "JSON", "Snappy", "Xattr",
                       "Collections", "AltRequestSupport")


class ClientError(Exception):
    """A failure with its exit code; ``str()`` is the one line shown to the user."""

    code = ExitCode.PROTOCOL

    def __init__(self, message: str, code: ExitCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class ConnectError(ClientError):
    code = ExitCode.CONNECTION


class ClientTimeoutError(ClientError):
    code = ExitCode.TIMEOUT


class AuthError(ClientError):
    code = ExitCode.AUTH


class FloodError(ClientError):
    """The server sent more unasked than flow control allows while a request waited: the connection is given
    up (exit 8), never retried."""


class StatusError(ClientError):
    """The server answered a request with an error status."""

    def __init__(self, what: str, status: str, code: ExitCode | None = None) -> None:
        super().__init__(f"{what}: the server answered {status}", code)
        self.status = status


@dataclass(frozen=True)
class TlsOptions:
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_file)
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


MAX_PORT: Final = 65535


class AddressError(ValueError):
    """A HOST[:PORT] that names no address; ``str()`` says what is wrong with it."""


def _port(text: str, address: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= MAX_PORT:
        raise AddressError(f"{address!r}: the port must be a number from 1 to {MAX_PORT}")
    return int(text)


def split_host(address: str, default_port: int) -> tuple[str, int]:
    """``host``, ``host:port``, ``v6``, ``[v6]`` and ``[v6]:port`` -> (host, port); :class:`AddressError` when
    the port is not one or the host is empty."""
    if address.startswith("["):
        host, bracket, rest = address[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise AddressError(f"{address!r}: an IPv6 address is written [ADDRESS]:PORT")
        port = _port(rest[1:], address) if rest else default_port
    elif address.count(":") == 1:
        host, _, text = address.partition(":")
        port = _port(text, address)
    else:  # no colon, or a bare IPv6 address (its last group is not a port)
        host, port = address, default_port
    if not host:
        raise AddressError(f"{address!r}: no host name or address")
    return host, port


def server_address(entry: str) -> tuple[str, int]:
    """A cluster map's ``serverList`` entry, always ``HOST:PORT``: ``[v6]:port``, or a bare IPv6 address
    followed by its port, which some servers write without brackets."""
    if entry.startswith("["):
        return split_host(entry, 0)
    host, sep, text = entry.rpartition(":")
    if not sep or not host:
        raise AddressError(f"{entry!r}: not HOST:PORT")
    return host, _port(text, entry)


def join_host(host: str, port: int) -> str:
    """(host, port) -> ``host:port``, an IPv6 address in brackets (``[::1]:11210``), as split_host reads it."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def first_error(reply: Message) -> Diagnostic | None:
    """The first error its decoding found in an answer (see :meth:`Connection.well_formed`)."""
    return next((found for found in reply.diagnostics if found.severity == ERROR), None)


class Connection:
    def __init__(self, host: str, port: int, *, tls: TlsOptions | None = None, timeout: float = DEFAULT_TIMEOUT,
                 tap: Callable[[Connection, bool, bytes], None] | None = None,
                 max_scram_iterations: int = MAX_SCRAM_ITERATIONS) -> None:
        self.host, self.port, self.timeout, self.tap = host, port, timeout, tap
        self.label = join_host(host, port)
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except TimeoutError:
            raise ClientTimeoutError(f"{self.label}: no answer to the connection within {timeout:g} s") from None
        except ConnectionRefusedError:
            raise ConnectError(f"{self.label}: connection refused (is a data node listening there?)") from None
        except socket.gaierror as exc:
            raise ConnectError(f"{host}: cannot resolve the name ({exc.strerror})") from None
        except OSError as exc:
            raise ConnectError(f"{self.label}: cannot connect ({exc.strerror or exc})") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            try:
                sock = tls.context().wrap_socket(sock, server_hostname=host)
            except ssl.SSLCertVerificationError as exc:
                sock.close()
                raise ConnectError(f"{self.label}: the server's certificate is not trusted ({exc.verify_message}); "
                                    "give its CA with --cacert, or --no-verify") from None
            except TimeoutError:  # a server that accepts and then says nothing: a timeout, as without TLS
                sock.close()
                raise ClientTimeoutError(f"{self.label}: no answer to the TLS handshake within {timeout:g} s") \
                    from None
            except (ssl.SSLError, OSError) as exc:
                sock.close()
                raise ConnectError(f"{self.label}: TLS handshake failed ({exc})") from None
        self.sock = sock
        local, peer = sock.getsockname(), sock.getpeername()
        self.local: tuple[str, int] = (str(local[0]), int(local[1]))
        self.peer: tuple[str, int] = (str(peer[0]), int(peer[1]))  # the address connected to: a name resolved
        # as a capture labels the same connection (sources/tcp.py): by address, so --write's capture agrees
        self.connection = f"{join_host(*self.local)} > {join_host(*self.peer)}"
        self.framer = Framer(DEFAULT_MAX_BODY_LENGTH)
        self.options = DecodeOptions(collections=False)
        self.pending: deque[Message] = deque()
        self.queue_limit = BOOTSTRAP_QUEUE_LIMIT  # the streamer raises it to queue_limit(its window) after DCP_OPEN
        self.max_scram_iterations = max_scram_iterations
        self.opaque = 0
        self.features: list[str] = []
        self.closed = False
        self.read_ts = time.time()  # when the socket last gave bytes: the ts of the messages they hold
        # whether the server opened DCP: then it is a data node, and a silence is not for want of the protocol
        self.speaks_dcp = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.sock.close()

    # --- wire ------------------------------------------------------------------------------------
    def send_bytes(self, data: bytes) -> None:
        if self.tap is not None:
            self.tap(self, True, data)  # noqa: FBT003 - the tap's (connection, from client, bytes)
        try:
            # receive() may have left the socket non-blocking (a wait of 0): a full send buffer then fails at
            # once with EAGAIN, where a server slow to read deserves --timeout
            self.sock.settimeout(self.timeout)
            self.sock.sendall(data)
        except TimeoutError:
            raise ClientTimeoutError(f"{self.label}: the server stopped reading for {self.timeout:g} s") from None
        except OSError as exc:
            raise ConnectError(f"{self.label}: the connection broke ({exc.strerror or exc})") from None

    def send(self, opcode: int, *, opaque: int | None = None, **fields: Any) -> int:
        """A request built from typed values (:func:`dcpctl.protocol.build.request`: vbucket, key, value
        bytes, extras fields...) sent with the next opaque, or ``opaque``; returns the opaque."""
        if opaque is None:
            self.opaque += 1
            opaque = self.opaque
        self.send_bytes(build.request(opcode, opaque=opaque, **fields))
        return opaque

    def fileno(self) -> int:
        return self.sock.fileno()

    def buffered(self) -> bool:
        """Whether a whole message can be had without reading the socket."""
        if not self.pending:
            self._frames()
        return bool(self.pending)

    def read(self, wait: float | None) -> bytes:
        """What the socket has (waiting up to ``wait`` seconds; empty on timeout), shown to the tap, for the
        caller to frame (the streamer's consumer shares :attr:`framer`); ``read_ts`` says when."""
        self.sock.settimeout(wait)
        try:
            data = self.sock.recv(RECV_SIZE)
        except (TimeoutError, BlockingIOError, ssl.SSLWantReadError):
            return b""
        except OSError as exc:
            raise ConnectError(f"{self.label}: the connection broke ({exc.strerror or exc})") from None
        if not data:
            raise ConnectError(f"{self.label}: the server closed the connection")
        self.read_ts = time.time()
        if self.tap is not None:
            self.tap(self, False, data)  # noqa: FBT003 - as above
        return data

    def receive(self, wait: float | None) -> bool:
        """Read what the socket has (waiting up to ``wait`` seconds) into the framer; False on timeout."""
        data = self.read(wait)
        self.framer.feed(data)
        return bool(data)

    def _frames(self) -> None:
        for event in self.framer.events():
            if not isinstance(event, Frame):
                raise ClientError(f"{self.label}: the server sent bytes that are not a packet", ExitCode.PROTOCOL)
            self.pending.append(decode(event.data, event.offset, self.options))

    def take(self) -> Message | None:
        """The next message already read from the socket, or None: never reads (one turn of a loop that
        serves several connections fairly)."""
        if not self.pending:
            self._frames()
        return self.pending.popleft() if self.pending else None

    def next(self, wait: float | None) -> Message | None:
        """The next message the server sent, or None when nothing came within ``wait`` seconds."""
        if not self.pending:
            self._frames()
        if not self.pending:
            deadline = None if wait is None else time.monotonic() + wait
            while not self.pending:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not self.receive(left):
                    return None
                self._frames()
        return self.pending.popleft()

    def call(self, opcode: int, what: str | None = None, timeout: float | None = None, *, keep: bool = True,
             **fields: Any) -> Message:
        """Send a request (:meth:`send`'s typed ``fields``) and return its response; other messages stay
        queued for :meth:`next` (at most ``queue_limit``), or with ``keep=False`` are dropped (a caller that
        wants none of them)."""
        name = what or OPCODES.name(opcode)
        opaque = self.send(opcode, **fields)
        deadline = time.monotonic() + (timeout or self.timeout)
        kept: list[Message] = []
        held = 0  # what kept costs, as queue_limit counts it
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ClientTimeoutError(f"{self.label}: no answer to {name} within {timeout or self.timeout:g} s"
                                             + ("" if self.speaks_dcp else
                                                " (a server that is not a Couchbase data node stays silent)"))
                msg = self.next(left)
                if msg is None:
                    continue
                if msg.is_response and msg.opaque == opaque:
                    self.speaks_dcp = self.speaks_dcp or (opcode == Opcode.DCP_OPEN and msg.status == Status.SUCCESS)
                    return msg
                if not keep:
                    continue
                kept.append(msg)
                held += len(msg.raw) + MESSAGE_OVERHEAD
                if held > self.queue_limit:
                    kept.clear()  # freed now: the connection is given up
                    self.pending.clear()
                    raise FloodError(f"{self.label}: the server sent {held} bytes of other messages while dcpctl "
                                      f"waited for the answer to {name}, more than flow control allows "
                                      f"({self.queue_limit}): a flood, not a data node")
        finally:
            self.pending.extendleft(reversed(kept))

    def check(self, opcode: int, what: str | None = None, *, code: ExitCode | None = None,
              **fields: Any) -> Message:
        """:meth:`call` that raises :class:`StatusError` unless the answer is Success, and ClientError (exit 8)
        when it is not a well-formed answer (:meth:`well_formed`)."""
        reply = self.call(opcode, what, **fields)
        if reply.status != Status.SUCCESS:
            raise StatusError(what or OPCODES.name(opcode), str(reply.status_name), code)
        return self.well_formed(reply, what or OPCODES.name(opcode))

    def well_formed(self, reply: Message, what: str) -> Message:
        """``reply``, unless its decoding found an error (a failover log that is not 16-byte entries, a Rollback
        without its seqno): its fields would be read as what the server never said (an empty log, a rollback
        to 0), so it is a protocol fault naming the server."""
        bad = first_error(reply)
        if bad is not None:
            raise ClientError(f"{self.label}: a malformed answer to {what} ({bad.message})")
        return reply

    # --- bootstrap ---------------------------------------------------------------------------------
    def authenticate(self, user: str, password: str, mechanism: str | None = None) -> str:
        """SASL with the strongest mechanism both sides know (or ``mechanism``); returns the one used."""
        listed = self.call(Opcode.SASL_LIST_MECHS)
        if listed.status in (Status.UNKNOWN_COMMAND, Status.NOT_SUPPORTED):
            raise AuthError(f"{self.label}: the server does not do SASL authentication (SASL_LIST_MECHS: "
                            f"{listed.status_name}): not a Couchbase data node, or a memcached without SASL")
        if listed.status != Status.SUCCESS:
            raise StatusError("SASL_LIST_MECHS", str(listed.status_name), ExitCode.AUTH)
        offered = text_or_hex(listed.value)[0]  # as the record shows it
        offered_names = {canonical(m): m for m in offered.split()}
        if mechanism is not None:
            wanted = canonical(mechanism)
            if wanted not in (*MECHANISMS, PLAIN):
                raise AuthError(f"{self.label}: dcpctl authenticates with {', '.join((*MECHANISMS, PLAIN))}, not "
                                f"{mechanism}")
            if wanted not in offered_names:
                raise AuthError(f"{self.label}: the server does not offer {mechanism} (it offers {offered})")
            choice = wanted
        else:
            choice = next((m for m in [*MECHANISMS, PLAIN] if m in offered_names), "")
            if not choice:
                raise AuthError(f"{self.label}: no SASL mechanism in common (the server offers {offered})")
        name = offered_names[choice]  # the server's own spelling
        if choice == PLAIN:
            reply = self.call(Opcode.SASL_AUTH, key=name.encode(), value=plain_message(user, password))
            self._auth_status(reply, user)
            return name
        scram = ScramClient(choice, user, password, max_iterations=self.max_scram_iterations)
        reply = self.call(Opcode.SASL_AUTH, key=name.encode(), value=scram.first())
        if reply.status != Status.AUTH_CONTINUE:
            self._auth_status(reply, user)
        try:
            final = scram.final(reply.value)
        except SaslError as exc:
            raise AuthError(f"{self.label}: {exc}") from None
        reply = self.call(Opcode.SASL_STEP, key=name.encode(), value=final)
        status = reply.status
        if status in (Status.SUCCESS, Status.AUTH_CONTINUE):
            try:
                scram.verify(reply.value)
            except SaslError as exc:
                raise AuthError(f"{self.label}: {exc}") from None
        if status == Status.AUTH_CONTINUE:  # memcached (Cyrus SASL) wants one more, empty, step
            reply = self.call(Opcode.SASL_STEP, key=name.encode())
        self._auth_status(reply, user)
        return name

    def _auth_status(self, reply: Message, user: str) -> None:
        status = reply.status
        if status == Status.SUCCESS:
            return
        if status in (Status.AUTH_ERROR, Status.EACCESS, Status.AUTH_STALE):
            raise AuthError(f"{self.label}: authentication failed for user {user!r} ({reply.status_name})")
        raise StatusError("SASL", str(reply.status_name), ExitCode.AUTH)

    def hello(self, features: tuple[str, ...] = DCP_FEATURES, agent: str = "dcpctl") -> list[str]:
        reply = self.check(Opcode.HELLO, key=agent.encode(), features=[HELLO_FEATURES.code(f) for f in features])
        codes = reply.hello_features
        self.features = [HELLO_FEATURES.name(code, 4) for code in codes]
        self.options = DecodeOptions(collections=HelloFeature.COLLECTIONS in codes)
        return self.features

    def select_bucket(self, bucket: str) -> None:
        reply = self.call(Opcode.SELECT_BUCKET, key=bucket.encode())
        status = reply.status
        if status == Status.KEY_ENOENT:
            raise StatusError(f"bucket {bucket!r}", "KeyEnoent (no such bucket)")
        if status in (Status.EACCESS, Status.AUTH_ERROR):
            raise AuthError(f"{self.label}: no access to bucket {bucket!r} ({reply.status_name})")
        if status != Status.SUCCESS:
            raise StatusError("SELECT_BUCKET", str(reply.status_name))

    def bootstrap(self, user: str, password: str, bucket: str, mechanism: str | None = None,
                  features: tuple[str, ...] = DCP_FEATURES) -> None:
        self.authenticate(user, password, mechanism)
        self.hello(features)
        self.select_bucket(bucket)

"""``dcpctl serve`` answers every opcode, known or not, and keeps the connection (issue 14).

Each request is a bare header, as a client that does not know a command's body would send it; each must get
one reply carrying its opaque, and a NOOP sent after it (before authentication, which refuses a NOOP too,
SASL_LIST_MECHS) must still be answered on the same connection. The
status is the one kv_engine gives where the reference says (Einval for a DCP command on a connection that is
not DCP, even without a bucket; NoBucket for a key-value command before SELECT_BUCKET; UnknownCommand for an
opcode it does not know).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
from servekit import Server, serving
from wire import Client

from dcpctl.protocol.constants import Magic, Opcode, Status
from dcpctl.protocol.message import Message

# codes no table names (kv_engine's opcode.h names almost every other one): between and above the known ones
UNKNOWN_CODES = (0x2E, 0x4B, 0x68, 0x7F, 0xC0, 0xFF)
# HELLO last: a bare HELLO turns every feature off, XERROR too, and the answers after it would be disconnects
EVERY_CODE = (*(int(opcode) for opcode in Opcode if opcode != Opcode.HELLO), *UNKNOWN_CODES, Opcode.HELLO)
# the commands kv_engine refuses on a DCP producer connection by disconnecting (reference 3.3 and 3.13)
DISCONNECTS_A_PRODUCER = frozenset({Opcode.DCP_ADD_STREAM, Opcode.DCP_NOOP})
NOOP_OPAQUE = 0xFEEDF00D


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with serving("--vbuckets", "4", "--items", "20", "--seed", "3") as running:
        yield running


def bare(opcode: int, opaque: int) -> bytes:
    """A request with nothing after its header, by hand: for most declared opcodes that is a malformed
    request, which the builders refuse to make, and for the others no declaration exists."""
    return struct.pack(">BBHBBHIIQ", Magic.CLIENT_REQUEST, opcode, 0, 0, 0, 0, 0, opaque, 0)


def reply_to(client: Client, opaque: int) -> Message:
    """The response carrying ``opaque``; server requests (noops) in between are skipped."""
    while True:
        message = client.read_message()
        if message.is_response and message.opaque == opaque:
            return message


def answers(client: Client, codes: tuple[int, ...], probe: Opcode = Opcode.NOOP) -> dict[int, str]:
    """Each opcode sent once, a ``probe`` after it (a NOOP; before authentication, where a NOOP is Eaccess too,
    SASL_LIST_MECHS): the status name of each reply, or why it had none."""
    out = {}
    for number, code in enumerate(codes, start=1):
        opaque = 0x1000 + number
        client.sock.sendall(bare(code, opaque) + bare(probe, NOOP_OPAQUE))
        try:
            reply = reply_to(client, opaque)
            after = reply_to(client, NOOP_OPAQUE)
        except (ConnectionError, TimeoutError) as exc:
            out[code] = f"no reply: {type(exc).__name__}"
            break
        assert reply.opcode == code
        assert after.status == Status.SUCCESS, f"{probe.name} after 0x{code:02x}"
        out[code] = Status(reply.status).kv_name
    return out


def session(server: Server, stage: str) -> Client:
    client = Client(server.port, timeout=5)
    assert client.hello("Xerror")["status"] == "Success"
    if stage in ("authenticated", "bucket", "dcp"):
        assert client.plain()["status"] == "Success"
    if stage in ("bucket", "dcp"):
        assert client.call(opcode="SELECT_BUCKET", key="default")["status"] == "Success"
    if stage == "dcp":
        assert client.call(opcode="DCP_OPEN", key="every-opcode", seqno=0, flags=1)["status"] == "Success"
    return client


@pytest.mark.parametrize("stage", ["unauthenticated", "authenticated", "bucket", "dcp"])
def test_every_opcode_gets_a_reply_and_the_connection_stays(server: Server, stage: str) -> None:
    assert not set(UNKNOWN_CODES) & {int(opcode) for opcode in Opcode}
    codes = EVERY_CODE if stage != "dcp" else tuple(c for c in EVERY_CODE if c not in DISCONNECTS_A_PRODUCER)
    before_auth = stage == "unauthenticated"
    got = answers(session(server, stage), codes, Opcode.SASL_LIST_MECHS if before_auth else Opcode.NOOP)
    assert list(got) == list(codes), got
    assert not [code for code, status in got.items() if status.startswith("no reply")], got
    for code in UNKNOWN_CODES:
        assert got[code] == ("Eaccess" if before_auth else "UnknownCommand")
    assert got[Opcode.NOOP] == got[Opcode.VERSION] == ("Eaccess" if before_auth else "Success")
    if stage == "authenticated":
        assert got[Opcode.SET] == "NoBucket"
        assert got[Opcode.GET] == "NoBucket"
    if stage in ("authenticated", "bucket"):
        for code in (Opcode.DCP_MUTATION, Opcode.DCP_BUFFER_ACKNOWLEDGEMENT, Opcode.DCP_CONTROL,
                     Opcode.DCP_NOOP, Opcode.DCP_STREAM_END):
            assert got[code] == "Einval", Opcode(code).name  # the validator's, before NoBucket
    if stage == "dcp":
        assert got[Opcode.DCP_BUFFER_ACKNOWLEDGEMENT] == "Einval"  # no extras: malformed, so it is answered
        assert got[Opcode.DCP_MUTATION] == "NotSupported"  # a producer does not take items


@pytest.mark.parametrize("code", sorted(DISCONNECTS_A_PRODUCER))
def test_a_producer_disconnects_on_the_commands_kv_engine_refuses_so(server: Server, code: int) -> None:
    client = session(server, "dcp")
    client.sock.sendall(bare(code, 1))
    with pytest.raises(ConnectionError):
        reply_to(client, 1)

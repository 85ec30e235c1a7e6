"""One table of opcode names serves both directions: what decode calls an opcode, encode reads back.

The reply ``dcpctl serve`` sends is encoded from the request it decoded; when the two directions had a table
of names each, a name one side gave was unknown to the other and the server dropped the connection.
"""

from __future__ import annotations

import struct

import pytest

from dcpctl.protocol.constants import MAGIC_CLASS, Magic, Status
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, decode
from dcpctl.protocol.registry import DIALECTS, Dialect
from dcpctl.render.record import record as record_of

ALL_CODES = range(256)


@pytest.mark.parametrize("dialect", DIALECTS.values(), ids=lambda d: d.name)
@pytest.mark.parametrize("magic", list(Magic), ids=lambda m: m.name)
def test_every_name_reads_back_to_its_number_and_row(dialect: Dialect, magic: Magic) -> None:
    magic_class = MAGIC_CLASS[magic]
    for code in ALL_CODES:
        name = dialect.opcode_name(magic_class, code)
        assert dialect.resolve(magic_class, name) == (code, dialect.spec(magic_class, code)), name
        assert dialect.resolve(magic_class, code) == (code, dialect.spec(magic_class, code))


@pytest.mark.parametrize("dialect", DIALECTS.values(), ids=lambda d: d.name)
@pytest.mark.parametrize("magic", list(Magic), ids=lambda m: m.name)
def test_a_reply_to_any_opcode_encodes_from_its_decoded_record(dialect: Dialect, magic: Magic) -> None:
    """Every opcode number, with a success and with an UnknownCommand status: decode, encode, same bytes."""
    for code in ALL_CODES:
        for word in (Status.SUCCESS, Status.UNKNOWN_COMMAND):
            raw = struct.pack(">BBHBBHIIQ", magic, code, 0, 0, 0, word, 0, 0xC0FFEE, 0)
            message = decode(raw, 0, DecodeOptions(dialect=dialect))
            record = record_of(message)
            assert record["opcode"] == message.opcode_name
            assert encode(record, dialect) == raw, (code, record)


def test_a_name_from_another_table_keeps_its_number_but_not_the_row() -> None:
    """``SET`` is 0x01 to the UPR draft too, but its row there is UPR_REQUEST: the record is encoded raw."""
    upr = DIALECTS["upr-draft"]
    code, spec = upr.resolve(Magic.CLIENT_REQUEST, "SET")
    assert (code, spec) == (0x01, None)
    assert upr.resolve(Magic.CLIENT_REQUEST, "UPR_REQUEST")[1] is upr.spec(Magic.CLIENT_REQUEST, 0x01)
    with pytest.raises(KeyError):
        upr.resolve(Magic.CLIENT_REQUEST, "NO_SUCH_COMMAND")

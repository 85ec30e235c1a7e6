"""STAT: each response one line, the stat's name and text; the empty response that ends the group marked, in
JSON (stat_end) and in pretty output; the request's key shown as the stat group."""

from __future__ import annotations

import struct

from dcpctl.protocol.constants import Magic, Opcode, Status
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import decode
from dcpctl.protocol.registry import DCP
from dcpctl.render import pretty
from dcpctl.render.record import record as record_of

MAX_FIELD_BYTES = 1024


def _packet(magic: int, key: bytes = b"", value: bytes = b"", word: int = 0) -> bytes:
    return struct.pack(">BBHBBHIIQ", magic, Opcode.STAT, len(key), 0, 0, word, len(key) + len(value), 9, 0) + \
        key + value


def _lines(raw: bytes) -> list[str]:
    msg = decode(raw)
    return [line.text.plain for line in pretty.render(msg, record_of(msg), MAX_FIELD_BYTES).renderables]


def test_a_stat_is_one_line_of_name_and_text() -> None:
    raw = _packet(Magic.CLIENT_RESPONSE, b"ep_dcp_count", b"3")
    assert _lines(raw)[1:] == ["ep_dcp_count = 3"]
    record = record_of(decode(raw))
    assert (record["key"], record["value"], "stat_end" in record) == ("ep_dcp_count", "3", False)


def test_the_empty_response_ends_the_group() -> None:
    raw = _packet(Magic.CLIENT_RESPONSE)
    record = record_of(decode(raw))
    assert record["stat_end"] is True
    assert _lines(raw)[1:] == ["end of stats"]
    assert encode(record, DCP) == raw


def test_a_stat_with_an_empty_text_or_an_error_is_not_the_end() -> None:
    assert "stat_end" not in record_of(decode(_packet(Magic.CLIENT_RESPONSE, b"empty_stat")))
    failed = record_of(decode(_packet(Magic.CLIENT_RESPONSE, word=Status.KEY_ENOENT)))
    assert "stat_end" not in failed


def test_the_request_key_is_the_group() -> None:
    assert _lines(_packet(Magic.CLIENT_REQUEST, b"dcp"))[1:] == ["group 'dcp'"]


def test_a_stat_name_that_is_not_text_is_shown_as_hex() -> None:
    assert _lines(_packet(Magic.CLIENT_RESPONSE, b"\xff\xfe", b"1"))[1:] == ["hex:fffe = 1"]

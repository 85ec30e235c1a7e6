"""Pretty output: frame infos on a line of their own, named from the record JSON gives; a stream item's
expiration read as the epoch time it is, a client's of at most 30 days as relative."""

from __future__ import annotations

from typing import Any

import pytest

from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import decode
from dcpctl.protocol.registry import DCP
from dcpctl.render import pretty
from dcpctl.render.record import record as record_of

MAX_FIELD_BYTES = 1024
# AltClientResponse SET: ServerRecvSendDuration encoded 100 (1509 µs), ReadUnits 3
TIMED_RESPONSE = bytes.fromhex("18010600000000000000000600000005" "0000000000000000" "020064" "120003")
# AltClientRequest SET: durability Majority timeout 500, impersonate bob, PreserveTtl, stream id 3, id 12
DURABLE_SET = bytes.fromhex("08010f01080000010000001900000005" "0000000000000000"
                            "130101f4" "43626f62" "50" "220003" "c20102" "0000000000000000" "6b" "76")


def _lines(raw: bytes) -> list[str]:
    msg = decode(raw)
    return [line.text.plain for line in pretty.render(msg, record_of(msg), MAX_FIELD_BYTES).renderables]


def test_response_frame_infos_are_shown_with_units() -> None:
    assert "frame infos server_duration 1509µs, read_units 3" in _lines(TIMED_RESPONSE)


def test_request_frame_infos_in_wire_order_stream_id_in_the_headline() -> None:
    lines = _lines(DURABLE_SET)
    assert " sid 3" in lines[0]
    assert ("frame infos durability Majority timeout 500ms, Impersonate bob, PreserveTtl, 0x0c 0102"
            in lines)


def _record(opcode: str, **fields: Any) -> bytes:
    base: dict[str, Any] = {"magic": "ClientRequest", "opcode": opcode, "vbucket": 1, "opaque": 1,
                            "key": "k", "value": "v", "flags": 0}
    return encode(base | fields, DCP)


@pytest.mark.parametrize("expiration", [100, 30 * 24 * 3600])
def test_a_stream_items_expiration_is_an_epoch_time(expiration: int) -> None:
    raw = _record("DCP_MUTATION", by_seqno=1, rev_seqno=1, expiration=expiration, lock_time=0, nmeta=0,
                  nru=0)
    fields = _lines(raw)[1]
    assert f"expiration={expiration} (1970-01-" in fields
    assert " s)" not in fields


def test_a_clients_expiration_of_at_most_30_days_is_relative() -> None:
    assert "expiration=100 (in 100 s)" in _lines(_record("SET", expiration=100))[1]

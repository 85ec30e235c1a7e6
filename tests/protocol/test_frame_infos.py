"""Every frame info kv_engine defines (docs/BinaryProtocol.md, "flexible framing extras") decodes named, with
its fields, and encodes back; durations are decoded to microseconds as kv_engine's Tracer::decodeMicros does."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dcpctl.protocol import frameinfo
from dcpctl.protocol.constants import Magic, Opcode, Status
from dcpctl.protocol.encode import encode
from dcpctl.protocol.fields import catalogue
from dcpctl.protocol.frameinfo import MAX_ENCODED_DURATION, decode_micros, encode_micros
from dcpctl.protocol.message import decode
from dcpctl.render.record import record as record_of


def alt(magic: int, opcode: int, framing: bytes, extras: bytes = b"", key: bytes = b"", word: int = 0) -> bytes:
    body = framing + extras + key
    return struct.pack(">BBBBBBHIIQ", magic, opcode, len(framing), len(key), len(extras), 0, word, len(body), 7,
                       0) + body


def kv_encode_micros(actual: int) -> int:
    """kv_engine's Tracer::encodeMicros (tracing/tracer.cc), to make the bytes a server sends."""
    return round((min(actual, 120125042) * 2) ** (1.0 / 1.74))


REQUESTS: list[tuple[bytes, dict[str, Any]]] = [
    (b"\x00", {"id": 0, "name": "Barrier"}),
    (b"\x11\x01", {"id": 1, "name": "DurabilityRequirement", "durability_level": 1,
                   "durability_level_name": "Majority"}),
    (b"\x13\x03\x01\xf4", {"id": 1, "durability_level": 3, "durability_level_name": "PersistToMajority",
                           "durability_timeout": 500}),
    (b"\x22\x00\x05", {"id": 2, "name": "DcpStreamId", "stream_id": 5}),
    (b"\x33abc", {"id": 3, "name": "OpenTracingContext", "text": "abc"}),
    (b"\x44^joe", {"id": 4, "name": "Impersonate", "text": "^joe"}),
    (b"\x50", {"id": 5, "name": "PreserveTtl"}),
    (b"\x6cSystemSettin", {"id": 6, "name": "ImpersonateExtraPrivilege", "text": "SystemSettin"}),
    (b"\x72\x00\x09", {"id": 7, "name": "ImpersonateTokenAuthId", "token_id": 9}),
]


@pytest.mark.parametrize(("framing", "expected"), REQUESTS, ids=[str(e) for _, e in REQUESTS])
def test_request_frame_infos_are_named_with_their_fields(framing: bytes, expected: dict[str, Any]) -> None:
    raw = alt(Magic.ALT_CLIENT_REQUEST, Opcode.SET, framing, struct.pack(">II", 0, 0), b"k")
    record = record_of(decode(raw))
    assert record["diagnostics"] == []
    (info,) = record["frame_infos"]
    assert {k: info[k] for k in expected} == expected
    assert encode(record) == raw
    without_data = {k: v for k, v in info.items() if k != "data"}
    assert encode({**record, "frame_infos": [without_data]}) == raw  # the named fields alone are enough


@pytest.mark.parametrize("micros", [0, 1, 7, 100, 1000, 12345, 999_999, 120_125_042])
def test_durations_decode_as_kv_engine_decodes_them(micros: int) -> None:
    encoded = kv_encode_micros(micros)
    raw = alt(Magic.ALT_CLIENT_RESPONSE, Opcode.GET, b"\x02" + struct.pack(">H", encoded) + b"\x32"
              + struct.pack(">H", encoded) + b"\x12\x00\x03" + b"\x22\x00\x04", word=Status.KEY_ENOENT)
    record = record_of(decode(raw))
    duration, throttle, read, write = record["frame_infos"]
    assert duration["name"] == "ServerRecvSendDuration"
    assert duration["server_duration_us"] == int(encoded ** 1.74 / 2) == frameinfo.decode_micros(encoded)
    assert isinstance(duration["server_duration_us"], int)
    assert abs(duration["server_duration_us"] - micros) <= max(2, micros * 0.01)  # the encoding's precision
    assert throttle["throttle_duration_us"] == duration["server_duration_us"]
    assert (read["read_units"], write["write_units"]) == (3, 4)
    assert encode(record) == raw


@pytest.mark.parametrize(("framing", "name"), [
    (b"\x11\x04", "invalid_durability_level"),
    (b"\x13\x01\x00\x00", "reserved_durability_timeout"),
    (b"\x13\x01\xff\xff", "reserved_durability_timeout"),
])
def test_a_durability_requirement_kv_engine_refuses_is_diagnosed(framing: bytes, name: str) -> None:
    raw = alt(Magic.ALT_CLIENT_REQUEST, Opcode.DELETE, framing, key=b"k")
    assert [d["name"] for d in record_of(decode(raw))["diagnostics"]] == [name]


def test_fields_lists_each_frame_info_field() -> None:
    rows = {f.name: f for f in catalogue()}
    for name in ("durability_level", "durability_timeout", "stream_id", "token_id", "text", "server_duration_us",
                 "read_units", "write_units", "throttle_duration_us"):
        assert rows[f"frame_infos[].{name}"].meaning, name
    assert rows["frame_infos[].text"].messages == ("OpenTracingContext", "Impersonate", "ImpersonateExtraPrivilege")


@given(st.integers(min_value=0, max_value=120_000_000))
def test_an_encoded_duration_reads_back_within_its_precision(micros: int) -> None:
    """encode_micros is kv_engine's Tracer::encodeMicros, decode_micros its decodeMicros: the two bytes keep
    a duration to within one step of the encoding, under 0.1% above a second and 1 µs below 50 µs."""
    encoded = encode_micros(micros)
    assert 0 <= encoded <= MAX_ENCODED_DURATION
    step = decode_micros(encoded + 1) - decode_micros(max(0, encoded - 1))
    assert abs(decode_micros(encoded) - micros) <= max(1, step)


def test_a_duration_past_the_two_bytes_is_the_largest_they_say() -> None:
    assert encode_micros(1509) == 100  # 100 ** 1.74 / 2 = 1509.98
    assert decode_micros(100) == 1509
    assert encode_micros(10**10) == MAX_ENCODED_DURATION

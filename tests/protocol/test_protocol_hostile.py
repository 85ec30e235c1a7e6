"""Hostile packets through the protocol core: named diagnostics, never an exception (issue 17)."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest
from capturekit import session_packets, session_records, write_capture
from hypothesis import given
from hypothesis import strategies as st

from dcpctl.cli import main
from dcpctl.dcp.session import stream_request_of
from dcpctl.exitcode import ExitCode
from dcpctl.protocol import stream_request_value
from dcpctl.protocol.diagnostic import ERROR
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.render.env import Environment
from dcpctl.render.record import record as record_of

DEEP = b"[" * 5000 + b"]" * 5000
DEEP_VALUE = b'{"sid":' + DEEP + b"}"


def _run(args: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(stdin), stdout_isatty=False, stderr_isatty=False,
                      color=False, width=160)
    return main(args, env), out.getvalue(), err.getvalue()


def _stream_request(value: bytes) -> bytes:
    record = next(r for r in session_records() if r["opcode"] == "DCP_STREAM_REQ" and r["magic"] == "ClientRequest")
    record = {**record, "value": value.decode(), "collection_id": 0}
    return encode(record, fix_lengths=True)


@pytest.mark.parametrize("value", [DEEP_VALUE, b'{"purge_seqno":1e999}', b'{"sid":1e999}', b'{"uid":"\\ud800"}'],
                         ids=["deep", "purge-inf", "sid-inf", "surrogate"])
def test_a_hostile_stream_request_value_is_a_diagnostic(value: bytes) -> None:
    msg = decode(_stream_request(value), 0, DecodeOptions(collections=True))
    names = [d["name"] for d in record_of(msg)["diagnostics"]]
    assert names == ["stream_request_json_invalid"]


@pytest.mark.parametrize("fmt", ["jsonl", "pretty", "hexdump"])
def test_deep_json_in_a_capture_decodes(fmt: str, tmp_path: Path) -> None:
    packets = session_packets()
    at = next(i for i, (client, data) in enumerate(packets) if client and data[1] == 0x53)
    packets[at] = (True, _stream_request(DEEP_VALUE))
    capture = tmp_path / "deep.pcap"
    capture.write_bytes(write_capture(packets))
    code, out, err = _run(["decode", "-F", fmt, str(capture)])
    assert code == ExitCode.OK, err
    assert "stream_request_json_invalid" in out
    code, out, err = _run(["hexdump", "-F", fmt, "-"], _stream_request(DEEP_VALUE))
    assert code == ExitCode.OK, err
    assert "stream_request_json_invalid" in out


@pytest.mark.parametrize("value", ['{"purge_seqno":1e999}', '{"purge_seqno":' + "[" * 5000 + "]" * 5000 + "}",
                                   '{"purge_seqno":"99999999999999999999999"}', '{"purge_seqno":-1}'],
                         ids=["inf", "deep", "above-u64", "negative"])
def test_a_bad_purge_seqno_is_unknown_to_the_rollback_engine(value: str) -> None:
    def request(text: str) -> Message:
        return decode(_stream_request(text.encode()), 0, DecodeOptions(collections=True))

    assert stream_request_of(request(value)).purge_seqno is None
    assert stream_request_of(request('{"purge_seqno":"42"}')).purge_seqno == 42


def test_many_unknown_keys_make_few_diagnostics() -> None:
    value = json.dumps({f"k{i}": i for i in range(10_000)}).encode()
    _, diags = stream_request_value.validate(value)
    assert len(diags) == stream_request_value.MAX_UNKNOWN_KEY_DIAGNOSTICS + 2  # no known key, the rest counted
    assert "and 9992 more keys" in diags[-1].message


@pytest.mark.parametrize("lenient", [False, True])
def test_a_mutation_cut_after_its_extras_with_collections_on(lenient: bool) -> None:
    extras = struct.pack(">QQIIIHB", 5, 1, 0, 0, 0, 0, 0)
    header = struct.pack(">BBHBBHIIQ", 0x80, 0x57, 4, len(extras), 0, 0, len(extras) + 6, 0, 0)
    record = record_of(decode(header + extras, 0, DecodeOptions(collections=True, lenient=lenient)))
    assert "key" not in record
    assert record["by_seqno"] == 5
    assert [d["name"] for d in record["diagnostics"]] == ["body_length_mismatch" if lenient else "truncated"]


@pytest.mark.parametrize("keylen", [0, 1])
def test_framing_extras_longer_than_the_body_are_said(keylen: int) -> None:
    """A frame-info length past the total body length is a header that contradicts itself, even when no key
    is left to run past the body."""
    header = struct.pack(">BBHBBHIIQ", 0x08, 0x5C, 4 << 8 | keylen, 0, 0, 0, 3, 1, 0)
    message = decode(header + b"\x22\x00\x01", 0, DecodeOptions())
    names = [d.name for d in message.diagnostics]
    assert names[0] == "lengths_exceed_body", names
    assert "framing extras length 4 runs past the 3-byte body" in message.diagnostics[0].message


@given(extras=st.binary(max_size=12), value=st.binary(max_size=20), datatype=st.integers(0, 7))
def test_a_rollback_answer_without_its_seqno_is_always_an_error(extras: bytes, value: bytes, datatype: int) -> None:
    """The consumer and negotiate refuse an answer by its first error alone; so a Rollback whose seqno cannot
    be read must carry one, or it would be taken for 'roll back to 0'."""
    raw = encode({"magic": "ClientResponse", "opcode": "DCP_STREAM_REQ", "status": "Rollback", "opaque": 1,
                  "datatype": datatype, "extras": extras.hex(), "extras_encoding": "hex", "value": value.hex(),
                  "value_encoding": "hex"}, fix_lengths=True)
    message = decode(raw)
    if message.field("rollback_seqno") is None:
        assert any(found.severity == ERROR for found in message.diagnostics)

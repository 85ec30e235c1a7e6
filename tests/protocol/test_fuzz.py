"""Mutated packets through every reader and renderer, mutated records through encode: no exception but the
documented ones, and encode(decode(x)) == x for every packet decoded from its exact bytes (issue 17).

Bounded: a few hundred examples each, so the suite stays quick; the seeds are the bundled session and the
golden vectors, so every registry shape is mutated."""

from __future__ import annotations

import io
from typing import Any

from capturekit import session_packets, session_records
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_itemreader import Accept, agrees
from vectorfile import all_vectors

from dcpctl.exitcode import CommandError
from dcpctl.protocol.encode import EncodeError, encode
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.render.env import Environment
from dcpctl.render.jsonl import to_base64
from dcpctl.render.output import Format, emit
from dcpctl.render.record import record as record_of
from dcpctl.sources.packets import read_items

XATTR_MUTATION = encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 1, "opaque": 1, "by_seqno": 1,
                         "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0, "nru": 0,
                         "datatype": 5, "collection_id": 8, "key": "k\x1b[2J",
                         "xattrs": [{"key": "_t\x1b]0;x\x07", "value": "v\n@1 forged"}], "value": "{}"},
                        fix_lengths=True)
SASL = encode({"magic": "ClientRequest", "opcode": "SASL_AUTH", "key": "PLAIN", "value": "\x00u\x00secret"},
              fix_lengths=True)
SEEDS = [data for _, data in session_packets()] + [v.data for v in all_vectors() if v.dialect == "dcp"] \
    + [XATTR_MUTATION, SASL]
OPTIONS = (DecodeOptions(), DecodeOptions(collections=True), DecodeOptions(collections=False, lenient=True),
           DecodeOptions(collections=True, show_secrets=True))
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# header fields a mutation aims at, as (offset, size): lengths, datatype, the opcode and magic
HEADER_FIELDS = ((0, 1), (1, 1), (2, 2), (4, 1), (5, 1), (8, 4))


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    raw = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.integers(0, 5))
        if how == 0 and raw:
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
        elif how == 1 and len(raw) > 1:
            del raw[draw(st.integers(1, len(raw) - 1)):]
        elif how == 2:
            raw += draw(st.binary(min_size=1, max_size=16))
        elif how == 3 and len(raw) >= 24:
            offset, size = draw(st.sampled_from(HEADER_FIELDS))
            raw[offset:offset + size] = draw(st.integers(0, (1 << (8 * size)) - 1)).to_bytes(size, "big")
        elif how == 4:  # bytes a terminal would act on, or a newline, into a key or value
            at = draw(st.integers(min(24, len(raw)), len(raw)))
            raw[at:at] = draw(st.sampled_from([b"\x1b]0;t\x07", b"\x1b[2J", b"\n@1 X", b"\xe2\x80\xae", b"\x9b"]))
        elif how == 5 and len(raw) > 24:  # cut where a capture ends mid-item: after the extras, in the key
            del raw[min(len(raw), 24 + raw[4] + draw(st.integers(0, 2))):]
    return bytes(raw)


def _rendered(msg: Any, fmt: Format) -> str:
    out = io.StringIO()
    env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False, width=120)
    emit([msg], fmt, env)
    return out.getvalue()


@FUZZ
@given(mutated())
def test_every_reader_and_renderer_takes_any_packet(raw: bytes) -> None:
    total = int.from_bytes(raw[8:12], "big") if len(raw) >= 24 else -1
    for options in OPTIONS:
        msg = decode(raw, 0, options)
        record = record_of(msg)
        # what a framer hands over, and a fragment cut short inside its header (a stream's last bytes)
        if (len(raw) < 24 or len(raw) <= 24 + total) and "value_redacted" not in record:
            assert encode(record) == raw, raw.hex()
            assert encode(to_base64(record)) == raw, raw.hex()  # as --base64 prints it
        for fmt in (Format.PRETTY, Format.HEXDUMP):
            shown = _rendered(decode(raw, 0, options), fmt)
            assert "\x1b" not in shown
            assert "\x9b" not in shown
            assert "\u202e" not in shown
        for fmt in (Format.JSONL, Format.JSON):
            _rendered(decode(raw, 0, options), fmt)
        assert agrees(raw, 0, len(raw), options, Accept(take=True, stream_vbucket=None))


@FUZZ
@given(mutated(), st.sampled_from(["plain", "xxd", "spaced", "raw"]))
def test_hexdump_input_of_any_form_reads_or_is_a_command_error(raw: bytes, form: str) -> None:
    if form == "plain":
        text = raw.hex().encode()
    elif form == "spaced":
        text = " ".join(f"0x{b:02x}" for b in raw).encode()
    elif form == "xxd":
        text = b"".join(f"{i:08x}: {raw[i:i + 16].hex(' ', 2)}  ................\n".encode()
                        for i in range(0, len(raw), 16))
    else:
        text = raw
    for options in OPTIONS[:2]:
        try:
            items = list(read_items(io.BytesIO(text), options, DEFAULT_MAX_BODY_LENGTH))
        except CommandError:
            continue
        for item in items:
            if isinstance(item, Message):
                record_of(item)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=6)
    | st.sampled_from(["zz", "00", "\ud800", "ClientRequest", "DCP_MUTATION", "hex", "Success"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)


@st.composite
def mutated_records(draw: st.DrawFn) -> dict[str, Any]:
    record = dict(draw(st.sampled_from(session_records())))
    for _ in range(draw(st.integers(1, 4))):
        keys = [*sorted(record), "collection_id", "frame_infos", "xattrs", "extras", "value_encoding",
                "framing_extras", "stream_id", "value_compressed", "failover_log"]
        key = draw(st.sampled_from(keys))
        if draw(st.booleans()) and key in record:
            del record[key]
        else:
            record[key] = draw(JSON_VALUES)
    return record


@FUZZ
@given(mutated_records(), st.booleans())
def test_encode_takes_any_record_or_says_why(record: dict[str, Any], fix_lengths: bool) -> None:
    error = ""
    try:
        encode(record, fix_lengths=fix_lengths)
    except EncodeError as exc:
        error = str(exc)
    assert "\n" not in error

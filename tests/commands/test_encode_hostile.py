"""encode on hostile records: one line naming the record, exit 3, never a traceback or a hang (issue 17);
and what decode gives, encode gives back byte for byte."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import pytest

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.protocol.message import DecodeOptions, decode
from dcpctl.render.env import Environment
from dcpctl.render.record import record as record_of

MUTATION = {"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 1, "opaque": 1, "by_seqno": 1,
            "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0, "nru": 0, "key": "k",
            "value": "v"}
ALT = {**MUTATION, "magic": "AltClientRequest"}
STREAM_REQ_OK = {"magic": "ClientResponse", "opcode": "DCP_STREAM_REQ", "status": 0, "opaque": 1}
HOSTILE: dict[str, dict[str, Any]] = {
    "collection_id -1": {**MUTATION, "collection_id": -1},
    "collection_id 2^40": {**MUTATION, "collection_id": 2**40},
    "magic 300": {**MUTATION, "magic": 300},
    "magic a list": {**MUTATION, "magic": [1]},
    "opaque 2^64": {**MUTATION, "opaque": 2**64},
    "cas -1": {**MUTATION, "cas": -1},
    "key_length -1": {**MUTATION, "key_length": -1},
    "extras_length -1": {**MUTATION, "extras_length": -1},
    "total_body_length -1": {**MUTATION, "total_body_length": -1},
    "vbucket 70000": {**MUTATION, "vbucket": 70000},
    "datatype 300": {**MUTATION, "datatype": 300},
    "by_seqno -5": {**MUTATION, "by_seqno": -5},
    "by_seqno a float": {**MUTATION, "by_seqno": 1e300},
    "by_seqno a string": {**MUTATION, "by_seqno": "x"},
    "extras not hex": {**MUTATION, "extras": "zz"},
    "extras a number": {**MUTATION, "extras": 5},
    "framing_extras not hex": {**ALT, "framing_extras": "zz"},
    "frame info without id": {**ALT, "frame_infos": [{"data": "00"}]},
    "frame_infos a number": {**ALT, "frame_infos": 5},
    "frame info a number": {**ALT, "frame_infos": [5]},
    "frame info id a string": {**ALT, "frame_infos": [{"id": "x", "data": "00"}]},
    "frame info id 99999": {**ALT, "frame_infos": [{"id": 99999, "data": "00"}]},
    "frame info data not hex": {**ALT, "frame_infos": [{"id": 2, "data": "zz"}]},
    "stream_id 70000": {**MUTATION, "stream_id": 70000},
    "value a number": {**MUTATION, "value": 5},
    "hex value not hex": {**MUTATION, "value": "zz", "value_encoding": "hex"},
    "base64 value not base64": {**MUTATION, "value": "zz!", "value_encoding": "base64"},
    "key_encoding unknown": {**MUTATION, "key_encoding": "rot13"},
    "value_encoding a number": {**MUTATION, "value_encoding": 16},
    "path_encoding unknown": {"magic": "ClientRequest", "opcode": "SUBDOC_GET", "key": "k", "subdoc_flags": 0,
                              "path": "a", "path_encoding": "utf-16"},
    "value_compressed not hex": {**MUTATION, "datatype": 2, "value_compressed": "zz"},
    "xattrs of numbers": {**MUTATION, "datatype": 4, "xattrs": [1]},
    "xattrs a number": {**MUTATION, "datatype": 4, "xattrs": 5},
    "key a lone surrogate": {**MUTATION, "key": "\ud800"},
    "value a lone surrogate": {**MUTATION, "value": "\ud800"},
    "status unknown": {**STREAM_REQ_OK, "status": "Nope"},
    "status 70000": {**STREAM_REQ_OK, "status": 70000},
    "opcode 999": {"magic": "ClientRequest", "opcode": 999},
    "opcode -1": {"magic": "ClientRequest", "opcode": -1},
    "opcode a list": {"magic": "ClientRequest", "opcode": [1]},
    "failover uuid -1": {**STREAM_REQ_OK, "failover_log": [{"vbucket_uuid": -1, "seqno": 1}]},
    "failover_log a number": {**STREAM_REQ_OK, "failover_log": 5},
    "feature unknown": {"magic": "ClientRequest", "opcode": "HELLO", "key": "x", "features": ["NOPE"]},
    "feature 70000": {"magic": "ClientRequest", "opcode": "HELLO", "key": "x", "features": [70000]},
    "value_trailing not hex": {"magic": "ClientRequest", "opcode": "HELLO", "key": "x", "features": [1],
                               "value_trailing": "zz"},
}
TEXTS = {
    "1e999": '{"magic": "ClientRequest", "opcode": "DCP_NOOP", "opaque": 1e999}',
    "NaN": '{"magic": "ClientRequest", "opcode": "DCP_NOOP", "opaque": NaN}',
    "100k [": "[" * 100_000,
    "100k [ in a record": '{"a": ' + "[" * 100_000,
    "lone surrogate": '{"magic": "ClientRequest", "opcode": "DCP_NOOP", "key": "\\ud800"}',
    "an array of numbers": "[1, 2]",
}


def _encode(stdin: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(stdin.encode("utf-8", "surrogatepass")),
                      stdout_isatty=False, stderr_isatty=False, color=False, width=160)
    return main(["encode", "-"], env), out.getvalue(), err.getvalue()


def test_collection_id_minus_one_ends_at_once() -> None:
    """It looped forever, growing memory: a process of its own, so a hang fails the test instead of the run."""
    done = subprocess.run([sys.executable, "-m", "dcpctl", "encode"], input=json.dumps(HOSTILE["collection_id -1"]),
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == ExitCode.INPUT
    assert done.stderr == "dcpctl: error: record 1: collection_id -1 does not fit 32 bits\n"


@pytest.mark.parametrize("name", [name for name in HOSTILE if name != "collection_id -1"])  # above: it hung
def test_a_hostile_record_is_one_line_and_exit_3(name: str) -> None:
    code, out, err = _encode(json.dumps(HOSTILE[name]))
    assert code == ExitCode.INPUT
    assert out == ""
    assert err.startswith("dcpctl: error: record 1: ")
    assert err.count("\n") == 1


LOOKUP = {"magic": "ClientRequest", "opcode": "SUBDOC_MULTI_LOOKUP", "key": "k"}


@pytest.mark.parametrize(("record", "says"), [
    ({**STREAM_REQ_OK, "failover_log": [{"vbucket_uuid": 1, "seqno": 2}, {"vbucket_uuid": 1}]},
     "failover_log[1].seqno is missing"),
    ({**STREAM_REQ_OK, "failover_log": [{"vbucket_uuid": "x", "seqno": 1}]},
     "failover_log[0].vbucket_uuid must be an integer, got 'x'"),
    ({**STREAM_REQ_OK, "failover_log": [[1, 2]]}, "failover_log[0] must be an object, got [1, 2]"),
    ({**STREAM_REQ_OK, "failover_log": {"a": 1}}, "failover_log must be a list, got {'a': 1}"),
    ({**LOOKUP, "lookup_specs": [{"opcode": 197, "flags": 0, "path": 5}]}, "lookup_specs[0].path must be text, got 5"),
    ({**LOOKUP, "lookup_specs": [{"opcode": 197, "flags": 256, "path": "a"}]},
     "lookup_specs[0].flags 256 does not fit 8 bits"),
    ({**ALT, "frame_infos": [{"id": 2, "stream_id": 70000}]}, "frame info 2: stream_id 70000 does not fit 16 bits"),
    ({**ALT, "frame_infos": [{"id": 1, "durability_level": 1, "durability_timeout": 70000}]},
     "frame info 1: durability_timeout 70000 does not fit 16 bits"),
    ({"magic": "ClientResponse", "opcode": "SUBDOC_MULTI_LOOKUP", "status": 0,
      "lookup_results": [{"status": "Nope", "value": "1"}]}, "lookup_results[0].status: unknown name 'Nope'"),
    ({"magic": "ClientRequest", "opcode": "HELLO", "key": "x", "features": ["Collections", 70000]},
     "features[1] 70000 does not fit 16 bits"),
    ({"magic": "ClientRequest", "opcode": "HELLO", "key": "x", "features": [[1]]},
     "features[0] must be a name or a number, got [1]"),
])
def test_a_bad_value_field_is_named_by_its_path(record: dict[str, Any], says: str) -> None:
    """These were construct's words or a bare KeyError: "'seqno'", "Error in path (building) -> ..."."""
    assert _encode(json.dumps(record)) == (ExitCode.INPUT, "", f"dcpctl: error: record 1: {says}\n")


@pytest.mark.parametrize(("specs", "path"), [("lookup_specs", "a.b"), ("lookup_specs", "ä"),
                                             ("mutation_specs", "x[0]")])
def test_a_specs_path_length_is_computed_when_absent(specs: str, path: str) -> None:
    """A spec without path_length was refused with "'path_length'"; the lengths of a hand-written record are
    computed, the spec's as the header's (in bytes: UTF-8)."""
    spec: dict[str, Any] = {"opcode": 0xC5 if specs == "lookup_specs" else 0xC8, "flags": 0, "path": path}
    if specs == "mutation_specs":
        spec["value"] = "1"
    opcode = "SUBDOC_MULTI_LOOKUP" if specs == "lookup_specs" else "SUBDOC_MULTI_MUTATION"
    code, out, err = _encode(json.dumps({"magic": "ClientRequest", "opcode": opcode, "key": "k", specs: [spec]}))
    assert (code, err) == (ExitCode.OK, "")
    decoded = record_of(decode(bytes.fromhex(out.strip())))
    assert decoded[specs] == [{**spec, "path_length": len(path.encode()),
                               **({"value_length": 1} if specs == "mutation_specs" else {})}]


@pytest.mark.parametrize("name", list(TEXTS))
def test_hostile_json_is_one_line_and_exit_3(name: str) -> None:
    code, _, err = _encode(TEXTS[name])
    assert code == ExitCode.INPUT
    assert err.startswith("dcpctl: error: ")
    assert err.count("\n") == 1


def test_records_over_several_lines_still_encode() -> None:
    """jq's default output: objects written over several lines, one after another."""
    noop = {"magic": "ClientRequest", "opcode": "DCP_NOOP", "opaque": 7}
    code, out, err = _encode(json.dumps(noop, indent=2) + "\n" + json.dumps(noop, indent=2))
    assert (code, err) == (ExitCode.OK, "")
    assert out.splitlines() == ["805c00000000000000000000000000070000000000000000"] * 2


@pytest.mark.parametrize("packet", [
    # a DCP_DELETION, datatype snappy, empty value: encode added the empty block's byte
    "8058000115020000000000160000000000000000000000000000000000000005000000000000000100000000006b",
    # a response to an opcode outside the registry (GET), and a magic no table knows
    "81000000000000000000000000001702000000ea00000000",
    "0a5e00000000000000000000000000040000000000000000",
    # the key length runs past the body
    "805c000500000000000000020000000000000000000000006b6b",
    # fragments cut short inside the header: after the lengths, inside the CAS, after the magic
    "180100000001000000000000", "0857030504000007000000000000000102030405060708", "80",
])
def test_encode_gives_back_what_decode_read(packet: str) -> None:
    raw = bytes.fromhex(packet)
    for options in (DecodeOptions(), DecodeOptions(collections=True)):
        code, out, err = _encode(json.dumps(record_of(decode(raw, 0, options))))
        assert (code, err) == (ExitCode.OK, "")
        assert out == packet + "\n"

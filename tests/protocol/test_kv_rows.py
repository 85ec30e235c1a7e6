"""The KV commands an SDK sends have rows: their extras are named fields, their keys document keys.

Each packet is built here from its layout in kv_engine's docs/BinaryProtocol.md (header, extras, key, value),
decoded, checked for its named fields and no ``unknown_opcode``, and encoded back to the same bytes.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from capturekit import write_capture
from servekit import peer

from dcpctl.cli import main
from dcpctl.protocol.constants import DATATYPE_JSON, DATATYPE_SNAPPY, DATATYPE_XATTR, Magic, Opcode, Status
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, decode
from dcpctl.protocol.registry import DCP, REQ, RES, SUBDOC_LOOKUPS, KeyKind
from dcpctl.protocol.value import Xattr, build_xattrs, snappy_compress
from dcpctl.render.env import Environment
from dcpctl.render.record import record as record_of

# Issue 15's first list: the document operations `dcpctl serve` answers for the SDK.
KV_OPCODES = ("GET", "GETQ", "GETK", "GETKQ", "GAT", "GATQ", "TOUCH", "GET_LOCKED", "UNLOCK_KEY", "GET_REPLICA",
              "GET_RANDOM_KEY", "SET", "SETQ", "ADD", "ADDQ", "REPLACE", "REPLACEQ", "DELETE", "DELETEQ",
              "INCREMENT", "INCREMENTQ", "DECREMENT", "DECREMENTQ", "APPEND", "APPENDQ", "PREPEND", "PREPENDQ",
              "GET_META", "COLLECTIONS_GET_ID", "COLLECTIONS_GET_SCOPE_ID", "COLLECTIONS_GET_MANIFEST")


def packet(magic: int, opcode: int, extras: bytes = b"", key: bytes = b"", value: bytes = b"", word: int = 0,
           datatype: int = 0, cas: int = 0, opaque: int = 0xABCD) -> bytes:
    body = extras + key + value
    return struct.pack(">BBHBBHIIQ", magic, opcode, len(key), len(extras), datatype, word, len(body), opaque,
                       cas) + body


def req(opcode: Opcode, extras: bytes = b"", key: bytes = b"", value: bytes = b"", **kw: Any) -> bytes:
    return packet(Magic.CLIENT_REQUEST, opcode, extras, key, value, **kw)


def res(opcode: Opcode, extras: bytes = b"", key: bytes = b"", value: bytes = b"",
        status: Status = Status.SUCCESS, **kw: Any) -> bytes:
    return packet(Magic.CLIENT_RESPONSE, opcode, extras, key, value, word=status, **kw)


FLAGS = struct.pack(">I", 0xDEADBEEF)
TOKEN = struct.pack(">QQ", 0x1122334455667788, 42)

# (packet, the fields it must decode to)
CASES: list[tuple[str, bytes, dict[str, Any]]] = [
    ("get", req(Opcode.GET, key=b"Hello"), {"opcode": "GET", "key": "Hello"}),
    ("get_hit", res(Opcode.GET, FLAGS, value=b"World", cas=1),
     {"opcode": "GET", "status": "Success", "flags": 0xDEADBEEF, "value": "World"}),
    ("get_miss", res(Opcode.GET, value=b"Not found", status=Status.KEY_ENOENT),
     {"status": "KeyEnoent", "value": "Not found"}),
    ("getk_hit", res(Opcode.GETK, FLAGS, b"Hello", b"World"), {"flags": 0xDEADBEEF, "key": "Hello"}),
    ("getk_miss", res(Opcode.GETK, key=b"Hello", status=Status.KEY_ENOENT), {"key": "Hello"}),
    ("gat", req(Opcode.GAT, struct.pack(">I", 3600), b"Hello"), {"opcode": "GAT", "expiration": 3600}),
    ("touch", req(Opcode.TOUCH, struct.pack(">I", 10), b"Hello"), {"expiration": 10}),
    ("get_locked", req(Opcode.GET_LOCKED, struct.pack(">I", 15), b"Hello"), {"expiration": 15}),
    ("get_locked_default", req(Opcode.GET_LOCKED, key=b"Hello"), {"opcode": "GET_LOCKED", "key": "Hello"}),
    ("unlock", req(Opcode.UNLOCK_KEY, key=b"Hello", cas=7), {"opcode": "UNLOCK_KEY", "cas": 7}),
    ("get_replica", res(Opcode.GET_REPLICA, FLAGS, value=b"{}", datatype=1), {"flags": 0xDEADBEEF}),
    ("random_key", req(Opcode.GET_RANDOM_KEY, struct.pack(">I", 8)), {"collection_id": 8}),
    ("random_key_hit", res(Opcode.GET_RANDOM_KEY, FLAGS, b"k", b"v"), {"key": "k", "value": "v"}),
    ("set", req(Opcode.SET, struct.pack(">II", 0xDEADBEEF, 0xE10), b"Hello", b"World"),
     {"opcode": "SET", "flags": 0xDEADBEEF, "expiration": 0xE10, "key": "Hello", "value": "World"}),
    ("addq", req(Opcode.ADDQ, struct.pack(">II", 1, 2), b"k", b"v"), {"opcode": "ADDQ", "flags": 1}),
    ("set_ok", res(Opcode.SET, cas=1), {"opcode": "SET", "status": "Success"}),
    ("set_token", res(Opcode.REPLACE, TOKEN, cas=1),
     {"vbucket_uuid": 0x1122334455667788, "mutation_seqno": 42}),
    ("delete", req(Opcode.DELETE, key=b"Hello"), {"opcode": "DELETE", "key": "Hello"}),
    ("delete_token", res(Opcode.DELETE, TOKEN), {"mutation_seqno": 42}),
    ("incr", req(Opcode.INCREMENT, struct.pack(">QQI", 1, 0, 0xE10), b"counter"),
     {"delta": 1, "initial": 0, "expiration": 0xE10}),
    ("decr_response", res(Opcode.DECREMENT, value=struct.pack(">Q", 9)), {"counter": 9}),
    ("incr_token", res(Opcode.INCREMENTQ, TOKEN, value=struct.pack(">Q", 10)),
     {"counter": 10, "mutation_seqno": 42}),
    ("append", req(Opcode.APPEND, key=b"Hello", value=b"!"), {"opcode": "APPEND", "value": "!"}),
    ("prependq_ok", res(Opcode.PREPENDQ), {"opcode": "PREPENDQ"}),
    ("get_meta", req(Opcode.GET_META, b"\x02", b"Hello"), {"meta_version": 2}),
    ("get_meta_response", res(Opcode.GET_META, struct.pack(">IIIQ", 0, 5, 0, 3)),
     {"deleted": 0, "flags": 5, "expiration": 0, "seqno": 3}),
    ("get_meta_v2_response", res(Opcode.GET_META, struct.pack(">IIIQB", 1, 5, 0, 3, 1)),
     {"deleted": 1, "seqno": 3, "meta_datatype": 1}),
    ("get_cid", req(Opcode.COLLECTIONS_GET_ID, value=b"_default.c1"), {"value": "_default.c1"}),
    ("get_cid_key", req(Opcode.COLLECTIONS_GET_ID, key=b"_default.c1"), {"key": "_default.c1"}),
    ("get_cid_response", res(Opcode.COLLECTIONS_GET_ID, struct.pack(">QI", 4, 8)),
     {"opcode": "COLLECTIONS_GET_ID", "manifest_uid": 4, "collection_id": 8}),
    ("get_sid_response", res(Opcode.COLLECTIONS_GET_SCOPE_ID, struct.pack(">QI", 4, 9)),
     {"manifest_uid": 4, "scope_id": 9}),
    ("manifest", req(Opcode.COLLECTIONS_GET_MANIFEST), {"opcode": "COLLECTIONS_GET_MANIFEST"}),
    ("manifest_response", res(Opcode.COLLECTIONS_GET_MANIFEST, value=b'{"uid":"0"}', datatype=1),
     {"value": '{"uid":"0"}'}),
]


@pytest.mark.parametrize("name", KV_OPCODES)
def test_each_kv_opcode_has_a_request_and_a_response_row(name: str) -> None:
    code = int(Opcode[name])
    assert DCP.spec(REQ, code) is not None
    assert DCP.spec(RES, code) is not None


@pytest.mark.parametrize(("name", "raw", "expected"), CASES, ids=[c[0] for c in CASES])
def test_kv_packet_decodes_to_named_fields_and_encodes_back(name: str, raw: bytes, expected: dict[str, Any]) -> None:
    message = decode(raw)
    record = record_of(message)
    assert record["diagnostics"] == [], record["diagnostics"]
    assert "extras" not in record  # every extras byte is a named field
    for field, value in expected.items():
        assert record[field] == value, field
    assert encode(record, DCP) == raw


def test_getk_key_is_a_document_key_split_with_collections() -> None:
    raw = res(Opcode.GETK, FLAGS, b"\x08Hello", b"World")
    record = record_of(decode(raw, 0, DecodeOptions(collections=True)))
    assert (record["collection_id"], record["key"]) == (8, "Hello")
    assert encode(record, DCP) == raw


@pytest.mark.parametrize("name", KV_OPCODES)
def test_key_carrying_kv_requests_have_document_keys(name: str) -> None:
    spec = DCP.spec(REQ, int(Opcode[name]))
    assert spec is not None
    kinds = {variant.key for variant in spec.variants}
    if name.startswith("COLLECTIONS_"):
        assert KeyKind.DOCUMENT not in kinds  # a scope.collection path, not a document
    elif name != "GET_RANDOM_KEY":
        assert kinds == {KeyKind.DOCUMENT}


def test_fields_lists_the_kv_fields() -> None:
    out = io.StringIO()
    env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False, width=160)
    assert main(["fields", "-F", "jsonl"], env) == 0
    rows = {r["name"]: r for r in map(json.loads, out.getvalue().splitlines())}
    for name in ("delta", "initial", "counter", "mutation_seqno", "meta_version", "meta_datatype", "deleted"):
        assert rows[name]["meaning"], name
    assert "SET/store" in rows["expiration"]["messages"]
    assert "INCREMENT/arithmetic" in rows["delta"]["messages"]


def _decode_capture(tmp_path: Path, packets: list[tuple[bool, bytes]]) -> list[dict[str, Any]]:
    capture = tmp_path / "kv.pcap"
    capture.write_bytes(write_capture(packets))
    out = io.StringIO()
    env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False, width=160)
    assert main(["decode", "-F", "jsonl", str(capture)], env) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _hello(features: list[str]) -> list[tuple[bool, bytes]]:
    return [(True, encode({"magic": "ClientRequest", "opcode": "HELLO", "key": "sdk", "features": features})),
            (False, encode({"magic": "ClientResponse", "opcode": "HELLO", "status": "Success",
                            "features": features}))]


# Every key-carrying KV command: the collection id comes off its key when the connection's HELLO said so.
KEYED = [
    (True, req(Opcode.GET, key=b"\x08Hello")),
    (False, res(Opcode.GETK, FLAGS, b"\x08Hello", b"World")),
    (True, req(Opcode.SET, struct.pack(">II", 0, 0), b"\x08Hello", b"World")),
    (True, req(Opcode.DELETEQ, key=b"\x08Hello")),
    (True, req(Opcode.INCREMENT, struct.pack(">QQI", 1, 0, 0), b"\x08Hello")),
    (True, req(Opcode.TOUCH, struct.pack(">I", 1), b"\x08Hello")),
    (True, req(Opcode.GET_META, key=b"\x08Hello")),
]


def test_hello_collections_splits_the_collection_id_off_kv_keys(tmp_path: Path) -> None:
    records = _decode_capture(tmp_path, _hello(["Collections"]) + KEYED)[2:]
    assert [(r["collection_id"], r["key"]) for r in records] == [(8, "Hello")] * len(KEYED)
    assert all(r["diagnostics"] == [] for r in records)


def test_without_hello_collections_kv_keys_are_whole(tmp_path: Path) -> None:
    records = _decode_capture(tmp_path, _hello(["MutationSeqno"]) + KEYED)[2:]
    assert [(r["key"], r["key_encoding"]) for r in records] == [("0848656c6c6f", "hex")] * len(KEYED)
    assert not any("collection_id" in r for r in records)


def test_a_collection_id_in_a_longer_leb128_form_keeps_the_key_whole() -> None:
    # 5888 is 80 2e; 80 ae 00 says the same in three bytes, which would not encode back (found by test_fuzz)
    raw = req(Opcode.GET, key=b"\x80\xae\x00doc")
    record = record_of(decode(raw, 0, DecodeOptions(collections=True)))
    assert ("collection_id" in record, record["key"]) == (False, b"\x80\xae\x00doc".hex())
    assert [d["name"] for d in record["diagnostics"]] == ["bad_leb128"]
    assert encode(record, DCP) == raw


def test_a_compressed_get_response_is_decompressed() -> None:
    body = b'{"greeting":"hello, world, hello, world"}'
    raw = res(Opcode.GET, FLAGS, value=snappy_compress(body), datatype=DATATYPE_JSON | DATATYPE_SNAPPY)
    record = record_of(decode(raw))
    assert (record["value"], record["value_compressed"]) == (body.decode(), snappy_compress(body).hex())
    assert record["diagnostics"] == []
    assert encode(record, DCP) == raw


@pytest.mark.parametrize("opcode", [Opcode.GET_CLUSTER_CONFIG, Opcode.COLLECTIONS_GET_MANIFEST])
def test_snappy_everywhere_json_responses_are_decompressed(opcode: Opcode) -> None:
    body = b'{"rev":1,"name":"default","nodes":["a","a","a","a"]}'
    raw = res(opcode, value=snappy_compress(body), datatype=DATATYPE_JSON | DATATYPE_SNAPPY)
    record = record_of(decode(raw))
    assert record["value"] == body.decode()
    assert record["diagnostics"] == []
    assert encode(record, DCP) == raw


def test_a_compressed_error_body_is_decompressed() -> None:
    body = b'{"error":{"context":"Not found, not found, not found"}}'
    raw = res(Opcode.GET, value=snappy_compress(body), status=Status.KEY_ENOENT,
              datatype=DATATYPE_JSON | DATATYPE_SNAPPY)
    record = record_of(decode(raw))
    assert record["value"] == body.decode()
    assert encode(record, DCP) == raw


def test_xattrs_are_split_off_a_kv_value() -> None:
    value = build_xattrs([Xattr("_sync", '{"rev":"1"}')]) + b'{"a":1}'
    raw = res(Opcode.GET_REPLICA, FLAGS, value=value, datatype=DATATYPE_JSON | DATATYPE_XATTR)
    record = record_of(decode(raw))
    assert (record["xattrs"], record["value"]) == ([{"key": "_sync", "value": '{"rev":"1"}'}], '{"a":1}')
    assert encode(record, DCP) == raw


# --- Wireshark's dissector as the independent decoder, on a capture of the KV commands ---------------------
def _micros_frame(micros: int) -> bytes:
    """A ServerRecvSendDuration frame info as kv_engine's Tracer::encodeMicros writes it."""
    return b"\x02" + struct.pack(">H", round((min(micros, 120125042) * 2) ** (1.0 / 1.74)))


def _alt(magic: int, opcode: int, framing: bytes, extras: bytes = b"", key: bytes = b"") -> bytes:
    body = framing + extras + key
    return struct.pack(">BBBBBBHIIQ", magic, opcode, len(framing), len(key), len(extras), 0, 0, len(body), 7,
                       0) + body


FEATURES = ["Collections", "MutationSeqno", "Tracing", "AltRequestSupport", "SnappyEverywhere"]
COMPRESSED = b'{"a":1,"b":"xxxxxxxxxxxxxxxxxxxxxxxx"}'
# An SDK's session after HELLO, each request with the reply a server gives it (frame numbers from 4, after the
# TCP handshake: one message per frame).
KV_SESSION: list[tuple[bool, bytes]] = [
    (True, encode({"magic": "ClientRequest", "opcode": "HELLO", "key": "sdk", "features": FEATURES})),
    (False, encode({"magic": "ClientResponse", "opcode": "HELLO", "status": "Success", "features": FEATURES})),
    (True, req(Opcode.GET, key=b"\x08Hello")),
    (False, res(Opcode.GET, FLAGS, value=b'{"a":1}', datatype=DATATYPE_JSON, cas=5)),
    (True, req(Opcode.SET, struct.pack(">II", 0xDEADBEEF, 3600), b"\x08Hello", b'{"a":1}', datatype=DATATYPE_JSON)),
    (False, res(Opcode.SET, TOKEN, cas=6)),
    (True, req(Opcode.INCREMENT, struct.pack(">QQI", 1, 0, 3600), b"\x08counter")),
    (False, res(Opcode.INCREMENT, TOKEN, value=struct.pack(">Q", 1))),
    (True, req(Opcode.GAT, struct.pack(">I", 10), b"\x08Hello")),
    (False, res(Opcode.GAT, FLAGS, value=snappy_compress(COMPRESSED), datatype=DATATYPE_JSON | DATATYPE_SNAPPY)),
    (True, req(Opcode.GETK, key=b"\x08Hello")),
    (False, res(Opcode.GETK, FLAGS, b"\x08Hello", b"World")),
    (True, req(Opcode.COLLECTIONS_GET_ID, value=b"_default.c1")),
    (False, res(Opcode.COLLECTIONS_GET_ID, struct.pack(">QI", 4, 8))),
    (True, req(Opcode.GET_META, b"\x02", b"\x08Hello")),
    (False, res(Opcode.GET_META, struct.pack(">IIIQB", 0, 5, 0, 3, 1))),
    (True, _alt(Magic.ALT_CLIENT_REQUEST, Opcode.DELETE, b"\x13\x01\x01\xf4", key=b"\x08Hello")),
    (False, _alt(Magic.ALT_CLIENT_RESPONSE, Opcode.DELETE, _micros_frame(1000), TOKEN)),
    (True, req(Opcode.GET_RANDOM_KEY, struct.pack(">I", 8))),
    (False, res(Opcode.GET_RANDOM_KEY, FLAGS, b"\x08k", b"v")),
    (True, req(Opcode.APPEND, key=b"\x08Hello", value=b"!")),
    (False, res(Opcode.APPEND, cas=9)),
    (True, req(Opcode.GET, key=b"\x08Gone")),
    (False, res(Opcode.GET, value=b"Not found", status=Status.KEY_ENOENT)),
]
TSHARK_KV_FIELDS = ["frame.number", "couchbase.opcode", "couchbase.status", "couchbase.extras.flags",
                    "couchbase.extras.expiration", "couchbase.extras.delta", "couchbase.extras.initial",
                    "couchbase.extras.vbucket_uuid", "couchbase.extras.mutation_seqno",
                    "couchbase.key.collection_manifest_id", "couchbase.key.collection_id",
                    "couchbase.key.logical_key", "couchbase.value", "couchbase.flex_frame.frame.duration",
                    "couchbase.flex_frame.frame.durability_req", "couchbase.extras.unknown", "_ws.expert.message"]



def _int(text: str) -> int:
    return int(text, 16) if text.startswith("0x") else int(text)


@pytest.mark.peer
def test_kv_fields_agree_with_wireshark_and_where_it_is_wrong(tmp_path: Path) -> None:
    capture = tmp_path / "kv.pcap"
    capture.write_bytes(write_capture(KV_SESSION, segment_size=65535))  # one message per frame
    result = subprocess.run([peer("tshark"), "-r", str(capture), "-Y", "couchbase", "-T", "fields", "-E",
                             "separator=\t", *[x for f in TSHARK_KV_FIELDS for x in ("-e", f)]],
                            capture_output=True, text=True, check=True, timeout=120)
    theirs = {int(row[0]): dict(zip(TSHARK_KV_FIELDS, row, strict=True))
              for row in (line.split("\t") for line in result.stdout.splitlines())}
    mine = {r["frames"][0]: r for r in _decode_capture(tmp_path, KV_SESSION)}
    assert sorted(theirs) == sorted(mine)
    assert all(r["diagnostics"] == [] for r in mine.values())
    compared = 0
    for frame, row in theirs.items():
        record = mine[frame]
        assert _int(row["couchbase.opcode"]) == int(Opcode[record["opcode"]])
        if row["couchbase.status"]:
            assert record["status"] == Status(_int(row["couchbase.status"])).kv_name
        for field, key in [("couchbase.extras.flags", "flags"), ("couchbase.extras.expiration", "expiration"),
                           ("couchbase.extras.delta", "delta"), ("couchbase.extras.initial", "initial"),
                           ("couchbase.extras.vbucket_uuid", "vbucket_uuid"),
                           ("couchbase.extras.mutation_seqno", "mutation_seqno"),
                           ("couchbase.key.collection_manifest_id", "manifest_uid"),
                           ("couchbase.key.collection_id", "collection_id"),
                           ("couchbase.key.logical_key", "key")]:
            if row[field]:
                assert (_int(row[field]) if key != "key" else row[field]) == record[key], (frame, field)
                compared += 1
        if row["couchbase.flex_frame.frame.durability_req"]:
            assert int(row["couchbase.flex_frame.frame.durability_req"]) == \
                record["frame_infos"][0]["durability_level"]
            compared += 1
    assert compared >= 25

    def frame_of(opcode: str, response: bool) -> int:
        return next(f for f, r in mine.items() if r["opcode"] == opcode and ("status" in r) == response)

    # A GAT response carries the document's flags, as GET's does: Wireshark has no layout for them ("Unknown"
    # extras), and shows the snappy bytes as the value, "trailing stray characters" after them.
    gat = frame_of("GAT", response=True)
    assert mine[gat]["flags"] == 0xDEADBEEF
    assert mine[gat]["value"] == COMPRESSED.decode()
    assert theirs[gat]["couchbase.extras.unknown"] == "deadbeef"
    assert "Trailing stray" in theirs[gat]["_ws.expert.message"]
    # GET_META v2's 21st byte is the document's datatype (kv_engine's GetMetaPayload); Wireshark calls it
    # ConfRes, the conflict resolution mode (checked in its tree: the fields output has no name for it).
    meta = frame_of("GET_META", response=True)
    assert (mine[meta]["meta_datatype"], mine[meta]["seqno"]) == (1, 3)
    # The server duration: kv_engine's decodeMicros truncates to whole microseconds; Wireshark shows the
    # unrounded float of the same formula.
    deleted = frame_of("DELETE", response=True)
    duration = mine[deleted]["frame_infos"][0]["server_duration_us"]
    assert duration == int(float(theirs[deleted]["couchbase.flex_frame.frame.duration"])) == 1001
    assert theirs[deleted]["couchbase.flex_frame.frame.duration"] != str(duration)
    # GET_RANDOM_KEY's 4-byte extras are the collection to pick from (HELLO Collections): Wireshark "Unknown".
    random = frame_of("GET_RANDOM_KEY", response=False)
    assert mine[random]["collection_id"] == 8
    assert theirs[random]["couchbase.extras.unknown"] == "00000008"
    # An error response has no extras (the status and an error text): Wireshark wants a GET's flags anyway.
    miss = next(f for f, r in mine.items() if r.get("status") == "KeyEnoent")
    assert mine[miss]["value"] == "Not found"
    assert "must have Extras" in theirs[miss]["_ws.expert.message"]


SUBDOC = ("SUBDOC_GET", "SUBDOC_EXISTS", "SUBDOC_GET_COUNT", "SUBDOC_DICT_ADD", "SUBDOC_DICT_UPSERT", "SUBDOC_DELETE",
          "SUBDOC_REPLACE", "SUBDOC_ARRAY_PUSH_LAST", "SUBDOC_ARRAY_PUSH_FIRST", "SUBDOC_ARRAY_INSERT",
          "SUBDOC_ARRAY_ADD_UNIQUE", "SUBDOC_COUNTER", "SUBDOC_REPLACE_BODY_WITH_XATTR", "SUBDOC_MULTI_LOOKUP",
          "SUBDOC_MULTI_MUTATION")


@pytest.mark.parametrize("name", SUBDOC)
def test_each_subdoc_opcode_has_rows_and_a_document_key(name: str) -> None:
    for magic in (REQ, RES):
        assert DCP.spec(magic, int(Opcode[name])) is not None
    spec = DCP.spec(REQ, int(Opcode[name]))
    assert spec is not None
    assert spec.document_key


SINGLE_PATH = SUBDOC[:13]


@pytest.mark.parametrize("name", SINGLE_PATH)
@pytest.mark.parametrize(("extras", "expected"), [
    (struct.pack(">HB", 7, 0x01), {"path_length": 7, "subdoc_flags": 1}),
    (struct.pack(">HBB", 7, 0x04, 0x02), {"subdoc_flags": 4, "doc_flags": 2}),
    (struct.pack(">HBI", 7, 0, 60), {"expiration": 60}),
    (struct.pack(">HBIB", 7, 0, 60, 1), {"expiration": 60, "doc_flags": 1}),
])
def test_a_single_path_body_is_split_into_path_and_value(name: str, extras: bytes, expected: dict[str, int]) -> None:
    from dcpctl.protocol.layout import spans  # noqa: PLC0415

    if len(extras) > 4 and name in SUBDOC_LOOKUPS:
        extras = extras[:3]  # a lookup has no expiry
        expected = {}
    raw = req(Opcode[name], extras, b"doc", b"a.b[12]" + b'{"x":1}')
    message = decode(raw)
    record = record_of(message)
    assert record["diagnostics"] == []
    assert (record["key"], record["path"], record["value"]) == ("doc", "a.b[12]", '{"x":1}')
    assert {k: record[k] for k in expected} == expected
    assert encode(record, DCP) == raw
    # encode needs no path_length: the path gives it
    assert encode({k: v for k, v in record.items() if not k.endswith("length")}, DCP) == raw
    shown = {(s.name, s.offset, s.length) for s in spans(message)}
    start = 24 + len(extras) + 3
    assert {("path", start, 7), ("value", start + 7, 7)} <= shown


def test_a_path_alone_has_no_value_and_a_path_past_the_body_keeps_it_whole() -> None:
    lookup = req(Opcode.SUBDOC_GET, struct.pack(">HB", 4, 0), b"doc", b"name")
    record = record_of(decode(lookup))
    assert (record["path"], "value" in record, record["diagnostics"]) == ("name", False, [])
    assert encode(record, DCP) == lookup
    bad = req(Opcode.SUBDOC_GET, struct.pack(">HB", 9, 0), b"doc", b"name")
    record = record_of(decode(bad))
    assert ("path" in record, record["value"]) == (False, "name")
    assert [d["name"] for d in record["diagnostics"]] == ["illegal_value_length"]
    assert encode(record, DCP) == bad


def test_each_path_spec_is_decoded_and_shown_in_the_hexdump() -> None:
    from dcpctl.protocol.layout import spans  # noqa: PLC0415

    specs = struct.pack(">BBH", 0xC5, 0x04, 5) + b"_sync" + struct.pack(">BBH", 0x00, 0, 0)
    raw = req(Opcode.SUBDOC_MULTI_LOOKUP, b"\x04", b"doc", specs)
    message = decode(raw)
    record = record_of(message)
    assert record["doc_flags"] == 4
    assert record["lookup_specs"] == [{"opcode": 0xC5, "flags": 4, "path_length": 5, "path": "_sync"},
                                      {"opcode": 0, "flags": 0, "path_length": 0, "path": ""}]
    assert ("lookup_specs.0.path", "_sync") in {(s.name, s.value) for s in spans(message)}
    assert encode(record, DCP) == raw


def test_a_failed_multi_mutation_names_its_spec_and_status() -> None:
    raw = res(Opcode.SUBDOC_MULTI_MUTATION, value=struct.pack(">BH", 2, Status.SUBDOC_PATH_EEXISTS),
              status=Status.SUBDOC_MULTI_PATH_FAILURE)
    record = record_of(decode(raw))
    assert (record["status"], record["failed_index"], record["failed_status"]) == \
        ("SubdocMultiPathFailure", 2, "SubdocPathEexists")
    assert record["diagnostics"] == []
    assert encode(record, DCP) == raw


def test_a_path_that_is_not_utf8_leaves_the_value_raw() -> None:
    raw = req(Opcode.SUBDOC_MULTI_LOOKUP, key=b"doc", value=struct.pack(">BBH", 0xC5, 0, 2) + b"\xff\xfe")
    record = record_of(decode(raw))
    assert [d["name"] for d in record["diagnostics"]] == ["illegal_value_length"]
    assert encode(record, DCP) == raw


@pytest.mark.parametrize(("extras", "expected"), [
    (struct.pack(">IIQQ", 1, 2, 3, 4), {"flags": 1, "expiration": 2, "seqno": 3, "meta_cas": 4}),
    (struct.pack(">IIQQH", 1, 2, 3, 4, 0), {"meta_cas": 4, "nmeta": 0}),
    (struct.pack(">IIQQI", 1, 2, 3, 4, 8), {"meta_cas": 4, "options": 8}),
    (struct.pack(">IIQQIH", 1, 2, 3, 4, 8, 0), {"options": 8, "nmeta": 0}),
])
def test_with_meta_extras_are_named(extras: bytes, expected: dict[str, int]) -> None:
    raw = req(Opcode.SET_WITH_META, extras, b"doc", b"{}", datatype=DATATYPE_JSON, cas=99)
    record = record_of(decode(raw))
    assert record["diagnostics"] == []
    assert record["cas"] == 99  # the header's; the source cluster's is meta_cas
    assert {k: record[k] for k in expected} == expected
    assert encode(record, DCP) == raw


def test_observe_keys_and_states() -> None:
    raw = req(Opcode.OBSERVE, value=struct.pack(">HH", 5, 3) + b"doc")
    assert record_of(decode(raw))["observe_keys"] == [{"vbucket": 5, "key_length": 3, "key": b"doc".hex()}]
    answer = res(Opcode.OBSERVE, value=struct.pack(">HH", 5, 3) + b"doc" + struct.pack(">BQ", 1, 77))
    record = record_of(decode(answer))
    assert record["observe_states"] == [{"vbucket": 5, "key_length": 3, "key": b"doc".hex(), "key_state": 1,
                                         "cas": 77}]
    assert encode(record, DCP) == answer


@pytest.mark.parametrize(("opcode", "value"), [(2, b'{"step":false,"context":"","challenge":"AGZvbwBiYXI="}'),
                                               (3, b'["joe","smith"]')])
def test_server_initiated_requests_and_their_answers(opcode: int, value: bytes) -> None:
    """Authenticate's challenge is the client's SASL message (a password in PLAIN's): hidden as SASL_AUTH's
    is, unless secrets are shown."""
    raw = packet(Magic.SERVER_REQUEST, opcode, value=value, datatype=DATATYPE_JSON)
    record = record_of(decode(raw, 0, DecodeOptions(show_secrets=True)))
    assert (record["opcode"], record["value"], record["diagnostics"]) == (
        {2: "Authenticate", 3: "ActiveExternalUsers"}[opcode], value.decode(), [])
    assert encode(record, DCP) == raw
    hidden = record_of(decode(raw))
    assert (hidden["value"], hidden.get("value_redacted")) == ((None, len(value)) if opcode == 2
                                                               else (value.decode(), None))
    answer = packet(Magic.SERVER_RESPONSE, opcode, value=b'{"rbac":{}}', datatype=DATATYPE_JSON)
    reply = record_of(decode(answer))
    assert (reply["status"], reply["value"], reply["diagnostics"]) == ("Success", '{"rbac":{}}', [])
    assert encode(reply, DCP) == answer


@pytest.mark.parametrize(("flags", "value", "kept"), [
    (0, b"\x02k", "value_trailing"),  # a key shorter than its length: the items before it, then the rest
    (1, struct.pack(">IIQQB", 0, 0, 1, 2, 0) + b"\x80", "value_trailing"),  # a LEB128 length cut short
    (2, b"\x01k", "value"),  # a scan_flags no layout declares: the value raw
])
def test_a_range_scan_value_that_does_not_fit_is_kept_raw(flags: int, value: bytes, kept: str) -> None:
    raw = res(Opcode.RANGE_SCAN_CONTINUE, struct.pack(">I", flags), value=value, status=Status.SUCCESS)
    record = record_of(decode(raw))
    assert [d["name"] for d in record["diagnostics"]] == ["illegal_value_length"]
    assert record[kept] == value.hex()
    assert encode(record, DCP) == raw


DOCUMENT_HEAD = struct.pack(">IIQQB", 0, 0, 1, 2, 0)


@pytest.mark.parametrize(("flags", "value", "named"), [
    (0, b"\x01a\x83\x00abc", "key_length 8300"),  # 3 in two bytes, after a key that is well formed
    (1, DOCUMENT_HEAD + b"\x01k\x81\x80\x00v", "value_length 818000"),  # 1 in three bytes
    (0, b"\xff" * 4096, "key_length ffffffffff"),  # a run of continuation bytes: read no further than a u32
])
def test_a_range_scan_length_in_a_longer_leb128_form_keeps_the_value_raw(flags: int, value: bytes,
                                                                         named: str) -> None:
    # the server writes the shortest form; any other would not encode back to the same bytes
    raw = res(Opcode.RANGE_SCAN_CONTINUE, struct.pack(">I", flags), value=value, status=Status.RANGE_SCAN_MORE)
    record = record_of(decode(raw))
    assert [(d["name"], named in d["message"]) for d in record["diagnostics"]] == [("bad_leb128", True)]
    assert (record["value"], "scan_keys" in record, "scan_documents" in record) == (value.hex(), False, False)
    assert encode(record, DCP) == raw



def test_range_scan_continue_keys_and_documents_are_told_apart_by_the_extras() -> None:
    keys = res(Opcode.RANGE_SCAN_CONTINUE, struct.pack(">I", 0), value=b"\x01a\x02bc",
               status=Status.RANGE_SCAN_MORE)
    assert record_of(decode(keys))["scan_keys"] == [{"key_length": 1, "key": "61"}, {"key_length": 2, "key": "6263"}]
    empty = res(Opcode.RANGE_SCAN_CONTINUE, struct.pack(">I", 1), status=Status.RANGE_SCAN_COMPLETE)
    record = record_of(decode(empty))
    assert (record["scan_flags"], record["diagnostics"]) == (1, [])
    assert encode(record, DCP) == empty


# --- the rows added after the first comparison: single-path subdoc, range scans, STAT, the server's
# ClustermapChangeNotification, held to Wireshark on one capture (frames from 4: HELLO, its answer, then these)
UUID = bytes.fromhex("00112233445566778899aabbccddeeff")
NEW_SESSION: list[tuple[bool, bytes]] = [
    *_hello(["Duplex", "ClustermapChangeNotification"]),
    (True, req(Opcode.SUBDOC_DICT_UPSERT, struct.pack(">HB", 7, 1), b"doc", b"a.b[12]" + b'{"x":1}')),
    (True, req(Opcode.SUBDOC_GET, struct.pack(">HBB", 4, 0, 0), b"doc", b"name")),
    (True, req(Opcode.RANGE_SCAN_CREATE, value=b'{"range":{"start":"YQ==","end":"eg=="}}', datatype=DATATYPE_JSON)),
    (False, res(Opcode.RANGE_SCAN_CREATE, value=UUID)),
    (True, req(Opcode.RANGE_SCAN_CONTINUE, UUID + struct.pack(">III", 500, 0, 0))),
    (False, res(Opcode.RANGE_SCAN_CONTINUE, struct.pack(">I", 0), value=b"\x04key0",
                status=Status.RANGE_SCAN_COMPLETE)),
    (True, req(Opcode.RANGE_SCAN_CANCEL, UUID)),
    (True, req(Opcode.STAT, key=b"dcp")),
    (False, res(Opcode.STAT, key=b"uptime", value=b"12")),
    (False, res(Opcode.STAT)),
    (False, packet(Magic.SERVER_REQUEST, 0x01, struct.pack(">qq", 1, 666), b"default", b'{"rev":666}',
                   datatype=DATATYPE_JSON)),
    (True, packet(Magic.SERVER_RESPONSE, 0x01)),
]
TSHARK_NEW_FIELDS = ["frame.number", "couchbase.opcode", "couchbase.server.opcode", "couchbase.key",
                     "couchbase.path", "couchbase.extras.pathlen", "couchbase.value",
                     "couchbase.server.extras.cccp.epoch", "couchbase.server.extras.cccp.revision",
                     "couchbase.server.clustermap.value", "_ws.expert.message"]


@pytest.mark.peer
def test_new_rows_agree_with_wireshark_and_where_it_is_wrong(tmp_path: Path) -> None:
    capture = tmp_path / "new.pcap"
    capture.write_bytes(write_capture(NEW_SESSION, segment_size=65535))
    result = subprocess.run([peer("tshark"), "-r", str(capture), "-Y", "couchbase", "-T", "fields", "-E",
                             "separator=\t", *[x for f in TSHARK_NEW_FIELDS for x in ("-e", f)]],
                            capture_output=True, text=True, check=True, timeout=120)
    theirs = {int(row[0]): dict(zip(TSHARK_NEW_FIELDS, row, strict=True))
              for row in (line.split("\t") for line in result.stdout.splitlines())}
    capture.unlink()
    mine = {r["frames"][0]: r for r in _decode_capture(tmp_path, NEW_SESSION)}
    assert sorted(theirs) == sorted(mine)
    assert all(r["diagnostics"] == [] for r in mine.values())

    def frame_of(opcode: str, response: bool, nth: int = 0) -> int:
        return [f for f, r in sorted(mine.items()) if r["opcode"] == opcode and ("status" in r) == response][nth]

    # Single-path subdoc: the same path, path length and value as Wireshark's.
    for opcode in ("SUBDOC_DICT_UPSERT", "SUBDOC_GET"):
        frame = frame_of(opcode, response=False)
        row, record = theirs[frame], mine[frame]
        assert (row["couchbase.path"], int(row["couchbase.extras.pathlen"])) == (record["path"],
                                                                                 record["path_length"])
        assert row["couchbase.value"] == record.get("value", "")
    # STAT: each stat's name and text are Wireshark's key and value; the group's end has neither.
    stat = frame_of("STAT", response=True)
    assert (theirs[stat]["couchbase.key"], theirs[stat]["couchbase.value"]) == (mine[stat]["key"],
                                                                                mine[stat]["value"])
    end = frame_of("STAT", response=True, nth=1)
    assert mine[end]["stat_end"] is True
    assert theirs[end]["couchbase.key"] == theirs[end]["couchbase.value"] == ""
    assert theirs[frame_of("STAT", response=False)]["couchbase.key"] == mine[frame_of("STAT", False)]["key"]
    # The server's ClustermapChangeNotification: epoch, revision, bucket and map as Wireshark reads them.
    push = next(f for f, r in mine.items() if r["magic"] == "ServerRequest")
    row = theirs[push]
    assert (int(row["couchbase.server.opcode"], 16), int(row["couchbase.server.extras.cccp.epoch"]),
            int(row["couchbase.server.extras.cccp.revision"]), row["couchbase.key"],
            row["couchbase.server.clustermap.value"]) == (1, mine[push]["epoch"], mine[push]["revision"],
                                                          mine[push]["key"], mine[push]["value"])
    # Range scans: Wireshark has no rows for 0xda-0xdc ("Unknown opcode"): it shows neither the continue's
    # extras nor the scan uuid, and takes the continue response's keys for a plain value.
    for opcode, response in (("RANGE_SCAN_CREATE", False), ("RANGE_SCAN_CREATE", True),
                             ("RANGE_SCAN_CONTINUE", False), ("RANGE_SCAN_CONTINUE", True),
                             ("RANGE_SCAN_CANCEL", False)):
        assert "Unknown opcode" in theirs[frame_of(opcode, response)]["_ws.expert.message"]
    assert mine[frame_of("RANGE_SCAN_CREATE", True)]["scan_uuid"] == UUID.hex()
    scanned = frame_of("RANGE_SCAN_CONTINUE", True)
    assert mine[scanned]["scan_keys"] == [{"key_length": 4, "key": b"key0".hex()}]
    assert theirs[scanned]["couchbase.value"] == "\x04key0"  # the LEB128 length byte taken as part of the value
    assert mine[frame_of("RANGE_SCAN_CONTINUE", False)]["item_limit"] == 500

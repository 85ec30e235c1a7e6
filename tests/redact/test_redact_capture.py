"""``dcpctl redact`` on every capture the suite has: decode of input and output agree field by field apart
from the redacted fields, no key, value or password of the input is left in the output (whole, or across
segment boundaries), and tshark reads the output as cleanly as the input."""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from capturekit import session_packets, write_capture
from peakkit import run_with_peak
from servekit import peer
from vectorfile import all_vectors

from dcpctl.cli import main
from dcpctl.dcp.observed import Observed
from dcpctl.exitcode import ExitCode
from dcpctl.protocol import build
from dcpctl.protocol.constants import DATATYPE_JSON, DATATYPE_SNAPPY, RESPONSE_MAGICS, Opcode
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.protocol.registry import KeyKind, ValueKind
from dcpctl.protocol.value import snappy_decompress
from dcpctl.redact.core import DATA_EXTRAS, DATA_FIELDS
from dcpctl.render.env import Environment
from dcpctl.render.record import record as record_of
from dcpctl.sources.capture import decode_segments
from dcpctl.sources.pcap import TcpSegment, read_segments
from dcpctl.sources.pcapwriter import (
    ACK,
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
    PcapWriter,
    TcpConversation,
)
from dcpctl.sources.redaction import CaptureRedactor

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "dcp-session.pcap"
REAL = ROOT / "tests" / "vectors" / "real"  # a real server's packets (SOURCES.md there)
# Fields a redaction may change: the document's key and value (and their encodings), xattr values, a SASL
# value, the compressed form of a value; nothing else of a record.
REDACTED_FIELDS = {"key", "key_encoding", "value", "value_encoding", "value_compressed", "xattrs"}
PASSWORD = b"correct horse battery staple"
SALT = "a salt for the tests"
# Byte strings shorter than this occur by chance in any capture (a 4-byte key "name" is also a JSON name)
MIN_SECRET_LENGTH = 8
DATA_KEYS = {KeyKind.DOCUMENT, KeyKind.RAW}
DATA_VALUES = {ValueKind.DOCUMENT, ValueKind.SECRET, ValueKind.RAW}


class Run:
    def __init__(self, args: list[str]) -> None:
        self.out = io.StringIO()
        self.err = io.StringIO()
        env = Environment(stdout=self.out, stderr=self.err, stdin=io.BytesIO(), stdout_isatty=False,
                          stderr_isatty=False, color=False, width=160)
        self.code = main(args, env)


def _hello_collections() -> list[tuple[bool, bytes]]:
    """The sample session's HELLO and its answer: Collections negotiated, so keys carry their prefix."""
    return session_packets()[:2]


def _vector_packets(collections: bool | None) -> list[tuple[bool, bytes]]:
    out = []
    for vector in all_vectors():
        if vector.dialect != "dcp" or vector.lenient or vector.collections != collections:
            continue
        if len(vector.data) < 24 or len(vector.data) != 24 + struct.unpack_from(">I", vector.data, 8)[0]:
            continue
        out.append((vector.data[0] not in RESPONSE_MAGICS, vector.data))
    return out


def _real_packets() -> list[tuple[bool, bytes]]:
    """gomemcached's packets captured from a server (see SOURCES.md), the snappy mutation among them."""
    packets = [(False, (REAL / f"header.{name}.bin").read_bytes() + (REAL / f"body.{name}.bin").read_bytes())
               for name in ("0x56", "0x57", "0x5f")]
    for name in sorted((REAL / "client").glob("*.json")):
        request = json.loads(name.read_text())
        extras, key, body = (base64.b64decode(request.get(field) or "") for field in ("Extras", "Key", "Body"))
        packets.append((False, _packet(request, extras, key, body)))
    return packets


def _packet(request: dict[str, object], extras: bytes, key: bytes, body: bytes) -> bytes:
    """A request as gomemcached's MCRequest JSON holds it (opcode, extras, key and body given as bytes)."""
    header = struct.pack(">BBHBBHIIQ", 0x80, int(request["Opcode"]), len(key), len(extras),  # type: ignore[call-overload]
                         int(request.get("DataType", 0)), int(request.get("VBucket", 0)),  # type: ignore[call-overload]
                         len(extras) + len(key) + len(body), int(request.get("Opaque", 0)),  # type: ignore[call-overload]
                         int(request.get("Cas", 0)))  # type: ignore[call-overload]
    return header + extras + key + body


def _sasl_packets() -> list[tuple[bool, bytes]]:
    return [(True, build.request(Opcode.SASL_AUTH, key=b"PLAIN", value=b"\x00someuser\x00" + PASSWORD)),
            (False, build.response(Opcode.SASL_AUTH, value=b"Authenticated")),
            (True, build.request(Opcode.SELECT_BUCKET, key=b"travel-sample"))]


def _snappy_packets() -> list[tuple[bool, bytes]]:
    import cramjam  # noqa: PLC0415

    document = json.dumps({"name": "Snappy Secret Airways", "callsign": "SNAPPYSECRET",
                           "fleet": ["aircraft one", "aircraft two"] * 8}).encode()
    compressed = bytes(cramjam.snappy.compress_raw(document))
    return [(False, build.request(Opcode.DCP_MUTATION, key=b"snappy_document_key", datatype=DATATYPE_JSON
                                  | DATATYPE_SNAPPY, value=compressed, by_seqno=7, rev_seqno=1, flags=0, expiration=0,
                                  lock_time=0, nmeta=0, nru=0))]


def captures(directory: Path) -> Iterator[tuple[str, Path]]:
    """Every capture of the suite, written as files: the sample, its link-type and segmenting variants, the
    golden vectors, the real packets, a SASL exchange and a snappy document."""
    yield "sample", SAMPLE
    session = session_packets()
    variants = {
        "sample-segments-of-7": write_capture(session, segment_size=7),
        "sample-sll": write_capture(session, linktype=LINKTYPE_LINUX_SLL),
        "sample-raw-ipv6": write_capture(session, linktype=LINKTYPE_RAW, client=("2001:db8::1", 50123),
                                         server=("2001:db8::2", 11210)),
        "sample-null": write_capture(session, linktype=LINKTYPE_NULL),
        "sample-vlan": write_capture(session, vlan=42),
        "vectors": write_capture(_vector_packets(None)),
        "vectors-collections": write_capture(_hello_collections() + _vector_packets(True)),
        "real": write_capture(_hello_collections() + _real_packets(), segment_size=50),
        "sasl": write_capture(_sasl_packets(), segment_size=5),
        "snappy": write_capture(_snappy_packets()),
        # the capture ends inside the last mutation (a stop, a file cut): its seqnos must stay, not read 0
        "sample-cut-short": write_capture(_cut_short(session), segment_size=40),
    }
    for name, data in variants.items():
        path = directory / f"{name}.pcap"
        path.write_bytes(data)
        yield name, path
    pcapng = directory / "sample.pcapng"
    subprocess.run([peer("editcap"), "-F", "pcapng", str(SAMPLE), str(pcapng)], check=True, capture_output=True)
    yield "sample-pcapng", pcapng


def _cut_short(packets: list[tuple[bool, bytes]]) -> list[tuple[bool, bytes]]:
    """The packets up to the last DCP_MUTATION, that one without its last 10 bytes."""
    last = max(i for i, (_, data) in enumerate(packets) if data[1] == Opcode.DCP_MUTATION)
    client, data = packets[last]
    return [*packets[:last], (client, data[:-10])]


def _messages(path: Path) -> list[Message]:
    return [item.packet for item in decode_segments(read_segments(str(path)), DecodeOptions(show_secrets=True),
                                                    frozenset({11210})) if isinstance(item, Observed)]


def _decoded(path: Path) -> list[dict[str, object]]:
    return _decoded_on(path, 11210)


def _decoded_on(path: Path, port: int) -> list[dict[str, object]]:
    run = Run(["decode", "--format", "jsonl", "--jobs", "1", "--port", str(port), str(path)])
    assert run.code == ExitCode.OK, run.err.getvalue()
    return [json.loads(line) for line in run.out.getvalue().splitlines()]


def _redact(source: Path, out: Path, *extra: str) -> Run:
    salt = out.parent / "salt"
    salt.write_text(SALT)
    return Run(["redact", str(source), "-o", str(out), "--salt-file", str(salt), *extra])


def _streams(path: Path) -> list[bytes]:
    return _streams_on(path, 11210)


def _streams_on(path: Path, port: int) -> list[bytes]:
    """Each direction's TCP payload joined in order: what a search across segment boundaries looks at."""
    streams: dict[tuple[object, object], bytearray] = {}
    for item in read_segments(str(path), frozenset({port})):
        if isinstance(item, TcpSegment):
            streams.setdefault((item.src, item.dst), bytearray()).extend(item.payload)
    return [bytes(stream) for stream in streams.values()]


def _redact_all(directory: Path, suffix: str, *options: str) -> list[tuple[str, Path, Path, Run]]:
    """Every capture of the suite redacted with these options: (name, input, output, the run)."""
    out = []
    for name, path in captures(directory):
        target = directory / f"{name}.{suffix}.pcap"
        out.append((name, path, target, _redact(path, target, *options)))
    return out


@pytest.fixture(scope="module")
def redacted(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, Path, Path, Run]]:
    return _redact_all(tmp_path_factory.mktemp("redact"), "redacted")


def test_every_capture_redacts_with_exit_0(redacted: list[tuple[str, Path, Path, Run]]) -> None:
    for name, _, target, run in redacted:
        assert run.code == ExitCode.OK, (name, run.err.getvalue())
        assert target.exists(), name
        assert "Traceback" not in run.err.getvalue()


def test_decode_agrees_field_by_field(redacted: list[tuple[str, Path, Path, Run]]) -> None:
    _agree_field_by_field(redacted)


def _agree_field_by_field(runs: list[tuple[str, Path, Path, Run]], names: bool = False) -> None:
    """Decode of each input and output agree but for the redacted fields (``names``: and subdocument paths,
    their JSON names hashed)."""
    for name, source, target, run in runs:
        before, after = _decoded(source), _decoded(target)
        assert len(before) == len(after), name
        assert before, name
        # a snappy value compressed again at a new length moves the stream offsets after it
        moved = "compressed again" in run.err.getvalue()
        for old, new in zip(before, after, strict=True):
            changed = list(_differences(old, new, ()))
            # the same diagnostics at the same bytes; a malformed value's message may quote what it found
            assert [(d["name"], d.get("offset"), d.get("length")) for d in old["diagnostics"]] == \
                [(d["name"], d.get("offset"), d.get("length")) for d in new["diagnostics"]], (name, old, new)
            changed = [path for path in changed if path != ("diagnostics", "message")]
            if moved:
                changed = [path for path in changed if path[0] not in {"offset", "request_offset"}]
            if int(old.get("datatype") or 0) & DATATYPE_SNAPPY:
                changed = [path for path in changed if path[0] != "total_body_length"]
            changed = [path for path in changed if not (names and path[-1] == "path")]
            changed = [path for path in changed if path[0] not in _undeclared(old)]
            if any(d["name"] == "truncated" for d in old["diagnostics"]):  # type: ignore[attr-defined]
                # a message the capture ends inside: its value is zeroed, and what is read from it with it
                changed = [path for path in changed if path[0] != "xattrs"]
            assert all(_redactable(path) for path in changed), (name, old.get("opcode"), changed)
            if "key" in old and old.get("key_encoding") == new.get("key_encoding"):
                assert len(str(old["key"])) == len(str(new["key"])), (name, old["key"], new["key"])
            if "xattrs" in old and not any(d["name"] == "truncated" for d in old["diagnostics"]):  # type: ignore[attr-defined]
                assert [x["key"] for x in old["xattrs"]] == [x["key"] for x in new["xattrs"]]  # type: ignore[union-attr]


def _undeclared(record: dict[str, object]) -> set[str]:
    """The fields of a record that no declaration says are the protocol's, replaced whole: the extras of an
    opcode without a row or of a length no row declares, frame infos kv_engine does not define (or at a length
    their id does not take) and bytes that frame none."""
    names = {d["name"] for d in record["diagnostics"]}  # type: ignore[attr-defined]
    fields = {"extras"} if str(record.get("opcode")).startswith("0x") else set()
    if names & {"illegal_extras_length", "extras_length_mismatch"}:
        fields |= {"extras"}
    if names & {"unknown_frame_info", "bad_frame_info", "illegal_frame_info_length"}:
        fields |= {"framing_extras", "frame_infos"}
    return fields


def _differences(old: object, new: object, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """Paths of the leaves that differ (list indexes left out of the path)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for field in old.keys() | new.keys():
            yield from _differences(old.get(field), new.get(field), (*path, field))
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for one, other in zip(old, new, strict=True):
            yield from _differences(one, other, path)
    elif old != new:
        yield path


def _redactable(path: tuple[str, ...]) -> bool:
    """A redacted field: a record's key or value (and their encodings), an xattr's value, a value
    grammar's key or value (a subdocument spec's, a counter), the compressed form of a value, an extras field
    that holds a document's value."""
    if path[0] in REDACTED_FIELDS - {"xattrs"} or path == ("xattrs", "value") or path[-1] in {*DATA_EXTRAS,
                                                                                                *DATA_FIELDS}:
        return True
    return len(path) > 1 and path[-1] in {"key", "value", "value_encoding", "key_encoding"}


def test_no_key_value_or_password_left(redacted: list[tuple[str, Path, Path, Run]]) -> None:
    for name, source, target, _ in redacted:
        secrets = {PASSWORD}
        for msg in _messages(source):
            record = record_of(msg)
            # names and protocol vocabulary (a bucket, a control key, a cluster map) are kept on purpose
            fields = [field for field, data in (("key", msg.variant is None or msg.variant.key in DATA_KEYS),
                                                ("value", msg.variant is None or msg.variant.value in DATA_VALUES
                                                 or msg.opcode_name.startswith("SUBDOC_"))) if data]
            for field in fields:
                text = record.get(field)
                if isinstance(text, str) and record.get(f"{field}_encoding") != "hex" and \
                        len(text.encode()) >= MIN_SECRET_LENGTH:
                    secrets.add(text.encode())
            for xattr in record.get("xattrs") or ():
                if len(xattr["value"]) >= MIN_SECRET_LENGTH:
                    secrets.add(xattr["value"].encode())
        output = target.read_bytes()
        streams = _streams(target)
        for secret in secrets:
            assert secret not in output, (name, secret)
            assert not any(secret in stream for stream in streams), (name, secret)


def test_no_string_of_a_document_left(redacted: list[tuple[str, Path, Path, Run]]) -> None:
    """Inside JSON (names kept) and inside snappy: no string value of a document survives."""
    for name, source, target, _ in redacted:
        strings = {s.encode() for document in _documents(source) for s in _json_strings(document)
                   if len(s) >= MIN_SECRET_LENGTH}
        if not strings:
            continue
        inflated = [json.dumps(r.get("value")).encode() for r in _decoded(target)]
        for secret in strings:
            assert not any(secret in stream for stream in _streams(target)), (name, secret)
            assert not any(secret in value for value in inflated), (name, secret)


def _documents(path: Path) -> Iterator[object]:
    """The JSON documents the capture's messages carry as values (shown as text, parsed)."""
    for msg in _messages(path):
        record = record_of(msg)
        if msg.variant is None or msg.variant.value.value != "document" or not isinstance(record.get("value"), str):
            continue
        try:
            yield json.loads(str(record["value"]))
        except ValueError:
            continue


def _json_strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _json_strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _json_strings(item)


def _expert(path: Path) -> tuple[str, str]:
    tshark = peer("tshark")
    done = subprocess.run([tshark, "-r", str(path), "-q", "-z", "expert,warn", "-o", "tcp.check_checksum:TRUE"],
                          capture_output=True, text=True, check=False, timeout=60)
    lines = [line for line in done.stdout.splitlines() if line.strip() and "Running as user" not in line]
    malformed = subprocess.run([tshark, "-r", str(path), "-Y", "_ws.malformed or tcp.checksum.status == 0 or "
                                "ip.checksum.status == 0"], capture_output=True, text=True, check=False, timeout=60)
    return "\n".join(lines), malformed.stdout


@pytest.mark.peer
def test_tshark_reads_the_output_as_cleanly_as_the_input(redacted: list[tuple[str, Path, Path, Run]]) -> None:
    for name, source, target, _ in redacted:
        _reads_as_cleanly(name, source, target)


def _reads_as_cleanly(name: str, source: Path, target: Path) -> None:
    """tshark finds no more malformed frames, bad checksums or expert warnings in the output than the input."""
    (expert_in, malformed_in), (expert_out, malformed_out) = _expert(source), _expert(target)
    assert malformed_out.count("\n") <= malformed_in.count("\n"), (name, malformed_out)
    assert _warnings(expert_out) <= _warnings(expert_in), (name, expert_in, expert_out)


def _warnings(expert: str) -> int:
    """The number of warnings and errors in tshark's expert summary (the Frequency column)."""
    total = 0
    for line in expert.splitlines():
        words = line.split()
        if words and words[0].isdigit():
            total += int(words[0])
    return total


def test_the_same_salt_gives_the_same_placeholders(tmp_path: Path) -> None:
    first, second = tmp_path / "one.pcap", tmp_path / "two.pcap"
    assert _redact(SAMPLE, first).code == ExitCode.OK
    assert _redact(SAMPLE, second).code == ExitCode.OK
    assert first.read_bytes() == second.read_bytes()
    os.environ["DCPCTL_REDACT_SALT"] = SALT
    try:
        third = tmp_path / "three.pcap"
        run = Run(["redact", str(SAMPLE), "-o", str(third)])
        assert run.code == ExitCode.OK
        assert "salt" not in run.err.getvalue().splitlines()[0]
    finally:
        del os.environ["DCPCTL_REDACT_SALT"]
    assert third.read_bytes() == first.read_bytes()


def test_a_random_salt_is_printed_once(tmp_path: Path) -> None:
    run = Run(["redact", str(SAMPLE), "-o", str(tmp_path / "out.pcap")])
    assert run.code == ExitCode.OK
    salts = [line for line in run.err.getvalue().splitlines() if "salt" in line]
    assert len(salts) == 1
    salt = salts[0].split("salt ")[1].split()[0]
    again = tmp_path / "again.pcap"
    (tmp_path / "salt").write_text(salt + "\n")
    assert Run(["redact", str(SAMPLE), "-o", str(again), "--salt-file", str(tmp_path / "salt")]).code == ExitCode.OK
    assert again.read_bytes() == (tmp_path / "out.pcap").read_bytes()


def test_no_salt_is_printed_for_an_input_that_cannot_be_read(tmp_path: Path) -> None:
    text = tmp_path / "text.pcap"
    text.write_text("not a capture\n")
    packed = tmp_path / "text.pcap.gz"  # good gzip data, of a file that is not a capture
    packed.write_bytes(gzip.compress(b"not a capture\n" * 10))
    garbage = tmp_path / "garbage.pcap.bz2"
    garbage.write_bytes(bz2.compress(bytes(range(256)) * 4))
    for given in ([str(tmp_path / "nothing.pcap")], [str(text)], [str(SAMPLE), str(tmp_path / "nothing.pcap.gz")],
                  [str(packed)], [str(SAMPLE), str(garbage)]):
        out = tmp_path / "out"
        run = Run(["redact", *given, "-o", str(out)])
        assert run.code == ExitCode.INPUT, given
        assert run.err.getvalue().count("\n") == 1, run.err.getvalue()
        assert run.err.getvalue().startswith("dcpctl: error:")
        assert not out.exists()


def test_the_copy_never_replaces_its_input(tmp_path: Path) -> None:
    source = tmp_path / "capture.pcap"
    shutil.copy(SAMPLE, source)
    (tmp_path / "link.pcap").symlink_to(source)
    os.link(source, tmp_path / "hard.pcap")
    (tmp_path / "salt").write_text(SALT)
    for output in (source, tmp_path / "link.pcap", tmp_path / "hard.pcap", tmp_path / "." / "capture.pcap"):
        run = Run(["redact", str(source), "-o", str(output), "--salt-file", str(tmp_path / "salt")])
        assert run.code == ExitCode.USAGE, output
        assert run.err.getvalue().count("\n") == 1
        assert "is the input" in run.err.getvalue()
    assert source.read_bytes() == SAMPLE.read_bytes()
    (tmp_path / "copies").mkdir()
    os.link(source, tmp_path / "copies" / "capture.pcap")  # several files: a copy's name in -o is an input
    shutil.copy(SAMPLE, tmp_path / "other.pcap")
    run = Run(["redact", str(source), str(tmp_path / "other.pcap"), "-o", str(tmp_path / "copies"), "--salt-file",
               str(tmp_path / "salt")])
    assert run.code == ExitCode.USAGE
    assert source.read_bytes() == SAMPLE.read_bytes()


def test_the_summary_counts_what_changed(tmp_path: Path) -> None:
    source = tmp_path / "sasl.pcap"
    source.write_bytes(write_capture(session_packets() + _sasl_packets()))
    run = _redact(source, tmp_path / "out.pcap")
    err = run.err.getvalue()
    assert run.code == ExitCode.OK
    assert "keys 3, values 2, xattr values 1, SASL values 2, user agents 1" in err
    assert "dropped" not in err


def _frames(data: bytes) -> tuple[bytes, list[bytes]]:
    """A classic pcap file's global header and its records (each with its record header)."""
    header, records, at = data[:24], [], 24
    while at < len(data):
        length = struct.unpack_from("<I", data, at + 8)[0]
        records.append(data[at:at + 16 + length])
        at += 16 + length
    return header, records


def _cut(directory: Path) -> tuple[Path, Path]:
    """The sample session in 20-byte segments, and the same capture without its first frames: the
    handshake, and each direction's first messages up to the middle of the first mutation's key."""
    packets = session_packets()
    whole = directory / "whole.pcap"
    whole.write_bytes(write_capture(packets, segment_size=20))
    header, records = _frames(whole.read_bytes())
    server_bytes = 0
    for from_client, data in packets:
        if not from_client and data[1] == Opcode.DCP_MUTATION:
            break
        server_bytes += 0 if from_client else len(data)
    cut_at = server_bytes + 24 + 31 + 3  # header, extras, 3 bytes of the key (a payload's first 20 bytes)
    seen, index = 0, 0
    while seen <= cut_at:  # up to the first server frame holding the key's cut
        record = records[index]
        if struct.unpack_from(">H", record, 16 + 14 + 20)[0] == 11210 and len(record) > 16 + 54:
            seen += len(record) - 16 - 54
        index += 1
    index -= 1
    cut = directory / "cut.pcap"
    cut.write_bytes(header + b"".join(records[index:]))
    return whole, cut


def test_a_connection_cut_mid_message_is_resynchronised_and_redacted(tmp_path: Path) -> None:
    whole, cut = _cut(tmp_path)
    kept = _decoded(cut)
    assert "DCP_MUTATION" in [r["opcode"] for r in kept]  # decode resynchronises after the cut mutation
    run = _redact(cut, tmp_path / "out.pcap")
    err = run.err.getvalue()
    assert run.code == ExitCode.OK, err
    assert "dropped" not in err
    assert " bytes of 1 connections overwritten: not parsed" in err
    assert int(err.split(" bytes of 1 connections")[0].rsplit(" ", 1)[1]) > 0
    records = _decoded(tmp_path / "out.pcap")
    assert [(r["opcode"], r.get("by_seqno")) for r in records] == [(r["opcode"], r.get("by_seqno")) for r in kept]
    secrets = set()
    for msg in _messages(whole):
        for field in ("key", "value"):
            text = record_of(msg).get(field)
            kind = msg.variant.key if field == "key" else msg.variant.value if msg.variant else None
            if isinstance(text, str) and kind in DATA_KEYS | DATA_VALUES and len(text) >= MIN_SECRET_LENGTH:
                secrets |= {text.encode(), text.encode()[-MIN_SECRET_LENGTH:]}  # whole, or the tail a cut leaves
    assert b"airline_10" in secrets
    output, streams = (tmp_path / "out.pcap").read_bytes(), _streams(tmp_path / "out.pcap")
    for secret in secrets:
        assert secret not in output, secret
        assert not any(secret in stream for stream in streams), secret
    assert any(secret in stream for stream in _streams(cut) for secret in secrets)  # the cut input had them


def test_tls_and_other_traffic_are_dropped_unless_kept(tmp_path: Path) -> None:
    out = io.BytesIO()
    writer = PcapWriter(out)
    tls = TcpConversation(writer, client=("10.0.0.1", 40000))
    tls.handshake()
    tls.send(True, bytes.fromhex("160301003c01000038") + b"secret client hello".ljust(56, b"\x00"))
    web = TcpConversation(writer, client=("10.0.0.1", 40001), server=("10.0.0.2", 8091))
    web.handshake()
    web.send(True, b"GET /pools/default HTTP/1.1\r\nAuthorization: Basic c2VjcmV0\r\n\r\n")
    source = tmp_path / "mixed.pcap"
    source.write_bytes(out.getvalue())
    run = _redact(source, tmp_path / "out.pcap")
    err = run.err.getvalue()
    assert run.code == ExitCode.OK
    assert "frames dropped: 4 (TCP on a port not decoded)" in err
    assert "(TLS (encrypted: cannot be redacted))" in err
    assert b"Authorization" not in (tmp_path / "out.pcap").read_bytes()
    assert b"secret client hello" not in (tmp_path / "out.pcap").read_bytes()
    kept = _redact(source, tmp_path / "kept.pcap", "--keep-unparsed")
    assert kept.code == ExitCode.OK
    assert b"Authorization" in (tmp_path / "kept.pcap").read_bytes()


def test_a_retransmission_carries_the_redacted_copy(tmp_path: Path) -> None:
    out = io.BytesIO()
    writer = PcapWriter(out)
    conversation = TcpConversation(writer)
    conversation.handshake()
    packets = session_packets()
    for from_client, data in packets:
        at = conversation.position(from_client)
        conversation.send(from_client, data)
        conversation.segment(from_client, data, offset=at)  # the same bytes again
    source = tmp_path / "retransmitted.pcap"
    source.write_bytes(out.getvalue())
    target = tmp_path / "out.pcap"
    assert _redact(source, target).code == ExitCode.OK
    assert b"airline_10" not in target.read_bytes()
    assert b"40-Mile Air" not in target.read_bytes()
    assert len(_decoded(target)) == len(_decoded(source))


def test_bad_input_is_one_line_and_exit_3(tmp_path: Path) -> None:
    (tmp_path / "salt").write_bytes(bytes(5000))
    big = Run(["redact", str(SAMPLE), "-o", str(tmp_path / "out.pcap"), "--salt-file", str(tmp_path / "salt")])
    assert big.code == ExitCode.USAGE  # a capture given by mistake is no salt
    (tmp_path / "salt").write_text(SALT)
    missing = Run(["redact", str(tmp_path / "nothing.pcap"), "-o", str(tmp_path / "out.pcap"),
                   "--salt-file", str(tmp_path / "salt")])
    assert missing.code == ExitCode.INPUT
    assert missing.err.getvalue().count("\n") == 1
    assert missing.err.getvalue().startswith("dcpctl: error:")
    assert not (tmp_path / "out.pcap").exists()
    assert list(tmp_path.iterdir()) == [tmp_path / "salt"]  # no temporary file left
    text = tmp_path / "text.pcap"
    text.write_text("not a capture\n")
    assert Run(["redact", str(text), "-o", str(tmp_path / "out.pcap"), "--salt-file",
                str(tmp_path / "salt")]).code == ExitCode.INPUT
    unwritable = Run(["redact", str(SAMPLE), "-o", str(tmp_path / "no" / "out.pcap"), "--salt-file",
                      str(tmp_path / "salt")])
    assert unwritable.code == ExitCode.INPUT
    assert unwritable.err.getvalue().startswith("dcpctl: error:")


def test_a_full_disk_is_an_error_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "salt").write_text(SALT)
    run = Run(["redact", str(SAMPLE), "-o", "/dev/full", "--salt-file", str(tmp_path / "salt")])
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)  # written to, never replaced by a file
    assert run.code == ExitCode.INPUT
    assert run.err.getvalue().startswith("dcpctl: error:")


def _two_clients(directory: Path) -> Path:
    out = io.BytesIO()
    writer = PcapWriter(out)
    for client in ("10.1.2.3", "10.1.2.4", "192.168.7.9"):
        conversation = TcpConversation(writer, client=(client, 50123), server=("10.1.2.200", 11210))
        conversation.handshake()
        for from_client, data in session_packets():
            conversation.send(from_client, data)
        conversation.close()
    path = directory / "clients.pcap"
    path.write_bytes(out.getvalue())
    return path


def _hosts(path: Path) -> list[tuple[str, str]]:
    hosts = [(item.src[0], item.dst[0]) for item in read_segments(str(path))
             if isinstance(item, TcpSegment) and item.dst[1] == 11210]
    return list(dict.fromkeys(hosts))


def test_map_addresses_is_consistent_and_prefix_preserving(tmp_path: Path) -> None:
    import ipaddress  # noqa: PLC0415

    source = _two_clients(tmp_path)
    target = tmp_path / "out.pcap"
    run = _redact(source, target, "--map-addresses")
    assert run.code == ExitCode.OK
    assert "addresses 4" in run.err.getvalue()
    before, after = _hosts(source), _hosts(target)
    assert len(after) == 3
    assert not {a for pair in after for a in pair} & {a for pair in before for a in pair}
    old = [int(ipaddress.ip_address(a)) for pair in before for a in pair]
    new = [int(ipaddress.ip_address(a)) for pair in after for a in pair]
    for i, (a, x) in enumerate(zip(old, new, strict=True)):  # the common prefix of every pair is kept exactly
        for b, y in zip(old[i + 1:], new[i + 1:], strict=True):
            assert 32 - (a ^ b).bit_length() == 32 - (x ^ y).bit_length()
    assert [r["opcode"] for r in _decoded(target)] == [r["opcode"] for r in _decoded(source)]
    again = tmp_path / "again.pcap"
    assert _redact(source, again, "--map-addresses").code == ExitCode.OK
    assert _hosts(again) == after
    (expert_in, malformed_in), (expert_out, malformed_out) = _expert(source), _expert(target)
    assert malformed_out.count("\n") <= malformed_in.count("\n")  # IP and TCP checksums are right
    assert _warnings(expert_out) <= _warnings(expert_in)


def test_map_addresses_maps_addresses_written_in_messages_and_rewrites_the_stream(tmp_path: Path) -> None:
    """The node list of a cluster map and a replication's connection name hold addresses as text: mapped as
    the frames' headers are, their messages' lengths and the TCP stream after them rewritten to match."""
    import ipaddress  # noqa: PLC0415

    config = json.dumps({"rev": 3, "name": "orders", "nodesExt": [{"hostname": "10.1.2.200"},
                                                                   {"hostname": "10.1.2.201"}],
                         "vBucketServerMap": {"serverList": ["10.1.2.200:11210", "10.1.2.201:11210"]}}).encode()
    packets = [*_hello_collections(),
               (True, build.request(Opcode.GET_CLUSTER_CONFIG)),
               (False, build.response(Opcode.GET_CLUSTER_CONFIG, value=config, datatype=DATATYPE_JSON)),
               (True, build.request(Opcode.DCP_OPEN, key=b"replication:ns_1@10.1.2.201->ns_1@10.1.2.200:orders",
                                    seqno=0, flags=1)),
               *session_packets()[2:]]
    source, target = tmp_path / "nodes.pcap", tmp_path / "nodes.mapped.pcap"
    source.write_bytes(write_capture(packets, segment_size=100, client=("10.1.2.201", 50123),
                                     server=("10.1.2.200", 11210)))
    run = _redact(source, target, "--map-addresses")
    assert run.code == ExitCode.OK, run.err.getvalue()
    assert "addresses 2" in run.err.getvalue()  # the two nodes, in headers and in text alike
    for stream in _streams(target):
        assert b"10.1.2." not in stream
    before, after = _decoded(source), _decoded(target)
    assert [r["opcode"] for r in after] == [r["opcode"] for r in before]
    assert [[d["name"] for d in r["diagnostics"]] for r in after] == \
        [[d["name"] for d in r["diagnostics"]] for r in before]
    client, server = (a.rsplit(":", 1)[0] for a in after[0]["connection"].split(" > "))
    assert ipaddress.ip_address(client) != ipaddress.ip_address("10.1.2.201")
    got = json.loads(next(r["value"] for r in after if r["opcode"] == "GET_CLUSTER_CONFIG" and r.get("value")))
    assert got["nodesExt"][0] == {"hostname": server}
    assert got["vBucketServerMap"]["serverList"][0] == f"{server}:11210"
    opened = next(r["key"] for r in after if r["opcode"] == "DCP_OPEN" and r["magic"] == "ClientRequest")
    assert opened == f"replication:ns_1@{client}->ns_1@{server}:orders"
    # everything after the resized messages reads as before: the stream was rewritten, not cut
    items = [(r["opcode"], r.get("by_seqno")) for r in before if r["opcode"].startswith("DCP_")]
    assert [(r["opcode"], r.get("by_seqno")) for r in after if r["opcode"].startswith("DCP_")] == items
    (expert_in, malformed_in), (expert_out, malformed_out) = _expert(source), _expert(target)
    assert malformed_out.count("\n") <= malformed_in.count("\n")
    assert _warnings(expert_out) <= _warnings(expert_in)


# What tshark reads of a frame's link, network and transport addresses: eth.src/dst and sll.src.eth are
# MAC addresses, ip and ipv6 the IP ones, tcp the ports.
_ADDRESS_FIELDS = ("eth.src", "eth.dst", "sll.src.eth", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst",
                   "tcp.srcport", "tcp.dstport")


def _addresses_read(path: Path) -> dict[str, set[str]]:
    """Every value tshark reads in each of ``_ADDRESS_FIELDS`` over the whole capture."""
    done = subprocess.run([peer("tshark"), "-r", str(path), "-T", "fields", "-E", "occurrence=a",
                           *(arg for field in _ADDRESS_FIELDS for arg in ("-e", field))],
                          capture_output=True, text=True, check=True, timeout=60)
    found: dict[str, set[str]] = {field: set() for field in _ADDRESS_FIELDS}
    for line in done.stdout.splitlines():
        for field, value in zip(_ADDRESS_FIELDS, line.split("\t"), strict=False):
            found[field].update(v for v in value.split(",") if v)
    return found


@pytest.fixture(scope="module")
def mapped(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, Path, Path, Run]]:
    return _redact_all(tmp_path_factory.mktemp("mapped"), "mapped", "--map-addresses")


@pytest.mark.peer
def test_map_addresses_leaves_no_address_of_the_input(mapped: list[tuple[str, Path, Path, Run]]) -> None:
    """Read by tshark, the independent reader: no MAC address of a host, no IP address and no client port
    of the input is left in the output, each maps one to one (as many distinct values as before), the
    servers' port stays, and the output reads as cleanly as the input."""
    macs = {field for field in _ADDRESS_FIELDS if field.startswith(("eth", "sll"))}
    with_macs = 0
    for name, source, target, run in mapped:
        assert run.code == ExitCode.OK, (name, run.err.getvalue())
        before, after = _addresses_read(source), _addresses_read(target)
        assert before["ip.src"] | before["ipv6.src"], name
        with_macs += any(before[field] for field in macs)
        for field in _ADDRESS_FIELDS:
            assert len(after[field]) == len(before[field]), (name, field)
            kept = {value for value in before[field] & after[field]
                    if (field.startswith("tcp") and int(value) < 32768)
                    or (field in macs and (int(value[:2], 16) & 1 or value == "00:00:00:00:00:00"))}
            assert before[field] & after[field] == kept, (name, field)
        assert "11210" in after["tcp.dstport"] | after["tcp.srcport"], name
        _reads_as_cleanly(name, source, target)
    assert with_macs >= 5  # Ethernet (with a VLAN, as pcapng) and Linux cooked captures


def test_damaged_headers_and_times_are_written_back_not_fatal(tmp_path: Path) -> None:
    """Found by fuzzing: a record whose time libpcap reads as before 1970 (its seconds field past 2^31), an
    IPv4 header whose total length is below its own length, an IPv6 one whose extension headers outrun its
    payload. Redacted, kept with --keep-unparsed and --map-addresses: exit 0, the time's bits as they were,
    the damaged frames' addresses mapped all the same."""
    out = io.BytesIO()
    writer = PcapWriter(out)
    conversation = TcpConversation(writer, client=("10.1.2.3", 50123), server=("10.1.2.200", 11210))
    conversation.handshake()
    for from_client, data in session_packets():
        conversation.send(from_client, data)
    ethernet = bytes.fromhex("020000000002" "020000000001")
    short_total = bytearray(bytes.fromhex("4500000a00004000400600000a0102030a0102c8") + bytes(20))
    v6_header = bytes.fromhex("6000000000080040") + bytes.fromhex("20010db8" + "00" * 11 + "01") + \
        bytes.fromhex("20010db8" + "00" * 11 + "02")
    outrun = v6_header + bytes([6, 4]) + bytes(38)  # a hop-by-hop header of 40 bytes in a payload of 8
    writer.write(1_700_000_100.0, ethernet + b"\x08\x00" + bytes(short_total))
    writer.write(1_700_000_101.0, ethernet + b"\x86\xdd" + outrun)
    writer.write(3_595_825_408.00013, ethernet + b"\x08\x00" + bytes(short_total))  # 0xD6540000 seconds
    source, target = tmp_path / "damaged.pcap", tmp_path / "damaged.out.pcap"
    source.write_bytes(out.getvalue())
    for extra in ([], ["--keep-unparsed", "--map-addresses"], ["--values", "drop", "--keep-unparsed"]):
        run = _redact(source, target, *extra)
        assert run.code == ExitCode.OK, (extra, run.err.getvalue())
        assert "Traceback" not in run.err.getvalue()
    written = target.read_bytes()
    assert struct.pack("<I", 3_595_825_408) in written[-(16 + len(ethernet) + 2 + len(short_total)):]
    mapped = tmp_path / "mapped.pcap"
    assert _redact(source, mapped, "--keep-unparsed", "--map-addresses").code == ExitCode.OK
    assert bytes.fromhex("0a010203") not in mapped.read_bytes()
    assert bytes.fromhex("20010db8" + "00" * 11 + "01") not in mapped.read_bytes()


def test_map_addresses_maps_clients_ports_and_keeps_the_servers(tmp_path: Path) -> None:
    """A client's ephemeral port maps one to one (the same port of two hosts to one port, so connections are
    still told apart by their addresses); a port below 32768 and the server's stay, so the output decodes on
    11210 and Wireshark still knows the protocol; the checksums stay right."""
    out = io.BytesIO()
    writer = PcapWriter(out)
    clients = [("10.1.2.3", 50123), ("10.1.2.4", 50123), ("10.1.2.4", 50124), ("192.168.7.9", 4000)]
    for client in clients:
        conversation = TcpConversation(writer, client=client, server=("10.1.2.200", 11210))
        conversation.handshake()
        for from_client, data in session_packets():
            conversation.send(from_client, data)
        conversation.close()
    source, target = tmp_path / "ports.pcap", tmp_path / "ports.mapped.pcap"
    source.write_bytes(out.getvalue())
    run = _redact(source, target, "--map-addresses")
    assert run.code == ExitCode.OK, run.err.getvalue()
    assert "client ports mapped (--map-addresses): 2" in run.err.getvalue()
    ends = list(dict.fromkeys((item.src, item.dst) for item in read_segments(str(target))
                              if isinstance(item, TcpSegment) and item.dst[1] == 11210))
    assert len(ends) == 4
    first, second, third, kept = (port for (_, port), _ in ends)
    assert first == second != third
    assert {first, third}.isdisjoint({50123, 50124})
    assert min(first, third) >= 32768
    assert kept == 4000
    assert [r["opcode"] for r in _decoded(target)] == [r["opcode"] for r in _decoded(source)]
    (expert_in, malformed_in), (expert_out, malformed_out) = _expert(source), _expert(target)
    assert malformed_out.count("\n") <= malformed_in.count("\n")  # the TCP checksums cover the new ports
    assert _warnings(expert_out) <= _warnings(expert_in)
    # without --map-addresses every port stays
    plain = tmp_path / "ports.plain.pcap"
    assert _redact(source, plain).code == ExitCode.OK
    assert {item.src[1] for item in read_segments(str(plain)) if isinstance(item, TcpSegment)} == \
        {port for _, port in clients} | {11210}


def test_ipv6_addresses_are_mapped_with_correct_checksums(tmp_path: Path) -> None:
    source = tmp_path / "v6.pcap"
    source.write_bytes(write_capture(session_packets(), linktype=LINKTYPE_RAW, client=("2001:db8::1", 50123),
                                     server=("2001:db8::2", 11210)))
    target = tmp_path / "out.pcap"
    assert _redact(source, target, "--map-addresses").code == ExitCode.OK
    (new_client, new_server), = _hosts(target)
    assert new_client != "2001:db8::1"
    assert new_client.split(":")[:4] == new_server.split(":")[:4]  # the shared /64 stays shared
    _, malformed = _expert(target)
    assert malformed == ""


def test_hash_names_hashes_bucket_and_collection_names(tmp_path: Path) -> None:
    source = tmp_path / "names.pcap"
    source.write_bytes(write_capture([*_sasl_packets(), (True, build.request(Opcode.COLLECTIONS_GET_ID,
                                                                             key=b"inventory.airline"))]))
    kept, hashed = tmp_path / "kept.pcap", tmp_path / "hashed.pcap"
    assert _redact(source, kept).code == ExitCode.OK
    run = _redact(source, hashed, "--hash-names")
    assert run.code == ExitCode.OK
    assert b"travel-sample" in kept.read_bytes()
    assert b"travel-sample" not in hashed.read_bytes()
    assert b"inventory" not in hashed.read_bytes()
    assert "names 2" in run.err.getvalue()
    keys = [r.get("key") for r in _decoded(hashed)]
    assert any(isinstance(k, str) and k.count(".") == 1 and len(k) == len("inventory.airline") for k in keys)


def _big_document(directory: Path, cut: int | None = None) -> tuple[Path, bytes]:
    document = b'{"blob":"' + b"confidential " * 80_000 + b'"}'
    packet = build.request(Opcode.DCP_MUTATION, key=b"big_secret_document", value=document,
                           datatype=DATATYPE_JSON, by_seqno=1, rev_seqno=1, flags=0, expiration=0, lock_time=0,
                           nmeta=0, nru=0)
    packets = [(False, packet if cut is None else packet[:cut])]
    path = directory / "big.pcap"
    path.write_bytes(write_capture(packets, segment_size=1448))
    return path, document


def test_frames_held_past_the_limit_go_out_zeroed(tmp_path: Path) -> None:
    source, _ = _big_document(tmp_path)
    target = tmp_path / "out.pcap"
    run = _redact(source, target, "--max-held-bytes", "100000")
    assert run.code == ExitCode.OK, run.err.getvalue()
    assert "frames written before their messages ended (--max-held-bytes)" in run.err.getvalue()
    data = target.read_bytes()
    assert b"confidential" not in data
    assert b"big_secret_document" not in data
    # every frame is there with its length: the message's bytes written before it ended are zeros
    assert [len(stream) for stream in _streams(target)] == [len(stream) for stream in _streams(source)]


def test_a_message_the_capture_ends_inside_is_zeroed(tmp_path: Path) -> None:
    source, _ = _big_document(tmp_path, cut=50_000)
    target = tmp_path / "out.pcap"
    run = _redact(source, target)
    assert run.code == ExitCode.OK, run.err.getvalue()
    assert "messages cut short by the capture, their keys and values zeroed: 1" in run.err.getvalue()
    assert b"confidential" not in target.read_bytes()
    assert b"big_secret_document" not in target.read_bytes()


def test_a_big_document_is_redacted_in_bounded_memory(tmp_path: Path) -> None:
    source, _ = _big_document(tmp_path)
    target = tmp_path / "out.pcap"
    (tmp_path / "salt").write_text(SALT)
    code, err, peak_mb = run_with_peak([sys.executable, "-m", "dcpctl", "redact", str(source), "-o", str(target),
                                        "--salt-file", str(tmp_path / "salt")],
                                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert code == ExitCode.OK, err
    assert peak_mb < 200, peak_mb  # the interpreter and its imports, a few copies of a 1 MB message
    assert b"confidential" not in target.read_bytes()


def _gapped(directory: Path, cut_by_the_gap: bool) -> Path:
    """A server stream the capture missed 1 GiB of (a sequence number moved as far, by the capture's losses or
    by damage): documents before and after the gap, and maybe one the gap cuts."""
    def mutation(key: bytes, seqno: int) -> bytes:
        return build.request(Opcode.DCP_MUTATION, key=key, value=b'{"card":"4111111111111111"}',
                             datatype=DATATYPE_JSON, by_seqno=seqno, rev_seqno=1, flags=0, expiration=0,
                             lock_time=0, nmeta=0, nru=0)

    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out, LINKTYPE_ETHERNET, 262144))
    conversation.handshake()
    for from_client, data in session_packets()[:6]:
        conversation.send(from_client, data)
    conversation.send(False, mutation(b"secret_before_the_gap", 1) + mutation(b"secret_cut_by_the_gap", 2)[
        :40 if cut_by_the_gap else 0])
    conversation.skip(False, 1 << 30)
    conversation.send(False, mutation(b"secret_after_the_gap_1", 3) + mutation(b"secret_after_the_gap_2", 4), 30)
    conversation.close()
    path = directory / f"gapped-{cut_by_the_gap}.pcap"
    path.write_bytes(out.getvalue())
    return path


@pytest.mark.parametrize("cut_by_the_gap", [False, True])
@pytest.mark.parametrize("options", [["--jobs", "1"], ["--jobs", "2"], ["--values", "drop"]])
def test_a_gap_of_a_gigabyte_is_redacted_in_bounded_memory(tmp_path: Path, cut_by_the_gap: bool,
                                                           options: list[str]) -> None:
    """The store of final bytes never holds a gap's zeros: it took the gap's size in memory (2 GiB for a
    sequence number moved by 2**31 in a 3 kB capture)."""
    source, target = _gapped(tmp_path, cut_by_the_gap), tmp_path / "out.pcap"
    (tmp_path / "salt").write_text(SALT)
    code, err, peak_mb = run_with_peak([sys.executable, "-m", "dcpctl", "redact", str(source), "-o", str(target),
                                        "--salt-file", str(tmp_path / "salt"), *options],
                                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert code == ExitCode.OK, err
    assert peak_mb < 200, peak_mb
    data = target.read_bytes()
    assert b"secret" not in data
    assert b"4111" not in data
    before, after = _decoded(source), _decoded(target)
    # the message the gap cut is decoded as far as it goes; in the copy its key and value are zeroed, its
    # extras (the seqnos) kept
    seqnos = [1, 2, 3, 4] if cut_by_the_gap else [1, 3, 4]
    assert [r.get("by_seqno") for r in before if r["opcode"] == "DCP_MUTATION"] == seqnos
    assert [r.get("by_seqno") for r in after if r["opcode"] == "DCP_MUTATION"] == seqnos
    assert [r["opcode"] for r in after] == [r["opcode"] for r in before]


def test_plain_items_are_redacted_as_messages_are(redacted: list[tuple[str, Path, Path, Run]]) -> None:
    """The fast path (an item read in place by its compiled reader) gives the interpreted path's bytes."""
    from dcpctl.protocol.reader import plain_reader  # noqa: PLC0415
    from dcpctl.redact.core import Redactor  # noqa: PLC0415

    plain = 0
    for _, source, _, _ in redacted:
        for msg in _messages(source):
            raw = msg.raw
            reader = plain_reader(msg.options.dialect, msg.options.collections, raw[1], raw[4])
            item = reader(raw, 0, len(raw), 0, msg.options) if reader is not None else None
            if item is None:
                continue
            plain += 1
            fast, slow = Redactor(SALT.encode()), Redactor(SALT.encode())
            assert fast.plain_item(item) == slow.message(msg)
            assert fast.counts == slow.counts
    assert plain > 10


# What --values drop may change in a record besides the redacted fields: the lengths the value was part of,
# what was read from the value (its size, its xattrs, its snappy form), the offsets after it, and the frame
# numbers (a segment whose bytes were all removed is left out).
DROPPED_VALUE_FIELDS = frozenset({"total_body_length", "value_length", "xattrs", "snappy", "value_bytes",
                                         "compressed_length", "offset", "request_offset", "frames"})
# tshark's TCP analysis findings that a stream made inconsistent by the rewriting would add.
TCP_INCONSISTENCIES = ("previous segment not captured", "ACKed segment that wasn't captured",
                       "ACKed unseen segment", "Out-Of-Order", "Retransmission", "Dup ACK")


@pytest.fixture(scope="module")
def dropped(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, Path, Path, Run]]:
    return _redact_all(tmp_path_factory.mktemp("drop"), "dropped", "--values", "drop")


def test_values_drop_empties_every_document_value(dropped: list[tuple[str, Path, Path, Run]]) -> None:
    emptied = 0
    for name, source, target, run in dropped:
        assert run.code == ExitCode.OK, (name, run.err.getvalue())
        before, after = _decoded(source), _decoded(target)
        assert len(before) == len(after), name
        for old, new in zip(before, after, strict=True):
            # none the input lacked; one about the value dropped (a bad snappy value) goes with it
            added = Counter(d["name"] for d in new["diagnostics"]) - Counter(d["name"] for d in old["diagnostics"])
            assert not added, (name, old, new)
            changed = [path for path in _differences(old, new, ()) if path[0] not in {"diagnostics", *_undeclared(old)}]
            assert all(_redactable(path) or path[0] in DROPPED_VALUE_FIELDS for path in changed), \
                (name, old.get("opcode"), changed)
            cut = any(d["name"] == "truncated" for d in old["diagnostics"])  # type: ignore[attr-defined]
            # a message the capture ends inside keeps its lengths (its value zeroed): they are not all there
            if old.get("opcode") in ("DCP_MUTATION", "DCP_PREPARE") and old.get("value") is not None and not cut:
                assert not new.get("value"), (name, new)
                assert new["total_body_length"] < old["total_body_length"] or not old.get("value"), name  # type: ignore[operator]
                emptied += 1
    assert emptied


def _tcp_analysis(path: Path) -> list[str]:
    """tshark's expert messages of the TCP analysis, frame by frame (its sequence numbers checked)."""
    done = subprocess.run([peer("tshark"), "-r", str(path), "-o", "tcp.check_checksum:TRUE", "-T", "fields",
                           "-e", "_ws.expert.message"], capture_output=True, text=True, check=True, timeout=60)
    return [line for line in done.stdout.splitlines() if any(word in line for word in TCP_INCONSISTENCIES)]


@pytest.mark.peer
def test_values_drop_keeps_the_tcp_stream_consistent(dropped: list[tuple[str, Path, Path, Run]]) -> None:
    for name, source, target, _ in dropped:
        _reads_as_cleanly(name, source, target)
        assert len(_tcp_analysis(target)) <= len(_tcp_analysis(source)), (name, _tcp_analysis(target))


def _shape(value: object) -> object:
    """A JSON value's structure: its names, list lengths and the types and lengths of its leaves."""
    if isinstance(value, dict):
        return {name: _shape(item) for name, item in value.items()}
    if isinstance(value, list):
        return [_shape(item) for item in value]
    return (type(value).__name__, len(str(value)))


@pytest.mark.peer
def test_a_snappy_value_is_redacted_inside_with_its_structure_kept(tmp_path: Path) -> None:
    # a document whose redacted form compresses worse than it (its repeated strings become different ones),
    # cut into small segments, with messages after it whose sequence numbers then move
    packets = _hello_collections() + _snappy_packets() + _sasl_packets()
    source = tmp_path / "snappy.pcap"
    source.write_bytes(write_capture(packets, segment_size=40))
    target = tmp_path / "snappy.redacted.pcap"
    run = _redact(source, target)
    assert run.code == ExitCode.OK, run.err.getvalue()
    before = [msg for msg in _messages(source) if msg.datatype & DATATYPE_SNAPPY]
    after = [msg for msg in _messages(target) if msg.datatype & DATATYPE_SNAPPY]
    assert len(before) == len(after) == 1
    assert [d.name for d in after[0].diagnostics] == [d.name for d in before[0].diagnostics]
    old, new = snappy_decompress(before[0].value), snappy_decompress(after[0].value)
    assert isinstance(old, bytes)
    assert isinstance(new, bytes)
    assert _shape(json.loads(new)) == _shape(json.loads(old))
    assert b"Snappy Secret" not in new
    assert b"aircraft" not in new
    assert len(after[0].value) != len(before[0].value)  # compressed again at its new length
    assert [msg.opcode for msg in _messages(target)] == [msg.opcode for msg in _messages(source)]
    assert _warnings(_expert(target)[0]) <= _warnings(_expert(source)[0])
    assert len(_tcp_analysis(target)) <= len(_tcp_analysis(source)), _tcp_analysis(target)


def _retransmitted(directory: Path) -> Path:
    out = io.BytesIO()
    writer = PcapWriter(out)
    conversation = TcpConversation(writer)
    conversation.handshake()
    for from_client, data in session_packets():
        at = conversation.position(from_client)
        conversation.send(from_client, data, segment_size=30)
        conversation.segment(from_client, data[:45], offset=at)  # some of the same bytes again
    source = directory / "retransmitted.pcap"
    source.write_bytes(out.getvalue())
    return source


@pytest.mark.peer
@pytest.mark.parametrize("case", ["retransmitted", "cut"])
def test_values_drop_keeps_retransmissions_and_cut_streams_consistent(tmp_path: Path, case: str) -> None:
    source = _retransmitted(tmp_path) if case == "retransmitted" else _cut(tmp_path)[1]
    target = tmp_path / "out.pcap"
    run = _redact(source, target, "--values", "drop")
    assert run.code == ExitCode.OK, run.err.getvalue()
    before, after = _decoded(source), _decoded(target)
    assert [(r["opcode"], r.get("by_seqno")) for r in after] == [(r["opcode"], r.get("by_seqno")) for r in before]
    assert not any(r.get("value") for r in after if r["opcode"] == "DCP_MUTATION")
    analysis_in, analysis_out = _tcp_analysis(source), _tcp_analysis(target)
    assert len(analysis_out) <= len(analysis_in), (analysis_in, analysis_out)
    assert _warnings(_expert(target)[0]) <= _warnings(_expert(source)[0])


def _sacked(directory: Path) -> tuple[Path, int]:
    """A capture whose client acknowledges selectively: the server sends mutations A and B then a deletion C,
    the client acknowledges A and SACKs C (B was lost past the capture point), B is sent again, then all is
    acknowledged. With ``--values drop`` A and B shrink, so C and the SACK block naming it move back.
    Returns the capture and the bytes A and B carry as values."""
    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out))
    conversation.handshake()
    packets = session_packets()
    first = next(i for i, (_, data) in enumerate(packets) if data[1] == Opcode.DCP_MUTATION)
    for from_client, data in packets[:first]:
        conversation.send(from_client, data)
    (_, a), (_, b), (_, c) = packets[first:first + 3]
    assert b[1] == Opcode.DCP_MUTATION
    assert c[1] == Opcode.DCP_DELETION
    start = conversation.position(False)
    for data in (a, b, c):
        conversation.segment(False, data)
    c_at = start + len(a) + len(b)
    conversation.segment(True, b"", flags=ACK, ack=start + len(a),
                         options=conversation.sack_option(True, [(c_at, c_at + len(c))]))
    conversation.segment(False, b, offset=start + len(a))
    conversation.segment(True, b"", flags=ACK)
    for from_client, data in packets[first + 3:]:
        conversation.send(from_client, data)
    conversation.close()
    source = directory / "sacked.pcap"
    source.write_bytes(out.getvalue())
    return source, sum(len(decode(data, 0, DecodeOptions(collections=True)).value) for data in (a, b))


def _sack_view(path: Path) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
    """tshark's reading (relative sequence numbers): the server's segments (seq, next seq, payload length)
    and every SACK block the client sent (left edge, right edge)."""
    done = subprocess.run([peer("tshark"), "-r", str(path), "-T", "fields", "-e", "tcp.srcport",
                           "-e", "tcp.seq", "-e", "tcp.nxtseq", "-e", "tcp.len", "-e", "tcp.options.sack_le",
                           "-e", "tcp.options.sack_re"], capture_output=True, text=True, check=True, timeout=60)
    segments, blocks = [], []
    for line in done.stdout.splitlines():
        port, seq, nxtseq, length, left, right = line.split("\t")
        if port == "11210" and int(length):
            segments.append((int(seq), int(nxtseq), int(length)))
        if left:
            blocks.extend(zip(map(int, left.split(",")), map(int, right.split(",")), strict=True))
    return segments, blocks


@pytest.mark.peer
def test_values_drop_moves_sack_edges_with_the_bytes_they_name(tmp_path: Path) -> None:
    source, dropped = _sacked(tmp_path)
    target = tmp_path / "out.pcap"
    run = _redact(source, target, "--values", "drop")
    assert run.code == ExitCode.OK, run.err.getvalue()
    (segments_in, blocks_in), (segments_out, blocks_out) = _sack_view(source), _sack_view(target)
    assert len(blocks_in) == len(blocks_out) == 1
    # the block names segment C in the input and in the output, where C starts as many bytes earlier as the
    # values of A and B were long
    assert any((seq, nxtseq) == blocks_in[0] for seq, nxtseq, _ in segments_in)
    assert any((seq, nxtseq) == blocks_out[0] for seq, nxtseq, _ in segments_out), (segments_out, blocks_out)
    assert blocks_out[0] == (blocks_in[0][0] - dropped, blocks_in[0][1] - dropped)
    assert dropped > 0
    analysis_in, analysis_out = _tcp_analysis(source), _tcp_analysis(target)
    assert analysis_out == analysis_in  # the retransmission of B, and nothing the rewriting added
    assert _warnings(_expert(target)[0]) <= _warnings(_expert(source)[0])
    assert [r["opcode"] for r in _decoded(target)] == [r["opcode"] for r in _decoded(source)]


def test_no_keep_json_names_hashes_every_json_name_the_same_way(tmp_path: Path) -> None:
    kept, hashed = tmp_path / "kept.pcap", tmp_path / "hashed.pcap"
    assert _redact(SAMPLE, kept).code == ExitCode.OK
    run = _redact(SAMPLE, hashed, "--no-keep-json-names")
    assert run.code == ExitCode.OK, run.err.getvalue()
    # the sample's documents: name, iata, country; name, iata; rev inside the _sync xattr
    assert "JSON names hashed (--no-keep-json-names): 6" in run.err.getvalue()
    assert "JSON names" not in Run(["redact", str(SAMPLE), "-o", str(tmp_path / "again.pcap"), "--salt-file",
                                    str(tmp_path / "salt")]).err.getvalue()
    before = [json.loads(str(r["value"])) for r in _decoded(kept) if str(r.get("value")).startswith("{")]
    after = [json.loads(str(r["value"])) for r in _decoded(hashed) if str(r.get("value")).startswith("{")]
    assert [list(value) for value in before] == [["name", "iata", "country"], ["name", "iata"]]
    names = [list(value) for value in after]
    assert [len(n) for n in names[0]] == [4, 4, 7]
    assert names[1] == names[0][:2]  # one name, one placeholder, in every document
    assert not {"name", "iata", "country"} & {n for doc in names for n in doc}
    xattrs = [x for r in _decoded(hashed) for x in r.get("xattrs") or []]  # type: ignore[attr-defined]
    assert [x["key"] for x in xattrs] == ["_sync"]  # an xattr's own name is kept
    assert list(json.loads(xattrs[0]["value"])) != ["rev"]
    for record, other in zip(_decoded(kept), _decoded(hashed), strict=True):
        assert {k: v for k, v in record.items() if k not in REDACTED_FIELDS} == \
            {k: v for k, v in other.items() if k not in REDACTED_FIELDS}


@pytest.mark.peer
@pytest.mark.parametrize("form", ["pcap", "pcapng"])
def test_standard_input_is_redacted_as_the_file_is(form: str, tmp_path: Path) -> None:
    # a capture piped in (tcpdump -w - | dcpctl redact -) never lands on disk unredacted
    source = SAMPLE
    if form == "pcapng":
        source = tmp_path / "sample.pcapng"
        subprocess.run([peer("editcap"), "-F", "pcapng", str(SAMPLE), str(source)], check=True, capture_output=True)
    from_file, from_stdin = tmp_path / "file.pcap", tmp_path / "stdin.pcap"
    assert _redact(source, from_file).code == ExitCode.OK
    with source.open("rb") as stdin:
        done = subprocess.run([sys.executable, "-m", "dcpctl", "redact", "-", "-o", str(from_stdin), "--salt-file",
                               str(tmp_path / "salt")], stdin=stdin, capture_output=True, timeout=60, check=False)
    assert done.returncode == ExitCode.OK, done.stderr
    assert from_stdin.read_bytes() == from_file.read_bytes()
    assert b"redacted: 30 of 30 frames written" in done.stderr


def test_a_progress_bar_while_a_big_capture_is_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Standard error a terminal, a big file: a bar names the file while it is read, then goes; the summary
    stays, and the file written is the one written without the bar."""
    from dcpctl.render import progress  # noqa: PLC0415

    monkeypatch.setattr(progress, "PROGRESS_MIN_BYTES", 1)
    salt = tmp_path / "salt"
    salt.write_text(SALT)
    outputs = []
    for terminal in (True, False):
        target = tmp_path / f"out-{terminal}.pcap"
        err = io.StringIO()
        env = Environment(stdout=io.StringIO(), stderr=err, stdin=io.BytesIO(), stdout_isatty=terminal,
                          stderr_isatty=terminal, color=False)
        assert main(["redact", str(SAMPLE), "-o", str(target), "--salt-file", str(salt)], env) == ExitCode.OK
        assert ("dcp-session.pcap" in err.getvalue()) is terminal
        assert "redacted: 30 of 30 frames written" in err.getvalue()
        outputs.append(target.read_bytes())
    assert outputs[0] == outputs[1]
    monkeypatch.setattr(progress, "PROGRESS_MIN_BYTES", SAMPLE.stat().st_size + 1)  # a small file: no bar
    err = io.StringIO()
    env = Environment(stdout=io.StringIO(), stderr=err, stdin=io.BytesIO(), stdout_isatty=True, stderr_isatty=True,
                      color=False)
    assert main(["redact", str(SAMPLE), "-o", str(tmp_path / "small.pcap"), "--salt-file", str(salt)], env) == 0
    assert "dcp-session.pcap" not in err.getvalue()


def test_standard_output_takes_the_capture_unless_it_is_a_terminal(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # "-" is standard output, never a file of that name
    to_file = tmp_path / "file.pcap"
    assert _redact(SAMPLE, to_file).code == ExitCode.OK
    done = subprocess.run([sys.executable, "-m", "dcpctl", "redact", str(SAMPLE), "-o", "-", "--salt-file",
                           str(tmp_path / "salt")], capture_output=True, timeout=60, check=False)
    assert done.returncode == ExitCode.OK, done.stderr
    assert done.stdout == to_file.read_bytes()
    assert b"redacted: 30 of 30 frames written" in done.stderr
    out, err = io.StringIO(), io.StringIO()
    terminal = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=True, stderr_isatty=False,
                           color=False, width=160)
    assert main(["redact", str(SAMPLE), "-o", "-", "--salt-file", str(tmp_path / "salt")], terminal) == ExitCode.USAGE
    assert "standard output is a terminal" in err.getvalue()
    assert not (tmp_path / "-").exists()


@pytest.fixture(scope="module")
def hashed_names(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, Path, Path, Run]]:
    return _redact_all(tmp_path_factory.mktemp("names"), "names", "--no-keep-json-names")


def test_hashed_json_names_change_only_redacted_fields(hashed_names: list[tuple[str, Path, Path, Run]]) -> None:
    for name, _, _, run in hashed_names:
        assert run.code == ExitCode.OK, (name, run.err.getvalue())
    _agree_field_by_field(hashed_names, names=True)


@pytest.mark.peer
def test_tshark_reads_hashed_json_names_as_cleanly(hashed_names: list[tuple[str, Path, Path, Run]]) -> None:
    for name, source, target, _ in hashed_names:
        _reads_as_cleanly(name, source, target)


def test_no_json_name_of_a_document_left(hashed_names: list[tuple[str, Path, Path, Run]]) -> None:
    found = 0
    for name, source, target, _ in hashed_names:
        names = {n.encode() for document in _documents(source) for n in _json_names(document)
                 if len(n) >= MIN_SECRET_LENGTH}
        found += len(names)
        streams = _streams(target)
        for secret in names:
            assert not any(secret in stream for stream in streams), (name, secret)
    assert found  # the suite's captures have documents with long names


def _json_names(value: object) -> Iterator[str]:
    if isinstance(value, list):
        for item in value:
            yield from _json_names(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _json_names(item)


def test_frames_held_behind_one_are_bounded_in_number_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a connection from port 11210 to port 11210 keeps its last ACK waiting to the end; the small frames behind it
    # (short connections, 54-byte ACKs) cost far more memory than their bytes: their number is bounded too, by
    # two of the largest messages in 536-byte segments (here --max-body-length 10000: 38 frames)
    out = io.BytesIO()
    writer = PcapWriter(out)
    for index in range(300):
        conversation = TcpConversation(writer, (f"10.0.{index >> 8}.{index & 0xFF}", 11210 if index == 0 else 40000),
                                       ts=1_700_000_000 + index * 1e-3)
        conversation.handshake()
        conversation.send(from_client=False, payload=build.request(Opcode.DCP_NOOP, opaque=index))
        conversation.send(from_client=True, payload=build.response(Opcode.DCP_NOOP, opaque=index))
        conversation.close()
    source = tmp_path / "held.pcap"
    source.write_bytes(out.getvalue())
    longest = [0]
    flush = CaptureRedactor._flush

    def measured(self: CaptureRedactor) -> None:
        flush(self)
        longest[0] = max(longest[0], len(self.queue))

    monkeypatch.setattr(CaptureRedactor, "_flush", measured)
    target = tmp_path / "out.pcap"
    run = _redact(source, target, "--max-body-length", "10000")
    assert run.code == ExitCode.OK, run.err.getvalue()
    assert "frames written before their messages ended (--max-held-bytes)" in run.err.getvalue()
    assert longest[0] <= 2 * (10000 // 536 + 1)
    assert [r["opcode"] for r in _decoded(target)] == [r["opcode"] for r in _decoded(source)]


@pytest.mark.peer
@pytest.mark.parametrize(("snaplen", "options"), [(128, ()), (127, ("--map-addresses",))])
def test_a_frame_the_snap_length_cut_has_its_checksum_updated(tmp_path: Path, snaplen: int,
                                                              options: tuple[str, ...]) -> None:
    """A frame cut by the snap length cannot be summed, but its checksum is updated by what redaction
    changed (RFC 1624): put back the bytes the capture did not keep, and tshark (the independent checker)
    finds every TCP and IPv4 checksum good. Kept as it was, it would still sum the bytes replaced. (An odd
    snap length cuts a 16-bit word in two.)"""
    packets = _hello_collections() + session_packets() + _sasl_packets() + _snappy_packets() + _real_packets()
    whole, cut = tmp_path / "whole.pcap", tmp_path / "cut.pcap"
    whole.write_bytes(write_capture(packets))
    cut.write_bytes(write_capture(packets, snaplen=snaplen))
    run = _redact(cut, tmp_path / "out.pcap", *options)
    assert run.code == ExitCode.OK, run.err.getvalue()
    header, originals = _frames(whole.read_bytes())
    _, kept = _frames(cut.read_bytes())
    _, redacted_records = _frames((tmp_path / "out.pcap").read_bytes())
    assert len(redacted_records) == len(originals) == len(kept)
    completed, changed = [], 0
    for original, before, after in zip(originals, kept, redacted_records, strict=True):
        data, tail = after[16:], original[16 + len(after) - 16:]
        changed += len(tail) > 0 and data[54:] != before[70:]  # a cut frame whose captured payload changed
        completed.append(after[:8] + struct.pack("<II", len(data) + len(tail), len(data) + len(tail)) + data + tail)
    assert changed >= 5, changed
    rebuilt = tmp_path / "rebuilt.pcap"
    rebuilt.write_bytes(header + b"".join(completed))
    done = subprocess.run([peer("tshark"), "-r", str(rebuilt), "-o", "tcp.check_checksum:TRUE", "-o",
                           "ip.check_checksum:TRUE", "-T", "fields", "-e", "ip.checksum.status", "-e",
                           "tcp.checksum.status"], capture_output=True, text=True, check=True, timeout=60)
    statuses = Counter(done.stdout.split())
    assert statuses == Counter({"1": 2 * len(completed)}), statuses


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_nanosecond_capture_keeps_its_times(tmp_path: Path, jobs: str) -> None:
    """The copy of a capture taken with nanosecond timestamps (a classic pcap file: libpcap would give them as
    microseconds, so dcpctl reads it) has the times of the input, to the nanosecond, in one process or two."""
    nano = tmp_path / "nano.pcap"
    subprocess.run([peer("editcap"), "-F", "nsecpcap", "-t", "0.000000123", str(SAMPLE), str(nano)], check=True,
                   capture_output=True)
    assert _redact(nano, tmp_path / "out.pcap", "--jobs", jobs).code == ExitCode.OK

    def times(path: Path) -> list[str]:
        return subprocess.run([peer("tshark"), "-r", str(path), "-T", "fields", "-e", "frame.time_epoch"],
                              check=True, capture_output=True, text=True).stdout.split()

    assert times(nano)[0].endswith("123")
    assert times(tmp_path / "out.pcap") == times(nano)

"""dcpctl decode on captures built with dcpctl's writer: segmentation, loss, state, and Wireshark as a peer."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from capturekit import ROOT, session_packets, session_records, write_capture
from servekit import peer

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment
from dcpctl.sources.pcapwriter import LINKTYPE_LINUX_SLL, LINKTYPE_NULL, LINKTYPE_RAW, PcapWriter, TcpConversation

SAMPLE = ROOT / "samples" / "dcp-session.pcap"


def decode(path: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False)
    code = main(["decode", str(path), "-F", "jsonl", *args], env)
    return code, [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


def essentials(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    drop = {"ts", "frames", "latency_ms"}
    return [{k: v for k, v in r.items() if k not in drop} for r in records]


def test_sample_capture_is_up_to_date() -> None:
    assert SAMPLE.read_bytes() == write_capture(session_packets(), segment_size=100)


def test_sample_capture_decodes_the_session(tmp_path: Path) -> None:
    code, records, err = decode(SAMPLE)
    assert code == ExitCode.OK
    assert err == ""
    assert [r["opcode"] for r in records] == [r["opcode"] for r in session_records()]
    mutation = next(r for r in records if r["opcode"] == "DCP_MUTATION")
    assert mutation["collection_id"] == 8  # collections negotiated by the HELLO in the capture
    assert mutation["connection"] == "127.0.0.1:50123 > 127.0.0.1:11210"
    assert mutation["direction"] == "server>client"
    assert mutation["frames"]
    rollback = next(r for r in records if r.get("status") == "Rollback")
    assert rollback["latency_ms"] >= 0
    assert any(d["name"] == "rollback" for d in rollback["diagnostics"])


@pytest.mark.parametrize("segment_size", [1, 7, 24, 100, 65535])
def test_segmentation_does_not_change_the_messages(tmp_path: Path, segment_size: int) -> None:
    path = tmp_path / "c.pcap"
    path.write_bytes(write_capture(session_packets(), segment_size=segment_size))
    _, reference, _ = decode(SAMPLE)
    _, records, err = decode(path)
    assert essentials(records) == essentials(reference)
    assert err == ""


@pytest.mark.parametrize("seed", range(5))
def test_reordered_and_retransmitted_segments(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out))
    conversation.handshake()
    for from_client, data in session_packets():
        start = conversation.position(from_client)
        pieces = [(i, data[i:i + 9]) for i in range(0, len(data), 9)]
        shuffled = pieces + rng.sample(pieces, k=min(2, len(pieces)))  # duplicates: retransmissions
        rng.shuffle(shuffled)
        for offset, piece in shuffled:
            conversation.segment(from_client, piece, offset=start + offset)
        conversation.skip(from_client, len(data))
    conversation.close()
    path = tmp_path / "r.pcap"
    path.write_bytes(out.getvalue())
    _, reference, _ = decode(SAMPLE)
    _, records, err = decode(path)
    assert essentials(records) == essentials(reference)
    assert err == ""


def test_lost_bytes_are_reported_and_decoding_resynchronises(tmp_path: Path) -> None:
    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out))
    conversation.handshake()
    packets = session_packets()
    lost = next(i for i, (_, d) in enumerate(packets) if d[1] == 0x57)  # the first mutation
    for i, (from_client, data) in enumerate(packets):
        if i == lost:
            conversation.segment(from_client, data[:30])
            conversation.skip(from_client, len(data) - 30)
        else:
            conversation.send(from_client, data)
    conversation.close()
    path = tmp_path / "g.pcap"
    path.write_bytes(out.getvalue())
    code, records, err = decode(path)
    assert code == ExitCode.OK
    assert "capture_gap" in err
    assert f"{len(packets[lost][1]) - 30} bytes missing" in err
    opcodes = [r["opcode"] for r in records]
    assert opcodes.count("DCP_MUTATION") == 2  # the damaged one is decoded as far as it goes, then the next
    after = records[opcodes.index("DCP_MUTATION") + 1]
    assert after["opcode"] == "DCP_MUTATION"
    assert after["key"] == "airline_137"
    assert any(d["name"] == "capture_gap" for d in after["diagnostics"])


def test_capture_starting_midstream_says_state_is_unknown(tmp_path: Path) -> None:
    packets = session_packets()
    first_mutation = next(i for i, (_, d) in enumerate(packets) if d[1] == 0x57)
    path = tmp_path / "m.pcap"
    path.write_bytes(write_capture(packets[first_mutation:], handshake=False))
    _, records, _ = decode(path)
    assert records[0]["opcode"] == "DCP_MUTATION"
    assert "collection_id" not in records[0]
    assert any(d["name"] == "collections_unknown" for d in records[0]["diagnostics"])


@pytest.mark.parametrize(("linktype", "client", "server", "vlan"), [
    (LINKTYPE_RAW, ("10.0.0.1", 40000), ("10.0.0.2", 11210), None),
    (LINKTYPE_LINUX_SLL, ("10.0.0.1", 40000), ("10.0.0.2", 11210), None),
    (LINKTYPE_NULL, ("10.0.0.1", 40000), ("10.0.0.2", 11210), None),
    (1, ("fd00::1", 40000), ("fd00::2", 11210), None),
    (1, ("10.0.0.1", 40000), ("10.0.0.2", 11210), 42),
])
def test_link_types_and_ipv6(tmp_path: Path, linktype: int, client: tuple[str, int], server: tuple[str, int],
                             vlan: int | None) -> None:
    path = tmp_path / "l.pcap"
    path.write_bytes(write_capture(session_packets(), linktype=linktype, client=client, server=server, vlan=vlan))
    _, records, err = decode(path)
    assert len(records) == len(session_records())
    assert err == ""
    if ":" in client[0]:
        assert records[0]["connection"] == "[fd00::1]:40000 > [fd00::2]:11210"


def test_the_summary_table_shows_an_ipv6_connection_whole(tmp_path: Path) -> None:
    """The table took [fd00::1] for a rich style tag and dropped it: ':40000 > :11210' was all it showed."""
    path = tmp_path / "l.pcap"
    path.write_bytes(write_capture(session_packets(), client=("fd00::1", 40000), server=("fd00::2", 11210)))
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=True, stderr_isatty=False,
                      color=False, width=250)
    assert main(["decode", "--summary", str(path)], env) == ExitCode.OK, err.getvalue()
    assert "[fd00::1]:40000 > [fd00::2]:11210" in out.getvalue()


def test_other_ports_are_ignored_unless_asked(tmp_path: Path) -> None:
    path = tmp_path / "p.pcap"
    path.write_bytes(write_capture(session_packets(), server=("127.0.0.1", 12000)))
    assert decode(path)[1] == []
    assert len(decode(path, "--port", "12000")[1]) == len(session_records())


def test_tls_port_is_reported_once(tmp_path: Path) -> None:
    path = tmp_path / "t.pcap"
    path.write_bytes(write_capture([(True, b"\x16\x03\x01" + bytes(100)), (False, bytes(50))],
                                   server=("127.0.0.1", 11207)))
    _code, records, err = decode(path)
    assert records == []
    assert err.count("tls_port") == 1


def test_truncated_capture_file_keeps_what_was_readable(tmp_path: Path) -> None:
    data = SAMPLE.read_bytes()
    path = tmp_path / "cut.pcap"
    path.write_bytes(data[:len(data) * 2 // 3])
    code, records, err = decode(path)
    assert code == ExitCode.OK
    assert 5 < len(records) < len(session_records())
    assert "damaged" in err or "truncated" in err


def test_not_a_capture_is_one_line_exit_3(tmp_path: Path) -> None:
    path = tmp_path / "x.pcap"
    path.write_bytes(b"this is not a capture at all" * 10)
    code, _, err = decode(path)
    assert code == ExitCode.INPUT
    assert err.count("\n") == 1


def test_snaplen_cut_frames_become_gaps(tmp_path: Path) -> None:
    path = tmp_path / "s.pcap"
    path.write_bytes(write_capture(session_packets(), snaplen=120))
    code, records, err = decode(path)
    assert code == ExitCode.OK
    assert "capture_gap" in err
    assert records  # short messages still decode


def test_filters_count_and_summary() -> None:
    assert {r["opcode"] for r in decode(SAMPLE, "--opcode", "DCP_MUT*")[1]} == {"DCP_MUTATION"}
    assert [r["by_seqno"] for r in decode(SAMPLE, "--filter", "by_seqno > 201")[1]] == [202, 203]
    assert len(decode(SAMPLE, "--count", "3")[1]) == 3
    assert [r["key"] for r in decode(SAMPLE, "--key", "airline_1*")[1]] == ["airline_10", "airline_137"]
    assert all(r.get("stream_vbucket", r.get("vbucket")) == 12 for r in decode(SAMPLE, "--vbucket", "12")[1])
    code, _, _err = decode(SAMPLE, "--filter", "__import__('os')")
    assert code == ExitCode.USAGE
    out = io.StringIO()
    env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False, width=200)
    assert main(["decode", str(SAMPLE), "--summary"], env) == 0
    assert "rollbacks" in out.getvalue()
    assert "201-203" in out.getvalue()


# --- Wireshark's dissector as the independent decoder -------------------------------------------
TSHARK_FIELDS = ["frame.number", "couchbase.magic", "couchbase.opcode", "couchbase.vbucket", "couchbase.status",
                 "couchbase.opaque", "couchbase.cas", "couchbase.datatype", "couchbase.total_bodylength",
                 "couchbase.extras.by_seqno", "couchbase.extras.rev_seqno", "couchbase.extras.start_seqno",
                 "couchbase.extras.vbucket_uuid", "couchbase.key.collection_id", "couchbase.key.logical_key"]



@pytest.mark.peer
def test_fields_agree_with_wireshark(tmp_path: Path) -> None:
    path = tmp_path / "w.pcap"
    path.write_bytes(write_capture(session_packets(), segment_size=65535))  # one message per frame
    result = subprocess.run([peer("tshark"), "-r", str(path), "-Y", "couchbase", "-T", "fields", "-E", "separator=\t",
                             *[x for f in TSHARK_FIELDS for x in ("-e", f)]],
                            capture_output=True, text=True, check=True, timeout=120)
    rows = [dict(zip(TSHARK_FIELDS, line.split("\t"), strict=True)) for line in result.stdout.splitlines()]
    _, records, _ = decode(path)
    assert len(rows) == len(records)
    compared = 0
    for row, record in zip(rows, records, strict=True):
        assert [int(row["frame.number"])] == record["frames"]
        assert int(row["couchbase.magic"], 16) in (0x80, 0x81)
        assert int(row["couchbase.opcode"], 16) == _opcode_number(record)
        if row["couchbase.vbucket"]:
            assert int(row["couchbase.vbucket"]) == record["vbucket"]
        if row["couchbase.status"]:
            assert record["status"] == {0: "Success", 0x23: "Rollback"}[int(row["couchbase.status"], 16)]
        # Wireshark shows the opaque byte-swapped (it reads it little-endian); dcpctl shows the bytes as sent.
        assert int(row["couchbase.opaque"], 16) == int.from_bytes(record["opaque"].to_bytes(4, "big"), "little")
        assert int(row["couchbase.cas"], 16) == record["cas"]
        assert int(row["couchbase.datatype"], 16) == record["datatype"]
        assert int(row["couchbase.total_bodylength"]) == record["total_body_length"]
        for field, key in [("couchbase.extras.by_seqno", "by_seqno"), ("couchbase.extras.rev_seqno", "rev_seqno"),
                           ("couchbase.extras.start_seqno", "start_seqno")]:
            if row[field]:
                # Wireshark files a snapshot marker's start under start_seqno
                name = key if key in record else "snap_start_seqno"
                assert int(row[field], 0) == record[name]
                compared += 1
        if row["couchbase.extras.vbucket_uuid"]:
            assert int(row["couchbase.extras.vbucket_uuid"], 16) == record["vbucket_uuid"]
        if "collection_id" in record:
            assert int(row["couchbase.key.collection_id"], 16) == record["collection_id"]
            assert row["couchbase.key.logical_key"] == record["key"]
            compared += 1
        elif row["couchbase.key.logical_key"] and record["opcode"] == "DCP_OPEN":
            # Wireshark assumes a collection prefix on any key; dcpctl knows a DCP_OPEN key is a name
            assert row["couchbase.key.logical_key"] == record["key"][1:]
    assert compared >= 8


def _opcode_number(record: dict[str, Any]) -> int:
    from dcpctl.protocol.constants import OPCODES  # noqa: PLC0415

    return OPCODES.code(record["opcode"])


@pytest.mark.peer
def test_pcapng_reads_the_same(tmp_path: Path) -> None:
    editcap = shutil.which("editcap")
    if editcap is None:
        if os.environ.get("CI"):
            pytest.fail("editcap (from tshark's packages) is missing: .ci/run installs it")
        pytest.skip("editcap not installed")
    converted = tmp_path / "s.pcapng"
    subprocess.run([editcap, "-F", "pcapng", str(SAMPLE), str(converted)], check=True, timeout=60)
    assert converted.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"  # a pcapng section header block
    assert essentials(decode(converted)[1]) == essentials(decode(SAMPLE)[1])


def test_standard_input(tmp_path: Path) -> None:
    with SAMPLE.open("rb") as stdin:
        result = subprocess.run([sys.executable, "-m", "dcpctl", "decode", "-F", "jsonl", "-"],
                                stdin=stdin, capture_output=True, timeout=120, check=True)
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert essentials(records) == essentials(decode(SAMPLE)[1])


def test_progress_bar_on_a_terminal_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    from dcpctl.render import progress  # noqa: PLC0415

    monkeypatch.setattr(progress, "PROGRESS_MIN_BYTES", 1)
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=True,
                      color=False)
    assert main(["decode", str(SAMPLE), "-F", "jsonl"], env) == ExitCode.OK
    assert "dcp-session.pcap" in err.getvalue()
    assert len(out.getvalue().splitlines()) == len(session_records())
    quiet = Environment(stdout=io.StringIO(), stderr=(silent := io.StringIO()), stdin=io.BytesIO(),
                        stdout_isatty=False, stderr_isatty=False, color=False)
    assert main(["decode", str(SAMPLE), "-F", "jsonl"], quiet) == ExitCode.OK
    assert silent.getvalue() == ""


def _crafted_packets() -> list[tuple[bool, bytes]]:
    """After the sample session: the cases where Wireshark 4.0's dissector is known to be wrong."""
    from dcpctl.protocol.encode import encode  # noqa: PLC0415

    marker = {"magic": "ClientRequest", "opcode": "DCP_SNAPSHOT_MARKER", "vbucket": 12, "opaque": 4097,
              "marker_version": 2, "snap_start_seqno": 204, "snap_end_seqno": 207, "snapshot_flags": 6,
              "max_visible_seqno": 206, "high_completed_seqno": 0, "purge_seqno": 120, "high_prepared_seqno": 0}
    item = {"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 12, "opaque": 4097, "cas": 5,
            "datatype": 1, "by_seqno": 206, "rev_seqno": 2, "flags": 0, "expiration": 0, "lock_time": 0,
            "nmeta": 0, "nru": 0, "collection_id": 8, "key": "short_extras", "value": '{"b":2}'}
    snappy = {**item, "datatype": 7, "by_seqno": 205, "key": "snappy_doc", "value": '{"a":1}',
              "xattrs": [{"key": "_sync", "value": '{"rev":"2-ab"}'}]}
    short = bytearray(encode(item, fix_lengths=True))  # the same mutation with 28 bytes of extras
    short[4] = 28
    short[8:12] = (int.from_bytes(short[8:12], "big") - 3).to_bytes(4, "big")
    del short[52:55]
    after = encode({**item, "by_seqno": 207, "key": "after_garbage"}, fix_lengths=True)
    return [*session_packets(), (False, encode(marker, fix_lengths=True)), (False, encode(snappy, fix_lengths=True)),
            (False, bytes(short)), (False, b"\x00garbage!" + after)]


@pytest.mark.peer
def test_where_wireshark_is_wrong_dcpctl_is_right(tmp_path: Path) -> None:
    path = tmp_path / "wrong.pcap"
    path.write_bytes(write_capture(_crafted_packets(), segment_size=65535))  # one message per frame
    fields = ["frame.number", "couchbase.opcode", "couchbase.status", "couchbase.value", "couchbase.extras.by_seqno",
              "couchbase.key.logical_key", "couchbase.xattrs.pair.key", "_ws.expert.message"]
    result = subprocess.run([peer("tshark"), "-r", str(path), "-Y", "couchbase", "-T", "fields", "-E", "separator=\t",
                             *[x for f in fields for x in ("-e", f)]],
                            capture_output=True, text=True, check=True, timeout=120)
    theirs = {int(row[0]): dict(zip(fields, row, strict=True))
              for row in (line.split("\t") for line in result.stdout.splitlines())}
    code, records, err = decode(path)
    assert code == ExitCode.OK
    mine = {r["frames"][0]: r for r in records}

    # The rollback seqno: Wireshark calls the 8-byte value of a Rollback answer "trailing stray characters".
    rollback = next(f for f, r in mine.items() if r.get("status") == "Rollback")
    assert mine[rollback]["rollback_seqno"] == 200
    assert theirs[rollback]["couchbase.value"] == ""
    assert "Trailing stray" in theirs[rollback]["_ws.expert.message"]
    # A v2.2 snapshot marker (version byte 2, purge seqno): Wireshark declares the packet malformed.
    marker = next(f for f, r in mine.items() if r.get("marker_version") == 2)
    assert mine[marker]["purge_seqno"] == 120
    assert [d["name"] for d in mine[marker]["diagnostics"]] == ["no_stream"]  # crafted: no stream request
    assert "Malformed" in theirs[marker]["_ws.expert.message"]
    # xattrs inside a snappy value: Wireshark parses them out of the still-compressed bytes.
    snappy = next(f for f, r in mine.items() if r.get("key") == "snappy_doc")
    assert mine[snappy]["xattrs"] == [{"key": "_sync", "value": '{"rev":"2-ab"}'}]
    assert mine[snappy]["value"] == '{"a":1}'
    assert theirs[snappy]["couchbase.xattrs.pair.key"] != "_sync"
    # Mutation extras of 28 bytes: Wireshark reads 31 anyway, taking the key's first bytes as extras.
    short = next(f for f, r in mine.items() if r.get("extras_length") == 28)
    assert [d["name"] for d in mine[short]["diagnostics"]] == ["illegal_extras_length"]
    assert bytes.fromhex(mine[short]["key"]) == b"\x08short_extras"  # the bytes as sent, nothing swallowed
    assert theirs[short]["couchbase.extras.by_seqno"] == "206"
    # Garbage before a message in a segment: Wireshark gives up on the frame; dcpctl skips 9 bytes and goes on.
    after = next(f for f, r in mine.items() if r.get("key") == "after_garbage")
    assert mine[after]["by_seqno"] == 207
    assert after not in theirs
    assert "skipped_bytes: 9 bytes" in err


FLAT_FIELDS = {"couchbase.opcode": "opcode", "couchbase.opaque": "opaque", "couchbase.cas": "cas",
               "couchbase.total_bodylength": "total_body_length", "couchbase.extras.by_seqno": "by_seqno",
               "couchbase.extras.rev_seqno": "rev_seqno", "couchbase.flex_frame.frame.dcp_stream_id": "stream_id",
               "couchbase.key.collection_id": "collection_id"}


def _wireshark_value(field: str, text: str) -> int:
    value = int(text, 0) if not text.isdigit() else int(text)
    if field == "couchbase.opaque":  # Wireshark reads the opaque little-endian (see the test above)
        return int.from_bytes(value.to_bytes(4, "little"), "big")
    return value


@pytest.mark.peer
@pytest.mark.parametrize("segment_size", [65535, 100, 7])
def test_every_segmentation_agrees_with_wireshark(tmp_path: Path, segment_size: int) -> None:
    """Messages spread over segments and several per segment, with a stream id: every value Wireshark
    decodes, in order, equals dcpctl's."""
    from dcpctl.protocol.encode import encode  # noqa: PLC0415

    sid = {"magic": "AltClientRequest", "opcode": "DCP_MUTATION", "vbucket": 12, "opaque": 4097, "cas": 5,
           "datatype": 1, "by_seqno": 204, "rev_seqno": 2, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0,
           "nru": 0, "collection_id": 8, "key": "with_sid", "value": '{"b":2}',
           "frame_infos": [{"id": 2, "stream_id": 3, "data": "0003"}]}
    path = tmp_path / "s.pcap"
    path.write_bytes(write_capture([*session_packets(), (False, encode(sid, fix_lengths=True))],
                                   segment_size=segment_size))
    fields = list(FLAT_FIELDS)
    result = subprocess.run([peer("tshark"), "-r", str(path), "-Y", "couchbase", "-T", "fields", "-E", "occurrence=a",
                             "-E", "aggregator=|", *[x for f in fields for x in ("-e", f)]],
                            capture_output=True, text=True, check=True, timeout=120)
    theirs: dict[str, list[int]] = {f: [] for f in fields}
    for line in result.stdout.splitlines():
        for field, cell in zip(fields, line.split("\t"), strict=True):
            theirs[field].extend(_wireshark_value(field, v) for v in cell.split("|") if v)
    _, records, err = decode(path)
    assert err == ""
    for field, key in FLAT_FIELDS.items():
        if key == "opcode":
            mine = [_opcode_number(r) for r in records]
        elif key == "collection_id":  # Wireshark splits a prefix off every key; compare where there is one
            mine = [r[key] for r in records if key in r]
            theirs[field] = theirs[field][-len(mine):] if mine else []
        elif key in ("by_seqno", "rev_seqno"):  # Wireshark files a marker's start under start_seqno
            mine = [r[key] for r in records if key in r and r["opcode"] != "DCP_SNAPSHOT_MARKER"]
        else:
            mine = [r[key] for r in records if key in r]
        assert theirs[field] == mine, field

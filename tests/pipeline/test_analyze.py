"""``dcpctl analyze`` on Spark in local mode: the same messages as decode, chunking changes nothing, and the
analyses find what was planted in a generated capture."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from capturekit import ROOT, session_packets, write_capture

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.protocol.encode import encode
from dcpctl.render.env import Environment
from dcpctl.sources.files import expand
from dcpctl.sources.pcapwriter import PcapWriter, TcpConversation

SAMPLE = ROOT / "samples" / "dcp-session.pcap"


def item(seqno: int, key: str, opaque: int = 5000, value: str = '{"n":1}') -> bytes:
    return encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 12, "opaque": opaque,
                   "cas": seqno, "datatype": 1 if value.startswith("{") else 0, "by_seqno": seqno, "rev_seqno": 1,
                   "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0, "nru": 0, "key": key, "value": value},
                  fix_lengths=True)


def planted(path: Path) -> None:
    """Three connections: the sample session (a rollback); a resumed stream that re-delivers 202 (a
    duplicate), skips 204-209 inside its snapshot (expected) and loses 212 to the capture (suspicious); and
    a consumer with a 500-byte window that acks ten seconds late (a stall), then never again (stuck)."""
    out = io.BytesIO()
    writer = PcapWriter(out)
    first = TcpConversation(writer, ("127.0.0.1", 50123), ("127.0.0.1", 11210))
    first.handshake()
    for from_client, data in session_packets():
        first.send(from_client, data)
    first.close()
    second = TcpConversation(writer, ("127.0.0.1", 50200), ("127.0.0.1", 11210), ts=1_700_000_100.0)
    second.handshake()
    second.send(True, stream_request(201))
    second.send(False, stream_opened())
    second.send(False, marker(202, 215))
    for seqno, key in ((202, "airline_137"), (203, "a"), (210, "b")):
        second.send(False, item(seqno, key))
    lost = item(212, "c")
    second.skip(False, len(lost))
    second.send(False, item(215, "d"))
    second.close()
    third = TcpConversation(writer, ("127.0.0.1", 50300), ("127.0.0.1", 11210), ts=1_700_000_200.0)
    third.handshake()
    third.send(True, encode({"magic": "ClientRequest", "opcode": "DCP_CONTROL", "opaque": 2,
                             "key": "connection_buffer_size", "value": "500"}, fix_lengths=True))
    third.send(False, encode({"magic": "ClientResponse", "opcode": "DCP_CONTROL", "status": "Success", "opaque": 2},
                             fix_lengths=True))
    third.send(True, stream_request(0))
    third.send(False, stream_opened())
    third.send(False, marker(1, 10))
    for seqno in range(1, 4):  # the marker and three items fill the window: the producer stops
        third.send(False, item(seqno, f"k{seqno}", value="x" * 100))
    third.send(True, encode({"magic": "ClientRequest", "opcode": "DCP_BUFFER_ACKNOWLEDGEMENT", "vbucket": 0,
                             "opaque": 3, "bytes_to_ack": 400}, fix_lengths=True), ts=1_700_000_210.0)
    for seqno in range(4, 7):  # full again, and never acknowledged
        third.send(False, item(seqno, f"k{seqno}", value="x" * 100))
    third.close()
    path.write_bytes(out.getvalue())


def stream_request(start: int) -> bytes:
    return encode({"magic": "ClientRequest", "opcode": "DCP_STREAM_REQ", "vbucket": 12, "opaque": 5000, "flags": 0,
                   "reserved": 0, "start_seqno": start, "end_seqno": 2**64 - 1, "vbucket_uuid": 209993845321212,
                   "snap_start_seqno": start, "snap_end_seqno": start}, fix_lengths=True)


def stream_opened() -> bytes:
    return encode({"magic": "ClientResponse", "opcode": "DCP_STREAM_REQ", "status": "Success", "opaque": 5000,
                   "failover_log": [{"vbucket_uuid": 209993845321212, "seqno": 0}]}, fix_lengths=True)


def marker(start: int, end: int) -> bytes:
    return encode({"magic": "ClientRequest", "opcode": "DCP_SNAPSHOT_MARKER", "vbucket": 12, "opaque": 5000,
                   "snap_start_seqno": start, "snap_end_seqno": end, "snapshot_flags": 1}, fix_lengths=True)


def decoded(path: Path) -> list[dict[str, Any]]:
    out = io.StringIO()
    env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False)
    assert main(["decode", str(path), "-F", "jsonl", "-j", "1"], env) == ExitCode.OK
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _order(record: dict[str, Any]) -> tuple[str, str, int]:
    return record["connection"], record["direction"], record["offset"]


def plain(value: Any, name: str = "") -> Any:
    """A Spark value as the JSON record has it (a u64 column's bits as unsigned, structs as dicts)."""
    from dcpctl.pipeline.schema import U64_COLUMNS  # noqa: PLC0415

    if isinstance(value, list):
        return [plain(v) for v in value]
    if hasattr(value, "asDict"):
        return {k: plain(v) for k, v in value.asDict().items()}
    if name in U64_COLUMNS and isinstance(value, int):
        return value % 2**64
    return value


def test_rows_are_decodes_messages_whatever_the_chunking(spark: Any, tmp_path: Path) -> None:
    from dcpctl.pipeline import job, schema  # noqa: PLC0415
    from dcpctl.protocol.message import DecodeOptions  # noqa: PLC0415

    path = tmp_path / "planted.pcap"
    planted(path)
    expected = sorted(decoded(path), key=_order)
    for chunk in (1 << 20, 600):  # one chunk, and a chunk every few frames
        result = job.run(spark, [str(path)], frozenset({11210}), DecodeOptions(), tmp_path / "full", chunk,
                         records=True)
        assert result.messages == len(expected)
        frame = job.read(spark, result, records=True)
        rows = sorted(frame.collect(), key=lambda r: (r.connection, r.direction, r.offset))
        assert [json.loads(r.record) for r in rows] == expected, chunk
        assert {r.end_seqno for r in rows if r.opcode == "DCP_STREAM_REQ" and r.end_seqno is not None} == {-1}
        # and every column is the record's field, typed
        for row, record in zip(rows, expected, strict=True):
            for name in schema.RECORD_COLUMNS:
                assert plain(row[name], name) == record.get(name), (name, record)
            assert [d["name"] for d in plain(row["diagnostics"])] == [d["name"] for d in record["diagnostics"]]
    chunks = job.partitions_for([str(path)], 600).chunks
    assert len(chunks) > 5
    # without --records the columns are the same, and there is no record column
    lean = job.read(spark, job.run(spark, [str(path)], frozenset({11210}), DecodeOptions(), tmp_path / "lean", 600))
    assert "record" not in lean.columns
    columns = [name for name, _ in schema.COLUMNS]
    lean_rows = sorted((tuple(plain(r[c]) for c in columns) for r in lean.collect()), key=lambda r: r[1:5])
    full_rows = sorted((tuple(plain(r[c]) for c in columns) for r in frame.collect()), key=lambda r: r[1:5])
    assert lean_rows == full_rows


def test_a_hole_before_another_message_still_marks_the_gap_after_it(spark: Any, tmp_path: Path) -> None:
    """The capture_gap diagnostic is on the first message after the hole, here a snapshot marker: the gap of
    the item after it was called deduplication, so a capture that lost items looked whole."""
    from dcpctl.pipeline import analyses, job  # noqa: PLC0415
    from dcpctl.protocol.message import DecodeOptions  # noqa: PLC0415

    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out), ("127.0.0.1", 50400), ("127.0.0.1", 11210))
    conversation.handshake()
    conversation.send(True, stream_request(201))
    conversation.send(False, stream_opened())
    conversation.send(False, marker(202, 212))
    for seqno, key in ((202, "a"), (203, "b"), (205, "c")):  # 204: deduplicated
        conversation.send(False, item(seqno, key))
    conversation.skip(False, len(item(212, "lost")))
    conversation.send(False, marker(213, 220))
    conversation.send(False, item(215, "d"))
    conversation.close()
    path = tmp_path / "hole.pcap"
    path.write_bytes(out.getvalue())
    result = job.run(spark, [str(path)], frozenset({11210}), DecodeOptions(), tmp_path / "out", 600)
    report = analyses.report(job.read(spark, result), result.partials, plots=False)
    assert {(g["previous"], g["by_seqno"]): g["kind"] for g in report["gaps"]} == {
        (203, 205): "expected: deduplication or filtered collections",
        (205, 215): "suspicious: bytes missing from the capture"}
    rows = {row["by_seqno"]: row["capture_gap_before"] for row in job.read(spark, result)
            .where("by_seqno IS NOT NULL").select("by_seqno", "capture_gap_before").collect()}
    assert rows == {202: None, 203: False, 205: False, 215: True}


def test_the_analyses_find_what_was_planted(spark: Any, tmp_path: Path) -> None:
    from dcpctl.pipeline import analyses, job  # noqa: PLC0415
    from dcpctl.protocol.message import DecodeOptions  # noqa: PLC0415

    path = tmp_path / "planted.pcap"
    planted(path)
    result = job.run(spark, [str(path)], frozenset({11210}), DecodeOptions(), tmp_path / "out", 600)
    # the capture lost 212's bytes: the gap is reported where decode reports it, with the connection
    assert any("capture_gap" in n and "127.0.0.1:50200" in n for n in result.notices), result.notices
    report = analyses.report(job.read(spark, result), result.partials, plots=True)
    second = [g for g in report["gaps"] if g["connection"].startswith("127.0.0.1:50200")]
    assert {(g["previous"], g["by_seqno"]): g["kind"] for g in second} == {
        (203, 210): "expected: deduplication or filtered collections",
        (210, 215): "suspicious: bytes missing from the capture"}
    assert [(d["vb"], d["by_seqno"], d["times"]) for d in report["duplicates"]] == [(12, 202, 2), (12, 203, 2)]
    [rollback] = report["rollbacks"]
    assert (rollback["vb"], rollback["start_seqno"], rollback["rollback_seqno"]) == (12, 250, 200)
    assert (rollback["snap_start_seqno"], rollback["snap_end_seqno"]) == (240, 260)
    assert rollback["retried"]
    assert "The rollback engine agrees [consumer_ahead]" in rollback["explanation"]
    vbuckets = {(v["connection"].split(" > ")[0], v["vb"]): v for v in report["vbuckets"]}
    second_vb = vbuckets[("127.0.0.1:50200", 12)]
    assert [second_vb[k] for k in ("items", "first_seqno", "last_seqno", "gaps")] == [4, 202, 215, 2]
    assert vbuckets[("127.0.0.1:50300", 12)]["items"] == 6
    flow = {f["connection"].split(" > ")[0]: f for f in report["flow_control"]}
    assert {c: f["buffer_size"] for c, f in flow.items()} == {"127.0.0.1:50123": 1048576, "127.0.0.1:50200": None,
                                                               "127.0.0.1:50300": 500}
    assert (flow["127.0.0.1:50300"]["stalls"], flow["127.0.0.1:50300"]["stuck_at_end"]) == (1, True)
    assert flow["127.0.0.1:50123"]["stuck_at_end"] is False
    [stall] = report["stalls"]
    assert stall["connection"].startswith("127.0.0.1:50300")
    assert 9_990 < stall["stalled_ms"] < 10_000
    [latency] = [row for row in report["latency"] if row["connection"].startswith("127.0.0.1:50123")]
    assert latency["responses"] == 2
    assert sum(r["items"] for r in report["per_second"]) == sum(v["items"] for v in report["vbuckets"])
    assert report["progress"]


def analysed(spark: Any, path: Path, port: int, sent: list[tuple[bool, bytes]]) -> dict[str, Any]:
    """The report of a capture at ``path`` of one connection from client ``port``: its handshake, ``sent``
    ((from the client, packet) in order), its close."""
    from dcpctl.pipeline import analyses, job  # noqa: PLC0415
    from dcpctl.protocol.message import DecodeOptions  # noqa: PLC0415

    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out), ("127.0.0.1", port), ("127.0.0.1", 11210))
    conversation.handshake()
    for from_client, data in sent:
        conversation.send(from_client, data)
    conversation.close()
    path.write_bytes(out.getvalue())
    result = job.run(spark, [str(path)], frozenset({11210}), DecodeOptions(), path.parent / "out", 600)
    return analyses.report(job.read(spark, result), result.partials, plots=False)


def test_a_repeated_seqno_and_one_that_went_back_are_counted_once_each(spark: Any, tmp_path: Path) -> None:
    """Seqnos 1 2 3 3 2: the second 3 is the one before again (repeated), the last 2 below it (backwards);
    decode gives both seqno_backwards, which the report counted in both columns. Both are duplicates."""
    report = analysed(spark, tmp_path / "back.pcap", 50400, [
        (True, stream_request(0)), (False, stream_opened()), (False, marker(1, 10)),
        *[(False, item(seqno, f"k{seqno}")) for seqno in (1, 2, 3, 3, 2)]])
    [row] = report["vbuckets"]
    assert (row["items"], row["repeated"], row["backwards"]) == (5, 1, 1)
    assert [(d["by_seqno"], d["times"]) for d in report["duplicates"]] == [(2, 2), (3, 2)]


def pushed(record: dict[str, Any]) -> bytes:
    return encode({"magic": "ClientRequest", "vbucket": 12, "opaque": 5000, **record}, fix_lengths=True)


def test_a_streams_seqnos_run_through_every_message_that_takes_one(spark: Any, tmp_path: Path) -> None:
    """A system event, a commit and a seqno advance take seqnos of the vbucket's history: no gap before the
    message after them (each was 'expected: deduplication'); a prepare is an item, as decode --summary counts
    it. A seqno that really is missing (5 to 8 here, after the seqno advance to 6) is still a gap."""
    path = tmp_path / "sync.pcap"
    report = analysed(spark, path, 50500, [
        (True, stream_request(0)), (False, stream_opened()), (False, marker(1, 9)), (False, item(1, "a")),
        (False, pushed({"opcode": "DCP_SYSTEM_EVENT", "by_seqno": 2, "event_id": 0, "event_version": 0, "key": "c1",
                        "value": ""})),
        (False, pushed({"opcode": "DCP_PREPARE", "by_seqno": 3, "rev_seqno": 1, "flags": 0, "expiration": 0,
                        "lock_time": 0, "nru": 0, "deleted": 0, "durability_level": 1, "cas": 3, "key": "b",
                        "value": "{}", "datatype": 1})),
        (False, pushed({"opcode": "DCP_COMMIT", "prepared_seqno": 3, "commit_seqno": 4, "key": "b"})),
        (False, item(5, "c")), (False, pushed({"opcode": "DCP_SEQNO_ADVANCED", "by_seqno": 6})), (False, item(8, "d"))])
    [row] = report["vbuckets"]
    assert (row["items"], row["first_seqno"], row["last_seqno"], row["gaps"]) == (4, 1, 8, 1)
    assert [(gap["previous"], gap["by_seqno"], gap["missing"]) for gap in report["gaps"]] == [(6, 8, 1)]
    summary = io.StringIO()
    env = Environment(stdout=summary, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False)
    assert main(["decode", "--summary", str(path)], env) == ExitCode.OK
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in summary.getvalue().splitlines()]
    [(items, seqnos)] = [(cells[4], cells[5]) for cells in rows if len(cells) > 5 and cells[1] == "12"]
    assert (int(items), seqnos) == (row["items"], f"{row['first_seqno']}-{row['last_seqno']}")  # decode's count


def test_items_a_reopened_stream_sends_again_are_duplicates(spark: Any, tmp_path: Path) -> None:
    """Seqnos 1-5, a stream end, then 4-6 on a stream asked from 3 on the same connection: 4 and 5 came
    twice and went back below 5 (decode's seqno_backwards is per stream, so it says nothing here)."""
    report = analysed(spark, tmp_path / "again.pcap", 50600, [
        (True, stream_request(0)), (False, stream_opened()), (False, marker(1, 5)),
        *[(False, item(seqno, f"k{seqno}")) for seqno in range(1, 6)],
        (False, pushed({"opcode": "DCP_STREAM_END", "stream_end_status": 0})),
        (True, stream_request(3)), (False, stream_opened()), (False, marker(4, 6)),
        *[(False, item(seqno, f"k{seqno}")) for seqno in (4, 5, 6)]])
    [row] = report["vbuckets"]
    assert (row["items"], row["repeated"], row["backwards"], row["gaps"]) == (8, 0, 1, 0)
    assert [(d["by_seqno"], d["times"]) for d in report["duplicates"]] == [(4, 2), (5, 2)]


def test_an_oso_snapshots_items_in_key_order_are_no_gaps_or_seqnos_going_back(spark: Any, tmp_path: Path) -> None:
    """An OSO backfill (reference 3.19) sends its items in key order, without a marker: 7 2 9 4, then the
    in-memory snapshot from 10. Neither decode's tracker nor the report finds anything wrong (each item was
    item_before_marker, and 2 and 4 went backwards); a gap after the OSO's highest seqno is still one."""
    path = tmp_path / "oso.pcap"
    report = analysed(spark, path, 50700, [
        (True, stream_request(0)), (False, stream_opened()),
        (False, pushed({"opcode": "DCP_OSO_SNAPSHOT", "oso_flags": 1})),
        *[(False, item(seqno, f"k{seqno}")) for seqno in (7, 2, 9, 4)],
        (False, pushed({"opcode": "DCP_OSO_SNAPSHOT", "oso_flags": 2})), (False, marker(10, 13)),
        *[(False, item(seqno, f"k{seqno}")) for seqno in (10, 13)]])
    assert [record.get("diagnostics", []) for record in decoded(path) if record["opcode"] == "DCP_MUTATION"] \
        == [[]] * 6
    [row] = report["vbuckets"]
    assert (row["items"], row["first_seqno"], row["last_seqno"]) == (6, 2, 13)
    assert (row["backwards"], row["before_marker"], row["outside_snapshot"]) == (0, 0, 0)
    assert [(gap["previous"], gap["by_seqno"]) for gap in report["gaps"]] == [(10, 13)]


def test_the_stalls_a_limit_keeps_are_the_reports_first() -> None:
    """Partials cut their stalls at the limit in the report's order (connection, then time), not in the order
    tasks finished: a connection sorted first lost every stall to a later task's 1000."""
    from dcpctl.pipeline.rollup import LIST_LIMIT, Partials  # noqa: PLC0415

    def stall(connection: str, ts: float) -> dict[str, Any]:
        return {"connection": connection, "ts": ts, "stalled_ms": 1.0, "unacked_bytes": 1, "buffer_size": 1}

    gathered = Partials(stalls=[stall("b", float(n)) for n in range(LIST_LIMIT)])
    gathered.extend(Partials(stalls=[stall("a", 5.0), stall("a", 1.0)]))
    assert [(r["connection"], r["ts"]) for r in gathered.stalls[:3]] == [("a", 1.0), ("a", 5.0), ("b", 0.0)]
    assert len(gathered.stalls) == LIST_LIMIT


def test_a_list_at_the_reports_limit_is_said_to_be_so(spark: Any, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The report keeps the first ROWS_LIMIT rows of a list; one that reached it is named, not cut silently,
    and the table says json's rows may not be all."""
    from dcpctl.pipeline import analyses, job  # noqa: PLC0415
    from dcpctl.protocol.message import DecodeOptions  # noqa: PLC0415
    from dcpctl.render.analysis import print_report  # noqa: PLC0415

    path = tmp_path / "planted.pcap"
    planted(path)
    result = job.run(spark, [str(path)], frozenset({11210}), DecodeOptions(), tmp_path / "out", 600)
    monkeypatch.setattr(analyses, "ROWS_LIMIT", 1)
    report = analyses.report(job.read(spark, result), result.partials, plots=False)
    assert len(report["gaps"]) == 1
    assert sum(row["gaps"] for row in report["vbuckets"]) > 1
    assert (report["rows_limit"], "gaps" in report["lists_at_limit"]) == (1, True)
    out = io.StringIO()
    env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False, width=200)
    print_report(env.console(), {"dataset": "out", **report})
    assert "the report keeps the first 1: there may be more" in out.getvalue()


def test_the_command_writes_parquet_json_and_plots(spark: Any, tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False)
    code = main(["analyze", str(SAMPLE), "--out", str(tmp_path / "ds"), "--plots", str(tmp_path / "plots"),
                 "--master", "local[2]"], env)
    assert code == ExitCode.OK, err.getvalue()
    report = json.loads(out.getvalue())
    assert report["messages"] == len(decoded(SAMPLE))
    assert [r["rollback_seqno"] for r in report["rollbacks"]] == [200]
    assert {"vbuckets", "gaps", "duplicates", "rollbacks", "latency", "per_second", "flow_control", "stalls"} \
        <= report.keys()
    assert sorted(Path(p).name for p in report["plots"]) == ["overview.png", "seqno-progress.png",
                                                               "throughput.png", "unacked-bytes.png"]
    assert all(Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in report["plots"])
    assert list((tmp_path / "ds").glob("*.parquet"))


def test_a_capture_on_another_port_gets_decodes_port_hint(spark: Any, tmp_path: Path) -> None:
    """The tasks read chunks and never see a whole file: an empty report used to say nothing more."""
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False)
    code = main(["analyze", str(SAMPLE), "--port", "12000", "--out", str(tmp_path / "ds"), "--master", "local[2]",
                 "-F", "json"], env)
    assert code == ExitCode.OK, err.getvalue()
    assert json.loads(out.getvalue())["messages"] == 0
    assert "protocol_on_other_port: no traffic on port 12000; port 11210" in err.getvalue()
    assert "try --port 11210" in err.getvalue()


def test_the_table_reads_as_a_person_expects(spark: Any, tmp_path: Path) -> None:
    """Issue 18: the table printed Python's None and False, and the per-second rows were only in the JSON."""
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False)
    code = main(["analyze", str(SAMPLE), "--out", str(tmp_path / "ds"), "--master", "local[2]", "-F", "table"], env)
    assert code == ExitCode.OK, err.getvalue()
    text = out.getvalue()
    assert "None" not in text
    assert "False" not in text
    [flow] = [line for line in text.splitlines() if "1048576" in line]
    assert flow.rstrip(" │").endswith("│ no")  # stuck_at_end
    assert "per second (items the producer pushed, bytes the server sent)" in text
    assert "busiest second: 2023-11-14T22:13:20Z (+0 s) 3 items" in text


class _TableWhenPiped(Environment):
    """Piped, yet it chooses the terminal's format: analyze printing JSON would restate the rule itself."""

    def output_format(self, chosen: Any, terminal: Any, piped: Any) -> Any:
        return chosen if chosen is not None else terminal


def test_without_a_format_analyze_asks_the_environment(spark: Any, tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    env = _TableWhenPiped(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                          color=False)
    code = main(["analyze", str(SAMPLE), "--out", str(tmp_path / "ds"), "--master", "local[2]"], env)
    assert code == ExitCode.OK, err.getvalue()
    assert "per second (items the producer pushed, bytes the server sent)" in out.getvalue()  # the table, not JSON


def test_the_samples_plots_are_not_empty(spark: Any, tmp_path: Path) -> None:
    """Issue 18: the sample's plots looked empty: single points drawn as lines without markers, x in epoch
    seconds with an offset, unacked-bytes.png with negative times (its per-second rows start at the whole
    second before the capture's first message). Now: time since the first message (ms, the sample being
    shorter than a second), never below zero, markers on the few points, the unacknowledged bytes' shape."""
    from matplotlib import pyplot  # noqa: PLC0415

    from dcpctl.pipeline import analyses, job, plots  # noqa: PLC0415
    from dcpctl.protocol.message import DecodeOptions  # noqa: PLC0415

    result = job.run(spark, [str(SAMPLE)], frozenset({11210}), DecodeOptions(), tmp_path / "ds", 600)
    report = analyses.report(job.read(spark, result), result.partials, plots=True)
    first, last = report["span"]
    times = [r["ts"] for r in decoded(SAMPLE)]
    assert (first, last) == (pytest.approx(min(times)), pytest.approx(max(times)))
    assert min(r["second"] for r in report["per_second"]) < first  # the cause of the negative times
    windows = {row["connection"]: row["buffer_size"] for row in report["flow_control"]}
    made = plots.figures(report["span"], report["progress"], report["rollbacks"], report["per_second"],
                         report["unacked"], windows)
    try:
        for name, figure in made:
            figure.canvas.draw()
            for axes in figure.axes:
                assert axes.get_title(), name
                assert axes.get_ylabel(), name
                assert axes.xaxis.get_offset_text().get_text() == "", name
                xs = [x for line in axes.get_lines() for x in line.get_xdata()]
                xs += [x for patch in axes.patches for x in patch.get_data().edges]
                assert xs, name
                assert 0 <= min(xs) <= max(xs) <= (last - first) * 1000 + 1e-9, name
                assert axes.get_xlim()[0] > -0.05 * (last - first) * 1000, name
            assert figure.axes[-1].get_xlabel().endswith("(ms)"), name
        named = dict(made)
        progress, rollback = named["seqno-progress.png"].axes[0].get_lines()
        assert list(rollback.get_xdata()) == [pytest.approx((report["rollbacks"][0]["ts"] - first) * 1000)] * 2
        assert progress.get_marker() == "o"
        assert list(progress.get_ydata()) == [201, 202, 203]
        [unacked] = named["unacked-bytes.png"].axes[0].get_lines()
        assert unacked.get_marker() == "o"
        assert max(unacked.get_ydata()) == 357
        assert len(set(unacked.get_ydata())) > 3  # its rise and the ack, not one point
        assert "off the scale" in unacked.get_label()  # a 1 MiB window against 357 bytes: named
        assert len(named["overview.png"].axes) == 3
    finally:
        for _, figure in made:
            pyplot.close(figure)


def test_the_job_runs_under_spark_submit(spark_module: None, tmp_path: Path) -> None:
    """spark-submit starts the JVM and runs dcpctl's entry point as its Python driver: the whole job runs
    there and writes the same report and dataset."""
    import pyspark  # noqa: PLC0415

    import dcpctl  # noqa: PLC0415

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    entry = Path(dcpctl.__file__).parent / "__main__.py"
    done = subprocess.run([str(submit), "--master", "local[1]", str(entry), "analyze", str(SAMPLE),
                           "--out", str(tmp_path / "ds"), "-F", "json"], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["messages"] == len(decoded(SAMPLE))
    assert [r["rollback_seqno"] for r in report["rollbacks"]] == [200]
    assert list((tmp_path / "ds").glob("*.parquet"))


def test_ctrl_c_is_one_line_and_exit_130(spark_module: None, tmp_path: Path) -> None:
    """Whenever it comes (starting Spark, decoding, querying), a Ctrl-C ends analyze with one line: no py4j
    traceback of the call it interrupted, no JVM errors about the tasks it cancelled."""
    big = tmp_path / "big.pcap"
    big.write_bytes(write_capture(session_packets() * 2000))
    scratch = tmp_path / "tmp"  # TMPDIR, where Spark's scratch directory goes (job.scratch_directory)
    scratch.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "dcpctl", "analyze", str(big), "--out", str(tmp_path / "ds"),
                             "--master", "local[2]", "-F", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env={**os.environ, "TMPDIR": str(scratch)})
    time.sleep(9)
    made = list(scratch.glob("dcpctl-spark-*"))
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends it: to the whole process group
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == ExitCode.INTERRUPTED, err.decode()[-2000:]
    assert err.decode().splitlines() == ["dcpctl: interrupted"]
    assert made, "no scratch directory while Spark ran"
    # the man page's promise: the scratch directory goes after a Ctrl-C too, not only after a timeout's kill
    assert not list(scratch.glob("dcpctl-spark-*"))


def test_after_ctrl_c_the_jvm_says_nothing_more(spark_module: None) -> None:
    """What the Ctrl-C path does to the JVM: its System.err, where a thread that stopping Spark interrupts
    prints its stack trace without going through the log, goes nowhere (a JVM of its own: the module's
    session keeps its standard error)."""
    script = """if True:
        from dcpctl.pipeline import job
        session = job.spark_session("local[1]", "quiet test")
        err = session.sparkContext._jvm.java.lang.System.err
        err.println("before quiet_jvm"); err.flush()
        job.quiet_jvm(session)
        session.sparkContext._jvm.java.lang.System.err.println("after quiet_jvm")
        session.stop()
        print("done")
    """
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "done"
    assert "before quiet_jvm" in done.stderr
    assert "after quiet_jvm" not in done.stderr


def test_out_replaces_only_a_dataset_dcpctl_wrote(spark: Any, tmp_path: Path) -> None:
    """--out . or --out ~ by mistake must not delete the user's files; a dataset of an earlier run is
    replaced; a destination that cannot be made is one line, exit 3, before Spark starts."""
    from dcpctl.pipeline import job  # noqa: PLC0415
    from dcpctl.protocol.message import DecodeOptions  # noqa: PLC0415

    def analyze(*args: str) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                          color=False)
        return main(["analyze", str(SAMPLE), "-F", "json", *args], env), err.getvalue()

    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    code, err = analyze("--out", str(mine))
    assert code == ExitCode.INPUT
    assert "is not a dataset dcpctl wrote" in err
    assert err.count("\n") == 1
    assert (mine / "notes.txt").read_text() == "precious"
    (tmp_path / "file").write_text("x")
    for args in (["--out", str(tmp_path / "file")], ["--out", str(tmp_path / "file" / "ds")],
                 ["--out", str(tmp_path / "ok"), "--plots", str(tmp_path / "file" / "plots")]):
        code, err = analyze(*args)
        assert code == ExitCode.INPUT, args
        assert err.startswith("dcpctl: error: --"), err
        assert err.count("\n") == 1, err
    first = job.run(spark, [str(SAMPLE)], frozenset({11210}), DecodeOptions(), tmp_path / "ds", 600)
    again = job.run(spark, [str(SAMPLE)], frozenset({11210}), DecodeOptions(), tmp_path / "ds", 600)
    assert first.messages == again.messages == job.read(spark, again).count()
    marker = tmp_path / "ds" / job.DATASET_MARKER
    assert marker.read_text() == job.MARKER_TEXT  # whole, once every task wrote its file
    # a run stopped before its end (here: at its start) leaves the marker saying the dataset is incomplete;
    # one stopped while it replaced the marker leaves the whole one's file, which the next run removes
    (tmp_path / "ds" / f"{job.DATASET_MARKER}.complete").write_text(job.MARKER_TEXT)
    job.replace(tmp_path / "ds")
    assert marker.read_text() == job.MARKER_WRITING
    assert sorted(path.name for path in (tmp_path / "ds").iterdir()) == [job.DATASET_MARKER]


def test_out_never_deletes_an_input_another_file_or_through_a_link(spark_module: None, tmp_path: Path) -> None:
    """Issue 17: a dataset directory that also held the input capture and other files lost them all
    (rmtree), and a link to a dataset had its target emptied. Now such an --out is refused in one line,
    exit 3, before Spark starts, and nothing is deleted; a dataset alone is replaced file by file."""
    import pyarrow.parquet as pq  # noqa: PLC0415

    from dcpctl.pipeline import job, plots  # noqa: PLC0415
    from dcpctl.protocol.message import DecodeOptions  # noqa: PLC0415

    def analyze(*args: str) -> tuple[int, str]:
        err = io.StringIO()
        env = Environment(stdout=io.StringIO(), stderr=err, stdin=io.BytesIO(), stdout_isatty=False,
                          stderr_isatty=False, color=False)
        return main(["analyze", "-F", "json", "--master", "local[1]", *args], env), err.getvalue()

    def contents(directory: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file() and not p.is_symlink()}

    dataset = tmp_path / "X"
    code, err = analyze(str(SAMPLE), "--out", str(dataset), "--plots", str(dataset / "plots"))  # as the README
    assert code == ExitCode.OK, err
    shutil.copy(SAMPLE, dataset / "in.pcap")
    (dataset / "notes.txt").write_text("precious")
    before = contents(dataset)
    assert {job.DATASET_MARKER, "in.pcap", "notes.txt"} < before.keys()
    assert any(name.endswith(".parquet") for name in before)
    for args, says in ((["--out", str(dataset), str(dataset / "in.pcap")], "holds the input"),
                       (["--out", str(dataset), str(SAMPLE)], "which dcpctl did not write")):
        code, err = analyze(*args)
        assert code == ExitCode.INPUT, err
        assert says in err, err
        assert err.startswith("dcpctl: error: --out"), err
        assert err.count("\n") == 1, err
        assert contents(dataset) == before
    with pytest.raises(FileExistsError):  # the job itself checks too
        job.run(None, [str(dataset / "in.pcap")], frozenset({11210}), DecodeOptions(), dataset, 600)
    assert contents(dataset) == before

    # a dataset alone, reached through a link: refused, its files stay
    (dataset / "in.pcap").unlink()
    (dataset / "notes.txt").unlink()
    alone = contents(dataset)
    link = tmp_path / "link"
    link.symlink_to(dataset, target_is_directory=True)
    code, err = analyze("--out", str(link), str(SAMPLE))
    assert code == ExitCode.INPUT, err
    assert "symbolic link" in err, err
    assert err.count("\n") == 1, err
    assert contents(dataset) == alone

    # links inside a dataset are not followed (nor deleted): a part file or the marker pointing out
    outside = tmp_path / "outside.txt"
    outside.write_text("elsewhere")
    for name in ("part-00099.parquet", job.DATASET_MARKER):
        spare = tmp_path / "spare"
        shutil.copytree(dataset, spare)
        (spare / name).unlink(missing_ok=True)
        (spare / name).symlink_to(outside)
        code, err = analyze("--out", str(spare), str(SAMPLE))
        assert code == ExitCode.INPUT, err
        assert err.count("\n") == 1, err
        assert outside.read_text() == "elsewhere"
        assert (spare / name).is_symlink()
        shutil.rmtree(spare)

    # a dataset alone (its plots too) is replaced: only the files a run writes are deleted, a killed task's
    # leftovers with them, and a directory the user made stays
    (dataset / ".part-00007.attempt-1.parquet").write_bytes(b"a killed task's file")
    (dataset / plots.NAMES[1]).write_bytes(b"a plot of a run given --plots as its --out")
    (dataset / "empty").mkdir()
    code, err = analyze(str(SAMPLE), "--out", str(dataset), "--plots", str(dataset / "plots"))
    assert code == ExitCode.OK, err
    assert not (dataset / ".part-00007.attempt-1.parquet").exists()
    assert not (dataset / plots.NAMES[1]).exists()
    assert (dataset / "empty").is_dir()
    assert sorted(p.name for p in (dataset / "plots").iterdir()) == sorted(plots.NAMES)
    assert sum(pq.ParquetFile(p).metadata.num_rows for p in dataset.glob("part-*.parquet")) == len(decoded(SAMPLE))


def test_a_bad_master_or_java_home_is_one_line_before_spark_starts(spark_module: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 17: --master bogus://x, a spark:// master that refuses and JAVA_HOME=/nonexistent were JVM and
    Python stack traces (a refusing master after 64 s); now one line each, at once, with its exit code."""
    import socket  # noqa: PLC0415

    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)

    def analyze(*args: str) -> tuple[int, str]:
        err = io.StringIO()
        env = Environment(stdout=io.StringIO(), stderr=err, stdin=io.BytesIO(), stdout_isatty=False,
                          stderr_isatty=False, color=False)
        return main(["analyze", str(SAMPLE), "-F", "json", *args], env), err.getvalue()

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    for args, code, says in ((["--master", "bogus://x"], ExitCode.USAGE, "not a Spark master"),
                             (["--master", "spark://nohostport"], ExitCode.USAGE, "is not HOST:PORT"),
                             (["--master", f"spark://127.0.0.1:{closed}"], ExitCode.CONNECTION, "connection refused"),
                             # Spark's launcher and client would fail in pages of Java stack traces
                             (["--master", "yarn"], ExitCode.USAGE, "neither HADOOP_CONF_DIR nor YARN_CONF_DIR"),
                             (["--master", f"k8s://https://127.0.0.1:{closed}"], ExitCode.CONNECTION,
                              "connection refused"),
                             (["--master", "k8s://https://"], ExitCode.USAGE, "not k8s://[https://]HOST[:PORT]"),
                             # a Python worker per thread: local[99999] ran for minutes, local[512] was OOM-killed
                             (["--master", "local[99999]"], ExitCode.USAGE, "task threads on this machine")):
        started = time.monotonic()
        got, err = analyze(*args)
        assert got == code, err
        assert says in err, err
        assert err.startswith("dcpctl: error: --master "), err
        assert err.count("\n") == 1, err
        assert time.monotonic() - started < 10
    monkeypatch.setenv("JAVA_HOME", "/nonexistent")
    got, err = analyze("--master", "local[1]")
    assert got == ExitCode.USAGE, err
    assert err == ("dcpctl: error: JAVA_HOME=/nonexistent has no bin/java, and Spark runs JAVA_HOME's java: "
                   "point it at a Java runtime (17 or newer), or unset it to use the java on PATH\n")


def test_a_master_that_does_not_answer_is_a_timeout(spark_module: None, tmp_path: Path) -> None:
    """A spark:// master that accepts connections and says nothing cost Spark's client 60 s of retries and
    pages of stack traces; now --master-timeout after the JVM is up, one line, exit 6. The JVM it kills
    leaves no scratch directory behind (Spark removes its own only when the JVM ends well)."""
    import socket  # noqa: PLC0415

    scratch = tmp_path / "tmp"  # the temporary directory of dcpctl and of the JVM (which ignores TMPDIR)
    scratch.mkdir()
    environ = {**os.environ, "TMPDIR": str(scratch), "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={scratch}"}
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel accepts the connections; nobody ever answers
        master = f"spark://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "dcpctl", "analyze", str(SAMPLE), "--out", str(tmp_path / "ds"),
                               "-F", "json", "--master", master, "--master-timeout", "2"], capture_output=True,
                              text=True, timeout=120, check=False, env=environ)
        took = time.monotonic() - started
    assert done.returncode == ExitCode.TIMEOUT, done.stderr[-2000:]
    assert done.stderr.splitlines()[-1] == (f"dcpctl: error: --master {master}: the master did not take the "
                                            "application in 2 s (--master-timeout)")
    assert "Traceback" not in done.stderr
    assert "\tat " not in done.stderr, done.stderr[-2000:]  # no JVM stack trace
    assert took < 45  # Spark's own client gives up after 60 s
    assert list(scratch.iterdir()) == []


def test_a_failed_task_is_one_line(spark: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 17: a task's exception (deep JSON's RecursionError then) was a 180-line trace: the JVM's log of
    it and Python's. Now the JVM logs nothing of it and analyze says its last line: exit 3 when it is a
    capture that cannot be read (here: gone between planning and the task), else 1."""
    from dcpctl.commands.analyze import _spark_failed  # noqa: PLC0415
    from dcpctl.pipeline import job  # noqa: PLC0415
    from dcpctl.protocol.message import DecodeOptions  # noqa: PLC0415

    capture = tmp_path / "gone.pcap"
    shutil.copy(SAMPLE, capture)
    planned = job.partitions_for([str(capture)], 1 << 20)
    capture.unlink()
    capfd.readouterr()
    with pytest.raises(job.spark_errors()) as raised:
        job.run(spark, [str(capture)], frozenset({11210}), DecodeOptions(), tmp_path / "ds", planned=planned)
    error = _spark_failed(raised.value)
    assert error.code == ExitCode.INPUT
    assert str(error) == f"a Spark task failed: FileNotFoundError: [Errno 2] No such file or directory: '{capture}'"
    assert "\tat " not in capfd.readouterr().err  # the JVM printed no stack trace


def test_without_java_a_clear_message(spark_module: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from dcpctl.pipeline import job  # noqa: PLC0415

    monkeypatch.setattr(job.shutil, "which", lambda _name: None)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    err = io.StringIO()
    env = Environment(stdout=io.StringIO(), stderr=err, stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False)
    assert main(["analyze", str(SAMPLE)], env) == ExitCode.USAGE
    assert "needs a Java runtime" in err.getvalue()
    assert err.getvalue().count("\n") == 1


def test_pcapng_tls_and_an_empty_capture(spark: Any, tmp_path: Path) -> None:
    from dcpctl.pipeline import analyses, job  # noqa: PLC0415
    from dcpctl.protocol.message import DecodeOptions  # noqa: PLC0415

    editcap = shutil.which("editcap")
    if editcap is None:
        if os.environ.get("CI"):
            pytest.fail("editcap (Wireshark) is missing: .ci/run installs it")
        pytest.skip("editcap (Wireshark) not installed")
    pcap, pcapng = tmp_path / "p.pcap", tmp_path / "p.pcapng"
    planted(pcap)
    subprocess.run([editcap, "-F", "pcapng", str(pcap), str(pcapng)], check=True, timeout=60)
    columns = ["connection", "direction", "offset", "opcode", "by_seqno", "key", "unacked_bytes", "sequence"]

    def rows(path: Path, name: str) -> list[tuple[Any, ...]]:
        result = job.run(spark, [str(path)], frozenset({11210}), DecodeOptions(), tmp_path / name, 600)
        return sorted(tuple(r) for r in job.read(spark, result).select(*columns).collect())

    assert rows(pcapng, "ng") == rows(pcap, "classic")  # pcapng's payloads travel, pcap's are read back

    out = io.BytesIO()
    writer = PcapWriter(out)
    tls = TcpConversation(writer, ("127.0.0.1", 50400), ("127.0.0.1", 11207))
    tls.handshake()
    tls.send(True, b"\x16\x03\x01" + bytes(60))
    tls.close()
    (tmp_path / "tls.pcap").write_bytes(out.getvalue())
    result = job.run(spark, [str(tmp_path / "tls.pcap")], frozenset({11210}), DecodeOptions(), tmp_path / "tls", 600)
    assert result.messages == 0
    assert any("tls_port" in n and "50400" in n for n in result.notices), result.notices
    report = analyses.report(job.read(spark, result), result.partials, plots=True)
    assert report["messages"] == 0
    assert report["vbuckets"] == report["rollbacks"] == report["flow_control"] == report["progress"] == []


def test_a_ring_of_files_is_analysed_as_the_whole_capture(spark: Any, tmp_path: Path) -> None:
    """tcpdump -C's names read in number order, each file continuing the one before: the rows are the whole
    capture's records, frame numbers included, and its notices the whole capture's: none says a message was cut."""
    from dcpctl.pipeline import job  # noqa: PLC0415
    from dcpctl.protocol.message import DecodeOptions  # noqa: PLC0415

    whole = tmp_path / "planted.pcap"
    planted(whole)
    editcap = shutil.which("editcap")
    assert editcap is not None, "editcap (Debian package tshark) is needed: .ci/run installs it"
    ring = tmp_path / "ring"
    ring.mkdir()
    subprocess.run([editcap, "-c", "5", str(whole), str(ring / "cut.pcap")], check=True)
    cut = sorted(ring.iterdir())
    assert len(cut) > 10
    for n, path in enumerate(cut):
        path.rename(ring / f"cap.pcap{n or ''}")
    expected = sorted(decoded(whole), key=_order)
    paths = expand([str(ring / "cap.pcap*")])
    result = job.run(spark, paths, frozenset({11210}), DecodeOptions(), tmp_path / "out", 600, records=True)
    alone = job.run(spark, [str(whole)], frozenset({11210}), DecodeOptions(), tmp_path / "alone", 600)
    assert alone.notices  # the planted gap, which the ring's capture (named after its first file) has too
    assert result.notices == [n.replace(str(whole), paths[0]) for n in alone.notices]
    rows = sorted(job.read(spark, result, records=True).collect(), key=lambda r: (r.connection, r.direction, r.offset))
    assert [json.loads(r.record) for r in rows] == expected


def test_a_task_that_cannot_write_its_file_names_the_output() -> None:
    """A full disk under --out was 'a Spark task failed: OSError: [Errno 28] Error writing bytes to file'."""
    from dcpctl.pipeline import job  # noqa: PLC0415

    full = OSError(28, "No space left on device")
    assert job._writing(full, "/data/case")
    assert job._writing(OSError("Error writing bytes to file. Detail: [errno 28] No space left on device"), "/d")
    assert not job._writing(FileNotFoundError(2, "No such file or directory", "/data/case.pcap"), "/data/case")
    traceback = ("Traceback (most recent call last):\n  File \"job.py\", line 1, in task\n"
                 "dcpctl.pipeline.job.OutputError: --out /data/case: cannot write part-00003.parquet: "
                 "No space left on device\n")
    assert job.failure(Exception(traceback)) == (
        "--out /data/case: cannot write part-00003.parquet: No space left on device", True)


@pytest.mark.parametrize("option", ["--out", "--plots"])
def test_a_directory_no_one_can_make_is_refused_before_spark_starts(option: str, tmp_path: Path) -> None:
    """/proc takes no new directory, even from root, whose permission bits pass everywhere: that was found
    only after Spark had started, ten seconds in. A directory is now tried and removed where it would go."""
    err = io.StringIO()
    env = Environment(stdout=io.StringIO(), stderr=err, stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False)
    others = ["--out", str(tmp_path / "out")] if option == "--plots" else []
    started = time.monotonic()
    code = main(["analyze", str(SAMPLE), *others, option, "/proc/dcpctl-test/dataset"], env)
    assert code == ExitCode.INPUT, err.getvalue()
    assert err.getvalue() == f"dcpctl: error: {option} /proc/dcpctl-test/dataset: cannot create a directory in /proc " \
        "(no such file)\n"
    assert time.monotonic() - started < 5
    assert not (tmp_path / "out").exists()


def test_a_jvm_gone_is_said_so_not_as_a_bug_or_an_out_error() -> None:
    """py4j's ConnectionRefusedError (the JVM OOM-killed) is an OSError: it was caught as "--out DIR:
    Connection refused", then stopping the session raised it again as a traceback."""
    from dcpctl.commands.analyze import _spark_failed  # noqa: PLC0415

    failed = _spark_failed(ConnectionRefusedError(111, "Connection refused"))
    assert (str(failed), failed.code) == (
        "Spark's JVM went away (killed, or out of memory or threads: its log is above)", ExitCode.FAILURE)

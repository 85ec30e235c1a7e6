"""analyze's rows without Spark: each message read once, by the decoder; a plain item's row taken from the
decoded message is exactly the row its JSON record gives; the columns are the catalogue's; and the columns
derived in stream order (previous seqno, stalls) say what happened."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from capturekit import ROOT, session_packets, write_capture
from hypothesis import given, settings
from hypothesis import strategies as st

from dcpctl.dcp.observed import Observed
from dcpctl.pipeline import job, schema
from dcpctl.protocol import message, reader
from dcpctl.protocol.encode import encode
from dcpctl.protocol.fields import catalogue
from dcpctl.protocol.message import DecodeOptions, decode, item_key
from dcpctl.protocol.value import Xattr, build_xattrs, snappy_compress
from dcpctl.sources.pcapchunks import plan
from dcpctl.sources.pcapwriter import LINKTYPE_ETHERNET, LINKTYPE_RAW, PcapWriter, TcpConversation

SAMPLE = ROOT / "samples" / "dcp-session.pcap"
PORTS = frozenset({11210})
NAMES = [name for name, _ in schema.COLUMNS]


def table_of(path: Path, *, records: bool, batch: int = 1 << 30) -> Any:
    """The rows analyze writes, as one Arrow table: gathered as a task gathers them, ``batch`` rows at a time,
    and turned into Arrow batches as the task does."""
    import pyarrow as pa  # noqa: PLC0415

    chunks, _ = plan(str(path), 1000)  # chunks of a few frames: a connection's runs come from several
    runs = sorted((r for c in chunks for r in job.chunk_runs(c, PORTS)), key=lambda r: r[:3])
    rows = schema.Rows(records=records)
    notices: list[str] = []
    types = job._arrow_types([(name, job.SPARK_TYPES[kind]) for name, kind in schema.column_types(records=records)])
    batches = [job.gathered_to_arrow(rows.take(), types)
               for _ in job.decode_connections(job.segments_of(runs, notices), ("dcp", None, False), PORTS, rows,
                                               notices)
               if len(rows) >= batch]
    batches.append(job.gathered_to_arrow(rows.take(), types))
    return pa.Table.from_batches(batches)


def rows_of(path: Path, *, records: bool, batch: int = 1 << 30) -> list[tuple[Any, ...]]:
    """The rows analyze writes (the Spark types: u64 columns hold their bits signed), as tuples."""
    return [tuple(row.values()) for row in table_of(path, records=records, batch=batch).to_pylist()]


def both_ways(path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The rows as analyze builds them, and as the record alone gives them (``--records``, minus the record).
    Gathered a few rows at a time too (batches cut anywhere, plain items' rows or not), they are the
    same rows."""
    fast = rows_of(path, records=False)
    assert rows_of(path, records=False, batch=3) == fast
    return fast, [row[:-1] for row in rows_of(path, records=True)]


def hello(collections: bool) -> list[tuple[bool, bytes]]:
    features = ["Xerror", "Collections"] if collections else ["Xerror"]
    return [(True, encode({"magic": "ClientRequest", "opcode": "HELLO", "opaque": 1, "key": "t",
                           "features": features}, fix_lengths=True)),
            (False, encode({"magic": "ClientResponse", "opcode": "HELLO", "status": "Success", "opaque": 1,
                            "features": features}, fix_lengths=True))]


def stream_open(vbucket: int, opaque: int) -> list[tuple[bool, bytes]]:
    return [(True, encode({"magic": "ClientRequest", "opcode": "DCP_STREAM_REQ", "vbucket": vbucket, "opaque": opaque,
                           "flags": 0, "reserved": 0, "start_seqno": 0, "end_seqno": 2**64 - 1, "vbucket_uuid": 0,
                           "snap_start_seqno": 0, "snap_end_seqno": 0}, fix_lengths=True)),
            (False, encode({"magic": "ClientResponse", "opcode": "DCP_STREAM_REQ", "status": "Success",
                            "opaque": opaque, "failover_log": [{"vbucket_uuid": 77, "seqno": 0}]}, fix_lengths=True)),
            (False, encode({"magic": "ClientRequest", "opcode": "DCP_SNAPSHOT_MARKER", "vbucket": vbucket,
                            "opaque": opaque, "snap_start_seqno": 1, "snap_end_seqno": 40, "snapshot_flags": 1},
                           fix_lengths=True))]


ITEM_OPCODES = ("DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION")
keys = st.one_of(st.text(min_size=0, max_size=12), st.binary(min_size=0, max_size=6))
values = st.one_of(st.sampled_from([b"", b'{"a":1}', b"{bad json", b"\xff\xfe", b"plain text", b"[1, 2]\n"]),
                   st.binary(max_size=20))


@st.composite
def item_packet(draw: st.DrawFn, collections: bool) -> bytes:
    opcode = draw(st.sampled_from(ITEM_OPCODES))
    seqno = draw(st.integers(0, 60))
    key = draw(keys)
    key_bytes = key.encode() if isinstance(key, str) else key
    if collections:
        prefix = draw(st.sampled_from([b"\x00", b"\x08", b"\x7f", b"\x80\x01", b"\xff"]))
        key_bytes = prefix + key_bytes
    value = draw(values)
    datatype = draw(st.sampled_from([0, 1, 1, 2, 4, 5, 7]))  # snappy and xattr items take the fast row too
    if datatype & 4 and draw(st.booleans()):  # as often whole as not: the record then reads them
        value = build_xattrs([Xattr("_sync", '{"rev":"1-a"}')]) + value
    if datatype & 2 and draw(st.booleans()):
        value = snappy_compress(value)
    record: dict[str, Any] = {"magic": "ClientRequest", "opcode": opcode, "vbucket": 3, "opaque": 9,
                              "cas": draw(st.integers(0, 2**64 - 1)), "datatype": datatype,
                              "by_seqno": seqno, "rev_seqno": draw(st.integers(0, 2**64 - 1)),
                              "key": key_bytes.hex(), "key_encoding": "hex", "value": value.hex(),
                              "value_encoding": "hex"}
    if opcode == "DCP_MUTATION":
        record.update(flags=0, expiration=0, lock_time=0, nmeta=draw(st.sampled_from([0, 0, 0, 2])), nru=0)
    elif opcode == "DCP_EXPIRATION":
        record["delete_time"] = 0
    elif draw(st.booleans()):
        record.update(delete_time=0, unused=0)
    else:
        record["nmeta"] = 0
    return encode(record, fix_lengths=True)


@settings(max_examples=60, deadline=None)
@given(st.booleans().flatmap(lambda c: st.tuples(st.just(c), st.lists(item_packet(c), min_size=1, max_size=12))))
def test_the_fast_item_row_is_the_records_row(tmp_path_factory: Any, drawn: tuple[bool, list[bytes]]) -> None:
    collections, items = drawn
    path = tmp_path_factory.mktemp("rows") / "items.pcap"
    packets = hello(collections) + stream_open(3, 9) + [(False, item) for item in items]
    path.write_bytes(write_capture(packets, segment_size=97))
    fast, slow = both_ways(path)
    assert fast == slow


def test_the_fast_path_is_taken_for_plain_items_and_agrees_on_real_sessions(tmp_path: Path, monkeypatch: Any) -> None:
    items = [encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 3, "opaque": 9, "cas": n,
                     "datatype": 1, "by_seqno": n, "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0,
                     "nmeta": 0, "nru": 0, "key": b"\x08k".hex(), "key_encoding": "hex", "value": '{"n":1}'},
                    fix_lengths=True) for n in range(1, 30)]
    for seqno, raw in enumerate(items, start=1):
        assert item_key(decode(raw, 0, DecodeOptions(collections=True))) == ("ClientRequest", "DCP_MUTATION", 8, "k",
                                                                           seqno, 1)
    path = tmp_path / "plain.pcap"
    path.write_bytes(write_capture(hello(True) + stream_open(3, 9) + [(False, i) for i in items]))
    recorded: list[str] = []
    record = schema.record_of

    def counted(observed: Observed) -> dict[str, Any]:
        recorded.append(observed.packet.opcode_name)
        return record(observed)

    monkeypatch.setattr(schema, "record_of", counted)
    assert len(rows_of(path, records=False)) == 5 + len(items)
    assert recorded  # the bootstrap's rows come from their records; the items' never build one
    assert "DCP_MUTATION" not in recorded
    monkeypatch.undo()
    for capture in (path, SAMPLE):
        fast, slow = both_ways(capture)
        assert fast == slow, capture
    assert fast[0][NAMES.index("opcode")] == "HELLO"


def test_previous_seqno_and_snapshot_follow_the_stream(tmp_path: Path) -> None:
    path = tmp_path / "session.pcap"
    path.write_bytes(write_capture(session_packets()))
    rows = [dict(zip(NAMES, row, strict=True)) for row in rows_of(path, records=False)]
    assert [r["sequence"] for r in rows] == list(range(len(rows)))  # one connection, in capture order
    assert [r["ts"] for r in rows] == sorted(r["ts"] for r in rows)
    items = [r for r in rows if r["opcode"] in ITEM_OPCODES]
    assert items
    seqnos = [r["by_seqno"] for r in items]
    assert [r["previous_seqno"] for r in items] == [None, *seqnos[:-1]]
    assert all(r["snapshot_start_seqno"] <= r["by_seqno"] <= r["snapshot_end_seqno"] for r in items)


def test_a_full_window_that_blocks_the_producer_is_a_stall(tmp_path: Path) -> None:
    control = [(True, encode({"magic": "ClientRequest", "opcode": "DCP_CONTROL", "opaque": 2,
                              "key": "connection_buffer_size", "value": "500"}, fix_lengths=True)),
               (False, encode({"magic": "ClientResponse", "opcode": "DCP_CONTROL", "status": "Success", "opaque": 2},
                              fix_lengths=True))]
    items = [encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 3, "opaque": 9, "cas": 1,
                     "datatype": 0, "by_seqno": n, "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0,
                     "nmeta": 0, "nru": 0, "key": f"key-{n}", "value": "x" * 100}, fix_lengths=True)
             for n in range(1, 9)]
    ack = encode({"magic": "ClientRequest", "opcode": "DCP_BUFFER_ACKNOWLEDGEMENT", "vbucket": 0, "opaque": 3,
                  "bytes_to_ack": 400}, fix_lengths=True)
    out = io.BytesIO()
    from dcpctl.sources.pcapwriter import PcapWriter, TcpConversation  # noqa: PLC0415

    conversation = TcpConversation(PcapWriter(out))
    conversation.handshake()
    for from_client, data in hello(False) + control + stream_open(3, 9):
        conversation.send(from_client, data)
    # as the server does (reference 8.1): it sends while its outstanding bytes are below the window, so the
    # 44-byte marker and three 160-byte items fill the 500-byte window and the producer stops
    for item in items[:3]:
        conversation.send(False, item)
    conversation.send(True, ack, ts=1_700_000_010.0)  # the consumer acks ten seconds later
    for item in items[3:6]:  # 124 + 3 x 160: full again, and nobody acks before the capture ends
        conversation.send(False, item)
    conversation.close()
    path = tmp_path / "stall.pcap"
    path.write_bytes(out.getvalue())
    rows = [dict(zip(NAMES, row, strict=True)) for row in rows_of(path, records=False)]
    blocked = [r for r in rows if r["blocked_ms"] is not None]
    assert [r["by_seqno"] for r in blocked] == [4]
    assert 9_990 < blocked[0]["blocked_ms"] < 10_000
    assert {r["buffer_size"] for r in rows if r["opcode"] in ITEM_OPCODES} == {500}
    assert rows[-1]["unacked_bytes"] >= 500  # full again at the end, nobody acked: stuck
    assert fast_equals_slow(path)


def fast_equals_slow(path: Path) -> bool:
    fast, slow = both_ways(path)
    return fast == slow


def test_each_message_is_read_once_by_the_decoder(tmp_path: Path, monkeypatch: Any) -> None:
    """No second reader: the rows come from the messages decode() made, one decode() per row, and the plain
    plain readers (a second reading of the same bytes) are never asked."""
    import dcpctl.sources.capture  # noqa: PLC0415

    path = tmp_path / "session.pcap"
    path.write_bytes(write_capture(session_packets()))
    decoded = []

    def counted(raw: bytes, offset: int = 0, options: DecodeOptions = message.DEFAULT_OPTIONS) -> message.Message:
        decoded.append(offset)
        return decode(raw, offset, options)

    def refused(*_: Any) -> None:
        raise AssertionError("a plain item read again, outside decode()")

    monkeypatch.setattr(dcpctl.sources.capture, "decode", counted)
    monkeypatch.setattr(reader.ItemReaders, "read", refused)
    for capture in (path, SAMPLE):
        decoded.clear()
        rows = rows_of(capture, records=False)
        assert len(rows) == len(decoded) > 10, capture


def test_every_column_is_declared_once() -> None:
    """The record's columns are named and typed by the field catalogue; the derived ones are not fields of
    it (diagnostics excepted: the column keeps three of the record's five keys of each)."""
    known = {f.name: f.type for f in catalogue()}
    types = dict(schema.COLUMNS)
    assert all(types[name] == known[name] for name in schema.RECORD_COLUMNS)
    derived = {name for name, _, _ in schema.DERIVED_COLUMNS}
    assert derived & known.keys() == {"diagnostics"}
    assert [name for name, _ in schema.COLUMNS] == [*schema.RECORD_COLUMNS, *(n for n, _, _ in schema.DERIVED_COLUMNS)]


def test_columns_are_typed_from_the_catalogue() -> None:
    types = dict(schema.COLUMNS)
    assert types["by_seqno"] == "u64"
    assert types["vbucket"] == "u16"
    assert types["opaque"] == "u32"
    assert types["diagnostics"] == "list[diagnostic]"
    ddl = job.message_ddl()
    assert "by_seqno long" in ddl
    assert "end_seqno" in schema.U64_COLUMNS
    assert "record string" not in ddl
    assert job.message_ddl(records=True).endswith("record string")


def test_the_analyses_partials_do_not_depend_on_batching(tmp_path: Path) -> None:
    from dcpctl.pipeline import rollup  # noqa: PLC0415

    test_a_full_window_that_blocks_the_producer_is_a_stall(tmp_path)  # writes stall.pcap
    import pyarrow as pa  # noqa: PLC0415

    table = pa.concat_tables([table_of(tmp_path / "stall.pcap", records=False), table_of(SAMPLE, records=False)])
    rows = table.num_rows
    results = []
    for size in (1, 3, rows):
        partials = rollup.Partials()
        for start in range(0, rows, size):
            partials.extend(rollup.partial(table.slice(start, size).combine_chunks().to_batches()[0], 1000.0))
        results.append((rollup.merge(partials), partials.gaps, partials.requests, partials.stalls))
    assert results[0] == results[1] == results[2]
    (seconds, vbuckets), _, requests, stalls = results[0]
    assert sum(r["messages"] for r in seconds) == rows
    assert sorted((r["vb"], r["items"]) for r in vbuckets) == [(3, 6), (12, 3)]  # the stall capture's, the sample's
    assert [round(s["stalled_ms"]) for s in stalls] == [10000]
    assert [r["status"] for r in requests if r["direction"] == "server>client"] == ["Success", "Rollback", "Success"]


def test_connections_are_placed_heaviest_first_on_the_least_loaded_partition() -> None:
    equal = job.Placement.of({("f", f"c{n}"): 1000 for n in range(6)}, slots=8)
    assert sorted(equal.partitions.values()) == list(range(6))  # six equal connections: six tasks, not shared
    uneven = job.Placement.of({("f", "a"): 100, ("f", "b"): 60, ("f", "c"): 50, ("f", "d"): 10}, slots=2)
    assert uneven.count == 4  # two weighed partitions, two for connections the planner did not see
    assert uneven("f", "a") == uneven("f", "d") != uneven("f", "b") == uneven("f", "c")  # 110 and 110
    heavy = job.Placement.of({("f", "a"): 100, ("f", "b"): 10, ("f", "c"): 20}, slots=2)
    assert heavy("f", "a") == 0  # the heaviest partition starts first
    spare = {heavy("f", f"unseen-{n}") for n in range(40)}  # unseen: hashed over the spare partitions only
    assert spare == {2, 3}
    assert job.Placement.of({}, slots=4).count == 4  # a pcapng file: nothing weighed, all hashed


def test_the_planner_weighs_the_connections_the_runs_name(tmp_path: Path) -> None:
    path = tmp_path / "three.pcap"
    sizes = {50123: 4000, 50124: 2000, 50125: 500}  # items per connection, interleaved
    out = io.BytesIO()
    writer = PcapWriter(out)
    conversations = {port: TcpConversation(writer, ("127.0.0.1", port), ("127.0.0.1", 11210)) for port in sizes}
    for conversation in conversations.values():
        conversation.handshake()
    for seqno in range(1, 4001):
        for port, count in sizes.items():
            if seqno <= count:
                conversations[port].send(False, encode({
                    "magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 1, "opaque": 1, "by_seqno": seqno,
                    "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0, "nru": 0,
                    "key": f"k{seqno}", "value": "v" * 100}, fix_lengths=True))
    path.write_bytes(out.getvalue())
    planned = job.partitions_for([str(path)], 256 * 1024)
    named = {run[1] for chunk in planned.chunks for run in job.chunk_runs(chunk, PORTS) if run[9] is None}
    assert {connection for _, connection in planned.weights} == named
    weights = {connection.rsplit(":", 1)[1]: weight for (_, connection), weight in planned.weights.items()}
    assert weights["50123"] > weights["50124"] > weights["50125"]
    assert 1.5 < weights["50123"] / weights["50124"] < 2.5  # sampled, so near the 2:1 of the bytes


def test_item_row_functions_are_made_per_shape_not_per_plan_object() -> None:
    """Once decode's plan cache is full, a plan is made anew for each message: the row functions must not
    grow with them (one per magic, opcode and extras layout)."""
    import dataclasses  # noqa: PLC0415

    raw = encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 3, "opaque": 9, "by_seqno": 1,
                  "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0, "nru": 0, "key": "k",
                  "value": "v"}, fix_lengths=True)
    plan = decode(raw).plan
    first = schema._item_row(plan)
    before = len(schema._ITEM_ROWS)
    for _ in range(100):
        assert schema._item_row(dataclasses.replace(plan)) is first
    assert len(schema._ITEM_ROWS) == before


def ring_rows(paths: list[Path]) -> list[tuple[Any, ...]]:
    """The rows analyze writes for several files, planned as analyze plans them (chunks of a few frames)."""
    planned = job.partitions_for([str(p) for p in paths], 1000)
    runs = sorted((r for c in planned.chunks for r in job.chunk_runs(c, PORTS)), key=lambda r: r[:3])
    rows = schema.Rows(records=False)
    notices: list[str] = []
    for _ in job.decode_connections(job.segments_of(runs, notices), ("dcp", None, False), PORTS, rows, notices):
        pass
    assert notices == []
    types = job._arrow_types([(name, job.SPARK_TYPES[kind]) for name, kind in schema.column_types(records=False)])
    return [tuple(row.values()) for row in job.gathered_to_arrow(rows.take(), types).to_pylist()]


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_a_ring_of_files_gives_the_whole_captures_rows(tmp_path: Path, fmt: str) -> None:
    """A ring (cut by editcap as tcpdump cuts) is planned as one capture: each file continues the one before,
    its frames numbered on, so every connection is decoded across the cuts as from the whole file."""
    whole = tmp_path / "whole.pcap"
    whole.write_bytes(write_capture(session_packets(), segment_size=13))
    editcap = shutil.which("editcap")
    assert editcap is not None, "editcap (Debian package tshark) is needed: .ci/run installs it"
    (tmp_path / "ring").mkdir()
    subprocess.run([editcap, "-F", fmt, "-c", "9", str(whole), str(tmp_path / "ring" / f"r.{fmt}")], check=True)
    files = sorted((tmp_path / "ring").iterdir())
    assert len(files) > 5
    planned = job.partitions_for([str(p) for p in files], 1000)
    assert {chunk.capture for chunk in planned.chunks if chunk.path != str(files[0])} == {str(files[0])}
    assert sorted({chunk.frame_base for chunk in planned.chunks}) == [9 * n for n in range(len(files))]
    expected = rows_of(whole, records=False)
    assert len(expected) > 20
    assert sorted(ring_rows(files), key=repr) == sorted(expected, key=repr)
    # the same files, the first one last: it begins before the one before it ended, so is a capture of its own
    planned = job.partitions_for([str(p) for p in [*files[1:], files[0]]], 1000)
    assert [chunk.capture for chunk in planned.chunks if chunk.path == str(files[0])] == [""]


def test_a_pcapng_file_of_several_link_types_gives_each_connections_rows(tmp_path: Path) -> None:
    """Interfaces of different link types (libpcap stops at the second): its rows are those of each
    connection's own capture, frame numbers aside."""
    mergecap = shutil.which("mergecap")
    assert mergecap is not None, "mergecap (Debian package tshark) is needed: .ci/run installs it"
    parts = []
    for n, linktype in enumerate((LINKTYPE_ETHERNET, LINKTYPE_RAW)):
        parts.append(tmp_path / f"{linktype}.pcap")
        parts[-1].write_bytes(write_capture(session_packets(), linktype=linktype, client=("127.0.0.1", 50000 + n)))
    mixed = tmp_path / "mixed.pcapng"
    subprocess.run([mergecap, "-w", str(mixed), *map(str, parts)], check=True, timeout=60)
    column = NAMES.index("frames")

    def apart(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return sorted((row[:column] + row[column + 1:] for row in rows), key=repr)

    expected = apart([row for part in parts for row in ring_rows([part])])
    assert len(expected) > 20
    assert apart(ring_rows([mixed])) == expected


def _pushed(opaque: int, **record: Any) -> bytes:
    return encode({"magic": "ClientRequest", "vbucket": 5, "opaque": opaque, **record}, fix_lengths=True)


def _mutation(opaque: int, seqno: int) -> bytes:
    return _pushed(opaque, opcode="DCP_MUTATION", by_seqno=seqno, rev_seqno=1, flags=0, expiration=0, lock_time=0,
                   nmeta=0, nru=0, key=f"k{seqno}", value="v", cas=seqno)


def test_a_stream_that_ends_inside_an_oso_snapshot_leaves_its_highest_as_the_last(tmp_path: Path) -> None:
    """The bracket was closed only by its end marker: after a stream end inside it, every later message of
    the vbucket had no previous_seqno, so repeats, seqnos going back and gaps went unseen. A second start is
    the same bracket, and a hole inside it is still a hole before the next message."""
    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out), ("127.0.0.1", 50900), ("127.0.0.1", 11210))
    conversation.handshake()
    for from_client, data in stream_open(5, 1):
        conversation.send(from_client, data)
    for seqno in (1, 2, 3):
        conversation.send(False, _mutation(1, seqno))
    for data in (_pushed(1, opcode="DCP_OSO_SNAPSHOT", oso_flags=1), _mutation(1, 7),
                 _pushed(1, opcode="DCP_OSO_SNAPSHOT", oso_flags=1), _mutation(1, 5)):
        conversation.send(False, data)
    conversation.skip(False, len(_mutation(1, 6)))  # lost to the capture, inside the bracket
    conversation.send(False, _pushed(1, opcode="DCP_STREAM_END", stream_end_status=0))
    for from_client, data in stream_open(5, 2):
        conversation.send(from_client, data)
    for seqno in (4, 5, 5, 3, 20):
        conversation.send(False, _mutation(2, seqno))
    conversation.close()
    path = tmp_path / "oso-end.pcap"
    path.write_bytes(out.getvalue())
    rows = [dict(zip(NAMES, row, strict=True)) for row in rows_of(path, records=False)]
    items = [(r["opaque"], r["by_seqno"], r["previous_seqno"], r["capture_gap_before"]) for r in rows
             if r["opcode"] == "DCP_MUTATION"]
    assert items == [(1, 1, None, None), (1, 2, 1, False), (1, 3, 2, False), (1, 7, None, None), (1, 5, None, None),
                     (2, 4, 7, True), (2, 5, 4, False), (2, 5, 5, False), (2, 3, 5, False), (2, 20, 3, False)]

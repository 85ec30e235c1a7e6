"""Two-process decoding (``--jobs 2``) gives exactly what one process gives, errors included."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import capturekit
import orjson
import pytest
from capturekit import ROOT, session_packets, session_records, write_capture

from dcpctl.cli import main
from dcpctl.dcp.observed import Observed
from dcpctl.exitcode import ExitCode
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, Message
from dcpctl.render.env import Environment
from dcpctl.render.lines import PlainLines
from dcpctl.render.record import record as record_of
from dcpctl.sources import capture, parallel
from dcpctl.sources.capture import decode_segments
from dcpctl.sources.pcap import read_segments
from dcpctl.sources.pcapwriter import PcapWriter, TcpConversation
from dcpctl.sources.tcp import Reassembler

SAMPLE = ROOT / "samples" / "dcp-session.pcap"
PORTS = frozenset({11210})


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False, width=200)
    return main(["decode", *args], env), out.getvalue(), err.getvalue()


def damaged_captures(tmp_path: Path) -> list[Path]:
    """Captures that exercise every kind of item: gaps, resynchronisation, notices, skipped bytes."""
    packets = session_packets()
    paths = []

    def save(name: str, data: bytes) -> None:
        paths.append(tmp_path / name)
        paths[-1].write_bytes(data)

    save("session.pcap", SAMPLE.read_bytes())
    save("bytewise.pcap", write_capture(packets, segment_size=1))
    save("snaplen.pcap", write_capture(packets, snaplen=120))
    save("midstream.pcap", write_capture(packets[7:], handshake=False))
    save("cut.pcap", SAMPLE.read_bytes()[:len(SAMPLE.read_bytes()) * 2 // 3])
    save("tls.pcap", write_capture([(True, b"\x16\x03\x01" + bytes(100))], server=("127.0.0.1", 11207)))
    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out))
    conversation.handshake()
    rng = random.Random(7)
    for from_client, data in packets:
        if rng.random() < 0.2:  # lost bytes, garbage and reordering in one capture
            conversation.segment(from_client, data[:20])
            conversation.skip(from_client, len(data) - 20)
        elif rng.random() < 0.2:
            conversation.send(from_client, b"\xffgarbage" + data)
        else:
            conversation.send(from_client, data, 13)
    conversation.close()
    save("lossy.pcap", out.getvalue())
    # a Rollback answer with two bytes too many: the tracker reads it (so builds its record) before the
    # annotation, and the packet's own diagnostic must still come first on the second core
    records = session_records()
    for record in records:
        if record.get("status") == "Rollback":
            del record["rollback_seqno"]
            record.update(value="00000000000000c8ffff", value_encoding="hex")
    save("long-rollback.pcap", write_capture([(capturekit.from_client(r), encode(r, fix_lengths=True))
                                              for r in records]))
    return paths


def test_items_are_identical_to_the_serial_decoder(tmp_path: Path) -> None:
    options = DecodeOptions()
    for path in damaged_captures(tmp_path):
        serial = list(decode_segments(read_segments(str(path), PORTS), options, PORTS))
        split = list(parallel.decode_files([str(path)], options, PORTS))
        assert len(split) == len(serial), path.name
        for mine, theirs in zip(split, serial, strict=True):
            assert type(mine) is type(theirs)
            if isinstance(mine, Observed):
                assert isinstance(theirs, Observed)
                assert record_of(mine) == record_of(theirs), path.name
            else:
                assert mine == theirs, path.name


def item_variety() -> list[tuple[bool, bytes]]:
    """The sample session with twenty more items in its snapshot, values of every kind the JSON shows: text,
    JSON, hex (not UTF-8, not printable), JSON-marked but not JSON, empty; keys plain and not."""
    records = session_records()
    marker = next(i for i, r in enumerate(records) if r["opcode"] == "DCP_SNAPSHOT_MARKER")
    records[marker]["snap_end_seqno"] = 300
    template = records[marker + 1]
    values: list[dict[str, Any]] = [
        {"value": "plain text", "datatype": 0}, {"value": '{"n":1}', "datatype": 1},
        {"value": "00ff10", "value_encoding": "hex", "datatype": 0}, {"value": "line\nbreak", "datatype": 0},
        {"value": "{not json", "datatype": 1}, {"datatype": 0}, {"value": "caf\u00e9 \u2603", "datatype": 0},
        {"key": "6b0001", "key_encoding": "hex", "value": "x", "datatype": 0}]
    extra = []
    for n in range(20):
        record = {k: v for k, v in template.items() if k not in ("xattrs", "value")}
        record.update({"by_seqno": 210 + n, "key": f"doc-{n}", **values[n % len(values)]})
        extra.append(record)
    records[marker + 1:marker + 1] = extra
    return [(capturekit.from_client(r), encode(r, fix_lengths=True)) for r in records]


def as_lines(items: Iterable[Any]) -> list[Any]:
    """Items with every message as its JSON line and consecutive lines joined, notices as they are."""
    out: list[Any] = []
    for item in items:
        line = orjson.dumps(record_of(item), option=orjson.OPT_APPEND_NEWLINE) if isinstance(item, Observed) else item
        if isinstance(line, bytes) and out and isinstance(out[-1], bytes):
            out[-1] += line
        else:
            out.append(line)
    return out


def test_plain_items_as_lines_are_their_records_lines(tmp_path: Path) -> None:
    """decode --format jsonl's fast path, serial and split: byte for byte the usual records' lines, in order,
    with the notices in their places."""
    options = DecodeOptions()
    variety = tmp_path / "variety.pcap"
    variety.write_bytes(write_capture(item_variety(), segment_size=700))
    for path in [*damaged_captures(tmp_path), variety]:
        usual = as_lines(decode_segments(read_segments(str(path), PORTS), options, PORTS))
        serial = decode_segments(read_segments(str(path), PORTS), options, PORTS, plain=PlainLines())
        assert as_lines(serial) == usual, path
        assert as_lines(parallel.decode_files([str(path)], options, PORTS, plain=PlainLines)) == usual, path
    assert any(isinstance(item, bytes) and b'"value_encoding":"hex"' in item for item in usual)  # the fallback ran


def test_the_json_lines_command_matches_the_json_array(tmp_path: Path) -> None:
    """The command's JSON lines (fast path) and its JSON array (records) say the same, key order included."""
    variety = tmp_path / "variety.pcap"
    variety.write_bytes(write_capture(item_variety()))
    for jobs in ("1", "2"):
        code, lines, _ = run(str(variety), "-F", "jsonl", "-j", jobs)
        assert code == 0
        _, array, _ = run(str(variety), "-F", "json", "-j", jobs)
        assert [list(json.loads(line).items()) for line in lines.splitlines()] == \
            [list(record.items()) for record in json.loads(array)]


def test_command_output_and_exit_code_are_identical(tmp_path: Path) -> None:
    paths = [str(p) for p in damaged_captures(tmp_path)]
    for args in (paths, [*paths, "--strict"], [paths[0], "--count", "5"], [paths[0], "--filter", "by_seqno > 201"],
                 [paths[-1], "-F", "json"], [paths[0], "--summary", "-F", "jsonl"]):
        assert run(*args, "-j", "1") == run(*args, "-j", "2"), args


def test_a_bad_file_after_a_good_one_stops_the_same_way(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.pcap")
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"not a capture" * 20)
    for bad in (missing, str(junk)):
        serial = run(str(SAMPLE), bad, "-F", "jsonl", "-j", "1")
        split = run(str(SAMPLE), bad, "-F", "jsonl", "-j", "2")
        assert serial == split
        code, out, err = split
        assert code == ExitCode.INPUT
        assert out.count("\n") > 10  # the good file's messages came first
        assert err.startswith(f"dcpctl: error: {bad}: ")
        assert err.count("\n") == 1


def test_a_child_that_dies_is_an_error_not_a_short_output(monkeypatch: pytest.MonkeyPatch) -> None:
    def die(*_args: object) -> None:
        os._exit(9)

    monkeypatch.setattr(parallel, "_produce", die)
    code, out, err = run(str(SAMPLE), "-j", "2")
    assert code == ExitCode.FAILURE
    assert out == ""
    assert "decoding process ended unexpectedly" in err


def test_stopping_early_reaps_the_child(tmp_path: Path) -> None:
    big = tmp_path / "big.pcap"
    big.write_bytes(write_capture(session_packets() * 300))
    items = parallel.decode_files([str(big)], DecodeOptions(), PORTS)
    assert isinstance(next(items), Observed)
    items.close()  # what --count and a closed pipe do
    assert multiprocessing.active_children() == []


def test_a_bug_in_the_child_keeps_the_output_before_it_and_says_why(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """An exception while reading or reassembling (a bug; the child's half): --jobs 2 prints what --jobs 1
    prints before it, then the cause in one line, exit 1 (the child used to die silently, its last batch
    lost, as 'exit None')."""
    variety = tmp_path / "variety.pcap"
    variety.write_bytes(write_capture(item_variety() * 5))
    original = Reassembler.push
    seen = [0]

    def failing(self: Reassembler, *args: Any) -> Any:
        seen[0] += 1
        if seen[0] > 60:
            raise IndexError("an injected bug")
        return original(self, *args)

    monkeypatch.setattr(Reassembler, "push", failing)
    for fmt in ("jsonl", "pretty"):
        out, err = io.StringIO(), io.StringIO()
        env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                          color=False, width=200)
        seen[0] = 0
        with pytest.raises(IndexError):
            main(["decode", str(variety), "-F", fmt, "-j", "1"], env)
        seen[0] = 0
        code, split, error = run(str(variety), "-F", fmt, "-j", "2")
        assert code == ExitCode.FAILURE
        assert split == out.getvalue()
        assert split.count("\n") > 40
        assert error.count("\n") == 1
        assert "IndexError: an injected bug (in failing, test_parallel.py:" in error


def test_a_killed_child_is_named_and_the_lines_before_it_are_whole(tmp_path: Path) -> None:
    big = tmp_path / "big.pcap"
    big.write_bytes(write_capture(session_packets() * 2000))
    proc = subprocess.Popen([sys.executable, "-m", "dcpctl", "decode", "-F", "jsonl", "-j", "2", str(big)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline = time.monotonic() + 30
    while not children.read_text().split() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1)  # both block by now: this side on a full pipe nobody reads, the child on this side
    os.kill(int(children.read_text().split()[0]), signal.SIGKILL)
    rest, err = proc.communicate(timeout=60)
    lines = rest.decode().splitlines()
    assert proc.returncode == ExitCode.FAILURE
    assert [line for line in lines if not (line.startswith("{") and line.endswith("}"))] == []  # whole lines
    assert lines
    assert len(lines) < 2000 * len(session_packets())
    assert err.decode().endswith("dcpctl: error: the decoding process ended unexpectedly (killed by SIGKILL); "
                                 "the output above is complete up to that point\n")


def test_each_message_is_decoded_once_across_both_processes(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    """Issue 14 item 6: one representation crosses the pipe and each message is decoded once, in one of the
    two processes (the child used to decode every message to track it and this process decode it again)."""
    calls = tmp_path / "calls"  # one byte per decode() call, appended by whichever process makes it
    original = capture.decode

    def counted(raw: bytes, offset: int = 0, options: DecodeOptions = DecodeOptions()) -> Message:  # noqa: B008
        with calls.open("ab") as out:
            out.write(b".")
        return original(raw, offset, options)

    monkeypatch.setattr(capture, "decode", counted)
    if hasattr(parallel, "decode"):  # where a second decode would be made
        monkeypatch.setattr(parallel, "decode", counted)
    path = tmp_path / "variety.pcap"
    path.write_bytes(write_capture(item_variety()))
    messages = [item for item in parallel.decode_files([str(path)], DecodeOptions(), PORTS)
                if isinstance(item, Observed)]
    assert len(messages) > 40
    assert calls.read_bytes().count(b".") == len(messages)

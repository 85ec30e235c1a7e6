"""Two-process decoding (``--jobs 2``) gives exactly what one process gives, errors included."""

from __future__ import annotations

import io
import multiprocessing
import os
import random
from pathlib import Path

import pytest
from capturekit import ROOT, session_packets, write_capture

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.protocol.message import DecodeOptions, Message
from dcpctl.render.env import Environment
from dcpctl.sources import parallel
from dcpctl.sources.capture import decode_segments
from dcpctl.sources.pcap import read_segments
from dcpctl.sources.pcapwriter import PcapWriter, TcpConversation

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
    return paths


def test_items_are_identical_to_the_serial_decoder(tmp_path: Path) -> None:
    options = DecodeOptions()
    for path in damaged_captures(tmp_path):
        serial = list(decode_segments(read_segments(str(path), PORTS), options, PORTS))
        split = list(parallel.decode_files([str(path)], options, PORTS))
        assert len(split) == len(serial), path.name
        for mine, theirs in zip(split, serial, strict=True):
            assert type(mine) is type(theirs)
            if isinstance(mine, Message):
                assert isinstance(theirs, Message)
                assert mine.record() == theirs.record(), path.name
            else:
                assert mine == theirs, path.name


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
    assert isinstance(next(items), Message)
    items.close()  # what --count and a closed pipe do
    assert multiprocessing.active_children() == []

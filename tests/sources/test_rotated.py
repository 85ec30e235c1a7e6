"""A ring of capture files (tcpdump -C/-W/-G, dumpcap's ring buffer) is read as the one capture it cuts up.

The rings are cut by editcap (Wireshark's own tool, as tcpdump cuts: whole records, the same file header).
"""

from __future__ import annotations

import io
import itertools
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from capturekit import ROOT, session_packets, write_capture
from test_parallel import damaged_captures

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment
from dcpctl.sources import pcap
from dcpctl.sources.pcap import CaptureNotice, TcpSegment

SAMPLE = ROOT / "samples" / "dcp-session.pcap"


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False, width=400)
    return main(list(args), env), out.getvalue(), err.getvalue()


def ring(capture: Path, frames: int, directory: Path) -> list[Path]:
    """The capture cut every ``frames`` frames, in order."""
    directory.mkdir()
    editcap = shutil.which("editcap")
    assert editcap is not None, "editcap (Debian package tshark) is needed: .ci/run installs it"
    subprocess.run([editcap, "-c", str(frames), str(capture), str(directory / "ring.pcap")], check=True)
    files = sorted(directory.iterdir())
    assert len(files) > 1
    return files


def records(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def whole_capture(tmp_path: Path) -> Path:
    """The sample session in 13-byte segments: every message spans several frames, so cuts fall inside them."""
    path = tmp_path / "whole.pcap"
    path.write_bytes(write_capture(session_packets(), segment_size=13))
    return path


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("frames", [7, 40])
def test_a_ring_decodes_as_the_whole_capture(tmp_path: Path, jobs: str, frames: int) -> None:
    """Messages cut by a file's end continue in the next file, with nothing skipped and the connection's
    state (collections, streams) carried on, and frames numbered as in the whole capture: the output is the
    whole capture's, byte for byte."""
    captures = [whole_capture(tmp_path), *(p for p in damaged_captures(tmp_path) if p.name == "lossy.pcap")]
    for capture in captures:
        files = ring(capture, frames, tmp_path / f"ring-{capture.stem}")
        code, out, err = run("decode", "-j", jobs, "-F", "jsonl", str(capture))
        assert code == ExitCode.OK
        ring_code, ring_out, ring_err = run("decode", "-j", jobs, "-F", "jsonl", *map(str, files))
        assert ring_code == ExitCode.OK
        assert ring_err == err  # nothing for the whole capture; the lossy one's gaps and garbage, no more
        assert ring_out == out
        assert len(records(out)) > 20


def test_a_glob_reads_tcpdumps_names_in_number_order(tmp_path: Path) -> None:
    """tcpdump -C names its files cap, cap1, ... cap10: a glob sorted as text would read cap10 before cap2."""
    capture = whole_capture(tmp_path)
    files = ring(capture, 5, tmp_path / "editcap")
    assert len(files) > 11
    named = tmp_path / "tcpdump"
    named.mkdir()
    for n, path in enumerate(files):
        path.rename(named / f"cap.pcap{n or ''}")
    _, out, _ = run("decode", "-F", "jsonl", str(capture))
    code, ring_out, err = run("decode", "-F", "jsonl", str(named / "cap.pcap*"))
    assert (code, err, ring_out) == (ExitCode.OK, "", out)


@pytest.mark.parametrize("name", ["cap[1].pcap", "cap*.pcap", "what?.pcap"])
def test_a_file_whose_name_holds_glob_characters_is_read_as_itself(tmp_path: Path, name: str) -> None:
    """A name that exists is that file's: as a pattern, cap[1].pcap would name cap1.pcap (or nothing)."""
    shutil.copy(SAMPLE, tmp_path / name)
    (tmp_path / "cap1.pcap").write_bytes(b"")  # what the pattern would match instead: no capture
    _, out, _ = run("decode", "-F", "jsonl", str(SAMPLE))
    for command in (["decode", "-F", "jsonl"], ["rollback", "explain", "-F", "json"]):
        code, got, err = run(*command, str(tmp_path / name))
        assert (code, err) == (ExitCode.OK, ""), command
        if command[0] == "decode":
            assert got == out
        else:
            assert json.loads(got)[0]["file"] == str(tmp_path / name)
    assert run("decode", str(tmp_path / "cap?.pcap"))[0] == ExitCode.INPUT  # still a pattern: cap1.pcap, empty


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_file_whose_name_is_not_utf8_is_read(tmp_path: Path, jobs: str) -> None:
    """A name's bytes that are no UTF-8 (an old Latin-1 file system, a name from a tool): libpcap still opens
    the file. Python keeps such bytes as surrogates, which pcapy cannot encode."""
    name = tmp_path / os.fsdecode(b"capture-\xe9t\xe9.pcap")
    shutil.copy(SAMPLE, name)
    _, out, _ = run("decode", "-F", "jsonl", str(SAMPLE))
    assert run("decode", "-j", jobs, "-F", "jsonl", str(name)) == (ExitCode.OK, out, "")
    assert run("decode", "-j", jobs, "-F", "jsonl", str(name), str(SAMPLE)) == (ExitCode.OK, out * 2, "")
    code, got, err = run("decode", "-j", jobs, str(tmp_path / os.fsdecode(b"gone-\xe9.pcap")))
    assert (code, got) == (ExitCode.INPUT, "")
    assert err.endswith("no such file\n"), err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_files_that_overlap_in_time_are_captures_of_their_own(jobs: str, tmp_path: Path) -> None:
    """Two captures of the same traffic (say one on each side) are not one capture: the second begins before
    the first ends, so it is read from nothing, not as a retransmission of the first. (Two files: one file
    named twice is read once.)"""
    other = tmp_path / "other-side.pcap"
    other.write_bytes(SAMPLE.read_bytes())
    _, once, _ = run("decode", "-j", jobs, "-F", "jsonl", str(SAMPLE))
    code, twice, err = run("decode", "-j", jobs, "-F", "jsonl", str(SAMPLE), str(other))
    assert (code, err) == (ExitCode.OK, "")
    assert twice == once * 2


def test_a_rollback_told_across_two_files(tmp_path: Path) -> None:
    """The stream request in one file, the server's Rollback answer and the client's retry in the next: one
    story, named after the file that holds the answer."""
    code, out, _ = run("rollback", "explain", "-F", "json", str(SAMPLE))
    assert code == ExitCode.OK
    [story] = json.loads(out)
    _, decoded, _ = run("decode", "-F", "jsonl", str(SAMPLE))
    request = next(r for r in records(decoded) if r["opcode"] == "DCP_STREAM_REQ")
    files = ring(SAMPLE, request["frames"][-1], tmp_path / "ring")
    code, out, err = run("rollback", "explain", "-F", "json", *map(str, files))
    assert (code, err) == (ExitCode.OK, "")
    [split] = json.loads(out)
    assert split.pop("file") == str(files[1])
    story.pop("file")
    assert split == story


def test_a_notice_names_its_file_among_several(tmp_path: Path) -> None:
    """A notice about a file itself names it, with the frame counted in it, as for the file alone."""
    files = ring(whole_capture(tmp_path), 40, tmp_path / "ring")
    files[-1].write_bytes(files[-1].read_bytes()[:-30])  # the last file cut inside its last record
    code, _, err = run("decode", "-F", "jsonl", *map(str, files))
    assert code == ExitCode.OK
    assert f"capture_gap: frame 15: {files[-1]}: the capture file is damaged after frame 14" in err
    code, _, err = run("decode", "-F", "jsonl", str(files[-1]))
    assert "capture_gap: frame 15: the capture file is damaged after frame 14" in err


def test_joining_holds_nothing_back_whatever_the_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """Times wiped to 0 (as some anonymisers leave them) are still times, and a file is joined or not as soon
    as its first item comes out: reading holds no segment back, however long the file."""
    read: list[int] = []

    def segments(path: str, ports: frozenset[int], tap: Any = None) -> Iterator[TcpSegment | CaptureNotice]:
        yield CaptureNotice(0, 0.0, "truncated_file", "untimed")
        for frame in range(1, 1_000_000):
            read.append(frame)
            tap(0.0, b"", 60)
            yield TcpSegment(0.0, frame, ("10.0.0.1", 50000), ("10.0.0.2", 11210), frame, 0, 0x18, b"x", False, 1)

    monkeypatch.setattr(pcap, "read_segments", segments)
    items = pcap.read_files(["a.pcap", "b.pcap"])
    assert next(items) == pcap.FileStart("a.pcap", joined=False)
    assert next(items) == CaptureNotice(0, 0.0, "truncated_file", "a.pcap: untimed")
    first = next(items)
    assert isinstance(first, TcpSegment)
    assert first.frame == 1
    assert read == [1]
    many = list(itertools.islice(items, 999_998))  # to the end of the first file
    assert isinstance(many[-1], TcpSegment)
    assert many[-1].frame == 999_999
    assert next(items) == pcap.FileStart("b.pcap", joined=True)
    next(items)
    second = next(items)
    assert isinstance(second, TcpSegment)
    assert second.frame == 1 + 999_999  # numbered on from the first file's 999,999 frames


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_files_are_read_in_the_order_they_were_written_whatever_their_names(tmp_path: Path, jobs: str) -> None:
    """A shell sorts tcpdump -C's files as text (cap.pcap10 before cap.pcap2), and a ring that wrapped
    (tcpdump -C -W) starts with its newest file: the files are read by their first frames' times."""
    capture = whole_capture(tmp_path)
    pieces = ring(capture, 5, tmp_path / "editcap")
    assert len(pieces) > 11
    _, out, _ = run("decode", "-F", "jsonl", str(capture))
    tcpdump = tmp_path / "tcpdump"
    tcpdump.mkdir()
    named = [tcpdump / f"cap.pcap{n or ''}" for n in range(len(pieces))]
    for piece, name in zip(pieces, named, strict=True):
        name.write_bytes(piece.read_bytes())
    as_a_shell_gives = sorted(map(str, named))
    assert as_a_shell_gives[2].endswith("cap.pcap10")
    wrapped = tmp_path / "wrapped"
    wrapped.mkdir()
    newest = 3  # the ring's writer is at file 2: file 3 is the oldest
    width = len(str(len(pieces) - 1))
    slots = [wrapped / f"cap{(newest + n) % len(pieces):0{width}d}" for n in range(len(pieces))]
    for piece, slot in zip(pieces, slots, strict=True):
        slot.write_bytes(piece.read_bytes())
    for files in (as_a_shell_gives, sorted(map(str, slots))):
        code, ring_out, err = run("decode", "-j", jobs, "-F", "jsonl", *files)
        assert (code, err, ring_out) == (ExitCode.OK, "", out)
        code, ring_out, err = run("rollback", "explain", "-F", "json", *files)
        assert (code, err) == (ExitCode.OK, "")
        assert len(json.loads(ring_out)) == 1

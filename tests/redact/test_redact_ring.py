"""``dcpctl redact`` of a ring of files (tcpdump -C/-W/-G): one capture, redacted into a copy of each file.

Every capture of the suite is cut into a ring by editcap (as tcpdump cuts: whole records, the same file
header); the ring's copies, joined again, must be the whole capture's copy byte for byte (with the same salt
and options), each copy holding its own file's frames.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest
from servekit import peer
from test_redact_capture import SAMPLE, captures

import dcpctl.commands.redact as redact_command
from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment

SALT = "a salt for the ring"


def run(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    env = Environment(stdout=io.StringIO(), stderr=err, stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False, width=400)
    return main(list(args), env), err.getvalue()


def records(path: Path) -> list[bytes]:
    """A classic pcap file's records, headers included (what redact writes, of micro- or nanosecond times)."""
    data = path.read_bytes()
    assert struct.unpack_from("<I", data)[0] in (0xA1B2C3D4, 0xA1B23C4D)
    out, at = [], 24
    while at < len(data):
        captured = struct.unpack_from("<I", data, at + 8)[0]
        out.append(data[at:at + 16 + captured])
        at += 16 + captured
    return out


def ring(capture: Path, frames: int, directory: Path) -> list[Path]:
    directory.mkdir()
    subprocess.run([peer("editcap"), "-c", str(frames), str(capture), str(directory / f"ring{capture.suffix}")],
                   check=True, capture_output=True)
    return sorted(directory.iterdir())


def frame_count(path: Path) -> int:
    found = subprocess.run([peer("capinfos"), "-c", "-M", str(path)], check=True, capture_output=True, text=True)
    return int(found.stdout.split()[-1])


@pytest.mark.parametrize("options", [(), ("--values", "drop"), ("--map-addresses", "--hash-names")])
def test_a_ring_redacts_as_the_whole_capture(tmp_path: Path, options: tuple[str, ...]) -> None:
    salt = tmp_path / "salt"
    salt.write_text(SALT)
    for name, capture in captures(tmp_path):
        whole = tmp_path / f"{name}.whole.pcap"
        code, err = run("redact", str(capture), "-o", str(whole), "--salt-file", str(salt), *options)
        assert code == ExitCode.OK, err
        files = ring(capture, 5, tmp_path / f"{name}-ring")
        out = tmp_path / f"{name}-redacted"
        code, ring_err = run("redact", *map(str, files), "-o", str(out), "--salt-file", str(salt), *options)
        assert code == ExitCode.OK, ring_err
        # the same summary; the same notices, each naming its file
        assert [line for line in ring_err.splitlines() if not line.startswith("dcpctl: redact: ")] == \
            [line for line in err.splitlines() if not line.startswith("dcpctl: redact: ")], name
        copies = [out / f.name for f in files]
        assert sorted(out.iterdir()) == copies  # a copy of each file, under its name, and nothing else
        assert [record for copy in copies for record in records(copy)] == records(whole), name
        for source, copy in zip(files, copies, strict=True):
            assert len(records(copy)) <= frame_count(source), name  # each file's own frames, less those left out
        if "drop" not in options:
            assert [len(records(copy)) for copy in copies] == [frame_count(source) for source in files], name


def test_compressed_files_give_compressed_copies(tmp_path: Path) -> None:
    salt = tmp_path / "salt"
    salt.write_text(SALT)
    files = ring(SAMPLE, 7, tmp_path / "ring")
    plain = tmp_path / "plain"
    assert run("redact", *map(str, files), "-o", str(plain), "--salt-file", str(salt))[0] == ExitCode.OK
    packed = []
    for path in files:
        packed.append(path.with_name(path.name + ".gz"))
        packed[-1].write_bytes(gzip.compress(path.read_bytes()))
    out = tmp_path / "packed"
    assert run("redact", *map(str, packed), "-o", str(out), "--salt-file", str(salt))[0] == ExitCode.OK
    for path in files:
        assert gzip.decompress((out / (path.name + ".gz")).read_bytes()) == (plain / path.name).read_bytes()


def test_several_files_need_a_directory_of_their_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Said at once, before a salt is made up and printed, and nothing is written."""
    monkeypatch.delenv("DCPCTL_REDACT_SALT", raising=False)
    files = ring(SAMPLE, 7, tmp_path / "ring")
    names = [str(f) for f in files]
    a_file = tmp_path / "a.pcap"
    a_file.write_bytes(b"")
    other = tmp_path / "other"
    other.mkdir()
    (other / files[0].name).write_bytes(files[0].read_bytes())
    for args, says in (((*names, "-o", "-"), "give a directory"), ((*names, "-o", str(a_file)), "give a directory"),
                       ((*names, "-", "-o", str(tmp_path / "out")), "standard input is one capture"),
                       ((*names, str(other / files[0].name), "-o", str(tmp_path / "out")), "two files of this name"),
                       ((*names, "-o", str(tmp_path / "ring")), "holds the input")):
        code, err = run("redact", *args)
        assert code == ExitCode.USAGE, args
        assert says in err, err
        assert err.count("\n") == 1, err  # the error alone: no salt printed
    assert not (tmp_path / "out").exists()


def test_a_directory_takes_one_file_as_it_takes_several(tmp_path: Path) -> None:
    """An existing directory as -o takes the copy of one file under its name, as cp copies into one: a glob
    that happens to match one file, or a file named twice (read once), does not turn the directory into a
    file's name."""
    salt = tmp_path / "salt"
    salt.write_text(SALT)
    single, out = tmp_path / "single.pcap", tmp_path / "out"
    assert run("redact", str(SAMPLE), "-o", str(single), "--salt-file", str(salt))[0] == ExitCode.OK
    out.mkdir()
    code, err = run("redact", str(SAMPLE), str(SAMPLE), "-o", str(out), "--salt-file", str(salt))
    assert code == ExitCode.OK, err
    assert err.startswith(f"dcpctl: {SAMPLE}: named twice, read once\n")
    assert [f.name for f in out.iterdir()] == [SAMPLE.name]
    assert (out / SAMPLE.name).read_bytes() == single.read_bytes()


def test_a_bad_file_leaves_no_copy_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """All the copies are written, or none: a damaged ring is not half shared. A file that is no capture is
    refused before anything is made; one that goes bad once the command has looked at it ends the run
    with the same line, and no copy."""
    files = ring(SAMPLE, 7, tmp_path / "ring")
    files[2].write_bytes(b"not a capture at all" * 10)
    out = tmp_path / "out"
    salt = tmp_path / "salt"
    salt.write_text(SALT)
    code, err = run("redact", *map(str, files), "-o", str(out), "--salt-file", str(salt))
    assert code == ExitCode.INPUT
    assert err.startswith(f"dcpctl: error: {files[2]}: ")
    assert not out.exists()
    monkeypatch.setattr(redact_command, "_openable", lambda _paths: None)
    assert run("redact", *map(str, files), "-o", str(out), "--salt-file", str(salt)) == (code, err)
    assert list(out.iterdir()) == []


def test_a_copy_is_closed_once_its_frames_are_out(tmp_path: Path) -> None:
    """A ring of many files never holds many copies (or their compressors) open: a copy is left as soon as
    the frames held for messages cut at its end are written."""
    from dcpctl.protocol.message import DecodeOptions  # noqa: PLC0415
    from dcpctl.redact.core import Policy, Redactor  # noqa: PLC0415
    from dcpctl.sources.redaction import redact_captures  # noqa: PLC0415

    files = ring(SAMPLE, 2, tmp_path / "ring")
    assert len(files) > 10
    outputs = Outputs()
    redactor = Redactor(SALT.encode(), Policy(frozenset(), False, False, True))
    summary, _ = redact_captures([str(f) for f in files], outputs.output, redactor, DecodeOptions(),
                                 frozenset({11210}))
    assert summary.frames_out == sum(frame_count(f) for f in files)
    assert outputs.open_now == []
    assert outputs.most == 2  # the file being read, and the one before while a message cut at its end is held


class Outputs:
    """Each file's output, as redact's outputs are given: which were entered, which are open, most at once."""

    def __init__(self) -> None:
        self.entered: list[str] = []
        self.open_now: list[str] = []
        self.most = 0

    @contextlib.contextmanager
    def output(self, path: str) -> Iterator[BinaryIO]:
        self.entered.append(path)
        self.open_now.append(path)
        self.most = max(self.most, len(self.open_now))
        yield io.BytesIO()
        self.open_now.remove(path)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_ring_of_nanosecond_files_keeps_its_times(tmp_path: Path, jobs: str) -> None:
    """Each copy of a ring of nanosecond pcap files is a nanosecond pcap file of its own file's times, and the
    copies joined are the whole capture's copy."""
    nano = tmp_path / "nano.pcap"
    subprocess.run([peer("editcap"), "-F", "nsecpcap", "-t", "0.000000123", str(SAMPLE), str(nano)], check=True,
                   capture_output=True)
    salt = tmp_path / "salt"
    salt.write_text(SALT)
    files = ring(nano, 7, tmp_path / "ring")
    out = tmp_path / "out"
    assert run("redact", *map(str, files), "-o", str(out), "--salt-file", str(salt), "--jobs", jobs)[0] == ExitCode.OK
    whole = tmp_path / "whole.pcap"
    assert run("redact", str(nano), "-o", str(whole), "--salt-file", str(salt), "--jobs", jobs)[0] == ExitCode.OK
    assert [record for path in files for record in records(out / path.name)] == records(whole)
    for path in files:
        times = subprocess.run([peer("tshark"), "-r", str(out / path.name), "-T", "fields", "-e", "frame.time_epoch"],
                               check=True, capture_output=True, text=True).stdout.split()
        assert times == subprocess.run([peer("tshark"), "-r", str(path), "-T", "fields", "-e", "frame.time_epoch"],
                                       check=True, capture_output=True, text=True).stdout.split()
        assert all(time.endswith("123") for time in times)

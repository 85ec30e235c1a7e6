"""``dcpctl redact --jobs N``: one file's connections shared among worker processes give the output of one
process, byte for byte, and the same summary; a worker that fails is one line, and nothing is written."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_redact_capture import ROOT, Run, _big_document, _cut, _redact, _retransmitted, _sacked, _two_clients, captures
from test_redact_ring import Outputs, frame_count, ring

import dcpctl.commands.redact as redact_command
from dcpctl.exitcode import ExitCode
from dcpctl.protocol.message import DecodeOptions
from dcpctl.redact.core import Policy, Redactor
from dcpctl.sources import redactjobs
from dcpctl.sources.pcapchunks import Endpoints, plan


def _realistic(directory: Path, messages: int = 3000) -> Path:
    """The benchmarks' realistic capture: four DCP connections and an SDK-like KV one, with the receivers'
    ACKs, mixed messages."""
    path = directory / "realistic.pcap"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_capture.py"), str(path), "--messages",
                    str(messages)], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    return path


def _inputs(directory: Path) -> Iterator[tuple[str, Path]]:
    """Every capture of the redaction tests, and captures of several connections: whole, cut short inside
    a record, with retransmissions, selective ACKs, a big document."""
    yield from captures(directory)
    yield "clients", _two_clients(directory)
    realistic = _realistic(directory)
    yield "realistic", realistic
    damaged = directory / "damaged.pcap"
    damaged.write_bytes(realistic.read_bytes()[:realistic.stat().st_size * 7 // 10])
    yield "damaged", damaged
    yield "retransmitted", _retransmitted(directory)
    yield "cut", _cut(directory)[1]
    yield "sacked", _sacked(directory)[0]
    yield "big", _big_document(directory)[0]


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The worker counts of the runs that shared a file: a run that fell back to one process adds none."""
    calls: list[int] = []
    real = redact_command.redact_jobs

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["jobs"])
        return real(*args, **kwargs)

    monkeypatch.setattr(redact_command, "redact_jobs", spy)
    return calls


@pytest.mark.parametrize("options", [(), ("--values", "drop"), ("--keep-unparsed", "--no-keep-json-names"),
                                     ("--max-held-bytes", "100000")])
def test_workers_write_one_process_output_byte_for_byte(tmp_path: Path, shared: list[int],
                                                        options: tuple[str, ...]) -> None:
    inputs = list(_inputs(tmp_path))
    for name, source in inputs:
        alone = _redact(source, tmp_path / f"{name}.1.pcap", "--jobs", "1", *options)
        assert alone.code == ExitCode.OK, (name, alone.err.getvalue())
        for jobs in (2, 3):
            target = tmp_path / f"{name}.{jobs}.pcap"
            run = _redact(source, target, "--jobs", str(jobs), *options)
            assert run.code == ExitCode.OK, (name, jobs, run.err.getvalue())
            assert target.read_bytes() == (tmp_path / f"{name}.1.pcap").read_bytes(), (name, jobs)
            assert run.err.getvalue() == alone.err.getvalue(), (name, jobs)
    assert shared == [2, 3] * len(inputs)


def test_tiny_batches_and_no_merge_buffer_change_nothing(tmp_path: Path, shared: list[int],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of a few frames, cut inside a held message's release, and a merge that holds nothing back
    but reads only from the worker that holds the rest: the same bytes."""
    monkeypatch.setattr(redactjobs, "BATCH_FRAMES", 3)
    monkeypatch.setattr(redactjobs, "BATCH_BYTES", 2000)
    monkeypatch.setattr(redactjobs, "MERGE_BYTES", 0)
    inputs = [("realistic", _realistic(tmp_path, messages=1000)), ("clients", _two_clients(tmp_path)),
              ("big", _big_document(tmp_path)[0])]
    for name, source in inputs:
        alone = _redact(source, tmp_path / f"{name}.1.pcap", "--jobs", "1")
        run = _redact(source, tmp_path / f"{name}.3.pcap", "--jobs", "3")
        assert run.code == alone.code == ExitCode.OK, (name, run.err.getvalue())
        assert (tmp_path / f"{name}.3.pcap").read_bytes() == (tmp_path / f"{name}.1.pcap").read_bytes(), name
        assert run.err.getvalue() == alone.err.getvalue(), name
    assert shared == [3] * len(inputs)


@pytest.mark.parametrize("options", [(), ("--values", "drop")])
def test_a_ring_shared_among_workers_gives_one_process_copies(tmp_path: Path, shared: list[int],
                                                              options: tuple[str, ...]) -> None:
    """Each capture cut into a ring (editcap, as tcpdump cuts): the copies of every file, byte for byte,
    and the summary with its notices naming their files, are those of one process."""
    inputs = [*captures(tmp_path), ("realistic", _realistic(tmp_path, messages=2000)),
              ("clients", _two_clients(tmp_path)), ("big", _big_document(tmp_path)[0])]
    for name, capture in inputs:
        files = [str(path) for path in ring(capture, 500 if name == "realistic" else 5, tmp_path / f"{name}-ring")]
        copies = {}
        for jobs in ("1", "3"):
            out = tmp_path / f"{name}-{jobs}"
            run = _redact_files(files, out, "--jobs", jobs, *options)
            assert run.code == ExitCode.OK, (name, run.err.getvalue())
            copies[jobs] = ({path.name: path.read_bytes() for path in out.iterdir() if path.name != "salt"},
                            run.err.getvalue())
        assert len(copies["1"][0]) == len(files), name
        assert copies["3"] == copies["1"], name
    assert shared == [3] * len(inputs)


def test_a_bad_file_in_a_shared_ring_is_one_line_and_leaves_no_copy(tmp_path: Path, shared: list[int],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused before any worker starts; a file that goes bad once the command has looked at it ends the
    workers' run with the same line, and no copy."""
    files = [str(path) for path in ring(_realistic(tmp_path, messages=500), 100, tmp_path / "ring")]
    Path(files[2]).write_bytes(b"not a capture at all" * 10)
    for looked in (True, False):
        if not looked:
            monkeypatch.setattr(redact_command, "_openable", lambda _paths: None)
        run = _redact_files(files, tmp_path / "out", "--jobs", "2")
        assert run.code == ExitCode.INPUT
        err = run.err.getvalue()
        assert err.count("\n") == 1, err
        assert err.startswith(f"dcpctl: error: {files[2]}: "), err
        assert [path.name for path in (tmp_path / "out").iterdir()] == ["salt"]
    assert shared == [2]  # the second run only


def test_a_shared_ring_holds_one_copy_open_at_a_time(tmp_path: Path) -> None:
    """The copies are entered in the files' order, each left before the next is entered, all of them (a file
    whose frames are all left out, or that has none, still gets its copy)."""
    files = [str(path) for path in ring(_realistic(tmp_path, messages=500), 60, tmp_path / "ring")]
    assert len(files) > 10
    outputs = Outputs()
    redactor = Redactor(b"a salt", Policy())
    summary, _ = redactjobs.redact_jobs(files, outputs.output, redactor, DecodeOptions(), frozenset({11210}),
                                        jobs=3)
    assert summary.frames_in == sum(frame_count(Path(path)) for path in files)
    assert outputs.entered == files
    assert outputs.open_now == []
    assert outputs.most == 1


def _redact_files(files: list[str], out: Path, *extra: str) -> Any:
    """redact of several files into the directory ``out`` (its salt file beside them, named salt)."""
    out.mkdir(exist_ok=True)
    salt = out / "salt"
    salt.write_text("a salt for the ring")
    return Run(["redact", *files, "-o", str(out), "--salt-file", str(salt), *extra])


def test_what_cannot_be_shared_is_redacted_by_one_process(tmp_path: Path, shared: list[int]) -> None:
    """--hash-names finds a name learned on one connection in another's messages; --map-addresses counts
    the distinct addresses; a compressed file would be decompressed whole by every worker."""
    source = _two_clients(tmp_path)
    packed = tmp_path / "clients.pcap.gz"
    packed.write_bytes(gzip.compress(source.read_bytes()))
    for path, option in ((source, "--hash-names"), (source, "--map-addresses"), (packed, "--keep-unparsed")):
        run = _redact(path, tmp_path / "out.pcap", "--jobs", "2", option)
        assert run.code == ExitCode.OK, run.err.getvalue()
    assert shared == []
    unread = tmp_path / "clients.pcap.zst"  # damaged data: said as one process says it (in zstd's words)
    unread.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(100))
    run = _redact(unread, tmp_path / "out.pcap", "--jobs", "2")
    assert run.code == ExitCode.INPUT
    assert run.err.getvalue().startswith(f"dcpctl: error: {unread}: the zstd data is damaged (")
    assert run.err.getvalue().count("\n") == 1
    assert shared == []
    run = _redact(source, tmp_path / "out.pcap", "--jobs", "2")
    assert shared == [2]


def test_connections_are_shared_out_by_weight(tmp_path: Path) -> None:
    source = str(_realistic(tmp_path))
    weights: dict[Endpoints, int] = {}
    plan(source, weights=weights)
    assert len(weights) >= 4  # the four DCP connections (the small KV one may fall between samples)
    given = redactjobs.owners([source], 2)
    assert given.keys() == weights.keys()
    loads = [sum(weight for ends, weight in weights.items() if given[ends] == worker) for worker in (0, 1)]
    heaviest = sorted(weights, key=weights.__getitem__)[-2:]
    assert given[heaviest[0]] != given[heaviest[1]]
    assert max(loads) < 1.6 * min(loads), loads


def _failing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write: Any) -> tuple[Path, Any]:
    monkeypatch.setattr(redactjobs._Share, "_write", write)
    source = _realistic(tmp_path, messages=500)
    target = tmp_path / "out" / "redacted.pcap"
    target.parent.mkdir()
    return target, _redact(source, target, "--jobs", "2")


def test_a_worker_that_fails_is_one_line_and_nothing_is_written(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: Any) -> None:
        raise RuntimeError("a bug")

    target, run = _failing(tmp_path, monkeypatch, broken)
    assert run.code == ExitCode.FAILURE
    err = run.err.getvalue()
    assert err.count("\n") == 1, err
    assert err.startswith("dcpctl: error: a redacting process failed: RuntimeError: a bug (in broken"), err
    assert [path.name for path in target.parent.iterdir()] == ["salt"]  # no output, no temporary file


def test_a_worker_that_dies_is_one_line_and_nothing_is_written(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def killed(*_args: Any) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    target, run = _failing(tmp_path, monkeypatch, killed)
    assert run.code == ExitCode.FAILURE
    assert run.err.getvalue() == ("dcpctl: error: a redacting process ended unexpectedly (killed by SIGKILL)\n")
    assert [path.name for path in target.parent.iterdir()] == ["salt"]

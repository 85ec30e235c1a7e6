"""``dcpctl redact --jobs N``: one file's connections shared among worker processes give the output of one
process, byte for byte, and the same summary; a worker that fails is one line, and nothing is written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_redact_capture import ROOT, _big_document, _cut, _redact, _retransmitted, _sacked, _two_clients, captures

import dcpctl.commands.redact as redact_command
from dcpctl.exitcode import ExitCode
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
    real = redact_command.redact_capture_jobs

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["jobs"])
        return real(*args, **kwargs)

    monkeypatch.setattr(redact_command, "redact_capture_jobs", spy)
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


def test_options_across_connections_are_redacted_by_one_process(tmp_path: Path, shared: list[int]) -> None:
    """--hash-names finds a name learned on one connection in another's messages; --map-addresses counts
    the distinct addresses: both need every connection in one process."""
    source = _two_clients(tmp_path)
    for option in ("--hash-names", "--map-addresses"):
        run = _redact(source, tmp_path / "out.pcap", "--jobs", "2", option)
        assert run.code == ExitCode.OK, run.err.getvalue()
    assert shared == []


def test_connections_are_shared_out_by_weight(tmp_path: Path) -> None:
    source = str(_realistic(tmp_path))
    weights: dict[Endpoints, int] = {}
    plan(source, weights=weights)
    assert len(weights) >= 4  # the four DCP connections (the small KV one may fall between samples)
    given = redactjobs.owners(source, 2)
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

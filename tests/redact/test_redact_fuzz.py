"""Mutated captures through ``dcpctl redact``: any bytes give a readable copy or one error line, with a
documented exit code and never an exception; with its connections shared by two processes, the copy is the
one process's, byte for byte, and so is what it says."""

from __future__ import annotations

from pathlib import Path

import pcapy
from fuzzkit import EDITS, FORMS, SEGMENT_SIZES, mutate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_redact_capture import SALT, Run

from dcpctl.exitcode import ExitCode
from dcpctl.sources.pcap import open_offline

OPTIONS = [[], ["--values", "drop"], ["--keep-unparsed"], ["--no-keep-json-names"], ["--keep-xattr", "_sync"]]
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _frames(path: Path) -> int:
    """The frames libpcap reads from a file, up to any damage."""
    reader, count = open_offline(str(path)), 0
    try:
        while reader.next()[0] is not None:
            count += 1
    except pcapy.PcapError:
        pass
    return count


def _redact(tmp_path: Path, data: bytes, jobs: str, options: list[str]) -> tuple[Run, Path]:
    source, out, salt = tmp_path / "fuzz.pcap", tmp_path / f"out-{jobs}.pcap", tmp_path / "salt"
    source.write_bytes(data)
    salt.write_text(SALT)
    out.unlink(missing_ok=True)
    return Run(["redact", str(source), "-o", str(out), "--salt-file", str(salt), "-j", jobs, *options]), out


@settings(FUZZ, max_examples=150)
@given(size=st.sampled_from(SEGMENT_SIZES), edits=EDITS, options=st.sampled_from(OPTIONS),
       form=st.sampled_from(FORMS))
def test_a_mutated_capture_redacts_to_a_readable_copy_or_one_error_line(
        tmp_path: Path, size: int, edits: list[tuple[str, int, int, bytes]], options: list[str],
        form: str) -> None:
    run, out = _redact(tmp_path, mutate(size, edits, form), "1", options)
    err = run.err.getvalue()
    assert run.code in (ExitCode.OK, ExitCode.INPUT), err
    assert "Traceback" not in err
    assert all(line.startswith("dcpctl: ") for line in err.splitlines()), err
    if run.code == ExitCode.INPUT:
        assert err.count("\n") == 1, err
        assert not out.exists()  # written whole or not at all
        return
    decoded = Run(["decode", str(out), "-F", "jsonl", "-j", "1"])
    assert decoded.code in (ExitCode.OK, ExitCode.DIAGNOSTICS), decoded.err.getvalue()
    assert "damaged" not in decoded.err.getvalue()  # the copy is a whole capture file, whatever the input was
    assert _frames(out) <= _frames(tmp_path / "fuzz.pcap")  # frames are left out, never made up


@settings(FUZZ, max_examples=30)
@given(size=st.sampled_from(SEGMENT_SIZES), edits=EDITS, options=st.sampled_from(OPTIONS),
       form=st.sampled_from(FORMS))
def test_two_processes_redact_a_mutated_capture_as_one_does(
        tmp_path: Path, size: int, edits: list[tuple[str, int, int, bytes]], options: list[str],
        form: str) -> None:
    data = mutate(size, edits, form)
    one, one_out = _redact(tmp_path, data, "1", options)
    two, two_out = _redact(tmp_path, data, "2", options)
    assert (two.code, two.err.getvalue()) == (one.code, one.err.getvalue())
    if one.code == ExitCode.OK:
        assert two_out.read_bytes() == one_out.read_bytes()

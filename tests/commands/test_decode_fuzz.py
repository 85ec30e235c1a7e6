"""Mutated captures through ``dcpctl decode`` (issue 17): any bytes give output and a documented exit code,
never an exception, with either number of processes and in every format."""

from __future__ import annotations

import io
from pathlib import Path

from fuzzkit import EDITS, SEGMENT_SIZES, mutate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(size=st.sampled_from(SEGMENT_SIZES), edits=EDITS, fmt=st.sampled_from(["jsonl", "json", "pretty", "hexdump"]),
       jobs=st.sampled_from(["1", "2"]),
       extra=st.sampled_from([[], ["--summary"], ["--strict"], ["--count", "3"], ["--filter", "by_seqno > 1"]]))
def test_a_mutated_capture_decodes_without_an_exception(tmp_path: Path, size: int,
                                                        edits: list[tuple[str, int, int, bytes]], fmt: str, jobs: str,
                                                        extra: list[str]) -> None:
    path = tmp_path / "fuzz.pcap"
    path.write_bytes(mutate(size, edits))
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False, width=120)
    code = main(["decode", str(path), "-F", fmt, "-j", jobs, *extra], env)
    assert code in (ExitCode.OK, ExitCode.INPUT, ExitCode.DIAGNOSTICS), err.getvalue()
    assert "Traceback" not in err.getvalue()
    if "--summary" not in extra:  # the summary table goes to standard error with --format
        assert all(line.startswith("dcpctl: ") for line in err.getvalue().splitlines()), err.getvalue()
    if code == ExitCode.INPUT:
        assert err.getvalue().count("\n") == 1

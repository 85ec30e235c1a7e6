"""``dcpctl decode -f TEMPLATE``: the same lines ``stream -f`` prints live, from a capture, with decode's filters,
count and summary counting only the messages the template writes."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from capturekit import session_packets, write_capture
from servekit import serving

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "dcp-session.pcap"


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False, width=200)
    return main(list(args), env), out.getvalue(), err.getvalue()


def records(*args: str) -> list[dict[str, Any]]:
    code, out, err = run("decode", "-F", "jsonl", *args)
    assert code == ExitCode.OK, err
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "big.pcap"
    path.write_bytes(write_capture(session_packets() * 300))
    return path


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_line_per_message_that_has_every_field(big: Path, jobs: str) -> None:
    code, out, err = run("decode", "-j", jobs, "-f", "{vbucket} {by_seqno} {key} {value}", str(big))
    assert code == ExitCode.OK, err
    expected = [f"{r['vbucket']} {r['by_seqno']} {r['key']} {r['value']}"
                for r in records(str(big)) if "by_seqno" in r and "key" in r and "value" in r]
    assert len(expected) == 900  # the sample's two mutations and a deletion (an empty value), 300 times
    assert out.splitlines() == expected


def test_lists_are_json_and_specs_format_the_values() -> None:
    code, out, _ = run("decode", "-f", "{opcode} {cas:#x} {failover_log}", str(SAMPLE))
    assert code == ExitCode.OK
    (line,) = out.splitlines()
    opcode, cas, log = line.split(" ", 2)
    (answer,) = [r for r in records(str(SAMPLE)) if "failover_log" in r]
    assert (opcode, int(cas, 16), json.loads(log)) == (answer["opcode"], answer["cas"], answer["failover_log"])


def test_count_and_filters_count_the_lines_written(big: Path) -> None:
    code, out, _ = run("decode", "-c", "3", "-f", "{by_seqno}", "--opcode", "DCP_MUTATION", str(big))
    assert (code, out.split()) == (ExitCode.OK, ["201", "202", "201"])
    code, out, _ = run("decode", "-c", "2", "-f", "{rollback_seqno}", str(big))
    assert (code, out.split()) == (ExitCode.OK, ["200", "200"])  # not cut short by the messages before


def test_summary_goes_to_standard_error_beside_the_lines() -> None:
    code, out, err = run("decode", "--summary", "-f", "{key}", "--filter", "exists(by_seqno)", str(SAMPLE))
    assert code == ExitCode.OK
    assert out.split() == ["airline_10", "airline_137", "airline_9999"]
    assert err.startswith("dcpctl summary")
    assert "201-203" in err  # the table counts what was written


@pytest.mark.parametrize("args", [["-F", "jsonl"], ["-F", "pretty"]])
def test_a_format_and_a_template_exclude_each_other(args: list[str]) -> None:
    code, out, err = run("decode", *args, "-f", "{key}", str(SAMPLE))
    assert (code, out) == (ExitCode.USAGE, "")
    assert err.strip() == "dcpctl: error: -f and --format exclude each other: -f writes its own lines"


def test_a_bad_template_is_refused_before_the_capture_is_read(tmp_path: Path) -> None:
    code, _, err = run("decode", "-f", "{by_seqn}", str(tmp_path / "absent.pcap"))
    assert code == ExitCode.USAGE
    assert "unknown field 'by_seqn' (did you mean by_seqno?)" in err


def test_a_value_that_does_not_fit_its_spec_stops_with_one_line() -> None:
    code, out, err = run("decode", "-f", "{key:d}", str(SAMPLE))
    assert (code, out) == (ExitCode.USAGE, "")
    assert err.startswith("dcpctl: error: -f: bad template for HELLO: ")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_width_the_capture_supplies_stops_with_one_line(jobs: str) -> None:
    """'{key:>{cas}}': the first mutation's CAS as a width would build a line of exabytes."""
    code, out, err = run("decode", "-j", jobs, "-f", "{key:>{cas}}", str(SAMPLE))
    assert code == ExitCode.USAGE
    assert err.startswith("dcpctl: error: -f: bad template for DCP_MUTATION: {key:>")
    assert len(err.splitlines()) == 1
    assert all(len(line) < 100 for line in out.splitlines())  # the messages before it, at their own width


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_an_index_past_the_end_skips_the_message_not_the_run(jobs: str) -> None:
    """'{value[0]}' of a deletion's empty value (and '{vbucket[0]}' of a number) is a field the message does
    not have: it is skipped quietly, as a message without the field is."""
    code, out, err = run("decode", "-j", jobs, "-f", "{opcode} {value[0]}", str(SAMPLE))
    assert (code, err) == (ExitCode.OK, "")
    expected = [f"{r['opcode']} {r['value'][0]}" for r in records(str(SAMPLE)) if isinstance(r.get("value"), str)
                and r["value"]]
    assert "DCP_DELETION" not in out
    assert out.splitlines() == expected
    code, out, err = run("decode", "-j", jobs, "-f", "{vbucket[0]}", str(SAMPLE))
    assert (code, out, err) == (ExitCode.OK, "", "")


def test_count_counts_the_messages_an_index_reaches_in_base64() -> None:
    """-c counts the lines written, the index tried on the key as written (base64 is longer than the text)."""
    code, out, err = run("decode", "--base64", "-c", "1", "-f", "{key[15]}", str(SAMPLE))
    keys = [r["key"] for r in records("--base64", str(SAMPLE)) if isinstance(r.get("key"), str) and len(r["key"]) > 15]
    assert (code, err) == (ExitCode.OK, "")
    assert out.splitlines() == [keys[0][15]]


def test_stream_skips_a_message_an_index_does_not_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DCPCTL_PASSWORD", "password")
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False, width=200)
    with serving("--vbuckets", "1", "--items", "3") as server:
        code = main(["stream", f"127.0.0.1:{server.port}", "--until", "now", "-f", "{key[0]} {by_seqno[0]}"], env)
        assert (code, out.getvalue(), err.getvalue()) == (ExitCode.OK, "", "")
        code = main(["stream", f"127.0.0.1:{server.port}", "--until", "now", "-f", "{opcode} {key[0]}"], env)
    assert (code, err.getvalue()) == (ExitCode.OK, "")
    assert len(out.getvalue().splitlines()) == 3


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
def test_capture_writes_the_lines_live_and_counts_them(tmp_path: Path) -> None:
    printed = tmp_path / "lines"
    with serving("--vbuckets", "2", "--items", "20") as server, printed.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "dcpctl", "capture", "-i", "lo", "-p", str(server.port),
                                 "-c", "5", "-f", "{opcode} {vbucket} {by_seqno}"], stdout=sink,
                                stderr=subprocess.PIPE)
        assert proc.stderr is not None
        assert proc.stderr.readline().startswith(b"dcpctl: capturing on lo")
        streamed = subprocess.run([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{server.port}",
                                   "--until", "now", "--summary"], capture_output=True, timeout=120, check=False,
                                  env={**os.environ, "DCPCTL_PASSWORD": "password"})
        assert streamed.returncode == ExitCode.OK, streamed.stderr
        try:
            _, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=30)
    assert proc.returncode == ExitCode.OK, stderr
    lines = printed.read_text().splitlines()
    assert len(lines) == 5  # the count is of lines written: messages without a by_seqno are not counted
    assert all(line.startswith("DCP_") and line.split()[2].isdigit() for line in lines), lines

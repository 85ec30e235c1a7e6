"""Without -F, every command asks the one place that chooses the output format: ``Environment.output_format``
(made to read on a terminal, machine-readable when piped)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TypeVar

import pytest
from servekit import serving

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "dcp-session.pcap"
Choice = TypeVar("Choice")


class TerminalsFormatWhenPiped(Environment):
    """Piped, yet it chooses the terminal's format: a command that restates the rule prints JSON instead."""

    def output_format(self, chosen: Choice | None, terminal: Choice, piped: Choice) -> Choice:
        return chosen if chosen is not None else terminal


def _run(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = TerminalsFormatWhenPiped(stdout=out, stderr=err, stdin=io.BytesIO(stdin), stdout_isatty=False,
                                   stderr_isatty=False, color=False, width=160)
    return main(list(args), env), out.getvalue(), err.getvalue()


def _not_json(out: str) -> bool:
    """Neither one JSON document (maybe indented) nor JSON lines."""
    for text in (out, out.splitlines()[0]):
        try:
            json.loads(text)
        except ValueError:
            continue
        return False
    return True


def test_decode_asks_the_environment() -> None:
    code, out, err = _run("decode", str(SAMPLE))
    assert code == ExitCode.OK, err
    assert "DCP_MUTATION" in out
    assert _not_json(out)


def test_stream_and_failover_ask_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DCPCTL_PASSWORD", "password")
    with serving("--vbuckets", "2", "--items", "20", "--seed", "3") as server:
        code, out, err = _run("stream", f"127.0.0.1:{server.port}", "--until", "now", "--timeout", "5")
        assert code == ExitCode.OK, err
        assert "DCP_MUTATION" in out
        assert _not_json(out)
        code, out, err = _run("failover", f"127.0.0.1:{server.port}", "--timeout", "5")
    assert code == ExitCode.OK, err
    assert "vbucket" in out
    assert _not_json(out)


def test_rollback_explain_asks_the_environment() -> None:
    code, out, err = _run("rollback", "explain", "--failover-log", "-", "--uuid", "2222", "--start", "45",
                          "--high-seqno", "100", stdin=b"[[3333,30],[2222,20],[1111,0]]")
    assert code == ExitCode.OK, err
    assert "Rollback" in out
    assert _not_json(out)


@pytest.mark.parametrize(("chosen", "tty", "expected"), [(None, True, "pretty"), (None, False, "jsonl"),
                                                         ("json", True, "json"), ("json", False, "json")])
def test_the_rule_itself(chosen: str | None, tty: bool, expected: str) -> None:
    assert Environment(stdout_isatty=tty).output_format(chosen, "pretty", "jsonl") == expected

"""Without -F, every message-printing command asks the one place that chooses the output format:
``Environment.default_format`` (pretty on a terminal, JSON lines when piped)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from servekit import serving

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "dcp-session.pcap"


class JsonByDefault(Environment):
    """An environment whose choice differs from the terminal rule, so a command that restates the rule shows."""

    def default_format(self) -> str:
        return "json"


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = JsonByDefault(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                        color=False, width=160)
    return main(list(args), env), out.getvalue(), err.getvalue()


def test_decode_takes_the_environments_default_format() -> None:
    code, out, err = _run("decode", str(SAMPLE))
    assert code == ExitCode.OK, err
    assert len(json.loads(out)) == 22  # one JSON document, not 22 lines


def test_stream_takes_the_environments_default_format(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DCPCTL_PASSWORD", "password")
    with serving("--vbuckets", "2", "--items", "20", "--seed", "3") as server:
        code, out, err = _run("stream", f"127.0.0.1:{server.port}", "--until", "now", "--timeout", "5")
    assert code == ExitCode.OK, err
    records = json.loads(out)
    assert sum(r["opcode"] == "DCP_MUTATION" for r in records) >= 1


def test_the_rule_itself_is_pretty_on_a_terminal_and_jsonl_when_piped() -> None:
    assert Environment(stdout_isatty=True).default_format() == "pretty"
    assert Environment(stdout_isatty=False).default_format() == "jsonl"

"""dcpctl rollback explain as a user runs it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment


def run(args: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(stdin), stdout_isatty=False,
                      stderr_isatty=False, color=False, width=200)
    return main(args, env), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("log", [
    '[[3333,30],[2222,20],[1111,0]]',
    '[{"vbucket_uuid":3333,"seqno":30},{"vbucket_uuid":2222,"seqno":20},{"vbucket_uuid":1111,"seqno":0}]',
    '{"opcode":"DCP_STREAM_REQ","failover_log":[{"vbucket_uuid":3333,"seqno":30},{"vbucket_uuid":2222,"seqno":20},'
    '{"vbucket_uuid":1111,"seqno":0}]}',
    '[{"vbucket":0,"high_seqno":100,"failover_log":[["0xd05",30],[2222,20],[1111,0]]}]',
])
def test_explain_json(log: str) -> None:
    code, out, _ = run(["rollback", "explain", "--failover-log", "-", "--uuid", "2222", "--start", "45",
                        "--high-seqno", "100"], log.encode())
    assert code == ExitCode.OK
    report = json.loads(out)
    assert report["rollback"] is True
    assert report["rollback_seqno"] == 30
    assert report["rule"] == "consumer_ahead"
    assert [r["status"] for r in report["rounds"]] == ["Rollback", "Success"]
    assert report["result"]["start_seqno"] == 30


def test_explain_pretty_and_no_rollback(tmp_path: Path) -> None:
    path = tmp_path / "log.json"
    path.write_text("[[3333,30],[2222,20],[1111,0]]")
    code, out, _ = run(["rollback", "explain", "--failover-log", str(path), "--uuid", "2222", "--start", "25",
                        "--snap-start", "20", "--snap-end", "30", "--high-seqno", "100", "-F", "pretty"])
    assert code == ExitCode.OK
    assert "Success" in out
    assert "histories agree" in out
    assert "stream would open at seqno 25" in out


@pytest.mark.parametrize(("log", "message"), [("[{\"uuid\": 1}]", "entry 0"), ("not json", "Expecting"),
                                              ("[]", "empty")])
def test_bad_failover_log_is_one_line_exit_3(log: str, message: str) -> None:
    code, _, err = run(["rollback", "explain", "--failover-log", "-", "--uuid", "1", "--start", "1"],
                       log.encode())
    assert code == ExitCode.INPUT
    assert message in err
    assert err.count("\n") == 1


def test_explain_a_capture() -> None:
    sample = Path(__file__).resolve().parents[2] / "samples" / "dcp-session.pcap"
    out = io.StringIO()
    env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False, width=200)
    assert main(["rollback", "explain", str(sample), "-F", "json"], env) == ExitCode.OK
    [story] = json.loads(out.getvalue())
    assert (story["vbucket"], story["rollback_seqno"], story["rule"]) == (12, 200, "consumer_ahead")
    assert story["engine_agrees"] is True
    assert story["retry_correct"] is True
    pretty = io.StringIO()
    env = Environment(stdout=pretty, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False, width=200)
    assert main(["rollback", "explain", str(sample), "-F", "pretty"], env) == ExitCode.OK
    assert "server: Rollback to 200" in pretty.getvalue()
    assert "the client retried as a correct client does" in pretty.getvalue()
    errors = io.StringIO()
    env = Environment(stdout=io.StringIO(), stderr=errors, stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False)
    assert main(["rollback", "explain"], env) == ExitCode.USAGE
    assert errors.getvalue().count("\n") == 1

"""dcpctl rollback explain as a user runs it."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.protocol.encode import encode
from dcpctl.render.env import Environment
from tests.capturekit import write_capture


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


@pytest.mark.parametrize(("log", "message"), [("[{\"uuid\": 1}]", "entry 0"), ("not json", "line 1, column 1"),
                                              ("[]", "empty")])
def test_bad_failover_log_is_one_line_exit_3(log: str, message: str) -> None:
    code, _, err = run(["rollback", "explain", "--failover-log", "-", "--uuid", "1", "--start", "1"],
                       log.encode())
    assert code == ExitCode.INPUT
    assert message in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(("vbucket", "says"), [([], "holds several vbuckets' failover logs: choose one with --vbucket"),
                                               (["--vbucket", "7"], "holds no failover log of vbucket 7")])
def test_a_dump_of_several_vbuckets_needs_a_vbucket_it_holds(vbucket: list[str], says: str) -> None:
    """A readable failover dump of several vbuckets: what is to change is the command line (exit 2)."""
    dump = json.dumps([{"vbucket": n, "high_seqno": 10, "failover_log": [[1111, 0]]} for n in (0, 1)])
    code, out, err = run(["rollback", "explain", "--failover-log", "-", "--uuid", "1111", "--start", "5",
                          *vbucket], dump.encode())
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == f"dcpctl: error: --failover-log: standard input: the file {says}\n"
    code, out, _ = run(["rollback", "explain", "--failover-log", "-", "--uuid", "1111", "--start", "5",
                        "--vbucket", "1"], dump.encode())
    assert code == ExitCode.OK
    assert json.loads(out)["rollback"] is False


def test_a_dumps_high_seqno_is_the_default_high_seqno() -> None:
    """A failover dump says the vbucket's high seqno as the node gave it: a start past it is explained as the
    rollback the node answers (serve, asked by negotiate, rolls back to 63 too), unless --high-seqno says
    otherwise."""
    dump = b'[{"vbucket": 3, "high_seqno": 63, "failover_log": [[4444, 0]]}]'
    asked = ["rollback", "explain", "--failover-log", "-", "--uuid", "4444", "--start", "100"]
    code, out, err = run(asked, dump)
    assert code == ExitCode.OK, err
    assert (json.loads(out)["rollback"], json.loads(out)["rollback_seqno"]) == (True, 63)
    code, out, err = run([*asked, "--high-seqno", "200"], dump)
    assert code == ExitCode.OK, err
    assert json.loads(out)["rollback"] is False
    code, _, err = run(asked, dump.replace(b"63", b'"sixty"'))
    assert code == ExitCode.INPUT
    assert "high_seqno is not a number" in err


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


SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "dcp-session.pcap"


@pytest.mark.parametrize("log", [
    b"[" * 5000 + b"]" * 5000,  # RecursionError in json.loads
    b'{"failover_log":' * 5000 + b"[]" + b"}" * 5000,
    b"[[1e999, 0]]",  # infinity
    b'[["\\ud800", 0]]',  # a lone surrogate
    b"[[\xff\xfe, 0]]",  # not UTF-8
    b"[[18446744073709551616, 0]]",  # a uuid past 64 bits
    b'[["0x1' + b"0" * 16 + b'", 0]]',
    b'[["' + b"9" * 5000 + b'", 0]]',  # past int()'s digits
    b"[[-1, 0]]",
    b'[{"vbucket": 1, "failover_log": [[1, 0]]}, 7]',  # a dump with something else in it
    b'[{"vbucket": 1, "failover_log": [[1, 0]]}, {"vbucket": 2}]',
])
def test_hostile_failover_logs_are_one_line_exit_3(log: bytes) -> None:
    """Issue 17: deep JSON in a --failover-log file was a RecursionError traceback; any file that is not a
    failover log is one line, exit 3."""
    code, _, err = run(["rollback", "explain", "--failover-log", "-", "--uuid", "1", "--start", "1",
                        "--vbucket", "2"], log)
    assert code == ExitCode.INPUT, err
    assert err.startswith("dcpctl: error: --failover-log: standard input"), err
    assert err.count("\n") == 1, err
    assert len(err) < 200, err


def test_a_deep_compare_file_is_one_line_exit_3(tmp_path: Path) -> None:
    """failover --compare reads its file before connecting, with the same loader."""
    earlier = tmp_path / "earlier.json"
    earlier.write_bytes(b"[" * 5000 + b"]" * 5000)
    code, _, err = run(["failover", "127.0.0.1:1", "--compare", str(earlier)])
    assert code == ExitCode.INPUT, err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("option", [["--uuid", "3"], ["--start", "5"], ["--failover-log", "-"], ["--strict"],
                                    ["--purge-seqno", "0"], ["--high-seqno", "9"], ["--snap-end", "4"]])
def test_options_of_one_request_are_refused_with_a_capture(option: list[str]) -> None:
    """Issue 17: rollback explain CAPTURE --uuid 3 ignored --uuid. A capture's stream requests carry their own
    uuid, start and snapshot, so an option describing one request is a usage error there (exit 2), not a
    silent no-op; --vbucket, which can mean "only this vbucket's", is applied."""
    code, out, err = run(["rollback", "explain", str(SAMPLE), *option])
    assert code == ExitCode.USAGE, err
    assert err.startswith(f"dcpctl: error: {option[0]}: applies to one request"), err
    assert err.count("\n") == 1
    assert out == ""


def test_vbucket_chooses_a_captures_rollbacks_and_port_needs_one() -> None:
    code, out, _ = run(["rollback", "explain", str(SAMPLE), "--vbucket", "12", "-F", "json"])
    assert code == ExitCode.OK
    assert [story["vbucket"] for story in json.loads(out)] == [12]
    code, out, _ = run(["rollback", "explain", str(SAMPLE), "--vbucket", "11", "-F", "json"])
    assert code == ExitCode.OK
    assert json.loads(out) == []
    code, _, err = run(["rollback", "explain", "--failover-log", "-", "--uuid", "1", "--start", "1", "-p", "11210"],
                       b"[[1, 0]]")
    assert code == ExitCode.USAGE, err


def test_the_expected_retrys_uuid_is_unknown_without_the_clients_failover_log() -> None:
    """Issue 17: expected_retry.vbucket_uuid was 0 when the capture never showed the client a failover log
    (the sample's client resumes from a saved one): the uuid is unknown, null."""
    code, out, _ = run(["rollback", "explain", str(SAMPLE), "-F", "json"])
    assert code == ExitCode.OK
    [story] = json.loads(out)
    assert story["expected_retry"]["start_seqno"] == 200
    assert story["expected_retry"]["vbucket_uuid"] is None


def _style_at(out: str, phrase: str) -> str:
    """The last escape sequence (SGR) before ``phrase`` in a coloured output: the style it is printed in."""
    at = out.index(phrase)
    return re.findall(r"\x1b\[[0-9;]*m", out[:at])[-1]


LOG = b"[[3333,30],[2222,20],[1111,0]]"


def test_the_explanation_is_plain_text_and_the_rule_dim() -> None:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(LOG), stdout_isatty=True, stderr_isatty=False,
                      color=True, width=200)
    assert main(["rollback", "explain", "--failover-log", "-", "--uuid", "2222", "--start", "45", "--high-seqno",
                 "100"], env) == ExitCode.OK
    text = out.getvalue()
    assert _style_at(text, "[consumer_ahead]") == "\x1b[2m"  # dim
    assert _style_at(text, "uuid 2222's history ends at seqno 30") == "\x1b[0m"  # plain
    sample = Path(__file__).resolve().parents[2] / "samples" / "dcp-session.pcap"
    out = io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=True, stderr_isatty=False,
                      color=True, width=200)
    assert main(["rollback", "explain", str(sample)], env) == ExitCode.OK
    text = out.getvalue()
    assert _style_at(text, "[consumer_ahead]") == "\x1b[2m"
    assert _style_at(text, "uuid 209993845321212's history ends") == "\x1b[0m"
    assert _style_at(text, "engine: agrees") == "\x1b[0m"


def test_a_wrapped_explanation_stays_under_its_first_column() -> None:
    out = io.StringIO()
    env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(LOG), stdout_isatty=True,
                      stderr_isatty=False, color=False, width=50)
    assert main(["rollback", "explain", "--failover-log", "-", "--uuid", "2222", "--start", "45", "--high-seqno",
                 "100"], env) == ExitCode.OK
    lines = out.getvalue().splitlines()
    assert max(map(len, lines)) <= 50
    assert all(line.startswith(("round ", "  ", "stream would open")) for line in lines), lines
    assert len([line for line in lines if line.startswith("  [")]) == 2  # one explanation a round


UUID = 250584532339884


def _rollback_capture(tmp_path: Path, asked: tuple[int, int, int], rollback_seqno: int,
                      server_port: int = 11210, answer: dict[str, Any] | None = None,
                      retried: str = "Success") -> Path:
    """A client asks (start, snap_start, snap_end) with UUID, the newest and only entry of the server's log; the
    server answers Rollback (or ``answer``'s fields), the client retries from the rollback seqno and the stream
    opens (or is refused with ``retried``)."""
    start, snap_start, snap_end = asked
    opened: dict[str, Any] = {"failover_log": [{"vbucket_uuid": UUID, "seqno": 0}]} if retried == "Success" else {}
    request = {"magic": "ClientRequest", "opcode": "DCP_STREAM_REQ", "vbucket": 1, "flags": 0, "reserved": 0,
               "end_seqno": (1 << 64) - 1, "vbucket_uuid": UUID}
    records = [
        (True, {**request, "opaque": 1, "start_seqno": start, "snap_start_seqno": snap_start,
                "snap_end_seqno": snap_end}),
        (False, {"magic": "ClientResponse", "opcode": "DCP_STREAM_REQ", "status": "Rollback", "opaque": 1,
                 **(answer or {"rollback_seqno": rollback_seqno})}),
        (True, {**request, "opaque": 2, "start_seqno": rollback_seqno, "snap_start_seqno": rollback_seqno,
                "snap_end_seqno": rollback_seqno}),
        (False, {"magic": "ClientResponse", "opcode": "DCP_STREAM_REQ", "status": retried, "opaque": 2, **opened}),
    ]
    path = tmp_path / "rollback.pcap"
    path.write_bytes(write_capture([(client, encode(record)) for client, record in records],
                                   server=("127.0.0.1", server_port)))
    return path


def test_a_rollback_below_the_snapshot_on_the_newest_history_names_the_high_seqno(tmp_path: Path) -> None:
    """The client resumed at 100 from a vbucket whose high seqno is 10: the engine printed ``would say None`` and
    blamed the purge seqno, which rolls back to 0. A rollback to 10 on the newest history is the high seqno."""
    capture = str(_rollback_capture(tmp_path, (100, 100, 100), 10))
    code, out, _ = run(["rollback", "explain", capture, "-F", "pretty"])
    assert code == ExitCode.OK
    assert "None" not in out
    assert "engine: agrees [consumer_ahead]" in out
    assert "ends at seqno 10 on the server (its high seqno" in out
    code, out, _ = run(["rollback", "explain", capture, "-F", "json"])
    [story] = json.loads(out)
    assert (story["rule"], story["engine_agrees"]) == ("consumer_ahead", True)
    assert "The server's high seqno was 10" in story["verdict"]
    assert "purge" not in story["verdict"]


def test_a_rollback_to_the_snapshot_start_blames_the_high_seqno_not_the_purge_seqno(tmp_path: Path) -> None:
    """Rolled back to its snapshot start 90, the high seqno is somewhere below the snapshot end, so the engine
    (which cannot know it) sees no rollback: it says so in words, and names the high seqno as the cause."""
    capture = str(_rollback_capture(tmp_path, (95, 90, 100), 90))
    code, out, _ = run(["rollback", "explain", capture, "-F", "pretty"])
    assert code == ExitCode.OK
    assert "None" not in out
    assert "engine: sees no rollback [snapshot_within_history]" in out
    code, out, _ = run(["rollback", "explain", capture, "-F", "json"])
    [story] = json.loads(out)
    assert story["engine_agrees"] is False
    assert "high seqno (not in the capture) was below the client's snapshot end 100" in story["verdict"]
    assert "purge seqno (not" not in story["verdict"]


@pytest.mark.parametrize("status", ["NotMyVbucket", "KeyEnoent", "Eaccess", "0xe3"])
def test_a_refused_retry_is_named_as_kv_engine_names_its_status(tmp_path: Path, status: str) -> None:
    """The retry's status was printed as hex (0x07, 0x24) where every other status is a kv_engine name."""
    capture = str(_rollback_capture(tmp_path, (100, 100, 100), 10, retried=status))
    code, out, _ = run(["rollback", "explain", capture, "-F", "pretty"])
    assert code == ExitCode.OK
    assert re.search(rf"retry: +start 10 uuid {UUID} snapshot 10-10 -> {status}\n", out), out
    code, out, _ = run(["rollback", "explain", capture, "-F", "json"])
    assert json.loads(out)[0]["retry_status"] == status


def test_a_rollback_answer_without_a_seqno_says_it_cannot_be_read(tmp_path: Path) -> None:
    """A Rollback answer whose value is no 8-byte seqno printed "Rollback to None" and an empty verdict."""
    capture = str(_rollback_capture(tmp_path, (100, 100, 100), 10, answer={"value": "0000000a",
                                                                          "value_encoding": "hex"}))
    code, out, _ = run(["rollback", "explain", capture, "-F", "pretty"])
    assert code == ExitCode.OK
    assert "None" not in out
    assert "server: Rollback, to a seqno it does not give (its value has 4 bytes, not a seqno's 8)" in out
    assert "engine: agrees" not in out
    code, out, _ = run(["rollback", "explain", capture, "-F", "json"])
    [story] = json.loads(out)
    assert (story["rollback_seqno"], story["engine_agrees"], story["retry_correct"]) == (None, None, None)
    assert story["rollback_unreadable"] == "its value has 4 bytes, not a seqno's 8"
    assert story["verdict"].startswith("The Rollback answer's seqno cannot be read (its value has 4 bytes")
    assert "With the failover log the server sent, the engine sees no rollback [" in story["verdict"]


def test_a_capture_on_another_port_gets_decodes_port_hint(tmp_path: Path) -> None:
    """It said "no rollback negotiation in the capture", exit 0, where decode suggests --port."""
    capture = str(_rollback_capture(tmp_path, (100, 100, 100), 10, server_port=12000))
    hint = ("dcpctl: protocol_on_other_port: no traffic on port 11210; port 12000 (4 packets) carries what looks "
            "like the memcached binary protocol: try --port 12000\n")
    for fmt in ("pretty", "json"):
        code, out, err = run(["rollback", "explain", capture, "-F", fmt])
        assert code == ExitCode.OK
        assert err == hint
        assert out == ("no rollback negotiation in the capture\n" if fmt == "pretty" else "[]\n")
    decoded = io.StringIO()
    decode_errors = io.StringIO()
    env = Environment(stdout=decoded, stderr=decode_errors, stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False, width=200)
    assert main(["decode", capture, "-F", "jsonl"], env) == ExitCode.OK
    assert decode_errors.getvalue() == hint  # the same line decode gives
    code, out, err = run(["rollback", "explain", capture, "--port", "12000", "-F", "json"])
    assert (code, err) == (ExitCode.OK, "")
    assert [story["rollback_seqno"] for story in json.loads(out)] == [10]

"""Edges of a live stream a user trips on: a start past --until, a symlinked --state, a --compare file that is
not a failover dump."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from servekit import free_port, run, serving

from dcpctl.cli import main
from dcpctl.client.state import State, StateError, VbucketPosition, check_writable, load, save
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment
from dcpctl.safetext import brief

PAST = "starts at 40, past --until 10: nothing to stream"


@pytest.fixture(autouse=True)
def _password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DCPCTL_PASSWORD", "password")


@pytest.mark.parametrize("summary", [False, True])
def test_a_resume_past_until_is_said_once_per_vbucket(tmp_path: Path, summary: bool) -> None:
    """users.md #7: a start at or past the end streams nothing; a start known only from the state file is
    said, not silent (the decoding path and the --summary path alike)."""
    state = tmp_path / "state.json"
    with serving("--vbuckets", "2", "--items", "100") as server:
        host = f"127.0.0.1:{server.port}"
        code, _, err = run("stream", host, "--until", "40", "--state", str(state), "-F", "jsonl")
        assert code == ExitCode.OK, err
        shown = ["--summary"] if summary else ["-F", "jsonl"]
        code, records, err = run("stream", host, "--from", "resume", "--state", str(state), "--until", "10",
                                 "--timeout", "5", *shown)
    assert code == ExitCode.OK, err
    assert not [r for r in records if "by_seqno" in r]
    for vbucket in (0, 1):
        assert err.count(f"dcpctl: vbucket {vbucket}: {PAST}\n") == 1, err
    assert json.loads(state.read_text())["vbuckets"]["0"]["seqno"] == 40  # nothing moved


def test_a_resume_below_until_says_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    with serving("--vbuckets", "1", "--items", "50") as server:
        host = f"127.0.0.1:{server.port}"
        assert run("stream", host, "--until", "10", "--state", str(state))[0] == ExitCode.OK
        code, records, err = run("stream", host, "--from", "resume", "--state", str(state), "--until", "20",
                                 "-F", "jsonl", "--timeout", "5")
    assert code == ExitCode.OK, err
    assert [r["by_seqno"] for r in records if "by_seqno" in r] == list(range(11, 21))
    assert "nothing to stream" not in err


def test_a_symlinked_state_file_is_written_through_to_its_target(tmp_path: Path) -> None:
    """The link stays a link and its target gets the new state (an os.replace onto the link's path made
    it a regular file and left the target stale); the temporary file is made beside the target."""
    elsewhere = tmp_path / "kept"
    elsewhere.mkdir()
    target = elsewhere / "state.json"
    link = tmp_path / "state.json"
    link.symlink_to(target)  # dangling at first: the first save creates the target
    check_writable(link)
    save(link, State("default", {0: VbucketPosition(7, 5, 1, 5)}))
    assert link.is_symlink()
    assert target.is_file()
    save(link, State("default", {0: VbucketPosition(7, 9, 6, 9)}))
    assert link.is_symlink()
    assert load(link, "default").vbuckets[0].seqno == 9
    assert json.loads(target.read_text())["vbuckets"]["0"]["seqno"] == 9
    assert sorted(p.name for p in elsewhere.iterdir()) == ["state.json"]  # no temporary file left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "state.json"]


def test_a_run_that_fails_before_streaming_writes_no_state_file(tmp_path: Path) -> None:
    """-b other, which the server does not have: exit 8 and no state file. One was written for bucket 'other',
    so every later run with the right bucket was refused (exit 3) until it was deleted."""
    state = tmp_path / "state.json"
    with serving("--vbuckets", "2", "--items", "20") as server:
        host = f"127.0.0.1:{server.port}"
        code, _, err = run("stream", host, "-b", "other", "--state", str(state), "-F", "jsonl", "--timeout", "5")
        assert code == ExitCode.PROTOCOL, err
        assert "no such bucket" in err
        assert list(tmp_path.iterdir()) == []
        code, records, err = run("stream", host, "--state", str(state), "--from", "resume", "--until", "now",
                                 "-F", "jsonl", "--timeout", "5")
    assert code == ExitCode.OK, err
    assert len([r for r in records if r["opcode"] in ("DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION")]) == 20
    assert json.loads(state.read_text())["bucket"] == "default"


# Holds the save lock of the state file argv[1] as a save does while it writes its temporary file, then renames it.
SAVING_ELSEWHERE = """
import os, sys, time
from pathlib import Path
from dcpctl.client import state
target = Path(sys.argv[1])
with state._save_lock(target) as held:
    assert held
    temporary = target.with_name(f".{target.name}.inflight")
    temporary.write_text("{}")
    os.chmod(temporary, 0o600)
    print("writing", flush=True)
    time.sleep(1)
    os.replace(temporary, target)
"""


def test_a_save_that_tidies_waits_for_another_process_s_save_in_progress(tmp_path: Path) -> None:
    """Removing stale temporary files is safe with two processes on one state file: a save holds the lock from
    its temporary file to its rename, and the tidying save waits for it instead of removing the file under it."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    state = tmp_path / "state.json"
    other = subprocess.Popen([sys.executable, "-c", SAVING_ELSEWHERE, str(state)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None
        assert other.stdout.readline() == "writing\n"
        save(state, State("default", {0: VbucketPosition(7, 5, 1, 5)}), tidy=True)
        _, err = other.communicate(timeout=30)
    finally:
        if other.poll() is None:
            other.kill()
        other.communicate(timeout=30)
    assert other.returncode == 0, err  # its rename found its temporary file
    assert load(state, "default").vbuckets[0].seqno == 5  # the later save
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # the lock file gone with the last save


@pytest.mark.parametrize(("body", "says"), [
    (b'[{"vbucket": 0}]', "entry 0 has no failover_log, high_seqno, node"),
    (b"[]", "a dump is a non-empty JSON list"),
    (b'[{"vbucket": 0, "failover_log": [{"seqno": 1}], "high_seqno": 3, "node": "n"}]',
     "no failover_log entries with vbucket_uuid and seqno"),
    (b'[{"vbucket": 0, "failover_log": 5, "high_seqno": 3, "node": "n"}]', "no failover_log entries"),
    (b'[{"vbucket": 0, "failover_log": [], "high_seqno": 3, "node": "n"}, '
     b'{"vbucket": 0, "failover_log": [], "high_seqno": 3, "node": "n"}]', "a vbucket is listed twice"),
    (b"[1]", "entry 0 has no vbucket"),
])
def test_a_compare_file_that_is_not_a_dump_is_one_line_exit_3(tmp_path: Path, body: bytes, says: str) -> None:
    """Refused before connecting (nothing listens on the port): never compared as an empty log."""
    earlier = tmp_path / "c2.json"
    earlier.write_bytes(body)
    code, _, err = run("failover", f"127.0.0.1:{free_port()}", "--compare", str(earlier), "-F", "json")
    assert code == ExitCode.INPUT, err
    assert err == f"dcpctl: error: --compare: {earlier}: not a failover dump: " + err.split(": not a failover "
                                                                                         "dump: ", 1)[1]
    assert says in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(("vbuckets", "says"), [
    ([], "a field holds another kind of value than a state file has there"),
    ({"0": {"vbucket_uuid": 1}}, "no 'seqno' field where one is needed"),
    ({"0": {"vbucket_uuid": 1, "seqno": 2**64, "snap_start_seqno": 0, "snap_end_seqno": 0}},
     "18446744073709551616 is not a whole number from 0 to 2^64-1"),
    ({"v0": {"vbucket_uuid": 1, "seqno": 0, "snap_start_seqno": 0, "snap_end_seqno": 0}},
     "vbucket 'v0' is not a vbucket number (0 to 1023)"),
    ({"5000": {"vbucket_uuid": 1, "seqno": 0, "snap_start_seqno": 0, "snap_end_seqno": 0}},  # was kept and saved
     "vbucket '5000' is not a vbucket number (0 to 1023)"),
    ({"9" * 5000: {"vbucket_uuid": 1, "seqno": 0, "snap_start_seqno": 0, "snap_end_seqno": 0}},
     f"vbucket {brief('9' * 5000)} is not a vbucket number (0 to 1023)"),
    ({"0012": {"vbucket_uuid": 1, "seqno": 0, "snap_start_seqno": 0, "snap_end_seqno": 0}}, None),
])
def test_a_bad_state_file_is_said_in_words_not_a_python_repr(tmp_path: Path, vbuckets: object,
                                                             says: str | None) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 1, "bucket": "default", "vbuckets": vbuckets}))
    if says is None:  # a hand-edited number with leading zeros is still the vbucket it names
        assert list(load(path, "default").vbuckets) == [12]
        return
    with pytest.raises(StateError) as raised:
        load(path, "default")
    assert str(raised.value) == f"{path}: not a dcpctl state file ({says})"


def test_a_compare_of_some_vbuckets_compares_those_only(tmp_path: Path) -> None:
    """The vbuckets --vbuckets left out were reported 'not in this dump' (missing_vbucket), each of them."""
    def json_of(*args: str) -> Any:
        out, err = io.StringIO(), io.StringIO()
        env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                          color=False, width=200)
        assert main(list(args), env) == ExitCode.OK, err.getvalue()
        assert err.getvalue() == ""
        return json.loads(out.getvalue())

    with serving("--vbuckets", "8", "--items", "40") as server:
        earlier = tmp_path / "earlier.json"
        earlier.write_text(json.dumps(json_of("failover", f"127.0.0.1:{server.port}", "-F", "json")))
        changes = json_of("failover", f"127.0.0.1:{server.port}", "--vbuckets", "1,5", "--compare", str(earlier),
                          "-F", "json")
    assert [(change["vbucket"], change["change"]) for change in changes] == [(1, "unchanged"), (5, "unchanged")]

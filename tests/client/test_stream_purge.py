"""A resume below the server's purge seqno (reference 9): the connector asks for v2.2 markers, keeps the purge
seqno a disk snapshot gave, and sends it back, so the server rolls back to 0 only if it purged since."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from servekit import Server, run, serving

from dcpctl.client.consumer import Consumer, Progress
from dcpctl.client.state import State, VbucketPosition, load, save
from dcpctl.exitcode import ExitCode
from dcpctl.protocol import stream_request_value
from dcpctl.protocol.constants import Opcode
from dcpctl.protocol.message import DecodeOptions, decode

ITEMS = ("DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION")
SERVE = ("--vbuckets", "1", "--items", "100", "--seed", "4")


@pytest.fixture(autouse=True)
def _password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DCPCTL_PASSWORD", "password")


def _purged_at(tmp_path: Path, seqno: int) -> str:
    plan = tmp_path / f"purge-{seqno}.toml"
    plan.write_text(f'[[event]]\naction = "purge"\nvbucket = 0\nseqno = {seqno}\n')
    return str(plan)


def _stream(server: Server, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    return run("stream", f"127.0.0.1:{server.port}", "-F", "jsonl", "--timeout", "5", *args)


def _seqnos(records: list[dict[str, Any]]) -> list[int]:
    return [r["by_seqno"] for r in records if r["opcode"] in ITEMS]


def _first_run(tmp_path: Path, purge: int) -> tuple[Path, list[int]]:
    """20 items of a vbucket purged at ``purge``, the state saved: stopped inside its disk snapshot."""
    state = tmp_path / "state.json"
    with serving(*SERVE, "--scenario", _purged_at(tmp_path, purge)) as server:
        code, records, err = _stream(server, "--count", "20", "--state", str(state))
    assert code == ExitCode.OK, err
    marker = next(r for r in records if r["opcode"] == "DCP_SNAPSHOT_MARKER")
    assert (marker["marker_version"], marker["purge_seqno"]) == (2, purge)  # v2.2: asked for, and sent
    return state, _seqnos(records)


def test_a_resume_below_the_purge_seqno_sends_it_back_and_goes_on(tmp_path: Path) -> None:
    state, first = _first_run(tmp_path, 50)
    saved = json.loads(state.read_text())["vbuckets"]["0"]
    assert saved["purge_seqno"] == 50
    assert saved["seqno"] < 50
    capture = tmp_path / "resume.pcap"
    with serving(*SERVE, "--scenario", _purged_at(tmp_path, 50)) as server:
        code, records, err = _stream(server, "--from", "resume", "--state", str(state), "--until", "now",
                                     "--write", str(capture))
        port = server.port
    assert code == ExitCode.OK, err
    assert "roll back" not in err
    second = _seqnos(records)
    assert second[0] == saved["seqno"] + 1
    delivered = first + second
    assert Counter(delivered).most_common(1)[0][1] == 1
    assert max(delivered) == 100
    requests = subprocess.run([sys.executable, "-m", "dcpctl", "decode", "-F", "jsonl", "--opcode",
                               "DCP_STREAM_REQ", "--port", str(port), str(capture)], capture_output=True, text=True,
                               check=True, timeout=60).stdout
    asked = [json.loads(line) for line in requests.splitlines()]
    assert [r["value"] for r in asked if r["direction"] == "client>server"] == ['{"purge_seqno":"50"}']


@pytest.mark.parametrize(("forget", "purged"), [(True, 50), (False, 60)], ids=["older-state-file", "purged-since"])
def test_a_resume_the_purge_seqno_does_not_cover_rolls_back_to_0(tmp_path: Path, forget: bool, purged: int) -> None:
    """A state file of an older dcpctl, without the purge seqno, gets the whole vbucket again; so does one whose
    purge seqno is not the server's own any more (it purged since: the tombstones between may be lost)."""
    state, _ = _first_run(tmp_path, 50)
    if forget:
        older = json.loads(state.read_text())
        del older["vbuckets"]["0"]["purge_seqno"]
        state.write_text(json.dumps(older))
    with serving(*SERVE, "--scenario", _purged_at(tmp_path, purged)) as server:
        code, records, err = _stream(server, "--from", "resume", "--state", str(state), "--until", "now")
    assert code == ExitCode.OK, err
    assert "to 0." in err
    assert _seqnos(records)[0] == 1


def _request_value(purge_seqnos: bool) -> bytes:
    progress = Progress(State("default"), None)
    progress.state.vbuckets[0] = VbucketPosition(5, 20, 0, 100, purge_seqno=50)
    consumer = Consumer(progress, options=DecodeOptions(collections=True), value=b'{"sid":3}',
                        purge_seqnos=purge_seqnos)
    consumer.request(0, 0.0)
    sent = decode(consumer.data_to_send(), 0, DecodeOptions(collections=True))
    assert sent.opcode == Opcode.DCP_STREAM_REQ
    return sent.value


def test_the_purge_seqno_goes_only_to_a_server_that_takes_it() -> None:
    """A server before 8.0 refuses max_marker_version, and reads a purge_seqno key as none it knows."""
    assert json.loads(_request_value(True)) == {"sid": 3, "purge_seqno": "50"}
    assert stream_request_value.parse(_request_value(True)).purge_seqno == 50  # as the server reads it
    assert _request_value(False) == b'{"sid":3}'


def test_the_state_file_keeps_the_purge_seqno_and_reads_one_without(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    state = State("default", {0: VbucketPosition(1, 2, 0, 3, purge_seqno=7), 1: VbucketPosition(1, 2, 0, 3)})
    save(path, state)
    assert "purge_seqno" not in json.loads(path.read_text())["vbuckets"]["1"]
    assert load(path, "default") == state

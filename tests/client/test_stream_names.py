"""--collections and --scope by name: the seed node gives their ids (COLLECTIONS_GET_ID, COLLECTIONS_GET_SCOPE_ID),
and the stream is the one the ids ask for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from servekit import Server, run, serving

from dcpctl.exitcode import ExitCode

AIRLINE, HOTEL, BEEF = 0x9, 0xA, 0xB
MANIFEST = {"uid": "3", "scopes": [
    {"name": "_default", "uid": "0", "collections": [{"name": "_default", "uid": "0"}]},
    {"name": "inventory", "uid": "8", "collections": [{"name": "airline", "uid": "9"}, {"name": "hotel", "uid": "a"}]},
    {"name": "beef", "uid": "c", "collections": [{"name": "cafe", "uid": "b"}]}]}  # a scope whose name reads as hex


@pytest.fixture(autouse=True)
def _password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DCPCTL_PASSWORD", "password")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    manifest = tmp_path_factory.mktemp("manifest") / "manifest.json"
    manifest.write_text(json.dumps(MANIFEST))
    with serving("--vbuckets", "2", "--items", "200", "--collections", str(manifest)) as running:
        yield running


def _stream(server: Server, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    return run("stream", f"127.0.0.1:{server.port}", "-F", "jsonl", "--timeout", "5", "--until", "now", *args)


def _seen(records: list[dict[str, Any]]) -> list[tuple[str, int, int | None]]:
    return [(r["opcode"], r["by_seqno"], r.get("collection_id")) for r in records if "by_seqno" in r]


@pytest.mark.parametrize(("names", "ids"), [
    (("--collections", "inventory.airline"), ("--collections", "9")),
    (("--collections", "inventory.hotel,9"), ("--collections", "a,9")),
    (("--scope", "inventory"), ("--scope", "8")),
    (("--scope", "beef."), ("--scope", "c")),  # a name that reads as hex, with its dot
])
def test_a_name_streams_what_its_id_streams(server: Server, names: tuple[str, str], ids: tuple[str, str]) -> None:
    code, by_name, err = _stream(server, *names)
    assert code == ExitCode.OK, err
    code, by_id, err = _stream(server, *ids)
    assert code == ExitCode.OK, err
    assert _seen(by_name) == _seen(by_id)
    assert any(op == "DCP_SYSTEM_EVENT" for op, _, _ in _seen(by_name))  # the collections' creation, as a node
    assert any(op == "DCP_MUTATION" for op, _, _ in _seen(by_name))


def test_the_named_collections_are_the_only_ones_streamed(server: Server) -> None:
    code, records, err = _stream(server, "--collections", "inventory.airline")
    assert code == ExitCode.OK, err
    assert {r["collection_id"] for r in records if r["opcode"] == "DCP_MUTATION"} == {AIRLINE}
    assert [r["key"] for r in records if r["opcode"] == "DCP_SYSTEM_EVENT"] == ["airline"] * 2  # one per vbucket


@pytest.mark.parametrize(("args", "says"), [
    (("--collections", "inventory.nope"), "--collections inventory.nope: no such collection on"),
    (("--collections", "nowhere.airline"), "--collections nowhere.airline: no such"),
    (("--scope", "nope"), "--scope nope: no such scope on"),
])
def test_a_name_the_server_does_not_know_is_one_line_and_exit_2(server: Server, args: tuple[str, str],
                                                                  says: str) -> None:
    code, records, err = _stream(server, *args)
    assert code == ExitCode.USAGE
    assert says in err
    assert len(err.strip().splitlines()) == 1
    assert records == []


@pytest.mark.parametrize(("args", "says"), [
    (("--collections", "airline"), "neither a hex id nor scope.collection"),
    (("--collections", "a.b.c"), "is not scope.collection"),
    (("--collections", ".airline"), "is not scope.collection"),
    (("--scope", "inventory.airline"), "a scope's name or id, not a path"),
])
def test_what_is_neither_a_name_nor_an_id_is_refused_before_connecting(tmp_path: Path, args: tuple[str, str],
                                                                        says: str) -> None:
    code, _, err = run("stream", "127.0.0.1:1", "-F", "jsonl", "--timeout", "1", *args)
    assert code == ExitCode.USAGE
    assert says in err


def test_a_collection_dropped_under_the_stream_ends_it_filter_empty(tmp_path: Path) -> None:
    """ns_server drops the collection a stream is filtered to (serve's scenario manifest): each vbucket's
    stream gets the drop, then ends FilterEmpty, said once per vbucket; nothing is left to stream, exit 0."""
    first = tmp_path / "first.json"
    first.write_text(json.dumps(MANIFEST))
    second = dict(MANIFEST, uid="4", scopes=[MANIFEST["scopes"][0], {"name": "inventory", "uid": "8", "collections": [
        {"name": "hotel", "uid": "a"}]}, MANIFEST["scopes"][2]])
    (tmp_path / "second.json").write_text(json.dumps(second))
    plan = tmp_path / "plan.toml"
    plan.write_text('[[event]]\naction = "manifest"\nfile = "second.json"\nafter_items = 10\n')
    with serving("--vbuckets", "2", "--items", "200", "--collections", str(first), "--scenario", str(plan)) as running:
        code, records, err = run("stream", f"127.0.0.1:{running.port}", "-F", "jsonl", "--timeout", "5",
                                 "--collections", "inventory.airline")
    assert code == ExitCode.OK, err
    drops = [(r["vbucket"], r["collection_id"], r["manifest_uid"]) for r in records
             if r["opcode"] == "DCP_SYSTEM_EVENT" and r["event_id"] == 1]
    assert sorted(drops) == [(0, AIRLINE, 4), (1, AIRLINE, 4)]
    ends = sorted((r["vbucket"], r["stream_end_status"]) for r in records if r["opcode"] == "DCP_STREAM_END")
    assert ends == [(0, 7), (1, 7)]
    assert err.count("FilterEmpty") == 2


def _hotel_gets_a_max_ttl(tmp_path: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    """dcpctl stream of hotel from a server whose manifest gives hotel a maxTTL of 60 after 10 items (5 events,
    100 items: up to seqno 106)."""
    first = tmp_path / "first.json"
    first.write_text(json.dumps(MANIFEST))
    scopes = json.loads(json.dumps(MANIFEST["scopes"]))
    scopes[1]["collections"][1]["maxTTL"] = 60  # hotel
    (tmp_path / "second.json").write_text(json.dumps(dict(MANIFEST, uid="4", scopes=scopes)))
    plan = tmp_path / "plan.toml"
    plan.write_text('[[event]]\naction = "manifest"\nfile = "second.json"\nafter_items = 10\n')
    with serving("--vbuckets", "1", "--items", "100", "--collections", str(first), "--scenario", str(plan)) as running:
        return run("stream", f"127.0.0.1:{running.port}", "-F", "jsonl", "--timeout", "5", "--collections",
                   "inventory.hotel", "--until", "106", *args)


def test_a_collections_stream_asks_for_flatbuffers_events_and_sees_a_modify(tmp_path: Path) -> None:
    """dcpctl stream sets flatbuffers_system_events on a Collections connection, as kv_engine's DCP guide
    advises: the events come as version-2 tables, and a collection's new maxTTL as a ModifyCollection."""
    code, records, err = _hotel_gets_a_max_ttl(tmp_path)
    assert code == ExitCode.OK, err
    events = [(r["event_id"], r["event_version"], r.get("max_ttl")) for r in records
              if r["opcode"] == "DCP_SYSTEM_EVENT"]
    assert events == [(0, 2, 0), (5, 2, 60)]  # hotel begun (no maxTTL), then modified


def test_control_false_keeps_dcpctl_from_asking_for_its_collections_controls(tmp_path: Path) -> None:
    """The server takes only true for flatbuffers_system_events and 2.2 for max_marker_version (false is
    Einval): --control NAME=false keeps dcpctl from asking, and the stream gets the legacy forms, the new maxTTL
    as a seqno advance."""
    code, records, err = _hotel_gets_a_max_ttl(tmp_path, "--control", "flatbuffers_system_events=false", "--control",
                                               "max_marker_version=false")
    assert code == ExitCode.OK, err
    events = [(r["event_id"], r["event_version"]) for r in records if r["opcode"] == "DCP_SYSTEM_EVENT"]
    assert events == [(0, 0)]  # hotel begun, as version 0
    assert [r["by_seqno"] for r in records if r["opcode"] == "DCP_SEQNO_ADVANCED"] == [106]
    assert {r["extras_length"] for r in records if r["opcode"] == "DCP_SNAPSHOT_MARKER"} == {20}  # v1 markers

"""The live connector against ``dcpctl serve``: streams, resumes, rollbacks, flow control, topology."""

from __future__ import annotations

import io
import itertools
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from capturekit import within_size
from servekit import Server, run, self_signed, serving

from dcpctl.cli import main
from dcpctl.client import streamer
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment

ITEMS = ("DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION")


@pytest.fixture(autouse=True)
def _password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DCPCTL_PASSWORD", "password")


def stream(server: Server, *args: str, port: int | None = None) -> tuple[int, list[dict[str, Any]], str]:
    return run("stream", f"127.0.0.1:{port or server.port}", "-F", "jsonl", "--timeout", "5", *args)


def items(records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(r["vbucket"], r["by_seqno"]) for r in records if r["opcode"] in ITEMS]


def test_until_now_streams_every_item_once_and_exits_0() -> None:
    with serving("--vbuckets", "4", "--items", "400", "--seed", "3") as server:
        code, records, err = stream(server, "--until", "now")
    assert code == ExitCode.OK, err
    assert sorted(items(records)) == [(vb, s) for vb in range(4) for s in range(1, 101)]
    for vb in range(4):  # in seqno order per vbucket, each after a marker covering it
        seqnos = [s for v, s in items(records) if v == vb]
        assert seqnos == sorted(seqnos)
    marker = next(r for r in records if r["opcode"] == "DCP_SNAPSHOT_MARKER")
    assert marker["connection"].endswith(f"> 127.0.0.1:{server.port}")
    assert marker["direction"] == "server>client"
    assert all(r["diagnostics"] == [] for r in records if r["opcode"] != "DCP_STREAM_END")
    ends = [r for r in records if r["opcode"] == "DCP_STREAM_END"]
    assert [d["name"] for r in ends for d in r["diagnostics"]] == ["stream_end"] * 4  # the tracker's note, as in
    assert all("after 100 items" in r["diagnostics"][0]["message"] for r in ends)  # a capture


def test_count_then_resume_delivers_every_item_exactly_once(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    with serving("--vbuckets", "4", "--items", "400") as server:
        code, first, _ = stream(server, "--count", "150", "--state", str(state))
        assert code == ExitCode.OK
        assert len(items(first)) == 150
        saved = json.loads(state.read_text())
        assert saved["version"] == 1
        assert sum(v["seqno"] for v in saved["vbuckets"].values()) == 150
        code, second, _ = stream(server, "--from", "resume", "--state", str(state), "--until", "now")
    assert code == ExitCode.OK
    delivered = items(first) + items(second)
    assert Counter(delivered).most_common(1)[0][1] == 1
    assert sorted(delivered) == [(vb, s) for vb in range(4) for s in range(1, 101)]


def test_rollback_after_a_scripted_failover(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    plan = tmp_path / "failover.toml"
    plan.write_text('[[event]]\naction = "failover"\nvbucket = 0\nseqno = 60\nafter_items = 80\n'
                    '[[event]]\naction = "mutate"\nvbucket = 0\ncount = 20\nafter_items = 80\n')
    with serving("--vbuckets", "1", "--items", "100", "--scenario", str(plan)) as server:
        code, first, _ = stream(server, "--until", "80", "--state", str(state))  # a whole snapshot: 1-80
        assert code == ExitCode.OK
        assert items(first)[-1] == (0, 80)
        failing = stream(server, "--from", "resume", "--state", str(state), "--until", "now",
                         "--on-rollback", "fail")
        assert failing[0] == ExitCode.ROLLBACK
        assert json.loads(state.read_text())["vbuckets"]["0"]["seqno"] == 80  # untouched by a refusal
        code, second, err = stream(server, "--from", "resume", "--state", str(state), "--until", "now")
    assert code == ExitCode.OK
    assert "roll back from 80" in err
    assert "to 60" in err
    assert "[consumer_ahead]" in err
    assert [s for _, s in items(second)] == list(range(61, 81))  # the new branch's items, from the rollback point
    saved = json.loads(state.read_text())["vbuckets"]["0"]
    assert saved["seqno"] == 80
    assert [e["seqno"] for e in saved["failover_log"]] == [60, 0]


def test_a_small_flow_control_window_never_stalls() -> None:
    with serving("--vbuckets", "2", "--items", "2000", "--value-size", "300") as server:
        code, records, err = stream(server, "--until", "now", "--buffer-size", "4096")
    assert code == ExitCode.OK, err
    assert len(items(records)) == 2000


def test_a_disconnect_mid_stream_then_resume(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    plan = tmp_path / "cut.toml"
    plan.write_text('[[event]]\naction = "disconnect"\nafter_items = 120\n')
    with serving("--vbuckets", "2", "--items", "300", "--scenario", str(plan)) as server:
        code, first, err = stream(server, "--state", str(state), "--until", "now")
        assert code == ExitCode.CONNECTION
        assert err.strip().count("\n") == 0
        assert f"127.0.0.1:{server.port}" in err
        code, second, _ = stream(server, "--from", "resume", "--state", str(state), "--until", "now")
    assert code == ExitCode.OK
    delivered = items(first) + items(second)
    assert len(items(first)) == 120
    assert sorted(delivered) == [(vb, s) for vb in range(2) for s in range(1, 151)]


def test_stream_ids_and_collection_filters(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"uid": "3", "scopes": [
        {"name": "_default", "uid": "0", "collections": [{"name": "_default", "uid": "0"}]},
        {"name": "inventory", "uid": "8", "collections": [{"name": "airline", "uid": "9"},
                                                          {"name": "hotel", "uid": "a"}]}]}))
    with serving("--vbuckets", "2", "--items", "300", "--collections", str(manifest)) as server:
        code, records, _ = stream(server, "--until", "now", "--collections", "9", "--stream-id", "7")
        assert code == ExitCode.OK
        assert {r["collection_id"] for r in records if r["opcode"] in ITEMS} == {9}
        assert {r.get("stream_id") for r in records} == {7}
        code, scoped, _ = stream(server, "--until", "now", "--scope", "8")
        assert code == ExitCode.OK
        assert {r["collection_id"] for r in scoped if r["opcode"] in ITEMS} == {9, 10}
        code, _, err = stream(server, "--until", "now", "--collections", "77")
        assert code == ExitCode.PROTOCOL
        assert "UnknownCollection" in err


def test_many_vbuckets_on_several_nodes() -> None:
    with serving("--nodes", "3", "--vbuckets", "12", "--items", "1200") as server:
        code, records, err = stream(server, "--until", "now", port=server.ports[1])
    assert code == ExitCode.OK, err
    assert len(items(records)) == 1200
    servers = {r["connection"].split(" > ")[1] for r in records}
    assert servers == {f"127.0.0.1:{p}" for p in server.ports}
    for r in records:
        if r["opcode"] in ITEMS:
            assert r["connection"].endswith(f":{server.ports[r['vbucket'] % 3]}")


def test_tls_streams_every_node_on_its_tls_port(tmp_path: Path) -> None:
    """With --tls every node is reached on the kvSSL port the cluster map gives it (never its plain one)."""
    cert, key = self_signed(tmp_path)
    with serving("--nodes", "3", "--vbuckets", "6", "--items", "600", "--tls-cert", str(cert), "--tls-key", str(key),
                 "--tls-port", "0") as server:
        code, records, err = stream(server, "--tls", "--cacert", str(cert), "--until", "now",
                                    port=server.tls_ports[1])
    assert code == ExitCode.OK, err
    assert len(items(records)) == 600
    assert {r["connection"].split(" > ")[1] for r in records} == {f"127.0.0.1:{p}" for p in server.tls_ports}


def test_tls_ports_are_matched_to_the_server_list_by_host_and_port() -> None:
    """nodesExt lists every node of the cluster, data nodes or not, in an order of its own; the node that
    answered may have no hostname. Without TLS the server list's own ports are used."""
    config = {"vBucketServerMap": {"serverList": ["10.0.0.2:11210", "$HOST:11210", "10.0.0.3:12000"]},
              "nodesExt": [{"hostname": "10.0.0.9", "services": {"n1ql": 8093}},  # a query node
                           {"hostname": "10.0.0.3", "services": {"kv": 12000, "kvSSL": 12007}},
                           {"services": {"kv": 11210, "kvSSL": 11297}, "thisNode": True},
                           {"hostname": "10.0.0.2", "services": {"kv": 11210, "kvSSL": 11207}}]}
    config = json.loads(json.dumps(config).replace("$HOST", "10.0.0.1"))
    assert streamer.kv_servers(config, "10.0.0.1", 11210, tls=True) == [("10.0.0.2", 11207), ("10.0.0.1", 11297),
                                                                          ("10.0.0.3", 12007)]
    assert streamer.kv_servers(config, "10.0.0.1", 11210, tls=False) == [("10.0.0.2", 11210), ("10.0.0.1", 11210),
                                                                           ("10.0.0.3", 12000)]
    alike = {"vBucketServerMap": {"serverList": ["a:1", "b:2"]},  # no kv ports to match by: the index decides
             "nodesExt": [{"services": {"kvSSL": 11}}, {"services": {"kvSSL": 22}}]}
    assert streamer.kv_servers(alike, "a", 11210, tls=True) == [("a", 11), ("b", 22)]


def test_write_saves_a_capture_that_decodes_to_the_same_messages(tmp_path: Path) -> None:
    capture = tmp_path / "live.pcap"
    with serving("--vbuckets", "2", "--items", "100") as server:
        code, live, _ = stream(server, "--until", "now", "--write", str(capture))
    assert code == ExitCode.OK
    code, decoded, _ = run("decode", str(capture), "-F", "jsonl", "--port", str(server.port))
    assert code == ExitCode.OK
    pushed = [r for r in decoded if r["direction"] == "server>client" and r["magic"] == "ClientRequest"
              and r["opcode"] != "DCP_NOOP"]
    keep = ("opcode", "vbucket", "opaque", "by_seqno", "key", "value", "snap_start_seqno", "snap_end_seqno",
            "stream_vbucket", "connection")
    assert [{k: r.get(k) for k in keep} for r in pushed] == [{k: r.get(k) for k in keep} for r in live]


def test_high_seqnos_are_asked_of_active_vbuckets_only(tmp_path: Path) -> None:
    """Unfiltered, GET_ALL_VB_SEQNOS lists a node's replicas too (reference 4.6): a vbucket that moved away
    would end at its replica's seqno. The requests --until now sends ask for active vbuckets."""
    capture = tmp_path / "live.pcap"
    with serving("--vbuckets", "2", "--items", "10") as server:
        code, _, _ = stream(server, "--until", "now", "--write", str(capture))
    assert code == ExitCode.OK
    code, decoded, _ = run("decode", str(capture), "-F", "jsonl", "--port", str(server.port))
    assert code == ExitCode.OK
    asked = [r for r in decoded if r["opcode"] == "GET_ALL_VB_SEQNOS" and r["magic"] == "ClientRequest"]
    assert asked
    assert {r.get("vbucket_state_filter") for r in asked} == {1}


def pushed_facts(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keep = ("opcode", "vbucket", "opaque", "by_seqno", "key", "value", "snap_start_seqno", "snap_end_seqno",
            "stream_vbucket", "connection")
    return [{k: r.get(k) for k in keep} for r in records
            if r.get("direction", "server>client") == "server>client" and r["magic"] == "ClientRequest"
            and r["opcode"] != "DCP_NOOP"]


@pytest.mark.parametrize("count", [None, 3])
def test_write_with_a_file_size_saves_a_ring_that_decodes_as_one(tmp_path: Path, count: int | None) -> None:
    """--write F -C MB: files named as tcpdump names them, each within the size; decode of them in a shell's
    order gives what was streamed, message for message. With -W 3 three files are left, and their decode
    ends as the stream ended."""
    ring = ["-W", str(count)] if count else []
    with serving("--vbuckets", "4", "--items", "1000", "--value-size", "60") as server:
        code, live, err = stream(server, "--until", "now", "--write", str(tmp_path / "s.pcap"), "-C", "0.02", *ring)
    assert code == ExitCode.OK, err
    files = sorted(tmp_path.iterdir())
    names = [f"s.pcap{n}" for n in range(count)] if count else ["s.pcap", *(f"s.pcap{n}" for n in
                                                                             range(1, len(files)))]
    assert len(files) >= 3
    assert sorted(f.name for f in files) == sorted(names)
    assert all(within_size(f, 20_000) for f in files)
    code, decoded, err = run("decode", *map(str, files), "-F", "jsonl", "--port", str(server.port))
    assert code == ExitCode.OK, err
    if count is None:
        assert err == ""
        assert pushed_facts(decoded) == pushed_facts(live)
    else:
        # the oldest file left begins inside a message (its bytes before the next one are skipped), and the
        # connection's start is gone with the files overwritten: collections and streams are not known
        assert err.startswith("dcpctl: skipped_bytes: ")
        facts = ("opcode", "vbucket", "opaque", "by_seqno", "value")
        kept = [[r.get(k) for k in facts] for r in pushed_facts(decoded)]
        assert 0 < len(kept) < len(pushed_facts(live))
        assert kept[-50:] == [[r.get(k) for k in facts] for r in pushed_facts(live)[-50:]]


def test_write_whose_next_file_cannot_be_opened_is_one_line_and_keeps_the_files(tmp_path: Path) -> None:
    """The next -C file cannot be opened (a directory has its name): one line naming it, exit 3; the files
    written before it decode whole, each vbucket's items from its first seqno on, none missing."""
    (tmp_path / "s.pcap2").mkdir()
    with serving("--vbuckets", "4", "--items", "1000", "--value-size", "60") as server:
        code, _, err = stream(server, "--until", "now", "--write", str(tmp_path / "s.pcap"), "-C", "0.02")
    assert code == ExitCode.INPUT
    assert err == f"dcpctl: error: {tmp_path / 's.pcap2'}: Is a directory\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.pcap", "s.pcap1", "s.pcap2"]
    assert within_size(tmp_path / "s.pcap1", 20_000)
    code, decoded, err = run("decode", str(tmp_path / "s.pcap"), str(tmp_path / "s.pcap1"), "-F", "jsonl",
                             "--port", str(server.port))
    assert code == ExitCode.OK, err
    assert err == ""
    saved = items(decoded)
    assert len(saved) > 100
    for vb in {vb for vb, _ in saved}:
        seqnos = [s for v, s in saved if v == vb]
        assert seqnos == list(range(1, len(seqnos) + 1))


def test_write_with_rotate_seconds_begins_a_file_each_interval_named_by_its_time(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch
                                                                                 ) -> None:
    """-G 1 over items that come for about two seconds: a file a second or so, named by strftime of the -w
    name, and decode of them all (in a shell's order) gives what was streamed."""
    monkeypatch.setenv("TZ", "UTC")
    with serving("--vbuckets", "2", "--items", "4", "--mutation-rate", "20") as server:
        code, live, err = stream(server, "--count", "44", "--write", str(tmp_path / "s-%H%M%S.pcap"), "-G", "1")
    assert code == ExitCode.OK, err
    files = sorted(tmp_path.iterdir())
    assert len(files) >= 2
    assert all(re.fullmatch(r"s-\d{6}\.pcap", f.name) for f in files)
    code, decoded, err = run("decode", *map(str, files), "-F", "jsonl", "--port", str(server.port))
    assert (code, err) == (ExitCode.OK, "")
    assert pushed_facts(decoded) == pushed_facts(live)
    assert len(items(decoded)) == 44


@pytest.mark.parametrize("value", ["true", "true_with_seqno_advanced"])
def test_out_of_order_snapshots_are_refused_before_connecting(value: str) -> None:
    """An OSO backfill's key order (reference 3.19) would move the --state resume point and --until's end past
    items not yet sent: a resume would never send them."""
    code, _, err = run("stream", "127.0.0.1:1", "--control", f"enable_out_of_order_snapshots={value}")
    assert code == ExitCode.USAGE
    assert err.startswith("dcpctl: error: --control enable_out_of_order_snapshots: stream follows each vbucket's ")


def test_file_size_and_count_need_what_they_modify() -> None:
    for args, says in ((["-C", "1"], "-C: the size of each -w file"), (["-w", "x.pcap", "-W", "2"], "-W: "),
                       (["-G", "5"], "-G: the seconds each -w file covers"),
                       (["-w", "x.pcap", "-G", "5"], "-G: -w x.pcap has no time in it"),
                       (["-w", "x-%S.pcap", "-G", "5", "-W", "2"], "-W with -G: tcpdump then stops")):
        code, _, err = run("stream", "127.0.0.1:1", *args)
        assert code == ExitCode.USAGE
        assert err.startswith(f"dcpctl: error: {says}")


def test_failover_dump_and_compare(tmp_path: Path) -> None:
    plan = tmp_path / "later.toml"
    plan.write_text('[[event]]\naction = "failover"\nvbucket = 1\nseqno = 10\nafter_seconds = 1.0\n')
    with serving("--vbuckets", "3", "--items", "90", "--scenario", str(plan)) as server:
        out = io.StringIO()
        env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                          stderr_isatty=False, color=False)
        assert main(["failover", f"127.0.0.1:{server.port}", "-F", "json"], env) == ExitCode.OK
        dump = json.loads(out.getvalue())
        assert [(d["vbucket"], d["high_seqno"], len(d["failover_log"])) for d in dump] == [(0, 30, 1), (1, 30, 1),
                                                                                            (2, 30, 1)]
        before = tmp_path / "before.json"
        before.write_text(out.getvalue())
        import time  # noqa: PLC0415

        time.sleep(1.2)
        out = io.StringIO()
        env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                          stderr_isatty=False, color=False)
        assert main(["failover", f"127.0.0.1:{server.port}", "-F", "json", "--compare", str(before)], env) == 0
    found = {c["vbucket"]: c for c in json.loads(out.getvalue())}
    # the failover at 10 abandoned the items 11-30 the earlier dump saw: a divergent history, not just an entry
    assert {vb: c["change"] for vb, c in found.items()} == {0: "unchanged", 1: "divergent", 2: "unchanged"}
    assert "items 11-30" in found[1]["message"]
    assert [e["seqno"] for e in found[1]["new_entries"]] == [10]


def test_rollback_negotiate_prints_every_round(tmp_path: Path) -> None:
    plan = tmp_path / "two.toml"
    plan.write_text('[[event]]\naction = "failover"\nvbucket = 0\nseqno = 40\n')
    with serving("--vbuckets", "1", "--items", "100", "--seed", "5") as plain:
        out = io.StringIO()
        env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                          stderr_isatty=False, color=False)
        assert main(["failover", f"127.0.0.1:{plain.port}", "-F", "json"], env) == 0
        uuid = json.loads(out.getvalue())[0]["failover_log"][0]["vbucket_uuid"]
    with serving("--vbuckets", "1", "--items", "100", "--seed", "5", "--scenario", str(plan)) as server:
        out = io.StringIO()
        env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                          stderr_isatty=False, color=False)
        code = main(["rollback", "negotiate", f"127.0.0.1:{server.port}", "--vbucket", "0", "--uuid", str(uuid),
                     "--seqno", "90", "-F", "json"], env)
    assert code == ExitCode.OK
    report = json.loads(out.getvalue())
    assert [(r["status"], r["rollback_seqno"]) for r in report["rounds"]] == [("Rollback", 40), ("Success", None)]
    assert all(r["engine"]["agrees"] for r in report["rounds"])
    assert report["result"]["start_seqno"] == 40
    with serving("--vbuckets", "1", "--items", "100", "--seed", "5", "--scenario", str(plan)) as server:
        out = io.StringIO()
        env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=True,
                          stderr_isatty=False, color=True, width=200)
        code = main(["rollback", "negotiate", f"127.0.0.1:{server.port}", "--vbucket", "0", "--uuid", str(uuid),
                     "--seqno", "90"], env)
    assert code == ExitCode.OK
    text = out.getvalue()
    rule = report["rounds"][0]["engine"]["rule"]
    reason = report["rounds"][0]["engine"]["reason"]
    styles = re.findall(r"\x1b\[[0-9;]*m", text[:text.index(f"[{rule}]")])
    assert styles[-1] == "\x1b[2m"  # the rule id dim
    assert re.findall(r"\x1b\[[0-9;]*m", text[:text.index(reason)])[-1] == "\x1b[0m"  # its explanation plain


def test_passwords_stay_off_the_command_line_and_out_of_output(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    with serving("--vbuckets", "1", "--items", "5") as server:
        monkeypatch.delenv("DCPCTL_PASSWORD")
        code, _, err = stream(server, "--until", "now")
        assert code == ExitCode.USAGE
        assert "DCPCTL_PASSWORD" in err
        secret = tmp_path / "secret"
        secret.write_text("hunter2-wrong\n")
        code, _, err = stream(server, "--until", "now", "--password-file", str(secret))
        assert code == ExitCode.AUTH
        assert "hunter2" not in err
        assert err.count("\n") == 1
        monkeypatch.setenv("MY_SECRET", "password")
        code, records, _ = stream(server, "--until", "now", "--password-env", "MY_SECRET")
        assert code == ExitCode.OK
        assert len(items(records)) == 5


def test_summary_alone_counts_the_same_as_decoding_every_message(tmp_path: Path) -> None:
    """--summary without output takes the header-counting path: same positions, counts and --count stop."""
    quiet, loud = tmp_path / "quiet.json", tmp_path / "loud.json"
    with serving("--vbuckets", "3", "--items", "900", "--nodes", "2") as server:
        code, _, quiet_err = run("stream", f"127.0.0.1:{server.port}", "--until", "now", "--summary", "--state",
                                 str(quiet))
        assert code == ExitCode.OK
        code, _, loud_err = stream(server, "--until", "now", "--summary", "--state", str(loud))
        assert code == ExitCode.OK
        assert json.loads(quiet.read_text()) == json.loads(loud.read_text())
        table = [line.split("│")[1:4] for line in quiet_err.splitlines() if line.startswith("│")]
        assert table == [line.split("│")[1:4] for line in loud_err.splitlines() if line.startswith("│")]
        assert [cells[1].strip() for cells in table] == ["300", "300", "300", "900"]  # then the total
        code, _, _ = run("stream", f"127.0.0.1:{server.port}", "--summary", "--count", "123", "--state", str(quiet))
        assert code == ExitCode.OK
        saved = json.loads(quiet.read_text())["vbuckets"]
        assert sum(v["seqno"] for v in saved.values()) == 123


def _summary_rows(err: str) -> dict[str, list[str]]:
    """The summary table on standard error: vbucket (or total) -> its cells."""
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in err.splitlines() if line.startswith("│")]
    return {cells[0]: cells[1:] for cells in rows}


def test_summary_times_are_seconds_since_the_first_message_and_a_total_follows() -> None:
    """Items arriving over about two seconds: each vbucket's first and last items as offsets from the first
    stream message, not epoch times, and a total row: all the items, the overall rate, the whole span."""
    with serving("--vbuckets", "2", "--items", "4", "--mutation-rate", "20") as server:
        code, _, err = run("stream", f"127.0.0.1:{server.port}", "--summary", "--count", "44", "--timeout", "5")
    assert code == ExitCode.OK, err
    assert "seconds since the first stream message" in err
    rows = _summary_rows(err)
    assert list(rows)[-1] == "total"
    header = [c.strip() for c in next(line for line in err.splitlines() if "vbucket" in line).split("┃")[1:-1]]
    assert header == ["vbucket", "items", "seqno range", "items/s", "first item", "last item"]
    per_vbucket = {vb: cells for vb, cells in rows.items() if vb != "total"}
    assert sorted(per_vbucket) == ["0", "1"]
    items, _, rate, first, last = rows["total"]
    assert int(items) == sum(int(cells[0]) for cells in per_vbucket.values()) == 44
    assert float(rate.replace(",", "")) > 0
    assert float(first) == min(float(cells[3]) for cells in per_vbucket.values())
    assert float(last) == max(float(cells[4]) for cells in per_vbucket.values())
    assert 0 <= float(first) < 1 < float(last) < 30  # offsets: the live items came over about two seconds
    for cells in per_vbucket.values():
        assert float(cells[3]) <= float(cells[4])


def test_a_vbucket_that_moves_is_followed_to_its_new_node(tmp_path: Path) -> None:
    plan = tmp_path / "move.toml"
    plan.write_text('[[event]]\naction = "move"\nvbucket = 0\nnode = 1\nafter_items = 100\n')
    with serving("--nodes", "2", "--vbuckets", "2", "--items", "400", "--scenario", str(plan)) as server:
        code, records, err = stream(server, "--until", "now")
    assert code == ExitCode.OK, err
    assert "StateChanged" in err
    assert sorted(items(records)) == [(vb, s) for vb in range(2) for s in range(1, 201)]
    moved = [r["connection"].split(" > ")[1] for r in records if r["opcode"] in ITEMS and r["vbucket"] == 0]
    assert moved[0] == f"127.0.0.1:{server.ports[0]}"
    assert moved[-1] == f"127.0.0.1:{server.ports[1]}"


def test_ctrl_c_saves_the_state_and_exits_0(tmp_path: Path) -> None:
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import time  # noqa: PLC0415

    state = tmp_path / "state.json"
    with serving("--vbuckets", "2", "--items", "40", "--mutation-rate", "50") as server:
        process = subprocess.Popen([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{server.port}", "-F",
                                    "jsonl", "--state", str(state)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env={**os.environ, "DCPCTL_PASSWORD": "password"}, text=True)
        time.sleep(2.5)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    assert process.returncode == ExitCode.OK, err
    assert "saving the state" in err
    delivered = [(r["vbucket"], r["by_seqno"]) for r in map(json.loads, out.splitlines()) if r["opcode"] in ITEMS]
    saved = json.loads(state.read_text())["vbuckets"]
    assert {int(vb): v["seqno"] for vb, v in saved.items()} == {vb: max(s for v, s in delivered if v == vb)
                                                                 for vb in range(2)}
    assert len(delivered) > 40  # the live items arrived too


def test_the_summary_path_follows_a_rollback_as_the_decoding_path_does(tmp_path: Path) -> None:
    plan = tmp_path / "failover.toml"
    plan.write_text('[[event]]\naction = "failover"\nvbucket = 0\nseqno = 60\nafter_items = 80\n'
                    '[[event]]\naction = "mutate"\nvbucket = 0\ncount = 20\nafter_items = 80\n')
    finals = []
    for mode in (["--summary"], ["--summary", "-F", "jsonl"]):
        state = tmp_path / f"state{len(finals)}.json"
        with serving("--vbuckets", "1", "--items", "100", "--seed", "9", "--scenario", str(plan)) as server:
            assert stream(server, "--until", "80", "--state", str(state))[0] == ExitCode.OK
            code, _, err = run("stream", f"127.0.0.1:{server.port}", "--timeout", "5", "--from", "resume",
                               "--state", str(state), "--until", "now", *mode)
        assert code == ExitCode.OK, err
        assert "to 60" in err
        finals.append(json.loads(state.read_text()))
    assert finals[0] == finals[1]
    assert finals[0]["vbuckets"]["0"]["seqno"] == 80


def test_until_now_ends_where_a_failover_cut_the_history(tmp_path: Path) -> None:
    """The high seqno read at start (100) is gone after the failover at 60: the stream ends at the vbucket's
    high seqno of its new history, not at 100, which would never come."""
    state = tmp_path / "state.json"
    plan = tmp_path / "failover.toml"
    plan.write_text('[[event]]\naction = "failover"\nvbucket = 0\nseqno = 60\nafter_items = 80\n')
    with serving("--vbuckets", "1", "--items", "100", "--seed", "9", "--scenario", str(plan)) as server:
        code, records, err = stream(server, "--until", "now", "--state", str(state))
    assert code == ExitCode.OK, err
    assert "roll back" in err
    assert max(s for _, s in items(records)) == 80  # what the old history had sent before it was cut
    assert json.loads(state.read_text())["vbuckets"]["0"]["seqno"] == 60


def test_an_unanswered_stream_request_is_a_timeout_not_a_hang(tmp_path: Path) -> None:
    plan = tmp_path / "hang.toml"
    plan.write_text('[[event]]\naction = "hang"\n')  # stream requests are never answered; noops go on
    with serving("--vbuckets", "2", "--items", "20", "--scenario", str(plan)) as server:
        code, _, err = run("stream", f"127.0.0.1:{server.port}", "-F", "jsonl", "--timeout", "1",
                           "--noop-interval", "1")
        # negotiate's own request: a server that opened DCP is no silent non-data node, the hint says nothing
        asked, _, negotiated = run("rollback", "negotiate", f"127.0.0.1:{server.port}", "--vbucket", "1",
                                   "--uuid", "0", "--seqno", "0", "--timeout", "1")
    assert code == ExitCode.TIMEOUT, err
    assert err.startswith(f"dcpctl: error: 127.0.0.1:{server.port}: no answer to the stream request for vbucket")
    assert err.count("\n") == 1
    assert (asked, negotiated.count("\n")) == (ExitCode.TIMEOUT, 1), negotiated
    assert negotiated.startswith(f"dcpctl: error: 127.0.0.1:{server.port}: no answer to "), negotiated
    assert "data node" not in negotiated


@pytest.mark.parametrize(("until", "told"), [
    ("forever", "NotMyVbucket; reading the cluster map again"),  # the stream request finds it out
    ("now", "does not list it in GET_ALL_VB_SEQNOS"),  # the high seqnos --until now reads find it out first
])
def test_a_stale_cluster_map_is_asked_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch, until: str,
                                                                 told: str) -> None:

    real = streamer.vbucket_map

    def stale(seed: Any, host: str, port: int, *, tls: bool) -> tuple[int, dict[int, tuple[str, int]]]:
        count, owner = real(seed, host, port, tls=tls)
        return count, dict.fromkeys(owner, owner[0])  # every vbucket "on" node 0: node 1's answer NotMyVbucket

    monkeypatch.setattr(streamer, "vbucket_map", stale)
    monkeypatch.setattr(streamer, "REROUTE_WAIT", 0.001)
    with serving("--vbuckets", "2", "--items", "20", "--nodes", "2") as server:
        code, _, err = stream(server, "--until", until)
    assert code == ExitCode.PROTOCOL, err
    assert f"asked again {streamer.MAX_REROUTES} times" in err
    # each answer is reported; the one after the last try is reported, then given up on
    assert err.count(told) == streamer.MAX_REROUTES + 1


def test_a_quiet_vbucket_that_moves_again_and_again_is_followed_every_time(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    """A vbucket with nothing new, moved more often than MAX_REROUTES: each move's stream opens on the new node,
    and an opened stream starts the count of tries again (an item alone did, so this gave up with exit 8 and
    "the cluster map keeps pointing at a node that does not serve it"). Waits made short: the count is tested."""
    moves = streamer.MAX_REROUTES + 4
    plan = tmp_path / "moves.toml"
    plan.write_text("".join(f'[[event]]\naction = "move"\nvbucket = 0\nnode = {(i + 1) % 2}\n'
                            f"after_seconds = {2 + 0.25 * i}\n" for i in range(moves))
                    + f'[[event]]\naction = "mutate"\nvbucket = 1\ncount = 5\nafter_seconds = {2.5 + 0.25 * moves}\n')
    monkeypatch.setattr(streamer, "REROUTE_WAIT", 0.001)
    with serving("--nodes", "2", "--vbuckets", "2", "--items", "4", "--scenario", str(plan)) as server:
        code, records, err = stream(server, "--count", "9")
    assert code == ExitCode.OK, err
    assert err.count("vbucket 0: stream ended (StateChanged)") > streamer.MAX_REROUTES
    assert sorted(items(records)) == [(0, 1), (0, 2)] + [(1, s) for s in range(1, 8)]


# Runs dcpctl with a cluster map that names the wrong node for vbucket 0 (that node answers NotMyVbucket for
# ever) and REROUTE_WAIT from the command line: a vbucket in its backoff while vbucket 1 streams on.
STALE_VBUCKET_0 = """
import sys
from dcpctl.client import streamer
real = streamer.vbucket_map
def stale(seed, host, port, *, tls):
    count, owner = real(seed, host, port, tls=tls)
    owner[0] = next(address for address in owner.values() if address != owner[0])
    return count, owner
streamer.vbucket_map = stale
streamer.REROUTE_WAIT = float(sys.argv.pop(1))
from dcpctl.cli import run
run()
"""


def test_a_vbucket_waiting_to_be_asked_again_holds_up_neither_the_others_nor_a_stop(tmp_path: Path) -> None:
    """The wait before asking a vbucket again was a sleep in the one loop: every other vbucket went unread and
    a SIGTERM waited for it (up to 25.6 s). It is a deadline the loop keeps: vbucket 1's items are read as
    they come all along, and a SIGTERM during vbucket 0's 6 s wait stops dcpctl at once (exit 0)."""
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import time  # noqa: PLC0415

    out = tmp_path / "out.jsonl"
    with serving("--nodes", "2", "--vbuckets", "2", "--items", "2", "--mutation-rate", "100") as server, \
            out.open("wb") as sink:
        process = subprocess.Popen([sys.executable, "-c", STALE_VBUCKET_0, "1.5", "stream",
                                    f"127.0.0.1:{server.port}", "-F", "jsonl", "--timeout", "5"],
                                   stdout=sink, stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, "DCPCTL_PASSWORD": "password"})
        try:
            assert process.stderr is not None
            told = 0
            while told < 4:  # answered, asked again at once, after 1.5 s, after 3 s more: the next is 6 s away
                line = process.stderr.readline()
                assert line, "dcpctl stream ended early"
                told += "vbucket 0:" in line and "answered NotMyVbucket" in line
            time.sleep(1)
            process.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            err = process.communicate(timeout=30)[1]
            took = time.monotonic() - stopped
        finally:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=30)  # and the pipes closed
    assert process.returncode == ExitCode.OK, err
    assert took < 2, f"the stop waited {took:.1f} s for the retry"
    records = [json.loads(line) for line in out.read_text().splitlines()]
    seen = [r["ts"] for r in records if r["opcode"] in ITEMS and r["vbucket"] == 1]
    assert len(seen) > 50  # new ones all along, more than five seconds
    assert max(b - a for a, b in itertools.pairwise(seen)) < 1, "vbucket 1 went unread while 0 waited"


def test_a_busy_node_does_not_starve_another(tmp_path: Path) -> None:
    """Two nodes, one with far more to send: the quiet one's noops are answered and it is not called dead."""
    with serving("--vbuckets", "2", "--items", "200000", "--nodes", "2", "--value-size", "10") as server:
        code, records, err = stream(server, "--until", "now", "--noop-interval", "1", "--vbuckets", "0-1")
    assert code == ExitCode.OK, err
    assert len(items(records)) == 200000
    first = [r["vbucket"] for r in records if r["opcode"] in ITEMS][:50000]
    assert set(first) == {0, 1}  # both vbuckets flow from the start, turn by turn


def test_templates_print_what_each_message_has() -> None:
    with serving("--vbuckets", "1", "--items", "5") as server:
        code, _, err = run("stream", f"127.0.0.1:{server.port}", "--until", "now", "-f",
                           "{opcode} {by_seqno:d} {key[0]}|")
        assert code == ExitCode.OK, err
        code, _, err = run("stream", f"127.0.0.1:{server.port}", "--until", "now", "-f", "{0}")
        assert code == ExitCode.USAGE
        assert "name a field" in err
        code, _, err = run("stream", f"127.0.0.1:{server.port}", "--until", "now", "-f", "{value[pad]")
        assert code == ExitCode.USAGE
        assert "bad template" in err
        code, _, err = run("stream", f"127.0.0.1:{server.port}", "--until", "now", "-f", "{key:>{cas}}")
        assert code == ExitCode.USAGE  # a width from the message: one line, not a line of a billion blanks
        assert err.startswith("dcpctl: error: -f: bad template for DCP_MUTATION: {key:>")
        assert err.rstrip().endswith("a width of at most 10,000")


def test_a_template_prints_only_messages_with_every_field_it_names() -> None:
    """'{key} {by_seqno}': one line per item, none (blank) for snapshot markers, stream ends or noops."""
    out = io.StringIO()
    env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False, width=200)
    with serving("--vbuckets", "2", "--items", "10") as server:
        code = main(["stream", f"127.0.0.1:{server.port}", "--until", "now", "-f", "{key} {by_seqno}"], env)
        assert code == ExitCode.OK
        lines = out.getvalue().splitlines()
        assert len(lines) == 10
        assert all(len(line.split()) == 2 and line.split()[1].isdigit() for line in lines), lines
        out.seek(0)
        out.truncate()
        # a field in a format spec counts too; a stream end is the one message with stream_end_status
        code = main(["stream", f"127.0.0.1:{server.port}", "--until", "now", "-f",
                     "{vbucket:>{stream_end_status}}"], env)
        assert code == ExitCode.OK
        assert sorted(out.getvalue().split()) == ["0", "1"]


def test_write_masks_the_password_in_the_capture(tmp_path: Path) -> None:
    capture = tmp_path / "s.pcap"
    with serving("--vbuckets", "1", "--items", "3") as server:
        code, _, err = stream(server, "--until", "now", "--sasl-mech", "PLAIN", "--write", str(capture))
        port = server.port
    assert code == ExitCode.OK, err
    assert b"password" not in capture.read_bytes()  # PLAIN's value "\0user\0password" is masked whole
    code, records, err = run("decode", str(capture), "--port", str(port), "-F", "jsonl", "--show-secrets")
    assert code == ExitCode.OK, err
    auths = [r for r in records if r["opcode"] == "SASL_AUTH" and r["magic"] == "ClientRequest"]
    assert len(auths) == 2  # the connection that read the cluster map, and the node's DCP connection
    # the same length: the capture still frames
    assert all(a["value"] == "*" * len("\0Administrator\0password") for a in auths)
    assert len(items(records)) == 3  # and everything else is as it was sent


def test_json_is_closed_and_state_dir_and_cacert_are_checked(tmp_path: Path) -> None:
    with serving("--vbuckets", "1", "--items", "3") as server:
        code, _, err = stream(server, "--state", str(tmp_path / "missing" / "s.json"))
        assert code == ExitCode.INPUT
        assert "no such directory" in err
        code, _, err = stream(server, "--cacert", str(tmp_path / "ca.pem"))
        assert code == ExitCode.INPUT
        assert "--cacert" in err


def test_json_output_stays_valid_when_the_stream_stops() -> None:
    from dcpctl.render.jsonl import write_json  # noqa: PLC0415

    def interrupted() -> Any:
        yield {"opcode": "DCP_MUTATION"}
        raise KeyboardInterrupt

    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        write_json(interrupted(), out)
    assert json.loads(out.getvalue()) == [{"opcode": "DCP_MUTATION"}]


def test_the_json_lines_fast_path_prints_what_the_usual_path_prints(tmp_path: Path) -> None:
    """A binary standard output turns the lines path on (plain items written from a template); --write turns
    it off. Both runs of the same seeded stream print the same records, in the same key order."""

    def lines(*args: str) -> list[dict[str, Any]]:
        raw = io.BytesIO()
        out = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
        env = Environment(stdout=out, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                          stderr_isatty=False, color=False)
        with serving("--vbuckets", "3", "--items", "3000", "--seed", "5", "--value-size", "40") as server:
            assert main(["stream", f"127.0.0.1:{server.port}", "--until", "now", "--timeout", "5", *args], env) == 0
        out.flush()
        records = [json.loads(line) for line in raw.getvalue().splitlines()]
        for record in records:  # when, and the servers' and clients' ports, differ between the runs
            del record["ts"], record["connection"]
        return records

    fast = lines("--buffer-size", "20000")
    usual = lines("--buffer-size", "20000", "--write", str(tmp_path / "x.pcap"))

    def by_item(records: list[dict[str, Any]]) -> dict[tuple[int, int], list[tuple[str, Any]]]:
        # acks make the vbuckets interleave differently from run to run: each item's record, keys in order
        return {(r["vbucket"], r["by_seqno"]): [(k, v) for k, v in r.items() if k != "offset"]
                for r in records if r["opcode"] in ITEMS}

    assert by_item(fast) == by_item(usual)
    assert sum(r["opcode"] in ITEMS for r in fast) == 3000


def test_compare_names_a_branch_that_begins_below_the_earlier_high_seqno() -> None:
    from dcpctl.dcp.failover import compare, dump_logs  # noqa: PLC0415

    before = dump_logs([{"vbucket": 0, "failover_log": [{"vbucket_uuid": 11, "seqno": 0}], "high_seqno": 500}])
    after = dump_logs([{"vbucket": 0, "failover_log": [{"vbucket_uuid": 22, "seqno": 100},
                                                      {"vbucket_uuid": 11, "seqno": 0}], "high_seqno": 130}])
    [change] = compare(before, after)
    assert change.kind == "divergent"
    assert "items 101-500" in change.message
    later = dump_logs([{"vbucket": 0, "failover_log": [{"vbucket_uuid": 22, "seqno": 500},
                                                      {"vbucket_uuid": 11, "seqno": 0}], "high_seqno": 530}])
    assert [c.kind for c in compare(before, later)] == ["new_entries"]  # nothing the earlier dump saw is lost


def test_until_now_follows_a_vbucket_that_moved_during_start_up(tmp_path: Path) -> None:
    """vbucket 1 leaves node 1 after the first item node 0 sends, before node 1 lists its high seqnos: node 1 has
    no high seqno for it, so it is asked from node 0, to node 0's high seqno (never to a made-up 0, skipped)."""
    plan = tmp_path / "move.toml"
    plan.write_text('[[event]]\naction = "move"\nvbucket = 1\nnode = 0\nafter_items = 1\n')
    with serving("--nodes", "2", "--vbuckets", "4", "--items", "80", "--scenario", str(plan)) as server:
        code, records, err = stream(server, "--until", "now")
    assert code == ExitCode.OK, err
    assert "vbucket 1: " in err  # said, whichever way it was found out (not listed, or NotMyVbucket)
    assert sorted(items(records)) == [(vb, s) for vb in range(4) for s in range(1, 21)]


def test_until_now_ends_where_a_failover_cut_the_history_without_a_rollback(tmp_path: Path) -> None:
    """vbucket 1 has sent nothing yet when a failover cuts its history to 5 (below the 20 read at start): its
    stream ends (StateChanged) and is asked again from 0, which needs no rollback; it ends at 5, its new high
    seqno, instead of waiting for ever for 6-20."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    plan = tmp_path / "failover.toml"
    plan.write_text('[[event]]\naction = "failover"\nvbucket = 1\nseqno = 5\nafter_items = 20\n')
    with serving("--vbuckets", "2", "--items", "40", "--scenario", str(plan)) as server:
        try:  # in a process of its own: without the fix it never ends
            done = subprocess.run([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{server.port}", "-F",
                                   "jsonl", "--timeout", "5", "--until", "now"], capture_output=True, text=True,
                                  env={**os.environ, "DCPCTL_PASSWORD": "password"}, timeout=30, check=False)
        except subprocess.TimeoutExpired:
            pytest.fail("--until now waited for ever for seqnos the failover cut away")
    assert done.returncode == ExitCode.OK, done.stderr
    assert "stream ended (StateChanged); asking again from 0" in done.stderr  # the path without a rollback
    assert "roll back" not in done.stderr
    assert "is 5, below the 20 read at start" in done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted(items(records)) == [(0, s) for s in range(1, 21)] + [(1, s) for s in range(1, 6)]


def test_the_dead_connection_check_follows_a_noop_interval_given_as_a_control(tmp_path: Path) -> None:
    """--control set_noop_interval=10 is what the server is told: 4 s of silence is no dead connection, though
    --noop-interval 1 alone would call it dead after 2.5 s."""
    plan = tmp_path / "late.toml"
    plan.write_text('[[event]]\naction = "mutate"\nvbucket = 0\ncount = 1\nafter_seconds = 5\n')
    with serving("--vbuckets", "1", "--items", "10", "--scenario", str(plan)) as server:
        code, records, err = stream(server, "--from", "now", "--count", "1", "--noop-interval", "1",
                                    "--control", "set_noop_interval=10")
        assert code == ExitCode.OK, err
        assert items(records) == [(0, 11)]
        code, _, err = stream(server, "--control", "set_noop_interval=0")
    assert code == ExitCode.USAGE
    assert "--control set_noop_interval: a number of seconds above 0" in err

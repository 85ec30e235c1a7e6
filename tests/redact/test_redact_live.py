"""--redact for what ``stream --write`` and ``capture -w`` save: the same core, the same placeholders as
``dcpctl redact`` gives of the plain capture with the same salt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from servekit import run, serving

from dcpctl.exitcode import ExitCode

SALT = "a salt for the live tests"
ITEMS = ("DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION")


def _items(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["opcode"] in ITEMS and r["direction"] == "server>client"]


def test_stream_write_redact_saves_what_redact_would_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DCPCTL_PASSWORD", "password")
    salt = tmp_path / "salt"
    salt.write_text(SALT)
    plain, redacted, offline = tmp_path / "plain.pcap", tmp_path / "redacted.pcap", tmp_path / "offline.pcap"
    with serving("--vbuckets", "2", "--items", "60", "--seed", "5") as server:
        base = ["stream", f"127.0.0.1:{server.port}", "-F", "jsonl", "--timeout", "5", "--until", "now",
                "--sasl-mech", "PLAIN"]
        code, live, err = run(*base, "--write", str(plain))
        assert code == ExitCode.OK, err
        code, _, err = run(*base, "--write", str(redacted), "--redact", "--salt-file", str(salt))
        assert code == ExitCode.OK, err
        port = str(server.port)
    assert run("redact", str(plain), "-o", str(offline), "--salt-file", str(salt), "--port", port)[0] == ExitCode.OK
    data = redacted.read_bytes()
    assert b"password" not in data
    keys = {r["key"] for r in live if r["opcode"] in ITEMS}
    assert keys
    assert not any(key.encode() in data for key in keys if len(key) >= 6)
    _, saved, _ = run("decode", str(redacted), "-F", "jsonl", "--port", port)
    _, expected, _ = run("decode", str(offline), "-F", "jsonl", "--port", port)
    fields = ("opcode", "vbucket", "by_seqno", "key", "value", "cas")
    assert [{f: r.get(f) for f in fields} for r in _items(saved)] == \
        [{f: r.get(f) for f in fields} for r in _items(expected)]
    assert len(_items(saved)) == len([r for r in live if r["opcode"] in ITEMS])


def test_hash_names_leaves_the_bucket_name_nowhere_in_what_stream_saves(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # the bucket is named in SELECT_BUCKET, in the cluster map's "name" and in its URIs (serve writes them as
    # ns_server does): --hash-names gives it one placeholder in all of them
    monkeypatch.setenv("DCPCTL_PASSWORD", "password")
    salt = tmp_path / "salt"
    salt.write_text(SALT)
    plain, redacted = tmp_path / "plain.pcap", tmp_path / "redacted.pcap"
    bucket = "customer-orders"
    with serving("--vbuckets", "2", "--items", "20", "--bucket", bucket) as server:
        base = ["stream", f"127.0.0.1:{server.port}", "-b", bucket, "-F", "jsonl", "--timeout", "5", "--until",
                "now", "--sasl-mech", "PLAIN"]
        assert run(*base, "--write", str(plain))[0] == ExitCode.OK
        code, _, err = run(*base, "--write", str(redacted), "--redact", "--salt-file", str(salt), "--hash-names")
        assert code == ExitCode.OK, err
        port = str(server.port)
    assert plain.read_bytes().count(bucket.encode()) >= 5  # SELECT_BUCKET, the map's name and its three URIs
    assert bucket.encode() not in redacted.read_bytes()
    _, saved, _ = run("decode", str(redacted), "-F", "jsonl", "--port", port)
    maps = [json.loads(r["value"]) for r in saved if r["opcode"] == "GET_CLUSTER_CONFIG" and r.get("value")]
    assert maps
    hashed = maps[0]["name"]
    assert len(hashed) == len(bucket)
    assert maps[0]["uri"].startswith(f"/pools/default/buckets/{hashed}?bucket_uuid=")
    assert {r["key"] for r in saved if r["opcode"] == "SELECT_BUCKET" and r.get("key")} == {hashed}


def test_map_addresses_maps_the_cluster_maps_nodes_as_the_frames(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # the map lists the nodes by address (serve's, on loopback): mapped as the connection's own address is
    monkeypatch.setenv("DCPCTL_PASSWORD", "password")
    salt = tmp_path / "salt"
    salt.write_text(SALT)
    redacted = tmp_path / "redacted.pcap"
    with serving("--vbuckets", "2", "--items", "20") as server:
        code, _, err = run("stream", f"127.0.0.1:{server.port}", "-F", "jsonl", "--timeout", "5", "--until", "now",
                           "--sasl-mech", "PLAIN", "--write", str(redacted), "--redact", "--salt-file", str(salt),
                           "--map-addresses")
        assert code == ExitCode.OK, err
        port = server.port
    assert b"127.0.0.1" not in redacted.read_bytes()
    _, saved, _ = run("decode", str(redacted), "-F", "jsonl", "--port", str(port))
    assert not [d for r in saved for d in r["diagnostics"] if d["severity"] != "note"]
    maps = [json.loads(r["value"]) for r in saved if r["opcode"] == "GET_CLUSTER_CONFIG" and r.get("value")]
    assert maps
    server_address = saved[0]["connection"].split(" > ")[1].rsplit(":", 1)[0]
    assert server_address != "127.0.0.1"
    assert maps[0]["vBucketServerMap"]["serverList"] == [f"{server_address}:{port}"]
    assert [node["hostname"] for node in maps[0]["nodesExt"]] == [server_address]
    # the client's ephemeral ports are mapped (serve's port, a server's, was kept: decode found it above)
    assert "client ports mapped (--map-addresses): " in err


def test_redact_needs_write() -> None:
    code, _, err = run("stream", "127.0.0.1:1", "--redact")
    assert code == ExitCode.USAGE
    assert "--write" in err


def _capturing(port: int, directory: Path, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    """``dcpctl capture -w FILE --redact`` on loopback for the server's port, once it captures: the process and
    the file it saves (in ``directory``, with the salt file)."""
    saved, salt = directory / "live.pcap", directory / "salt"
    salt.write_text(SALT)
    proc = subprocess.Popen([sys.executable, "-m", "dcpctl", "capture", "-i", "lo", "-p", str(port), "-F", "jsonl",
                             "-w", str(saved), "--redact", "--salt-file", str(salt), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith(b"dcpctl: capturing on lo")
    return proc, saved


def _streamed(port: int) -> subprocess.CompletedProcess[bytes]:
    """The server's items streamed once, up to now (the traffic a live capture sees)."""
    return subprocess.run([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{port}", "--until", "now", "-F",
                           "jsonl"], capture_output=True, timeout=120, check=False,
                          env={**os.environ, "DCPCTL_PASSWORD": "password"})


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
def test_capture_w_redact_saves_redacted_frames(tmp_path: Path) -> None:
    with serving("--vbuckets", "2", "--items", "50") as server:
        proc, saved = _capturing(server.port, tmp_path)
        streamed = _streamed(server.port)
        assert streamed.returncode == ExitCode.OK, streamed.stderr
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        printed, err = proc.communicate(timeout=60)
        port = str(server.port)
    assert proc.returncode == ExitCode.OK, err
    live = [json.loads(line) for line in streamed.stdout.decode().splitlines()]
    keys = {r["key"] for r in live if r["opcode"] in ITEMS}
    assert keys
    data = saved.read_bytes()
    assert not any(key.encode() in data for key in keys if len(key) >= 6)
    assert b"password" not in data
    code, decoded, _ = run("decode", str(saved), "-F", "jsonl", "--port", port)
    assert code == ExitCode.OK
    assert len([r for r in decoded if r["opcode"] in ITEMS]) == len([r for r in live if r["opcode"] in ITEMS])
    assert printed  # the live output is not redacted: only what -w saves


def test_stream_redact_takes_redact_s_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DCPCTL_PASSWORD", "password")
    salt = tmp_path / "salt"
    salt.write_text(SALT)
    hashed, dropped = tmp_path / "hashed.pcap", tmp_path / "dropped.pcap"
    with serving("--vbuckets", "2", "--items", "20", "--seed", "5") as server:
        base = ["stream", f"127.0.0.1:{server.port}", "-F", "jsonl", "--timeout", "5", "--until", "now",
                "--redact", "--salt-file", str(salt)]
        code, live, err = run(*base, "--write", str(hashed), "--no-keep-json-names", "--map-addresses")
        assert code == ExitCode.OK, err
        assert f"dcpctl: redacted in {hashed}:" in err
        assert ", addresses 1\n" in err  # 127.0.0.1, both ends
        assert "JSON names hashed (--no-keep-json-names): " in err
        code, _, err = run(*base, "--write", str(dropped), "--values", "drop")
        assert code == ExitCode.OK, err
        port = str(server.port)
    names = {name for r in live if r["opcode"] in ITEMS and r["value"] for name in json.loads(r["value"])}
    assert names == {"key", "vbucket", "seqno", "pad"}
    _, saved, _ = run("decode", str(hashed), "-F", "jsonl", "--port", port)
    values = [json.loads(r["value"]) for r in _items(saved) if r["value"]]
    assert len(values) == len([r for r in live if r["opcode"] in ITEMS and r["value"]])
    assert all(len(value) == 4 and not set(value) & names for value in values)
    assert len({tuple(value) for value in values}) == 1  # one placeholder per name, in every document
    assert saved
    assert not any("127.0.0.1" in r["connection"] for r in saved)
    assert all(r["connection"].split(" > ")[1].endswith(f":{port}") for r in _items(saved))
    _, emptied, _ = run("decode", str(dropped), "-F", "jsonl", "--port", port)
    assert _items(emptied)
    assert all(r["value"] == "" for r in _items(emptied))


@pytest.mark.parametrize("command", [["stream", "127.0.0.1:1", "--write", "x.pcap"],
                                     ["capture", "-i", "lo", "-w", "x.pcap"]])
@pytest.mark.parametrize("option", [["--hash-names"], ["--no-keep-json-names"], ["--keep-xattr", "_sync"],
                                    ["--values", "drop"], ["--map-addresses"]])
def test_what_to_keep_needs_redact(command: list[str], option: list[str], tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(*command, *option)
    assert code == ExitCode.USAGE
    assert f"{option[0]}: only with --redact" in err
    assert not (tmp_path / "x.pcap").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
def test_capture_count_stop_saves_every_message_it_printed_and_a_summary(tmp_path: Path) -> None:
    # --count ends the capture inside the traffic: the frames the redactor still held (the last one waits for
    # the next) must reach the file, and the summary says what was replaced; redact's options apply. Two
    # connections' bootstrap take the first 40 messages: 60 stop among the items
    with serving("--vbuckets", "2", "--items", "400") as server:
        proc, saved = _capturing(server.port, tmp_path, "--count", "60", "--map-addresses", "--no-keep-json-names")
        _streamed(server.port)
        printed, err = proc.communicate(timeout=60)
        port = str(server.port)
    assert proc.returncode == ExitCode.OK, err
    shown = [json.loads(line) for line in printed.decode().splitlines()]
    assert len(shown) == 60
    code, decoded, _ = run("decode", str(saved), "-F", "jsonl", "--port", port)
    assert code == ExitCode.OK
    assert [(r["opcode"], r.get("by_seqno")) for r in decoded[:60]] == [(r["opcode"], r.get("by_seqno")) for r in shown]
    assert b"dcpctl: redacted: " in err
    assert b"  keys " in err
    assert not any("127.0.0.1" in r["connection"] for r in decoded)
    # the message the stop cut (its bytes after the stop zeroed) aside
    documents = [json.loads(r["value"]) for r in _items(decoded) if r["value"] and not r["diagnostics"]]
    assert documents
    assert not any({"key", "vbucket", "seqno", "pad"} & set(document) for document in documents)
    assert b"JSON names hashed (--no-keep-json-names): " in err


@pytest.mark.parametrize(("args", "says"), [
    ([], "no password: set DCPCTL_PASSWORD"),
    (["--from", "50", "--until", "10"], "--from 50 is past --until 10"),
])
def test_no_salt_is_printed_for_a_stream_that_never_starts(args: list[str], says: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A random salt was made and printed before the command line and the password were checked: a line to
    keep for a run that wrote nothing."""
    monkeypatch.delenv("DCPCTL_REDACT_SALT", raising=False)
    monkeypatch.delenv("DCPCTL_PASSWORD", raising=False)
    if args:
        monkeypatch.setenv("DCPCTL_PASSWORD", "password")
    code, _, err = run("stream", "127.0.0.1:1", "--write", str(tmp_path / "x.pcap"), "--redact", *args)
    assert code == ExitCode.USAGE
    assert err.startswith("dcpctl: error: ")
    assert says in err
    assert "salt" not in err


def test_no_salt_is_printed_for_a_stream_whose_file_cannot_be_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DCPCTL_REDACT_SALT", raising=False)
    monkeypatch.setenv("DCPCTL_PASSWORD", "password")
    code, _, err = run("stream", "127.0.0.1:1", "--write", "/nonexistent/x.pcap", "--redact")
    assert (code, err) == (ExitCode.INPUT, "dcpctl: error: --write: /nonexistent/x.pcap: no such file\n")


@pytest.mark.parametrize(("args", "code", "says"), [
    (["-i", "lo", "--bpf", "tcp port"], ExitCode.USAGE, "--bpf: "),
    (["-i", "dcpctl-no-such-if0"], ExitCode.INPUT, "cannot capture on dcpctl-no-such-if0"),
    (["-i", "lo", "-w", "/nonexistent/x.pcap"], ExitCode.INPUT, ""),  # (as root: lo opens, the file does not)
])
def test_no_salt_is_printed_for_a_capture_that_never_starts(args: list[str], code: int, says: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """As for stream: capture made and printed its salt before the filter, the interface and the -w file were
    checked."""
    monkeypatch.delenv("DCPCTL_REDACT_SALT", raising=False)
    got, _, err = run("capture", *args, *([] if "-w" in args else ["-w", str(tmp_path / "x.pcap")]), "--redact")
    assert got == code, err
    assert err.startswith(f"dcpctl: error: {says}")
    assert "salt" not in err
    assert not (tmp_path / "x.pcap").exists()


def test_a_bad_salt_file_is_said_before_the_capture_opens_anything(tmp_path: Path) -> None:
    (tmp_path / "salt").write_bytes(b"")
    got, _, err = run("capture", "-i", "dcpctl-no-such-if0", "-w", str(tmp_path / "x.pcap"), "--redact",
                      "--salt-file", str(tmp_path / "salt"))
    assert (got, err) == (ExitCode.USAGE, "dcpctl: error: --salt-file: the file is empty\n")

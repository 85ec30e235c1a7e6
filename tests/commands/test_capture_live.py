"""dcpctl capture on the loopback interface: live traffic decoded as it arrives and saved with -w."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from capturekit import session_packets, within_size
from servekit import serving

from dcpctl.exitcode import ExitCode


def _serve_once(listener: socket.socket, reply: bytes) -> None:
    conn, _ = listener.accept()
    with conn:
        conn.recv(65536)
        conn.sendall(reply)
        time.sleep(0.2)


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
def test_live_capture_decodes_and_writes(tmp_path: Path) -> None:
    out = tmp_path / "live.pcap"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    packets = session_packets()
    client_bytes = b"".join(d for c, d in packets[:4] if c)
    server_bytes = b"".join(d for c, d in packets[:4] if not c)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dcpctl", "capture", "-i", "lo", "-p", str(port), "-c", "4", "-F", "jsonl",
         "-w", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith(b"dcpctl: capturing on lo")  # libpcap has started
    server = threading.Thread(target=_serve_once, args=(listener, server_bytes))
    server.start()
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(client_bytes)
        client.recv(65536)
    server.join()
    stdout, stderr = proc.communicate(timeout=60)
    listener.close()
    assert proc.returncode == ExitCode.OK, stderr
    opcodes = [line.split('"opcode":"')[1].split('"')[0] for line in stdout.decode().splitlines()]
    assert opcodes == ["HELLO", "SELECT_BUCKET", "HELLO", "SELECT_BUCKET"]
    assert out.stat().st_size > 24


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
def test_a_live_dcp_stream_prints_what_decode_prints_of_the_saved_frames(tmp_path: Path) -> None:
    """A whole DCP session (dcpctl stream from dcpctl serve) captured on the loopback until Ctrl-C: the JSON
    lines printed live (plain items from line templates) are the records decode gives of the saved frames."""
    saved, printed = tmp_path / "live.pcap", tmp_path / "live.jsonl"
    with serving("--vbuckets", "4", "--items", "400") as server, printed.open("wb") as sink:
        proc = subprocess.Popen(  # output to a file: a pipe nobody reads until the end would stall the capture
            [sys.executable, "-m", "dcpctl", "capture", "-i", "lo", "-p", str(server.port), "-F", "jsonl",
             "-w", str(saved)], stdout=sink, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        assert proc.stderr.readline().startswith(b"dcpctl: capturing on lo")  # libpcap has started
        streamed = subprocess.run([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{server.port}",
                                   "--until", "now", "--summary"], capture_output=True, timeout=120, check=False,
                                  env={**os.environ, "DCPCTL_PASSWORD": "password"})
        assert streamed.returncode == ExitCode.OK, streamed.stderr
        time.sleep(1)
        proc.send_signal(signal.SIGINT)  # the first Ctrl-C: what was read is decoded and written whole
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.OK, stderr
    live = [json.loads(line) for line in printed.read_text().splitlines()]
    decoded = subprocess.run([sys.executable, "-m", "dcpctl", "decode", "-F", "json", "-p", str(server.port),
                              str(saved)], capture_output=True, timeout=120, check=True)
    records = json.loads(decoded.stdout)
    assert sum(r["opcode"] == "DCP_MUTATION" for r in live) > 300  # the items went through the fast path
    assert [list(r.items()) for r in live] == [list(r.items()) for r in records]


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_ctrl_c_stops_a_capture_that_sees_no_traffic(stop: signal.Signals) -> None:
    """libpcap waits for a packet whatever its timeout: the capture must not be inside it when Ctrl-C comes.
    SIGTERM (timeout, systemd) and SIGHUP (a closed terminal) stop it as Ctrl-C does: they killed it."""
    proc = subprocess.Popen([sys.executable, "-m", "dcpctl", "capture", "-i", "lo", "-p", "9", "-F", "jsonl"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith(b"dcpctl: capturing on lo")
    time.sleep(0.5)
    started = time.monotonic()
    proc.send_signal(stop)
    stdout, _ = proc.communicate(timeout=30)
    assert proc.returncode == ExitCode.OK
    assert stdout == b""
    assert time.monotonic() - started < 5


def test_missing_interface_is_one_line_exit_3() -> None:
    proc = subprocess.run([sys.executable, "-m", "dcpctl", "capture", "-i", "nosuchif0"],
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == ExitCode.INPUT
    assert proc.stderr.decode().count("\n") == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
def test_a_full_disk_under_w_stops_the_capture_keeping_what_was_saved(tmp_path: Path) -> None:
    """The -w file stops taking frames part way: one line naming it, exit 3, the messages read so far printed,
    and the file cut back to its last whole frame, readable (it was a traceback, the file cut anywhere)."""
    out = tmp_path / "live.pcap"
    with serving("--vbuckets", "4", "--items", "400") as server:
        # a file size limit stands for a nearly full disk: writes past it fail (EFBIG; Python ignores SIGXFSZ)
        proc = subprocess.Popen(
            ["prlimit", "--fsize=20000", sys.executable, "-m", "dcpctl", "capture", "-i", "lo", "-p",
             str(server.port), "-F", "jsonl", "-w", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        assert proc.stderr.readline().startswith(b"dcpctl: capturing on lo")
        subprocess.run([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{server.port}", "--until", "now",
                        "--summary"], capture_output=True, timeout=120, check=False,
                       env={**os.environ, "DCPCTL_PASSWORD": "password"})
        stdout, stderr = proc.communicate(timeout=60)  # it stops by itself
    assert proc.returncode == ExitCode.INPUT, stderr
    assert stderr.decode().count("\n") == 1
    assert stderr.decode().startswith(f"dcpctl: error: {out}: File too large: the capture stopped; the file holds")
    assert 0 < out.stat().st_size <= 20_000
    printed = stdout.decode().splitlines()
    assert printed
    assert all(json.loads(line) for line in printed)
    decoded = subprocess.run([sys.executable, "-m", "dcpctl", "decode", "-F", "jsonl", "-p", str(server.port),
                              str(out)], capture_output=True, timeout=120, check=False)
    assert decoded.returncode == ExitCode.OK, decoded.stderr
    assert b"truncated_file" not in decoded.stderr  # no half record at the end
    saved = decoded.stdout.decode().splitlines()
    assert saved
    assert [json.loads(line)["opcode"] for line in saved] == [json.loads(line)["opcode"] for line in printed][
        :len(saved)]


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
@pytest.mark.parametrize("target", ["/dev/full", "/proc/version"])
def test_a_w_file_that_takes_nothing_is_one_line_exit_3(target: str) -> None:
    """A full device, a file that cannot be written: one line naming it before capturing, exit 3."""
    proc = subprocess.run([sys.executable, "-m", "dcpctl", "capture", "-i", "lo", "-p", "9", "-w", target],
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == ExitCode.INPUT
    assert proc.stderr.decode().startswith(f"dcpctl: error: {target}: ")
    assert proc.stderr.decode().count("\n") == 1


def _sink(listener: socket.socket) -> None:
    conn, _ = listener.accept()
    with conn:
        while conn.recv(1 << 20):
            pass


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
def test_packets_the_kernel_dropped_are_counted() -> None:
    """The capture cannot keep up (its output is not read): libpcap's drop count is reported at the end as
    capture_dropped (capture_gap alone said bytes were missing, not that the kernel threw packets away)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "dcpctl", "capture", "-i", "lo", "-p", str(port), "-F", "jsonl"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith(b"dcpctl: capturing on lo")
    server = threading.Thread(target=_sink, args=(listener,))
    server.start()
    noops = bytes.fromhex("805c0000000000000000000000000001" + "00" * 8) * 4096
    with socket.create_connection(("127.0.0.1", port)) as client:
        for _ in range(3000):  # 300 MB while the capture is stuck writing lines nobody reads
            client.sendall(noops)
    server.join()
    listener.close()
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == ExitCode.OK, stderr
    assert b"capture_dropped" in stderr.splitlines()[-1], stderr[-500:]


def _capture_session(tmp_path: Path, *write: str, slow: bool = False) -> tuple[list[dict[str, object]], int]:
    """A DCP session (dcpctl stream from dcpctl serve) captured on the loopback until Ctrl-C, saved with
    ``write``'s options: the records printed live, and the server's port. ``slow``: items made over about
    two seconds, not all there at once."""
    printed = tmp_path / "live.jsonl"
    served = ("--items", "4", "--mutation-rate", "20") if slow else ("--items", "400")
    until = ("--count", "44") if slow else ("--until", "now")
    with serving("--vbuckets", "4", *served) as server, printed.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "dcpctl", "capture", "-i", "lo", "-p", str(server.port),
                                 "-F", "jsonl", *write], stdout=sink, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        assert proc.stderr.readline().startswith(b"dcpctl: capturing on lo")
        streamed = subprocess.run([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{server.port}",
                                   *until, "--summary"], capture_output=True, timeout=120, check=False,
                                  env={**os.environ, "DCPCTL_PASSWORD": "password"})
        assert streamed.returncode == ExitCode.OK, streamed.stderr
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.OK, stderr
    return [json.loads(line) for line in printed.read_text().splitlines()], server.port


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
@pytest.mark.parametrize("redact", [False, True])
def test_w_with_a_file_size_writes_files_decode_reads_as_one(tmp_path: Path, redact: bool,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """-C: a new file each 30,000 bytes, named as tcpdump names them; every file a whole pcap, and decode of
    them all (as a shell lists them) gives what was printed live, message for message. With --redact, the
    frames held for a message the change of file cut go to their own file: the same messages, redacted."""
    monkeypatch.setenv("DCPCTL_REDACT_SALT", "a salt for the test")
    saved = tmp_path / "live.pcap"
    live, port = _capture_session(tmp_path, "-w", str(saved), "-C", "0.03", *(["--redact"] if redact else []))
    files = sorted(tmp_path.glob("live.pcap*"))
    assert len(files) > 3
    assert {f.name for f in files} == {"live.pcap", *(f"live.pcap{n}" for n in range(1, len(files)))}
    assert all(within_size(f, 30_000) for f in files)
    decoded = subprocess.run([sys.executable, "-m", "dcpctl", "decode", "-F", "json", "-p", str(port),
                              *map(str, files)], capture_output=True, timeout=120, check=True)
    assert decoded.stderr == b""
    records = json.loads(decoded.stdout)
    assert sum(r["opcode"] == "DCP_MUTATION" for r in live) > 300
    if not redact:
        assert [list(r.items()) for r in live] == [list(r.items()) for r in records]
        return
    facts = ("opcode", "vbucket", "opaque", "by_seqno", "frames")
    assert [[r.get(k) for k in facts] for r in records] == [[r.get(k) for k in facts] for r in live]
    assert [r["key"] for r in records if "key" in r] != [r["key"] for r in live if "key" in r]


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
def test_w_with_a_file_count_keeps_a_bounded_ring(tmp_path: Path) -> None:
    """-C with -W: at most N files, the oldest overwritten; decode reads what is left as one capture, which
    begins in the middle of the connection and ends as the live output ended."""
    saved = tmp_path / "live.pcap"
    live, port = _capture_session(tmp_path, "-w", str(saved), "-C", "0.03", "-W", "3")
    files = sorted(tmp_path.glob("live.pcap*"))
    assert [f.name for f in files] == ["live.pcap0", "live.pcap1", "live.pcap2"]
    assert all(within_size(f, 30_000) for f in files)
    decoded = subprocess.run([sys.executable, "-m", "dcpctl", "decode", "-F", "json", "-p", str(port),
                              *map(str, files)], capture_output=True, timeout=120, check=True)
    records = json.loads(decoded.stdout)
    assert 0 < len(records) < len(live)
    assert [r["by_seqno"] for r in records[-20:] if "by_seqno" in r] == \
        [r["by_seqno"] for r in live[-20:] if "by_seqno" in r]


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
def test_w_with_rotate_seconds_begins_a_file_each_second_named_by_its_time(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """-G 1: a file a second, named by strftime of the -w name; decode of them all gives what was printed."""
    monkeypatch.setenv("TZ", "UTC")
    live, port = _capture_session(tmp_path, "-w", str(tmp_path / "live-%H%M%S.pcap"), "-G", "1", slow=True)
    files = sorted(tmp_path.glob("live-*.pcap"))
    assert len(files) >= 2
    decoded = subprocess.run([sys.executable, "-m", "dcpctl", "decode", "-F", "json", "-p", str(port),
                              *map(str, files)], capture_output=True, timeout=120, check=True)
    assert decoded.stderr == b""
    assert [list(r.items()) for r in live] == [list(r.items()) for r in json.loads(decoded.stdout)]


def test_file_size_and_count_need_what_they_modify() -> None:
    for args, says in ((["-C", "1"], "-C: the size of each -w file"), (["-w", "x.pcap", "-W", "2"], "-W: "),
                       (["-G", "5"], "-G: the seconds each -w file covers"),
                       (["-w", "x.pcap", "-G", "5"], "-G: -w x.pcap has no time in it"),
                       (["-w", "x-%S.pcap", "-G", "5", "-W", "2"], "-W with -G: tcpdump then stops")):
        proc = subprocess.run([sys.executable, "-m", "dcpctl", "capture", "-i", "lo", *args],
                              capture_output=True, timeout=60, check=False)
        assert proc.returncode == ExitCode.USAGE
        assert says in proc.stderr.decode()

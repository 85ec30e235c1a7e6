"""``dcpctl stream``'s data safety, as real processes meet it: full disks, signals, kill -9, a server sending
a cut item, and templates that reach for attributes. Each run is checked item by item: nothing lost, and
nothing delivered twice unless the man page says so (kill -9)."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import pytest
from servekit import Server, serving

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment

ITEMS = ("DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION")
ENV = {**os.environ, "DCPCTL_PASSWORD": "password"}


def command(server: Server | int, *args: str) -> list[str]:
    port = server if isinstance(server, int) else server.port
    return [sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{port}", "--timeout", "5", *args]


def whole_items(data: bytes) -> list[tuple[int, int]]:
    """(vbucket, by_seqno) of every item whose JSON line was written whole."""
    found = []
    for line in data.split(b"\n"):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("opcode") in ITEMS:
            found.append((record["vbucket"], record["by_seqno"]))
    return found


def pretty_items(data: bytes) -> list[tuple[int, int]]:
    """The same from pretty output: an item's first line names its vbucket, its second its by_seqno."""
    found, vbucket = [], None
    for line in data.decode(errors="replace").split("\n")[:-1]:  # the last piece was cut (or is empty)
        words = line.split()
        if len(words) > 8 and words[6] in ITEMS and words[7] == "vb":  # ts, client > server, direction, @offset
            vbucket = int(words[8])
        elif vbucket is not None and words and words[0].startswith("by_seqno="):
            found.append((vbucket, int(words[0].removeprefix("by_seqno="))))
            vbucket = None
    return found


def template_items(data: bytes) -> list[tuple[int, int]]:
    """The same from -f '{opcode} {vbucket} {by_seqno}'."""
    lines = [line.split() for line in data.decode().split("\n")[:-1]]
    return [(int(words[1]), int(words[2])) for words in lines if len(words) == 3 and words[0] in ITEMS]


def saved(state: Path) -> dict[int, int]:
    if not state.exists():
        return {}
    return {int(vb): pos["seqno"] for vb, pos in json.loads(state.read_text())["vbuckets"].items()}


def every(vbuckets: int, items: int) -> list[tuple[int, int]]:
    return [(vb, s) for vb in range(vbuckets) for s in range(1, items // vbuckets + 1)]


def resume(server: Server, state: Path) -> list[tuple[int, int]]:
    done = subprocess.run(command(server, "-F", "jsonl", "--state", str(state), "--from", "resume", "--until", "now"),
                          capture_output=True, env=ENV, timeout=120, check=False)
    assert done.returncode == ExitCode.OK, done.stderr
    return whole_items(done.stdout)


def file_limit(size: int) -> Callable[[], None]:
    """A child whose files cannot grow past ``size`` bytes: its writes there are cut short, then fail (EFBIG),
    as on a disk that fills up; Python ignores SIGXFSZ, so the write returns instead of the process dying."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


# --- item 2: every write checked, positions only for what was written whole ------------------------------
@pytest.mark.parametrize("unbuffered", ["1", ""])
@pytest.mark.parametrize(("shape", "parse"), [([], whole_items), (["-F", "pretty"], pretty_items),
                                              (["-f", "{opcode} {vbucket} {by_seqno}"], template_items)])
def test_a_disk_filling_up_under_standard_output_loses_nothing(
        tmp_path: Path, unbuffered: str, shape: list[str], parse: Callable[[bytes], list[tuple[int, int]]]) -> None:
    """Standard output on a file that stops growing at 200 kB: a short write, then EFBIG. One line, exit 3,
    and the saved positions count only lines written whole, so a resume delivers everything else."""
    state, out = tmp_path / "state.json", tmp_path / "out"
    with serving("--vbuckets", "2", "--items", "20000", "--seed", "4", "--value-size", "30") as server:
        with out.open("wb") as sink:
            done = subprocess.run(command(server, "--state", str(state), "--until", "now", "--save-items", "200",
                                          *shape), stdout=sink, stderr=subprocess.PIPE,
                                  env={**ENV, "PYTHONUNBUFFERED": unbuffered}, preexec_fn=file_limit(200_000),
                                  timeout=120, check=False)
        assert done.returncode == ExitCode.INPUT, done.stderr
        assert done.stderr.decode() == "dcpctl: error: cannot write standard output: File too large\n"
        positions = saved(state)
        assert positions, "saved at least once every 200 items"
        written = set(parse(out.read_bytes()))
        for vb, seqno in positions.items():
            assert {(vb, s) for s in range(1, seqno + 1)} <= written, f"vbucket {vb}: saved {seqno}, not written"
        rest = resume(server, state)
    assert Counter(rest).most_common(1)[0][1] == 1
    assert written | set(rest) >= set(every(2, 20000)), "nothing lost"
    assert not set(rest) & {(vb, s) for vb, top in positions.items() for s in range(1, top + 1)}


def test_the_state_directory_is_checked_before_connecting(tmp_path: Path) -> None:
    if not os.path.isdir("/sys"):
        pytest.skip("no /sys: the directory where nobody, root included, can make a file")
    nobody = socket.socket()  # a port nobody answers on: a check after connecting would say exit 5
    nobody.bind(("127.0.0.1", 0))
    port = nobody.getsockname()[1]
    try:
        for where, why in (("/sys/state.json", "cannot save the state in /sys"),
                           (str(tmp_path / "missing" / "s.json"), "no such directory")):
            done = subprocess.run(command(port, "--state", where), capture_output=True, text=True, env=ENV, timeout=60,
                                  check=False)
            assert done.returncode == ExitCode.INPUT, done.stderr
            assert why in done.stderr
            assert done.stderr.count("\n") == 1
    finally:
        nobody.close()


def test_a_state_file_that_cannot_be_saved_is_one_line_and_the_old_state_stays(tmp_path: Path) -> None:
    """The state's own disk fills: the save fails (a file may not pass 300 bytes), the error names the file,
    exit 3, and the file is the one saved before (written atomically)."""
    state = tmp_path / "state.json"
    state.write_text('{"version": 1, "bucket": "default", "vbuckets": {}}\n')
    before = state.read_text()
    with serving("--vbuckets", "2", "--items", "400") as server:
        done = subprocess.run(command(server, "-F", "jsonl", "--state", str(state), "--until", "now"),
                              capture_output=True, text=True, env=ENV, preexec_fn=file_limit(300), timeout=60,
                              check=False)
    assert done.returncode == ExitCode.INPUT, done.stderr
    assert done.stderr == f"dcpctl: error: {state}: cannot save the state: File too large\n"
    assert state.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary file left behind


def test_write_to_a_full_disk_is_one_line_naming_the_file(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    with serving("--vbuckets", "2", "--items", "4000") as server:
        done = subprocess.run(command(server, "-F", "jsonl", "--until", "now", "--state", str(state), "--write",
                                      "/dev/full"), capture_output=True, text=True, env=ENV, timeout=60, check=False)
    assert done.returncode == ExitCode.INPUT, done.stderr
    assert done.stderr == "dcpctl: error: /dev/full: No space left on device\n"
    assert saved(state) == {} or max(saved(state).values()) < 2000  # nothing counted that the capture lost


# --- items 3 and 4: signals and kill -9 ----------------------------------------------------------------------
@contextmanager
def streaming(server: Server, state: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(command(server, "-F", "jsonl", "--state", str(state), *args), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=ENV)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def read_lines(stream: BinaryIO, count: int) -> bytes:
    lines = [stream.readline() for _ in range(count)]
    assert lines[-1], "the stream ended early"
    return b"".join(lines)


def finish(process: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """The rest of standard output (through the reader read_lines used, which holds some of it), then
    standard error (a line or two: it cannot fill its pipe meanwhile)."""
    assert process.stdout is not None
    assert process.stderr is not None
    rest, err = process.stdout.read(), process.stderr.read()
    process.wait(60)
    return rest, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_as_ctrl_c_does(tmp_path: Path, sig: signal.Signals) -> None:
    """Exactly once across the stop and a resume: exit 0, the state saved, no item lost or repeated."""
    state = tmp_path / "state.json"
    with serving("--vbuckets", "2", "--items", "200000", "--value-size", "10") as server:
        with streaming(server, state) as process:
            assert process.stdout is not None
            first = read_lines(process.stdout, 20000)
            process.send_signal(sig)
            rest, err = finish(process)
        assert process.returncode == ExitCode.OK, err
        assert f"{sig.name}: closing the streams and saving the state" in err.decode()
        delivered = whole_items(first + rest)
        assert saved(state) == {vb: max((s for v, s in delivered if v == vb), default=0) for vb in range(2)}
        delivered += resume(server, state)
    assert Counter(delivered).most_common(1)[0][1] == 1
    assert sorted(delivered) == every(2, 200000)



def test_a_stop_signal_delivered_twice_at_once_is_one_stop(tmp_path: Path) -> None:
    """GNU timeout passes a signal it gets on to its child and to its process group: Ctrl-C on ``timeout 1h
    dcpctl stream`` reaches dcpctl twice at once. That took the second signal's path (stop at once, 'lines may
    be delivered again'); it is the one stop it was meant to be."""
    state = tmp_path / "state.json"
    with serving("--vbuckets", "2", "--items", "200000", "--value-size", "10") as server:
        with streaming(server, state) as process:
            assert process.stdout is not None
            first = read_lines(process.stdout, 20000)
            process.send_signal(signal.SIGINT)
            time.sleep(0.05)  # apart: two signals at once are one to Python already (one flag, one handler run)
            process.send_signal(signal.SIGINT)
            rest, err = finish(process)
        assert process.returncode == ExitCode.OK, err
        assert "interrupted: closing the streams and saving the state" in err.decode()
        assert b"again" not in err
        delivered = whole_items(first + rest)
        assert saved(state) == {vb: max((s for v, s in delivered if v == vb), default=0) for vb in range(2)}
        delivered += resume(server, state)
    assert Counter(delivered).most_common(1)[0][1] == 1
    assert sorted(delivered) == every(2, 200000)


# dcpctl with a slow disk under --state: each save takes 0.6 s, time for signals to come while it saves.
SLOW_SAVE = """
import time
from dcpctl.client import state
real = state.save
def slow(*args, **kwargs):
    time.sleep(0.6)
    real(*args, **kwargs)
state.save = slow
from dcpctl.cli import run
run()
"""


@pytest.mark.parametrize("then", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signals_while_the_state_is_saved_never_cut_the_save(tmp_path: Path, then: signal.Signals) -> None:
    """A second and a third signal once the stream is over (here, while the state is being saved): the save is
    made and counts every item written, exit 0. dcpctl's handlers stayed in place until the end: these signals
    interrupted the save (exit 130, the state of a second before) or, after it, killed dcpctl (129, 143)."""
    state, out = tmp_path / "state.json", tmp_path / "out.jsonl"
    with serving("--vbuckets", "2", "--items", "2000", "--mutation-rate", "200") as server, out.open("wb") as sink:
        process = subprocess.Popen([sys.executable, "-c", SLOW_SAVE, *command(server, "-F", "jsonl", "--state",
                                                                              str(state))[3:]],
                                   stdout=sink, stderr=subprocess.PIPE, env=ENV)
        try:
            assert process.stderr is not None
            while out.stat().st_size < 100_000:  # streaming
                time.sleep(0.05)
                assert process.poll() is None, process.stderr.read()
            process.send_signal(signal.SIGTERM)
            told = process.stderr.readline()
            assert b"SIGTERM: closing the streams and saving the state" in told, told
            process.send_signal(then)  # the stream is over: flushing or saving
            time.sleep(0.2)
            process.send_signal(signal.SIGINT)
            err = told + process.communicate(timeout=60)[1]
        finally:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=30)  # and the pipes closed
    assert process.returncode == ExitCode.OK, err
    delivered = whole_items(out.read_bytes())
    assert saved(state) == {vb: max((s for v, s in delivered if v == vb), default=0) for vb in range(2)}



# dcpctl whose interpreter takes a second to end, saying when it begins: Python's own teardown, stretched. Its
# exit function is registered first, so it runs after dcpctl's (atexit runs the last registered first).
SLOW_EXIT = """
import atexit, sys, time
def ending():
    sys.stderr.write("exiting\\n")
    sys.stderr.flush()
    time.sleep(1)
atexit.register(ending)
from dcpctl.cli import run
run()
"""


def test_stop_signals_while_dcpctl_exits_change_nothing(tmp_path: Path) -> None:
    """Once dcpctl stream has saved and written everything, Python puts its own signal handlers back to the
    defaults and tears down: a SIGTERM or SIGHUP then killed it (143, 129) after a clean stop. Exit 0."""
    state = tmp_path / "state.json"
    with serving("--vbuckets", "2", "--items", "20") as server:
        process = subprocess.Popen([sys.executable, "-c", SLOW_EXIT, *command(server, "-F", "jsonl", "--state",
                                                                              str(state), "--until", "now")[3:]],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
        try:
            assert process.stderr is not None
            assert process.stderr.readline() == b"exiting\n"
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                process.send_signal(sig)
            err = process.communicate(timeout=30)[1]
        finally:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=30)
    assert process.returncode == ExitCode.OK, err
    assert saved(state) == {0: 10, 1: 10}


def _wait_full(pipe: BinaryIO, timeout: float = 30.0) -> None:
    """Until the unread pipe holds bytes that stop growing (its writer is blocked): a fixed sleep raced the
    server's first stream of 200,000 items on a slow machine, and no signal then found a blocked write."""
    deadline, held, still = time.monotonic() + timeout, -1, 0
    while still < 5:  # the same for half a second
        assert time.monotonic() < deadline, "the output pipe never filled"
        time.sleep(0.1)
        now = struct.unpack("i", fcntl.ioctl(pipe.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
        still = still + 1 if now == held and now > 0 else 0
        held = now


@pytest.mark.parametrize("together", [False, True], ids=["stderr apart", "2>&1"])
def test_a_signal_cuts_output_its_reader_does_not_take_and_the_last_save_stands(tmp_path: Path,
                                                                                 together: bool) -> None:
    """A reader that stopped reading: the first signal cannot stop the blocked write, the second stops at once
    and the flush blocks again, the next cuts it short (with 2>&1, the notices go to that reader too). The
    signals alone end dcpctl, exit 0, and the state is the last save, which counts only items the reader got:
    it was exit 130, the flush cut by Python's KeyboardInterrupt. Where the second signal lands decides
    whether anything is left for the flush to block on (a write it interrupted may have left the buffer
    empty): each try must keep the save safe, and one of three must take the cut path. With 2>&1 the cut
    path's notice goes to the reader that does not read, and the next signal cuts it too unless it fits in
    what the pipe still takes: there the path shows as a state behind what was delivered."""
    cut = []
    for attempt in range(3):
        state = tmp_path / f"state-{attempt}.json"
        with serving("--vbuckets", "2", "--items", "200000", "--value-size", "10") as server:
            # short lines, buffered: the write the second signal stops leaves some for the flush before the save
            process = subprocess.Popen(command(server, "-f", "{opcode} {vbucket} {by_seqno}", "--state",
                                               str(state), "--save-items", "1000"),
                                       stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT if together else subprocess.PIPE, env=ENV)
            try:
                assert process.stdout is not None
                _wait_full(process.stdout)  # standard output is not read: its pipe is full, the write blocked
                for sig in [signal.SIGTERM, signal.SIGINT, signal.SIGHUP] * 4:
                    if process.poll() is not None:
                        break
                    process.send_signal(sig)
                    time.sleep(0.3)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=10)  # still not read: a write left blocked keeps it from ending
                ended = process.poll() is not None
                out, err = process.communicate(timeout=60)
            finally:
                if process.poll() is None:
                    process.kill()
                process.communicate(timeout=30)
        assert ended, "a write the signals did not cut short kept dcpctl from ending"
        assert process.returncode == ExitCode.OK, err or out[-2000:]
        delivered = template_items(out)
        positions = saved(state)
        for vb, seqno in positions.items():
            assert set(range(1, seqno + 1)) <= {s for v, s in delivered if v == vb}, "counted, never written"
        behind = any(positions.get(vb, 0) < s for vb, s in delivered)
        cut.append(b"standard output was not taking more" in (out if together else err) or (together and behind))
        if cut[-1]:
            break
    assert any(cut), "the flush was never cut short in three tries"


def test_kill_9_repeats_at_most_save_items(tmp_path: Path) -> None:
    """No chance to save at the end: the state saved every 2,000 items bounds what a resume repeats."""
    state = tmp_path / "state.json"
    with serving("--vbuckets", "2", "--items", "200000", "--value-size", "10") as server:
        with streaming(server, state, "--save-items", "2000") as process:
            assert process.stdout is not None
            first = read_lines(process.stdout, 50000)
            process.kill()
            rest, _ = finish(process)
        delivered = whole_items(first + rest)
        again = resume(server, state)
    repeated = Counter(delivered + again)
    assert sorted(repeated) == every(2, 200000), "nothing lost"
    assert max(repeated.values()) <= 2
    assert sum(1 for n in repeated.values() if n == 2) <= 2000  # none when the kill came just after a save



# dcpctl whose fsyncs take 0.5 s: a save's temporary file is there long enough for a kill -9 to find it.
SLOW_FSYNC = """
import os, time
real = os.fsync
def slow(fd):
    time.sleep(0.5)
    real(fd)
os.fsync = slow
from dcpctl.cli import run
run()
"""


def test_temporary_files_a_kill_9_left_are_removed_by_the_next_run(tmp_path: Path) -> None:
    """A kill -9 while the state was saved left its temporary file (.state.json. and 8 characters) for good,
    one more each time. The next run's first save removes those, under the lock every save holds, and keeps
    what is not one: other names, another state file's, a look-alike others may read (mkstemp's are 0600)."""
    state = tmp_path / "state.json"
    kept = {".state.json.backup", ".state.json.abcd12345", ".other.json.abcd1234", ".state.json.shared01"}
    for name in kept:
        (tmp_path / name).write_text("mine")
    (tmp_path / ".state.json.shared01").chmod(0o644)
    planted = tmp_path / ".state.json.old_1234"  # one an older run left
    planted.write_text("{")
    planted.chmod(0o600)

    def temporary() -> set[str]:
        return {p.name for p in tmp_path.iterdir() if len(p.name) == len(".state.json.") + 8
                and p.name.startswith(".state.json.") and p.name not in kept}

    with serving("--vbuckets", "2", "--items", "200000", "--value-size", "10") as server:
        process = subprocess.Popen([sys.executable, "-c", SLOW_FSYNC, *command(server, "-F", "jsonl", "--state",
                                                                               str(state))[3:]],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
        try:
            for _ in range(200):
                if temporary() - {planted.name}:
                    break
                time.sleep(0.02)
            process.kill()
        finally:
            process.communicate(timeout=30)
        left = temporary() - {planted.name}
        assert left, "the kill came between saves"
        assert planted.name not in temporary(), "the run's first save removed the older one"
        resume(server, state)
    assert temporary() == set()
    assert {p.name for p in tmp_path.iterdir()} == kept | {"state.json"}  # and no lock file left
    assert (tmp_path / ".state.json.shared01").read_text() == "mine"


# --- item 5: a mutation whose body is shorter than its seqno -------------------------------------------------
class CuttingProxy:
    """Between dcpctl stream and dcpctl serve, on 127.0.0.1: answers GET_CLUSTER_CONFIG itself with
    KeyEnoent (so the node serves every vbucket and stream stays on the proxy) and sends the ``nth`` item
    (mutation, deletion or expiration) with a 4-byte body: no key, no extras, so no by_seqno. Everything else
    passes as it is."""

    HEADER = struct.Struct(">BBHBBHIIQ")  # magic, opcode, key length, extras length, datatype, vbucket/status,
    # total body length, opaque, cas

    def __init__(self, upstream: int, nth: int) -> None:
        self.upstream, self.nth, self.seen = upstream, nth, 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    @staticmethod
    def _packets(sock: socket.socket) -> Iterator[bytes]:
        buf = b""
        while True:
            while len(buf) >= 24 and len(buf) >= 24 + struct.unpack_from(">I", buf, 8)[0]:
                end = 24 + struct.unpack_from(">I", buf, 8)[0]
                yield buf[:end]
                buf = buf[end:]
            try:
                data = sock.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            buf += data

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            lock = threading.Lock()
            for target in (self._to_server, self._to_client):
                thread = threading.Thread(target=target, args=(client, server, lock), daemon=True)
                thread.start()

    def _to_server(self, client: socket.socket, server: socket.socket, lock: threading.Lock) -> None:
        for packet in self._packets(client):
            magic, opcode, *_, opaque, _cas = self.HEADER.unpack_from(packet)
            if magic == 0x80 and opcode == 0xB5:  # GET_CLUSTER_CONFIG: status 0x0001 KeyEnoent
                with lock:
                    client.sendall(self.HEADER.pack(0x81, 0xB5, 0, 0, 0, 0x0001, 0, opaque, 0))
                continue
            with contextlib.suppress(OSError):
                server.sendall(packet)
        server.close()

    def _to_client(self, client: socket.socket, server: socket.socket, lock: threading.Lock) -> None:
        for packet in self._packets(server):
            magic, opcode, _, _, datatype, vbucket, _, opaque, cas = self.HEADER.unpack_from(packet)
            sent = packet
            if magic == 0x80 and opcode in (0x57, 0x58, 0x59):
                self.seen += 1
                if self.seen == self.nth:
                    sent = self.HEADER.pack(0x80, opcode, 0, 0, datatype, vbucket, 4, opaque, cas) + b"\x00\x00\x27\x10"
            with lock, contextlib.suppress(OSError):
                client.sendall(sent)
        client.close()


def test_a_mutation_cut_before_its_seqno_moves_no_position(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--summary alone counts items from their headers: a body too short for by_seqno is decoded the usual
    way (no seqno), never read past its end into the next header. The cut item is the last (--count), so
    its seqno, if one were made up, would be what the state saves. Both paths save the same positions."""
    monkeypatch.setenv("DCPCTL_PASSWORD", "password")
    finals = []
    for mode in (["--summary"], ["--summary", "-F", "jsonl"]):
        state = tmp_path / f"state{len(finals)}.json"
        with serving("--vbuckets", "1", "--items", "100", "--seed", "2") as server:
            proxy = CuttingProxy(server.port, nth=50)
            try:
                code, err = run("stream", f"127.0.0.1:{proxy.port}", "--timeout", "5", "--count", "50", "--state",
                                str(state), *mode)
            finally:
                proxy.close()
        assert code == ExitCode.OK, err
        assert "│ 0       │ 50    │ 1-49 " in err  # counted; the seqno range ends before it: it has none
        finals.append(json.loads(state.read_text()))
    assert finals[0] == finals[1]
    assert finals[0]["vbuckets"]["0"]["seqno"] == 49


def run(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False, width=200)
    return main(list(args), env), err.getvalue()


# --- item 7: templates never reach attributes ------------------------------------------------------------
def test_templates_cannot_reach_attributes_or_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DCPCTL_PASSWORD", "password")
    with serving("--vbuckets", "1", "--items", "3") as server:
        for template in ("{x.__class__.__getitem__.__globals__[contextlib].os.environ[DCPCTL_PASSWORD]}",
                         "{key.__class__}", "{key:{x.__class__}}", "{failover_log[_x]}", "{key.upper}"):
            out, err = io.StringIO(), io.StringIO()
            env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False,
                              stderr_isatty=False, color=False, width=200)
            code = main(["stream", f"127.0.0.1:{server.port}", "--until", "now", "-f", template], env)
            assert code == ExitCode.USAGE, template
            assert "bad template" in err.getvalue()
            assert "password" not in out.getvalue() + err.getvalue().replace("DCPCTL_PASSWORD", "")
        code, lines = 0, io.StringIO()
        env = Environment(stdout=lines, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                          stderr_isatty=False, color=False, width=200)
        code = main(["stream", f"127.0.0.1:{server.port}", "--until", "now", "-f",
                     "{opcode} {key[0]} {by_seqno:>3}|"], env)
        assert code == ExitCode.OK
        assert lines.getvalue().splitlines() == [
            f"DCP_MUTATION {key[0]} {seqno:>3}|" for key, seqno in (("d", 1), ("d", 2), ("d", 3))]
        lines.seek(0)
        lines.truncate()
        # only messages with every field named are printed: no mutation has a rollback_seqno
        code = main(["stream", f"127.0.0.1:{server.port}", "--until", "now", "-f",
                     "{opcode} {rollback_seqno[0][x]}|"], env)
    assert code == ExitCode.OK
    assert lines.getvalue() == ""

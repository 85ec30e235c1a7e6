"""The commands as a user runs them: formats, round trips, bad input and exit codes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment
from dcpctl.sources.pcap import CaptureError
from dcpctl.sources.pcapchunks import check

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "dcp-session.bin"
SAMPLE_JSONL = ROOT / "samples" / "dcp-session.jsonl"
SEEDS = ROOT.parent / "shared" / "seeds"


class Run:
    def __init__(self, args: list[str], stdin: bytes = b"", tty: bool = False) -> None:
        self.out = io.StringIO()
        self.err = io.StringIO()
        env = Environment(stdout=self.out, stderr=self.err, stdin=io.BytesIO(stdin), stdout_isatty=tty,
                          stderr_isatty=False, color=False, width=160)
        self.code = main(args, env)

    @property
    def records(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.out.getvalue().splitlines()]


def test_sample_matches_its_jsonl_source() -> None:
    run = Run(["encode", str(SAMPLE_JSONL)])
    assert run.code == ExitCode.OK
    assert bytes.fromhex("".join(run.out.getvalue().split())) == SAMPLE.read_bytes()


def test_jsonl_then_encode_gives_the_bytes_back() -> None:
    decoded = Run(["hexdump", "-F", "jsonl", "--collections", str(SAMPLE)])
    assert decoded.code == ExitCode.OK
    records = decoded.records
    assert [r["opcode"] for r in records][:3] == ["HELLO", "HELLO", "SELECT_BUCKET"]
    rollback = next(r for r in records if r.get("status") == "Rollback")
    assert rollback["rollback_seqno"] == 200
    mutation = next(r for r in records if r["opcode"] == "DCP_MUTATION")
    assert mutation["collection_id"] == 8
    assert mutation["key"] == "airline_10"
    encoded = Run(["encode"], stdin=decoded.out.getvalue().encode())
    assert encoded.code == ExitCode.OK
    assert bytes.fromhex("".join(encoded.out.getvalue().split())) == SAMPLE.read_bytes()


def test_base64_jsonl_then_encode_gives_the_bytes_back() -> None:
    """--base64 records are read as base64: the text was written as the bytes (a key's collection prefix)."""
    decoded = Run(["hexdump", "--base64", "-F", "jsonl", str(SAMPLE)])
    assert decoded.code == ExitCode.OK
    assert any(r.get("key_encoding") == "base64" for r in decoded.records)
    encoded = Run(["encode"], stdin=decoded.out.getvalue().encode())
    assert (encoded.code, encoded.err.getvalue()) == (ExitCode.OK, "")
    assert bytes.fromhex("".join(encoded.out.getvalue().split())) == SAMPLE.read_bytes()


def test_an_unknown_encoding_is_refused_not_written_as_text() -> None:
    record = {"magic": "ClientRequest", "opcode": "DCP_NOOP", "key": "//4=", "key_encoding": "base85"}
    encoded = Run(["encode"], stdin=json.dumps(record).encode())
    assert encoded.code == ExitCode.INPUT
    assert encoded.out.getvalue() == ""
    assert encoded.err.getvalue() == \
        "dcpctl: error: record 1: key_encoding 'base85' is not one of hex, base64\n"


def test_json_array_output_is_one_document() -> None:
    run = Run(["hexdump", "-F", "json", str(SAMPLE)])
    data = json.loads(run.out.getvalue())
    assert len(data) == 22
    assert all(isinstance(r["diagnostics"], list) for r in data)


def test_annotated_hexdump_names_fields_with_offsets() -> None:
    run = Run(["hexdump", str(SAMPLE)])
    text = run.out.getvalue()
    assert "Opcode" in text
    assert "(1)" in text
    assert "0x53 (83 DCP_STREAM_REQ)" in text
    assert "rollback_seqno" in text


def test_pretty_is_default_only_on_a_terminal() -> None:
    run = Run(["hexdump", "-F", "pretty", str(SAMPLE)])
    assert "DCP_STREAM_REQ status Rollback" in run.out.getvalue()


def test_plain_hex_from_stdin() -> None:
    noop = "80 5c 0000 00 00 0000 00000000 00989681 0000000000000000"
    run = Run(["hexdump", "-F", "jsonl"], stdin=noop.encode())
    assert run.code == ExitCode.OK
    assert run.records[0]["opcode"] == "DCP_NOOP"
    assert run.records[0]["opaque"] == 10000001


def test_garbage_is_reported_and_strict_fails() -> None:
    data = b"\x00\x01\x02" + SAMPLE.read_bytes()
    run = Run(["hexdump", "-F", "jsonl"], stdin=data)
    assert run.code == ExitCode.OK
    assert len(run.records) == 22
    assert "skipped_bytes: 3 bytes at offset 0" in run.err.getvalue()
    strict = Run(["hexdump", "-F", "jsonl", "--strict"], stdin=data)
    assert strict.code == ExitCode.DIAGNOSTICS


def test_truncated_last_packet_is_decoded_with_a_diagnostic() -> None:
    data = SAMPLE.read_bytes()[:-10]
    run = Run(["hexdump", "-F", "jsonl"], stdin=data)
    last = run.records[-1]
    assert last["opcode"] == "DCP_STREAM_END"
    assert "truncated" in [d["name"] for d in last["diagnostics"]]


def test_secrets_are_redacted_unless_asked() -> None:
    auth = {"magic": "ClientRequest", "opcode": "SASL_AUTH", "opaque": 9, "key": "PLAIN",
            "value": "\u0000Administrator\u0000hunter2"}
    wire = Run(["encode"], stdin=json.dumps(auth).encode()).out.getvalue()
    for fmt in ("jsonl", "pretty", "hexdump"):
        run = Run(["hexdump", "-F", fmt], stdin=wire.encode())
        assert "hunter2" not in run.out.getvalue(), fmt
        assert "68756e74657232" not in run.out.getvalue(), fmt
    shown = Run(["hexdump", "-F", "jsonl", "--show-secrets"], stdin=wire.encode())
    assert b"hunter2" in bytes.fromhex(str(shown.records[0]["value"]))


@pytest.mark.parametrize("args", [["hexdump", "/nonexistent/file"], ["encode", "/nonexistent/file"]])
def test_missing_file_is_one_line_and_exit_3(args: list[str]) -> None:
    run = Run(args)
    assert run.code == ExitCode.INPUT
    assert run.err.getvalue().count("\n") == 1
    assert "no such file" in run.err.getvalue()


def test_bad_hex_is_one_line_and_exit_3() -> None:
    run = Run(["hexdump"], stdin=b"80 5c zz\n")
    assert run.code == ExitCode.INPUT
    assert run.err.getvalue().startswith("dcpctl: error:")
    assert run.err.getvalue().count("\n") == 1


def test_encode_reports_the_bad_record() -> None:
    run = Run(["encode"], stdin=b'{"magic":"ClientRequest","opcode":"DCP_MUTATION","by_seqno":1}\n')
    assert run.code == ExitCode.INPUT
    assert "record 1" in run.err.getvalue()
    assert "needs" in run.err.getvalue()


def test_unknown_option_is_usage_error() -> None:
    assert Run(["hexdump", "--no-such-option"]).code == ExitCode.USAGE


def test_fields_lists_declared_fields() -> None:
    run = Run(["fields", "-F", "jsonl"])
    names = {r["name"] for r in run.records}
    assert {"by_seqno", "snap_start_seqno", "rollback_seqno", "failover_log", "opcode", "status"} <= names
    diags = Run(["fields", "--diagnostics", "-F", "jsonl"])
    assert "illegal_extras_length" in {r["name"] for r in diags.records}


def test_fields_is_a_table_on_a_terminal_and_json_lines_when_piped() -> None:
    """As every command chooses (it was a box-drawn table in a pipe); a format it has not is named like theirs."""
    piped = Run(["fields"])
    assert piped.code == ExitCode.OK
    assert piped.records == Run(["fields", "-F", "jsonl"]).records
    assert "┃ name" in Run(["fields"], tty=True).out.getvalue()
    bad = Run(["fields", "-F", "xml"])
    assert bad.code == ExitCode.USAGE
    assert bad.err.getvalue() == "dcpctl: error: --format: 'xml' is not one of 'table', 'tsv', 'jsonl'\n"


def test_the_fields_table_shows_the_types_jsonl_gives() -> None:
    """The table took list[int]'s [int] for a rich style tag: 'list' was all it showed."""
    types = {r["name"]: r["type"] for r in Run(["fields", "-F", "jsonl"]).records}
    assert types["frames"] == "list[int]"
    table = Run(["fields", "-F", "table"], tty=True).out.getvalue()
    shown = {cells[1].strip(): cells[2].strip() for line in table.splitlines()
             if len(cells := line.split("│")) > 3 and cells[1].strip() in types}
    assert shown == {name: kind for name, kind in types.items() if name in shown}
    assert shown["frames"] == "list[int]"


@pytest.mark.skipif(not (SEEDS / "000_b8f71fd18ed91174.txt").exists(), reason="shared seeds absent")
def test_document_diagrams_decode_one_packet_each() -> None:
    run = Run(["hexdump", "-F", "jsonl", str(SEEDS / "000_b8f71fd18ed91174.txt")])
    assert run.code == ExitCode.OK
    assert [r["opcode"] for r in run.records] == ["DCP_STREAM_REQ"] * 4
    assert run.records[1]["status"] == "Rollback"


def test_closed_pipe_stops_quietly(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(SAMPLE.read_bytes() * 5000)
    script = (f"{sys.executable} -m dcpctl hexdump -F jsonl {big} 2>{tmp_path / 'err'} | head -1 >/dev/null;"
              " echo ${PIPESTATUS[0]}")
    proc = subprocess.run(["bash", "-c", script], capture_output=True, timeout=120, check=True)
    assert proc.stdout.decode().strip() == "0"
    assert (tmp_path / "err").read_text() == ""


def test_a_ctrl_c_in_a_finalizer_is_not_reported() -> None:
    """dcpctl's unraisable hook: a KeyboardInterrupt raised in a finalizer (py4j's, when a Ctrl-C lands as
    analyze ends) prints nothing; any other exception there is reported as Python reports it."""
    script = """if True:
        import sys
        from dcpctl.cli import quiet_interrupts
        sys.unraisablehook = quiet_interrupts
        class Interrupted:
            def __del__(self):
                raise KeyboardInterrupt
        class Broken:
            def __del__(self):
                raise ValueError("a real bug")
        Interrupted(); Broken()
        print("went on")
    """
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout == "went on\n"
    assert "KeyboardInterrupt" not in done.stderr
    assert "ValueError: a real bug" in done.stderr


# what a command's start must not import: the other commands' heavy parts, and the flatbuffers runtime
# (numpy with it) until a FlatBuffers value is met (none in these samples)
OTHERS_ONLY = ("dcpctl.commands.serve", "dcpctl.commands.analyze", "dcpctl.producer", "dcpctl.pipeline",
               "pyspark", "pyarrow", "flatbuffers", "numpy")


@pytest.mark.parametrize("args", [["decode", str(ROOT / "samples" / "dcp-session.pcap"), "-F", "jsonl"],
                                  ["hexdump", str(SAMPLE)], ["encode", str(SAMPLE_JSONL)]])
def test_a_command_imports_only_what_it_runs(args: list[str]) -> None:
    # a fresh interpreter: this one has imported everything by now
    code = ("import sys\nfrom dcpctl.cli import main\nmain(sys.argv[1:])\n"
            "sys.stderr.write(' '.join(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    loaded = done.stderr.split()
    assert f"dcpctl.commands.{args[0]}" in loaded
    assert [m for m in loaded if m.startswith(OTHERS_ONLY)] == []



@pytest.mark.parametrize("command", [["decode", "-j", "1"], ["decode", "-j", "2"], ["rollback", "explain"],
                                     ["redact", "-o", "copy.pcap", "--salt-file", "salt"]])
def test_an_empty_capture_file_is_said_to_be_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   command: list[str]) -> None:
    """A file of no bytes is named so, in plain words, by every command that reads captures."""
    monkeypatch.chdir(tmp_path)
    Path("salt").write_text("00112233445566778899aabbccddeeff\n")
    Path("empty.pcap").write_bytes(b"")
    run = Run([*command, "empty.pcap"])
    assert run.code == ExitCode.INPUT
    assert run.err.getvalue() == "dcpctl: error: empty.pcap: an empty file, not a capture\n"
    assert not Path("copy.pcap").exists()


def test_analyze_says_a_capture_file_is_empty(tmp_path: Path) -> None:
    """analyze looks at each file's header before Spark starts: the same words."""
    (tmp_path / "empty.pcap").write_bytes(b"")
    with pytest.raises(CaptureError, match=r"^an empty file, not a capture$"):
        check(str(tmp_path / "empty.pcap"))


@pytest.mark.parametrize(("args", "says"), [
    (["--password-env", "SECRETPW", "--user", "bob", "--bucket", "b1"],
     "bucket 'b1', 4 vbuckets, 0 items; user 'bob', the password from $SECRETPW, loopback only."),
    (["--password", "hunter2", "--user", "bob", "--bucket", "b1"],
     "bucket 'b1', 4 vbuckets, 0 items; user 'bob', the password given with --password, loopback only."),
    ([], "bucket 'default', 4 vbuckets, 0 items; user 'Administrator', password 'password' (the default), "
     "loopback only."),
])
def test_the_serve_banner_names_what_is_in_effect_and_no_real_password(args: list[str], says: str) -> None:
    """The banner said "bucket 'default', user Administrator, password 'password'" whatever was given."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SECRETPW": "hunter2"}
    server = subprocess.Popen([sys.executable, "-m", "dcpctl", "serve", "--host", "127.0.0.1", "--port", "0",
                               "--vbuckets", "4", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env)
    try:
        assert server.stdout is not None
        lines = [server.stdout.readline(), server.stdout.readline()]
    finally:
        server.terminate()
        server.communicate(timeout=10)
    assert lines[0].startswith("dcpctl serve: node 0 listening on 127.0.0.1:")
    assert says in lines[1]
    assert "hunter2" not in "".join(lines)


def test_a_file_named_twice_is_read_once_and_said(tmp_path: Path) -> None:
    """The same capture under two names (a name repeated, a glob overlapping it, a link) would repeat every
    message as a second connection: it is read once, and each name left out is said."""
    capture = ROOT / "samples" / "dcp-session.pcap"
    link = tmp_path / "link.pcap"
    link.symlink_to(capture)
    once = Run(["decode", "-F", "jsonl", str(capture)])
    run = Run(["decode", "-F", "jsonl", str(capture), str(ROOT / "samples" / "*.pcap"), str(link)])
    assert run.code == ExitCode.OK
    assert run.out.getvalue() == once.out.getvalue()
    assert run.err.getvalue().splitlines() == [
        f"dcpctl: {capture}: named twice, read once",
        f"dcpctl: {link}: the same file as {capture}, read once"]
    copy = tmp_path / "copy.pcap"  # equal bytes in another file: two files, read as given
    copy.write_bytes(capture.read_bytes())
    both = Run(["decode", "-F", "jsonl", str(capture), str(copy)])
    assert len(both.records) == 2 * len(once.records)
    assert both.err.getvalue() == ""


@pytest.mark.parametrize("command", [["decode", "-F", "jsonl"], ["decode", "-F", "jsonl", "--jobs", "1"],
                                     ["rollback", "explain"], ["redact", "-o", "OUT"], ["analyze", "--out", "OUT"]])
def test_every_file_that_cannot_be_read_is_named_in_the_one_line(command: list[str], tmp_path: Path) -> None:
    """Three bad files among good ones: the one error line names all three, with why, so that one run tells
    every file to mend (it named the first alone, and each run after a fix found the next)."""
    empty, text, missing = tmp_path / "empty.pcap", tmp_path / "notes.pcap", tmp_path / "gone.pcap"
    empty.write_bytes(b"")
    text.write_text("not a capture\n")
    args = [str(tmp_path / "out") if arg == "OUT" else arg for arg in command]
    run = Run([*args, str(text), str(ROOT / "samples" / "dcp-session.pcap"), str(missing), str(empty)])
    assert run.code == ExitCode.INPUT, run.err.getvalue()
    err = run.err.getvalue()
    assert err.count("\n") == 1, err
    assert err.startswith("dcpctl: error: 3 files cannot be read: "), err
    for path, why in ((text, "not a pcap or pcapng capture"), (missing, "no such file"), (empty, "an empty file")):
        assert f"{path}: {why}" in err, err


def _document_operations(tmp_path: Path) -> Path:
    """An SDK's connection: HELLO (no collections), a GET of doc2 on vbucket 5 that finds nothing, a SET of
    other on vbucket 6, an INCREMENT that must not create its counter; each answered."""
    from capturekit import write_capture  # noqa: PLC0415

    from dcpctl.protocol.encode import encode  # noqa: PLC0415

    def exchange(opcode: str, opaque: int, status: str, **fields: object) -> list[tuple[bool, bytes]]:
        return [(True, encode({"magic": "ClientRequest", "opcode": opcode, "opaque": opaque, **fields},
                              fix_lengths=True)),
                (False, encode({"magic": "ClientResponse", "opcode": opcode, "opaque": opaque, "status": status},
                               fix_lengths=True))]

    packets = [*exchange("HELLO", 1, "Success", key="sdk"),
               *exchange("GET", 2, "KeyEnoent", vbucket=5, key="doc2"),
               *exchange("SET", 3, "Success", vbucket=6, key="other", value="1", flags=0, expiration=0),
               *exchange("INCREMENT", 4, "KeyEnoent", vbucket=6, key="counter", delta=1, initial=0,
                         expiration=0xFFFFFFFF)]
    path = tmp_path / "sdk.pcap"
    path.write_bytes(write_capture(packets))
    return path


@pytest.mark.parametrize("selection", [["--vbucket", "5"], ["--key", "doc2"], ["--key", "/^doc/"]])
def test_a_response_is_kept_with_its_request_by_vbucket_and_key(selection: list[str], tmp_path: Path) -> None:
    """A response's header names neither vbucket nor key (its vbucket field is its status): --vbucket and
    --key dropped every answer to a document operation, and with it the status an SDK got."""
    run = Run(["decode", "-F", "jsonl", *selection, str(_document_operations(tmp_path))])
    assert run.code == ExitCode.OK, run.err.getvalue()
    assert [(r["opcode"], r.get("status")) for r in run.records] == [("GET", None), ("GET", "KeyEnoent")]


def test_an_increment_that_must_not_create_says_so_not_a_date(tmp_path: Path) -> None:
    run = Run(["decode", "-F", "pretty", "--opcode", "INCREMENT", str(_document_operations(tmp_path))])
    assert "expiration=4294967295 (do not create: fails if missing)" in run.out.getvalue()
    assert "2106" not in run.out.getvalue()


def test_a_stream_on_another_connection_does_not_push_a_request_out(tmp_path: Path) -> None:
    """Requests wait for their response in a bounded table: a DCP stream's items on another connection, which
    no one answers, filled it between an SDK's GET and its answer, and the answer was dropped by --vbucket."""
    from dcpctl.protocol.encode import encode  # noqa: PLC0415
    from dcpctl.sources.pcapwriter import PcapWriter, TcpConversation  # noqa: PLC0415

    def packet(**record: object) -> bytes:
        return encode(record, fix_lengths=True)

    out = io.BytesIO()
    writer = PcapWriter(out)
    sdk = TcpConversation(writer, ("127.0.0.1", 50001), ("127.0.0.1", 11210))
    dcp = TcpConversation(writer, ("127.0.0.1", 50002), ("127.0.0.1", 11210))
    for conversation in (sdk, dcp):
        conversation.handshake()
    sdk.send(True, packet(magic="ClientRequest", opcode="GET", opaque=2, vbucket=5, key="doc2"))
    items = b"".join(packet(magic="ClientRequest", opcode="DCP_MUTATION", opaque=9, vbucket=7, key=f"k{n}",
                            value="1", by_seqno=n + 1, rev_seqno=1, flags=0, expiration=0, lock_time=0, nmeta=0,
                            nru=0) for n in range(5000))
    dcp.send(False, items)
    sdk.send(False, packet(magic="ClientResponse", opcode="GET", opaque=2, status="KeyEnoent"))
    path = tmp_path / "mixed.pcap"
    path.write_bytes(out.getvalue())
    run = Run(["decode", "-F", "jsonl", "--vbucket", "5", str(path)])
    assert [(r["opcode"], r.get("status")) for r in run.records] == [("GET", None), ("GET", "KeyEnoent")]
    # the summary pairs them through the same table: the answer counts in its request's row
    table = Run(["decode", "--summary", str(path)]).out.getvalue()
    cells = [[cell.strip() for cell in line.split("│")[1:4]]
             for line in table.splitlines() if "127.0.0.1:50001" in line]
    assert cells == [["127.0.0.1:50001 > 127.0.0.1:11210", "5", "2"]], table

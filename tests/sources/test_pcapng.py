"""pcapng files whose interfaces have different link types (libpcap refuses them; tshark reads them): read by
dcpctl's own reader from where libpcap stops, and checked against tshark frame by frame."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pcapy
import pytest
from capturekit import frames_in, session_packets, write_capture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from peakkit import run_with_peak
from servekit import peer
from test_capture import decode

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment
from dcpctl.sources.pcap import frame_times, in_time_order
from dcpctl.sources.pcapng import MAX_BLOCK_BYTES, PcapngReader
from dcpctl.sources.pcapwriter import LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_NULL, LINKTYPE_RAW

LINKTYPES = (LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL, LINKTYPE_NULL)


def facts(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in ("ts", "frames")} for r in records]


def session(tmp_path: Path, linktype: int, port: int) -> Path:
    """The sample session on one link type, one message a frame, its client on ``port``."""
    path = tmp_path / f"session-{linktype}.pcap"
    path.write_bytes(write_capture(session_packets(), segment_size=65535, linktype=linktype,
                                   client=("127.0.0.1", port)))
    return path


def merged(tmp_path: Path, name: str = "mixed.pcapng") -> tuple[Path, list[Path]]:
    """The session on each link type, from its own client port, merged by mergecap into one pcapng file of
    four interfaces (as Wireshark writes a capture on several interfaces)."""
    mergecap = shutil.which("mergecap")
    assert mergecap is not None, "mergecap (from tshark's packages) is missing: .ci/run installs it"
    parts = [session(tmp_path, linktype, 50000 + n) for n, linktype in enumerate(LINKTYPES)]
    path = tmp_path / name
    subprocess.run([mergecap, "-w", str(path), *map(str, parts)], check=True, timeout=60)
    return path, parts


def tshark_rows(path: Path, *fields: str) -> list[list[str]]:
    done = subprocess.run([peer("tshark"), "-r", str(path), "-Y", "couchbase", "-T", "fields", "-E", "separator=\t",
                           *[x for f in fields for x in ("-e", f)]], capture_output=True, text=True, check=True,
                          timeout=120)
    return [line.split("\t") for line in done.stdout.splitlines()]


# --- a test-side pcapng writer, for the blocks mergecap does not write ------------------------------------------
def block(kind: int, body: bytes, endian: str = "<") -> bytes:
    body += bytes(-len(body) % 4)
    return struct.pack(endian + "II", kind, 12 + len(body)) + body + struct.pack(endian + "I", 12 + len(body))


def section(endian: str = "<") -> bytes:
    return block(0x0A0D0D0A, struct.pack(endian + "IHHq", 0x1A2B3C4D, 1, 0, -1), endian)


def interface(linktype: int, snaplen: int = 0, tsresol: int | None = None, tsoffset: int | None = None,
              endian: str = "<") -> bytes:
    options = b""
    if tsresol is not None:
        options += struct.pack(endian + "HHB3x", 9, 1, tsresol)
    if tsoffset is not None:
        options += struct.pack(endian + "HHq", 14, 8, tsoffset)
    return block(1, struct.pack(endian + "HHI", linktype, 0, snaplen) + options + (b"\0" * 4 if options else b""),
                 endian)


def enhanced(number: int, units: int, frame: bytes, wire: int | None = None, endian: str = "<") -> bytes:
    return block(6, struct.pack(endian + "IIIII", number, units >> 32, units & 0xFFFFFFFF, len(frame),
                                len(frame) if wire is None else wire) + frame, endian)


def two_interfaces(tmp_path: Path, *, late: bool = False, nanos: bool = False) -> tuple[bytes, list[dict[str, Any]]]:
    """The session's frames on Ethernet, then on raw IP (another client port), in one section; ``late``: the
    raw IP interface described after the Ethernet frames, as dumpcap does for an interface that comes up
    during a capture; ``nanos``: interfaces of nanosecond times, each frame's 7 ns past its microsecond. With
    what decode gives for the two sessions read apart."""
    ethernet, raw = session(tmp_path, LINKTYPE_ETHERNET, 50001), session(tmp_path, LINKTYPE_RAW, 50002)
    scale, past, tsresol = (1000, 7, 9) if nanos else (1, 0, None)
    one = b"".join(enhanced(0, round(ts * 1e6) * scale + past, data) for ts, data in frames_in(ethernet))
    two = b"".join(enhanced(1, (round(ts * 1e6) + 1000) * scale + past, data) for ts, data in frames_in(raw))
    head = section() + interface(LINKTYPE_ETHERNET, tsresol=tsresol)
    other = interface(LINKTYPE_RAW, tsresol=tsresol)
    data = head + one + other + two if late else head + other + one + two
    return data, facts(decode(ethernet)[1]) + facts(decode(raw)[1])


# --- the tests -------------------------------------------------------------------------------------------------
@pytest.mark.peer
def test_interfaces_of_four_link_types_decode_frame_by_frame_as_tshark_reads_them(tmp_path: Path) -> None:
    """Each connection decodes as its own capture did, and every message is in the frame, at the time and
    with the opcode and seqno tshark gives; with two processes and gzip-compressed too."""
    path, parts = merged(tmp_path)
    code, records, err = decode(path)
    assert code == ExitCode.OK, err
    assert err == ""
    for part in parts:
        alone = facts(decode(part)[1])
        assert [r for r in facts(records) if r["connection"] == alone[0]["connection"]] == alone
    rows = tshark_rows(path, "frame.number", "frame.time_epoch", "couchbase.opcode", "couchbase.extras.by_seqno")
    assert len(rows) == len(records) == 4 * len(decode(parts[0])[1])
    items = 0
    for (number, epoch, opcode, seqno), record in zip(rows, records, strict=True):
        assert record["frames"] == [int(number)]
        assert f"{record['ts']:.6f}" == epoch[:epoch.index(".") + 7]
        assert int(opcode, 16) == main_opcode(record)
        if "by_seqno" in record:
            assert int(seqno) == record["by_seqno"]
            items += 1
    assert items >= 4 * 3
    assert decode(path, "--jobs", "2")[1] == records
    packed = tmp_path / "mixed.pcapng.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    assert decode(packed) == (ExitCode.OK, records, "")


def main_opcode(record: dict[str, Any]) -> int:
    from dcpctl.protocol.constants import OPCODES  # noqa: PLC0415

    return OPCODES.code(record["opcode"])


@pytest.mark.parametrize("late", [False, True])
def test_an_interface_described_before_or_after_frames_of_another(tmp_path: Path, late: bool) -> None:
    """libpcap stops at the second interface wherever it is: before any frame, or after the first
    interface's frames, which it has given by then. Either way every frame is decoded once."""
    data, apart = two_interfaces(tmp_path, late=late)
    path = tmp_path / "two.pcapng"
    path.write_bytes(data)
    code, records, err = decode(path)
    assert (code, err) == (ExitCode.OK, "")
    assert facts(records) == apart
    assert frame_times(str(path)).count == 2 * len(frames_in(tmp_path / "session-1.pcap"))


def test_frame_times_and_time_order_read_such_a_file_whole(tmp_path: Path) -> None:
    """analyze's planner counts its frames as tshark does, and among several files it is placed by its first
    frame's time (libpcap cannot read that frame: it stops at the second interface, before any)."""
    path, parts = merged(tmp_path)
    assert frame_times(str(path)).count == len(tshark_frames(path))
    later = tmp_path / "later.pcapng"
    later.write_bytes(section() + interface(LINKTYPE_ETHERNET) +
                      b"".join(enhanced(0, round((ts + 100) * 1e6), data) for ts, data in frames_in(parts[0])))
    assert in_time_order([str(later), str(path)]) == [str(path), str(later)]


def tshark_frames(path: Path) -> list[str]:
    done = subprocess.run([peer("tshark"), "-r", str(path), "-T", "fields", "-e", "frame.number"],
                          capture_output=True, text=True, check=True, timeout=120)
    return done.stdout.split()


@pytest.mark.peer
@pytest.mark.parametrize(("tsresol", "tsoffset", "endian"), [
    (None, None, "<"), (9, None, "<"), (3, None, ">"), (0x80 | 20, None, "<"), (9, 86_400, ">")])
def test_timestamps_in_every_resolution_as_tshark_reads_them(tmp_path: Path, tsresol: int | None,
                                                             tsoffset: int | None, endian: str) -> None:
    """if_tsresol (powers of ten and of two), if_tsoffset and big-endian sections: each frame's time is
    tshark's, to the microsecond (truncated, as libpcap gives times)."""
    divisor = 10 ** 6 if tsresol is None else 2 ** (tsresol & 0x7F) if tsresol & 0x80 else 10 ** tsresol
    times = [1_700_000_000 * divisor + n * (divisor // 7 + 12345) for n in range(20)]
    data = section(endian) + interface(LINKTYPE_ETHERNET, tsresol=tsresol, tsoffset=tsoffset, endian=endian) + \
        interface(LINKTYPE_RAW, endian=endian) + \
        b"".join(enhanced(0, units, bytes(60), endian=endian) for units in times)
    path = tmp_path / "times.pcapng"
    path.write_bytes(data)
    done = subprocess.run([peer("tshark"), "-r", str(path), "-T", "fields", "-e", "frame.time_epoch"],
                          capture_output=True, text=True, check=True, timeout=60)
    expected = [(int(t.split(".")[0]), int(t.split(".")[1][:6].ljust(6, "0"))) for t in done.stdout.split()]
    reader = PcapngReader(path.open("rb"))
    read = []
    while (header := reader.next()[0]) is not None:
        read.append(header.getts())
    assert read == expected
    assert len(read) == 20


def test_simple_and_obsolete_packet_blocks_are_frames_too(tmp_path: Path) -> None:
    frame = bytes(range(60))
    data = section() + interface(LINKTYPE_ETHERNET, snaplen=50) + interface(LINKTYPE_RAW) + \
        block(3, struct.pack("<I", 60) + frame) + \
        block(2, struct.pack("<HHIIII", 1, 0, 0, 5_000_000, 40, 60) + frame[:40]) + \
        block(5, bytes(16)) + enhanced(1, 7_000_000, frame)
    reader = PcapngReader(io.BytesIO(data))
    got = []
    while True:
        header, taken = reader.next()
        if header is None:
            break
        got.append((header.linktype, header.getts(), header.getlen(), taken))
    assert got == [(LINKTYPE_ETHERNET, (0, 0), 60, frame[:50]), (LINKTYPE_RAW, (5, 0), 60, frame[:40]),
                   (LINKTYPE_RAW, (7, 0), 60, frame)]


GOOD = section() + interface(LINKTYPE_ETHERNET) + interface(LINKTYPE_RAW)


@pytest.mark.parametrize(("tail", "says"), [
    (struct.pack("<II", 6, 0xFFFFFFF0), f"more than any capture's ({MAX_BLOCK_BYTES} bytes)"),
    (struct.pack("<II", 6, 30) + bytes(22), "not a whole number of 32-bit words"),
    (block(6, bytes(20))[:-4] + struct.pack("<I", 99), "whose trailing length differs"),
    (enhanced(7, 0, bytes(40)), "a packet of interface 7, which no block of its section describes"),
    (block(6, struct.pack("<IIIII", 0, 0, 0, 500, 500) + bytes(40)), "500 captured bytes overrun the block"),
    (enhanced(0, 0, bytes(40))[:30], "truncated pcapng file: a block cut short"),
    (b"\x06\x00\x00", "a block header cut short"),
    (block(0x0A0D0D0A, bytes(20)), "no byte-order magic"),
    (block(1, bytes(4)), "too short for its fields"),
])
def test_a_damaged_block_ends_reading_with_a_notice(tmp_path: Path, tail: bytes, says: str) -> None:
    """What comes before is decoded; the damage, at the file's end, is one notice saying what it is; exit 0
    (4 with --strict)."""
    ethernet = session(tmp_path, LINKTYPE_ETHERNET, 50001)
    before = b"".join(enhanced(0, round(ts * 1e6), data) for ts, data in frames_in(ethernet))
    path = tmp_path / "damaged.pcapng"
    path.write_bytes(GOOD + before + tail)
    code, records, err = decode(path)
    assert code == ExitCode.OK
    assert facts(records) == facts(decode(ethernet)[1])
    assert err.count("\n") == 1
    assert "truncated_file" in err or "capture_gap" in err, err
    assert says in err
    assert decode(path, "--strict")[0] == ExitCode.DIAGNOSTICS


def test_a_hostile_block_length_is_never_read_into_memory(tmp_path: Path) -> None:
    """A block that says it is 4 GB long, in a file of a few bytes: refused from its header alone."""
    script = ("import sys, pcapy\n"
              "from dcpctl.sources.pcapng import PcapngReader\n"
              "try:\n    PcapngReader(open(sys.argv[1], 'rb')).next()\nexcept pcapy.PcapError:\n    sys.exit(0)\n"
              "sys.exit(1)")
    path = tmp_path / "huge.pcapng"
    path.write_bytes(GOOD + struct.pack("<II", 6, 0xFFFFFFFC) + bytes(100))
    code, err, peak_mb = run_with_peak([sys.executable, "-c", script, str(path)])
    assert code == 0, err
    assert peak_mb < 100


@pytest.mark.parametrize("first", [False, True])
def test_an_interface_of_an_unsupported_link_type_is_said_once(tmp_path: Path, first: bool) -> None:
    """Its frames are skipped, said once, whether it is described before the Ethernet interface or after."""
    ethernet = session(tmp_path, LINKTYPE_ETHERNET, 50001)
    usb, eth = (0, 1) if first else (1, 0)
    frames = b"".join(enhanced(eth, round(ts * 1e6), data) + enhanced(usb, round(ts * 1e6), bytes(30))
                      for ts, data in frames_in(ethernet))
    described = [interface(189), interface(LINKTYPE_ETHERNET)] if first else \
        [interface(LINKTYPE_ETHERNET), interface(189)]
    path = tmp_path / "usb.pcapng"
    path.write_bytes(section() + b"".join(described) + frames)
    code, records, err = decode(path)
    assert code == ExitCode.OK
    assert facts(records) == facts(decode(ethernet)[1])
    assert err.count("\n") == 1
    assert "link type 189 is not supported: the frames of its interfaces are skipped" in err


def test_from_standard_input_such_a_file_is_read_up_to_the_other_link_type(tmp_path: Path) -> None:
    """Standard input cannot be read again: the notice says to give the file by name."""
    data, _ = two_interfaces(tmp_path, late=True)
    done = subprocess.run([sys.executable, "-m", "dcpctl", "decode", "-F", "jsonl", "-"], input=data,
                          capture_output=True, timeout=120, check=False)
    assert done.returncode == ExitCode.OK
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert facts(records) == facts(decode(tmp_path / "session-1.pcap")[1])  # the first interface's frames
    assert "such a pcapng file is read by name, not from standard input" in done.stderr.decode()


def redact(*args: str, salt: Path) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False)
    salt.write_text("a salt")
    return main(["redact", *args, "--salt-file", str(salt)], env), err.getvalue()


def typed_frames(path: Path) -> list[tuple[int, tuple[int, int], int, bytes]]:
    reader, frames = PcapngReader(path.open("rb")), []
    while True:
        header, data = reader.next()
        if header is None:
            return frames
        frames.append((header.linktype, header.getts(), header.getlen(), data))


@pytest.mark.parametrize("options", [[], ["--map-addresses"], ["--values", "drop"]])
def test_redact_writes_a_pcapng_file_of_the_same_link_types(tmp_path: Path, options: list[str]) -> None:
    """Each frame keeps its link type and time; each connection is redacted as its own capture is, with the
    same salt; no key or value of the input is left; tshark reads the copy without a complaint."""
    path, parts = merged(tmp_path)
    copy = tmp_path / "copy.pcapng"
    code, err = redact(str(path), "-o", str(copy), *options, salt=tmp_path / "salt")
    assert code == ExitCode.OK, err
    assert copy.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"
    assert [f[:2] for f in typed_frames(copy)] == [f[:2] for f in typed_frames(path)]
    records = facts(decode(copy, "--port", "11210")[1])
    for part in parts:
        alone = tmp_path / f"{part.stem}-copy.pcap"
        assert redact(str(part), "-o", str(alone), *options, salt=tmp_path / "salt")[0] == ExitCode.OK
        expected = facts(decode(alone)[1])
        connection = expected[0]["connection"]
        mine = [r for r in records if r["connection"] == connection]
        assert mine == expected
    for secret in (b"airline_10", b"40-Mile Air", b"United States"):
        assert secret in path.read_bytes()
        assert secret not in copy.read_bytes()
    done = subprocess.run([peer("tshark"), "-r", str(copy), "-z", "expert,warn", "-q"], capture_output=True,
                          text=True, check=True, timeout=60)
    assert "Malformed" not in done.stdout
    assert done.stderr.strip() in ("", 'Running as user "root" and group "root". This could be dangerous.')


def test_redact_of_a_ring_of_such_files_is_the_redaction_of_the_whole(tmp_path: Path) -> None:
    """editcap cuts it as Wireshark's ring buffer does, every file describing the interfaces: the copies,
    joined, are the whole file's copy, frame for frame, and decode as it does."""
    path, _ = merged(tmp_path)
    editcap = shutil.which("editcap")
    assert editcap is not None, "editcap (from tshark's packages) is missing: .ci/run installs it"
    (tmp_path / "ring").mkdir()
    subprocess.run([editcap, "-c", "15", str(path), str(tmp_path / "ring" / "r.pcapng")], check=True, timeout=60)
    files = sorted((tmp_path / "ring").iterdir())
    assert len(files) > 3
    (tmp_path / "copies").mkdir()
    code, err = redact(*map(str, files), "-o", str(tmp_path / "copies"), salt=tmp_path / "salt")
    assert code == ExitCode.OK, err
    whole = tmp_path / "whole.pcapng"
    assert redact(str(path), "-o", str(whole), salt=tmp_path / "salt")[0] == ExitCode.OK
    copies = [tmp_path / "copies" / f.name for f in files]
    assert [f for copy in copies for f in typed_frames(copy)] == typed_frames(whole)
    assert decode(copies[0], *map(str, copies[1:]))[1] == decode(whole)[1]


def epoch_times(path: Path) -> list[str]:
    done = subprocess.run([peer("tshark"), "-r", str(path), "-T", "fields", "-e", "frame.time_epoch"],
                          capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.split()


@pytest.mark.parametrize("nanos", [False, True])
def test_redact_of_an_interface_described_after_the_first_frame_stops_there(tmp_path: Path, nanos: bool) -> None:
    """Its copy was begun as a classic pcap of the first link type: the notice says why it ends there. Of
    nanosecond times (read by dcpctl's reader from the first frame, not by libpcap) it ends at the same frame,
    the times kept to the nanosecond."""
    data, _ = two_interfaces(tmp_path, late=True, nanos=nanos)
    path = tmp_path / "late.pcapng"
    path.write_bytes(data)
    code, err = redact(str(path), "-o", str(tmp_path / "copy.pcap"), salt=tmp_path / "salt")
    assert code == ExitCode.OK
    assert "and this file describes another after it" in err
    assert facts(decode(tmp_path / "copy.pcap")[1])  # the first interface's frames, redacted
    copied, given = epoch_times(tmp_path / "copy.pcap"), epoch_times(path)
    assert copied == given[:len(frames_in(session(tmp_path, LINKTYPE_ETHERNET, 50001)))]
    assert all(time.endswith("007") for time in copied) == nanos


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("packed", ["", "gzip"])
def test_redact_of_nanosecond_interfaces_keeps_their_times(tmp_path: Path, jobs: str, packed: str) -> None:
    """A pcapng file of interfaces of nanosecond times, of one link type (a classic pcap copy) or two (a pcapng
    copy): every frame keeps its time to the nanosecond, as tshark reads it; compressed too (as a customer
    sends what dumpcap wrote, which is nanoseconds), where libpcap's reader gave microseconds."""
    data, _ = two_interfaces(tmp_path, nanos=True)
    mixed = tmp_path / "mixed.pcapng"
    mixed.write_bytes(data)
    one = tmp_path / "one.pcapng"
    ethernet = session(tmp_path, LINKTYPE_ETHERNET, 50001)
    one.write_bytes(section() + interface(LINKTYPE_ETHERNET, tsresol=9) + b"".join(
        enhanced(0, round(ts * 1e6) * 1000 + 7, frame) for ts, frame in frames_in(ethernet)))
    for path, head in ((mixed, b"\x0a\x0d\x0d\x0a"), (one, b"\x4d\x3c\xb2\xa1")):
        copy = tmp_path / f"{path.stem}-copy"
        given = path
        if packed:
            given = path.with_name(path.name + ".gz")
            given.write_bytes(gzip.compress(path.read_bytes()))
        code, err = redact(str(given), "-o", str(copy), "--jobs", jobs, salt=tmp_path / "salt")
        assert code == ExitCode.OK, err
        assert copy.read_bytes()[:4] == head  # pcapng, or a classic pcap of nanoseconds
        assert epoch_times(copy) == epoch_times(path)
        assert all(time.endswith("007") for time in epoch_times(copy))


# bzip2's first block of 900 kB would be cut: nothing read
@pytest.mark.parametrize("module", ["gzip", "lzma", "zstd", "lz4"])
def test_such_a_file_compressed_and_cut_short_is_read_up_to_the_cut(tmp_path: Path, module: str) -> None:
    """Decompressed in this process (libpcap's pipe cannot be read again; zstd and lz4 by their programs, whose
    output this process reads): data cut short ends reading with a notice, what came before decoded, as for
    the file compressed whole."""
    import importlib  # noqa: PLC0415

    data, apart = two_interfaces(tmp_path)
    if module in ("zstd", "lz4"):
        # two frames, as pzstd or a concatenation writes them (these programs write out whole blocks only, and
        # the file is less than one): the cut falls in the second
        first, second = (subprocess.run([peer(module), "-c", "-q"], input=part, capture_output=True, check=True,
                                        timeout=60).stdout for part in (data[:len(data) // 2], data[len(data) // 2:]))
        packed, at = first + second, len(first) + len(second) // 2
    else:
        packed = importlib.import_module(module).compress(data)
        at = len(packed) * 2 // 3
    whole, cut = tmp_path / "whole.pcapng.z", tmp_path / "cut.pcapng.z"
    whole.write_bytes(packed)
    cut.write_bytes(packed[:at])
    assert decode(whole) == (ExitCode.OK, decode(whole)[1], "")
    assert facts(decode(whole)[1]) == apart
    code, records, err = decode(cut)
    assert code == ExitCode.OK
    assert 0 < len(records) < len(apart)
    assert facts(records) == [r for r in apart if r in facts(records)]  # whole messages, in their order
    assert err.count("\n") == 1
    # named as libpcap's reader of the file compressed whole names it
    assert f": the {module.replace('lzma', 'xz')} data is damaged (" in err
    assert err.count(" data is damaged") == 1


SEED_FILE: list[bytes] = []


def seed_file(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A pcapng file of two link types, every kind of block in it: the seed the mutations start from."""
    if not SEED_FILE:
        directory = tmp_path_factory.mktemp("seed")
        ethernet, raw = session(directory, LINKTYPE_ETHERNET, 50001), session(directory, LINKTYPE_RAW, 50002)
        frames = [enhanced(0, round(ts * 1e6), data) for ts, data in frames_in(ethernet)[:12]] + \
            [enhanced(1, round(ts * 1e6), data) for ts, data in frames_in(raw)[:12]]
        SEED_FILE.append(section() + interface(LINKTYPE_ETHERNET, tsresol=9) + interface(LINKTYPE_RAW) +
                         block(3, struct.pack("<I", 60) + bytes(60)) + block(5, bytes(16)) + b"".join(frames) +
                         section(">") + interface(LINKTYPE_RAW, endian=">") + interface(LINKTYPE_NULL, endian=">") +
                         enhanced(1, 5, bytes(40), endian=">"))
    return SEED_FILE[0]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255), st.integers(0, 3)), min_size=1,
                     max_size=6))
def test_mutated_files_end_in_a_notice_never_an_exception_or_a_hang(
        tmp_path_factory: pytest.TempPathFactory, cuts: list[tuple[int, int, int]]) -> None:
    """Bytes changed, cut out or the file cut short anywhere: the reader gives frames, then ends or raises
    PcapError (a notice); it never raises anything else, loops, or gives a frame longer than its block."""
    data = bytearray(seed_file(tmp_path_factory))
    for where, value, how in cuts:
        at = where % (len(data) + 1)
        if how == 0 and at < len(data):
            data[at] = value
        elif how == 1:
            del data[at:at + value]
        elif how == 2:
            del data[at:]
        elif at + 4 <= len(data):  # a length or a count, made large
            data[at:at + 4] = (value << 24 | 0xFFFFFC).to_bytes(4, "little")
        if not data:
            break
    reader = PcapngReader(io.BytesIO(bytes(data)))
    try:
        for _ in range(len(data) // 12 + 2):  # a block is 12 bytes at least: more calls than that is a loop
            header, frame = reader.next()
            if header is None:
                return
            assert len(frame) <= len(data)
        pytest.fail("more frames than the file has blocks")
    except pcapy.PcapError:
        return


def test_libpcap_reasons_are_shown_without_its_unexpanded_size_format(tmp_path: Path) -> None:
    """libpcap ends this message with "4zu" (a size format it did not expand): shown as it means it."""
    frames = frames_in(session(tmp_path, LINKTYPE_ETHERNET, 50001))
    good = section() + interface(LINKTYPE_ETHERNET) + b"".join(enhanced(0, round(ts * 1e6), data)
                                                               for ts, data in frames[:8])
    whole, odd = tmp_path / "whole.pcapng", tmp_path / "odd-block.pcapng"
    whole.write_bytes(good)
    odd.write_bytes(good + struct.pack("<II", 6, 137) + bytes(129))
    code, records, err = decode(odd)
    assert code == ExitCode.OK
    assert records
    assert facts(records) == facts(decode(whole)[1])
    assert err == ("dcpctl: capture_gap: frame 9: the capture file is damaged after frame 8: block in pcapng dump "
                   "file has a length of 137 that is not a multiple of 4\n")


def test_a_link_type_not_read_is_said_of_the_file_not_of_a_frame_0(tmp_path: Path) -> None:
    data = bytearray(session(tmp_path, LINKTYPE_ETHERNET, 50001).read_bytes())
    struct.pack_into("<I", data, 20, 0x3FFFFFE)  # the pcap header's link type
    path = tmp_path / "unknown.pcap"
    path.write_bytes(data)
    code, records, err = decode(path)
    assert (code, records) == (ExitCode.OK, [])
    assert err == "dcpctl: capture_gap: link type 67108862 is not supported\n"

"""Compressed captures (gzip, bzip2, xz; zstd and lz4 through their programs) read as the capture they hold: by
decode in one process or two, by redact and by rollback. A damaged stream ends reading as a damaged capture file
does, saying why; what is not read (zstd or lz4 without its program, a compressed file analyze would have to
cut) is one line and exit 3."""

from __future__ import annotations

import bz2
import functools
import gc
import gzip
import io
import json
import lzma
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from capturekit import session_packets, write_capture
from servekit import peer

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment


def compressed_by(program: str) -> Callable[[bytes], bytes]:
    """Compression by a Debian program (zstd, lz4), as a user's shell compresses a capture."""
    options = ["-B4"] if program == "lz4" else []  # lz4's default block is 4 MiB: tests' captures would be one
    return lambda data: subprocess.run([peer(program), "-c", "-q", *options], input=data, capture_output=True,
                                       check=True, timeout=60).stdout


@functools.cache
def big_capture() -> bytes:
    """A capture of about 1 MB, several blocks of zstd's and lz4's."""
    return write_capture(session_packets() * 300)


FORMATS: dict[str, Callable[[bytes], bytes]] = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress,
                                                "zstd": compressed_by("zstd"), "lz4": compressed_by("lz4")}
CAPTURE = write_capture(session_packets() * 20)


def run(*args: str, stderr_isatty: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=stderr_isatty,
                      color=False)
    code = main(list(args), env)
    return code, out.getvalue(), err.getvalue()


def _pair(directory: Path, name: str, capture: bytes = CAPTURE, suffix: str = "pcap") -> tuple[Path, Path]:
    plain, packed = directory / f"s.{suffix}", directory / f"s.{suffix}.{name}"
    plain.write_bytes(capture)
    packed.write_bytes(FORMATS[name](capture))
    return plain, packed


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("name", FORMATS)
def test_a_compressed_capture_decodes_as_the_capture(tmp_path: Path, name: str, jobs: str) -> None:
    plain, packed = _pair(tmp_path, name)
    expected = run("decode", str(plain), "-F", "jsonl", "-j", jobs)
    assert expected[0] == ExitCode.OK
    assert expected[1].count("\n") == 440
    assert run("decode", str(packed), "-F", "jsonl", "-j", jobs) == expected


@pytest.mark.peer
def test_a_compressed_pcapng_decodes_as_the_pcap(tmp_path: Path) -> None:
    plain = tmp_path / "s.pcap"
    plain.write_bytes(CAPTURE)
    converted = tmp_path / "s.pcapng"
    subprocess.run([peer("editcap"), "-F", "pcapng", str(plain), str(converted)], check=True, timeout=60)
    packed = tmp_path / "s.pcapng.gz"
    packed.write_bytes(gzip.compress(converted.read_bytes()))
    assert run("decode", str(packed), "-F", "jsonl") == run("decode", str(plain), "-F", "jsonl")


@pytest.mark.parametrize("name", FORMATS)
def test_a_compressed_capture_redacts_as_the_capture(tmp_path: Path, name: str) -> None:
    plain, packed = _pair(tmp_path, name)
    salt = tmp_path / "salt"
    salt.write_text("a salt")
    runs = [run("redact", str(path), "-o", str(tmp_path / f"{path.name}.out"), "--salt-file", str(salt))
            for path in (plain, packed)]
    assert runs[0] == runs[1]
    assert runs[0][0] == ExitCode.OK
    assert (tmp_path / "s.pcap.out").read_bytes() == (tmp_path / f"{packed.name}.out").read_bytes()


def test_rollback_reads_a_compressed_capture(tmp_path: Path) -> None:
    plain, packed = _pair(tmp_path, "gzip")
    expected = run("rollback", "explain", str(plain), "-F", "json")
    assert expected[0] == ExitCode.OK
    stories = json.loads(expected[1])
    assert stories
    assert all(story.pop("file") == str(plain) for story in stories)
    code, out, err = run("rollback", "explain", str(packed), "-F", "json")
    found = json.loads(out)
    assert all(story.pop("file") == str(packed) for story in found)
    assert (code, found, err) == (ExitCode.OK, stories, "")


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize(("name", "reason"), [
    ("gzip", "(Compressed file ended before the end-of-stream marker was reached)"),
    ("zstd", "("), ("lz4", "("),  # the program's own words, which its version chooses
])
def test_a_damaged_stream_ends_reading_as_a_damaged_capture(tmp_path: Path, jobs: str, name: str,
                                                            reason: str) -> None:
    """What decompressed before the damage is decoded, as from a capture file cut there; the notice says
    why reading stopped; the exit is a damaged capture's."""
    # zstd and lz4 write out whole blocks only (128 KiB; lz4's of 64 KiB with -B4): half of a capture of
    # several is cut inside a later one
    plain, packed = _pair(tmp_path, name, CAPTURE if name == "gzip" else big_capture())
    data = packed.read_bytes()
    packed.write_bytes(data[:len(data) // 2])
    full = run("decode", str(plain), "-F", "jsonl")[1].splitlines()
    code, out, err = run("decode", str(packed), "-F", "jsonl", "-j", jobs)
    part = out.splitlines()
    assert code == ExitCode.OK
    assert 0 < len(part) < len(full)
    assert part == full[:len(part)]
    assert f"the {name} data is damaged {reason}" in err, err
    assert run("decode", str(packed), "--strict", "-j", jobs)[0] == ExitCode.DIAGNOSTICS


@pytest.mark.parametrize("name", ["zstd", "lz4"])
def test_a_changed_byte_is_found_by_the_programs_checksum(tmp_path: Path, name: str) -> None:
    """zstd and lz4 write a checksum of the content: a byte changed in the compressed data is said, not
    decoded as if it were the capture."""
    _, packed = _pair(tmp_path, name)
    data = bytearray(packed.read_bytes())
    data[len(data) // 2] ^= 0xFF
    packed.write_bytes(bytes(data))
    code, _, err = run("decode", str(packed), "-F", "jsonl")
    assert code in (ExitCode.OK, ExitCode.INPUT)
    assert f"the {name} data is damaged (" in err, err


@pytest.mark.parametrize("name", ["zstd", "lz4"])
def test_zstd_and_lz4_need_their_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Without the program on PATH, the error says what to install, or how to decompress first."""
    _, packed = _pair(tmp_path, name)
    monkeypatch.setenv("PATH", str(tmp_path))
    code, out, err = run("decode", str(packed))
    assert (code, out) == (ExitCode.INPUT, "")
    assert err == (f"dcpctl: error: {packed}: compressed with {name}: that needs the {name} program "
                   f"(Debian: apt-get install {name}), or decompress it first ({name} -dc FILE | dcpctl ... -)\n")
    copy = tmp_path / f"copy.pcap.{ {'zstd': 'zst'}.get(name, name)}"
    code, _, err = run("redact", str(tmp_path / "s.pcap"), "-o", str(copy))
    assert code == ExitCode.USAGE
    assert err == (f"dcpctl: error: -o {copy}: compressed with {name}: that needs the {name} program "
                   f"(Debian: apt-get install {name})\n")
    assert not copy.exists()


@pytest.mark.parametrize(("data", "message"), [
    (gzip.compress(b"# not a capture\n" * 100), "not a pcap or pcapng capture inside the gzip data"),
    (b"\x1f\x8b\x08\x00garbage", "the gzip data is damaged"),
    (b"\x28\xb5\x2f\xfd" + bytes(100), "the zstd data is damaged ("),
    (b"\x04\x22\x4d\x18" + bytes(100), "the lz4 data is damaged ("),
], ids=["text", "garbage", "zstd", "lz4"])
def test_what_is_not_read_is_one_line_and_exit_3(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "c.pcap.gz"
    path.write_bytes(data)
    salt = tmp_path / "salt"
    salt.write_text("a salt")
    for command in (["decode", str(path)],
                    ["redact", str(path), "-o", str(tmp_path / "out.pcap"), "--salt-file", str(salt)]):
        code, out, err = run(*command)
        assert (code, out) == (ExitCode.INPUT, ""), command
        assert err.startswith(f"dcpctl: error: {path}: "), err
        assert message in err, err
        assert err.count("\n") == 1
    assert not (tmp_path / "out.pcap").exists()


def test_analyze_says_it_cannot_cut_a_compressed_capture(tmp_path: Path) -> None:
    if shutil.which("java") is None and not os.environ.get("CI"):
        pytest.skip("analyze checks for Java first")
    _, packed = _pair(tmp_path, "gzip")
    done = subprocess.run([sys.executable, "-m", "dcpctl", "analyze", str(packed)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == ExitCode.INPUT
    assert done.stderr == (f"dcpctl: error: {packed}: a compressed capture: analyze reads files Spark cuts into "
                           "pieces, which compressed data cannot be (decompress it first, or use dcpctl decode)\n")
    # with files that do not open either, the one line names them all (it named the compressed one alone)
    missing = tmp_path / "missing.pcap"
    done = subprocess.run([sys.executable, "-m", "dcpctl", "analyze", str(missing), str(packed)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == ExitCode.INPUT
    assert done.stderr.startswith("dcpctl: error: 2 files cannot be read: "), done.stderr
    assert f"{missing}: no such file" in done.stderr
    assert f"{packed}: a compressed capture" in done.stderr


def _decompressors() -> list[int]:
    """This process's children that decompress a capture."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"importlib" in command:
            found.append(int(entry.name))
    return found


def test_a_reader_that_stops_early_leaves_no_decompressor(tmp_path: Path) -> None:
    _, packed = _pair(tmp_path, "gzip", write_capture(session_packets() * 2000))
    code, out, _ = run("decode", str(packed), "-F", "jsonl", "-j", "1", "--count", "1")
    assert code == ExitCode.OK
    assert len(out.splitlines()) == 1
    gc.collect()
    assert _decompressors() == []


def test_the_progress_bar_of_a_compressed_file_counts_bytes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The bytes read add up to more than the file's size: the bar has no end, and shows what was read."""
    from dcpctl.render import progress  # noqa: PLC0415

    monkeypatch.setattr(progress, "PROGRESS_MIN_BYTES", 1)
    totals: list[int | None] = []
    made = progress.FileProgress.__init__

    def init(self: progress.FileProgress, env: Environment, total: int | None, action: str) -> None:
        totals.append(total)
        made(self, env, total, action)

    monkeypatch.setattr(progress.FileProgress, "__init__", init)
    plain, packed = _pair(tmp_path, "gzip")
    for path in (plain, packed):
        code, out, err = run("decode", str(path), "-F", "jsonl", stderr_isatty=True)
        assert code == ExitCode.OK
        assert path.name in err  # the bar's description
        assert [json.loads(line)["opcode"] for line in out.splitlines()][:1] == ["HELLO"]
    assert totals == [plain.stat().st_size, None]


def test_a_damaged_record_inside_compressed_data_is_told_as_in_the_file(tmp_path: Path) -> None:
    """libpcap stops at a record whose length is impossible while the child is still writing: the child
    leaves quietly, and decode says what it says of the same capture uncompressed."""
    data = bytearray(write_capture(session_packets() * 200))
    at = 24
    for _ in range(30):
        at += 16 + struct.unpack_from("<I", data, at + 8)[0]
    struct.pack_into("<I", data, at + 8, 0x7FFFFFF0)  # the 31st record's captured length
    plain, packed = tmp_path / "d.pcap", tmp_path / "d.pcap.gz"
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(bytes(data)))
    assert len(data) > 4 * 65536  # far more than a pipe holds: the child is still writing when libpcap stops
    expected = run("decode", str(plain), "-F", "jsonl", "-j", "1")
    assert "damaged after frame 30" in expected[2]
    assert run("decode", str(packed), "-F", "jsonl", "-j", "1") == expected


def decompressed_by(program: str) -> Callable[[bytes], bytes]:
    return lambda data: subprocess.run([peer(program), "-d", "-c", "-q"], input=data, capture_output=True,
                                       check=True, timeout=60).stdout


@pytest.mark.parametrize(("suffix", "decompress"), [(".gz", gzip.decompress), (".bz2", bz2.decompress),
                                                    (".xz", lzma.decompress), (".zst", decompressed_by("zstd")),
                                                    (".lz4", decompressed_by("lz4"))])
def test_redact_writes_a_compressed_file_when_its_name_asks(tmp_path: Path, suffix: str,
                                                              decompress: Callable[[bytes], bytes]) -> None:
    """The same capture as uncompressed, which decode reads back; a gzip header names no file and no time."""
    plain, _ = _pair(tmp_path, "gzip")
    salt = tmp_path / "salt"
    salt.write_text("a salt")
    outputs = [tmp_path / "out.pcap", tmp_path / f"out.pcap{suffix}"]
    runs = [run("redact", str(plain), "-o", str(out), "--salt-file", str(salt)) for out in outputs]
    assert runs[0] == runs[1]
    assert runs[0][0] == ExitCode.OK
    packed = outputs[1].read_bytes()
    assert decompress(packed) == outputs[0].read_bytes()
    if suffix == ".gz":
        assert packed[3] & 0x08 == 0  # FLG.FNAME: no name
        assert packed[4:8] == bytes(4)  # MTIME
    assert run("decode", str(outputs[1]), "-F", "jsonl") == run("decode", str(outputs[0]), "-F", "jsonl")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


@pytest.mark.parametrize("name", ["gzip", "zstd", "lz4"])
def test_a_compressor_on_a_full_disk_says_so(name: str) -> None:
    from dcpctl.sources.compressed import CompressionError, compressing  # noqa: PLC0415

    if name != "gzip":
        peer(name)

    def fill() -> None:
        with Path("/dev/full").open("wb") as target, compressing(target, name) as data:
            for _ in range(64):
                data.write(os.urandom(1 << 16))

    with pytest.raises(CompressionError, match=r"(?i)no space left on device|write error"):
        fill()


@pytest.mark.parametrize("name", ["gzip", "zstd"])
def test_a_compressor_that_cannot_write_is_an_error_not_a_short_file(name: str) -> None:
    from dcpctl.sources.compressed import CompressionError, compressing  # noqa: PLC0415

    read, write = os.pipe()
    os.close(read)  # nobody reads what the compressor writes: it fails, as on a full disk

    def fill() -> None:
        with os.fdopen(write, "wb") as target, compressing(target, name) as data:
            for _ in range(64):
                data.write(os.urandom(1 << 16))

    with pytest.raises(CompressionError, match=r"(?i)broken pipe|SIGPIPE"):
        fill()

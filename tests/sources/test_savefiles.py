"""The live commands' capture files: one pcap, or a ring of them as tcpdump -C and -W write them."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from capturekit import frames_in, within_size

from dcpctl.sources.pcapwriter import PcapWriter
from dcpctl.sources.savefiles import Savefiles, Sink, WholeRecords, buffered

# frames of 14 to 813 bytes, each its own number in its first bytes, a millisecond apart
FRAMES = [(1_700_000_000 + n / 1000, n.to_bytes(4, "big") + bytes(10 + (n * 37) % 800)) for n in range(300)]


Opener = Callable[[Path], Sink]
OPENERS: list[Opener] = [WholeRecords, buffered]


def write_all(ring: Savefiles) -> None:
    with ring:
        for ts, frame in FRAMES:
            ring.write(ts, frame)


@pytest.mark.parametrize("opener", OPENERS, ids=["unbuffered", "buffered"])
def test_without_a_size_one_file_as_the_pcap_writer_writes_it(tmp_path: Path, opener: Opener) -> None:
    write_all(Savefiles(tmp_path / "one.pcap", opener=opener))
    whole = io.BytesIO()
    writer = PcapWriter(whole)
    for ts, frame in FRAMES:
        writer.write(ts, frame)
    assert [p.name for p in tmp_path.iterdir()] == ["one.pcap"]
    assert (tmp_path / "one.pcap").read_bytes() == whole.getvalue()


@pytest.mark.parametrize("opener", OPENERS, ids=["unbuffered", "buffered"])
def test_a_size_cuts_the_frames_into_files_named_as_tcpdump_names_them(tmp_path: Path, opener: Opener) -> None:
    """-C: FILE, FILE1, FILE2 ...; each a whole pcap within the size, every frame in exactly one, in order."""
    ring = Savefiles(tmp_path / "c.pcap", size=10_000, opener=opener)
    write_all(ring)
    names = [f"c.pcap{n or ''}" for n in range(len(list(tmp_path.iterdir())))]
    assert len(names) > 5
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    assert [p.name for p in ring.names] == names
    assert all(within_size(tmp_path / name, 10_000) for name in names)
    assert [f for name in names for f in frames_in(tmp_path / name)] == [
        (pytest.approx(ts), frame) for ts, frame in FRAMES]


def test_a_record_larger_than_the_size_has_a_file_of_its_own(tmp_path: Path) -> None:
    ring = Savefiles(tmp_path / "big.pcap", size=100)
    with ring:
        for ts, frame in FRAMES[:3]:
            ring.write(ts, frame)
    assert [len(frames_in(p)) for p in ring.names] == [1, 1, 1]


def test_a_count_keeps_a_ring_of_that_many_files_the_oldest_overwritten(tmp_path: Path) -> None:
    """-C with -W 3: FILE0, FILE1, FILE2; read from the oldest, they hold the last frames written, in order."""
    ring = Savefiles(tmp_path / "w.pcap", size=10_000, count=3)
    write_all(ring)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.pcap0", "w.pcap1", "w.pcap2"]
    assert ring.number > 3  # the ring went round
    kept = [f for path in ring.names for f in frames_in(path)]
    assert 0 < len(kept) < len(FRAMES)
    assert kept == [(pytest.approx(ts), frame) for ts, frame in FRAMES[-len(kept):]]


def test_eleven_files_are_numbered_with_two_digits(tmp_path: Path) -> None:
    write_all(Savefiles(tmp_path / "w.pcap", size=5_000, count=11))
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"w.pcap{n:02d}" for n in range(11)]


@pytest.mark.parametrize("opener", OPENERS, ids=["unbuffered", "buffered"])
def test_a_next_file_that_cannot_be_opened_leaves_the_last_one_whole(tmp_path: Path, opener: Opener) -> None:
    """The next file is opened before the current one is closed: when it cannot be (here a directory has
    its name), the error is kept and raised, and the file being written stays whole, holding its frames."""
    (tmp_path / "c.pcap2").mkdir()
    ring = Savefiles(tmp_path / "c.pcap", size=10_000, opener=opener)
    written: list[bytes] = []

    def write_until_it_fails() -> None:
        with ring:
            for ts, frame in FRAMES:
                ring.write(ts, frame)
                written.append(frame)

    with pytest.raises(IsADirectoryError):
        write_until_it_fails()
    assert isinstance(ring.error, IsADirectoryError)
    assert ring.error.filename == str(tmp_path / "c.pcap2")
    assert ring.name == tmp_path / "c.pcap1"
    assert within_size(ring.name, 10_000)
    held = [frames_in(tmp_path / name) for name in ("c.pcap", "c.pcap1")]
    assert len(held[1]) == ring.records
    assert [f for frames in held for f in frames] == [(pytest.approx(ts), frame) for ts, frame in FRAMES[:len(written)]]


def test_a_file_that_stops_growing_is_cut_back_to_its_last_whole_record(tmp_path: Path) -> None:
    """The unbuffered file capture -w writes: a write the disk cuts short (here a file size limit, as a full
    disk does) leaves no half record, and the error is raised and kept."""
    path = tmp_path / "limited.pcap"
    script = f"""
import resource
from collections.abc import Callable
from pathlib import Path
from dcpctl.sources.savefiles import Savefiles
resource.setrlimit(resource.RLIMIT_FSIZE, (5000, 5000))
ring = Savefiles(Path({str(path)!r}))
try:
    for n in range(100):
        ring.write(1.0 + n, bytes(300))
except OSError as exc:
    print(type(exc).__name__, ring.records, ring.error is exc)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["OSError", "15", "True"]  # 24 + 15 * 316 = 4764: the 16th did not fit
    assert path.stat().st_size == 24 + 15 * 316
    assert len(frames_in(path)) == 15


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Names by strftime in local time: the test's local time is UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("utc")
def test_seconds_begin_a_file_named_by_its_time_as_tcpdump_g_does(tmp_path: Path) -> None:
    """-G 10 over 0.3 s of frames a millisecond apart (given times 0.05 s apart here): a new file once a
    frame comes 10 s after the current file was begun, its name the strftime of -w at that frame's time."""
    frames = [(1_700_000_000 + n * 0.05, frame) for n, (_, frame) in enumerate(FRAMES)]  # 15 seconds
    ring = Savefiles(tmp_path / "g-%H%M%S.pcap", seconds=10, now=frames[0][0])
    with ring:
        for ts, frame in frames:
            ring.write(ts, frame)
    starts = [frames[0][0], frames[200][0]]  # 10 s after the first frame: its 201st
    names = [time.strftime("g-%H%M%S.pcap", time.gmtime(t)) for t in starts]
    assert [p.name for p in ring.names] == names == sorted(p.name for p in tmp_path.iterdir())
    assert [len(frames_in(tmp_path / name)) for name in names] == [200, 100]
    assert [f for name in names for f in frames_in(tmp_path / name)] == [(pytest.approx(ts), f) for ts, f in frames]


@pytest.mark.usefixtures("utc")
def test_seconds_and_a_size_number_the_files_within_each_interval(tmp_path: Path) -> None:
    frames = [(1_700_000_000 + n * 0.05, frame) for n, (_, frame) in enumerate(FRAMES)]
    ring = Savefiles(tmp_path / "g-%H%M%S.pcap", size=30_000, seconds=10, now=frames[0][0])
    with ring:
        for ts, frame in frames:
            ring.write(ts, frame)
    first, second = (time.strftime("g-%H%M%S.pcap", time.gmtime(frames[n][0])) for n in (0, 200))
    names = [p.name for p in ring.names]
    assert names[0] == first
    assert names[names.index(second) - 1].startswith(first)
    assert names == [first, *(f"{first}{n}" for n in range(1, names.index(second))),
                     second, *(f"{second}{n}" for n in range(1, len(names) - names.index(second)))]
    assert all(within_size(tmp_path / name, 30_000) for name in names)
    assert [f for name in names for f in frames_in(tmp_path / name)] == [(pytest.approx(ts), f) for ts, f in frames]


@pytest.mark.usefixtures("utc")
def test_a_time_format_coarser_than_the_interval_numbers_files_never_overwrites(tmp_path: Path) -> None:
    """tcpdump overwrites a file whose name comes again; dcpctl numbers it on: no frame is lost."""
    frames = [(1_700_000_000 + n * 0.05, frame) for n, (_, frame) in enumerate(FRAMES)]
    ring = Savefiles(tmp_path / "g-%S.pcap", seconds=2, now=frames[0][0])
    with ring:
        for ts, frame in frames[:100]:
            ring.write(ts, frame)
        for ts, frame in frames[100:]:  # a minute after the first frame: the names' seconds come again
            ring.write(ts + 55, frame)
    names = [path.name for path in ring.names]
    assert len(names) == len(set(names)) == 8
    assert names[:4] == ["g-20.pcap", "g-22.pcap", "g-24.pcap", "g-20.pcap1"]
    assert [f for path in ring.names for f in frames_in(path)] == [
        (pytest.approx(ts + 55 * (n >= 100)), f) for n, (ts, f) in enumerate(frames)]

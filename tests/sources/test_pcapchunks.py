"""Splitting pcap files at record boundaries: the pieces read back to exactly the whole file's segments."""

from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path

import pytest
from capturekit import session_packets, write_capture

from dcpctl.sources.pcap import CaptureError, read_segments
from dcpctl.sources.pcapchunks import plan, segments

PORTS = frozenset({11210})


@pytest.mark.parametrize("target", [1, 200, 5000, 1 << 30])
def test_chunks_read_back_to_the_whole_file(tmp_path: Path, target: int) -> None:
    path = tmp_path / "c.pcap"
    path.write_bytes(write_capture(session_packets() * 3, segment_size=90))
    chunks, notices = plan(str(path), target)
    assert notices == []
    assert chunks[0].start == 24
    assert chunks[-1].end == path.stat().st_size
    assert all(a.end == b.start for a, b in itertools.pairwise(chunks))
    located = [s for c in chunks for s in segments(c, PORTS)]
    assert [s for s, _ in located] == list(read_segments(str(path), PORTS))
    data = path.read_bytes()  # each payload is where the chunk reader says it is in the file
    assert all(data[at:at + len(s.payload)] == s.payload for s, at in located)


def test_a_damaged_file_is_planned_up_to_the_damage(tmp_path: Path) -> None:
    data = write_capture(session_packets())
    path = tmp_path / "cut.pcap"
    path.write_bytes(data[: len(data) - 30])
    chunks, notices = plan(str(path), 1000)
    assert [n.name for n in notices] == ["truncated_file"]
    assert chunks[-1].end < len(data) - 30
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"not a capture" * 4)
    with pytest.raises(CaptureError):
        plan(str(junk))


def test_pcapng_is_one_chunk_read_by_libpcap(tmp_path: Path) -> None:
    editcap = shutil.which("editcap")
    if editcap is None:
        pytest.skip("editcap (Wireshark) not installed; .ci/run installs it")
    pcap = tmp_path / "a.pcap"
    pcap.write_bytes(write_capture(session_packets()))
    ng = tmp_path / "a.pcapng"
    subprocess.run([editcap, "-F", "pcapng", str(pcap), str(ng)], check=True, timeout=60)
    chunks, _ = plan(str(ng), 100)
    assert len(chunks) == 1
    assert [s.payload for s, at in segments(chunks[0], PORTS) if at == -1] == \
        [s.payload for s in read_segments(str(pcap), PORTS)]

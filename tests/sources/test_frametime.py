"""Frame times to the nanosecond: what the writers write is what the readers read back, and a time to the
microsecond (a float) is written at a nanosecond writer without a float's rounding noise."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dcpctl.sources.frametime import NANOS, FrameTime
from dcpctl.sources.pcap import read_segments
from dcpctl.sources.pcapng import PcapngReader
from dcpctl.sources.pcapwriter import LINKTYPE_ETHERNET, LINKTYPE_RAW, PcapngWriter, PcapWriter

FRAME = bytes(60)
TIMES = st.lists(st.integers(0, (1 << 32) * NANOS - 1), min_size=1, max_size=8)


def _tapped(path: Path) -> list[float]:
    seen: list[float] = []
    for _ in read_segments(str(path), tap=lambda ts, _data, _wire: seen.append(ts), exact=True):
        pass
    return seen


@given(TIMES)
def test_a_nanosecond_pcap_file_reads_back_its_times(tmp_path_factory: pytest.TempPathFactory,
                                                      times: list[int]) -> None:
    out = io.BytesIO()
    writer = PcapWriter(out, LINKTYPE_ETHERNET, nanos=True)
    for nanos in times:
        writer.write(FrameTime(nanos), FRAME)
    path = tmp_path_factory.mktemp("ns") / "t.pcap"
    path.write_bytes(out.getvalue())
    seen = _tapped(path)
    assert [type(ts) for ts in seen] == [FrameTime] * len(times)
    assert [ts.nanos for ts in seen if isinstance(ts, FrameTime)] == times


@given(TIMES)
def test_a_nanosecond_pcapng_file_reads_back_its_times(times: list[int]) -> None:
    out = io.BytesIO()
    writer = PcapngWriter(out, [LINKTYPE_ETHERNET, LINKTYPE_RAW], nanos=True)
    for n, nanos in enumerate(times):
        writer.write(FrameTime(nanos), FRAME, linktype=(LINKTYPE_ETHERNET, LINKTYPE_RAW)[n % 2])
    reader = PcapngReader(io.BytesIO(out.getvalue()))
    read = []
    while True:
        header, _ = reader.next()
        if header is None:
            break
        read.append(header.nanos)
    assert read == times


@given(st.lists(st.integers(0, (1 << 32) * 1_000_000 - 1), min_size=1, max_size=8))
def test_a_time_to_the_microsecond_is_written_to_the_nanosecond_exactly(micros: list[int]) -> None:
    out = io.BytesIO()
    writer = PcapWriter(out, LINKTYPE_ETHERNET, nanos=True)
    for time in micros:
        writer.write(time / 1_000_000, FRAME)
    data = out.getvalue()
    written = [int.from_bytes(data[at:at + 4], "little") * NANOS + int.from_bytes(data[at + 4:at + 8], "little")
               for at in range(24, len(data), 16 + len(FRAME))]
    assert written == [time * 1000 for time in micros]


@given(st.lists(st.integers((1 << 31) * 1_000_000, (1 << 32) * 1_000_000 - 1), min_size=1, max_size=8))
def test_a_time_after_2038_reads_as_tshark_reads_it(tmp_path_factory: pytest.TempPathFactory,
                                                     micros: list[int]) -> None:
    """A classic pcap file's seconds are unsigned 32 bits; libpcap hands them over signed, and decode gave
    2039-01-01 as a time decades before 1970 (analyze's chunked reader and tshark read it unsigned)."""
    out = io.BytesIO()
    writer = PcapWriter(out, LINKTYPE_ETHERNET)
    for time in micros:
        writer.write(time / 1_000_000, FRAME)
    path = tmp_path_factory.mktemp("y2038") / "t.pcap"
    path.write_bytes(out.getvalue())
    assert [round(ts * 1_000_000) for ts in _tapped_by_libpcap(path)] == micros


def _tapped_by_libpcap(path: Path) -> list[float]:
    seen: list[float] = []
    for _ in read_segments(str(path), tap=lambda ts, _data, _wire: seen.append(ts)):
        pass
    return seen

"""Splitting a pcap file at record boundaries, and reading one piece: how ``analyze`` parallelises a capture.

Theory of operation. A classic pcap file is a 24-byte header (magic, which says the byte order and whether
timestamps are micro- or nanoseconds; the link type) followed by records, each a 16-byte header (seconds,
fraction, captured length, wire length) and the frame. :func:`plan` walks the record headers only
(seeking over the frames) and cuts the file into chunks of about ``target`` bytes, each starting on a
record and knowing its first frame number, so frame numbers stay those of the whole file. On the way it
can weigh the capture's TCP connections from a sample of the frames (one in :data:`SAMPLE_EVERY`), which
``analyze`` uses to spread connections evenly over its tasks.
:func:`segments` reads one chunk and turns its frames into TCP segments with the capture reader's own
frame parser. A chunk never holds more than its own bytes, whatever the file's size. pcapng files are
not split (their blocks need the whole section's interface table): they are one chunk, read by libpcap.
A damaged record header ends the plan there, with the damage reported as in ``decode``.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from dcpctl.sources.frametime import NANOS, FrameTime
from dcpctl.sources.pcap import (
    EMPTY_FILE,
    SUPPORTED_LINKTYPES,
    TLS_PORTS,
    CaptureError,
    CaptureNotice,
    FileFrames,
    FrameFilter,
    TcpSegment,
    frame_times,
    parse_frame,
    read_segments,
)

DEFAULT_CHUNK: Final = 64 * 1024 * 1024  # bytes per chunk: a few seconds of work each, many per GB
READ_CHUNK: Final = 4 * 1024 * 1024  # bytes held at a time by one process reading a whole file (read_records)
MAX_RECORD: Final = 256 * 1024  # a record longer than this is a damaged header, not a frame
PLAN_BLOCK: Final = 4 * 1024 * 1024  # bytes the planner reads at a time (it only looks at record headers)
NANOSECOND: Final = 1e-9
_MAGICS: Final = {b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
                  b"\x4d\x3c\xb2\xa1": ("<", NANOSECOND), b"\xa1\xb2\x3c\x4d": (">", NANOSECOND)}
# A file header's snap length below this (tcpdump's smallest default) may be smaller than the records it
# holds: such a file is read here, not by libpcap, which would cut every frame to it.
FULL_SNAPLEN: Final = 65535
PCAPNG_MAGIC: Final = b"\x0a\x0d\x0d\x0a"
# One frame in this many, on average, is parsed to weigh connections (weights are sampled bytes x this); the
# gaps between samples are random (seeded: the same plan every time), as a fixed stride can keep landing on
# the same connection of a capture that interleaves them regularly.
SAMPLE_EVERY: Final = 16
Endpoints = tuple[tuple[str, int], tuple[str, int]]  # a TCP connection: its two ends, the lower one first


@dataclass(frozen=True)
class Chunk:
    path: str
    start: int  # byte offset of the first record
    end: int  # byte offset after the last record
    first_frame: int  # 1-based number of the first record's frame in the file
    linktype: int
    endian: str  # "<" or ">"; "" for a file read whole by libpcap (pcapng)
    resolution: float  # seconds per timestamp fraction unit
    capture: str = ""  # the capture the file belongs to, when it continues another file (a ring): its first
    frame_base: int = 0  # frames of that capture before this file


def check(path: str) -> None:
    """Raise CaptureError (or OSError) unless ``path`` is a pcap file of a supported link type or a pcapng file:
    what :func:`plan` would refuse, found from the file header alone."""
    with Path(path).open("rb") as stream:
        head = stream.read(24)
    if head[:4] == PCAPNG_MAGIC:
        return
    if not head:
        raise CaptureError(EMPTY_FILE)
    if len(head) < 24 or head[:4] not in _MAGICS:
        raise CaptureError("not a pcap or pcapng capture (bad file header)")
    linktype = struct.unpack(_MAGICS[head[:4]][0] + "I", head[20:24])[0] & 0x0FFFFFFF
    if linktype not in SUPPORTED_LINKTYPES:
        raise CaptureError(f"link type {linktype} is not supported")


def plan(path: str, target: int = DEFAULT_CHUNK, weights: dict[Endpoints, int] | None = None,
         frames: FileFrames | None = None) -> tuple[list[Chunk], list[CaptureNotice]]:
    """Chunks of about ``target`` bytes covering every record; notices for damage found on the way.
    ``weights``: add each TCP connection's estimated bytes (frames sampled; none from a pcapng file).
    ``frames``: filled with the file's frames (a pcapng file is then read through, its frames' headers)."""
    file = Path(path)
    size = file.stat().st_size
    with file.open("rb") as stream:
        check(path)
        head = stream.read(24)
        if head[:4] == PCAPNG_MAGIC:
            if frames is not None:
                read = frame_times(path)
                frames.count, frames.first, frames.last = read.count, read.first, read.last
            return [Chunk(path, 0, size, 1, 0, "", 0.0)], []
        endian, resolution = _MAGICS[head[:4]]
        linktype = struct.unpack(endian + "I", head[20:24])[0] & 0x0FFFFFFF
        record = struct.Struct(endian + "IIII")
        chunks: list[Chunk] = []
        notices: list[CaptureNotice] = []
        start, first, frame, pos = 24, 1, 0, 24
        block, block_at = b"", 24  # the file read in blocks: a seek and a read per record cost 1.3 s per GB
        gaps = random.Random(0)  # noqa: S311 - sampling, not secrecy
        sample = gaps.randrange(SAMPLE_EVERY)
        while pos < size:
            at = pos - block_at
            if at + 16 > len(block):
                stream.seek(pos)
                block, block_at, at = stream.read(PLAN_BLOCK), pos, 0
            if at + 16 > len(block):
                notices.append(CaptureNotice(frame + 1, 0.0, "truncated_file", f"the capture file ends inside "
                                             f"the header of frame {frame + 1}"))
                break
            seconds, fraction, captured, _ = record.unpack_from(block, at)
            if captured > MAX_RECORD or pos + 16 + captured > size:
                notices.append(CaptureNotice(frame + 1, 0.0, "truncated_file", f"the capture file is damaged "
                                             f"after frame {frame} (record of {captured} bytes at offset {pos})"))
                break
            if frames is not None:
                frames.last = seconds + fraction * resolution
                if frames.first is None:
                    frames.first = frames.last
            if weights is not None and frame == sample:
                sample += gaps.randint(1, 2 * SAMPLE_EVERY - 1)
                if at + 16 + captured <= len(block):  # else not read yet: this sample is skipped
                    parsed = parse_frame(linktype, block[at + 16:at + 16 + captured], captured, frame + 1, 0.0)
                    if isinstance(parsed, TcpSegment):
                        ends = (parsed.src, parsed.dst) if parsed.src <= parsed.dst else (parsed.dst, parsed.src)
                        weights[ends] = weights.get(ends, 0) + (16 + captured) * SAMPLE_EVERY
            pos += 16 + captured
            frame += 1
            if pos - start >= target:
                chunks.append(Chunk(path, start, pos, first, linktype, endian, resolution))
                start, first = pos, frame + 1
        if pos > start:
            chunks.append(Chunk(path, start, pos, first, linktype, endian, resolution))
        if frames is not None:
            frames.count = frame
        return chunks, notices


def short_snaplen(path: str) -> bool:
    """Whether ``path`` is a classic pcap file whose header's snap length is below FULL_SNAPLEN (0 means
    none, to libpcap too)."""
    head = _file_header(path)
    if head is None:
        return False
    snaplen: int = struct.unpack(_MAGICS[head[:4]][0] + "I", head[16:20])[0]
    return 0 < snaplen < FULL_SNAPLEN


def nanosecond_pcap(path: str) -> bool:
    """Whether ``path`` is a classic pcap file of nanosecond times (libpcap gives them as microseconds)."""
    head = _file_header(path)
    return head is not None and _MAGICS[head[:4]][1] == NANOSECOND


def _file_header(path: str) -> bytes | None:
    """A classic pcap file's header; None for any other file, or one that cannot be read (its reader says why)."""
    try:
        with Path(path).open("rb") as stream:
            head = stream.read(24)
    except OSError:
        return None
    return head if len(head) == 24 and head[:4] in _MAGICS else None


def read_records(path: str, ports: frozenset[int], tls_ports: frozenset[int],
                 tap: Callable[[float, bytes, int], None] | None = None) -> Iterator[TcpSegment | CaptureNotice]:
    """A classic pcap file's segments, each record read whole whatever the snap length its header gives
    (libpcap cuts every frame to it; tshark does not), a chunk at a time; then the damage found, if any."""
    chunks, notices = plan(path, READ_CHUNK)
    keep = FrameFilter(ports, tls_ports)  # one for the file: its notices once, its port hint at the end
    frame, ts = 0, 0.0
    for chunk in chunks:
        for item in segments(chunk, ports, tls_ports, tap, keep):
            if isinstance(item, CaptureNotice):
                yield item
            else:
                frame, ts = item[0].frame, item[0].ts
                yield item[0]
    yield from notices
    hint = keep.port_hint(frame, ts)
    if hint is not None:
        yield hint


def segments(chunk: Chunk, ports: frozenset[int], tls_ports: frozenset[int] = TLS_PORTS,
             tap: Callable[[float, bytes, int], None] | None = None, keep: FrameFilter | None = None
             ) -> Iterator[tuple[TcpSegment, int] | CaptureNotice]:
    """The TCP segments of one chunk's frames (frame numbers as in the whole file), each with the file offset
    of its payload (-1 in a pcapng file, read by libpcap), and the notices the whole-file reader gives.
    ``keep``: the filter to use (one per file when a reader goes through all its chunks)."""
    if not chunk.endian:  # pcapng: libpcap reads it whole
        for item in read_segments(chunk.path, ports, tls_ports):
            yield item if isinstance(item, CaptureNotice) else (item, -1)
        return
    record = struct.Struct(chunk.endian + "IIII")
    keep = keep or FrameFilter(ports, tls_ports)
    with Path(chunk.path).open("rb") as stream:
        stream.seek(chunk.start)
        data = stream.read(chunk.end - chunk.start)
    pos, frame = 0, chunk.first_frame
    nanos = chunk.resolution == NANOSECOND  # the tap (a copy) then gets the exact time, the segment the float
    while pos + 16 <= len(data):
        seconds, fraction, captured, wire = record.unpack_from(data, pos)
        start = pos + 16
        pos = start + captured
        ts = seconds + fraction * chunk.resolution
        if tap is not None:
            tap(FrameTime(seconds * NANOS + fraction) if nanos else ts, data[start:pos], wire)
        kept = keep(parse_frame(chunk.linktype, data[start:pos], wire, frame, ts), frame, ts)
        frame += 1
        if isinstance(kept, TcpSegment):
            yield kept, chunk.start + start + kept.payload_at
        elif kept is not None:
            yield kept

"""``dcpctl analyze`` on Spark: captures to a Parquet dataset of messages, then the analyses.

Theory of operation. The driver plans chunks: every pcap file is cut at record boundaries into pieces of
about 64 MiB (a pcapng file is one piece). Each task reads its piece and parses its frames into TCP
segments (the capture reader's own parser), keyed by (connection, frame number). Spark shuffles them by
connection and sorts each connection's segments by frame (spilling to disk when they do not fit), and each
task then streams through its sorted connections, feeding each to a fresh :class:`CaptureDecoder`: the
reassembly, framing, decoding and connection tracking of ``dcpctl decode``, unchanged. So many files are
decoded at once, one big file by many tasks, and no task holds more than a piece or a sorted run of one
connection. The messages become rows (``schema``) written as Parquet under ``--out``; the analyses are
DataFrame queries over that dataset (``analyses``).
"""

from __future__ import annotations

import shutil
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from dcpctl.pipeline import schema
from dcpctl.protocol.message import DecodeOptions, Message
from dcpctl.protocol.registry import DIALECTS
from dcpctl.sources.capture import CaptureDecoder
from dcpctl.sources.pcap import TcpSegment
from dcpctl.sources.pcapchunks import DEFAULT_CHUNK, Chunk, plan, segments

SNAPSHOT_MARKER = 0x56


class SparkUnavailableError(Exception):
    """pyspark or a Java runtime is missing; the message says how to get it."""


def check_runtime() -> None:
    try:
        import pyspark  # noqa: F401, PLC0415
    except ImportError:
        raise SparkUnavailableError("analyze needs PySpark: pip install 'dcpctl[spark]'") from None
    import os  # noqa: PLC0415

    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))):
        raise SparkUnavailableError("analyze needs a Java runtime (17 or newer) for Spark: on Debian or Ubuntu, "
                               "apt-get install default-jre-headless; or set JAVA_HOME")


def spark_session(master: str | None, app: str = "dcpctl analyze") -> Any:
    import os  # noqa: PLC0415

    from pyspark.sql import SparkSession  # noqa: PLC0415

    if master is not None and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # one machine: no guessing at interfaces

    builder = SparkSession.builder.appName(app).config("spark.ui.enabled", "false") \
        .config("spark.ui.showConsoleProgress", "false") \
        .config("spark.sql.session.timeZone", "UTC").config("spark.sql.shuffle.partitions", "8")
    if master:
        builder = builder.master(master)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def spark_schema() -> Any:
    from pyspark.sql import types as t  # noqa: PLC0415

    def spark_type(kind: str) -> Any:
        if kind in ("u8", "u16"):
            return t.IntegerType()
        if kind in ("u32", "int"):
            return t.LongType()
        if kind == "u64":
            return t.DecimalType(20, 0)
        if kind == "float":
            return t.DoubleType()
        if kind == "list[int]":
            return t.ArrayType(t.LongType())
        if kind == "list[u64]":
            return t.ArrayType(t.DecimalType(20, 0))
        if kind == "list[str]":
            return t.ArrayType(t.StringType())
        return t.StringType()

    return t.StructType([t.StructField(name, spark_type(kind), nullable=True) for name, kind in schema.COLUMNS])


def connection_key(segment: TcpSegment) -> str:
    a, b = sorted((segment.src, segment.dst))
    return f"{a[0]}:{a[1]}-{b[0]}:{b[1]}"


def keyed_segments(chunk: Chunk, ports: frozenset[int]) -> Iterator[tuple[tuple[str, str, int], TcpSegment]]:
    """A chunk's segments keyed by (file, connection, frame): what the shuffle sorts on."""
    for item in segments(chunk, ports):
        if isinstance(item, TcpSegment):
            yield (chunk.path, connection_key(item), item.frame), item


def options_of(spec: tuple[str, bool | None, bool]) -> DecodeOptions:
    """Decode options from plain values (dialect name, collections, show secrets): what a task is sent, as
    the options themselves hold compiled layouts that do not pickle."""
    dialect, collections, show_secrets = spec
    return DecodeOptions(DIALECTS[dialect], collections, show_secrets)


def decode_connections(rows: Iterable[tuple[tuple[str, str, int], TcpSegment]],
                       spec: tuple[str, bool | None, bool], ports: frozenset[int]) -> Iterator[tuple[Any, ...]]:
    """Sorted (file, connection, frame) -> segment pairs to message rows, one decoder per connection."""
    options = options_of(spec)
    current: tuple[str, str] | None = None
    decoder: CaptureDecoder | None = None
    snapshots: dict[tuple[str, int], tuple[int, int]] = {}
    for (path, conn, _frame), segment in rows:
        if (path, conn) != current:
            if decoder is not None:
                yield from _rows(decoder.finish(), snapshots)
            current, decoder, snapshots = (path, conn), CaptureDecoder(options, ports), {}
        assert decoder is not None
        yield from _rows(decoder.feed(segment), snapshots)
    if decoder is not None:
        yield from _rows(decoder.finish(), snapshots)


def _rows(items: Iterable[Any], snapshots: dict[tuple[str, int], tuple[int, int]]) -> Iterator[tuple[Any, ...]]:
    for item in items:
        if not isinstance(item, Message):
            continue
        snapshot = None
        record = item.record()
        stream = (str(record.get("connection")), item.opaque)
        if item.opcode == SNAPSHOT_MARKER and not item.is_response:
            start, end = record.get("snap_start_seqno"), record.get("snap_end_seqno")
            if isinstance(start, int) and isinstance(end, int):
                snapshots[stream] = (start, end)
        elif "by_seqno" in record and not item.is_response:
            snapshot = snapshots.get(stream)
        yield schema.row(item, snapshot)


def partitions_for(paths: list[str], chunk_bytes: int) -> tuple[list[Chunk], list[str]]:
    chunks: list[Chunk] = []
    notes: list[str] = []
    for path in paths:
        found, notices = plan(path, chunk_bytes)
        chunks += found
        notes += [f"{path}: {n.message}" for n in notices]
    return chunks, notes


def build(session: Any, paths: list[str], ports: frozenset[int], options: DecodeOptions,
          chunk_bytes: int = DEFAULT_CHUNK) -> tuple[Any, list[str]]:
    """The messages DataFrame of some captures, and notes about damage found while planning."""
    chunks, notes = partitions_for(paths, chunk_bytes)
    context = session.sparkContext
    tasks = max(1, context.defaultParallelism)
    keyed = context.parallelize(chunks, max(1, len(chunks))).flatMap(lambda c: keyed_segments(c, ports))
    ordered = keyed.repartitionAndSortWithinPartitions(
        tasks, partitionFunc=lambda key: zlib.crc32(f"{key[0]}|{key[1]}".encode()))
    spec = (options.dialect.name, options.collections, options.show_secrets)
    rows = ordered.mapPartitions(lambda part: decode_connections(part, spec, ports))
    return session.createDataFrame(rows, spark_schema()), notes

"""``dcpctl analyze`` on Spark: captures to a Parquet dataset of messages, then the analyses.

Theory of operation. The driver plans chunks: every pcap file is cut at record boundaries into pieces of
about 64 MiB (a pcapng file is one piece). Stage one (``mapInArrow``, one task per chunk) reads a piece
and parses its frames into TCP segments with the capture reader's own parser, as Arrow rows keyed by
(file, connection, frame). Spark shuffles them by (file, connection) and sorts each partition by that key
and the frame number, in the JVM, spilling to disk when a partition does not fit. Stage two
(``mapInArrow`` again) streams through each partition's sorted connections, feeding each to a fresh
:class:`CaptureDecoder`: the reassembly, framing, decoding and connection tracking of ``dcpctl decode``,
unchanged, and turns its messages into rows (``schema``) as Arrow batches, which Spark writes as Parquet
under ``--out``. The analyses are DataFrame queries over that dataset (``analyses``).

So many files are decoded at once, one big file by many tasks, and no task holds more than a piece, a
batch of segments or rows, and the state of the connection it is decoding. Rows and segments cross between
the JVM and Python as Arrow columns, never as pickled Python objects, which is what makes the job
faster than one process rather than slower. A connection is decoded by one task (its state is
sequential), so the parallelism of stage two is the number of connections.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
from collections.abc import Iterable, Iterator
from typing import Any, Final

from dcpctl.pipeline import schema
from dcpctl.protocol.message import DecodeOptions, Message
from dcpctl.protocol.registry import DIALECTS
from dcpctl.sources.capture import CaptureDecoder
from dcpctl.sources.pcap import TcpSegment
from dcpctl.sources.pcapchunks import DEFAULT_CHUNK, Chunk, plan, segments

ROWS_PER_BATCH: Final = 8192  # rows handed to Spark at a time: a few MB of Arrow, whatever the capture
SEGMENTS_PER_BATCH: Final = 4096  # TCP segments per Arrow batch out of stage one (up to ~6 MB of payload)
# The collector's first generation runs after this many allocations while a task decodes (Python's default
# is 700). Decoding makes millions of short-lived, acyclic objects (messages, rows), so the default spends
# about a third of the task's time scanning objects it never frees; memory stays bounded by the batches.
DECODE_GC_THRESHOLD: Final = 100_000
# Stage two's partitions: at least this many, so that connections spread over the cores (a partition is
# decoded by one task; empty ones cost nothing). More cores get four partitions each.
MIN_PARTITIONS: Final = 32

CHUNK_SCHEMA: Final = ("path string, start long, end long, first_frame long, linktype int, endian string, "
                       "resolution double")
SEGMENT_COLUMNS: Final = (("file", "string"), ("connection", "string"), ("frame", "long"), ("ts", "double"),
                          ("src_host", "string"), ("src_port", "int"), ("dst_host", "string"), ("dst_port", "int"),
                          ("seq", "long"), ("ack", "long"), ("flags", "int"), ("payload", "binary"),
                          ("truncated", "boolean"), ("wire_length", "long"))
# catalogue type -> Spark SQL type (u64: Spark's long is signed, so decimal(20,0), as Spark reads Parquet's UINT_64)
SPARK_TYPES: Final = {"u8": "int", "u16": "int", "u32": "long", "int": "long", "u64": "decimal(20,0)",
                      "float": "double", "str": "string", "list[int]": "array<long>",
                      "list[diagnostic]": "array<struct<name:string,severity:string,message:string>>"}


class SparkUnavailableError(Exception):
    """pyspark or a Java runtime is missing; the message says how to get it."""


def check_runtime() -> None:
    try:
        import pyarrow  # noqa: F401, PLC0415
        import pyspark  # noqa: F401, PLC0415
    except ImportError:
        raise SparkUnavailableError("analyze needs PySpark with Arrow: pip install 'dcpctl[spark]'") from None
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))):
        raise SparkUnavailableError("analyze needs a Java runtime (17 or newer) for Spark: on Debian or Ubuntu, "
                                    "apt-get install default-jre-headless; or set JAVA_HOME")


def spark_session(master: str | None, app: str = "dcpctl analyze") -> Any:
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


def message_ddl(*, records: bool = False) -> str:
    """The Spark schema of the message rows, from :func:`schema.column_types`."""
    return ", ".join(f"{name} {SPARK_TYPES[kind]}" for name, kind in schema.column_types(records=records))


def connection_key(segment: TcpSegment) -> str:
    a, b = sorted((segment.src, segment.dst))
    return f"{a[0]}:{a[1]}-{b[0]}:{b[1]}"


def options_of(spec: tuple[str, bool | None, bool]) -> DecodeOptions:
    """Decode options from plain values (dialect name, collections, show secrets): what a task is sent, as
    the options themselves hold compiled layouts that do not pickle."""
    dialect, collections, show_secrets = spec
    return DecodeOptions(DIALECTS[dialect], collections, show_secrets)


# --- stage one: chunks to segments ------------------------------------------------------------------
def chunk_segments(chunk: Chunk, ports: frozenset[int]) -> Iterator[tuple[Any, ...]]:
    """One chunk's TCP segments as rows in :data:`SEGMENT_COLUMNS` order."""
    for item in segments(chunk, ports):
        if isinstance(item, TcpSegment):
            yield (chunk.path, connection_key(item), item.frame, item.ts, item.src[0], item.src[1], item.dst[0],
                   item.dst[1], item.seq, item.ack, item.flags, item.payload, item.truncated, item.wire_length)


def _segment_batches(batches: Iterable[Any], ports: frozenset[int]) -> Iterator[Any]:
    arrow = _arrow_types(SEGMENT_COLUMNS)
    for batch in batches:
        for row in batch.to_pylist():
            buffer = []
            for segment in chunk_segments(Chunk(**row), ports):
                buffer.append(segment)
                if len(buffer) >= SEGMENTS_PER_BATCH:
                    yield _to_arrow(buffer, arrow)
                    buffer = []
            if buffer:
                yield _to_arrow(buffer, arrow)


# --- stage two: sorted segments to message rows -----------------------------------------------------
def decode_connections(segments_in: Iterable[tuple[Any, ...]], spec: tuple[str, bool | None, bool],
                       ports: frozenset[int], rows: schema.Rows) -> Iterator[None]:
    """Segment rows sorted by (file, connection, frame) into ``rows``, one decoder per connection; yields
    whenever rows were added, so the caller can hand them over in batches."""
    options = options_of(spec)
    current: tuple[str, str] | None = None
    decoder: CaptureDecoder | None = None
    for (path, connection, frame, ts, src_host, src_port, dst_host, dst_port, seq, ack, flags, payload, truncated,
         wire_length) in segments_in:
        if (path, connection) != current:
            if decoder is not None:
                _add(rows, decoder, decoder.finish())
                yield None
            current = (path, connection)
            decoder = CaptureDecoder(options, ports, items=None if rows.records else rows.item)
        assert decoder is not None
        _add(rows, decoder, decoder.feed(TcpSegment(ts, frame, (src_host, src_port), (dst_host, dst_port), seq, ack,
                                                    flags, payload, truncated, wire_length)))
        yield None
    if decoder is not None:
        _add(rows, decoder, decoder.finish())
        yield None


def _add(rows: schema.Rows, decoder: CaptureDecoder, items: Iterable[Any]) -> None:
    add = rows.add
    for item in items:
        if isinstance(item, Message):
            tracker = decoder.last_tracker
            assert tracker is not None
            add(item, tracker.unacked, tracker.buffer_size)


def _message_batches(batches: Iterable[Any], spec: tuple[str, bool | None, bool], ports: frozenset[int],
                     records: bool) -> Iterator[Any]:
    arrow = _arrow_types([(name, SPARK_TYPES[kind]) for name, kind in schema.column_types(records=records)])
    rows = schema.Rows(records=records)

    def segment_rows() -> Iterator[tuple[Any, ...]]:
        for batch in batches:
            yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)

    with _relaxed_gc():
        for _ in decode_connections(segment_rows(), spec, ports, rows):
            if len(rows.rows) >= ROWS_PER_BATCH:
                yield _to_arrow(rows.take(), arrow)
        if rows.rows:
            yield _to_arrow(rows.take(), arrow)


@contextlib.contextmanager
def _relaxed_gc() -> Iterator[None]:
    """See :data:`DECODE_GC_THRESHOLD`; the previous thresholds come back afterwards."""
    previous = gc.get_threshold()
    gc.set_threshold(DECODE_GC_THRESHOLD, *previous[1:])
    try:
        yield
    finally:
        gc.set_threshold(*previous)


# --- Arrow -------------------------------------------------------------------------------------------
def _arrow_types(columns: Iterable[tuple[str, str]]) -> list[tuple[str, Any, Any]]:
    """(name, Arrow type to build the column with, Arrow type Spark expects) per column."""
    import pyarrow as pa  # noqa: PLC0415

    diagnostic = pa.struct([("name", pa.string()), ("severity", pa.string()), ("message", pa.string())])
    simple = {"string": pa.string(), "long": pa.int64(), "int": pa.int32(), "double": pa.float64(),
              "binary": pa.binary(), "boolean": pa.bool_(), "array<long>": pa.list_(pa.int64()),
              "array<struct<name:string,severity:string,message:string>>": pa.list_(diagnostic)}
    out = []
    for name, ddl in columns:
        if ddl == "decimal(20,0)":  # built as unsigned 64-bit integers, then cast (exact, in C++)
            out.append((name, pa.uint64(), pa.decimal128(20, 0)))
        else:
            out.append((name, simple[ddl], simple[ddl]))
    return out


def _to_arrow(rows: list[tuple[Any, ...]], types: list[tuple[str, Any, Any]]) -> Any:
    import pyarrow as pa  # noqa: PLC0415

    arrays = []
    for (_, build, spark), values in zip(types, zip(*rows, strict=True), strict=True):
        array = pa.array(values, build)
        arrays.append(array if build is spark else array.cast(spark))
    return pa.RecordBatch.from_arrays(arrays, names=[name for name, _, _ in types])


# --- the plan ----------------------------------------------------------------------------------------
def partitions_for(paths: list[str], chunk_bytes: int) -> tuple[list[Chunk], list[str]]:
    chunks: list[Chunk] = []
    notes: list[str] = []
    for path in paths:
        found, notices = plan(path, chunk_bytes)
        chunks += found
        notes += [f"{path}: {n.message}" for n in notices]
    return chunks, notes


def build(session: Any, paths: list[str], ports: frozenset[int], options: DecodeOptions,
          chunk_bytes: int = DEFAULT_CHUNK, *, records: bool = False) -> tuple[Any, list[str]]:
    """The messages DataFrame of some captures, and notes about damage found while planning."""
    chunks, notes = partitions_for(paths, chunk_bytes)
    context = session.sparkContext
    rows = [(c.path, c.start, c.end, c.first_frame, c.linktype, c.endian, c.resolution) for c in chunks]
    chunk_frame = session.createDataFrame(context.parallelize(rows, max(1, len(rows))), CHUNK_SCHEMA)
    segment_ddl = ", ".join(f"{name} {ddl}" for name, ddl in SEGMENT_COLUMNS)
    segment_frame = chunk_frame.mapInArrow(lambda batches: _segment_batches(batches, ports), segment_ddl)
    partitions = max(MIN_PARTITIONS, 4 * context.defaultParallelism)
    ordered = segment_frame.repartition(partitions, "file", "connection") \
        .sortWithinPartitions("file", "connection", "frame")
    spec = (options.dialect.name, options.collections, options.show_secrets)
    messages = ordered.mapInArrow(lambda batches: _message_batches(batches, spec, ports, records),
                                  message_ddl(records=records))
    return messages, notes

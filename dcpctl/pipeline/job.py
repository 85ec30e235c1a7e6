"""``dcpctl analyze`` on Spark: captures to a Parquet dataset of messages, then the analyses.

Theory of operation. The driver plans chunks: every pcap file is cut at record boundaries into pieces of
about 64 MiB (a pcapng file is one piece). Stage one (``mapInArrow``, one task per chunk) reads a piece
and parses its frames into TCP segments with the capture reader's own parser. Each segment is an Arrow row
keyed by (file, connection, frame), which carries where its payload lies in the file rather than the
payload itself (a pcapng piece, read by libpcap, carries the bytes). The reader's notices (a TLS port, a
malformed frame) travel as rows of their own. Spark shuffles the rows by (file, connection) and sorts each
partition by that key and the frame number, in the JVM, spilling to disk when a partition does not fit.
Stage two (``mapInArrow`` again) streams through each partition's sorted connections. It reads each
payload back from the file and feeds each connection to a fresh :class:`CaptureDecoder`: the reassembly,
framing, decoding and connection tracking of ``dcpctl decode``, unchanged, with its fast path for plain
stream items. The messages become rows (``schema``) in Arrow batches, which the task writes as its own
Parquet file under ``--out`` with Arrow's writer (Spark's row-by-row writer cost more than the decoding).
It then hands the driver one summary row: messages written and the notices. The analyses are DataFrame
queries over the dataset read back (``analyses``).

So many files are decoded at once, one big file by many tasks, and no task holds more than a piece, a
batch of segments or rows, and the state of the connection it is decoding; only segment metadata crosses
the shuffle. Rows and segments cross between the JVM and Python as Arrow columns, never as pickled Python
objects. A connection is decoded by one task (its state is sequential), so the parallelism of stage two is
the number of connections. The captures and ``--out`` must be on a filesystem every executor sees (any
path in local mode; a shared mount on a cluster).
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from dcpctl.pipeline import schema
from dcpctl.protocol.diagnostic import Diagnostic
from dcpctl.protocol.framer import Skipped
from dcpctl.protocol.message import DecodeOptions, Message
from dcpctl.protocol.registry import DIALECTS
from dcpctl.render.output import notice_text
from dcpctl.sources.capture import CaptureDecoder, notice_diagnostic
from dcpctl.sources.pcap import CaptureNotice, TcpSegment
from dcpctl.sources.pcapchunks import DEFAULT_CHUNK, Chunk, plan, segments

ROWS_PER_BATCH: Final = 8192  # rows turned into Arrow at a time: a few MB, whatever the capture
# Rows per Parquet row group: Spark pays for each row group it scans, so not one per batch; 16 batches are a
# few tens of MB of Arrow held before writing.
ROWS_PER_GROUP: Final = 16 * ROWS_PER_BATCH
SEGMENTS_PER_BATCH: Final = 4096  # TCP segments per Arrow batch out of stage one (up to ~6 MB of payload)
# Stage two's partitions: at least this many, so that connections spread over the cores (a partition is
# decoded by one task; empty ones cost nothing). More cores get four partitions each.
MIN_PARTITIONS: Final = 32

CHUNK_SCHEMA: Final = ("path string, start long, end long, first_frame long, linktype int, endian string, "
                       "resolution double")
# payload: the bytes, only when payload_offset is -1 (pcapng); notice: a reader's notice instead of a segment
SEGMENT_COLUMNS: Final = (("file", "string"), ("connection", "string"), ("frame", "long"), ("ts", "double"),
                          ("src_host", "string"), ("src_port", "int"), ("dst_host", "string"), ("dst_port", "int"),
                          ("seq", "long"), ("ack", "long"), ("flags", "int"), ("payload", "binary"),
                          ("payload_offset", "long"), ("payload_length", "long"), ("truncated", "boolean"),
                          ("wire_length", "long"), ("notice", "string"))
SUMMARY_SCHEMA: Final = "partition int, messages long, notices array<string>"
PARQUET_COMPRESSION: Final = "zstd"  # a third of snappy's size here, and as fast to write
# catalogue type -> Spark SQL type. u64 -> bigint holding the 64 bits, as the JVM's DCP clients hold seqnos,
# uuids and CAS (Java has no unsigned long): exact, 8 bytes, and several times cheaper to scan than
# decimal(20,0) (which costs a BigInteger per value). A value above 2^63-1 reads as negative; in practice that
# is only end_seqno's 0xffffffffffffffff ("no end": -1). schema.U64_FIELDS lists these columns.
SPARK_TYPES: Final = {"u8": "int", "u16": "int", "u32": "long", "int": "long", "u64": "long",
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
    """One chunk's TCP segments and notices as rows in :data:`SEGMENT_COLUMNS` order."""
    for item in segments(chunk, ports):
        if isinstance(item, CaptureNotice):
            yield (chunk.path, "", item.frame, item.ts, "", 0, "", 0, 0, 0, 0, None, -1, 0, False, 0,
                   f"{chunk.path}: {notice_text(notice_diagnostic(item))}")
            continue
        segment, offset = item
        payload = segment.payload if offset < 0 else None  # pcapng: the bytes travel; pcap: where they lie
        yield (chunk.path, connection_key(segment), segment.frame, segment.ts, segment.src[0], segment.src[1],
               segment.dst[0], segment.dst[1], segment.seq, segment.ack, segment.flags, payload, offset,
               len(segment.payload), segment.truncated, segment.wire_length, None)


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
@dataclass
class _Payloads:
    """Reads payloads back from the capture files by offset (one descriptor per file, kept open)."""

    descriptors: dict[str, int] = field(default_factory=dict)

    def read(self, path: str, offset: int, length: int) -> bytes:
        descriptor = self.descriptors.get(path)
        if descriptor is None:
            descriptor = self.descriptors[path] = os.open(path, os.O_RDONLY)
        return os.pread(descriptor, length, offset)

    def close(self) -> None:
        for descriptor in self.descriptors.values():
            os.close(descriptor)
        self.descriptors.clear()


def decode_connections(segments_in: Iterable[tuple[Any, ...]], spec: tuple[str, bool | None, bool],
                       ports: frozenset[int], rows: schema.Rows, notices: list[str]) -> Iterator[None]:
    """Segment rows sorted by (file, connection, frame) into ``rows``, one decoder per connection, and the
    notices into ``notices``; yields whenever rows were added, so the caller can hand them over in batches."""
    options = options_of(spec)
    current: tuple[str, str] | None = None
    decoder: CaptureDecoder | None = None
    payloads = _Payloads()
    try:
        for (path, connection, frame, ts, src_host, src_port, dst_host, dst_port, seq, ack, flags, carried, at,
             length, truncated, wire_length, notice) in segments_in:
            if notice is not None:
                notices.append(notice)
                continue
            if (path, connection) != current:
                if decoder is not None:
                    _add(rows, decoder, decoder.finish(), notices, current)
                    yield None
                current = (path, connection)
                decoder = CaptureDecoder(options, ports, items=None if rows.records else rows.item)
            assert decoder is not None
            payload = carried if carried is not None else payloads.read(path, at, length)
            segment = TcpSegment(ts, frame, (src_host, src_port), (dst_host, dst_port), seq, ack, flags, payload,
                                 truncated, wire_length)
            _add(rows, decoder, decoder.feed(segment), notices, current)
            yield None
        if decoder is not None:
            _add(rows, decoder, decoder.finish(), notices, current)
            yield None
    finally:
        payloads.close()


def _add(rows: schema.Rows, decoder: CaptureDecoder, items: Iterable[Any], notices: list[str],
         where: tuple[str, str] | None) -> None:
    add = rows.add
    for item in items:
        if isinstance(item, Message):
            tracker = decoder.last_tracker
            assert tracker is not None
            add(item, tracker.unacked, tracker.buffer_size)
        elif isinstance(item, Skipped | Diagnostic) and where is not None:
            notices.append(f"{where[0]}: {where[1]}: {notice_text(item)}")


def _decode_partition(batches: Iterable[Any], spec: tuple[str, bool | None, bool], ports: frozenset[int],
                      records: bool, out: str) -> Iterator[Any]:
    """Stage two's task: its partition's messages written as one Parquet file under ``out`` (written under a
    temporary name, then renamed: a retried task replaces it whole), and one summary row for the driver."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415
    from pyspark import TaskContext  # noqa: PLC0415

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    attempt = context.attemptNumber() if context is not None else 0
    arrow = _arrow_types([(name, SPARK_TYPES[kind]) for name, kind in schema.column_types(records=records)])
    rows = schema.Rows(records=records)
    notices: list[str] = []
    final = os.path.join(out, f"part-{partition:05d}.parquet")
    temporary = os.path.join(out, f".part-{partition:05d}.attempt-{attempt}.parquet")
    writer: Any = None
    written = 0
    pending: list[Any] = []  # batches of the row group being gathered

    def segment_rows() -> Iterator[tuple[Any, ...]]:
        for batch in batches:
            yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)

    def flush(*, last: bool = False) -> None:
        nonlocal writer, written
        if rows.rows:
            pending.append(_to_arrow(rows.take(), arrow))
        if pending and (last or sum(b.num_rows for b in pending) >= ROWS_PER_GROUP):
            table = pa.Table.from_batches(pending)
            if writer is None:
                writer = pq.ParquetWriter(temporary, table.schema, compression=PARQUET_COMPRESSION)
            writer.write_table(table, row_group_size=table.num_rows)
            written += table.num_rows
            pending.clear()
            gc.collect()  # see _no_gc: what a row group's worth of decoding left in cycles, if anything

    try:
        with _no_gc():
            for _ in decode_connections(segment_rows(), spec, ports, rows, notices):
                if len(rows.rows) >= ROWS_PER_BATCH:
                    flush()
            flush(last=True)
        if writer is not None:
            writer.close()
            writer = None
            os.replace(temporary, final)
    finally:
        if writer is not None:
            writer.close()
            os.unlink(temporary)
    yield pa.RecordBatch.from_arrays([pa.array([partition], pa.int32()), pa.array([written], pa.int64()),
                                      pa.array([notices], pa.list_(pa.string()))],
                                     names=["partition", "messages", "notices"])


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic collector off while a task decodes; the task collects once per row group instead.

    Decoding makes millions of short-lived objects (segments, messages, rows) that reference counting
    frees; with the collector on, about a third of the task's time went to scanning them (measured: 7.4
    against 5.7 us a message), while a whole connection's decoding leaves a few dozen objects in cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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
        if name in schema.U64_COLUMNS:  # built as unsigned 64-bit integers, then reinterpreted (SPARK_TYPES)
            out.append((name, pa.uint64(), pa.int64()))
        else:
            out.append((name, simple[ddl], simple[ddl]))
    return out


def _to_arrow(rows: list[tuple[Any, ...]], types: list[tuple[str, Any, Any]]) -> Any:
    import pyarrow as pa  # noqa: PLC0415

    arrays = []
    for (_, build, spark), values in zip(types, zip(*rows, strict=True), strict=True):
        array = pa.array(values, build)
        arrays.append(array if build is spark else array.cast(spark, safe=False))  # u64's bits, kept as they are
    return pa.RecordBatch.from_arrays(arrays, names=[name for name, _, _ in types])


# --- the plan ----------------------------------------------------------------------------------------
def partitions_for(paths: list[str], chunk_bytes: int) -> tuple[list[Chunk], list[str]]:
    chunks: list[Chunk] = []
    notes: list[str] = []
    for path in paths:
        found, notices = plan(path, chunk_bytes)
        chunks += found
        notes += [f"{path}: {notice_text(notice_diagnostic(n))}" for n in notices]
    return chunks, notes


@dataclass
class Result:
    """What :func:`run` wrote: where, how many messages, and the notices (damage, TLS, skipped bytes)."""

    dataset: Path
    messages: int
    notices: list[str]


def run(session: Any, paths: list[str], ports: frozenset[int], options: DecodeOptions, out: Path,
        chunk_bytes: int = DEFAULT_CHUNK, *, records: bool = False) -> Result:
    """Decode some captures into a Parquet dataset at ``out`` (replaced)."""
    chunks, notes = partitions_for(paths, chunk_bytes)
    out = out.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    context = session.sparkContext
    chunk_rows = [(c.path, c.start, c.end, c.first_frame, c.linktype, c.endian, c.resolution) for c in chunks]
    chunk_frame = session.createDataFrame(context.parallelize(chunk_rows, max(1, len(chunk_rows))), CHUNK_SCHEMA)
    segment_ddl = ", ".join(f"{name} {ddl}" for name, ddl in SEGMENT_COLUMNS)
    segment_frame = chunk_frame.mapInArrow(lambda batches: _segment_batches(batches, ports), segment_ddl)
    partitions = max(MIN_PARTITIONS, 4 * context.defaultParallelism)
    ordered = segment_frame.repartition(partitions, "file", "connection") \
        .sortWithinPartitions("file", "connection", "frame")
    spec = (options.dialect.name, options.collections, options.show_secrets)
    where = str(out)
    summaries = ordered.mapInArrow(lambda batches: _decode_partition(batches, spec, ports, records, where),
                                   SUMMARY_SCHEMA).collect()
    notices = notes + [n for row in sorted(summaries, key=lambda r: r.partition) for n in row.notices]
    return Result(out, sum(row.messages for row in summaries), notices)


def read(session: Any, result: Result, *, records: bool = False) -> Any:
    """The messages dataset :func:`run` wrote, with its declared schema (an empty capture is an empty frame)."""
    return session.read.schema(message_ddl(records=records)).parquet(result.dataset.as_uri())

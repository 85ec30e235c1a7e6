"""``dcpctl analyze`` on Spark: captures to a Parquet dataset of messages, then the analyses.

Theory of operation. The driver plans chunks: every pcap file is cut at record boundaries into pieces of about
64 MiB (a pcapng file is one piece); on the way it weighs the TCP connections from a sample of the frames.
Stage one (one task per chunk) reads a piece and parses its frames into TCP segments with the capture reader's
own parser. It packs each connection's consecutive segments into runs keyed by (capture, connection, first
frame): the capture is the file, or for a file that continues the one before (a ring of files) the first file
of the ring, whose frames are numbered on through the ring. A run carries each segment's metadata and where
its payload lies in the file, not the payload itself; a pcapng piece, read by libpcap, carries the bytes. The
reader's notices (a TLS port, a malformed frame) travel as runs of their own. Spark shuffles the runs to the
partition :class:`Placement` chose for their connection (heaviest connections first, spread so that the cores
finish together; Spark's hash of the connection names put two or three of six equal connections in one
partition) and sorts each partition by the key. Stage two streams through each partition's sorted connections.
It unpacks the runs, reads each payload back from the file and feeds each connection to a fresh
:class:`CaptureDecoder`: the reassembly, framing, decoding and connection tracking of ``dcpctl decode``,
unchanged: each message is read once, by the decoder. The messages become rows (``schema``) in Arrow batches,
which the task writes as its own Parquet file under ``--out`` with Arrow's writer (Spark's row-by-row writer
cost more than the decoding). The same batches give the analyses' partial results (``rollup``). The task then
hands the driver one summary: messages written, the notices and those partials, which ``analyses`` merges;
what needs every row across tasks (duplicates, the plots' progress) is a DataFrame query over the dataset read
back.

So many files are decoded at once, one big file by many tasks, and no task holds more than a piece, a
batch of runs or rows, and the state of the connection it is decoding; only segment metadata crosses the
shuffle (about a thousand runs per GB, as pickled tuples: too few for Arrow to pay). A connection is
decoded by one task (its state is sequential), so the parallelism of stage two is the number of
connections. The captures and ``--out`` must be on a filesystem every executor sees (any path in local
mode; a shared mount on a cluster).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import gc
import heapq
import os
import re
import shutil
import socket
import struct
import tempfile
import threading
import urllib.parse
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from dcpctl.dcp.observed import Observed
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.pipeline import jvmcache, plots, rollup, schema
from dcpctl.protocol.diagnostic import Diagnostic
from dcpctl.protocol.framer import Skipped
from dcpctl.protocol.message import DecodeOptions
from dcpctl.protocol.registry import DIALECTS
from dcpctl.render.output import notice_text
from dcpctl.sources.capture import CaptureDecoder, notice_diagnostic
from dcpctl.sources.parallel import usable_cores
from dcpctl.sources.pcap import CaptureNotice, FileFrames, Ring, TcpSegment
from dcpctl.sources.pcapchunks import DEFAULT_CHUNK, Chunk, Endpoints, plan, segments

# Rows turned into Arrow, and through the partial aggregates, at a time, whatever the capture. Each batch costs
# the aggregates' kernels a fixed time, so batches are large; larger still would only hold more memory.
ROWS_PER_BATCH: Final = 32768
# Rows per Parquet row group: Spark pays for each row group it scans, so not one per batch; 4 batches are a
# few tens of MB of Arrow held before writing.
ROWS_PER_GROUP: Final = 4 * ROWS_PER_BATCH
# Stage two's partitions for weighed connections, and again for the others, per core (Placement): enough
# for the load to even out across the cores, few enough that a task's start-up stays small.
SLOTS_PER_CORE: Final = 4

# Stage one's rows: runs of one connection's consecutive segments (or a reader's notice). ``segments`` packs
# each segment as RUN_SEGMENT; ``payloads`` holds the payloads of a pcapng run (a pcap run says where they lie
# in the file instead). Spark then shuffles and sorts a row per run, not per segment: a thousandth of the rows.
RUN_FIELDS: Final = ("capture", "connection", "first_frame", "a_host", "a_port", "b_host", "b_port", "segments",
                     "payloads", "notice", "file")
# ts, frame, seq, ack, TCP flags, whether the source is endpoint a, payload offset in the file (-1: in
# ``payloads``), payload length, length on the wire, cut by the snap length. The pipeline's own transport
# format for TCP segment metadata between its stages: nothing of the DCP wire format is restated in it.
RUN_SEGMENT: Final = struct.Struct("<dQIIBBqIIB")
RUN_SEGMENTS: Final = 4096  # segments per run: a run row is then about 170 KB of metadata
RUN_PAYLOAD_BYTES: Final = 8 * 1024 * 1024  # payload bytes a pcapng run carries at most
# How the tasks write Parquet: what Spark reads fastest (benchmarks/README.md). Snappy, not zstd (half the size,
# but slower to decompress); a dictionary only for the low-cardinality strings (pyarrow's default, a
# dictionary for every column, makes Spark's scans slower).
PARQUET_COMPRESSION: Final = "snappy"
PARQUET_DICTIONARY: Final = ("connection", "direction", "magic", "opcode", "status")
# catalogue type -> Spark SQL type. u64 -> bigint holding the 64 bits, as the JVM's DCP clients hold seqnos,
# uuids and CAS (Java has no unsigned long): exact, 8 bytes, and several times cheaper to scan than
# decimal(20,0) (which costs a BigInteger per value). A value above 2^63-1 reads as negative; in practice that
# is only end_seqno's 0xffffffffffffffff ("no end": -1). schema.U64_COLUMNS lists these columns.
SPARK_TYPES: Final = {"u8": "int", "u16": "int", "u32": "long", "int": "long", "u64": "long",
                      "float": "double", "bool": "boolean", "str": "string", "list[int]": "array<long>",
                      "list[diagnostic]": "array<struct<name:string,severity:string,message:string>>"}


# The driver JVM compiles with C1 only. In local mode it shares the cores with the Python tasks, which do the
# work; its own work (scheduling, a shuffle of run metadata, the analyses' scans of the dataset) is small, and
# C2's compiler threads would take CPU from the tasks (benchmarks/README.md has the figures). On a cluster
# the executors' JVMs keep their own settings.
DRIVER_JIT: Final = "-XX:TieredStopAtLevel=1"


class SparkUnavailableError(Exception):
    """pyspark or a Java runtime is missing; the message says how to get it."""


# The masters Spark's launcher accepts (it says: "yarn or start with spark, k8s, or local"); another makes the
# JVM exit with a stack trace, so analyze refuses it first.
_MASTER: Final = re.compile(r"yarn|local(\[(\*|[1-9][0-9]*)(,[0-9]+)?\])?|local-cluster\[[0-9]+,[0-9]+,[0-9]+\]"
                            r"|(spark|k8s)://\S+")
# Seconds a spark:// master has to accept a TCP connection, checked before Spark starts: a master on a
# reachable network answers in well under a second, where Spark's own client retries for 60 s (three
# 20-second attempts, fixed in Spark) and then fails with pages of stack traces. --master-timeout.
MASTER_TIMEOUT: Final = 10.0
# Task threads local[N] may ask for, per usable core: each runs a Python worker, so local[99999] started
# threads until the kernel refused, minutes later, and local[512] on two cores had the JVM killed for memory
LOCAL_THREADS_PER_CORE: Final = 4
MIN_LOCAL_THREADS: Final = 8  # (what a small machine may still ask for)
# Python exceptions of a failed task that mean a capture could not be read (exit 3), not a bug (exit 1)
_INPUT_ERRORS: Final = frozenset({"FileNotFoundError", "PermissionError", "IsADirectoryError", "NotADirectoryError",
                                  "OSError", "EOFError"})


class OutputError(OSError):
    """A task could not write its Parquet file into --out (a full disk, a quota): said naming --out."""


class MasterError(CommandError):
    """A --master that is no master (exit 2), or one that refused (5) or did not answer (6)."""


def master_endpoints(master: str) -> list[tuple[str, int]]:
    """The host and port of each master of ``master`` (spark://HOST:PORT[,HOST:PORT...], a k8s:// API server;
    none for the other kinds); MasterError when ``master`` is not one Spark accepts, or yarn without the
    environment Spark finds the cluster by."""
    if not _MASTER.fullmatch(master):
        raise MasterError(f"--master {master}: not a Spark master (local[*], local[N], spark://HOST:PORT, "
                          "yarn or k8s://URL)", ExitCode.USAGE)
    local = re.fullmatch(r"local\[([0-9]+)(,[0-9]+)?\]", master)
    most = max(MIN_LOCAL_THREADS, LOCAL_THREADS_PER_CORE * usable_cores())
    if local is not None and int(local.group(1)) > most:
        raise MasterError(f"--master {master}: at most {most} task threads on this machine ({LOCAL_THREADS_PER_CORE} "
                          f"per core; local[*] is one per core)", ExitCode.USAGE)
    if master == "yarn" and not (os.environ.get("HADOOP_CONF_DIR") or os.environ.get("YARN_CONF_DIR")):
        # Spark's launcher would say so in a stack trace, after its JVM started
        raise MasterError("--master yarn: neither HADOOP_CONF_DIR nor YARN_CONF_DIR is set (Spark finds the "
                          "cluster's ResourceManager through one of them)", ExitCode.USAGE)
    if master.startswith("k8s://"):  # k8s://[https://]HOST[:PORT], the API server (443 by default)
        url = urllib.parse.urlsplit(master.removeprefix("k8s://") if "://" in master.removeprefix("k8s://")
                                    else "https://" + master.removeprefix("k8s://"))
        try:
            api_port = url.port or (80 if url.scheme == "http" else 443)
        except ValueError:
            api_port = None
        if not url.hostname or api_port is None:
            raise MasterError(f"--master {master}: not k8s://[https://]HOST[:PORT]", ExitCode.USAGE)
        return [(url.hostname, api_port)]
    if not master.startswith("spark://"):
        return []
    endpoints = []
    for part in master.removeprefix("spark://").split(","):
        host, _, port = part.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise MasterError(f"--master {master}: {part} is not HOST:PORT", ExitCode.USAGE)
        endpoints.append((host, int(port)))
    return endpoints


def reach_master(master: str, timeout: float = MASTER_TIMEOUT) -> None:
    """Nothing if ``master`` is a kind Spark accepts and, for spark://, one of its masters accepts a TCP
    connection within ``timeout`` seconds; else MasterError saying why, in one line."""
    failures = []
    for host, port in master_endpoints(master):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except TimeoutError:
            failures.append((f"{host}:{port}: no answer in {timeout:g} s (--master-timeout)", True))
        except OSError as exc:
            failures.append((f"{host}:{port}: {(exc.strerror or str(exc)).lower()}", False))
    if failures:
        raise MasterError(f"--master {master}: cannot reach the master: "
                          + "; ".join(text for text, _ in failures),
                          ExitCode.TIMEOUT if all(timed_out for _, timed_out in failures) else ExitCode.CONNECTION)


@contextlib.contextmanager
def master_deadline(master: str | None, timeout: float = MASTER_TIMEOUT) -> Iterator[list[bool]]:
    """While Spark starts with a spark:// ``master``: once its JVM is up, the master has ``timeout`` seconds
    to take the application, else the JVM is killed (so the start fails at once) and the list yielded
    holds True. A master that accepts connections but is no Spark master (or a stuck one) would otherwise
    cost Spark's client its 60 s of retries."""
    expired: list[bool] = []
    if master is None or not master.startswith("spark://"):
        yield expired
        return
    from pyspark import SparkContext  # noqa: PLC0415

    done = threading.Event()

    def watch() -> None:
        while SparkContext._gateway is None:  # the JVM's own start is not the master's time
            if done.wait(0.1):
                return
        if done.wait(timeout):
            return
        process = getattr(SparkContext._gateway, "proc", None)
        if process is not None:
            expired.append(True)
            with contextlib.suppress(OSError):
                process.kill()

    watcher = threading.Thread(target=watch, name="dcpctl master deadline", daemon=True)
    watcher.start()
    try:
        yield expired
    finally:
        done.set()
        watcher.join()


def spark_errors() -> tuple[type[Exception], ...]:
    """What PySpark raises when Spark fails: its own errors (a task's among them), py4j's (the JVM's), and
    the socket's when py4j finds the JVM gone."""
    from py4j.protocol import Py4JError  # noqa: PLC0415
    from pyspark.errors import PySparkException  # noqa: PLC0415

    return (PySparkException, Py4JError, ConnectionError)


def failure(exc: Exception) -> tuple[str, bool]:
    """One of :func:`spark_errors` as one line, and whether it means an input could not be read (True)
    rather than a bug. A task's Python exception travels in the JVM's, as its traceback: its last line
    says what happened."""
    text = str(exc)
    if "Traceback (most recent call last):" in text:
        unindented = [line for line in text.splitlines() if line.strip() and not line[0].isspace()]
        last = unindented[-1].strip()
        name, _, message = last.partition(":")
        if name.rpartition(".")[2] == OutputError.__name__:  # the task said what it could not write
            return message.strip(), True
        return f"a Spark task failed: {last}", name in _INPUT_ERRORS
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return f"Spark failed: {first}", False


def check_runtime() -> None:
    try:
        import pyarrow  # noqa: F401, PLC0415
        import pyspark  # noqa: F401, PLC0415
    except ImportError:
        raise SparkUnavailableError("analyze needs PySpark with Arrow: pip install 'dcpctl[spark]'") from None
    java_home = os.environ.get("JAVA_HOME")
    if java_home and not os.access(os.path.join(java_home, "bin", "java"), os.X_OK):  # Spark runs JAVA_HOME's
        raise SparkUnavailableError(f"JAVA_HOME={java_home} has no bin/java, and Spark runs JAVA_HOME's java: "
                                    "point it at a Java runtime (17 or newer), or unset it to use the java on PATH")
    if shutil.which("java") is None and not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))):
        raise SparkUnavailableError("analyze needs a Java runtime (17 or newer) for Spark: on Debian or Ubuntu, "
                                    "apt-get install default-jre-headless; or set JAVA_HOME")


def scratch_directory() -> str | None:
    """A directory of the process's own under TMPDIR for Spark's scratch files (its local directory and the
    driver JVM's ``java.io.tmpdir``), removed as the process exits whatever happened: Spark removes its
    ``spark-*`` directories only from the JVM's shutdown hook, which a JVM killed by --master-timeout never
    runs. None when Spark's JVM already runs (its directories are chosen) or SPARK_LOCAL_DIRS chooses them."""
    if jvm_started() or os.environ.get("SPARK_LOCAL_DIRS"):
        return None
    path = tempfile.mkdtemp(prefix="dcpctl-spark-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@contextlib.contextmanager
def _launch_environment(scratch: str | None) -> Iterator[None]:
    """SPARK_LOCAL_DIRS for the JVM pyspark launches (which takes this process's environment) and the
    Python workers it starts: spark.local.dir would do the same but makes Spark warn on standard error."""
    if scratch is None:
        yield
        return
    os.environ["SPARK_LOCAL_DIRS"] = scratch
    try:
        yield
    finally:
        del os.environ["SPARK_LOCAL_DIRS"]


def spark_session(master: str | None, app: str = "dcpctl analyze", java_options: str = "",
                  scratch: str | None = None) -> Any:
    """Spark's session (an existing one, as getOrCreate finds it); ``java_options``: more options for the
    driver JVM's command line, if this starts it (``jvmcache``); ``scratch``: where its scratch files go
    (:func:`scratch_directory`)."""
    from pyspark.sql import SparkSession  # noqa: PLC0415

    if master is not None and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # one machine: no guessing at interfaces

    log4j = Path(__file__).with_name("log4j2.properties")
    if scratch is not None:
        java_options = f"-Djava.io.tmpdir={scratch} {java_options}"
    driver_options = f"-Dlog4j2.configurationFile={log4j.as_uri()} {DRIVER_JIT} {java_options}".strip()
    settings = {"spark.app.name": app, "spark.ui.enabled": "false", "spark.driver.extraJavaOptions": driver_options,
                "spark.ui.showConsoleProgress": "false", "spark.sql.session.timeZone": "UTC",
                "spark.sql.shuffle.partitions": "8", **({"spark.master": master} if master else {})}
    if not jvm_started():  # the JVM's standard error without its incubator notice (jvmcache.launch)
        with _launch_environment(scratch):
            jvmcache.launch(settings)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def under_submit() -> bool:
    """Whether this process is spark-submit's Python driver (spark-submit started the JVM and chose the master)."""
    return "SPARK_SUBMIT_OPTS" in os.environ or "PYSPARK_GATEWAY_PORT" in os.environ


def jvm_started() -> bool:
    """Whether this process already has Spark's JVM (an earlier session, or spark-submit's)."""
    from pyspark import SparkContext  # noqa: PLC0415

    return SparkContext._gateway is not None or under_submit()


def quiet_jvm(session: Any) -> None:
    """After a Ctrl-C: nothing more from the JVM on standard error. Its log goes off, and so does its
    ``System.err``, where a thread that stopping Spark interrupts (the task-result getter, fetching a
    result) prints its stack trace without going through the log."""
    context = session.sparkContext
    context.setLogLevel("OFF")
    jvm = context._jvm
    jvm.java.lang.System.setErr(jvm.java.io.PrintStream(jvm.java.io.OutputStream.nullOutputStream()))


def spark_identity() -> str:
    """What a class-data archive of Spark's classes depends on, besides Java: pyspark's version and home."""
    import pyspark  # noqa: PLC0415

    return f"{pyspark.__version__}\0{Path(pyspark.__file__).parent}\0{os.environ.get('SPARK_HOME', '')}"


def end_jvm(archive: jvmcache.ClassArchive, *, save: bool = True) -> Path | None:
    """After the session stopped: end the JVM this process started, for ``archive`` to be saved (see
    ``jvmcache``; ``save`` false: killed, saving nothing); a later session in this process starts a new JVM.
    Returns where the archive went."""
    from pyspark import SparkContext  # noqa: PLC0415

    gateway = SparkContext._gateway
    SparkContext._gateway = None
    SparkContext._jvm = None
    return archive.finish(gateway, save=save)


def message_ddl(*, records: bool = False) -> str:
    """The Spark schema of the message rows, from :func:`schema.column_types`."""
    return ", ".join(f"{name} {SPARK_TYPES[kind]}" for name, kind in schema.column_types(records=records))


def options_of(spec: tuple[str, bool | None, bool]) -> DecodeOptions:
    """Decode options from plain values (dialect name, collections, show secrets): what a task is sent, as
    the options themselves hold compiled layouts that do not pickle."""
    dialect, collections, show_secrets = spec
    return DecodeOptions(DIALECTS[dialect], collections, show_secrets)


# --- stage one: chunks to runs of segments -----------------------------------------------------------
@dataclass
class _Run:
    key: str
    a: tuple[str, int]
    b: tuple[str, int]
    first_frame: int
    records: list[bytes] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    payload_bytes: int = 0

    def row(self, path: str, capture: str) -> tuple[Any, ...]:
        return (capture, self.key, self.first_frame, self.a[0], self.a[1], self.b[0], self.b[1],
                b"".join(self.records), b"".join(self.payloads) if self.payloads else None, None, path)


def chunk_runs(chunk: Chunk, ports: frozenset[int]) -> Iterator[tuple[Any, ...]]:
    """One chunk's TCP segments as runs of each connection's consecutive segments, and its notices, as rows
    in :data:`RUN_FIELDS` order. A connection's runs come out in frame order, numbered in its capture."""
    runs: dict[str, _Run] = {}
    keys: dict[tuple[tuple[str, int], tuple[str, int]], tuple[str, tuple[str, int], tuple[str, int]]] = {}
    pack = RUN_SEGMENT.pack
    capture, base = chunk.capture or chunk.path, chunk.frame_base
    for item in segments(chunk, ports):
        if isinstance(item, CaptureNotice):
            yield (capture, "", base + item.frame, "", 0, "", 0, b"", None,
                   f"{chunk.path}: {notice_text(notice_diagnostic(item))}", chunk.path)
            continue
        segment, offset = item
        ends = (segment.src, segment.dst)
        known = keys.get(ends)
        if known is None:
            a, b = sorted(ends)
            known = keys[ends] = (connection_key(a, b), a, b)
        key, a, b = known
        run = runs.get(key)
        if run is None:
            run = runs[key] = _Run(key, a, b, base + segment.frame)
        run.records.append(pack(segment.ts, base + segment.frame, segment.seq, segment.ack, segment.flags,
                                segment.src == a, offset, len(segment.payload), segment.wire_length,
                                segment.truncated))
        if offset < 0:  # pcapng: the bytes travel with the run
            run.payloads.append(segment.payload)
            run.payload_bytes += len(segment.payload)
        if len(run.records) >= RUN_SEGMENTS or run.payload_bytes >= RUN_PAYLOAD_BYTES:
            yield run.row(chunk.path, capture)
            del runs[key]
    for run in runs.values():
        yield run.row(chunk.path, capture)


def connection_key(a: tuple[str, int], b: tuple[str, int]) -> str:
    """A connection's name in the runs (and the dataset's ``connection`` column), its lower end first."""
    return f"{a[0]}:{a[1]}-{b[0]}:{b[1]}"


@dataclass(frozen=True)
class Placement:
    """Which stage-two partition decodes each connection. The connections the planner weighed are spread
    over ``weighed`` partitions, heaviest first onto the least loaded, and the partitions are numbered
    heaviest first (Spark starts tasks in partition order, so the longest start first). A connection the
    planner did not see (a small one, between its samples, or any in a pcapng file) goes to one of
    ``spare`` more partitions by a hash of its name."""

    partitions: dict[tuple[str, str], int]
    weighed: int
    spare: int

    @staticmethod
    def of(weights: dict[tuple[str, str], int], slots: int) -> Placement:
        weighed = min(len(weights), slots)
        loads = [0] * weighed
        lightest = [(0, i) for i in range(weighed)]  # a heap of (load, partition)
        chosen: dict[tuple[str, str], int] = {}
        for key, weight in sorted(weights.items(), key=lambda item: (-item[1], item[0])):
            load, least = heapq.heappop(lightest)
            chosen[key] = least
            loads[least] = load + weight
            heapq.heappush(lightest, (loads[least], least))
        rank = {old: new for new, old in enumerate(sorted(range(weighed), key=lambda i: (-loads[i], i)))}
        return Placement({key: rank[i] for key, i in chosen.items()}, weighed, slots)

    @property
    def count(self) -> int:
        return self.weighed + self.spare

    def __call__(self, capture: str, connection: str) -> int:
        found = self.partitions.get((capture, connection))
        if found is not None:
            return found
        return self.weighed + zlib.crc32(f"{capture}\0{connection}".encode()) % self.spare


def _keyed_runs(chunks: Iterable[Chunk], ports: frozenset[int], placement: Placement
                ) -> Iterator[tuple[tuple[int, str, str, int], tuple[Any, ...]]]:
    """Stage one's task: each run keyed by (its partition, capture, connection, first frame)."""
    for chunk in chunks:
        for run in chunk_runs(chunk, ports):
            yield (placement(run[0], run[1]), run[0], run[1], run[2]), run


def segments_of(runs: Iterable[tuple[Any, ...]], notices: list[str]) -> Iterator[tuple[str, str, TcpSegment]]:
    """Run rows sorted by (capture, connection, first frame) back to (capture, connection, segment), in frame
    order; notices into ``notices``. Payloads are read back from the file where a pcap run says they lie."""
    payloads = _Payloads()
    try:
        for capture, connection, _, a_host, a_port, b_host, b_port, packed, carried, notice, path in runs:
            if notice is not None:
                notices.append(notice)
                continue
            a, b = (a_host, a_port), (b_host, b_port)
            cursor = 0
            for ts, frame, seq, ack, flags, from_a, at, length, wire_length, truncated in \
                    RUN_SEGMENT.iter_unpack(packed):
                if at < 0:
                    payload = carried[cursor:cursor + length]
                    cursor += length
                else:
                    payload = payloads.read(path, at, length)
                source, destination = (a, b) if from_a else (b, a)
                yield capture, connection, TcpSegment(ts, frame, source, destination, seq, ack, flags, payload,
                                                      bool(truncated), wire_length)
    finally:
        payloads.close()


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


def decode_connections(segments_in: Iterable[tuple[str, str, TcpSegment]], spec: tuple[str, bool | None, bool],
                       ports: frozenset[int], rows: schema.Rows, notices: list[str]) -> Iterator[None]:
    """(capture, connection, segment) in (capture, connection, frame) order into ``rows``, one decoder per
    connection, and the decoders' notices into ``notices``; yields whenever rows were added, so the caller
    can hand them over in batches."""
    options = options_of(spec)
    current: tuple[str, str] | None = None
    decoder: CaptureDecoder | None = None
    for capture, connection, segment in segments_in:
        if (capture, connection) != current:
            if decoder is not None:
                _add(rows, decoder, decoder.finish(), notices, current)
                yield None
            current = (capture, connection)
            decoder = CaptureDecoder(options, ports)
        assert decoder is not None
        _add(rows, decoder, decoder.feed(segment), notices, current)
        yield None
    if decoder is not None:
        _add(rows, decoder, decoder.finish(), notices, current)
        yield None


def _add(rows: schema.Rows, decoder: CaptureDecoder, items: Iterable[Any], notices: list[str],
         where: tuple[str, str] | None) -> None:
    add = rows.add
    for item in items:
        if isinstance(item, Observed):
            tracker = decoder.last_tracker
            assert tracker is not None
            add(item, tracker.unacked, tracker.buffer_size)
        elif isinstance(item, Skipped | Diagnostic) and where is not None:
            notices.append(f"{where[0]}: {where[1]}: {notice_text(item)}")


def _writing(exc: OSError, out: str) -> bool:
    """Whether an error a task met came from writing into ``out``: a file there, or a disk that filled."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS) or os.path.join(out, "") in str(exc) or (
        "Error writing bytes" in str(exc))  # pyarrow's words, its errno only in the text


def _decode_partition(runs: Iterable[tuple[Any, ...]], spec: tuple[str, bool | None, bool], ports: frozenset[int],
                      records: bool, out: str, stall_ms: float) -> Iterator[tuple[int, int, list[str], bytes]]:
    """Stage two's task: its partition's messages written as one Parquet file under ``out`` (written under a
    temporary name, then renamed: a retried task replaces it whole), and one summary row for the driver with
    the partial results of the analyses (``rollup``)."""
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
    partials = rollup.Partials()

    def flush(*, last: bool = False) -> None:
        nonlocal writer, written
        if len(rows):
            batch = gathered_to_arrow(rows.take(), arrow)
            partials.extend(rollup.partial(batch, stall_ms))
            pending.append(batch)
        if pending and (last or sum(b.num_rows for b in pending) >= ROWS_PER_GROUP):
            table = pa.Table.from_batches(pending)
            if writer is None:
                writer = pq.ParquetWriter(temporary, table.schema, compression=PARQUET_COMPRESSION,
                                          use_dictionary=list(PARQUET_DICTIONARY))
            writer.write_table(table, row_group_size=table.num_rows)
            written += table.num_rows
            pending.clear()
            gc.collect()  # see _no_gc: what a row group's worth of decoding left in cycles, if anything

    try:
        with _no_gc():
            for _ in decode_connections(segments_of(runs, notices), spec, ports, rows, notices):
                if len(rows) >= ROWS_PER_BATCH:
                    flush()
            flush(last=True)
        if writer is not None:
            writer.close()
            writer = None
            os.replace(temporary, final)
    except OSError as exc:  # pyarrow's write errors are OSErrors too; a capture that cannot be read is not here
        if isinstance(exc, OutputError) or not _writing(exc, out):
            raise
        raise OutputError(f"--out {out}: cannot write {os.path.basename(final)}: "
                          f"{exc.strerror or str(exc).splitlines()[0]}") from None
    finally:
        if writer is not None:
            writer.close()
            os.unlink(temporary)
    yield partition, written, notices, orjson.dumps(dataclasses.asdict(partials))


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic collector off while a task decodes; the task collects once per row group instead.

    Decoding makes millions of short-lived objects (segments, messages, rows) that reference counting
    frees; with the collector on, about a third of the task's time went to scanning them (measured: 7.4
    against 5.7 us a message), while a whole connection's decoding leaves a few dozen objects in cycles."""
    enabled = gc.isenabled()
    gc.disable()
    gc.freeze()  # what exists before the task (modules, Spark's and Arrow's objects) is never scanned again
    try:
        yield
    finally:
        gc.unfreeze()
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


def gathered_to_arrow(rows: list[tuple[Any, ...]], types: list[tuple[str, Any, Any]]) -> Any:
    """Rows (``schema.Rows.take``) as one Arrow record batch of the Spark types: the rows converted as one
    struct array, in Arrow's C++ (twice as fast as a Python zip of the rows into columns), then split."""
    import pyarrow as pa  # noqa: PLC0415

    names = [name for name, _, _ in types]
    if not rows:
        return pa.RecordBatch.from_pylist([], schema=pa.schema([(name, spark) for name, _, spark in types]))
    built = pa.array(rows, pa.struct([(name, build) for name, build, _ in types])).flatten()
    arrays = [array if build is spark else array.cast(spark, safe=False)  # u64's bits, kept as they are
              for array, (_, build, spark) in zip(built, types, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, names=names)


# --- the plan ----------------------------------------------------------------------------------------
@dataclass
class Plan:
    """The captures cut into chunks, the planner's notices, and each connection's weight: (capture, connection)
    -> bytes estimated from sampled frames (:func:`~dcpctl.sources.pcapchunks.plan`)."""

    chunks: list[Chunk]
    notes: list[str]
    weights: dict[tuple[str, str], int]


def partitions_for(paths: list[str], chunk_bytes: int) -> Plan:
    """The plan of :func:`run`. Of several files, one that continues the one before (a ring of files, told
    by :class:`~dcpctl.sources.pcap.Ring` as ``read_files`` tells it) continues its capture: its chunks name
    that capture and number their frames on from it, so its connections are decoded on from where the file
    before left them."""
    chunks: list[Chunk] = []
    notes: list[str] = []
    weights: dict[tuple[str, str], int] = {}
    several = len(paths) > 1
    ring, capture = Ring(), ""
    for path in paths:
        sampled: dict[Endpoints, int] = {}
        frames = FileFrames() if several else None
        found, notices = plan(path, chunk_bytes, sampled, frames)
        if frames is not None and ring.begins(frames):
            found = [dataclasses.replace(chunk, capture=capture, frame_base=ring.base) for chunk in found]
        else:
            capture = path
        if frames is not None:
            ring.ends(frames)
        chunks += found
        notes += [f"{path}: {notice_text(notice_diagnostic(n))}" for n in notices]
        for (a, b), weight in sampled.items():
            key = (capture, connection_key(a, b))
            weights[key] = weights.get(key, 0) + weight
    return Plan(chunks, notes, weights)


# The file that marks a directory as a dataset dcpctl wrote, so the next run may replace it (Spark skips
# files whose names start with a dot). A directory without it is never deleted: --out . or --out ~ by
# mistake must not cost the user their files.
DATASET_MARKER: Final = ".dcpctl-dataset"
MARKER_TEXT: Final = "a dataset dcpctl analyze wrote, complete; the next run into this directory replaces it\n"
# The marker while a run writes: a run stopped before its end (Ctrl-C, a full disk) leaves it, so a dataset
# that lacks some of its files does not read as a whole one.
MARKER_WRITING: Final = ("a dataset dcpctl analyze is writing, or whose run stopped before its end: incomplete; the "
                         "next run into this directory replaces it\n")
# What a run writes besides the marker (see _decode_partition): each task's Parquet file, and that file under
# its temporary name while it is written (and the whole marker's, while it replaces the marker). Replacing a
# dataset deletes these names, and the plots (plots.NAMES) of a --plots inside --out, and nothing else.
_WRITTEN: Final = re.compile(r"part-\d{5,}\.parquet|\.part-\d{5,}\.attempt-\d+\.parquet|"
                            + re.escape(DATASET_MARKER) + r"\.complete")


def replace_refusal(out: Path, inputs: Iterable[str] = ()) -> str | None:
    """Why ``out`` (as the user named it) must not receive a dataset (None: it may). It may when it does
    not exist, is empty, or is a dataset dcpctl wrote: the marker and the Parquet files of a run, all
    plain files, and nothing else. Refused: a symbolic link (what dcpctl would delete is elsewhere than
    the user named), a file, a directory holding anything else (but a directory of the plots a run wrote,
    ``--plots`` inside ``--out``), or one holding one of ``inputs``."""
    if out.is_symlink():
        return (f"--out {out!s}: is a symbolic link; give the directory itself (dcpctl does not replace "
                "a dataset through a link)")
    if not out.exists():
        return None
    if not out.is_dir():
        return f"--out {out!s}: exists and is not a directory"
    inside = out.resolve()
    for path in inputs:
        if inside in Path(path).resolve().parents:
            return (f"--out {out!s}: holds the input {path}; give another directory for the "
                    "dataset (dcpctl replaces what it wrote there)")
    with os.scandir(out) as listing:
        entries = list(listing)
    if not entries:
        return None
    marker = next((e for e in entries if e.name == DATASET_MARKER and e.is_file(follow_symlinks=False)), None)
    if marker is None:
        return (f"--out {out!s}: the directory holds files and is not a dataset dcpctl wrote (no "
                f"{DATASET_MARKER}); give a new or empty directory (dcpctl replaces only its own datasets)")
    others = sorted(e.name for e in entries if not (_written(e) or _plots_only(e)))
    if others:
        more = f" and {len(others) - 1} more" if len(others) > 1 else ""
        return (f"--out {out!s}: a dataset dcpctl wrote, but it also holds {others[0]}{more}, "
                "which dcpctl did not write; move them, or give a new or empty directory")
    return None


def _written(entry: os.DirEntry[str]) -> bool:
    """Whether ``entry`` is a plain file of a name a run writes (the marker, a task's Parquet file, a plot
    when --plots is --out itself)."""
    return entry.is_file(follow_symlinks=False) and (entry.name in (DATASET_MARKER, *plots.NAMES)
                                                     or _WRITTEN.fullmatch(entry.name) is not None)


def _plots_only(entry: os.DirEntry[str]) -> bool:
    """Whether ``entry`` is a directory of nothing but the plots a run wrote (``--plots`` inside ``--out``)."""
    if not entry.is_dir(follow_symlinks=False):
        return False
    with os.scandir(entry.path) as listing:
        return all(e.name in plots.NAMES and e.is_file(follow_symlinks=False) for e in listing)


def replace(out: Path, inputs: Iterable[str] = ()) -> Path:
    """Make ``out`` ready for a new dataset: refused as :func:`replace_refusal` says (FileExistsError),
    else created, or emptied of the files an earlier run wrote (one by one: never a tree, never through
    a link) with its marker kept. Returns the directory's absolute path, which the tasks write into."""
    refusal = replace_refusal(out, inputs)
    if refusal is not None:
        raise FileExistsError(refusal)
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    with os.scandir(out) as listing:
        entries = list(listing)
    for entry in entries:
        if _WRITTEN.fullmatch(entry.name) or entry.name in plots.NAMES:
            os.unlink(entry.path)
        elif entry.name != DATASET_MARKER:  # a directory of plots (replace_refusal allowed nothing else)
            found = [os.path.join(entry.path, name) for name in plots.NAMES]
            found = [path for path in found if os.path.lexists(path)]
            for path in found:
                os.unlink(path)
            if found:  # a directory that was empty is left: it is not known to be the plots'
                os.rmdir(entry.path)
    # O_NOFOLLOW: a link put there since the check is not written through
    descriptor = os.open(out / DATASET_MARKER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(descriptor, "w") as marker:
        marker.write(MARKER_WRITING)
    return out


def completed(out: Path) -> None:
    """Mark the dataset at ``out`` whole, once every task has written its file: the marker is replaced by
    a rename, so it says one or the other, never half."""
    written = out / f"{DATASET_MARKER}.complete"
    descriptor = os.open(written, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(descriptor, "w") as marker:
        marker.write(MARKER_TEXT)
    os.replace(written, out / DATASET_MARKER)


@dataclass
class Result:
    """What :func:`run` wrote: where, how many messages, the notices (damage, TLS, skipped bytes), and the
    analyses' partial results gathered while decoding (``rollup``)."""

    dataset: Path
    messages: int
    notices: list[str]
    partials: rollup.Partials = field(default_factory=rollup.Partials)


def run(session: Any, paths: list[str], ports: frozenset[int], options: DecodeOptions, out: Path,
        chunk_bytes: int = DEFAULT_CHUNK, *, records: bool = False, stall_ms: float = 1000.0,
        planned: Plan | None = None) -> Result:
    """Decode some captures into a Parquet dataset at ``out`` (replaced); ``stall_ms`` is the shortest
    flow-control stall the analyses list; ``planned``: :func:`partitions_for` already done (while Spark
    started, say)."""
    planned = planned if planned is not None else partitions_for(paths, chunk_bytes)
    out = replace(out, paths)
    context = session.sparkContext
    placement = Placement.of(planned.weights, SLOTS_PER_CORE * context.defaultParallelism)
    spec = (options.dialect.name, options.collections, options.show_secrets)
    where = str(out)
    summaries = context.parallelize(planned.chunks, max(1, len(planned.chunks))) \
        .mapPartitions(lambda chunks: _keyed_runs(chunks, ports, placement)) \
        .repartitionAndSortWithinPartitions(placement.count, lambda key: key[0]) \
        .mapPartitions(lambda keyed: _decode_partition((run for _, run in keyed), spec, ports, records, where,
                                                       stall_ms)) \
        .collect()
    summaries.sort(key=lambda summary: summary[0])
    partials = rollup.Partials()
    for _, _, _, partial in summaries:
        partials.extend(rollup.Partials(**orjson.loads(partial)))
    notices = planned.notes + [n for _, _, task_notices, _ in summaries for n in task_notices]
    completed(out)
    return Result(out, sum(messages for _, messages, _, _ in summaries), notices, partials)


def read(session: Any, result: Result, *, records: bool = False) -> Any:
    """The messages dataset :func:`run` wrote, with its declared schema (an empty capture is an empty frame)."""
    return session.read.schema(message_ddl(records=records)).parquet(result.dataset.as_uri())

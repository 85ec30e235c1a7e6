"""Spark's driver JVM started from a class-data archive: seconds off every ``analyze`` after the first.

Theory of operation. Starting Spark's driver JVM and running a first job loads, links and verifies
thousands of classes from Spark's jars, seconds of every run. Java's class-data sharing for applications
(JDK 13 and later) maps those classes from an archive instead, which takes about half as long
(benchmarks/README.md). An archive holds what one Java runtime loaded from one set of
jars, so its name holds a digest of both (the java executable's path, size and time; pyspark's version and
Spark's home): another Java or Spark gets its own archive, and the others are removed when it is saved.

The first run without an archive has the JVM write one when it exits (``-XX:ArchiveClassesAtExit``), under a
temporary name. When the command is done and its output written, :meth:`ClassArchive.finish` ends the JVM
itself, waits for the dump (once, seconds after a big run), and renames the file into place. A later
run therefore never maps a half-written archive, which would crash the JVM (a truncated one gives it SIGBUS,
with or without ``-XX:+VerifySharedSpaces``); the final name also holds the file's size, and a file of
another size is not used. A damaged archive of the right size would crash it too, so before Spark's JVM maps
an archive, ``java -version`` does (a fraction of a second): if that one crashes, the archive is deleted and this run
writes a new one. The JVM's own messages about archives (signed jars it skips, an archive it cannot use) are
switched off: an archive it cannot use is ignored, and the run is only as slow as without one.

Only when dcpctl starts the JVM itself: not under spark-submit, nor in a process whose JVM already runs.
``DCPCTL_JVM_CACHE=off`` turns it off; the archives live in ``$XDG_CACHE_HOME/dcpctl`` (``~/.cache/dcpctl``).

Spark's launcher always adds ``--add-modules=jdk.incubator.vector``, and the JVM then prints
``WARNING: Using incubator modules: jdk.incubator.vector`` on every start, with no option to silence it.
:func:`launch` starts the JVM with its standard error on a pipe that a thread copies to dcpctl's, line by
line, all but exactly that line: the JVM's real errors and Spark's log still reach the user. Its standard
output goes into the same pipe: the JVM writes its unified log there (every warning, unless told otherwise),
and dcpctl's standard output is the report alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

# Seconds to wait for the JVM to write the archive when it exits (every class it loaded): a JVM that
# takes longer is killed, and the run simply saves no archive.
ARCHIVE_WAIT: Final = 120.0
# Seconds for ``java -version`` on an archive before Spark's JVM maps it (normally well under one).
CHECK_WAIT: Final = 30.0
OFF_VALUES: Final = frozenset({"off", "0", "no", "false"})
# The JVM's unified-logging tags about archives: silent, whatever it finds (see the module docstring).
QUIET: Final = "-Xlog:cds*=off"
# Lines of the JVM's standard error that say nothing to a dcpctl user (see the module docstring)
NOISE: Final = frozenset({b"WARNING: Using incubator modules: jdk.incubator.vector"})
# Seconds to wait for the JVM's last lines to be copied once it has exited (a pipe drains in microseconds)
DRAIN_WAIT: Final = 5.0
_FINAL: Final = re.compile(r"spark-classes-([0-9a-f]{16})-([0-9]+)\.jsa")
_TEMPORARY: Final = re.compile(r"\.spark-classes-([0-9a-f]{16})\.([0-9]+)\.jsa")


@dataclass(frozen=True)
class ClassArchive:
    """What a run does about the archive: ``options`` for the driver JVM's command line, and, when this run
    makes the archive, where the JVM writes it (``writing``) and where it goes when complete (``directory``,
    ``digest``)."""

    options: str = ""
    writing: Path | None = None
    directory: Path | None = None
    digest: str = ""

    def finish(self, gateway: Any, *, save: bool = True) -> Path | None:
        """After the session is stopped and the output written: end the JVM (py4j's ``gateway``, whose
        ``proc`` pyspark started), wait for it to write the archive, and put the archive in place; with
        ``save`` false (the run failed or was interrupted), kill it instead, before it spends seconds on an
        archive. Returns where the archive went (None: this run makes none, or the JVM wrote none)."""
        if self.writing is None or self.directory is None:
            return None
        try:
            process = getattr(gateway, "proc", None)
            if process is None:
                return None
            if not save:
                with contextlib.suppress(OSError):
                    process.kill()
                    process.wait(ARCHIVE_WAIT)
            else:
                with contextlib.suppress(Exception):
                    gateway.shutdown()
            if process.stdin is not None:  # the gateway JVM exits when its standard input ends
                with contextlib.suppress(OSError):
                    process.stdin.close()
            if not save:
                return None
            try:
                code = process.wait(ARCHIVE_WAIT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                return None
            if code != 0:
                return None
            try:
                size = self.writing.stat().st_size
                final = self.directory / f"spark-classes-{self.digest}-{size}.jsa"
                if size > 0:
                    os.replace(self.writing, final)
            except OSError:  # not written, or gone (another machine's dcpctl sharing this home took it for abandoned)
                return None
            if size == 0:
                return None
            for other in self.directory.glob("spark-classes-*.jsa"):  # another Java's or Spark's
                if not other.name.startswith(f"spark-classes-{self.digest}-"):
                    with contextlib.suppress(OSError):
                        other.unlink()
            return final
        finally:
            with contextlib.suppress(OSError):
                self.writing.unlink()


def cache_directory(environ: Mapping[str, str]) -> Path | None:
    """Where archives live; None when ``DCPCTL_JVM_CACHE`` turns them off."""
    if environ.get("DCPCTL_JVM_CACHE", "").strip().lower() in OFF_VALUES:
        return None
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dcpctl"


def java_executable(environ: Mapping[str, str]) -> str | None:
    """The java that Spark's launcher runs (JAVA_HOME's, else the first on PATH), as a real path."""
    home = environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java", path=environ.get("PATH"))
    return os.path.realpath(found) if found and os.path.exists(found) else None


def digest(java: str, spark: str) -> str:
    """The archive's key: the java executable (path, size, time) and Spark (``spark``: version and home)."""
    stat = os.stat(java)
    return hashlib.sha256(f"{java}\0{stat.st_size}\0{stat.st_mtime_ns}\0{spark}".encode()).hexdigest()[:16]


def prepare(environ: Mapping[str, str], spark: str) -> ClassArchive:
    """The archive for the JVM about to start: one complete for this Java and this Spark (``spark``: its
    version and home) is used; else this run writes it. Nothing when turned off, when java cannot be found
    or the cache directory cannot be made."""
    directory = cache_directory(environ)
    java = java_executable(environ)
    if directory is None or java is None:
        return ClassArchive()
    key = digest(java, spark)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(directory)
        for found in directory.glob(f"spark-classes-{key}-*.jsa"):
            matched = _FINAL.fullmatch(found.name)
            if matched and found.stat().st_size == int(matched.group(2)):
                if usable(java, found):
                    return ClassArchive(f"-XX:SharedArchiveFile={found} {QUIET}")
                found.unlink()
        if not os.access(directory, os.W_OK):
            return ClassArchive()
    except OSError:
        return ClassArchive()
    writing = directory / f".spark-classes-{key}.{os.getpid()}.jsa"
    return ClassArchive(f"-XX:ArchiveClassesAtExit={writing} {QUIET}", writing, directory, key)


def usable(java: str, archive: Path) -> bool:
    """Whether ``java`` starts with ``archive`` mapped: a damaged archive crashes the JVM, and it had better
    crash in ``java -version`` (silently, with no error file) than as Spark's driver."""
    try:
        # S603: java is the one Spark's launcher runs (java_executable), the arguments are dcpctl's own
        done = subprocess.run([java, f"-XX:SharedArchiveFile={archive}", QUIET,  # noqa: S603
                               "-XX:ErrorFile=/dev/null", "-XX:-CreateCoredumpOnCrash", "-version"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=CHECK_WAIT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _remove_abandoned(directory: Path) -> None:
    """Temporary archives of runs that are no longer running (interrupted, or their JVM killed)."""
    for found in directory.glob(".spark-classes-*.jsa"):
        matched = _TEMPORARY.fullmatch(found.name)
        if matched is None or not _alive(int(matched.group(2))):
            with contextlib.suppress(OSError):
                found.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def copy_lines(source: int, sink: int, dropped: Iterable[bytes] = NOISE) -> None:
    """Copy file descriptor ``source`` to ``sink`` line by line, but for the lines in ``dropped``, until
    ``source`` ends; then close ``source``. A line is written as soon as it is whole."""
    dropped = frozenset(dropped)
    with os.fdopen(source, "rb") as lines:
        for line in lines:
            if line.rstrip(b"\r\n") not in dropped:
                with contextlib.suppress(OSError):  # standard error closed: the JVM's lines go nowhere
                    os.write(sink, line)


def launch(settings: Mapping[str, str]) -> Any:
    """Start Spark's JVM as pyspark would for a session with ``settings`` (spark.* properties), its standard
    output and error filtered by :func:`copy_lines` onto dcpctl's standard error (see the module docstring),
    and make it the process's gateway, which the session then uses. Returns the thread that copies the
    lines (it ends when the JVM does)."""
    from pyspark import SparkConf, SparkContext  # noqa: PLC0415
    from pyspark.java_gateway import launch_gateway  # noqa: PLC0415

    conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        conf.set(key, value)
    read, write = os.pipe()
    copier = threading.Thread(target=copy_lines, args=(read, 2), name="jvm-output", daemon=True)
    copier.start()  # before the JVM starts: a JVM that fails to start may say more than a pipe holds
    try:
        # its standard output too: the JVM's unified log (every warning, by default) would go into the report
        gateway = launch_gateway(conf, popen_kwargs={"stdout": write, "stderr": write})  # type: ignore[no-untyped-call]
    except BaseException:
        os.close(write)
        copier.join(DRAIN_WAIT)  # its last words before dcpctl's one line
        raise
    os.close(write)
    with SparkContext._lock:
        if SparkContext._gateway is None:
            SparkContext._gateway = gateway
            SparkContext._jvm = gateway.jvm
    return copier

"""``dcpctl analyze``: big captures decoded on Spark, written as Parquet, analysed."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from dcpctl.commands._options import env_of
from dcpctl.errortext import os_reason
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.pipeline import analyses, job, jvmcache, plots
from dcpctl.protocol.message import DecodeOptions
from dcpctl.render.analysis import print_report
from dcpctl.render.env import Environment
from dcpctl.render.output import notice_text
from dcpctl.safetext import shown
from dcpctl.sources.capture import notice_diagnostic
from dcpctl.sources.compressed import compressed, streamed
from dcpctl.sources.files import expand, unreadable
from dcpctl.sources.pcap import CaptureError, port_hint_of
from dcpctl.sources.pcapchunks import DEFAULT_CHUNK, check

DEFAULT_STALL_MS = 1000.0  # a full window that blocks the producer this long is worth a row in the report


class AnalyzeFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


def analyze(
    ctx: typer.Context,
    files: Annotated[list[str], typer.Argument(help="Captures (pcap, pcapng) or globs.", metavar="FILE")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for the Parquet dataset (an earlier dcpctl "
                                      "dataset there is replaced; a directory holding anything else is refused).",
                                      metavar="DIR")]
    = Path("dcpctl-analysis"),
    master: Annotated[str | None, typer.Option("--master", help="Spark master: local[*] (default), local[2], "
                                               "spark://host:7077, yarn. Under spark-submit, its own.",
                                               metavar="URL")] = None,
    fmt: Annotated[AnalyzeFormat | None, typer.Option("--format", "-F", help="table on a terminal, json when "
                                                      "piped.")] = None,
    plot_dir: Annotated[Path | None, typer.Option("--plots", help="Also write PNG plots here.", metavar="DIR")] = None,
    port: Annotated[list[int] | None, typer.Option("--port", "-p", help="Server port to decode (repeatable; "
                                                   "default 11210).", metavar="PORT", min=1, max=65535)] = None,
    records: Annotated[bool, typer.Option("--records", help="Also keep each message's whole JSON record "
                                          "(values included) in the dataset.")] = False,
    stall_ms: Annotated[float, typer.Option("--stall-ms", min=0, help="Report flow-control stalls at least this "
                                            "long.", metavar="MS")] = DEFAULT_STALL_MS,
    chunk_size: Annotated[int, typer.Option("--chunk-size", min=1 << 20, help="Bytes of capture per task.",
                                            metavar="BYTES")]
    = DEFAULT_CHUNK,
    master_timeout: Annotated[float, typer.Option("--master-timeout", min=0.1, help="Seconds a spark:// master "
                                                  "has to accept a connection.",
                                                  metavar="SECONDS")] = job.MASTER_TIMEOUT,
) -> None:
    """Decode captures in parallel on Spark into a Parquet dataset, then report on it.

    The report gives per vbucket seqno ranges, gaps, duplicates, rollbacks, stream-request latency,
    throughput and flow control."""
    env = env_of(ctx)
    paths = expand(files, env.warn)
    try:
        job.check_runtime()
    except job.SparkUnavailableError as exc:
        raise CommandError(str(exc), ExitCode.USAGE) from None
    if master is not None:  # before Spark starts: Spark's launcher and client fail slowly, in stack traces
        job.reach_master(master, master_timeout)
    ports = frozenset(port or [11210])
    failures: list[tuple[str, str]] = []  # files that do not open: every one named in the one error line
    for path in paths:  # before Spark starts: a bad input is a one-line error at once
        if path == "-":
            raise CommandError("analyze reads capture files, which Spark cuts into pieces: not standard input "
                               "(save it to a file, or use dcpctl decode -)", ExitCode.USAGE)
        if streamed(path):
            raise CommandError(f"{path}: a pipe: analyze reads capture files, which Spark cuts into pieces (save "
                               "it to a file, or use dcpctl decode)", ExitCode.USAGE)
        if compressed(path):  # named with the others that do not open: one run names every file to mend
            failures.append((path, "a compressed capture: analyze reads files Spark cuts into pieces, which "
                                   "compressed data cannot be (decompress it first, or use dcpctl decode)"))
            continue
        try:
            check(path)
        except FileNotFoundError:
            failures.append((path, "no such file"))
        except CaptureError as exc:
            failures.append((path, str(exc)))
        except OSError as exc:
            failures.append((path, os_reason(exc)))
    if failures:
        raise unreadable(failures)
    refusal = job.replace_refusal(out, paths)  # where the results go: checked before Spark starts
    if refusal is not None:
        raise CommandError(refusal, ExitCode.INPUT)
    for option, directory in (("--out", out), ("--plots", plot_dir)):
        why = _not_creatable(directory) if directory is not None else None
        if why is not None:
            raise CommandError(f"{option} {directory}: {why}", ExitCode.INPUT)
    # Spark's JVM starts from a class-data archive when there is one; the first run saves it (jvmcache)
    archive = jvmcache.ClassArchive() if job.jvm_started() else jvmcache.prepare(os.environ, job.spark_identity())
    done = False
    try:
        report = _on_spark(env, archive, paths, master, ports, out, chunk_size, plot_dir, records=records,
                           stall_ms=stall_ms, master_timeout=master_timeout)
        if env.output_format(fmt, AnalyzeFormat.TABLE, AnalyzeFormat.JSON) is AnalyzeFormat.JSON:
            env.stdout.write(json.dumps(report, default=str) + "\n")
        else:
            print_report(env.console(), report)
        env.stdout.flush()
        done = True
    finally:
        if archive.writing is not None:
            if done:
                env.stderr.write(f"dcpctl: saving Spark's JVM classes in {archive.directory} for faster starts "
                                 "(once; DCPCTL_JVM_CACHE=off turns this off)\n")
            job.end_jvm(archive, save=done)


def _on_spark(env: Environment, archive: jvmcache.ClassArchive, paths: list[str], master: str | None,
              ports: frozenset[int], out: Path, chunk_size: int, plot_dir: Path | None, *, records: bool,
              stall_ms: float, master_timeout: float = job.MASTER_TIMEOUT) -> dict[str, Any]:
    """Start Spark (planning the captures meanwhile), run the job and the analyses: the report."""
    # py4j logs (with a traceback) every call a Ctrl-C interrupts, then raises; the exception is what counts,
    # and dcpctl reports it in one line, so Python's logging goes nowhere while Spark runs
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.NullHandler())
    with ThreadPoolExecutor(1) as pool:  # the captures are planned while the JVM starts
        planning = pool.submit(job.partitions_for, paths, chunk_size)
        # Spark's start-up cannot be interrupted cleanly; a spark:// master has master_timeout to take the job
        with _ctrl_c_deferred() as interrupted, job.master_deadline(master, master_timeout) as expired:
            try:
                session = job.spark_session(master or ("local[*]" if not job.under_submit() else None),
                                            java_options=archive.options, scratch=job.scratch_directory())
            except job.spark_errors() as exc:
                if expired:
                    raise CommandError(f"--master {master}: the master did not take the application in "
                                       f"{master_timeout:g} s (--master-timeout)", ExitCode.TIMEOUT) from None
                raise _spark_failed(exc, starting=True) from None
        if interrupted:
            session.stop()
            raise KeyboardInterrupt
        try:
            planned = planning.result()
        except (CaptureError, OSError) as exc:
            session.stop()
            raise CommandError(str(exc), ExitCode.INPUT) from None
    try:
        try:
            result = job.run(session, paths, ports, DecodeOptions(), out, chunk_size, records=records,
                             stall_ms=stall_ms, planned=planned)
        except (CaptureError, FileExistsError) as exc:
            raise CommandError(str(exc), ExitCode.INPUT) from None
        except job.spark_errors():  # (py4j's socket errors among them: OSErrors, but not --out's)
            raise
        except OSError as exc:  # making --out
            raise CommandError(f"--out {out}: {exc.strerror or exc}", ExitCode.INPUT) from None
        errors = env.error_console()
        notices = result.notices
        if not result.messages:  # the tasks read chunks and cannot tell: decode's hint, from the driver
            hints = ((path, port_hint_of(path, ports)) for path in paths)
            notices = notices + [f"{path}: {notice_text(notice_diagnostic(hint))}" for path, hint in hints
                                 if hint is not None]
        for notice in notices:
            errors.print(f"dcpctl: {shown(notice)}", style="yellow", markup=False)
        report: dict[str, Any] = {"dataset": str(out)}
        report.update(analyses.report(job.read(session, result, records=records), result.partials,
                                      plots=plot_dir is not None))
        if plot_dir is not None:
            windows = {row["connection"]: row["buffer_size"] for row in report["flow_control"]}
            try:
                report["plots"] = [str(p) for p in plots.write(
                    plot_dir, report.pop("span"), report.pop("progress"), report["rollbacks"],
                    report["per_second"], report.pop("unacked"), windows)]
            except OSError as exc:
                raise CommandError(f"--plots {plot_dir}: {exc.strerror or exc} (the dataset is in {out})",
                                   ExitCode.INPUT) from None
    except job.spark_errors() as exc:
        raise _spark_failed(exc) from None
    except KeyboardInterrupt:
        # PySpark's own Ctrl-C handler has cancelled the job; the tasks die with it, and what the JVM would
        # say about that is not news to the user, who asked for it
        with contextlib.suppress(Exception):
            job.quiet_jvm(session)
        raise
    finally:
        with contextlib.suppress(*job.spark_errors()):  # a JVM gone already: its failure, if any, is said above
            session.stop()
    return report


def _spark_failed(exc: Exception, *, starting: bool = False) -> CommandError:
    """What PySpark or py4j raised as one line: exit 2 when Spark could not start (no JVM, a master that
    would not take the job), 3 when a task could not read a capture, else 1 (a task failed on a bug)."""
    if isinstance(exc, ConnectionError):  # py4j found the JVM gone: no bug of dcpctl's, no message of Spark's
        return CommandError("Spark's JVM went away (killed, or out of memory or threads: its log is above)",
                            ExitCode.USAGE if starting else ExitCode.FAILURE)
    message, input_error = job.failure(exc)
    if starting:
        return CommandError(f"Spark did not start: {message}", ExitCode.USAGE)
    if input_error:
        return CommandError(message, ExitCode.INPUT)
    return CommandError(f"{message} (a bug in dcpctl: please report it)", ExitCode.FAILURE)


def _not_creatable(directory: Path) -> str | None:
    """Why ``directory`` could not be made (None: it exists as a directory, or a directory can be made in its
    nearest existing ancestor). Tried, not judged by the permission bits, which root passes where no one may
    write (/proc) and which do not tell a read-only file system: a directory is made there and removed."""
    path = directory.resolve()
    while not path.exists():
        path = path.parent
    if not path.is_dir():
        return f"{path} is not a directory"
    if path != directory.resolve():
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".dcpctl-", dir=path))
        except OSError as exc:
            return f"cannot create a directory in {path} ({os_reason(exc)})"
    return None


@contextlib.contextmanager
def _ctrl_c_deferred() -> Iterator[list[bool]]:
    """A Ctrl-C while PySpark launches its JVM is noted, not raised: raised there, it leaves the JVM (which
    ignores Ctrl-C) writing its connection file into a directory PySpark has just removed, and the JVM's
    stack trace on the terminal. The caller stops the session and raises it once the start-up is over
    (a second of waiting or a few: how long the JVM takes to answer). PySpark installs its own Ctrl-C
    handler on the way (it cancels running jobs), which is then left in place."""
    noted: list[bool] = []

    def note(_signum: int, _frame: object) -> None:
        noted.append(True)

    try:
        previous = signal.signal(signal.SIGINT, note)
    except ValueError:  # not the main thread
        yield noted
        return
    try:
        yield noted
    finally:
        if signal.getsignal(signal.SIGINT) is note:
            signal.signal(signal.SIGINT, previous)


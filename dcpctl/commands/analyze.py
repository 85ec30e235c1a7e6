"""``dcpctl analyze``: big captures decoded on Spark, written as Parquet, analysed."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from dcpctl.commands._options import env_of
from dcpctl.commands.decode import expand
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.pipeline import analyses, job, plots
from dcpctl.protocol.message import DecodeOptions
from dcpctl.sources.pcap import CaptureError
from dcpctl.sources.pcapchunks import DEFAULT_CHUNK


class AnalyzeFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


def analyze(
    ctx: typer.Context,
    files: Annotated[list[str], typer.Argument(help="Captures (pcap, pcapng) or globs.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for the Parquet dataset (replaced).")]
    = Path("dcpctl-analysis"),
    master: Annotated[str | None, typer.Option("--master", help="Spark master: local[*] (default), local[2], "
                                               "spark://host:7077, yarn. Under spark-submit, its own.")] = None,
    fmt: Annotated[AnalyzeFormat | None, typer.Option("--format", "-F", help="table on a terminal, json when "
                                                      "piped.")] = None,
    plot_dir: Annotated[Path | None, typer.Option("--plots", help="Also write PNG plots here.")] = None,
    port: Annotated[list[int] | None, typer.Option("--port", "-p", help="Server port to decode (repeatable; "
                                                   "default 11210).")] = None,
    chunk_size: Annotated[int, typer.Option("--chunk-size", min=1 << 20, help="Bytes of capture per task.")]
    = DEFAULT_CHUNK,
) -> None:
    """Decode captures in parallel on Spark into a Parquet dataset, then report per vbucket seqno ranges,
    gaps, duplicates, rollbacks, stream-request latency, throughput and flow control."""
    env = env_of(ctx)
    paths = expand(files)
    try:
        job.check_runtime()
    except job.SparkUnavailableError as exc:
        raise CommandError(str(exc), ExitCode.USAGE) from None
    ports = frozenset(port or [11210])
    session = job.spark_session(master or ("local[*]" if not _under_submit() else None))
    try:
        try:
            messages, notes = job.build(session, paths, ports, DecodeOptions(), chunk_size)
        except (CaptureError, FileNotFoundError) as exc:
            raise CommandError(str(exc), ExitCode.INPUT) from None
        for note in notes:
            env.error_console().print(f"dcpctl: capture_gap: {note}", style="yellow", markup=False)
        messages.write.mode("overwrite").parquet(str(out))
        dataset = session.read.parquet(str(out))
        flow, unacked = analyses.flow_control(dataset)
        report: dict[str, Any] = {
            "dataset": str(out), "messages": dataset.count(), "vbuckets": analyses.vbuckets(dataset),
            "gaps": analyses.gaps(dataset), "duplicates": analyses.duplicates(dataset),
            "rollbacks": analyses.rollbacks(dataset), "latency": analyses.latency(dataset),
            "throughput": analyses.throughput(dataset), "flow_control": flow,
        }
        if plot_dir is not None:
            report["plots"] = [str(p) for p in plots.write(plot_dir, analyses.progress(dataset), report["rollbacks"],
                                                           report["throughput"], unacked)]
    finally:
        session.stop()
    if (fmt or (AnalyzeFormat.TABLE if env.stdout_isatty else AnalyzeFormat.JSON)) is AnalyzeFormat.JSON:
        env.stdout.write(json.dumps(report, default=str) + "\n")
        return
    _tables(env.console(), report)


def _under_submit() -> bool:
    import os  # noqa: PLC0415

    return "SPARK_SUBMIT_OPTS" in os.environ or "PYSPARK_GATEWAY_PORT" in os.environ


def _tables(console: Any, report: dict[str, Any]) -> None:
    console.print(f"{report['messages']} messages in {report['dataset']}")
    sections = [
        ("per vbucket", report["vbuckets"], ["connection", "vb", "items", "first_seqno", "last_seqno", "duplicates",
                                             "backwards", "outside_snapshot"]),
        ("seqno gaps", report["gaps"], ["connection", "vb", "previous", "by_seqno", "missing", "kind"]),
        ("duplicates", report["duplicates"], ["vb", "by_seqno", "times", "key", "connections"]),
        ("rollbacks", report["rollbacks"], ["ts", "connection", "vb", "start_seqno", "vbucket_uuid", "rollback_seqno"]),
        ("stream request latency (ms)", report["latency"], ["connection", "responses", "mean_ms", "p99_ms",
                                                            "max_ms"]),
        ("flow control", report["flow_control"], ["connection", "buffer_size", "max_unacked", "acks", "exceeded"]),
    ]
    for title, rows, columns in sections:
        if not rows:
            console.print(f"{title}: none")
            continue
        table = Table(*columns, title=title)
        for row in rows[:200]:
            table.add_row(*[str(row.get(c, "")) for c in columns])
        console.print(table)
        if len(rows) > 200:
            console.print(f"... {len(rows) - 200} more (--format json has them all)")
    for path in report.get("plots", []):
        console.print(f"plot: {path}")

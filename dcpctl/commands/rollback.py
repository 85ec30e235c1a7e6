"""``dcpctl rollback explain``: the server's rollback decision in plain words, then the client's retries."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.text import Text

from dcpctl.commands._options import env_of
from dcpctl.dcp.rollback import (
    IGNORE_PURGED_TOMBSTONES,
    STRICT_VB_UUID,
    StreamRequest,
    VbucketState,
    negotiate,
    parse_failover_log,
)
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.sources.files import open_input

rollback_app = typer.Typer(help="Explain and negotiate DCP rollbacks.", no_args_is_help=True)


class ExplainFormat(StrEnum):
    PRETTY = "pretty"
    JSON = "json"


def _int(value: str, option: str) -> int:
    try:
        number = int(value, 0)
    except ValueError:
        raise CommandError(f"{option}: not a number: {value!r}", ExitCode.USAGE) from None
    if number < 0:
        raise CommandError(f"{option}: must not be negative", ExitCode.USAGE)
    return number


@rollback_app.command("explain")
def explain(
    ctx: typer.Context,
    failover_log: Annotated[str, typer.Option("--failover-log", help="The server's failover log: JSON from "
                                              "dcpctl failover/decode, [{vbucket_uuid, seqno}] or [[uuid, seqno]], "
                                              "newest first; - for standard input.")],
    uuid: Annotated[str, typer.Option("--uuid", help="The vbucket uuid the client sends (decimal or 0x hex).")],
    start: Annotated[str, typer.Option("--start", help="The client's start seqno.")],
    snap_start: Annotated[str | None, typer.Option("--snap-start", help="Snapshot start (default: start).")]
    = None,
    snap_end: Annotated[str | None, typer.Option("--snap-end", help="Snapshot end (default: start).")] = None,
    high_seqno: Annotated[str | None, typer.Option(
        "--high-seqno", help="The vbucket's high seqno (default: the larger of start and the newest entry's seqno)."
    )] = None,
    purge_seqno: Annotated[str, typer.Option("--purge-seqno", help="The server's purge seqno.")] = "0",
    client_purge_seqno: Annotated[str | None, typer.Option(
        "--client-purge-seqno", help="The purge_seqno the client sends in the stream-request value.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Set the StrictVbUuid flag.")] = False,
    ignore_purged: Annotated[bool, typer.Option("--ignore-purged-tombstones",
                                                help="Set the IgnorePurgedTombstones flag.")] = False,
    vbucket: Annotated[int | None, typer.Option("--vbucket", help="Which vbucket, when the file holds several.")]
    = None,
    fmt: Annotated[ExplainFormat | None, typer.Option("--format", "-F", help="pretty (on a terminal) or json.")]
    = None,
) -> None:
    """Print the server's answer to a stream request with the rule that decided it, then each retry a
    correct client makes until the stream would open."""
    env = env_of(ctx)
    with open_input(failover_log, env.stdin) as stream:
        text = stream.read().decode("utf-8", "replace")
    try:
        log = parse_failover_log(json.loads(text), vbucket)
    except (ValueError, TypeError) as exc:
        raise CommandError(f"{failover_log}: {exc}", ExitCode.INPUT) from None
    if not log:
        raise CommandError(f"{failover_log}: the failover log is empty", ExitCode.INPUT)
    start_seqno = _int(start, "--start")
    high = _int(high_seqno, "--high-seqno") if high_seqno else max(start_seqno, log[0].seqno)
    flags = (STRICT_VB_UUID if strict else 0) | (IGNORE_PURGED_TOMBSTONES if ignore_purged else 0)
    request = StreamRequest(start_seqno, _int(uuid, "--uuid"),
                            _int(snap_start, "--snap-start") if snap_start else None,
                            _int(snap_end, "--snap-end") if snap_end else None, flags=flags,
                            purge_seqno=_int(client_purge_seqno, "--client-purge-seqno")
                            if client_purge_seqno else None)
    vb = VbucketState(tuple(log), high, _int(purge_seqno, "--purge-seqno"))
    result = negotiate(request, log, vb)
    first = result.rounds[0].answer
    final = result.result
    report: dict[str, Any] = {
        "rollback": first.status == "Rollback", "rollback_seqno": first.rollback_seqno, "rule": first.rule,
        "reason": first.reason, "rounds": [r.to_json() for r in result.rounds],
        "result": {"status": final.answer.status, **final.request.to_json()},
    }
    if (fmt or (ExplainFormat.PRETTY if env.stdout_isatty else ExplainFormat.JSON)) is ExplainFormat.JSON:
        env.stdout.write(json.dumps(report, indent=2) + "\n")
        return
    console = env.console()
    for number, step in enumerate(result.rounds, 1):
        req, answer = step.request, step.answer
        line = Text(f"round {number}: ", style="bold")
        line.append(f"start {req.start_seqno} uuid {req.vbucket_uuid} snapshot {req.snap_start}-{req.snap_end}")
        line.append(" -> ")
        line.append(answer.status + (f" to {answer.rollback_seqno}" if answer.rollback_seqno is not None else ""),
                    style="green" if answer.status == "Success" else "bold red")
        line.append(f"\n  [{answer.rule}] {answer.reason}", style="dim")
        console.print(line)
    if final.answer.status == "Success":
        console.print(f"stream would open at seqno {final.request.start_seqno} with uuid "
                      f"{final.request.vbucket_uuid}", style="bold")

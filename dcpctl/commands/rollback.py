"""``dcpctl rollback explain``: the server's rollback decision in plain words, then the client's retries."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from enum import StrEnum
from typing import Annotated, Any, Final

import typer
from rich.text import Text

from dcpctl.client.negotiate import negotiate_live, server_view
from dcpctl.client.streamer import served
from dcpctl.commands._live import MAX_SEQNO, HostArgument, Login, client_errors
from dcpctl.commands._options import env_of, option_groups
from dcpctl.dcp.rollback import (
    IGNORE_PURGED_TOMBSTONES,
    STRICT_VB_UUID,
    FailoverEntry,
    StreamRequest,
    VbucketChoiceError,
    VbucketState,
    load_json,
    negotiate,
    read_failover_log,
)
from dcpctl.errortext import json_error
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.protocol.constants import DcpOpenFlag, Opcode
from dcpctl.protocol.message import DecodeOptions
from dcpctl.render.env import Environment
from dcpctl.render.output import notice_text
from dcpctl.render.wrap import Hanging
from dcpctl.sources.capture import notice_diagnostic, rollback_stories
from dcpctl.sources.files import after, expand, open_input, unreadable
from dcpctl.sources.pcap import CaptureError, CaptureNotice, FileStart, TcpSegment, read_files

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
    if number > MAX_SEQNO:  # uuids and seqnos are 64 bits on the wire
        raise CommandError(f"{option}: at most {MAX_SEQNO}, not {value}", ExitCode.USAGE)
    return number


@rollback_app.command("explain")
def explain(
    ctx: typer.Context,
    capture: Annotated[list[str] | None, typer.Argument(
        help="Captures (pcap, pcapng): explain every rollback negotiation in them instead.", metavar="CAPTURE")] = None,
    failover_log: Annotated[str | None, typer.Option(
        "--failover-log", help="The server's failover log: JSON from dcpctl failover/decode, [{vbucket_uuid, "
        "seqno}] or [[uuid, seqno]], newest first; - for standard input.", metavar="FILE")] = None,
    uuid: Annotated[str | None, typer.Option("--uuid", help="The vbucket uuid the client sends (decimal or 0x "
                                             "hex).", metavar="UUID")] = None,
    start: Annotated[str | None, typer.Option("--start", help="The client's start seqno.", metavar="SEQNO")] = None,
    snap_start: Annotated[str | None, typer.Option("--snap-start", help="Snapshot start (default: start).",
                                                   metavar="SEQNO")]
    = None,
    snap_end: Annotated[str | None, typer.Option("--snap-end", help="Snapshot end (default: start).",
                                                 metavar="SEQNO")] = None,
    high_seqno: Annotated[str | None, typer.Option(
        "--high-seqno", help="The vbucket's high seqno (default: a failover dump's high_seqno; else the larger "
        "of start and the newest entry's seqno).",
        metavar="SEQNO")] = None,
    purge_seqno: Annotated[str | None, typer.Option("--purge-seqno", help="The server's purge seqno (default 0).",
                                                    metavar="SEQNO")]
    = None,
    client_purge_seqno: Annotated[str | None, typer.Option(
        "--client-purge-seqno", help="The purge_seqno the client sends in the stream-request value.",
        metavar="SEQNO")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Set the StrictVbUuid flag.")] = False,
    ignore_purged: Annotated[bool, typer.Option("--ignore-purged-tombstones",
                                                help="Set the IgnorePurgedTombstones flag.")] = False,
    vbucket: Annotated[int | None, typer.Option("--vbucket", min=0, max=1023, help="Which vbucket, when the file "
                                                "holds several; with captures, only this vbucket's rollbacks.",
                                                metavar="N")]
    = None,
    fmt: Annotated[ExplainFormat | None, typer.Option("--format", "-F", help="pretty (on a terminal) or json.")]
    = None,
    port: Annotated[list[int] | None, typer.Option("--port", "-p", help="With captures: server port to decode "
                                                   "(repeatable; default 11210).", metavar="PORT", min=1,
                                                   max=65535)] = None,
) -> None:
    """Explain the server's answer to a stream request, and each retry until the stream would open.

    The answer comes with the rule that decided it; each retry is the one a correct client makes."""
    env = env_of(ctx)
    output = env.output_format(fmt, ExplainFormat.PRETTY, ExplainFormat.JSON)
    one_request = {"--failover-log": failover_log, "--uuid": uuid, "--start": start, "--snap-start": snap_start,
                   "--snap-end": snap_end, "--high-seqno": high_seqno, "--purge-seqno": purge_seqno,
                   "--client-purge-seqno": client_purge_seqno, "--strict": strict or None,
                   "--ignore-purged-tombstones": ignore_purged or None}
    if capture:
        # a capture's requests carry their own uuid, start and snapshot: these would explain a request the
        # client never sent, so they are a mistake here, not a silent no-op
        given = [option for option, value in one_request.items() if value is not None]
        if given:
            raise CommandError(f"{', '.join(given)}: {'apply' if len(given) > 1 else 'applies'} to one request "
                               "explained without a capture; a capture's requests carry their own (--vbucket "
                               "chooses one vbucket's rollbacks)", ExitCode.USAGE)
        _explain_captures(env, expand(capture, env.warn), port or [11210], output, vbucket)
        return
    if port:
        raise CommandError("--port: applies to captures", ExitCode.USAGE)
    if failover_log is None or uuid is None or start is None:
        raise CommandError("give a capture, or --failover-log, --uuid and --start", ExitCode.USAGE)
    with open_input(failover_log, env.stdin) as stream:
        data = stream.read()
    what = "--failover-log: " + ("standard input" if failover_log == "-" else failover_log)
    try:
        log, dumped_high = read_failover_log(load_json(data), vbucket)
    except json.JSONDecodeError as exc:  # orjson's, with the position
        raise CommandError(json_error(what, exc), ExitCode.INPUT) from None
    except VbucketChoiceError as exc:
        raise CommandError(f"{what}: {exc!s}", ExitCode.USAGE) from None
    except (ValueError, TypeError) as exc:
        raise CommandError(f"{what}: {exc!s}", ExitCode.INPUT) from None
    if not log:
        raise CommandError(f"{what}: the failover log is empty", ExitCode.INPUT)
    start_seqno = _int(start, "--start")
    if high_seqno:
        high = _int(high_seqno, "--high-seqno")
    else:  # a failover dump's, as the node said it; else the least the log and the request show
        high = dumped_high if dumped_high is not None else max(start_seqno, log[0].seqno)
    flags = (STRICT_VB_UUID if strict else 0) | (IGNORE_PURGED_TOMBSTONES if ignore_purged else 0)
    request = StreamRequest(start_seqno, _int(uuid, "--uuid"),
                            _int(snap_start, "--snap-start") if snap_start else None,
                            _int(snap_end, "--snap-end") if snap_end else None, flags=flags,
                            purge_seqno=_int(client_purge_seqno, "--client-purge-seqno")
                            if client_purge_seqno else None)
    vb = VbucketState(tuple(log), high, _int(purge_seqno, "--purge-seqno") if purge_seqno else 0)
    result = negotiate(request, log, vb)
    first = result.rounds[0].answer
    final = result.result
    report: dict[str, Any] = {
        "rollback": first.status == "Rollback", "rollback_seqno": first.rollback_seqno, "rule": first.rule,
        "reason": first.reason, "rounds": [r.to_json() for r in result.rounds],
        "result": {"status": final.answer.status, **final.request.to_json()},
    }
    if output is ExplainFormat.JSON:
        env.stdout.write(json.dumps(report, indent=2) + "\n")
        return
    console = env.console()
    for number, step in enumerate(result.rounds, 1):
        req, answer = step.request, step.answer
        line = Text().append(f"round {number}: ", style="bold")
        line.append(f"start {req.start_seqno} uuid {req.vbucket_uuid} snapshot {req.snap_start}-{req.snap_end}")
        line.append(" -> ")
        line.append(answer.status + (f" to {answer.rollback_seqno}" if answer.rollback_seqno is not None else ""),
                    style="green" if answer.status == "Success" else "bold red")
        console.print(Hanging(line, hang=2), Hanging(_explained("", answer.rule, answer.reason), indent=2))
    if final.answer.status == "Success":
        console.print(f"stream would open at seqno {final.request.start_seqno} with uuid "
                      f"{final.request.vbucket_uuid}", style="bold")


_LABELLED: Final = 10  # a capture's story: two columns of indent, then "engine: " and the like


def _explained(lead: str, rule: str, reason: str) -> Text:
    """``lead [rule] reason``: the explanation is what a person reads, so it is plain text; the rule id,
    for whoever looks it up in the rollback engine, is dim."""
    text = Text(f"{lead} " if lead else "")
    return text.append(f"[{rule}]", style="dim").append(f" {reason}")


def _explain_captures(env: Environment, paths: list[str], ports: list[int], output: ExplainFormat,
                      vbucket: int | None = None) -> None:
    current = [paths[0]]  # the file being read, for its error

    def opening(path: str) -> None:
        current[0] = path

    hints: list[CaptureNotice] = []

    def watched(items: Iterable[TcpSegment | CaptureNotice | FileStart]
                ) -> Iterator[TcpSegment | CaptureNotice | FileStart]:
        # the reader's hint that the protocol is on a port not decoded, said as decode says it: without it, a
        # capture on another port reads as one with no rollback in it
        for item in items:
            if isinstance(item, CaptureNotice) and item.name == "protocol_on_other_port":
                hints.append(item)
            yield item

    try:
        found = rollback_stories(watched(read_files(paths, frozenset(ports), tap=opening)), DecodeOptions(),
                                 frozenset(ports))
    except (CaptureError, FileNotFoundError) as exc:
        raise unreadable([(current[0], str(exc))], after(paths, current[0])) from None
    stories = [(story.source or current[0], label, story) for label, story in found
               if vbucket in (None, story.vbucket)]
    errors = env.error_console()
    for hint in hints:
        errors.print(f"dcpctl: {notice_text(notice_diagnostic(hint))}", style="yellow", markup=False)
    if output is ExplainFormat.JSON:
        env.stdout.write(json.dumps([{"file": path, "connection": label, **story.to_json()}
                                     for path, label, story in stories], indent=2) + "\n")
        return
    console = env.console()
    if not stories:
        console.print("no rollback negotiation in the capture")
        return
    for path, label, story in stories:
        asked = story.request
        # a labelled line wraps under its value, two columns in and past the label ("engine: ")
        lines = [Text(f"{path}: {label} vbucket {story.vbucket}", style="bold"),
                 Text(f"asked:  start {asked.start_seqno} uuid {asked.vbucket_uuid} "
                      f"snapshot {asked.snap_start}-{asked.snap_end}"),
                 Text(f"server: Rollback to {story.rollback_seqno}" if story.unreadable is None else
                      f"server: Rollback, to a seqno it does not give ({story.unreadable})", style="bold red")]
        if story.decision is not None:
            seqno = story.decision.rollback_seqno
            agrees = "agrees" if story.engine_agrees else (
                "sees no rollback" if seqno is None else f"would say Rollback to {seqno}")
            lines.append(_explained(f"engine: {agrees}", story.decision.rule, story.decision.reason))
        if story.retry is not None:
            retry = story.retry
            lines.append(Text(f"retry:  start {retry.start_seqno} uuid {retry.vbucket_uuid} "
                              f"snapshot {retry.snap_start}-{retry.snap_end} -> {story.retry_status}"))
        else:
            lines.append(Text("retry:  none in the capture", style="yellow"))
        if story.retry_correct is not None:
            lines.append(Text("the client retried as a correct client does" if story.retry_correct else
                              "the retry is not what a correct client sends"
                              + (f" (start {story.expected_retry.start_seqno})" if story.expected_retry else ""),
                              style="green" if story.retry_correct else "yellow"))
        console.print(Hanging(lines[0], hang=2), *(Hanging(line, indent=2, hang=_LABELLED) for line in lines[1:]))


@rollback_app.command("negotiate")
@option_groups
def negotiate_command(
    ctx: typer.Context,
    host: HostArgument,
    vbucket: Annotated[int, typer.Option("--vbucket", min=0, max=1023, help="The vbucket.", metavar="N")],
    uuid: Annotated[str, typer.Option("--uuid", help="The vbucket uuid the client has (decimal or 0x hex).",
                                      metavar="UUID")],
    seqno: Annotated[str, typer.Option("--seqno", help="The client's start seqno.", metavar="SEQNO")],
    login: Login = Login(),
    snap_start: Annotated[str | None, typer.Option("--snap-start", help="Snapshot start (default: seqno).",
                                                   metavar="SEQNO")] = None,
    snap_end: Annotated[str | None, typer.Option("--snap-end", help="Snapshot end (default: seqno).",
                                                 metavar="SEQNO")] = None,
    fmt: Annotated[ExplainFormat | None, typer.Option("--format", "-F", help="pretty (on a terminal) or json.")]
    = None,
) -> None:
    """Send a stream request and retry each rollback as a correct client does, round by round.

    The request goes to the vbucket's active node; every round is printed with the engine's reading of
    it, and the stream is closed once it opens."""
    env = env_of(ctx)
    start = _int(seqno, "--seqno")
    request = StreamRequest(start, _int(uuid, "--uuid"), _int(snap_start, "--snap-start") if snap_start else None,
                            _int(snap_end, "--snap-end") if snap_end else None)
    password = login.password(env)
    tls_options = login.tls_options()
    with client_errors():
        count, owner = login.cluster_map(host, password, tls_options)
        served([vbucket], count, owner)  # past the map: exit 2; no active node: exit 5
        conn = login.connect(*owner[vbucket], password, tls_options)
        try:
            server = server_view(conn, vbucket)
            conn.check(Opcode.DCP_OPEN, key=f"dcpctl-negotiate:{os.getpid()}".encode(), seqno=0,
                       flags=DcpOpenFlag.PRODUCER)
            conn.check(Opcode.DCP_CONTROL, key=b"enable_noop", value=b"true")
            rounds = negotiate_live(conn, vbucket, request, [FailoverEntry(request.vbucket_uuid, 0)], server)
        finally:
            conn.close()
    final = rounds[-1]
    report = {"vbucket": vbucket, "node": conn.label,
              "server": {"failover_log": [e.to_json() for e in server.failover_log], "high_seqno": server.high_seqno},
              "rounds": [r.to_json() for r in rounds],
              "result": {"status": final.status, **final.request.to_json()}}
    if env.output_format(fmt, ExplainFormat.PRETTY, ExplainFormat.JSON) is ExplainFormat.JSON:
        env.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        console = env.console()
        for number, step in enumerate(rounds, 1):
            req = step.request
            line = Text().append(f"round {number}: ", style="bold")
            line.append(f"start {req.start_seqno} uuid {req.vbucket_uuid} snapshot {req.snap_start}-{req.snap_end}")
            line.append(" -> ")
            line.append(step.status + (f" to {step.rollback_seqno}" if step.rollback_seqno is not None else ""),
                        style="green" if step.status == "Success" else "bold red")
            agreement = "the engine agrees" if step.agrees else (
                f"the engine expected {step.predicted_status}"
                + (f" to {step.predicted_rollback_seqno}" if step.predicted_rollback_seqno is not None else ""))
            console.print(Hanging(line, hang=2), Hanging(_explained(agreement, step.rule, step.reason), indent=2))
    if final.status != "Success":
        raise CommandError(f"vbucket {vbucket}: the stream did not open ({final.status})", ExitCode.PROTOCOL)

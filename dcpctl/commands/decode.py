"""``dcpctl decode``: captures (pcap, pcapng) to DCP messages in their context, with filters and a summary."""

from __future__ import annotations

import contextlib
import fnmatch
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Annotated, Any

import typer

from dcpctl.commands._options import (
    Base64Option,
    CollectionsOption,
    DialectName,
    DialectOption,
    LocalTimeOption,
    MaxBodyOption,
    MaxConnectionsOption,
    ShowSecretsOption,
    StrictOption,
    TemplateOption,
    dialect_of,
    env_of,
    line_template_of,
    parse_ranges,
)
from dcpctl.dcp.exchange import Exchanges
from dcpctl.dcp.filterexpr import FilterError, compile_filter
from dcpctl.dcp.observed import Observed
from dcpctl.dcp.summary import Summary
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.protocol.diagnostic import Diagnostic
from dcpctl.protocol.fields import field_roots
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH, Skipped
from dcpctl.protocol.message import DecodeOptions
from dcpctl.protocol.nearest import did_you_mean
from dcpctl.protocol.registry import OPCODE_MAX, opcode_names
from dcpctl.render.env import Environment
from dcpctl.render.lines import PlainLines
from dcpctl.render.output import Format, Stats, as_written, emit
from dcpctl.render.progress import file_progress
from dcpctl.render.record import record as record_of
from dcpctl.render.summary import print_summary
from dcpctl.render.template import Template
from dcpctl.sources.capture import decode_segments
from dcpctl.sources.compressed import compressed
from dcpctl.sources.files import after, expand, unreadable
from dcpctl.sources.parallel import ChildError, decode_files, usable_cores
from dcpctl.sources.pcap import CaptureError, read_files
from dcpctl.sources.tcp import DEFAULT_MAX_CONNECTIONS

Item = Observed | Skipped | Diagnostic


def decode(
    ctx: typer.Context,
    files: Annotated[list[str], typer.Argument(help="Capture files (pcap or pcapng), globs, or - for stdin.",
                                               metavar="FILE")],
    fmt: Annotated[Format | None, typer.Option("--format", "-F", help="Output format (default: pretty on a "
                                               "terminal, jsonl when piped).")] = None,
    template: TemplateOption = None,
    port: Annotated[list[int] | None, typer.Option("--port", "-p", help="Server port to decode "
                                                   "(repeatable; default 11210).", metavar="PORT", min=1,
                                                   max=65535)] = None,
    vbucket: Annotated[list[str] | None, typer.Option("--vbucket", help="Only these vbuckets: 0-15,32 "
                                                      "(repeatable).", metavar="RANGES")] = None,
    opcode: Annotated[list[str] | None, typer.Option("--opcode", help="Only these opcodes, by kv_engine "
                                                     "name or glob (DCP_*) (repeatable).", metavar="NAME")] = None,
    key: Annotated[list[str] | None, typer.Option("--key", help="Only keys matching this glob, or /regex/ "
                                                  "(repeatable: any of them).", metavar="PATTERN")] = None,
    stream_id: Annotated[list[int] | None, typer.Option("--stream-id", help="Only these DCP stream ids "
                                                        "(1-65535; 0 is no stream id).", metavar="N",
                                                        min=1, max=65535)] = None,
    filter_expr: Annotated[list[str] | None, typer.Option(
        "--filter", "-Y", help='Expression over JSON field names: opcode == "DCP_MUTATION" and by_seqno > 100; '
        "and/or/not, == != < <= > >= in, matches(field, regex), exists(field).", metavar="EXPR")] = None,
    count: Annotated[int | None, typer.Option("--count", "-c", min=1, help="Stop after N messages.",
                                              metavar="N")] = None,
    summary: Annotated[bool, typer.Option("--summary", help="Print a table per connection and vbucket "
                                          "(messages only with --format).")] = False,
    dialect: DialectOption = DialectName.DCP,
    collections: CollectionsOption = None,
    show_secrets: ShowSecretsOption = False,
    max_body_length: MaxBodyOption = DEFAULT_MAX_BODY_LENGTH,
    max_connections: MaxConnectionsOption = DEFAULT_MAX_CONNECTIONS,
    strict: StrictOption = False,
    base64: Base64Option = False,
    local_time: LocalTimeOption = False,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, max=2, help="Processes: 2 reads and "
                                             "reassembles in one while the other builds the output; 1 "
                                             "decodes in this process alone (default: 2 when two cores are "
                                             "available).", metavar="1|2")] = None,
) -> None:
    """Decode DCP traffic from captures: TCP reassembly, negotiated state, stream checks, filters.

    Each message carries ts, connection (client:port > server:port), direction and the frames it came from.
    """
    env = env_of(ctx)
    options = DecodeOptions(dialect_of(dialect), collections, show_secrets)
    ports = frozenset(port or [11210])
    if filter_expr and len(filter_expr) > 1:  # taken as the last one, it dropped the others without a word
        raise CommandError("--filter given twice: write one expression, its parts joined with and / or",
                           ExitCode.USAGE)
    try:
        predicate = compile_filter(filter_expr[0], field_roots()) if filter_expr else None
    except FilterError as exc:
        raise CommandError(f"--filter: {exc}", ExitCode.USAGE) from None
    vbuckets = parse_ranges(vbucket, "--vbucket") if vbucket else None
    opcodes = _opcode_patterns(opcode) if opcode else None
    key_match = _key_matcher(key)
    stream_ids = set(stream_id) if stream_id else None
    tally = Summary() if summary else None
    line_template = line_template_of(template, fmt)

    # --vbucket and --key keep a response with its request: a response's header names neither
    kept_requests = Exchanges[bool]()

    def placed(record: dict[str, Any]) -> bool:
        answering, kept = kept_requests.answered(record)
        if answering:
            return bool(kept)
        key = record.get("key")
        found = (vbuckets is None or record.get("stream_vbucket", record.get("vbucket")) in vbuckets) and (
            key_match is None or (isinstance(key, str) and bool(key_match(key))))
        kept_requests.asked(record, found)
        return found

    def wanted(msg: Observed) -> bool:
        record = record_of(msg)
        if line_template is not None and not line_template.fits(as_written(record, base64)):
            return False
        if (vbuckets is not None or key_match is not None) and not placed(record):
            return False
        if opcodes is not None and ("opcode" not in record or not opcodes(record["opcode"])):
            return False
        if stream_ids is not None and record.get("stream_id") not in stream_ids:
            return False
        return predicate is None or predicate(record)

    filtering = vbuckets is not None or opcodes is not None or key_match is not None \
        or stream_ids is not None or predicate is not None or line_template is not None
    paths = expand(files, env.warn)
    # on a terminal's standard error, unless the output shares the terminal
    progress = None if env.stdout_isatty else file_progress(env, paths, "decoding",
                                                             sized=not any(map(compressed, paths)))

    current = [paths[0]]  # the file being read, for error messages

    output = env.output_format(fmt, Format.PRETTY, Format.JSONL)
    # every message printed as its JSON line, untouched: plain items may come out as their lines already
    lines = output is Format.JSONL and not filtering and tally is None and count is None and not base64

    def decoded() -> Iterator[Item | bytes]:
        """Every file's items in turn, serially or on two cores (identical items either way)."""
        if (jobs or usable_cores()) >= 2:
            def on_file(path: str) -> None:
                current[0] = path
                if progress is not None:
                    progress.start_file(path)

            yield from decode_files(paths, options, ports, max_body_length, on_file=on_file,
                                    on_progress=progress.advance if progress is not None else None,
                                    plain=PlainLines if lines else None,
                                    max_connections=max_connections)
            return
        def opening(path: str) -> Callable[[float, bytes, int], None] | None:
            current[0] = path
            return progress.tap(path) if progress is not None else None

        yield from decode_segments(read_files(paths, ports, tap=opening), options, ports, max_body_length,
                                   max_connections, PlainLines() if lines else None)

    def items() -> Iterator[Item | bytes]:
        shown = 0
        try:
            if not filtering and tally is None and count is None:
                yield from decoded()
                return
            for item in decoded():
                assert not isinstance(item, bytes)  # lines only when every message is printed as it is
                if isinstance(item, Observed):
                    if filtering and not wanted(item):
                        continue
                    if tally is not None:
                        tally.add(record_of(item), len(item.packet.raw))
                    shown += 1
                    yield item
                    if count is not None and shown >= count:
                        return
                else:
                    yield item
        except (CaptureError, FileNotFoundError) as exc:
            raise unreadable([(current[0], str(exc))], after(paths, current[0])) from None
        except ChildError as exc:
            raise CommandError(str(exc), ExitCode.FAILURE) from None

    with progress if progress is not None else contextlib.nullcontext():
        stats = _render(items(), output, env, summary=summary, fmt=fmt, base64=base64, tally=tally,
                        local_time=local_time, template=line_template)
    if strict and not stats.clean:
        raise typer.Exit(ExitCode.DIAGNOSTICS)


def _render(items: Iterator[Item | bytes], output: Format, env: Environment, *, summary: bool, fmt: Format | None,
            base64: bool, tally: Summary | None, local_time: bool, template: Template | None) -> Stats:
    if summary and fmt is None and template is None:
        stats = emit(_only_notices(items), output, env)
        print_summary(tally or Summary(), env.console())
    else:
        stats = emit(items, output, env, base64=base64, local_time=local_time, template=template)
        if tally is not None:
            print_summary(tally, env.error_console())
    return stats


def _only_notices(items: Iterable[Item | bytes]) -> Iterator[Item]:
    for item in items:
        if not isinstance(item, Observed | bytes):
            yield item


def _opcode_patterns(values: list[str]) -> Callable[[str], bool]:
    """--opcode values as a test of the record's opcode name: a name in any case, a glob matching some name,
    or a number (0x57, 87) standing for its names. A name no dialect has, or a glob matching none, would
    silently select nothing: it is an error naming the closest names. The globs are matched once per
    distinct name, not once per message."""
    known = sorted(opcode_names())
    folded = [name.upper() for name in known]
    out: list[str] = []
    for value in values:
        text = value.strip()
        try:
            code = int(text, 0) if text.isascii() else None  # int() also reads other scripts' digits
        except ValueError:
            code = None
        if code is not None:
            if not 0 <= code <= OPCODE_MAX:
                raise CommandError(f"--opcode: {value!r}: opcode numbers are 0 to 0x{OPCODE_MAX:x}", ExitCode.USAGE)
            out += [name.upper() for name in opcode_names(code)]
        elif not any(fnmatch.fnmatchcase(name, text.upper()) for name in folded):
            what = "matches no opcode" if any(c in text for c in "*?[") else "unknown opcode"
            raise CommandError(f"--opcode: {what} {value!r}{did_you_mean(text, known)}", ExitCode.USAGE)
        else:
            out.append(text.upper())
    verdicts: dict[str, bool] = {}

    def matches(name: str) -> bool:
        verdict = verdicts.get(name)
        if verdict is None:
            verdict = verdicts[name] = any(fnmatch.fnmatchcase(name.upper(), glob) for glob in out)
        return verdict

    return matches


def _key_matcher(patterns: list[str] | None) -> Callable[[str], object] | None:
    """Whether a key matches any of the patterns (--key repeated: either document), each a glob or /regex/."""
    if not patterns:
        return None
    matchers = [_one_key_matcher(pattern) for pattern in patterns]
    if len(matchers) == 1:
        return matchers[0]
    return lambda key: any(match(key) for match in matchers)


def _one_key_matcher(pattern: str) -> Callable[[str], object]:
    if len(pattern) > 1 and pattern.startswith("/") and pattern.endswith("/"):
        try:
            return re.compile(pattern[1:-1]).search
        except re.error as exc:
            raise CommandError(f"--key: bad regex: {exc}", ExitCode.USAGE) from None
    return lambda key: fnmatch.fnmatchcase(key, pattern)

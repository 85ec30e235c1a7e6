"""Options shared by several commands (typer annotations), the environment accessor, and Ctrl-C."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import signal
import typing
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Final

import typer

from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.protocol.constants import MAX_VBUCKETS
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH
from dcpctl.protocol.registry import DIALECTS, Dialect
from dcpctl.render.env import Environment
from dcpctl.render.output import MAX_FIELD_BYTES, Format
from dcpctl.render.template import Template
from dcpctl.sources.compressed import SUFFIXES
from dcpctl.sources.tcp import DEFAULT_MAX_CONNECTIONS


class DialectName(StrEnum):
    DCP = "dcp"
    UPR_DRAFT = "upr-draft"


def env_of(ctx: typer.Context) -> Environment:
    obj = ctx.find_root().obj
    assert isinstance(obj, Environment)
    return obj


def option_groups(command: Callable[..., None]) -> Callable[..., None]:
    """A command that takes groups of options, each one parameter typed with a dataclass whose fields are typer
    options (``Login``: how to reach a node). Typer sees each group's fields as the command's own options, in
    the group's place; the command gets the group built from them. Typer has no parameter groups: this gives
    typer the command's signature with the groups spread out, so a group is declared once for every command
    that takes it."""
    hints = typing.get_type_hints(command, include_extras=True)
    groups: dict[str, type[Any]] = {}
    spread: list[inspect.Parameter] = []
    for name, param in inspect.signature(command).parameters.items():
        kind = hints.get(name)
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            groups[name] = kind
            fields = typing.get_type_hints(kind, include_extras=True)
            spread += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                         annotation=fields[f.name]) for f in dataclasses.fields(kind)]
        else:  # typer passes every parameter by name
            spread.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY,
                                        annotation=hints.get(name, param.annotation)))
    names = [param.name for param in spread]
    clashes = {name for name in names if names.count(name) > 1}
    if clashes:
        raise TypeError(f"{command.__name__}: a group's option has a parameter's name: {', '.join(sorted(clashes))}")

    @functools.wraps(command)
    def grouped(**given: Any) -> None:
        for name, kind in groups.items():
            given[name] = kind(**{f.name: given.pop(f.name) for f in dataclasses.fields(kind)})
        command(**given)

    grouped.__signature__ = inspect.Signature(spread)  # type: ignore[attr-defined]
    grouped.__annotations__ = {param.name: param.annotation for param in spread}
    return grouped


def parse_ranges(values: list[str], option: str = "--vbuckets") -> frozenset[int]:
    """``0-15,32,40-41`` (repeatable) -> the vbuckets named. Each range is checked against 0 to
    MAX_VBUCKETS - 1 before it is expanded, so the set holds at most MAX_VBUCKETS numbers whatever is asked."""
    out: set[int] = set()
    for value in values:
        for part in value.split(","):
            low, _, high = part.strip().partition("-")
            try:
                first, last = int(low, 0), int(high or low, 0)
            except ValueError:
                first = last = -1
            if first < 0 or not part.isascii():  # int() also reads other scripts' digits: ASCII only
                raise CommandError(f"{option}: not a number or range: {part!r}", ExitCode.USAGE)
            if last >= MAX_VBUCKETS or first > last:
                raise CommandError(f"{option}: {part.strip()!r}: vbuckets are 0 to {MAX_VBUCKETS - 1} (a range is "
                                   "LOW-HIGH)", ExitCode.USAGE)
            out.update(range(first, last + 1))
    return frozenset(out)


def live_capture_path(path: Path | None, option: str) -> None:
    """A live command's capture file is written as the traffic comes, each record whole, so that a stop at
    any moment leaves a file that reads: it is never compressed. A name asking for compression (redact's
    -o NAME.gz) is refused, not given to an uncompressed file."""
    if path is not None and path.suffix.lower() in SUFFIXES:
        raise CommandError(f"{option} {path}: written uncompressed as the traffic comes: name it {path.stem} "
                           f"and compress it once written", ExitCode.USAGE)


@dataclasses.dataclass(frozen=True)
class Rotation:
    """-C and -W: a live command's -w file as a ring of files, with tcpdump's options and names (capture and
    stream take them through option_groups)."""

    file_size: Annotated[float | None, typer.Option(
        "--file-size", "-C", min=0.001, metavar="MB",
        help="With -w: start a new file once this one holds this many million bytes, as tcpdump -C: FILE, "
        "FILE1, FILE2 ...")] = None
    file_count: Annotated[int | None, typer.Option(
        "--file-count", "-W", min=1, metavar="N",
        help="With -C: keep N files, FILE0 ... FILE<N-1>, the oldest overwritten, as tcpdump -C -W: a "
        "bounded ring.")] = None
    rotate_seconds: Annotated[float | None, typer.Option(
        "--rotate-seconds", "-G", min=1, metavar="SECONDS",
        help="With -w: start a new file every SECONDS, its name the -w name through strftime in local time, as "
        "tcpdump -G: -w 'dcp-%Y%m%d-%H%M%S.pcap'.")] = None

    def size(self, write: Path | None) -> int | None:
        """Each file's size in bytes, None for one file; -C or -G without -w, -W without -C, -W with -G, and a
        -G name with no time in it are mistakes said."""
        if self.file_size is not None and write is None:
            raise CommandError("-C: the size of each -w file: give -w FILE", ExitCode.USAGE)
        if self.rotate_seconds is not None and write is None:
            raise CommandError("-G: the seconds each -w file covers: give -w FILE", ExitCode.USAGE)
        if self.rotate_seconds is not None and self.file_count is not None:
            raise CommandError("-W with -G: tcpdump then stops after N files, which dcpctl does not; a ring of N "
                               "files is -C MB -W N", ExitCode.USAGE)
        if self.file_count is not None and self.file_size is None:
            raise CommandError("-W: the number of -w files kept, each -C million bytes: give -C MB", ExitCode.USAGE)
        if self.rotate_seconds is not None and "%" not in str(write):
            raise CommandError(f"-G: -w {write} has no time in it (strftime, as tcpdump: -w 'dcp-%Y%m%d-%H%M%S"
                               ".pcap'): each file would have the same name", ExitCode.USAGE)
        return None if self.file_size is None else int(self.file_size * 1_000_000)


def dialect_of(name: DialectName) -> Dialect:
    return DIALECTS[name.value]


DialectOption = Annotated[DialectName, typer.Option(
    "--dialect", help="The protocol's version: current DCP, or the 2013 UPR transport draft.")]
CollectionsOption = Annotated[bool | None, typer.Option(
    "--collections/--no-collections",
    help="HELLO Collections in effect: split the LEB128 collection id off document keys "
         "(default: unknown, keys shown whole).")]
ShowSecretsOption = Annotated[bool, typer.Option(
    "--show-secrets", help="Show SASL client messages instead of redacting them.")]
MaxBodyOption = Annotated[int, typer.Option(
    "--max-body-length", min=0, metavar="BYTES",
    help=f"Largest total body accepted as a packet; larger lengths are treated as corrupt "
         f"(default {DEFAULT_MAX_BODY_LENGTH}: a 20 MiB document plus xattrs and headers).")]
MaxConnectionsOption = Annotated[int, typer.Option(
    "--max-connections", min=1, metavar="N",
    help=f"TCP connections followed at once; beyond it the least recently active is dropped, with a "
         f"connection_limit diagnostic (default {DEFAULT_MAX_CONNECTIONS}: far above a node's KV connections).")]
StrictOption = Annotated[bool, typer.Option(
    "--strict", help="Exit 4 when any message has an error diagnostic or bytes were skipped.")]
MaxFieldBytesOption = Annotated[int, typer.Option(
    "--max-field-bytes", min=32, metavar="BYTES",
    help=f"pretty and hexdump show a longer field as its head, tail and size (default {MAX_FIELD_BYTES}; "
         "JSON output is always whole).")]
Base64Option = Annotated[bool, typer.Option(
    "--base64", help="Binary keys and values as base64 instead of hex in JSON output.")]
LocalTimeOption = Annotated[bool, typer.Option(
    "--local-time", help="pretty output shows times in the local time zone, with its offset, instead of UTC "
    "(JSON keeps ts as seconds since the epoch).")]
TemplateOption = Annotated[str | None, typer.Option(
    "-f", help="One line per message from a template over the JSON field names: '{vbucket} {by_seqno} {key}' "
    "(only messages that have every field named).", metavar="TEMPLATE")]


def line_template_of(text: str | None, fmt: Format | None) -> Template | None:
    """-f's template, checked before anything is read or connected; -f writes its own lines, so it and
    --format exclude each other."""
    if text is None:
        return None
    if fmt is not None:
        raise CommandError("-f and --format exclude each other: -f writes its own lines", ExitCode.USAGE)
    return Template(text)


# What asks a command to stop: Ctrl-C; SIGTERM (timeout, systemd, docker stop); SIGHUP (the terminal closed)
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def first_signal_stops(stop: Callable[[signal.Signals], None],
                       signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> Iterator[None]:
    """The first of ``signals`` calls ``stop`` with it (the command then ends at its next safe point: every
    line being written is written whole, state and files are saved); a second one, of any of them, stops at
    once as Ctrl-C does (KeyboardInterrupt: a reader that never reads again leaves a write blocked). Only the
    main thread can own signals; elsewhere they stay as they are."""

    def first(signum: int, _frame: object) -> None:
        for sig in signals:
            signal.signal(sig, _interrupt)
        stop(signal.Signals(signum))  # may raise KeyboardInterrupt itself, when there is nothing to stop gracefully

    try:
        previous = {sig: signal.signal(sig, first) for sig in signals}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

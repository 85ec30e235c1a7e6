"""Options shared by several commands (typer annotations), the environment accessor, and Ctrl-C."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from enum import StrEnum
from typing import Annotated

import typer

from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.protocol.constants import MAX_VBUCKETS
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH
from dcpctl.protocol.registry import DIALECTS, Dialect
from dcpctl.render.env import Environment


class DialectName(StrEnum):
    DCP = "dcp"
    UPR_DRAFT = "upr-draft"


def env_of(ctx: typer.Context) -> Environment:
    obj = ctx.find_root().obj
    assert isinstance(obj, Environment)
    return obj


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


def dialect_of(name: DialectName) -> Dialect:
    return DIALECTS[name.value]


DialectOption = Annotated[DialectName, typer.Option(
    "--dialect", help="Registry to decode with: current DCP, or the 2013 UPR transport draft.")]
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
StrictOption = Annotated[bool, typer.Option(
    "--strict", help="Exit 4 when any message has an error diagnostic or bytes were skipped.")]
Base64Option = Annotated[bool, typer.Option(
    "--base64", help="Binary keys and values as base64 instead of hex in JSON output.")]


@contextlib.contextmanager
def first_ctrl_c_stops(stop: Callable[[], None]) -> Iterator[None]:
    """The first Ctrl-C calls ``stop`` (the command then ends at its next safe point: every line being
    written is written whole, state and files are saved); a second one stops at once (a reader that never
    reads again leaves a write blocked). Only the main thread can own signals; elsewhere Ctrl-C stays as
    it is."""

    def first(_signum: int, _frame: object) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        stop()  # may raise KeyboardInterrupt itself, when there is nothing to stop gracefully

    try:
        previous = signal.signal(signal.SIGINT, first)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)

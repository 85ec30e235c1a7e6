"""Options shared by several commands (typer annotations), the environment accessor, and Ctrl-C."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from enum import StrEnum
from typing import Annotated

import typer

from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH
from dcpctl.protocol.registry import DIALECTS, Dialect
from dcpctl.render.env import Environment
from dcpctl.sources.tcp import DEFAULT_MAX_CONNECTIONS


class DialectName(StrEnum):
    DCP = "dcp"
    UPR_DRAFT = "upr-draft"


def env_of(ctx: typer.Context) -> Environment:
    obj = ctx.find_root().obj
    assert isinstance(obj, Environment)
    return obj


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
MaxConnectionsOption = Annotated[int, typer.Option(
    "--max-connections", min=1, metavar="N",
    help=f"TCP connections followed at once; beyond it the least recently active is dropped, with a "
         f"connection_limit diagnostic (default {DEFAULT_MAX_CONNECTIONS}: far above a node's KV connections).")]
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

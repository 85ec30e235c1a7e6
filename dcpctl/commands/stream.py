"""``dcpctl stream``: kcat for DCP: stream a bucket live, printed like a capture."""

from __future__ import annotations

import contextlib
import string
import time
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from dcpctl.client.connection import Connection
from dcpctl.client.state import StateError
from dcpctl.client.streamer import DEFAULT_BUFFER, DEFAULT_NOOP_INTERVAL, Streamer, StreamOptions
from dcpctl.commands._live import (
    DEFAULT_PASSWORD_ENV,
    DEFAULT_TIMEOUT,
    MAX_BUFFER_SIZE,
    BucketOption,
    CaOption,
    CertOption,
    HostArgument,
    KeyOption,
    MaxScramOption,
    MechanismOption,
    NoVerifyOption,
    PasswordEnvOption,
    PasswordFileOption,
    TimeoutOption,
    TlsOption,
    UserOption,
    client_errors,
    password_of,
    seqno_or,
    tls_of,
    window_of,
)
from dcpctl.commands._options import Base64Option, env_of, first_ctrl_c_stops, parse_ranges
from dcpctl.dcp.sasl import MAX_SCRAM_ITERATIONS
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.protocol.message import Message, redacted
from dcpctl.render.output import Format, emit
from dcpctl.sources.pcapwriter import PcapWriter, TcpConversation


class OnRollback(StrEnum):
    FOLLOW = "follow"
    FAIL = "fail"
    REPORT = "report"


def stream(
    ctx: typer.Context,
    host: HostArgument,
    bucket: BucketOption = "default",
    user: UserOption = "Administrator",
    password_env: PasswordEnvOption = DEFAULT_PASSWORD_ENV,
    password_file: PasswordFileOption = None,
    sasl_mech: MechanismOption = None,
    tls: TlsOption = False,
    cacert: CaOption = None,
    cert: CertOption = None,
    key: KeyOption = None,
    no_verify: NoVerifyOption = False,
    vbuckets: Annotated[list[str] | None, typer.Option("--vbuckets", help="vbuckets to stream: 0-1023,5 "
                                                       "(repeatable; default all).")] = None,
    start: Annotated[str, typer.Option("--from", help="beginning, now, resume (from --state) or a seqno.")]
    = "beginning",
    until: Annotated[str, typer.Option("--until", help="forever, now (the high seqnos at start; then exit 0) or "
                                       "a seqno.")] = "forever",
    collections: Annotated[str | None, typer.Option("--collections", help="Only these collection ids (hex, "
                                                    "comma separated); needs HELLO Collections.")] = None,
    scope: Annotated[str | None, typer.Option("--scope", help="Only this scope id (hex).")] = None,
    stream_id: Annotated[int | None, typer.Option("--stream-id", min=1, max=65535, help="Enable stream ids and "
                                                  "use this one.")] = None,
    no_value: Annotated[bool, typer.Option("--no-value", help="Keys and metadata only (DCP_OPEN NoValue).")]
    = False,
    xattrs: Annotated[bool, typer.Option("--xattrs", help="Include extended attributes.")] = False,
    control: Annotated[list[str] | None, typer.Option("--control", help="Extra DCP_CONTROL key=value "
                                                      "(repeatable).")] = None,
    buffer_size: Annotated[int, typer.Option("--buffer-size", min=0, max=MAX_BUFFER_SIZE, help="connection_buffer_"
                                             "size: the flow-control window in bytes (acknowledged at half).")]
    = DEFAULT_BUFFER,
    noop_interval: Annotated[int, typer.Option("--noop-interval", min=1, help="Seconds between the server's "
                                               "noops.")] = DEFAULT_NOOP_INTERVAL,
    state: Annotated[Path | None, typer.Option("--state", help="Where each vbucket got to, saved atomically; "
                                               "--from resume continues from it.")] = None,
    count: Annotated[int | None, typer.Option("--count", "-c", min=1, help="Stop after N mutations, deletions "
                                              "and expirations.")] = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT,
    max_scram_iterations: MaxScramOption = MAX_SCRAM_ITERATIONS,
    on_rollback: Annotated[OnRollback, typer.Option("--on-rollback", help="follow: explain, roll back, retry; "
                                                    "fail: exit 9; report: explain and leave the vbucket.")]
    = OnRollback.FOLLOW,
    fmt: Annotated[Format | None, typer.Option("--format", "-F", help="pretty on a terminal, jsonl when piped.")]
    = None,
    template: Annotated[str | None, typer.Option("-f", help="One line per message from a template over the JSON "
                                                 "field names: '{vbucket} {by_seqno} {key}'.")] = None,
    write: Annotated[Path | None, typer.Option("--write", "-w", help="Save the whole exchange as a pcap that "
                                               "dcpctl decode and Wireshark read.")] = None,
    summary: Annotated[bool, typer.Option("--summary", help="Per-vbucket counts, seqno ranges and rate on "
                                          "standard error at the end (alone: no per-message output).")] = False,
    base64: Base64Option = False,
) -> None:
    """Stream DCP from a cluster: every vbucket from its active node, printed as decode prints captures."""
    env = env_of(ctx)
    seqno_or(start, "--from", ("beginning", "now", "resume"))
    seqno_or(until, "--until", ("forever", "now"))
    if template is not None:
        _Template().check(template)
    if state is not None and not (state.parent if str(state.parent) else Path(".")).is_dir():
        raise CommandError(f"--state: {state}: no such directory to save it in", ExitCode.INPUT)
    if start == "resume" and state is None:
        raise CommandError("--from resume needs --state FILE", ExitCode.USAGE)
    if collections and scope:
        raise CommandError("--collections and --scope exclude each other (the server answers Einval)",
                           ExitCode.USAGE)
    controls = {}
    for item in control or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CommandError(f"--control: key=value, not {item!r}", ExitCode.USAGE)
        controls[name] = value
    if "connection_buffer_size" in controls:  # the window acknowledgements are counted against
        buffer_size = window_of(controls["connection_buffer_size"], "--control connection_buffer_size")
    options = StreamOptions(
        bucket, user, password_of(env, password_env, password_file, user), sasl_mech,
        tls_of(tls, cacert, cert, key, no_verify), timeout, parse_ranges(vbuckets) if vbuckets else None, start,
        until, _hex_list(collections, "--collections") if collections else None,
        _hex_list(scope, "--scope")[0] if scope else None, stream_id, no_value, xattrs, controls, buffer_size,
        noop_interval, count, on_rollback.value, state,
        quiet=summary and fmt is None and template is None and write is None,
        max_scram_iterations=max_scram_iterations)
    output = fmt or (Format.PRETTY if env.stdout_isatty else Format.JSONL)
    binary = getattr(env.stdout, "buffer", None)
    if output is Format.JSONL and template is None and not options.quiet and binary is not None:
        options.lines = binary.write  # plain items go out as lines from a template (the JSON of their record)
    errors = env.error_console()

    def notice(message: str) -> None:
        errors.print(f"dcpctl: {message}", style="yellow", markup=False, highlight=False)

    with contextlib.ExitStack() as stack:
        tap = None
        if write is not None:
            try:
                writer = PcapWriter(stack.enter_context(write.open("wb")))
            except OSError as exc:
                raise CommandError(f"{write}: {exc.strerror}", ExitCode.INPUT) from None
            tap, conversations = _pcap_tap(writer)

            def forget_if_empty(failed: type[BaseException] | None, *_: object) -> None:
                if failed is not None and not conversations:  # no connection to record: no capture to leave
                    write.unlink(missing_ok=True)

            stack.push(forget_if_empty)
        try:
            streamer = Streamer(host, options, notice=notice, tap=tap, before_save=env.stdout.flush,
                                before_wait=env.stdout.flush)
        except StateError as exc:
            raise CommandError(str(exc), ExitCode.INPUT) from None

        def stop() -> None:
            if not streamer.requested:  # still connecting: nothing to close or save, so no wait for a timeout
                raise KeyboardInterrupt
            streamer.stop()

        with client_errors(), first_ctrl_c_stops(stop):
            try:
                messages = streamer.messages()
                if summary and fmt is None and template is None:
                    for _ in messages:
                        pass
                elif template is not None:
                    _print_template(messages, template, env.stdout)
                else:
                    emit(messages, output, env, base64=base64)  # flushed whenever the stream waits
            except KeyboardInterrupt:
                notice("interrupted again: stopping at once and saving the state" if streamer.interrupted
                       else "interrupted while connecting")
            finally:
                if streamer.interrupted:
                    notice("interrupted: closing the streams and saving the state")
                env.stdout.flush()
                streamer.close()
        if summary:
            _print_summary(streamer, env)


def _hex_list(text: str, option: str) -> list[int]:
    try:
        return [int(part.strip().removeprefix("0x"), 16) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CommandError(f"{option}: hex ids, comma separated, not {text!r}", ExitCode.USAGE) from None


class _Absent:
    """A field this message does not have: empty, whatever the format spec or index asked of it."""

    def __getitem__(self, _key: object) -> _Absent:
        return self

    def __getattr__(self, _name: str) -> _Absent:
        return self


_ABSENT = _Absent()


class _Template(string.Formatter):
    """-f: str.format over the record's field names; a field the message lacks prints as nothing (a snapshot
    marker has no by_seqno, even for '{by_seqno:d}')."""

    def get_value(self, key: int | str, args: Any, kwargs: Any) -> Any:
        return kwargs.get(key, _ABSENT) if isinstance(key, str) else super().get_value(key, args, kwargs)

    def format_field(self, value: Any, format_spec: str) -> str:
        return "" if value is _ABSENT else super().format_field(value, format_spec)

    def check(self, template: str) -> None:
        """A template whose braces do not parse, or that names fields by position, is refused at once."""
        try:
            names = [name for _, name, _, _ in self.parse(template) if name is not None]
        except ValueError as exc:
            raise CommandError(f"-f: bad template: {exc}", ExitCode.USAGE) from None
        for name in names:
            if name == "" or name[0].isdigit():
                raise CommandError(f"-f: bad template: {{{name}}}: name a field, as in {{by_seqno}}", ExitCode.USAGE)


def _print_template(messages: Iterator[Message], template: str, out: Any) -> None:
    formatter = _Template()
    for msg in messages:
        try:
            line = formatter.vformat(template, (), msg.record())
        except (ValueError, IndexError, AttributeError, KeyError, TypeError) as exc:
            raise CommandError(f"-f: bad template for {msg.opcode_name}: {exc}", ExitCode.USAGE) from None
        out.write(line + "\n")  # flushed whenever the stream waits for the network, as the other formats


def _print_summary(streamer: Streamer, env: Any) -> None:
    from rich.table import Table  # noqa: PLC0415 - only when asked for

    rows = streamer.summary()
    table = Table("vbucket", "items", "seqno range", "items/s", title="dcpctl stream summary")
    for row in rows:
        seqnos = "" if row["first_seqno"] is None else f"{row['first_seqno']}-{row['last_seqno']}"
        table.add_row(str(row["vbucket"]), str(row["items"]), seqnos, f"{row['rate']:,.1f}")
    env.error_console().print(table)


def _pcap_tap(writer: PcapWriter) -> tuple[Any, dict[int, TcpConversation]]:
    """The tap that records each connection, and the conversations recorded so far."""
    conversations: dict[int, TcpConversation] = {}

    def tap(conn: Connection, from_client: bool, data: bytes) -> None:
        conversation = conversations.get(id(conn))
        if conversation is None:
            # by address: a host name (localhost) is what the client resolved, not what a packet carries
            conversation = TcpConversation(writer, conn.local, conn.peer, ts=time.time())
            conversation.handshake()
            conversations[id(conn)] = conversation
        # SASL values the client sent are masked: with PLAIN, one of them is the password
        conversation.send(from_client, redacted(data) if from_client else data, ts=time.time())

    return tap, conversations
